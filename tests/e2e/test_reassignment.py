"""Partition reassignment on real processes, under acks=all load: nothing acknowledged is lost.

One embedded cluster of six brokers serves the three scenarios, each on its own
partition: three replicas moved to three other brokers; three grown to five and
shrunk to three others (leadership moves off a removed leader); and a move whose
leader is SIGKILLed while the move waits for a target replica (paused). Each
checks that the status shows the move (addingReplicas, removingReplicas, the
Reassigning condition) and never claims it done before it is, that epochs never
go back, that removed brokers delete their copy, and the workload's checker
(the simulator's checks on what real clients saw and what the replicas hold).
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from epochlog.resources import ConditionStatus, ConditionType, PartitionStatus
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, WorkloadConfig
from epochlog_tools.devcluster.partitions import partition_manifest
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import (
    StatusPoll,
    create_partition,
    data_dir,
    gone,
    hosted,
    status_of,
    until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

BROKERS = 6
MOVE_S = 90
"""Time allowed for a move to finish on a busy machine (a note is printed, not a verdict)."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    root = tmp_path_factory.mktemp("reassign") / "cluster"
    c = LocalCluster(root, brokers=BROKERS, settings=e2e_settings())
    try:
        await c.up(example_partitions=False)
    except BaseException:
        print_logs(c)
        raise
    try:
        yield c
    finally:
        await c.down()


async def reassign(cluster: LocalCluster, name: str, replicas: Sequence[int]) -> None:
    topic, _, index = name.rpartition("-")
    await cluster.apply(
        partition_manifest(
            topic,
            int(index),
            replication_factor=len(replicas),
            replica_lag_time_max_ms=cluster.settings.replica_lag_time_max_ms,
            replicas=replicas,
        )
    )


def settled_on(s: PartitionStatus, replicas: Sequence[int]) -> bool:
    reassigning = s.condition(ConditionType.REASSIGNING)
    return (
        s.replicas == tuple(replicas)
        and set(s.isr) == set(replicas)
        and s.leader in replicas
        and not s.adding_replicas
        and not s.removing_replicas
        and reassigning is not None
        and reassigning.status is ConditionStatus.FALSE
    )


async def wait_settled(cluster: LocalCluster, name: str, replicas: Sequence[int]) -> None:
    async def done() -> PartitionStatus | None:
        s = await status_of(cluster, name)
        return s if settled_on(s, replicas) else None

    await until(done, MOVE_S, f"{name} to settle on replicas {list(replicas)}")


async def wait_deleted(cluster: LocalCluster, w: Workload, broker: int, name: str) -> None:
    """Until `broker` no longer hosts `name` and its directory is gone."""
    directory: Path = data_dir(cluster, broker) / name

    async def deleted() -> bool:
        return not directory.exists() and await hosted(w, broker, name) is None

    await until(deleted, 30, f"broker {broker} to delete its replica of {name}")


def check_statuses(poll: StatusPoll, target: Sequence[int]) -> None:
    """Epochs never went back, and no status claims the target before it was reached."""
    assert poll.epochs_went_back() == []
    for s in poll.seen:
        if s.adding_replicas or s.removing_replicas:
            cond = s.condition(ConditionType.REASSIGNING)
            assert cond is not None, s
            assert cond.status is ConditionStatus.TRUE, s
            assert s.leader is None or s.leader in s.isr, s


async def with_load(cluster: LocalCluster, name: str) -> tuple[Workload, StatusPoll]:
    w = Workload(cluster, [name], WorkloadConfig(), log=print)
    poll = StatusPoll(cluster, name)
    poll.start()
    await w.start()

    async def acked() -> bool:
        return sum(1 for a in w.history.acks if a.partition == name) >= 50

    await until(acked, 30, f"50 acknowledged records in {name}")
    return w, poll


async def finish(cluster: LocalCluster, w: Workload, poll: StatusPoll) -> None:
    result = await w.finish(produce_after_heal_s=1, settle_timeout_s=60)
    await poll.stop()
    if not result.ok:
        print_logs(cluster)
    assert result.ok, result.report
    assert result.acked >= 50  # with_load waited for 50


async def test_reassignment_rf3_to_three_other_brokers_under_load(cluster: LocalCluster) -> None:
    name = "moved-0"
    await create_partition(cluster, name, [1, 2, 3])
    w, poll = await with_load(cluster, name)
    try:
        w.fault("reassign to [4, 5, 6]")
        await reassign(cluster, name, [4, 5, 6])
        await wait_settled(cluster, name, [4, 5, 6])
        for b in (1, 2, 3):
            await wait_deleted(cluster, w, b, name)
        await finish(cluster, w, poll)
    finally:
        await poll.stop()
        await w.close()
    check_statuses(poll, [4, 5, 6])
    assert any(s.removing_replicas == (1, 2, 3) for s in poll.seen)


async def test_reassignment_rf3_to_5_to_3_under_load(cluster: LocalCluster) -> None:
    name = "grown-0"
    await create_partition(cluster, name, [1, 2, 3])
    w, poll = await with_load(cluster, name)
    try:
        w.fault("reassign to [1, 2, 3, 4, 5]")
        await reassign(cluster, name, [1, 2, 3, 4, 5])
        await wait_settled(cluster, name, [1, 2, 3, 4, 5])
        epoch = (await status_of(cluster, name)).leader_epoch
        w.fault("reassign to [3, 4, 5] (the leader, 1, is removed)")
        await reassign(cluster, name, [3, 4, 5])
        await wait_settled(cluster, name, [3, 4, 5])
        s = await status_of(cluster, name)
        assert s.leader == 3, s
        assert s.leader_epoch > epoch, s
        for b in (1, 2):
            await wait_deleted(cluster, w, b, name)
        await finish(cluster, w, poll)
    finally:
        await poll.stop()
        await w.close()
    check_statuses(poll, [3, 4, 5])
    assert any(s.adding_replicas == (4, 5) for s in poll.seen)


async def test_leader_sigkilled_in_the_middle_of_a_reassignment(cluster: LocalCluster) -> None:
    name = "killed-0"
    await create_partition(cluster, name, [4, 5, 6])
    w, poll = await with_load(cluster, name)
    try:
        # Broker 3 is stopped, so the move waits for it; then the leader dies mid-move.
        w.fault("SIGSTOP broker-3")
        cluster.pause("broker-3")
        w.fault("reassign to [1, 2, 3]")
        await reassign(cluster, name, [1, 2, 3])

        async def moving() -> bool:
            s = await status_of(cluster, name)
            return s.adding_replicas == (1, 2, 3) and {1, 2} <= set(s.isr)

        await until(moving, MOVE_S, f"{name}: brokers 1 and 2 in sync while 3 is stopped")
        leader = (await status_of(cluster, name)).leader
        assert leader in (4, 5, 6)
        w.fault(f"SIGKILL broker-{leader} (the leader, mid-move)")
        cluster.kill(f"broker-{leader}", signal.SIGKILL)
        await gone(cluster, f"broker-{leader}")
        await cluster.wait_leader(name, not_in=[leader], timeout=MOVE_S)
        w.fault("SIGCONT broker-3")
        cluster.resume("broker-3")
        w.fault(f"restart broker-{leader}")
        await cluster.restart(f"broker-{leader}")
        await wait_settled(cluster, name, [1, 2, 3])
        for b in (4, 5, 6):
            await wait_deleted(cluster, w, b, name)
        await finish(cluster, w, poll)
    finally:
        if cluster.processes["broker-3"].paused:
            cluster.resume("broker-3")
        await poll.stop()
        await w.close()
    check_statuses(poll, [1, 2, 3])
