"""The chart's Kafka listener on a real Kubernetes, used as a Kafka user's pod uses it.

kafka-python (nobody here wrote it) runs in a pod of the cluster (`kafka_pod_client.py`)
and bootstraps from the client Service's Kafka port over TLS with a user certificate;
Metadata sends it on to each broker's own Service. Its idempotent acks=all producer
writes a topic of two Partitions; a consumer group reads every record and commits. The
group's offsets are in the chart's `epochlog.consumer-offsets` Partitions: the leader
of the group's one (its coordinator) is killed, and a second pod in the same group
finds the offsets committed before, reads the records written after them, and nothing
below them again. epochlog's own client reads the same records at the same offsets.

It runs on the test cluster in `make e2e` (or any cluster `EPOCHLOG_E2E_KUBECONFIG`
names): the embedded target runs no client pods.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import kafka
import pytest

from e2e.kube_target import PYTHON, KubeTarget
from e2e.targets import ClusterTarget, wait_for
from epochlog.objects import to_body
from epochlog.resources import KAFKA_OFFSETS_TOPIC, partition_name
from epochlog_broker.kafka.offsets import offsets_partition
from epochlog_tools.devcluster.local_workload import read_back
from epochlog_tools.devcluster.partitions import partition_manifest

TOPIC = "ledger"
PARTITIONS = 2
RECORDS = 200
GROUP = "audit"
CLIENT = Path(__file__).with_name("kafka_pod_client.py")


@pytest.fixture
def real_cluster(target: ClusterTarget) -> KubeTarget:
    if not isinstance(target, KubeTarget):
        pytest.skip("needs a real cluster (EPOCHLOG_E2E_KUBECONFIG; make e2e starts one)")
    return target


def _kafka_python_zip() -> bytes:
    """kafka-python as installed here (pure Python and the JSON schemas of Kafka's
    messages it reads as resources), zipped: the pod imports it from the zip (zipimport),
    so the image needs no Kafka client of its own."""
    root = Path(kafka.__file__).parent
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                z.write(path, str(path.relative_to(root.parent)))
    return out.getvalue()


def _lines(log: str) -> list[list[Any]]:
    return [json.loads(line) for line in log.splitlines() if line.startswith("[")]


async def _run_client(target: KubeTarget, pod: str, prefix: str) -> list[list[Any]]:
    bootstrap = f"{target.release}-client.{target.namespace}.svc:9092"
    command = [PYTHON, "/opt/client/kafka_pod_client.py", bootstrap, TOPIC]
    command += [str(PARTITIONS), str(RECORDS), GROUP, prefix]
    await target.start_pod(
        pod,
        command,
        secret="kafka-user",
        files="kafka-client",
        env={"PYTHONPATH": "/opt/client/kafka-python.zip"},
    )
    code, log = await target.pod_result(pod)
    assert code == 0, log[-4000:]
    return _lines(log)


def _of(lines: list[list[Any]], kind: str) -> list[list[Any]]:
    return [line[1:] for line in lines if line[0] == kind]


async def test_a_kafka_client_pod_produces_and_consumes_in_a_group_across_a_coordinator_kill(
    real_cluster: KubeTarget,
) -> None:
    target = real_cluster
    await target.install()
    names = [partition_name(TOPIC, i) for i in range(PARTITIONS)]
    for i in range(PARTITIONS):
        await target.apply(to_body(partition_manifest(TOPIC, i, namespace=target.namespace)))
    for name in names:
        await target.wait_leader(name)
    # The chart made the offsets Partitions; the group's coordinator leads its one.
    made = await target.kubectl(
        "get", "partitions", "-l", "app.kubernetes.io/component=kafka-offsets", "-o", "name"
    )
    count = len(made.split())
    assert count == 16, made
    offsets = partition_name(KAFKA_OFFSETS_TOPIC, offsets_partition(GROUP, count))
    before = await target.wait_leader(offsets)
    await target.user_secret("kafka-user")
    await target.config_map(
        "kafka-client",
        {"kafka_pod_client.py": CLIENT.read_bytes(), "kafka-python.zip": _kafka_python_zip()},
    )

    first = await _run_client(target, "kafka-first", "first")
    acks = {v: (p, o) for p, o, v in _of(first, "ack")}
    assert len(acks) == RECORDS
    assert _of(first, "missing") == [[[]]]
    # Each record read once, where the producer was told it is.
    reads = _of(first, "read")
    assert sorted(v for _, _, v in reads) == sorted(acks)
    assert all(acks[v] == (p, o) for p, o, v in reads)
    ends = {p: max(o for q, o in acks.values() if q == p) + 1 for p in range(PARTITIONS)}
    assert {p: c for p, c in _of(first, "committed")} == ends
    assert {p: c for p, c in _of(first, "committed_before")} == dict.fromkeys(ends)

    # The commits are records of the group's offsets Partition, replicated.
    async def committed() -> bool:
        status = await target.partition_status(offsets)
        return status is not None and status.high_watermark > 0

    await wait_for(committed, f"the group's commits in {offsets}")

    # Its leader, the group's coordinator, killed: the offsets are still there.
    assert before.leader is not None
    await target.kill_pod(f"{target.release}-broker-{before.leader}")
    await target.wait_leader(offsets, min_leader_epoch=before.leader_epoch + 1)
    second = await _run_client(target, "kafka-second", "second")
    assert {p: c for p, c in _of(second, "committed_before")} == ends
    second_acks = {v: (p, o) for p, o, v in _of(second, "ack")}
    second_reads = _of(second, "read")
    assert _of(second, "missing") == [[[]]]
    # Read on from the committed offsets: nothing of the first run again.
    assert sorted(v for _, _, v in second_reads) == sorted(second_acks)
    assert all(o >= ends[p] for p, o, _ in second_reads)

    # epochlog's own client reads the same records at the same offsets.
    client = await target.client()
    try:
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    held = {v: (int(name.rsplit("-", 1)[1]), o) for name in names for o, v in logs[name]}
    assert {v: held.get(v) for v in {**acks, **second_acks}} == {**acks, **second_acks}
