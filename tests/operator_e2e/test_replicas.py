"""Two operator processes at once, operator restarts, and a Partition deleted and created again.

Whatever the operators do, leader epochs seen in the status never go back and
each epoch has one leader (`StatusWatch.assert_epochs_safe`).
"""

from __future__ import annotations

import asyncio

from epochlog.resources import PartitionStatus
from epochlog_tools.harness.scripted_brokers import ScriptedBrokers
from tests.operator_e2e.conftest import SESSION_MS, Env, Operator, until

FAILOVER_S = SESSION_MS / 1000 + 2
NAMES = ("orders-0", "orders-1", "orders-2")


def led(s: PartitionStatus) -> bool:
    return s.leader is not None and len(s.isr) == 3


async def fail_leader(env: Env, cluster: ScriptedBrokers, name: str) -> PartitionStatus:
    """Kill the leader of `name`, wait for the next one, then bring the old one back."""
    before = env.watch.latest(name)
    assert before is not None
    assert before.leader is not None
    old = cluster.brokers[before.leader]
    old.kill()
    after = await env.watch.wait_for(
        name,
        lambda s: s.leader_epoch > before.leader_epoch and s.leader is not None,
        FAILOVER_S,
        f"a leader after broker {old.id}",
    )
    old.restart()
    await env.watch.wait_for(name, led, 5, "the restarted broker back in the ISR")
    return after


async def ready_operator(env: Env, op: Operator, timeout: float = 10) -> None:
    await op.wait_ready(env.session, timeout)


async def readyz(env: Env, op: Operator) -> tuple[int, str]:
    return await op.get(env.session, "/readyz")


async def test_a_second_operator_stands_by_until_the_first_stops(env: Env) -> None:
    first = await env.operator()
    second = await env.operator(ready=False)
    async with env.cluster([1, 2, 3]) as cluster:
        for name in NAMES:
            await env.api.create(name)
        for name in NAMES:
            await env.watch.wait_for(name, led, 10, "a leader and 3 in sync")
        await fail_leader(env, cluster, "orders-0")

        # The second replica has announced itself but acts on nothing; it is Ready.
        status, role = await readyz(env, second)
        assert status == 200
        assert role.startswith("standing by"), role
        assert await second.metric(env.session, "epochlog_operator_status_writes_total") == 0
        assert await second.metric(env.session, "epochlog_operator_heartbeats_total") > 0

        await first.stop()
        await ready_operator(env, second)
        assert await second.metric(env.session, "epochlog_operator_active") == 1
        epochs = {n: s.leader_epoch for n in NAMES if (s := env.watch.latest(n)) is not None}
        after = await fail_leader(env, cluster, "orders-1")
        assert after.leader_epoch == epochs["orders-1"] + 1
        assert await second.metric(env.session, "epochlog_operator_status_writes_total") > 0
    for name in NAMES:
        env.watch.assert_epochs_safe(name)


async def test_two_operators_acting_at_once_never_write_conflicting_epochs(env: Env) -> None:
    # No peering: both decide and write; only the resourceVersion check keeps them apart.
    a = await env.operator("--standalone")
    b = await env.operator("--standalone")
    async with env.cluster([1, 2, 3, 4]) as cluster:
        for name in NAMES:
            await env.api.create(name)
        for name in NAMES:
            await env.watch.wait_for(name, led, 10, "a leader and 3 in sync")
        for name in (*NAMES, "orders-0"):
            await fail_leader(env, cluster, name)
    writes = [
        await op.metric(env.session, "epochlog_operator_status_writes_total") for op in (a, b)
    ]
    assert all(w > 0 for w in writes), writes
    for name in NAMES:
        env.watch.assert_epochs_safe(name)
        history = env.watch.latest(name)
        assert history is not None
        epochs = [e.epoch for e in history.epoch_history]
        assert epochs == sorted(set(epochs)), epochs


async def test_an_operator_restart_keeps_epochs_monotonic(env: Env) -> None:
    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.create("orders-0")
        await env.watch.wait_for("orders-0", led, 10, "a leader and 3 in sync")
        before = await fail_leader(env, cluster, "orders-0")

        await op.kill()
        restarted = await env.operator("--standalone")
        # The new process waits a session timeout before fencing anyone, then keeps the leader.
        await asyncio.sleep(SESSION_MS / 1000 + 0.5)
        kept = env.watch.latest("orders-0")
        assert kept is not None
        assert (kept.leader, kept.leader_epoch) == (before.leader, before.leader_epoch)

        after = await fail_leader(env, cluster, "orders-0")
        assert after.leader_epoch == before.leader_epoch + 1
        assert await restarted.metric(env.session, "epochlog_operator_elections_total") == 1

        # A restart while a leader is down: the new process still elects, one epoch up.
        await restarted.kill()
        current = env.watch.latest("orders-0")
        assert current is not None
        assert current.leader is not None
        cluster.brokers[current.leader].kill()
        await env.operator("--standalone")
        elected = await env.watch.wait_for(
            "orders-0", lambda s: s.leader not in (None, current.leader), FAILOVER_S + 1, "leader"
        )
        assert elected.leader_epoch == current.leader_epoch + 1
    env.watch.assert_epochs_safe("orders-0")


async def test_a_recreated_partition_never_goes_below_the_epochs_brokers_hold(env: Env) -> None:
    await env.operator("--standalone")
    async with env.cluster([1, 2, 3]) as cluster:
        obj = await env.api.create("orders-0")
        await env.watch.wait_for("orders-0", led, 10, "a leader and 3 in sync")
        await fail_leader(env, cluster, "orders-0")
        last = await fail_leader(env, cluster, "orders-0")
        held = max(b.replica("orders-0").leader_epoch for b in cluster.brokers.values())
        assert held == last.leader_epoch

        await env.api.delete("orders-0")
        await asyncio.sleep(0.3)
        recreated = await env.api.create("orders-0")
        assert recreated["metadata"]["uid"] != obj["metadata"]["uid"]
        # Restored from the assignment the operator handed out (the leader still leads
        # its epoch), or elected anew above it: never below.
        fresh = await env.watch.wait_for(
            "orders-0",
            lambda s: s.leader is not None and bool(s.isr),
            10,
            "a leader of the new Partition",
        )
        assert fresh.leader_epoch >= held, (fresh.leader_epoch, held)
        assert fresh.partition_epoch >= last.partition_epoch
        assert set(fresh.replicas) == {1, 2, 3}
        # The brokers follow the new epoch.
        assert fresh.leader is not None
        leader = cluster.brokers[fresh.leader].replica("orders-0")
        await until(
            lambda: leader.leader_epoch == fresh.leader_epoch, 5, "brokers on the new epoch"
        )
