"""KAFKA-1211 / KIP-101 on real processes: a double failure must not lose acknowledged records.

Three replicas, leader B, followers C and A (replica order B, C, A, so C is
elected when B goes). A is SIGKILLed with its HW checkpoint behind its log;
B goes on with C; then B gets a record C never saw and is SIGKILLed; C leads.
A returns and must keep its log (its divergence point from C's epoch history
is its log end, above its HW); B returns and must cut exactly its unreplicated
tail, at C's epoch start. Every acknowledged record is on every replica at its
offset, judged by the same checker as the simulator.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from tests.e2e.helpers import (
    checkpointed_hw,
    create_partition,
    disk_log,
    events,
    gone,
    hosted,
    log_size,
    status_of,
    until,
)

NAME = "kafka1211-0"
B, C, A = 1, 2, 3
FETCH_WAIT_S = 0.5
"""How long a follower's fetch waits at the leader for data (replica_fetch_max_wait_ms)."""


# A session long enough to pause C past one of its fetches' long poll without fencing it.
@pytest.mark.cluster_settings(session_timeout_ms=2500)
async def test_kafka_1211_double_failure(local_cluster: LocalCluster) -> None:
    cluster = local_cluster
    first = await create_partition(cluster, NAME, [B, C, A])
    w = Workload(cluster, [NAME], WorkloadConfig(producers=0), log=print)
    await w.start()
    try:
        await w.produce(NAME, [f"m1-{i}" for i in range(30)])

        async def a_has_all() -> bool:
            view = await hosted(w, A, NAME)
            return view is not None and view.persisted_log_end_offset >= 30

        await until(a_has_all, 10, "A to hold m1")
        # One more acknowledged write, then A dies at once: A has it in its log, but its
        # high watermark (in memory, let alone in the checkpoint) has not caught up.
        await w.produce(NAME, ["m1-last"])
        w.fault(f"SIGKILL broker-{A} (follower A)")
        cluster.kill(f"broker-{A}", signal.SIGKILL)
        await gone(cluster, f"broker-{A}")
        a_end = len(disk_log(cluster, A, NAME))
        a_hw = checkpointed_hw(cluster, A, NAME) or 0
        assert a_end == 31, f"A holds {a_end} records, expected 31"
        assert a_hw < a_end, f"A's HW checkpoint {a_hw} is not behind its log end {a_end}"

        async def a_out() -> bool:
            return set((await status_of(cluster, NAME)).isr) == {B, C}

        await until(a_out, 15, "A to leave the ISR")
        await w.produce(NAME, [f"m2-{i}" for i in range(20)])  # on B and C

        # B appends a record that C (paused) never fetches, then B dies. C's fetch waiting
        # at B is answered (empty) before b-only is written: otherwise C would find b-only
        # in its socket once it runs again.
        w.fault(f"SIGSTOP broker-{C} (follower C)")
        cluster.pause(f"broker-{C}")
        try:
            await asyncio.sleep(FETCH_WAIT_S + 0.4)
            b_url = cluster.processes[f"broker-{B}"].url
            unacked = asyncio.create_task(w.post_once(b_url, NAME, "b-only", timeout_ms=5000))

            async def b_appended() -> bool:
                view = await hosted(w, B, NAME)
                return view is not None and view.persisted_log_end_offset > view.high_watermark

            await until(b_appended, 5, "B to append b-only", interval_s=0.01)
            w.fault(f"SIGKILL broker-{B} (leader B)")
            cluster.kill(f"broker-{B}", signal.SIGKILL)
            await gone(cluster, f"broker-{B}")
        finally:
            w.note(f"SIGCONT broker-{C}")
            cluster.resume(f"broker-{C}")
        assert await unacked != 200, "b-only must not be acknowledged"
        b_end = len(disk_log(cluster, B, NAME))
        assert b_end == a_end + 20 + 1, f"B holds {b_end} records"

        led = await cluster.wait_leader(
            NAME, not_in=(A, B), min_leader_epoch=first.leader_epoch + 1, timeout=20
        )
        assert led.leader == C, led
        divergence = b_end - 1  # C's log end at its election: everything but b-only

        # A returns and follows C: its log is a prefix of C's, so nothing is cut, although
        # its HW checkpoint is lower.
        a_mark = log_size(cluster, f"broker-{A}")
        w.note(f"start broker-{A}")
        await cluster.restart(f"broker-{A}")

        async def a_back() -> bool:
            return A in (await status_of(cluster, NAME)).isr

        await until(a_back, 30, "A to rejoin the ISR")
        opened = events(cluster, f"broker-{A}", "partition_opened", since=a_mark, partition=NAME)
        assert opened, "A did not reopen its log"
        assert int(opened[0]["logEndOffset"]) == a_end, opened
        assert int(opened[0]["highWatermark"]) == a_hw, opened
        cuts = events(cluster, f"broker-{A}", "log_truncated", since=a_mark, partition=NAME)
        assert all(int(c["logEndOffset"]) >= a_end for c in cuts), (
            f"A truncated below its log end {a_end} (its HW was {a_hw}): {cuts}"
        )
        m3 = await w.produce(NAME, [f"m3-{i}" for i in range(20)])  # on C and A
        assert m3[0].offset == divergence, m3[0]

        # B returns: its b-only tail is cut at the divergence point, nothing below.
        b_mark = log_size(cluster, f"broker-{B}")
        b_hw = checkpointed_hw(cluster, B, NAME) or 0
        w.note(f"start broker-{B}")
        await cluster.restart(f"broker-{B}")
        result = await w.finish(produce_after_heal_s=0, settle_timeout_s=30)
        print(result.report)
        assert result.ok, result.report
        cuts = events(cluster, f"broker-{B}", "log_truncated", since=b_mark, partition=NAME)
        assert [int(c["logEndOffset"]) for c in cuts] == [divergence], (
            f"B (HW checkpoint {b_hw}, log end {b_end}) should be cut once at {divergence}: {cuts}"
        )
        assert b_hw <= divergence
        for broker in (A, B, C):
            values = [v for _o, _e, v in disk_log(cluster, broker, NAME)]
            assert "b-only" not in values, f"broker {broker} still holds b-only"
        assert result.acked == 71
    finally:
        await w.close()
