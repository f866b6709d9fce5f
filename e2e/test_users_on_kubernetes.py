"""EpochlogUsers and ServiceAccount tokens on a real Kubernetes: the chart installed with
`users.enabled` and `users.serviceAccountTokens`, its base policy granting `User:admin`
(this test's reader) everything and other users nothing, so that the users' rules decide.

Users are made, changed and deleted with kubectl; their clients are epochlog's client in
pods of the cluster (`user_pod_client.py`), reaching the brokers through the client
Service as applications do. The pods say, per request, the wall-clock time and what the
broker answered; the node's clock is this host's, so the time from a change made here
to the first refusal a pod saw is what a user waits for it.

- alice (tls): her Secret appears; a pod that mounts it produces to and reads `orders`
  and produces to `audit`. Narrowed (her `audit` rule removed): refused `audit`, still
  taking `orders`; deleted: refused `orders`. Each within the stated bound
  (docs/operating/users.md): the operator's round, the kubelet's update of the policy
  Secret the brokers mount, the brokers' reload interval.
- reader (serviceaccount): a pod of the ServiceAccount `reader` presents its projected
  token (audience `epochlog`): taken for `ledger`, refused `audit`
  (TOPIC_AUTHORIZATION_FAILED). A token for another audience is refused
  (AUTHENTICATION_FAILED); so is a token from `kubectl create token` with the shortest
  life the API server grants (ten minutes) once it has expired, after it was taken.
- `kubectl get epochlogusers` shows NAME, AUTHENTICATION and READY.

It runs on the test cluster in `make e2e` (or any cluster `EPOCHLOG_E2E_KUBECONFIG`
names): the embedded target runs no client pods (tests/e2e/test_users.py is this on the
embedded cluster).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest

from e2e.kube_target import PYTHON, KubeTarget
from e2e.targets import WAIT_S, ClusterTarget, TargetError, wait_for
from epochlog.objects import to_body
from epochlog.protocol.token_review import token_expiry
from epochlog.security.tls import DEFAULT_RELOAD_INTERVAL_S
from epochlog.users import TOKEN_AUDIENCE
from epochlog_tools.devcluster.partitions import partition_manifest

CLIENT: Final = Path(__file__).with_name("user_pod_client.py")
ROUND_S: Final = 0.5
"""user_pod_client.py's pause between rounds."""
OPERATOR_ALLOWANCE_S: Final = 10.0
"""The operator's part: the watch event and one round (milliseconds when idle)."""
KUBELET_SYNC_S: Final = 60.0 * 1.5
"""The kubelet writes a changed Secret into a pod's volume at the pod's next sync: every
`syncFrequency` (one minute by default, as on the test cluster) plus up to half of it
again (the kubelet's jitter). With the default change detection (Watch) its copy of
the Secret is current."""
BOUND_S: Final = OPERATOR_ALLOWANCE_S + KUBELET_SYNC_S + DEFAULT_RELOAD_INTERVAL_S + ROUND_S
MIN_TOKEN_S: Final = 600
"""The shortest token the API server issues (TokenRequest's expirationSeconds)."""
ADMIN: Final = {
    "principal": "User:admin",
    "topics": ["*"],
    "groups": ["*"],
    "operations": ["all"],
}
VALUES: Final = {
    "users": {"enabled": True, "serviceAccountTokens": True},
    "broker": {"accessPolicy": {"tokens": [], "scram": [], "acls": [ADMIN]}},
}
TOPICS: Final = ("orders", "audit", "ledger")

Line = dict[str, Any]


@pytest.fixture
def real_cluster(target: ClusterTarget) -> KubeTarget:
    if not isinstance(target, KubeTarget):
        pytest.skip("needs a real cluster (EPOCHLOG_E2E_KUBECONFIG; make e2e starts one)")
    return target


def rule(topic: str, *operations: str) -> dict[str, Any]:
    return {"resource": {"type": "topic", "name": topic}, "operations": list(operations)}


def user(name: str, kind: str, *acls: dict[str, Any], **auth: Any) -> dict[str, Any]:
    return {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "EpochlogUser",
        "metadata": {"name": name},
        "spec": {
            "authentication": {"type": kind, **auth},
            "authorization": {"acls": list(acls)},
        },
    }


async def kubectl_apply(target: KubeTarget, directory: Path, obj: dict[str, Any]) -> None:
    path = directory / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    await target.kubectl("apply", "-f", str(path))


async def ready(target: KubeTarget, name: str) -> dict[str, Any]:
    """The EpochlogUser once Ready for its current generation."""
    found: list[dict[str, Any]] = []

    async def check() -> bool:
        got = json.loads(await target.kubectl("get", "epochlogusers", name, "-o", "json"))
        status = got.get("status") or {}
        conditions = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        seen = status.get("observedGeneration", 0) >= got["metadata"]["generation"]
        if seen and conditions and conditions[0]["status"] == "True":
            found[:] = [got]
            return True
        return False

    await wait_for(check, f"EpochlogUser {name} Ready", target.settings.timeout_s)
    return found[0]


async def lines(target: KubeTarget, pod: str) -> list[Line]:
    try:
        text = await target.kubectl("logs", pod)
    except TargetError:
        return []  # not started yet
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


async def first(
    target: KubeTarget,
    pod: str,
    what: str,
    match: Callable[[Line], bool],
    timeout_s: float | None = None,
) -> Line:
    """The first line of the pod's output that `match`es, once there is one."""
    found: list[Line] = []

    async def seen() -> bool:
        found[:] = [x for x in await lines(target, pod) if match(x)][:1]
        return bool(found)

    await wait_for(seen, f"{pod}: {what}", timeout_s or target.settings.timeout_s)
    return found[0]


def answered(who: str, partition: str, code: str, after: float = 0.0) -> Callable[[Line], bool]:
    return lambda x: (
        x.get("as") == who
        and x.get("partition") == partition
        and x.get("code") == code
        and x["t"] > after
    )


async def start_client(target: KubeTarget, pod: str, partitions: list[str], **kw: Any) -> None:
    command = [PYTHON, "/opt/client/user_pod_client.py", target.bootstrap_url()]
    await target.start_pod(pod, [*command, ",".join(partitions)], files="user-client", **kw)


async def stop_client(target: KubeTarget, pod: str) -> None:
    await target.exec(pod, ["touch", "/tmp/stop"])
    code, log = await target.pod_result(pod)
    assert code == 0, log[-4000:]


async def refused_within_bound(
    target: KubeTarget, pod: str, partition: str, started: float, what: str
) -> float:
    """Seconds from `started` (wall clock, before the change) to the pod's first request
    to `partition` refused as not authorized; asserted within the stated bound."""
    line = await first(
        target, pod, what, answered("self", partition, "TOPIC_AUTHORIZATION_FAILED", started)
    )
    took = float(line["t"]) - started
    print(f"{what}: refused after {took:.1f} s (bound {BOUND_S:.1f} s)")
    assert took <= BOUND_S, f"{what}: refused after {took:.1f} s, beyond {BOUND_S:.1f} s"
    return took


async def policy_without(target: KubeTarget, text: str, started: float, what: str) -> None:
    """Until the policy Secret the operator writes no longer holds `text`: the operator's
    part of the bound, printed."""
    name = f"{target.release}-broker-access-policy"

    async def written() -> bool:
        data = await target.secret(name)
        return data is not None and text not in data["policy.json"].decode()

    await wait_for(written, f"the policy written ({what})", OPERATOR_ALLOWANCE_S)
    print(f"policy written ({what}): {time.time() - started:.2f} s")


async def test_users_and_service_account_tokens_on_kubernetes(
    real_cluster: KubeTarget, tmp_path: Path
) -> None:
    target = real_cluster
    await target.install(VALUES)
    ns = target.namespace
    for topic in TOPICS:
        await target.apply(to_body(partition_manifest(topic, 0, namespace=ns)))
    for topic in TOPICS:
        await target.wait_leader(f"{topic}-0")
    await target.config_map("user-client", {"user_pod_client.py": CLIENT.read_bytes()})

    # The users, made with kubectl.
    await target.kubectl("create", "serviceaccount", "reader")
    alice = user("alice", "tls", rule("orders", "read", "write"), rule("audit", "all"))
    reader = user(
        "reader",
        "serviceaccount",
        rule("ledger", "read", "write"),
        serviceAccount={"name": "reader"},
    )
    await kubectl_apply(target, tmp_path, alice)
    await kubectl_apply(target, tmp_path, reader)
    got = await ready(target, "alice")
    assert got["status"]["username"] == "CN=alice"
    assert got["status"]["secret"] == "alice"
    secret = await target.secret("alice")
    assert secret is not None
    assert set(secret) == {"ca.crt", "user.crt", "user.key"}
    got = await ready(target, "reader")
    assert got["status"]["username"] == f"system:serviceaccount:{ns}:reader"
    assert got["status"].get("secret") is None

    listed = await target.kubectl("get", "epochlogusers")
    assert re.match(r"NAME\s+AUTHENTICATION\s+READY\s", listed), listed
    assert re.search(r"^alice\s+tls\s+True\s", listed, re.M), listed
    assert re.search(r"^reader\s+serviceaccount\s+True\s", listed, re.M), listed

    # The reader's other tokens: another audience, and the shortest-lived for epochlog.
    short = (
        await target.kubectl(
            "create",
            "token",
            "reader",
            "--audience",
            TOKEN_AUDIENCE,
            "--duration",
            f"{MIN_TOKEN_S}s",
        )
    ).strip()
    expiry = token_expiry(short)
    assert expiry is not None
    other = (
        await target.kubectl(
            "create", "token", "reader", "--audience", "another", "--duration", f"{MIN_TOKEN_S}s"
        )
    ).strip()
    cluster_ca = await target.secret(f"{target.release}-cluster-ca-cert")
    assert cluster_ca is not None

    # Both clients run from here on; the reader's short-lived token is used while it lasts.
    await start_client(target, "alice", ["orders-0", "audit-0"], secret="alice")
    tokens = json.dumps({"another-audience": other, "short-lived": short})
    await start_client(
        target,
        "reader",
        ["ledger-0", "audit-0"],
        service_account="reader",
        token_audience=TOKEN_AUDIENCE,
        env={"EPOCHLOG_CA_PEM": cluster_ca["ca.crt"].decode(), "EPOCHLOG_TOKENS": tokens},
    )

    # alice produces and consumes (once the brokers have the policy with her in it).
    took_orders = await first(target, "alice", "orders taken", answered("self", "orders-0", ""))
    await first(target, "alice", "audit taken", answered("self", "audit-0", ""))
    read = await first(target, "alice", "orders read back", lambda x: "read" in x)
    assert took_orders["value"] in read["read"], read

    # Narrowed: audit refused, orders still taken.
    started = time.time()
    await target.kubectl(
        "patch",
        "epochlogusers",
        "alice",
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"authorization": {"acls": [rule("orders", "read", "write")]}}}),
    )
    await policy_without(target, '"audit"', started, "alice narrowed")
    narrowed = await refused_within_bound(target, "alice", "audit-0", started, "alice narrowed")
    await first(
        target, "alice", "orders still taken", answered("self", "orders-0", "", started + narrowed)
    )
    await ready(target, "alice")

    # Deleted: orders refused; her Secret goes with her.
    started = time.time()
    await target.kubectl("delete", "epochlogusers", "alice")
    await policy_without(target, "User:alice", started, "alice deleted")
    await refused_within_bound(target, "alice", "orders-0", started, "alice deleted")

    async def secret_gone() -> bool:
        return await target.secret("alice") is None

    await wait_for(secret_gone, "alice's Secret deleted", target.settings.timeout_s)
    await stop_client(target, "alice")

    # The reader's pod: its projected token is taken for ledger, refused audit.
    taken = await first(target, "reader", "ledger taken", answered("self", "ledger-0", ""))
    await first(
        target,
        "reader",
        "audit refused",
        answered("self", "audit-0", "TOPIC_AUTHORIZATION_FAILED", taken["t"]),
    )
    assert not [
        x
        for x in await lines(target, "reader")
        if x.get("partition") == "audit-0" and not x["code"]
    ], "the reader wrote to audit"
    # Another audience: refused as no one.
    await first(
        target,
        "reader",
        "another audience refused",
        answered("another-audience", "ledger-0", "AUTHENTICATION_FAILED", taken["t"]),
    )
    assert not [
        x
        for x in await lines(target, "reader")
        if x.get("as") == "another-audience" and not x["code"]
    ], "a token for another audience was taken"
    # The short-lived token: taken while it lasts, refused as no one once expired.
    used = await first(
        target, "reader", "the short-lived token taken", answered("short-lived", "ledger-0", "")
    )
    assert used["t"] < expiry
    print(f"short-lived token: expires {expiry - time.time():.0f} s from now")
    expired = await first(
        target,
        "reader",
        "the short-lived token refused",
        answered("short-lived", "ledger-0", "AUTHENTICATION_FAILED", used["t"]),
        timeout_s=max(0.0, expiry - time.time()) + WAIT_S,
    )
    assert expired["t"] >= expiry, (expired, expiry)
    after = [x for x in await lines(target, "reader") if x.get("as") == "short-lived"]
    assert not [x for x in after if x["t"] >= expiry and not x["code"]], "taken after expiry"
    await stop_client(target, "reader")
