"""Partition reassignment: the pure state machine, its invariants, and the whole decision."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.protocol.heartbeat import HeldAssignment, IsrProposal
from epochlog.resources import ConditionStatus, ConditionType, PartitionStatus
from epochlog_operator.assignment import BrokerLoad, added_replicas
from epochlog_operator.events import EventReason
from epochlog_operator.reassignment import (
    Placement,
    StepKind,
    grown_or_shrunk,
    next_step,
    reassigned_away,
    retarget,
)

from .harness import Controller, follower_report, leader_report, make_spec, reasons, started

BROKERS = (1, 2, 3, 4, 5, 6)


# --- the state machine --------------------------------------------------------------------


def test_retarget_keeps_the_target_first_and_the_removed_replicas_after_it() -> None:
    moved = retarget(Placement((1, 2, 3)), (4, 5, 6))
    assert moved == Placement((4, 5, 6, 1, 2, 3), adding=(4, 5, 6), removing=(1, 2, 3))
    assert moved.target == (4, 5, 6)


def test_retarget_to_the_current_target_changes_nothing() -> None:
    settled = Placement((1, 2, 3))
    assert retarget(settled, (1, 2, 3)) is settled


def test_reverting_mid_move_makes_the_adding_replicas_the_removed_ones() -> None:
    moving = retarget(Placement((1, 2, 3)), (4, 5, 6))
    back = retarget(moving, (1, 2, 3))
    assert back == Placement((1, 2, 3, 4, 5, 6), adding=(), removing=(4, 5, 6))


def test_a_new_target_mid_move_adds_only_replicas_that_were_never_settled() -> None:
    moving = retarget(Placement((1, 2, 3)), (4, 5, 6))
    assert retarget(moving, (1, 2, 4)) == Placement(
        (1, 2, 4, 5, 6, 3), adding=(4,), removing=(5, 6, 3)
    )


def test_a_move_waits_until_every_target_replica_is_in_the_isr() -> None:
    moving = retarget(Placement((1, 2, 3)), (1, 2, 3, 4, 5))
    step = next_step(moving, leader=1, isr=(1, 2, 3, 4), min_insync_replicas=2, eligible={1, 2})
    assert step.kind is StepKind.WAIT
    assert step.waiting_for == (5,)


def test_a_move_off_the_leader_elects_the_first_eligible_target_replica() -> None:
    moving = retarget(Placement((1, 2, 3)), (4, 5, 6))
    isr = (1, 2, 3, 4, 5, 6)
    step = next_step(moving, leader=1, isr=isr, min_insync_replicas=2, eligible={5, 6})
    assert step.kind is StepKind.COMPLETE
    assert (step.leader, step.placement, step.isr) == (5, Placement((4, 5, 6)), (4, 5, 6))


def test_a_move_without_an_eligible_successor_waits() -> None:
    moving = retarget(Placement((1, 2, 3)), (4, 5, 6))
    step = next_step(moving, leader=1, isr=BROKERS, min_insync_replicas=2, eligible={1})
    assert step.kind is StepKind.WAIT


def test_shrinking_keeps_isr_members_first_and_growing_appends_the_chosen() -> None:
    assert grown_or_shrunk((1, 2, 3, 4, 5), 3, isr=(1, 3, 4, 5), extra=None) == (1, 3, 4)
    assert grown_or_shrunk((1, 2, 3), 5, isr=(1, 2, 3), extra=(6, 4)) == (1, 2, 3, 6, 4)
    assert grown_or_shrunk((1, 2, 3), 5, isr=(1, 2, 3), extra=(6,)) is None


def test_shrinking_keeps_in_sync_replicas_of_distinct_racks_first() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    everyone = (1, 2, 3, 4, 5)
    assert grown_or_shrunk(everyone, 3, isr=everyone, extra=None, racks=racks) == (1, 3, 5)
    # In-sync members go first even when an out-of-sync one would add a rack.
    assert grown_or_shrunk(everyone, 3, isr=(1, 2, 3), extra=None, racks=racks) == (1, 2, 3)
    assert grown_or_shrunk(everyone, 2, isr=(1, 2, 5), extra=None, racks=racks) == (1, 5)


def test_growing_adds_replicas_on_racks_the_partition_does_not_span_yet() -> None:
    racks = {1: "a", 2: "b", 3: "a", 4: "b", 5: "c", 6: "d"}
    load = {5: BrokerLoad(replicas=9), 6: BrokerLoad(replicas=9)}
    got = added_replicas(
        partition=0, count=2, current=(1, 2), live_brokers=racks, load=load, racks=racks
    )
    assert got is not None
    assert sorted(got) == [5, 6]
    # Without racks the least loaded brokers are taken.
    plain = added_replicas(partition=0, count=2, current=(1, 2), live_brokers=racks, load=load)
    assert plain is not None
    assert sorted(plain) == [3, 4]
    # Once every rack is used, load decides.
    assert added_replicas(
        partition=0, count=1, current=(1, 2, 5, 6), live_brokers=racks, load=load, racks=racks
    ) in ((3,), (4,))
    too_few = added_replicas(partition=0, count=3, current=(1, 2), live_brokers=(3, 4), load={})
    assert too_few is None


def _held(replicas: tuple[int, ...], partition_epoch: int) -> HeldAssignment:
    return HeldAssignment(
        leader=replicas[0],
        leader_epoch=1,
        partition_epoch=partition_epoch,
        isr=replicas,
        replicas=replicas,
    )


def test_only_a_replica_a_completed_move_left_out_is_told_to_delete() -> None:
    status = PartitionStatus(
        leader=4, leader_epoch=2, partition_epoch=5, isr=(4, 5, 6), replicas=(4, 5, 6)
    )
    removed = follower_report(1, assignment=_held((1, 2, 3), 3))
    assert reassigned_away(1, status, removed)
    # Merely missing: the broker holds no assignment naming it, or a newer one.
    assert not reassigned_away(1, status, follower_report(1))
    assert not reassigned_away(1, status, follower_report(1, assignment=_held((2, 3, 7), 3)))
    assert not reassigned_away(1, status, follower_report(1, assignment=_held((1, 2, 3), 5)))
    # A move still in progress, a replica still wanted, a status without an ISR.
    moving = status.model_copy(
        update={"replicas": (4, 5, 6, 1), "removing_replicas": (1,), "isr": (4, 5, 6, 1)}
    )
    assert not reassigned_away(1, moving, removed)
    assert not reassigned_away(4, status, follower_report(1, assignment=_held((4, 5, 6), 3)))
    assert not reassigned_away(1, PartitionStatus(replicas=(4, 5, 6)), removed)


@st.composite
def _histories(draw: st.DrawFn) -> tuple[int, list[tuple[str, tuple[int, ...]]]]:
    min_isr = draw(st.integers(1, 3))
    ops: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["target", "join", "leave", "fail", "step"]))
        if kind == "target":
            size = draw(st.integers(max(min_isr, 1), 5))
            ops.append((kind, tuple(draw(st.permutations(BROKERS))[:size])))
        else:
            ops.append((kind, (draw(st.sampled_from(BROKERS)),)))
    return min_isr, ops


@settings(max_examples=300, deadline=None)
@given(_histories())
def test_a_move_never_leaves_fewer_than_min_isr_in_sync_and_the_leader_always_in_the_isr(
    history: tuple[int, list[tuple[str, tuple[int, ...]]]],
) -> None:
    min_isr, ops = history
    placement = Placement((1, 2, 3))
    isr: list[int] = [1, 2, 3]
    leader: int | None = 1
    for kind, arg in ops:
        if kind == "target":
            placement = retarget(placement, arg)
        elif kind == "join" and arg[0] in placement.replicas and arg[0] not in isr:
            isr.append(arg[0])
        elif kind == "leave" and arg[0] in isr and arg[0] != leader and len(isr) > 1:
            isr.remove(arg[0])
        elif kind == "fail" and leader == arg[0]:
            others = [m for m in isr if m != leader]
            leader = others[0] if others else None
            if others:
                isr = others
        step = next_step(
            placement,
            leader=leader,
            isr=isr,
            min_insync_replicas=min_isr,
            eligible=set(isr) - {arg[0]} if kind == "fail" else set(isr),
        )
        if step.kind is StepKind.COMPLETE:
            assert len(step.isr) >= min_isr
            assert set(step.isr) <= set(step.placement.replicas)
            placement, isr = step.placement, list(step.isr)
            if step.leader is not None:
                assert step.leader in step.isr
                leader = step.leader
        if leader is not None:
            assert leader in isr
            assert leader in placement.replicas
        assert set(isr) <= set(placement.replicas)
        assert set(placement.adding).isdisjoint(placement.removing)
        assert set(placement.adding) | set(placement.removing) <= set(placement.replicas)


# --- the whole decision -------------------------------------------------------------------


def _beat_all(c: Controller, now: int, brokers: tuple[int, ...], proposals: tuple[int, ...] = ()):
    """Every broker heartbeats; the leader reports every follower caught up and proposes
    `proposals` for the ISR."""
    for b in brokers:
        parts = []
        s = c.status
        if s is not None and b == s.leader:
            followers = {r: now for r in s.replicas if r != b}
            offered = [IsrProposal(replica=r, broker_epoch=1, log_end_offset=0) for r in proposals]
            parts = [leader_report(s, caught_up=followers, proposals=offered)]
        c.beat(b, now, partitions=parts)


def _reassigning(s: PartitionStatus) -> ConditionStatus:
    cond = s.condition(ConditionType.REASSIGNING)
    assert cond is not None
    return cond.status


def test_new_replicas_on_other_brokers_join_then_leadership_moves_and_the_old_ones_leave() -> None:
    c = started()
    _beat_all(c, 500, BROKERS)
    c.decide(500)
    before = c.current
    c.spec = make_spec(replicas=(4, 5, 6))
    c.generation = 2
    d = c.decide(1_000)
    s = c.current
    # Step 1: the full set, the leader stays, the status says the move is not done.
    assert s.replicas == (4, 5, 6, 1, 2, 3)
    assert (s.adding_replicas, s.removing_replicas) == ((4, 5, 6), (1, 2, 3))
    assert (s.leader, s.leader_epoch) == (1, before.leader_epoch)
    assert s.partition_epoch == before.partition_epoch + 1
    assert s.observed_generation == 2
    assert _reassigning(s) is ConditionStatus.TRUE
    assert reasons(d) == [EventReason.REASSIGNMENT_STARTED]

    _beat_all(c, 1_500, BROKERS, proposals=(4, 5))
    c.decide(1_500)
    assert c.current.replicas == (4, 5, 6, 1, 2, 3)  # 6 is not in sync yet
    assert _reassigning(c.current) is ConditionStatus.TRUE

    _beat_all(c, 2_000, BROKERS, proposals=(6,))
    d = c.decide(2_000)
    s = c.current
    # Steps 2 and 3 in one write: 4 leads a new epoch, replicas are the target.
    assert (s.leader, s.replicas, s.isr) == (4, (4, 5, 6), (4, 5, 6))
    assert s.leader_epoch == before.leader_epoch + 1
    assert (s.adding_replicas, s.removing_replicas) == ((), ())
    assert _reassigning(s) is ConditionStatus.FALSE
    assert EventReason.LEADER_ELECTED in reasons(d)
    assert EventReason.REASSIGNMENT_COMPLETED in reasons(d)


def test_a_move_to_a_broker_that_never_comes_is_reverted_by_setting_the_old_replicas() -> None:
    c = started()
    _beat_all(c, 500, (1, 2, 3, 4, 5))
    c.decide(500)
    c.spec = make_spec(replicas=(4, 5, 6))
    c.decide(1_000)
    _beat_all(c, 1_500, (1, 2, 3, 4, 5), proposals=(4, 5))
    c.decide(1_500)
    assert set(c.current.isr) == {1, 2, 3, 4, 5}
    assert _reassigning(c.current) is ConditionStatus.TRUE  # broker 6 never heartbeats

    c.spec = make_spec(replicas=(1, 2, 3))
    d = c.decide(2_000)
    s = c.current
    assert (s.leader, s.replicas, s.isr) == (1, (1, 2, 3), (1, 2, 3))
    assert (s.adding_replicas, s.removing_replicas) == ((), ())
    assert EventReason.LEADER_ELECTED not in reasons(d)


def test_growing_and_shrinking_the_replication_factor_never_leaves_min_isr() -> None:
    c = started()
    _beat_all(c, 500, (1, 2, 3, 4, 5))
    c.decide(500)
    c.spec = make_spec(replicas=(1, 2, 3, 4, 5), replication_factor=5)
    c.decide(1_000)
    assert c.current.adding_replicas == (4, 5)
    _beat_all(c, 1_500, (1, 2, 3, 4, 5), proposals=(4, 5))
    c.decide(1_500)
    assert (c.current.replicas, c.current.isr) == ((1, 2, 3, 4, 5), (1, 2, 3, 4, 5))
    epoch = c.current.leader_epoch

    c.spec = make_spec(replicas=(3, 4, 5), replication_factor=3)
    c.decide(2_000)
    s = c.current
    assert (s.replicas, s.isr, s.leader) == ((3, 4, 5), (3, 4, 5), 3)
    assert s.leader_epoch == epoch + 1


def test_a_grown_replication_factor_spans_the_racks_the_partition_lacked() -> None:
    racks = {1: "a", 2: "b", 3: "a", 4: "c"}
    # Broker 4 looks loaded: load alone would pick broker 3 of rack "a" again.
    c = Controller(make_spec(replicas=()), load={4: BrokerLoad(replicas=5)})
    for b, rack in racks.items():
        c.beat(b, 0, rack=rack)
    c.decide(0)
    first = c.current.replicas
    assert len(first) == 3
    assert {racks[b] for b in first} == {"a", "b", "c"}
    c.spec = make_spec(replicas=(), replication_factor=2)
    c.decide(1_000)
    shrunk = c.current.replicas
    assert len(shrunk) == 2
    assert len({racks[b] for b in shrunk}) == 2
    c.spec = make_spec(replicas=(), replication_factor=3)
    c.decide(1_500)
    (added,) = c.current.adding_replicas
    assert {racks[b] for b in (*shrunk, added)} == {"a", "b", "c"}


def test_operator_assigned_replicas_follow_the_replication_factor() -> None:
    c = started(make_spec(replicas=()))
    _beat_all(c, 500, (1, 2, 3, 4))
    c.decide(500)
    c.spec = make_spec(replicas=(), replication_factor=4)
    c.decide(1_000)
    assert c.current.adding_replicas == (4,)
    _beat_all(c, 1_500, (1, 2, 3, 4), proposals=(4,))
    c.decide(1_500)
    assert c.current.replicas == (1, 2, 3, 4)
    assert not c.current.adding_replicas
    c.spec = make_spec(replicas=(), replication_factor=2)
    c.decide(2_000)
    assert c.current.replicas == (1, 2)
