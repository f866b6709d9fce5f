"""A rolling restart of every broker under acks=all load, on the embedded cluster.

The real operator (kopf, on the API emulator) and three broker processes; the
brokers restart one by one as a StatefulSet roll does (SIGTERM, start, next once
/readyz answers). Nothing acknowledged may be lost or doubled, no status the
API server publishes may show an ISR below minInsyncReplicas, and every broker
must have handed over before it stopped (its controlled shutdown completed,
rather than timing out).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from epochlog.client import Client
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back, verify
from epochlog_tools.devcluster.partitions import partition_manifest
from epochlog_tools.devcluster.rolling import IsrWatch, rolling_restart

TOPIC = "rolling"
PARTITIONS = 4


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    settings = DevSettings.for_tests()
    settings.grace_period_s = 30.0  # a handover that hangs shows as a timeout in the log
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    try:
        await cluster.up(example_partitions=False)
        yield cluster
    finally:
        await cluster.down()


async def test_a_rolling_restart_under_load_loses_nothing_and_keeps_every_isr_at_its_minimum(
    cluster: LocalCluster,
) -> None:
    names = [f"{TOPIC}-{i}" for i in range(PARTITIONS)]
    for i in range(PARTITIONS):
        await cluster.apply(partition_manifest(TOPIC, i, replica_lag_time_max_ms=3000))
    for name in names:
        await cluster.wait_serving(name, await cluster.wait_leader(name))
    client = Client(cluster.bootstrap, credentials=cluster.credentials, retry_backoff_ms=20)
    producer = await SteadyProducer(client, names, rate=200).start()
    watch = await IsrWatch(cluster.api_url).start()
    try:
        await producer.wait_each(names)
        await rolling_restart(cluster, [1, 2, 3])
        await producer.wait_each(names, after=time.monotonic())
        await producer.stop()
        await watch.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]
    assert not watch.low, watch.low[:5]
    assert watch.seen > 0
    for b in (1, 2, 3):
        text = Path(cluster.processes[f"broker-{b}"].log).read_text(errors="replace")
        assert text.count("controlled_shutdown_completed") >= 1, f"broker {b} did not hand over"
        assert "controlled_shutdown_timed_out" not in text
