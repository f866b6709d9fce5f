"""Faults on real broker processes: SIGKILL of the leader, restarts, SIGTERM, fencing.

Each test runs its own three brokers (RF3, minInsyncReplicas 2) with the test
controller running the real ControllerCore, and checks the one property that
matters: every acknowledged record is still there, at the offset it was
acknowledged at, and readers go on from where they were.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.log.partition_log import CLEAN_SHUTDOWN
from tests.broker.cluster import Cluster
from tests.broker.controller import spec, wall_ms

NAME = "events-0"


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, [spec("events", 0)], session_timeout_ms=1200).serving(NAME) as c:
        yield c


async def produce_many(
    c: Cluster, prefix: str, batches: int, leader: int | None = None
) -> dict[int, str]:
    """acks=all produces; returns offset -> value of every acknowledged record."""
    acked: dict[int, str] = {}
    for i in range(batches):
        values = [f"{prefix}-{i}-{j}" for j in range(5)]
        answer = await c.produce(NAME, values, leader=leader)
        for k, v in enumerate(values):
            acked[answer["baseOffset"] + k] = v
    return acked


def assert_acked_present(records: list[dict[str, Any]], acked: dict[int, str]) -> None:
    by_offset = {r["offset"]: r["value"] for r in records}
    missing = {o: v for o, v in acked.items() if by_offset.get(o) != v}
    assert not missing, f"acknowledged records lost or moved: {sorted(missing.items())[:10]}"
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets)), "offsets repeat or go backwards"


async def test_leader_sigkill_elects_a_new_leader_that_keeps_every_acked_record(
    cluster: Cluster,
) -> None:
    old = await cluster.wait_leader(NAME)
    acked = await produce_many(cluster, "before", 10)
    consumed = await cluster.read_all(NAME, old)
    assert_acked_present(consumed, acked)

    await cluster.brokers[old].kill()
    new = await cluster.wait_leader(NAME, timeout_s=15, exclude=[old])
    assert new != old
    status = cluster.controller.status(NAME)
    assert status is not None
    assert status.leader == new
    assert status.leader_epoch >= 2

    acked |= await produce_many(cluster, "after", 5)
    # The consumer goes on from its position on the new leader.
    rest = await cluster.read_all(NAME, new, start=consumed[-1]["offset"] + 1)
    assert rest
    assert rest[0]["offset"] == consumed[-1]["offset"] + 1
    assert_acked_present(consumed + rest, acked)

    # The old leader comes back as a follower and catches up.
    await cluster.brokers[old].start()

    async def caught_up() -> bool:
        part = (await cluster.partitions(old)).get(NAME, {})
        return part.get("role") == "follower" and part["persistedLogEndOffset"] >= max(acked) + 1

    await cluster.wait_until(caught_up, 20, "the old leader to catch up")
    await cluster.wait_ready([old])


async def test_restart_of_every_broker_keeps_the_data(cluster: Cluster) -> None:
    acked = await produce_many(cluster, "r", 6)
    for p in cluster.brokers.values():
        await p.kill()
    await asyncio.gather(*(p.start() for p in cluster.brokers.values()))
    leader = await cluster.wait_leader(NAME, timeout_s=20)

    async def everything() -> bool:
        try:
            records = await cluster.read_all(NAME, leader)
        except Exception:
            return False
        return len(records) >= len(acked)

    await cluster.wait_until(everything, 20, "the acknowledged records to be readable")
    assert_acked_present(await cluster.read_all(NAME, leader), acked)
    acked |= await produce_many(cluster, "again", 2)
    assert_acked_present(await cluster.read_all(NAME, await cluster.wait_leader(NAME)), acked)


async def test_sigterm_shuts_down_cleanly(cluster: Cluster) -> None:
    leader = await cluster.wait_leader(NAME)
    acked = await produce_many(cluster, "t", 4)
    await cluster.wait_ready()
    follower = next(b for b in cluster.brokers if b != leader)
    proc = cluster.brokers[follower]
    await proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0
    part_dir = proc.data_dir / NAME
    assert (part_dir / CLEAN_SHUTDOWN).exists()
    hw = HighWatermarkCheckpoint.load(OsFileSystem(), str(proc.data_dir)).get(NAME)
    # The follower's HW trails the leader's by at most its last fetch.
    assert hw is not None
    assert 0 < hw <= max(acked) + 1
    assert "broker_stopped" in proc.log_text()

    # The leader too: it answers what it can, then closes its logs cleanly.
    lproc = cluster.brokers[leader]
    await lproc.signal(signal.SIGTERM)
    assert await lproc.wait() == 0
    assert (lproc.data_dir / NAME / CLEAN_SHUTDOWN).exists()
    lhw = HighWatermarkCheckpoint.load(OsFileSystem(), str(lproc.data_dir)).get(NAME)
    assert lhw == max(acked) + 1

    await proc.start()
    await lproc.start()
    new = await cluster.wait_leader(NAME, timeout_s=20)
    await cluster.wait_ready([follower, leader])
    for p in (proc, lproc):
        # A clean shutdown lets the next start skip the full recovery scan.
        second_start = p.log_text().split("--- start 2 ---")[1]
        assert "log_recovered" in second_start
        assert "cleanShutdown=false" not in second_start

    async def readable() -> bool:
        return len(await cluster.read_all(NAME, new)) >= len(acked)

    await cluster.wait_until(readable, 20, "records readable after the restart")
    assert_acked_present(await cluster.read_all(NAME, new), acked)


async def test_a_fenced_broker_restarts_in_place_with_a_new_epoch(cluster: Cluster) -> None:
    leader = await cluster.wait_leader(NAME)
    acked = await produce_many(cluster, "f", 2)
    follower = next(b for b in cluster.brokers if b != leader)
    before = await cluster.call("GET", follower, "/healthz")
    pid = cluster.brokers[follower].proc.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        # Still in the ISR and not fetching: acks=all cannot complete in time.
        status, raw, _ = await cluster.request(
            "POST",
            leader,
            f"/v1/partitions/{NAME}/records",
            params={"timeoutMs": 200},
            json={"records": [{"value": "too-soon"}]},
        )
        error = json.loads(raw)["error"]
        assert (status, error["code"], error["retriable"]) == (504, "REQUEST_TIMED_OUT", True)

        # Past the session timeout the controller fences it.
        def fenced() -> bool:
            return cluster.controller.core.liveness.view(wall_ms()).is_fenced(follower)

        await cluster.controller.wait_for(fenced, 2.0, f"broker {follower}'s session to end")
        acked |= await produce_many(cluster, "while-stopped", 2, leader=leader)
    finally:
        os.kill(pid, signal.SIGCONT)

    async def restarted() -> bool:
        health = await cluster.call("GET", follower, "/healthz")
        # brokerEpoch is null while the core reopens.
        epoch = health["brokerEpoch"] or 0
        return bool(health["restarts"] >= 1 and epoch > before["brokerEpoch"])

    await cluster.wait_until(restarted, 15, "the fenced broker to restart with a new epoch")
    await cluster.wait_ready([follower], timeout_s=20)

    async def caught_up() -> bool:
        part = (await cluster.partitions(follower))[NAME]
        return bool(part["persistedLogEndOffset"] >= max(acked) + 1)

    await cluster.wait_until(caught_up, 15, "the restarted broker to catch up")
    assert "broker_restarting" in cluster.brokers[follower].log_text()
    assert_acked_present(await cluster.read_all(NAME, await cluster.wait_leader(NAME)), acked)
