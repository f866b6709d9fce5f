"""Creating a Partition, leader failover, ISR by lag, and Offline when no ISR member is left."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from epochlog.resources import ConditionType, PartitionStatus
from tests.operator_e2e.conftest import NO_FENCING, SESSION_MS, Env, until


def ready(s: PartitionStatus) -> bool:
    c = s.condition(ConditionType.READY)
    return c is not None and c.status == "True"


async def test_creating_a_partition_assigns_replicas_and_elects_a_leader(env: Env) -> None:
    # Long sessions: a heartbeat stalled past the default 1 s on a busy machine fenced every
    # broker once, and the second election it made is not what this test counts.
    op = await env.operator("--standalone", *NO_FENCING)
    async with env.cluster([1, 2, 3, 4]) as cluster:
        await env.api.create("orders-0")
        status = await env.watch.wait_for("orders-0", ready, 10, "Ready")
        assert len(status.replicas) == 3
        assert set(status.replicas) <= {1, 2, 3, 4}
        assert status.leader in status.replicas
        assert status.leader_epoch == 1
        assert set(status.isr) == set(status.replicas)
        leader = cluster.brokers[status.leader].replica("orders-0")
        await until(lambda: leader.role == "leader", 5, "the leader to take the assignment")
        assert await op.metric(env.session, "epochlog_operator_elections_total") == 1
        await env.api.wait_events("orders-0", {"LeaderElected"})

        # A spec change is decided at once: observedGeneration follows, conditions too.
        changed = await env.api.patch_spec("orders-0", minInsyncReplicas=3)
        assert changed["metadata"]["generation"] == 2
        seen = await env.watch.wait_for(
            "orders-0", lambda s: s.observed_generation == 2, 5, "observedGeneration 2"
        )
        assert all(c.observed_generation == 2 for c in seen.conditions)
        assert (seen.leader, seen.leader_epoch) == (status.leader, status.leader_epoch)


async def test_partitions_created_together_spread_replicas_and_leaders(env: Env) -> None:
    await env.operator("--standalone")
    names = [f"orders-{i}" for i in range(8)]
    async with env.cluster([1, 2, 3, 4]) as cluster:
        await until(lambda: cluster.all_heard, 5, "a heartbeat answer to every broker")
        await asyncio.gather(*(env.api.create(n) for n in names))
        statuses = [await env.watch.wait_for(n, ready, 10, "Ready") for n in names]
    replicas = Counter(b for s in statuses for b in s.replicas)
    leaders = Counter(s.leader for s in statuses)
    assert replicas == {1: 6, 2: 6, 3: 6, 4: 6}, replicas
    assert leaders == {1: 2, 2: 2, 3: 2, 4: 2}, leaders


async def test_a_leader_whose_heartbeats_stop_is_replaced_within_the_session_timeout(
    env: Env,
) -> None:
    await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0")
        first = await env.watch.wait_for(
            "orders-0", lambda s: ready(s) and len(s.isr) == 3, 10, "Ready with 3 in sync"
        )
        assert first.leader is not None
        old = cluster.brokers[first.leader]
        await until(lambda: old.replica("orders-0").high_watermark > 0, 5, "a high watermark")

        # The leader's process goes on (it still thinks it leads) but its heartbeats stop.
        # How soon it is replaced depends on the machine as well: the fencing moment is
        # asserted on the operator's clock in tests/operator/test_decide.py, the wall-clock
        # failover time (goal: session timeout + 1 s) by benchmarks/failover_bench.py.
        old.silence()
        new = await env.watch.wait_for(
            "orders-0",
            lambda s: s.leader not in (None, first.leader),
            SESSION_MS / 1000 + 2,
            "a new leader",
        )
        assert new.leader_epoch == first.leader_epoch + 1
        assert new.leader in first.isr
        assert first.leader not in new.isr
        assert new.epoch_history[-1].leader == new.leader
        await env.api.wait_events("orders-0", {"LeaderElected", "BrokerFenced", "IsrShrunk"})
        env.watch.assert_epochs_safe("orders-0")


async def test_a_lagging_follower_leaves_the_isr_and_rejoins_on_the_leaders_proposal(
    env: Env,
) -> None:
    await env.operator("--standalone", *NO_FENCING)
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0", replicas=[1, 2, 3], replicaLagTimeMaxMs=1000)
        first = await env.watch.wait_for(
            "orders-0", lambda s: ready(s) and len(s.isr) == 3, 10, "Ready with 3 in sync"
        )
        assert first.leader == 1
        await until(lambda: cluster.brokers[1].replica("orders-0").role == "leader", 5, "leader")

        cluster.brokers[3].stall("orders-0")
        shrunk = await env.watch.wait_for("orders-0", lambda s: 3 not in s.isr, 4, "ISR shrink")
        assert shrunk.isr == (1, 2)
        assert shrunk.leader_epoch == first.leader_epoch
        assert shrunk.partition_epoch > first.partition_epoch

        # Caught up again, but the leader does not propose it: it stays out.
        cluster.brokers[1].proposing = False
        cluster.brokers[3].stall("orders-0", False)
        leader = cluster.brokers[1].replica("orders-0")
        await until(lambda: leader.caught_up.get(3, 0) > time.time() * 1000 - 200, 3, "catch-up")
        time_out = time.monotonic() + 1.5
        while time.monotonic() < time_out:
            latest = env.watch.latest("orders-0")
            assert latest is not None
            assert 3 not in latest.isr
            await env.api.ok("GET", "/version")

        cluster.brokers[1].proposing = True
        grown = await env.watch.wait_for("orders-0", lambda s: 3 in s.isr, 3, "ISR expansion")
        assert grown.isr == (1, 2, 3)
        assert grown.leader_epoch == first.leader_epoch
        await env.api.wait_events("orders-0", {"IsrShrunk", "IsrExpanded"})
        env.watch.assert_epochs_safe("orders-0")


async def test_no_live_isr_member_leaves_the_partition_offline_without_an_election(
    env: Env,
) -> None:
    await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create(
            "orders-0", replicas=[1, 2, 3], minInsyncReplicas=1, replicaLagTimeMaxMs=1000
        )
        await env.watch.wait_for("orders-0", lambda s: len(s.isr) == 3, 10, "3 in sync")
        await until(lambda: cluster.brokers[1].replica("orders-0").role == "leader", 5, "leader")
        cluster.brokers[3].stall("orders-0")
        await env.watch.wait_for("orders-0", lambda s: s.isr == (1, 2), 4, "ISR [1, 2]")

        # The follower goes first (killing both at once would race their last
        # heartbeats: whichever is heard of last would rightly be elected).
        cluster.brokers[2].kill()
        shrunk = await env.watch.wait_for(
            "orders-0", lambda s: s.isr == (1,), SESSION_MS / 1000 + 2, "ISR [1]"
        )
        cluster.brokers[1].kill()
        offline = await env.watch.wait_for(
            "orders-0", lambda s: s.leader is None, SESSION_MS / 1000 + 2, "no leader"
        )
        condition = offline.condition(ConditionType.OFFLINE)
        assert condition is not None
        assert condition.status == "True"
        assert offline.leader_epoch == shrunk.leader_epoch
        # Broker 3 is live but was out of sync: without uncleanLeaderElection it must not lead.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            latest = env.watch.latest("orders-0")
            assert latest is not None
            assert latest.leader is None
            assert latest.leader_epoch == shrunk.leader_epoch
            await env.api.ok("GET", "/version")
        await env.api.wait_events("orders-0", {"PartitionOffline"})
        env.watch.assert_epochs_safe("orders-0")
