"""The offsets Partitions stay about as long as the offsets they keep (what log compaction
does for Kafka's __consumer_offsets), and a coordinator taking over reads only that.

Three real brokers whose coordinators rewrite an offsets Partition past 50 records
(`--kafka-offsets-rewrite-records 50`; the default is 10,000). Three kafka-python
clients at once commit their groups' offsets 200 times each, as consumers committing
after every poll do, so that rewrites run while commits are in flight, beside another
group's single commit. The offsets Partition's log start moves up and what is
left of it stays under the limit plus the offsets it keeps; both groups' offsets read
back as last committed. The coordinator is then SIGKILLed: the new one, which reads the
Partition from its log start, answers the same offsets.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from epochlog.client import Client
from epochlog.resources import KAFKA_OFFSETS_TOPIC, partition_name
from epochlog_tools.demo.kafka import kafka_python_tls
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from tests.e2e.helpers import create_partition, status_of, until

TOPIC = "ledger"
LIMIT = 50
COMMITS = 200
BUSY = ("busy-a", "busy-b", "busy-c")
WAIT_S = 180.0


def _commit_many(cluster: LocalCluster, group: str, count: int) -> None:
    """`count` commits of offsets 1..count of TOPIC's partition 0, one at a time."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        **kafka_python_tls(cluster),
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        for n in range(1, count + 1):
            consumer.commit({tp: OffsetAndMetadata(n, f"n={n}", -1)})
    finally:
        consumer.close()


def _committed(cluster: LocalCluster, group: str) -> tuple[int | None, str | None]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        **kafka_python_tls(cluster),
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        found = consumer.committed(tp, metadata=True)
        return (None, None) if found is None else (found.offset, found.metadata)
    finally:
        consumer.close()


async def _held(cluster: LocalCluster, name: str) -> list[tuple[int, str]]:
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        return await read_back(client, name)


@pytest.mark.cluster_settings(
    kafka_offsets_partitions=1,
    broker_args=("--kafka-offsets-rewrite-records", str(LIMIT)),
)
async def test_a_busy_groups_offsets_partition_is_rewritten_and_read_short_after_a_failover(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    await cluster.offsets_partitions()
    await create_partition(cluster, f"{TOPIC}-0", (1, 2, 3))
    offsets = partition_name(KAFKA_OFFSETS_TOPIC, 0)

    await asyncio.to_thread(_commit_many, cluster, "quiet", 1)
    await asyncio.gather(*(asyncio.to_thread(_commit_many, cluster, g, COMMITS) for g in BUSY))
    await _all_as_committed(cluster)

    # Rewritten: what is left starts past the first commits and is short.
    held = await _held(cluster, offsets)
    assert held[0][0] > 0, held[:3]
    assert len(held) <= LIMIT + 1 + len(BUSY) + 1, len(held)
    assert held[-1][0] + 1 >= len(BUSY) * COMMITS + 1  # every commit went through it

    # A new coordinator reads it from its log start and answers the same offsets.
    coordinator = (await status_of(cluster, offsets)).leader
    assert coordinator is not None
    cluster.kill(f"broker-{coordinator}", signal.SIGKILL)

    async def moved() -> bool:
        status = await status_of(cluster, offsets)
        return status.leader is not None and status.leader != coordinator

    await until(moved, WAIT_S, "a new coordinator")
    await _all_as_committed(cluster)


async def _all_as_committed(cluster: LocalCluster) -> None:
    for group in BUSY:
        assert await asyncio.to_thread(_committed, cluster, group) == (COMMITS, f"n={COMMITS}")
    assert await asyncio.to_thread(_committed, cluster, "quiet") == (1, "n=1")
