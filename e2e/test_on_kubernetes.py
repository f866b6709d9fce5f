"""What only a real Kubernetes can show: NetworkPolicy enforced, RBAC as the API server
judges it, `kubectl describe`, a drain held by the PodDisruptionBudget, what
`helm uninstall` leaves, a `helm upgrade` to five brokers and back with Partitions
moved, a broker on a new, empty volume, the Spark pipeline image. They run on the test
cluster in `make e2e` (cluster/up.sh), or on any cluster `EPOCHLOG_E2E_KUBECONFIG`
names; the embedded target has no kubelet, no network policy and no authorizer, so they
do not apply there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from e2e.kube_target import PYTHON, KubeTarget
from e2e.targets import ClusterTarget, TargetError, registered_brokers, wait_for
from epochlog.objects import to_body
from epochlog.resources import ConditionStatus, ConditionType
from epochlog_spark.orders import order_event
from epochlog_tools.devcluster.chart_cluster import render
from epochlog_tools.devcluster.local_workload import SteadyProducer, WorkloadAck, read_back, verify
from epochlog_tools.devcluster.partitions import partition_manifest

pytestmark = pytest.mark.usefixtures("real_cluster")

CLIENT_LABEL = {"epochlog.dev/client": "true"}
# Up to `tries` connections a second apart; exit 0 at the first that is accepted.
CONNECT = (
    "import socket, sys, time\n"
    "for attempt in range(int(sys.argv[3])):\n"
    "    try:\n"
    "        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
    "    except OSError as exc:\n"
    "        print(attempt, type(exc).__name__, exc, flush=True)\n"
    "        time.sleep(1)\n"
    "    else:\n"
    "        print(attempt, 'connected')\n"
    "        sys.exit(0)\n"
    "sys.exit(1)\n"
)
ALLOWED_TRIES = 300
"""A pod's address reaches the policy's sets some time after the pod starts: a pod that
is let in may be refused at first (a hang detector, not a measurement)."""
DENIED_TRIES = 10
"""Connections that must all be refused, made after an allowed pod got through."""


@pytest.fixture
def real_cluster(target: ClusterTarget) -> KubeTarget:
    if not isinstance(target, KubeTarget):
        pytest.skip("needs a real cluster (EPOCHLOG_E2E_KUBECONFIG; make e2e starts one)")
    return target


async def _connects(
    target: KubeTarget, pod: str, host: str, port: int, tries: int, **kw: Any
) -> bool:
    python = "/opt/epochlog/bin/python"
    command = [python, "-c", CONNECT, host, str(port), str(tries)]
    code, out = await target.run_pod(pod, command, **kw)
    assert code in (0, 1), out
    return code == 0


async def test_network_policy_lets_only_labelled_clients_reach_the_brokers(
    real_cluster: KubeTarget,
) -> None:
    target = real_cluster
    await target.install(
        {"networkPolicy": {"clients": {"podSelector": {"matchLabels": CLIENT_LABEL}}}}
    )
    await target.wait_ready()
    ns = target.namespace
    brokers = f"{target.release}-client.{ns}.svc"
    heartbeats = f"{target.release}-operator-heartbeat.{ns}.svc"
    assert await _connects(target, "labelled", brokers, 8080, ALLOWED_TRIES, labels=CLIENT_LABEL)
    assert not await _connects(target, "unlabelled", brokers, 8080, DENIED_TRIES)
    # Only brokers send heartbeats; a client with the label is no broker.
    assert not await _connects(
        target, "labelled-heartbeat", heartbeats, 8081, DENIED_TRIES, labels=CLIENT_LABEL
    )
    assert not await _connects(target, "unlabelled-heartbeat", heartbeats, 8081, DENIED_TRIES)


async def test_kubectl_describe_shows_leader_epochs_and_isr(real_cluster: KubeTarget) -> None:
    target = real_cluster
    await target.install()
    await target.apply(to_body(partition_manifest("described", 0, namespace=target.namespace)))
    await target.wait_leader("described-0")

    async def full() -> bool:
        got = await target.partition_status("described-0")
        return got is not None and len(got.isr) == 3

    await wait_for(full, "described-0's ISR holding every replica")
    status = await target.partition_status("described-0")
    assert status is not None
    text = await target.kubectl("describe", "partition", "described-0")
    assert re.search(rf"^\s+Leader:\s+{status.leader}$", text, re.M), text
    assert re.search(rf"^\s+Leader Epoch:\s+{status.leader_epoch}$", text, re.M), text
    assert re.search(rf"^\s+Partition Epoch:\s+{status.partition_epoch}$", text, re.M), text
    isr = re.search(r"^\s+Isr:\n((?:\s+\d+\n)+)", text, re.M)
    assert isr is not None, text
    assert sorted(int(x) for x in isr.group(1).split()) == sorted(status.isr)
    listed = await target.kubectl("get", "partitions")
    assert re.search(r"^described-0\s+described\s+0\s", listed, re.M), listed


def _rendered_rules(target: KubeTarget) -> list[dict[str, Any]]:
    objs = render(target.chart, target.values, release=target.release, namespace=target.namespace)
    return [rule for o in objs if o.get("kind") in ("Role", "ClusterRole") for rule in o["rules"]]


async def test_the_operator_may_do_what_it_needs_and_nothing_more(
    real_cluster: KubeTarget,
) -> None:
    target = real_cluster
    await target.install()
    account = f"system:serviceaccount:{target.namespace}:{target.release}-operator"
    api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(target.settings.kubeconfig)
    )
    api.set_default_header("Impersonate-User", account)
    review = k8s.V1SelfSubjectRulesReview(
        spec=k8s.V1SelfSubjectRulesReviewSpec(namespace=target.namespace)
    )
    answer = await asyncio.to_thread(
        k8s.AuthorizationV1Api(api).create_self_subject_rules_review, review
    )
    granted = {
        (group, resource, verb, name)
        for rule in answer.status.resource_rules  # type: ignore[union-attr]
        for group in rule.api_groups or [""]
        for resource in rule.resources or []
        for verb in rule.verbs
        for name in rule.resource_names or [None]
    }
    expected = {
        (group, resource, verb, name)
        for rule in _rendered_rules(target)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [None]
    }
    # What every authenticated user may do (system:basic-user): ask about itself.
    own = {
        ("authorization.k8s.io", r, "create", None)
        for r in ("selfsubjectaccessreviews", "selfsubjectrulesreviews")
    } | {("authentication.k8s.io", "selfsubjectreviews", "create", None)}
    assert granted - own == expected, (sorted(granted - own - expected), sorted(expected - granted))
    # And the API server says no to what the operator never does.
    authz = k8s.AuthorizationV1Api(api)
    for verb, group, resource in [
        ("delete", "epochlog.dev", "partitions"),
        ("list", "", "secrets"),
        ("create", "", "pods"),
        ("get", "", "configmaps"),
    ]:
        check = k8s.V1SelfSubjectAccessReview(
            spec=k8s.V1SelfSubjectAccessReviewSpec(
                resource_attributes=k8s.V1ResourceAttributes(
                    namespace=target.namespace, verb=verb, group=group, resource=resource
                )
            )
        )
        verdict = await asyncio.to_thread(authz.create_self_subject_access_review, check)
        assert not verdict.status.allowed, (verb, group, resource)  # type: ignore[union-attr]


async def test_a_drain_of_the_node_is_held_by_the_disruption_budget_and_loses_nothing(
    real_cluster: KubeTarget,
) -> None:
    target = real_cluster
    await target.install()
    names = []
    for i in range(2):
        await target.apply(to_body(partition_manifest("drain", i, namespace=target.namespace)))
        names.append(f"drain-{i}")
    for name in names:
        await target.wait_leader(name)
    node = (await target.kubectl("get", "nodes", "-o", "name")).split()[0]
    brokers = f"app.kubernetes.io/instance={target.release},app.kubernetes.io/component=broker"
    client = await target.client()
    producer = await SteadyProducer(client, names, rate=20).start()
    try:
        await producer.wait_each(names)
        with pytest.raises(Exception, match="disruption budget") as held:
            # One broker may go (maxUnavailable 1); its successor cannot be scheduled on
            # the cordoned node, so every other eviction is refused until it is back.
            await target.kubectl(
                "drain", node, "--pod-selector", brokers, "--ignore-daemonsets",
                "--delete-emptydir-data", "--timeout=40s",
            )  # fmt: skip
        ready = await target.kubectl("get", "pods", "-l", brokers, "--no-headers")
        assert len(re.findall(r"\b1/1\s+Running\b", ready)) == 2, (ready, held.value)
    finally:
        await target.kubectl("uncordon", node)
    await target.wait_ready()
    await producer.wait_each(names)
    await producer.stop()
    logs = {name: await read_back(client, name) for name in names}
    await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0


async def test_uninstall_leaves_the_volumes_and_the_crd(real_cluster: KubeTarget) -> None:
    target = real_cluster
    await target.install()
    await target.wait_ready()
    await target.uninstall()
    claims = await target.kubectl("get", "pvc", "-o", "name")
    assert sorted(claims.split()) == [
        f"persistentvolumeclaim/data-{target.release}-broker-{i}" for i in range(3)
    ]
    crds = await target.kubectl("get", "crd", "-o", "name")
    assert "customresourcedefinition.apiextensions.k8s.io/partitions.epochlog.dev" in crds
    assert (await target.kubectl("get", "pods", "-o", "name")).split() == []


async def _moved(target: KubeTarget, name: str, replicas: tuple[int, ...]) -> None:
    """Until `name` is on exactly `replicas` (in that order: the first is the preferred
    leader), every one in sync, and no reassignment goes on."""

    async def done() -> bool:
        s = await target.partition_status(name)
        if s is None or s.replicas != replicas or set(s.isr) != set(replicas):
            return False
        reassigning = s.condition(ConditionType.REASSIGNING)
        return reassigning is not None and reassigning.status is ConditionStatus.FALSE

    await wait_for(done, f"{name} on brokers {replicas}, all in sync")


async def _all_in_sync(target: KubeTarget, name: str) -> None:
    async def full() -> bool:
        s = await target.partition_status(name)
        return s is not None and len(s.replicas) == 3 and set(s.isr) == set(s.replicas)

    await wait_for(full, f"every replica of {name} in its ISR")


async def test_helm_upgrade_to_five_brokers_and_back_with_partitions_moved_loses_nothing(
    real_cluster: KubeTarget,
) -> None:
    """`helm upgrade --set broker.replicas=5`, the Partitions moved onto the new brokers
    with `kubectl patch`, moved back, and the StatefulSet scaled down to 3 again, all
    under acks=all load."""
    target = real_cluster
    await target.install()
    names = []
    for i in range(2):
        await target.apply(to_body(partition_manifest("five", i, namespace=target.namespace)))
        names.append(f"five-{i}")
    for name in names:
        await target.wait_leader(name)
        await _all_in_sync(target, name)
    client = await target.client()
    try:
        producer = await SteadyProducer(client, names, rate=50).start()
        await producer.wait_each(names)
        await target.scale_brokers(5)

        async def registered() -> bool:
            return {3, 4} <= registered_brokers(await target.operator_metrics())

        await wait_for(registered, "brokers 3 and 4 heartbeating to the operator")
        moves = {"five-0": (3, 4, 0), "five-1": (4, 3, 1)}
        for name, replicas in moves.items():
            await target.patch_partition(name, {"replicas": list(replicas)})
        for name, replicas in moves.items():
            await _moved(target, name, replicas)
            status = await target.partition_status(name)
            assert status is not None
            # A leader still among the replicas keeps leading (as in Kafka: the preferred
            # leader election moves it later); one moved off handed over.
            assert status.leader in replicas, status
        await producer.wait_each(names, after=time.monotonic())
        for name in names:
            await target.patch_partition(name, {"replicas": [0, 1, 2]})
        for name in names:
            await _moved(target, name, (0, 1, 2))
        await target.scale_brokers(3)
        await producer.wait_each(names, after=time.monotonic())
        await producer.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0
    assert not producer.failed, producer.failed[:5]


async def test_a_broker_on_a_new_empty_volume_catches_up_under_a_new_storage_id(
    real_cluster: KubeTarget,
) -> None:
    """Broker 2's claim deleted with its pod: the StatefulSet makes a new, empty volume.
    The broker comes back with a new storage id, is taken out of every ISR (it holds none
    of what it was in sync on), and joins again once it has caught up; nothing
    acknowledged is lost."""
    target = real_cluster
    await target.install()
    names = []
    for i in range(2):
        await target.apply(to_body(partition_manifest("fresh", i, namespace=target.namespace)))
        names.append(f"fresh-{i}")
    before = {}
    for name in names:
        await target.wait_leader(name)
        await _all_in_sync(target, name)
        status = await target.partition_status(name)
        assert status is not None
        before[name] = status.isr_storage_ids[2]
    client = await target.client()
    try:
        producer = await SteadyProducer(client, names, rate=50).start()
        await producer.wait_each(names)
        broker = f"{target.release}-broker-2"
        # The claim is held while its pod runs (pvc-protection); deleting the pod frees it.
        await target.kubectl("delete", "pvc", f"data-{broker}", "--wait=false")
        await target.kill_pod(broker)
        await target.wait_ready()

        async def renewed() -> bool:
            for name in names:
                s = await target.partition_status(name)
                if s is None or set(s.isr) != {0, 1, 2}:
                    return False
                if s.isr_storage_ids.get(2) in (None, before[name]):
                    return False
            return True

        await wait_for(renewed, "broker 2 back in every ISR under a new storage id")
        await producer.wait_each(names, after=time.monotonic())
        await producer.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0


# The rows a Parquet file sink committed, read in the pipeline's pod as Spark reads them:
# its metadata log lists the files (the newest compaction, then each later batch); a file
# it does not list is from a batch that did not commit, and does not count.
COMMITTED_ROWS = r"""
import json, pathlib, sys
import pyarrow.parquet as pq
log = pathlib.Path(sys.argv[1]) / "_spark_metadata"
batches = sorted(
    (int(p.name.split(".")[0]), p) for p in log.glob("[0-9]*") if not p.name.endswith(".tmp")
) if log.is_dir() else []
compactions = [n for n, p in batches if p.name.endswith(".compact")]
first = max(compactions, default=-1)
files = {}
for n, p in batches:
    if n < first:
        continue
    for line in p.read_text().splitlines()[1:]:
        entry = json.loads(line)
        if entry["action"] == "delete":
            files.pop(entry["path"], None)
        else:
            files[entry["path"]] = entry
rows = []
for path in files:
    columns = ["topic", "partition", "offset", "value"]
    table = pq.read_table(path.removeprefix("file://"), columns=columns)
    for r in table.to_pylist():
        value = r["value"].decode() if isinstance(r["value"], bytes) else r["value"]
        rows.append([r["topic"], r["partition"], r["offset"], value])
print(json.dumps(rows))
"""


async def test_the_spark_pipeline_image_reads_a_topic_exactly_once_across_a_pod_kill(
    real_cluster: KubeTarget,
) -> None:
    """The pipeline image as the chart runs it (`pipeline.enabled`): Spark in local mode in
    a pod, reading the `orders` topic through the client Service over TLS with its own
    token. Its pod is killed mid-stream; the Deployment starts another on the same volume,
    which goes on from the checkpoints. The audit output ends with every acknowledged
    record exactly once."""
    target = real_cluster
    await target.install(
        {
            "pipeline": {
                "enabled": True,
                "triggerInterval": "2 seconds",
                # The default asks for 2 cores: this node has 2 in all, brokers included.
                "resources": {
                    "requests": {"cpu": "250m", "memory": "1Gi"},
                    "limits": {"memory": "2Gi"},
                },
            }
        }
    )
    names = []
    for i in range(2):
        await target.apply(to_body(partition_manifest("orders", i, namespace=target.namespace)))
        names.append(f"orders-{i}")
    for name in names:
        await target.wait_leader(name)
    rows: list[list[Any]] = []

    async def audited(least: int) -> bool:
        pods = await target.ready_pods("pipeline")
        if not pods:
            return False
        try:
            out = await target.exec(pods[0], [PYTHON, "-c", COMMITTED_ROWS, "/work/out/audit"])
            got = json.loads(out.strip().splitlines()[-1])
        except (TargetError, ApiException, ValueError, IndexError):
            return False  # the pod is starting or stopping
        rows[:] = got
        return len(got) >= least

    client = await target.client()
    start_ms = int(time.time() * 1000)
    try:
        producer = await SteadyProducer(
            client, names, rate=20, make_value=lambda n: order_event(n, start_ms=start_ms)
        ).start()
        await producer.wait_acks(40)
        await wait_for(lambda: audited(1), "the pipeline's first audited records", 600)
        (pod,) = await target.ready_pods("pipeline")
        await target.kill_pod(pod)  # grace period 0: mid-batch, as a node failure would
        acked = len(producer.acks)
        await wait_for(lambda: audited(acked + 1), "the restarted pipeline going on", 600)
        await producer.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    assert not producer.failed, producer.failed[:5]
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    await wait_for(lambda: audited(len(producer.acks)), "every acknowledged record audited", 600)
    audit = [(f"{topic}-{partition}", offset, value) for topic, partition, offset, value in rows]
    assert len(audit) == len(set(audit)), "a record audited twice"
    expected = {(a.partition, a.offset, a.value) for a in producer.acks}
    assert expected <= set(audit), sorted(expected - set(audit))[:5]
    # Nothing but what the log holds: unacknowledged records the log kept may be there too.
    held = {(name, offset, value) for name, log in logs.items() for offset, value in log}
    assert set(audit) <= held, sorted(set(audit) - held)[:5]


# A steady acks=all producer in a client pod (the real client, as in the tests on this
# host) until /tmp/stop exists; then every acknowledgement as a JSON line, and the count
# of records that failed.
PRODUCE_UNTIL_STOPPED = r"""
import asyncio, json, pathlib, sys
from epochlog.client import Client
from epochlog_tools.devcluster.local_workload import SteadyProducer
from epochlog.security.options import Credentials

async def main():
    user = "/etc/epochlog/user/"
    credentials = Credentials.of(user + "ca.crt", user + "tls.crt", user + "tls.key")
    client = Client([sys.argv[1]], credentials=credentials)
    producer = await SteadyProducer(client, sys.argv[2].split(","), rate=150).start()
    await producer.wait_each(producer.partitions)
    print("producing", flush=True)
    while not pathlib.Path("/tmp/stop").exists():
        await asyncio.sleep(0.2)
    await producer.stop()
    await client.close()
    for a in producer.acks:
        print(json.dumps([a.partition, a.offset, a.value, a.leader_epoch, a.at]))
    print(json.dumps({"failed": [repr(e) for _, e in producer.failed[:5]]}))

asyncio.run(main())
"""


async def test_a_rolling_restart_seen_from_a_client_pod_loses_nothing(
    real_cluster: KubeTarget,
) -> None:
    """`kubectl rollout restart` of the brokers under acks=all load from a pod in the
    cluster, which reaches them through the client Service and the pod network as users'
    pods do (the scenario in test_chart.py goes through the API server's port-forwards).
    Nothing acknowledged is lost; the longest wait between acknowledgements is printed."""
    target = real_cluster
    await target.install()
    names = []
    for i in range(3):
        await target.apply(to_body(partition_manifest("inroll", i, namespace=target.namespace)))
        names.append(f"inroll-{i}")
    for name in names:
        await target.wait_leader(name)
        await _all_in_sync(target, name)
    await target.user_secret("producer-user")
    command = [PYTHON, "-c", PRODUCE_UNTIL_STOPPED, target.bootstrap_url(), ",".join(names)]
    await target.start_pod("producer", command, labels=CLIENT_LABEL, secret="producer-user")

    async def producing() -> bool:
        try:
            return "producing" in await target.kubectl("logs", "producer")
        except TargetError:
            return False  # not started yet

    await wait_for(producing, "the client pod's first acknowledgements")
    await target.rollout_restart(f"StatefulSet/{target.release}-broker")
    for name in names:
        await _all_in_sync(target, name)
    await target.exec("producer", ["touch", "/tmp/stop"])
    code, out = await target.pod_result("producer")
    assert code == 0, out[-4000:]
    lines = out.strip().splitlines()
    failed = json.loads(lines[-1])["failed"]
    acks = [json.loads(line) for line in lines if line.startswith("[")]
    assert not failed, failed
    gaps = [
        b[4] - a[4]
        for name in names
        for a, b in itertools.pairwise(
            sorted((x for x in acks if x[0] == name), key=lambda x: x[4])
        )
    ]
    # A figure, not a verdict (how long depends on the machine).
    print(
        f"rolling restart from a client pod: longest wait between acknowledgements "
        f"{max(gaps):.2f} s over {len(acks)} acknowledgements"
    )
    client = await target.client()
    try:
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    workload = [WorkloadAck(p, offset, value, epoch, at) for p, offset, value, epoch, at in acks]
    verdict = verify(workload, logs)
    assert verdict.ok, verdict
    assert max(a.leader_epoch for a in workload) > 1, "no leader changed while producing"
