"""The chart's RBAC is exactly what the operator calls, measured on the API emulator.

A real operator process runs with the arguments the chart gives it (namespaced and
cluster-wide installs, TLS with --manage-certificates) against the API emulator,
where the chart's peering object was made as `helm install` makes it. Every request
it sends (kopf's and its own: told apart from the test's by User-Agent) is recorded
as the authorizer sees it. Scenario: start, brokers heartbeat with the certificates
of their Secrets, a Partition applied, a leader elected, a broker's certificate
renewed, the Partition deleted, and with users on an EpochlogUser created (its Secret
and the brokers' policy written), changed to another type (its Secret replaced),
deleted (its Secret deleted), and a broker's question about a ServiceAccount token
answered (a TokenReview), the operator stopped. The test fails when the
ServiceAccount's roles do not allow one recorded request, or grant a (verb,
resource, name) that no request used.
"""

from __future__ import annotations

import base64
import copy
import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kmock import Request

from epochlog.security.pki import Issued, issue
from epochlog.security.principal import broker_uri
from epochlog.security.tls import TlsFiles, client_context
from epochlog_tools.harness.scripted_brokers import ScriptedBrokers
from tests import waiting
from tests.chart.chart import RELEASE, find, flags, objects_of, operator_container
from tests.chart.rbac import Access, Role, access_of, grants, roles_bound_to
from tests.operator_e2e.conftest import HEARTBEAT_MS, NAMESPACE, Env

SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
OPERATOR_AGENTS = ("kopf/", "epochlog-operator")
# Set by the test: the operator's ports, and timings short enough for a test.
LOCAL_FLAGS = {
    "--listen-port",
    "--probe-port",
    "--heartbeat-interval-ms",
    "--broker-session-timeout-ms",
}
LOOPBACK_HOSTS = "127.0.0.1,localhost"


def operator_args(objects: list[dict[str, Any]]) -> list[str]:
    """The chart's operator arguments, with loopback host names in the certificates
    (the scripted brokers and the operator meet on 127.0.0.1)."""
    args = []
    for arg in operator_container(objects)["args"]:
        name = arg.partition("=")[0]
        if name in LOCAL_FLAGS or name == "--certificate-check-interval-s":
            continue
        if name in ("--broker-hosts", "--operator-hosts"):
            arg = f"{name}={LOOPBACK_HOSTS}"
        args.append(arg)
    return [*args, "--certificate-check-interval-s", "0.2"]


class Recorder:
    """Records the operator's requests; the first status write finds the Partition just
    changed by another writer (a label set), so that the write meets a real 409 Conflict
    and the operator reads the Partition again, as it does when someone edits it."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.seen: list[Access] = []
        self.raced = False

    def __call__(self, request: Request) -> None:
        agent = next((v for k, v in request.headers.items() if k.lower() == "user-agent"), "")
        if not agent.startswith(OPERATOR_AGENTS):
            return
        access = access_of(str(request.method.value), request.url.path, request.url.query_string)
        if access is None:
            return
        self.seen.append(access)
        if access.resource == "partitions/status" and not self.raced:
            self.raced = True
            self._label(access)

    def _label(self, access: Access) -> None:
        api = self.env.server.handler
        rt = api.type_of("epochlog.dev", "v1alpha1", "partitions")
        assert access.name is not None
        old = api.store.get(rt, access.namespace, access.name)
        assert old is not None
        new = copy.deepcopy(old)
        new["metadata"].setdefault("labels", {})["edited-by"] = "someone-else"
        api.update_object(rt, old, new, None)


async def secret(env: Env, name: str) -> dict[str, bytes]:
    obj = await env.api.ok("GET", f"{SECRETS}/{name}")
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def _write(directory: Path, held: dict[str, bytes]) -> TlsFiles:
    directory.mkdir(parents=True)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (directory / name).write_bytes(held[name])
    return TlsFiles(*(str(directory / n) for n in ("ca.crt", "tls.crt", "tls.key")))


USERS = f"/apis/epochlog.dev/v1alpha1/namespaces/{NAMESPACE}/epochlogusers"


async def users_scenario(env: Env, op: Any, broker: TlsFiles) -> None:
    """An EpochlogUser's life, and a ServiceAccount token reviewed for a broker."""
    body = {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "EpochlogUser",
        "metadata": {"name": "alice"},
        "spec": {"authentication": {"type": "tls"}},
    }
    await env.api.ok("POST", USERS, body)

    async def made(keys: set[str]) -> bool:
        status, got = await env.api.call("GET", f"{SECRETS}/alice")
        return status == 200 and set(got.get("data") or {}) == keys

    tls_keys = {"ca.crt", "user.crt", "user.key"}
    await waiting.until(lambda: made(tls_keys), "alice's Secret", 20)
    async with env.api.session.patch(
        f"{USERS}/alice",
        json={"spec": {"authentication": {"type": "token"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as rsp:
        assert rsp.status == 200, await rsp.text()
    await waiting.until(lambda: made({"token"}), "alice's Secret replaced", 20)
    await env.api.ok("DELETE", f"{USERS}/alice")

    async def gone() -> bool:
        status, _ = await env.api.call("GET", f"{SECRETS}/alice")
        return status == 404

    await waiting.until(gone, "alice's Secret deleted", 20)
    accounts = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
    await env.api.call("POST", accounts, {"metadata": {"name": "reader"}})
    issued = await env.api.ok(
        "POST", f"{accounts}/reader/token", {"spec": {"audiences": ["epochlog"]}}
    )
    connector = aiohttp.TCPConnector(ssl=client_context(broker))
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.post(op.url + "/v1/token-reviews", json={"token": issued["status"]["token"]}) as rsp,
    ):
        assert rsp.status == 200, await rsp.text()
        assert (await rsp.json())["authenticated"] is True


async def scenario(env: Env, objects: list[dict[str, Any]], tmp_path: Path) -> None:
    """What a release lives through, with the chart's peering object made first."""
    for peering in find(objects, "KopfPeering") + find(objects, "ClusterKopfPeering"):
        body = {k: v for k, v in peering.items() if k != "status"}
        plural = "kopfpeerings" if peering["kind"] == "KopfPeering" else "clusterkopfpeerings"
        scope = f"namespaces/{NAMESPACE}/" if peering["kind"] == "KopfPeering" else ""
        await env.api.ok("POST", f"/apis/kopf.dev/v1/{scope}{plural}", body)
    args = flags(operator_container(objects)["args"])
    ids = range(int(str(args["--broker-ids"]).split("-")[1]) + 1)
    op = await env.operator(*operator_args(objects), own_certificates=True)

    files = {
        b: _write(tmp_path / f"broker-{b}", await secret(env, f"{RELEASE}-broker-{b}")) for b in ids
    }
    brokers = ScriptedBrokers(
        lambda: [op.heartbeat_url], list(ids), HEARTBEAT_MS, tls=lambda b: client_context(files[b])
    )
    async with brokers:
        await brokers.heard(timeout_s=None)
        await env.api.create("orders-0")
        await env.watch.wait_for(
            "orders-0",
            lambda s: s.leader is not None and len(s.isr) == 3,
            20,
            "a leader, 3 in sync",
        )
        await env.api.wait_events("orders-0", {"LeaderElected"})

        # A certificate a day from its end: the operator replaces it in its Secret.
        name = f"{RELEASE}-broker-0"
        ca_secret = await secret(env, f"{RELEASE}-cluster-ca")
        ca = Issued.from_pem(ca_secret["ca.crt"], ca_secret["ca.key"])
        short = issue(ca, name, uris=[broker_uri(0)], hosts=["127.0.0.1"], days=1)
        obj = await env.api.ok("GET", f"{SECRETS}/{name}")
        obj["data"]["tls.crt"] = base64.b64encode(short.cert_pem()).decode()
        obj["data"]["tls.key"] = base64.b64encode(short.key_pem()).decode()
        await env.api.ok("PUT", f"{SECRETS}/{name}", obj)

        async def renewed() -> bool:
            held = await secret(env, name)
            cert = Issued.from_pem(held["tls.crt"], held["tls.key"]).cert
            left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
            return cert.serial_number != short.cert.serial_number and left.days > 300

        await waiting.until(renewed, "broker 0's certificate renewed", 20)

        await env.api.delete("orders-0")

        async def forgotten() -> bool:
            return await op.metric(env.session, "epochlog_operator_partitions") == 0

        await waiting.until(forgotten, "the operator forgot the deleted Partition", 20)
        if "--manage-users" in args:
            await users_scenario(env, op, files[0])
    await op.stop()
    assert op.process.returncode == 0, op.log.read_text()[-5000:]


def compare(roles: list[Role], seen: list[Access]) -> tuple[list[str], list[str]]:
    """(requests no role allows, grants no request used).

    A grant is used when a request in the role's scope has its verb and resource; a
    grant limited to names also needs a request for each name (by any verb: the
    operator reads every Secret it keeps, and replaces only those that are due).
    """
    denied = sorted({str(a) for a in seen if not any(r.allows(a) for r in roles)})
    unused = set()
    for role in roles:
        scoped = [a for a in seen if role.namespace is None or a.namespace == role.namespace]
        for g in grants(role):
            verb_used = any(
                (g.verb, g.group, g.resource) == (a.verb, a.group, a.resource) for a in scoped
            )
            name_used = g.name is None or any(
                (g.group, g.resource, g.name) == (a.group, a.resource, a.name) for a in scoped
            )
            if not (verb_used and name_used):
                unused.add(f"{role.kind} {role.name}: {g}")
    return denied, sorted(unused)


@pytest.mark.parametrize(
    ("cluster_wide", "users"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["namespaced", "cluster-wide", "namespaced-users", "cluster-wide-users"],
)
async def test_the_operator_role_grants_exactly_what_the_operator_calls(
    env: Env, tmp_path: Path, cluster_wide: bool, users: bool
) -> None:
    values: dict[str, Any] = {"clusterWide": cluster_wide}
    if users:
        values["users"] = {"enabled": True, "serviceAccountTokens": True}
    objects = objects_of(values, namespace=NAMESPACE)
    roles = roles_bound_to(objects, f"{RELEASE}-operator", NAMESPACE)
    kinds = [r.kind for r in roles]
    if cluster_wide:
        assert kinds == (["ClusterRole"] if users else ["Role", "ClusterRole"])
    else:
        assert kinds == (["Role", "ClusterRole"] if users else ["Role"])
    recorder = Recorder(env)
    env.server.handler.listen(recorder)

    await scenario(env, objects, tmp_path)
    seen = recorder.seen

    assert seen, "no request of the operator was recorded"
    denied, unused = compare(roles, seen)
    measured = "\n".join(sorted({str(a) for a in seen}))
    assert not denied, f"the chart's roles do not allow:\n{denied}\nmeasured:\n{measured}"
    assert not unused, (
        f"the chart's roles grant what was not used:\n{unused}\nmeasured:\n{measured}"
    )
    if not cluster_wide:
        # A namespaced install needs nothing outside its namespace, but for creating
        # TokenReviews (cluster-scoped) with users.serviceAccountTokens.
        outside = [a for a in seen if a.namespace != NAMESPACE]
        assert all(a.resource == "tokenreviews" for a in outside), measured
