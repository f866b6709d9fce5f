"""KIP-207 on real processes: latest offsets and HWs never go back across a leader failover.

One RF3 partition with replicas B, C, A (so C is elected when B goes) takes a
steady acks=all stream while three ListOffsets(latest) callers poll every
10 ms and consumers read. Each round SIGKILLs the leader B and, before the
operator notices, SIGSTOPs the third replica A: C is elected with A still in
its ISR, so C's high watermark cannot reach C's log end at election until A
is fenced. Meanwhile C must answer OFFSET_NOT_AVAILABLE (retriable) rather
than a latest offset below what B already handed out.

Asserted: the checker finds nothing (offset-went-back covers every HW and
latest offset each client saw, per client), no latest offset answered in a
leader epoch is below that epoch's start offset (the leader's log end at its
election), and some new leader did answer OFFSET_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from tests.e2e.helpers import create_partition, gone, status_of, until

NAME = "kip207-0"
REPLICAS = (1, 2, 3)
ROUNDS = 3


# The window in which the successor leads with the third replica in its ISR but silent lasts
# from the third replica's pause to its fencing: a longer session makes it longer.
@pytest.mark.slow
@pytest.mark.cluster_settings(session_timeout_ms=2500)
async def test_kip_207_offsets_during_failover(local_cluster: LocalCluster) -> None:
    cluster = local_cluster
    await create_partition(cluster, NAME, REPLICAS)
    w = Workload(
        cluster,
        [NAME],
        WorkloadConfig(
            producers=2,
            consumers=2,
            offsets_callers=3,
            offsets_interval_s=0.01,
            # Leader discovery must not wait long for the paused replica.
            probe_timeout_ms=200,
        ),
        log=print,
    )
    await w.start()
    try:
        await asyncio.sleep(2)
        session_s = cluster.settings.session_timeout_ms / 1000
        for _round in range(ROUNDS):
            status = await status_of(cluster, NAME)
            leader, epoch, isr = status.leader, status.leader_epoch, status.isr
            assert leader is not None, status
            assert set(isr) == set(REPLICAS), status
            successor = next(r for r in REPLICAS if r != leader)
            third = next(r for r in REPLICAS if r not in (leader, successor))
            w.fault(f"SIGKILL broker-{leader} (leader)")
            cluster.kill(f"broker-{leader}", signal.SIGKILL)
            await gone(cluster, f"broker-{leader}")
            # Before the leader's session expires: the third replica stays in the ISR of
            # the successor's first epoch, but does not fetch from it.
            await asyncio.sleep(session_s * 0.7)
            w.fault(f"SIGSTOP broker-{third}")
            cluster.pause(f"broker-{third}")
            try:
                led = await cluster.wait_leader(
                    NAME, not_in=(leader,), min_leader_epoch=epoch + 1, timeout=15
                )
                assert led.leader == successor, led
                await asyncio.sleep(session_s)
            finally:
                w.note(f"SIGCONT broker-{third}")
                cluster.resume(f"broker-{third}")
            w.note(f"start broker-{leader}")
            await cluster.restart(f"broker-{leader}")

            async def full_isr() -> bool:
                return set((await status_of(cluster, NAME)).isr) == set(REPLICAS)

            await until(full_isr, 30, "every replica back in the ISR")
            await asyncio.sleep(1)

        result = await w.finish(produce_after_heal_s=1, settle_timeout_s=30)
        print(result.report)
        assert result.ok, result.report
        assert result.leader_changes >= ROUNDS, result.report

        # The log end of each epoch's leader at its election is where that epoch begins.
        records = next(iter(w.final_logs[NAME].values()))[0]
        starts: dict[int, int] = {}
        for offset, leader_epoch, _value in records:
            starts.setdefault(leader_epoch, offset)
        below = [
            o
            for o in w.history.offsets
            if o.kind == "latest" and o.offset < starts.get(o.leader_epoch, 0)
        ]
        assert not below, (
            f"latest offsets below their epoch's start {starts}: {below[:5]}\n{result.report}"
        )
        new_leader_gated = [n for n in w.not_available if (n.leader_epoch or 0) >= 2]
        assert new_leader_gated, f"no new leader answered OFFSET_NOT_AVAILABLE\n{result.report}"
        print(
            f"epoch starts {starts}; OFFSET_NOT_AVAILABLE answers by epoch: "
            f"{sorted({(n.leader_epoch, n.broker) for n in new_leader_gated})}"
        )
    finally:
        await w.close()
