"""Controlled shutdown and readiness on real broker processes, with the real decision code.

SIGTERM makes a broker hand its leaderships and ISR places over while it still
serves; it exits once the controller says nothing waits on it. A restarted
broker is ready only once the ISR holds it as the process it is now, so that a
rolling restart that waits for readiness never takes two replicas of a
partition out of sync at once.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back, verify
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

NAMES = ("cs-0", "cs-1", "cs-2")
SPECS = [spec("cs", 0, (1, 2, 3)), spec("cs", 1, (2, 3, 1)), spec("cs", 2, (3, 1, 2))]


@dataclass(frozen=True)
class Written:
    """A status write, and whether the stopping broker's process was still running."""

    name: str
    status: PartitionStatus
    broker_running: bool


def _record_writes(cluster: Cluster, broker: int) -> list[Written]:
    written: list[Written] = []
    store = cluster.controller.store
    write = store.write_status

    def recording(name: str, status: PartitionStatus, resource_version: str) -> None:
        write(name, status, resource_version)
        written.append(Written(name, status, cluster.brokers[broker].alive))

    store.write_status = recording  # type: ignore[method-assign]
    return written


@pytest.mark.slow
async def test_sigterm_hands_leadership_over_before_the_broker_exits(tmp_path: Path) -> None:
    async with Cluster(tmp_path, SPECS).serving(*NAMES) as cluster:
        client = cluster.client()
        producer = await SteadyProducer(client, NAMES, rate=150).start()
        try:
            await producer.wait_ack("cs-0", min_epoch=1, after=0, timeout=60)
            stopping = await cluster.wait_leader("cs-0")
            written = _record_writes(cluster, stopping)
            await cluster.brokers[stopping].signal(signal.SIGTERM)
            assert await cluster.brokers[stopping].wait() == 0
            log = cluster.brokers[stopping].log_text()
            assert "controlled_shutdown_completed" in log, log[-3000:]

            # Every partition had a leader other than it, and an ISR without it, in a status
            # written while its process still ran: nobody waited for its session to expire.
            handed = {
                w.name
                for w in written
                if w.broker_running
                and w.status.leader not in (None, stopping)
                and stopping not in w.status.isr
            }
            assert handed == set(NAMES), [
                (w.name, w.status.leader, w.status.isr, w.broker_running) for w in written
            ]
            for name in NAMES:
                status = cluster.controller.status(name)
                assert status is not None
                assert len(status.isr) >= 2, f"{name}: ISR {status.isr} below minInsyncReplicas"

            await cluster.brokers[stopping].start()
            await cluster.wait_ready([stopping], timeout_s=60)
            for name in NAMES:
                await cluster.controller.wait_for(
                    functools.partial(_holds, cluster, name, stopping), 60, f"{stopping} in {name}"
                )
            await producer.wait_ack("cs-0", min_epoch=1, after=time.monotonic(), timeout=60)
        finally:
            await producer.stop()
        logs = {name: await read_back(client, name) for name in NAMES}
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]


@pytest.mark.slow
async def test_a_restarted_broker_is_ready_only_once_back_in_every_isr(tmp_path: Path) -> None:
    # A slow controller stretches the time between a follower catching up and the ISR
    # taking it back, where readiness used to answer ready already.
    cluster = Cluster(tmp_path, SPECS, reconcile_interval_ms=1000)
    async with cluster.serving(*NAMES):
        client = cluster.client()
        producer = await SteadyProducer(client, NAMES, rate=150).start()
        try:
            await producer.wait_ack("cs-0", min_epoch=1, after=0, timeout=60)
            follower = 3
            await cluster.brokers[follower].kill()
            for name in NAMES:
                await cluster.controller.wait_for(
                    functools.partial(_lacks, cluster, name, follower),
                    60,
                    f"{follower} out of {name}",
                )
            await cluster.brokers[follower].start()
            while True:
                try:
                    status, _, _ = await cluster.request("GET", follower, "/readyz")
                except (aiohttp.ClientError, OSError):
                    status = 0  # not listening yet
                in_sync = all(_in_sync_as_now(cluster, name, follower) for name in NAMES)
                if status == 200:
                    break
                cluster.assert_some_broker_runs("broker 3 ready")
                await asyncio.sleep(0.02)
            statuses = {n: cluster.controller.status(n) for n in NAMES}
            assert in_sync, f"ready while not back in every ISR: {statuses}"
        finally:
            await producer.stop()
        await client.close()
    assert not producer.failed, producer.failed[:5]


def _isr(cluster: Cluster, name: str) -> tuple[int, ...]:
    status = cluster.controller.status(name)
    return status.isr if status is not None else ()


def _holds(cluster: Cluster, name: str, broker: int) -> bool:
    return broker in _isr(cluster, name)


def _lacks(cluster: Cluster, name: str, broker: int) -> bool:
    return broker not in _isr(cluster, name)


def _in_sync_as_now(cluster: Cluster, name: str, broker: int) -> bool:
    status = cluster.controller.status(name)
    epoch = cluster.controller.core.liveness.sessions.get(broker)
    return (
        status is not None
        and epoch is not None
        and broker in status.isr
        and status.isr_broker_epochs.get(broker) == epoch.broker_epoch
    )


@pytest.mark.slow
async def test_brokers_numbered_from_zero_roll_back_into_every_isr(tmp_path: Path) -> None:
    # Broker ids are pod ordinals in the Helm chart: 0, 1, 2. Broker 0 leading used to
    # stop its followers from ever rejoining once the controller had refused one of its
    # proposals: a refusal for leader 0 was never sent to it (0 read as "no leader").
    specs = [spec("z", 0, (0, 1, 2)), spec("z", 1, (1, 2, 0)), spec("z", 2, (2, 0, 1))]
    names = ("z-0", "z-1", "z-2")
    async with Cluster(tmp_path, specs, broker_ids=(0, 1, 2)).serving(*names) as cluster:
        for b in (2, 1, 0):
            await cluster.brokers[b].signal(signal.SIGTERM)
            assert await cluster.brokers[b].wait() == 0
            await cluster.brokers[b].start()
            await cluster.wait_ready([b], timeout_s=60)
        for name in names:
            status = cluster.controller.status(name)
            assert status is not None
            assert sorted(status.isr) == [0, 1, 2], (name, status)
