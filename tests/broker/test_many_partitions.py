"""Many partitions on real broker processes: fetch sessions under load, a SIGKILL at 300
partitions, and sessions across leader changes and restarts.

Three brokers (RF3, minInsyncReplicas 2, each the preferred leader of a third) with the
test controller running the real ControllerCore; writes go through the repo's
idempotent `Producer` (acks=all). What each test checks is what a user relies on:
nothing acknowledged is lost or doubled, no live broker is fenced, no ISR shrinks
under a load the cluster keeps up with, and every partition a dead broker led gets a
new leader and takes writes.
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from epochlog.client import Client, Producer, RecordMetadata
from epochlog.resources import PartitionSpec
from epochlog_broker.log.fs import OsFileSystem
from epochlog_operator.events import EventReason
from epochlog_tools.devcluster.local_workload import WorkloadAck, read_back, verify
from epochlog_tools.devcluster.nemesis import read_partition_dir
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

BROKERS = (1, 2, 3)


def specs(topic: str, count: int) -> list[PartitionSpec]:
    return [
        spec(topic, i, BROKERS[i % 3 :] + BROKERS[: i % 3], replica_lag_time_max_ms=10_000)
        for i in range(count)
    ]


def names(specs: Sequence[PartitionSpec]) -> list[str]:
    return [s.name for s in specs]


async def settled(cluster: Cluster, partitions: Sequence[str]) -> None:
    """Every partition led with all three replicas in its ISR, each follower caught up by
    its leader's report, every broker ready. A new partition's ISR holds every replica
    before its followers have fetched at all; on a busy machine they may start later
    than replicaLagTimeMaxMs and leave it, which says nothing about keeping up under load."""
    core = cluster.controller.core

    def full() -> bool:
        return all(
            (s := cluster.controller.status(n)) is not None
            and s.leader is not None
            and len(s.isr) == 3
            and core.quiet(n, s)
            for n in partitions
        )

    await cluster.controller.wait_for(
        full, 120, "every partition led with a full ISR, every follower caught up"
    )
    await cluster.wait_ready(timeout_s=60)


async def broker_epochs(cluster: Cluster, brokers: Sequence[int] = BROKERS) -> dict[int, int]:
    return {b: (await cluster.call("GET", b, "/healthz"))["brokerEpoch"] for b in brokers}


class Writes:
    """acks=all writes through one idempotent producer, every acknowledgement kept."""

    def __init__(self, client: Client) -> None:
        self.producer = Producer(client, acks="all", linger_ms=0, delivery_timeout_ms=300_000)
        self.acks: list[WorkloadAck] = []
        self.failed: list[tuple[str, BaseException]] = []
        self.pending: list[asyncio.Future[RecordMetadata]] = []

    async def send(self, partition: str, value: str) -> None:
        future = await self.producer.send(partition, value)
        future.add_done_callback(functools.partial(self._done, value))
        self.pending.append(future)

    def _done(self, value: str, future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed.append((value, future.exception() or asyncio.CancelledError()))
            return
        m = future.result()
        self.acks.append(WorkloadAck(m.partition, m.offset, value, m.leader_epoch, 0.0))

    async def settle(self) -> None:
        await asyncio.gather(*self.pending, return_exceptions=True)
        self.pending.clear()

    async def write(self, partition: str, value: str) -> None:
        """Send one record and wait for its outcome."""
        future = await self.producer.send(partition, value)
        future.add_done_callback(functools.partial(self._done, value))
        await asyncio.gather(future, return_exceptions=True)


async def check_everything_acknowledged_is_there(
    client: Client, partitions: Sequence[str], writes: Writes
) -> None:
    assert not writes.failed, writes.failed[:5]
    gate = asyncio.Semaphore(8)

    async def one(p: str) -> tuple[str, list[tuple[int, str]]]:
        async with gate:
            return p, await read_back(client, p)

    logs = dict(await asyncio.gather(*(one(p) for p in partitions)))
    verdict = verify(writes.acks, logs)
    assert not verdict.missing, f"acknowledged and lost: {verdict.missing[:5]}"
    assert not verdict.duplicated, f"written twice: {verdict.duplicated[:5]}"


def isr_shrinks(cluster: Cluster, partitions: Sequence[str]) -> list[tuple[str, Any, str]]:
    """(partition, ISR, why the controller shrank it) of each partition short of a member."""
    why: dict[str, str] = {}
    for name, event in cluster.controller.events:
        if event.reason is EventReason.ISR_SHRUNK:
            why[name] = event.message
    out = []
    for n in partitions:
        s = cluster.controller.status(n)
        if s is not None and len(s.isr) < 3:
            out.append((n, s.isr, why.get(n, "")))
    return out


def warnings(cluster: Cluster) -> str:
    """The brokers' warnings and errors: what a failed load assertion needs to be read."""
    lines = [
        f"broker {b}: {line}"
        for b, p in cluster.brokers.items()
        for line in p.log_text().splitlines()
        if "level=warning" in line or "level=error" in line
    ]
    return "\n".join(lines[-40:])


@pytest.mark.slow
async def test_300_partitions_under_load_then_a_broker_sigkilled(tmp_path: Path) -> None:
    """300 partitions: acks=all records spread over all of them for a while, with no
    broker fenced and no ISR shrinking; then SIGKILL of the broker leading the most: each
    of its partitions gets a new leader and takes an acks=all write, and nothing
    acknowledged is lost."""
    many = specs("many", 300)
    partitions = names(many)
    # The controller shares this test's event loop with the load it generates: a session
    # long enough that a loop starved on a busy machine fences nobody (the assertion is
    # about the brokers' heartbeats under load, not about this process keeping up).
    async with Cluster(tmp_path, many, session_timeout_ms=10_000) as cluster:
        await settled(cluster, partitions)
        epochs = await broker_epochs(cluster)
        async with cluster.client(*(cluster.brokers[b].url for b in BROKERS)) as client:
            writes = Writes(client)
            shrinks: list[tuple[str, Any, str]] = []
            for round_ in range(10):
                for i, p in enumerate(partitions):
                    await writes.send(p, f"load-{round_}-{i}")
                await writes.settle()
                shrinks += isr_shrinks(cluster, partitions)
            assert not shrinks, f"ISR shrank under load: {shrinks[:5]}\n{warnings(cluster)}"
            assert await broker_epochs(cluster) == epochs, "a broker was fenced under load"
            assert all(cluster.brokers[b].starts == 1 for b in BROKERS)
            assert len(writes.acks) == 10 * len(partitions)

            led: dict[int, list[str]] = {b: [] for b in BROKERS}
            for n in partitions:
                leader = cluster.controller.leader(n)
                assert leader is not None
                led[leader].append(n)
            victim = max(BROKERS, key=lambda b: len(led[b]))
            await cluster.brokers[victim].signal(signal.SIGKILL)

            def re_led() -> bool:
                return all(
                    (s := cluster.controller.status(n)) is not None
                    and s.leader not in (None, victim)
                    for n in led[victim]
                )

            await cluster.controller.wait_for(re_led, 60, f"new leaders for {len(led[victim])}")
            for n in led[victim]:
                await writes.send(n, f"after-{n}")
            await writes.settle()
            await check_everything_acknowledged_is_there(client, partitions, writes)


@pytest.mark.slow
async def test_fetch_sessions_across_leader_changes_and_restarts(tmp_path: Path) -> None:
    """Writes go on while brokers are SIGKILLed and restarted, one after the other: each
    restart moves leaders (the partitions move between the followers' sessions), and the
    followers of a restarted leader find their sessions gone and open new ones. Every
    replica ends with the same log, and nothing acknowledged is lost."""
    few = specs("sessions", 12)
    partitions = names(few)
    async with Cluster(tmp_path, few, session_timeout_ms=1500) as cluster:
        await settled(cluster, partitions)
        async with cluster.client(*(cluster.brokers[b].url for b in BROKERS)) as client:
            writes = Writes(client)
            stop = asyncio.Event()
            acked: dict[str, int] = dict.fromkeys(partitions, 0)

            async def writer(p: str) -> None:
                # One record at a time per partition: a partition whose leader is down
                # holds up only its own writes.
                i = 0
                while not stop.is_set():
                    await writes.write(p, f"{p}-{i}")
                    acked[p] += 1
                    i += 1

            async def progress(at_least: int) -> None:
                await cluster.wait_until(
                    lambda: all(n >= at_least for n in acked.values()),
                    60,
                    f"{at_least} acknowledged writes to every partition",
                )

            writers = [asyncio.create_task(writer(p)) for p in partitions]
            try:
                await progress(3)
                for victim in (1, 2, 3, 1):
                    await cluster.brokers[victim].signal(signal.SIGKILL)
                    await cluster.brokers[victim].wait(10)
                    await cluster.brokers[victim].start()
                    await settled(cluster, partitions)
                    await progress(min(acked.values()) + 3)
            finally:
                stop.set()
                await asyncio.gather(*writers)
            await check_everything_acknowledged_is_there(client, partitions, writes)

        fs = OsFileSystem()

        def replicas_agree() -> bool:
            """Every replica's log on disk (read without opening it) holds the same records
            with the same epochs."""
            for n in partitions:
                logs = [
                    read_partition_dir(fs, str(cluster.brokers[b].data_dir / n)) for b in BROKERS
                ]
                if not logs[0] or any(log != logs[0] for log in logs[1:]):
                    return False
            return True

        await cluster.wait_until(replicas_agree, 30, "every replica to hold the same log")
        reopened = [
            line
            for b in BROKERS
            for line in cluster.brokers[b].log_text().splitlines()
            if "fetch_session_failed" in line or "fetch_session_reset" in line
        ]
        assert reopened, "no follower had to open a new session after a leader restart"
