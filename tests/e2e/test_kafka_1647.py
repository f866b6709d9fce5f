"""KAFKA-1647 on real processes: every broker hard-killed while producing, then back one by one.

Three RF3 partitions led by brokers 1, 2 and 3 take acks=all writes from two
producers while all three brokers are SIGKILLed. They return one at a time,
so that partitions whose leader is still down sit on a restarted broker with
no leader to follow. Their HW checkpoints must survive that (the broker keeps
the HW of every partition on disk, whatever its role is doing), nothing may be
truncated to zero, and once all are back no acknowledged record is lost: the
simulator's checker judges the recorded history and every replica's log.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from tests.e2e.helpers import (
    checkpointed_hw,
    create_partition,
    disk_log,
    events,
    gone,
    log_size,
    status_of,
    until,
)

BROKERS = (1, 2, 3)
NAMES = {"kafka1647-0": (1, 2, 3), "kafka1647-1": (2, 3, 1), "kafka1647-2": (3, 1, 2)}
"""Partition -> replicas, preferred leader first."""


@pytest.mark.slow
async def test_kafka_1647_all_down_restart(local_cluster: LocalCluster) -> None:
    cluster = local_cluster
    for name, replicas in NAMES.items():
        await create_partition(cluster, name, replicas)
    w = Workload(cluster, list(NAMES), WorkloadConfig(producers=2), log=print)
    await w.start()
    try:
        await asyncio.sleep(3)

        # Every partition has acknowledged records and a checkpointed HW before the crash.
        async def written() -> bool:
            return all(
                any(a.partition == n for a in w.history.acks)
                and any((checkpointed_hw(cluster, b, n) or 0) > 0 for b in BROKERS)
                for n in NAMES
            )

        await until(written, 5, "acknowledged records and an HW checkpoint in every partition")

        # All brokers die within a few ms of each other while the producers write.
        for b in BROKERS:
            w.fault(f"SIGKILL broker-{b}")
            cluster.kill(f"broker-{b}", signal.SIGKILL)
        for b in BROKERS:
            await gone(cluster, f"broker-{b}")
        before = {(b, n): checkpointed_hw(cluster, b, n) or 0 for b in BROKERS for n in NAMES}
        ends = {(b, n): len(disk_log(cluster, b, n)) for b in BROKERS for n in NAMES}
        acked_before = {n: sum(1 for a in w.history.acks if a.partition == n) for n in NAMES}
        for n in NAMES:
            assert acked_before[n] > 0
            assert max(before[b, n] for b in BROKERS) > 0, f"{n}: no HW checkpointed"
        await asyncio.sleep(1.5)  # every session expires: the operator fences them all

        down = set(BROKERS)
        for b in BROKERS:
            mark = log_size(cluster, f"broker-{b}")
            w.note(f"start broker-{b}")
            await cluster.restart(f"broker-{b}")
            down.discard(b)
            # Two checkpoint intervals with the other brokers (and so some leaders) down.
            await asyncio.sleep(2 * cluster.settings.checkpoint_interval_ms / 1000 + 0.2)
            led_by_down = [n for n, replicas in NAMES.items() if replicas[0] in down]
            if down:
                assert led_by_down, "some partition's leader must still be down"
            for n in NAMES:

                async def reopened(n: str = n, p: str = f"broker-{b}", m: int = mark) -> Any:
                    return events(cluster, p, "partition_opened", since=m, partition=n)

                opened = await until(reopened, 5, f"broker {b} to reopen {n}")
                assert int(opened[0]["logEndOffset"]) == ends[b, n], opened
                assert int(opened[0]["highWatermark"]) == before[b, n], opened
                hw = checkpointed_hw(cluster, b, n)
                assert hw is not None, f"broker {b} dropped the HW of {n} from its checkpoint"
                assert hw >= before[b, n], (
                    f"broker {b}: HW of {n} went from {before[b, n]} to {hw} in its checkpoint "
                    f"while {'leader down' if n in led_by_down else 'restarting'}"
                )
                cuts = events(cluster, f"broker-{b}", "log_truncated", since=mark, partition=n)
                assert all(int(c["logEndOffset"]) >= before[b, n] for c in cuts), (
                    f"broker {b} truncated {n} below its HW {before[b, n]}: {cuts}"
                )
            statuses = {n: (await status_of(cluster, n)).leader for n in NAMES}
            w.note(f"leaders with brokers {sorted(down)} down: {statuses}")

        restarted_at = w.now()
        result = await w.finish(produce_after_heal_s=3, settle_timeout_s=60)
        print(result.report)
        assert result.ok, result.report
        for n in NAMES:
            after = [a for a in w.history.acks if a.partition == n and a.time > restarted_at]
            assert after, f"{n}: nothing acknowledged after the restarts\n{result.report}"
        for b in BROKERS:
            cuts = events(cluster, f"broker-{b}", "log_truncated")
            assert all(int(c["logEndOffset"]) > 0 for c in cuts), f"broker {b} cut to 0: {cuts}"
    finally:
        await w.close()
