"""Preferred leader election on real broker processes, with the real decision code.

A preferred replica that failed and came back is in the ISR but leads nothing:
the controller's balance check moves leadership back to it with a new
leaderEpoch, while producers write with acks=all. The old leader stops
accepting and follows; producers go to the new leader; nothing acknowledged is
lost.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp

from epochlog.resources import PartitionStatus
from epochlog_operator.events import EventReason
from epochlog_operator.preferred import RebalanceSettings
from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back, verify
from tests.broker.cluster import ApiError, Cluster
from tests.broker.controller import spec

NAMES = ("pe-0", "pe-1", "pe-2")
SPECS = [spec("pe", 0, (1, 2, 3)), spec("pe", 1, (2, 3, 1)), spec("pe", 2, (3, 1, 2))]
CHECK = RebalanceSettings(check_interval_ms=1000)


def _status(cluster: Cluster, name: str) -> PartitionStatus:
    status = cluster.controller.status(name)
    assert status is not None
    return status


async def test_preferred_leader_election_under_acks_all_load_with_zero_loss(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path, SPECS, rebalance=CHECK).serving(*NAMES) as cluster:
        client = cluster.client()
        producer = await SteadyProducer(client, NAMES, rate=150).start()
        try:
            name, preferred = "pe-0", 1
            first = _status(cluster, name)
            assert first.leader == preferred
            await producer.wait_ack(name, min_epoch=first.leader_epoch, after=0, timeout=60)

            # The preferred leader fails: another ISR member leads, producers follow it.
            await cluster.brokers[preferred].signal(signal.SIGKILL)
            await cluster.brokers[preferred].wait()
            await cluster.controller.wait_for(
                lambda: _status(cluster, name).leader not in (None, preferred), 60, "a failover"
            )
            failover = _status(cluster, name)
            old = failover.leader
            assert old is not None
            await producer.wait_ack(
                name, min_epoch=failover.leader_epoch, after=time.monotonic(), timeout=60
            )

            # It comes back, catches up, rejoins the ISR, and the balance check moves
            # leadership back to it under the running writes.
            await cluster.brokers[preferred].start()
            await cluster.controller.wait_for(
                lambda: _status(cluster, name).leader == preferred, 60, "leadership back on 1"
            )
            moved = _status(cluster, name)
            assert moved.leader_epoch > failover.leader_epoch
            assert moved.partition_epoch > failover.partition_epoch
            assert moved.epoch_history[-1].epoch == moved.leader_epoch
            assert moved.epoch_history[-1].leader == preferred
            assert old in moved.isr, "the old leader stays in sync and follows"
            elected = [
                e
                for n, e in cluster.controller.events
                if n == name and e.reason is EventReason.PREFERRED_LEADER_ELECTED
            ]
            assert [f"leaderEpoch {moved.leader_epoch} " in e.message for e in elected] == [True]

            # Producers were redirected: writes are acknowledged in the new epoch.
            await producer.wait_ack(
                name, min_epoch=moved.leader_epoch, after=time.monotonic(), timeout=60
            )
            # The old leader stopped accepting: it names the new leader instead.
            refusal = await _refused_by(cluster, old, name)
            assert refusal.code == "NOT_LEADER_OR_FOLLOWER", refusal.body
            assert refusal.error.get("leader") == preferred, refusal.body
            # Every partition is led by its preferred replica again.
            assert [_status(cluster, n).leader for n in NAMES] == [1, 2, 3]
            await producer.wait_each(NAMES, after=time.monotonic(), timeout=60)
        finally:
            await producer.stop()
        logs = {n: await read_back(client, n) for n in NAMES}
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]
    handed_over = [a for a in producer.acks if a.leader_epoch == failover.leader_epoch]
    assert any(a.partition == name for a in handed_over), "the old leader acknowledged none"


async def _refused_by(cluster: Cluster, broker: int, name: str) -> ApiError:
    """The refusal of a write sent straight to `broker`, once it has learnt that it no
    longer leads `name` (one heartbeat answer after the status write)."""
    attempt = 0
    while True:
        attempt += 1
        # A value per attempt: one the old leader still took must not read as a duplicate.
        body = {"records": [{"value": f"to-the-old-leader-{attempt}"}]}
        try:
            await cluster.call(
                "POST",
                broker,
                f"/v1/partitions/{name}/records",
                params={"acks": "all", "timeoutMs": 1000},
                json=body,
            )
        except ApiError as exc:
            if exc.code == "NOT_LEADER_OR_FOLLOWER":
                return exc
        except (aiohttp.ClientError, OSError):
            pass
        cluster.assert_some_broker_runs(f"broker {broker} to refuse writes to {name}")
        await asyncio.sleep(0.05)
