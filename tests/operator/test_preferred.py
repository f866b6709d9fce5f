"""Preferred leader election: which partitions move when, and the election that moves them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hypothesis import given
from hypothesis import strategies as st

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    HeldAssignment,
    PartitionReport,
    PartitionRole,
)
from epochlog.resources import EpochHistoryEntry, PartitionSpec, PartitionStatus
from epochlog_operator.decide import PartitionInput, decide
from epochlog_operator.events import EventReason
from epochlog_operator.liveness import Liveness
from epochlog_operator.observations import ReceivedHeartbeat
from epochlog_operator.preferred import (
    CAUGHT_UP_WITHIN_MS,
    MOVE_TIMEOUT_MS,
    Leadership,
    PreferredLeaders,
    RebalanceSettings,
    choose_moves,
    imbalance,
    imbalanced_brokers,
    preferred_replica,
)

BROKERS = (1, 2, 3)


def lead(name: str, preferred: int, leader: int | None, ready: bool = True) -> Leadership:
    return Leadership(name, preferred, leader, 1, ready)


# --- the choice, pure ---------------------------------------------------------------------


def test_imbalance_is_the_share_of_preferred_partitions_a_broker_does_not_lead() -> None:
    views = [
        lead("a-0", 1, 2),
        lead("a-1", 1, 1),
        lead("a-2", 1, 3),
        lead("a-3", 1, 1),
        lead("b-0", 2, 2),
        lead("c-0", 3, None),  # leaderless counts as not led by its preferred replica
    ]
    assert imbalance(views) == {1: 0.5, 2: 0.0, 3: 1.0}
    assert imbalanced_brokers(views, 10) == {1, 3}
    assert imbalanced_brokers(views, 50) == {3}  # above the percentage, not at it
    assert imbalanced_brokers(views, 100) == frozenset()


def test_preferred_replica_is_spec_preferred_leader_else_the_first_replica() -> None:
    spec = PartitionSpec(topic="t", partition=0, replicas=(3, 1, 2))
    assert preferred_replica(spec, None) == 3
    status = PartitionStatus(replicas=(2, 3, 1), isr=(2, 3, 1), leader=2)
    assert preferred_replica(spec, status) == 2  # the status's replicas are the current ones
    named = spec.model_copy(update={"preferred_leader": 1})
    assert preferred_replica(named, status) == 1
    stranger = spec.model_copy(update={"preferred_leader": 9})
    assert preferred_replica(stranger, status) == 2


def test_one_move_at_a_time_per_broker_counting_the_leader_it_leaves() -> None:
    views = [
        lead("a-0", 1, 2),
        lead("a-1", 1, 3),  # broker 1 already receives a-0
        lead("b-0", 3, 2),  # broker 2 already gives a-0 up
        lead("c-0", 3, 1, ready=False),
        lead("d-0", 3, 3),
    ]
    moves = choose_moves(views, rebalancing={1, 3}, busy=())
    assert [(m.name, m.source, m.target) for m in moves] == [("a-0", 2, 1)]
    # With 2 busy elsewhere, broker 1 receives a-1 from 3 instead.
    moves = choose_moves(views, rebalancing={1, 3}, busy={2})
    assert [(m.name, m.source, m.target) for m in moves] == [("a-1", 3, 1)]
    # Only brokers of the round receive.
    assert choose_moves(views, rebalancing={2}, busy=()) == ()


_VIEWS = st.lists(
    st.builds(
        Leadership,
        name=st.sampled_from([f"t-{i}" for i in range(12)]),
        preferred=st.sampled_from(BROKERS),
        leader=st.one_of(st.none(), st.sampled_from(BROKERS)),
        leader_epoch=st.integers(0, 5),
        ready=st.booleans(),
    ),
    max_size=12,
    unique_by=lambda v: v.name,
)


@given(
    views=_VIEWS,
    rebalancing=st.frozensets(st.sampled_from(BROKERS)),
    busy=st.frozensets(st.sampled_from(BROKERS)),
)
def test_moves_are_safe_one_per_broker_and_leave_nothing_movable(
    views: list[Leadership], rebalancing: frozenset[int], busy: frozenset[int]
) -> None:
    moves = choose_moves(views, rebalancing, busy)
    by_name = {v.name: v for v in views}
    touched: list[int] = []
    for m in moves:
        v = by_name[m.name]
        # Only to a ready preferred replica of the round, from the leader it has now.
        assert v.ready
        assert m.target == v.preferred in rebalancing
        assert v.leader is not None
        assert m.source == v.leader != m.target
        assert m.leader_epoch == v.leader_epoch
        touched += [m.source, m.target]
    assert len(touched) == len(set(touched)), "a broker in two moves at once"
    assert not set(touched) & busy, "a busy broker in a new move"
    # Maximal: every movable partition left over shares a broker with a move or a busy one.
    taken = set(touched) | busy
    moved = {m.name for m in moves}
    for v in views:
        movable = v.ready and v.preferred in rebalancing and v.leader not in (None, v.preferred)
        if movable and v.name not in moved:
            assert v.preferred in taken or v.leader in taken, v


# --- the election, in `decide` --------------------------------------------------------------

SPEC = PartitionSpec(topic="orders", partition=0, replicas=(1, 2, 3))
NAME = SPEC.name


def away(*, isr_epochs: Mapping[int, int] | None = None) -> PartitionStatus:
    """Broker 2 leads epoch 3 after a failover; 1, the preferred replica, is back in sync."""
    return PartitionStatus(
        leader=2,
        leader_epoch=3,
        partition_epoch=5,
        isr=(1, 2, 3),
        isr_broker_epochs=dict(isr_epochs or {1: 2, 2: 1, 3: 1}),
        replicas=(1, 2, 3),
        high_watermark=100,
        log_end_offsets={1: 100, 2: 100, 3: 100},
        epoch_history=(
            EpochHistoryEntry(epoch=1, leader=1, start_offset=0, time=0),
            EpochHistoryEntry(epoch=3, leader=2, start_offset=40, time=5_000),
        ),
    )


def heartbeats(
    now: int,
    status: PartitionStatus,
    *,
    epochs: Mapping[int, int] | None = None,
    caught_up: Mapping[int, int] | None = None,
    name: str = NAME,
    shutting_down: Iterable[int] = (),
) -> tuple[Liveness, dict[int, ReceivedHeartbeat]]:
    """Every broker heartbeats at `now`; the leader reports its followers caught up at
    `caught_up` (default: now), every member holds `status`'s assignment."""
    epochs = epochs or {1: 2, 2: 1, 3: 1}
    live = Liveness.start(0)
    got: dict[int, ReceivedHeartbeat] = {}
    held = HeldAssignment(
        leader=status.leader,
        leader_epoch=status.leader_epoch,
        partition_epoch=status.partition_epoch,
        isr=status.isr,
        replicas=status.replicas,
    )
    for b in BROKERS:
        live, _ = live.heartbeat(b, epochs[b], now, shutting_down=b in shutting_down)
        leading = b == status.leader
        report = PartitionReport(
            name=name,
            role=PartitionRole.LEADER if leading else PartitionRole.FOLLOWER,
            leader_epoch=status.leader_epoch,
            partition_epoch=status.partition_epoch,
            log_end_offset=100,
            last_epoch=status.leader_epoch,
            high_watermark=100,
            assignment=held,
            followers=tuple(
                FollowerProgress(
                    replica=f,
                    log_end_offset=100,
                    last_caught_up_time=(caught_up or {}).get(f, now),
                )
                for f in status.isr
                if f != b
            )
            if leading
            else (),
        )
        hb = BrokerHeartbeat(
            broker_id=b, broker_epoch=epochs[b], address=f"b{b}", time_ms=now, partitions=(report,)
        )
        got[b] = ReceivedHeartbeat(hb, now)
    return live, got


def test_the_preferred_replica_takes_over_with_new_epochs_and_history() -> None:
    status = away()
    live, got = heartbeats(20_000, status)
    d = decide(PartitionInput(SPEC, status, 1, "rv"), live, got, 20_000, prefer=1)
    s = d.status
    assert s is not None
    assert d.material
    assert (s.leader, s.leader_epoch, s.partition_epoch) == (1, 4, 6)
    assert s.isr == (1, 2, 3)  # the old leader stays in sync and follows
    assert s.isr_broker_epochs == {1: 2, 2: 1, 3: 1}
    assert s.epoch_history[-1] == EpochHistoryEntry(
        epoch=4, leader=1, start_offset=100, time=20_000
    )
    assert [e.reason for e in d.events] == [EventReason.PREFERRED_LEADER_ELECTED]
    assert "broker 1 elected leader in leaderEpoch 4" in d.events[0].message
    assert "previous leader 2" in d.events[0].message
    # Without the move asked for, the healthy leader keeps leading.
    kept = decide(PartitionInput(SPEC, status, 1, "rv"), live, got, 20_000)
    assert kept.status is not None  # conditions, which the status here lacks
    assert (kept.status.leader, kept.status.leader_epoch) == (2, 3)
    assert kept.events == ()


def test_no_move_to_a_replica_that_is_lagging_restarted_stopping_or_out_of_the_isr() -> None:
    status = away()
    now = 20_000
    lagging = heartbeats(now, status, caught_up={1: now - CAUGHT_UP_WITHIN_MS - 1, 3: now})
    restarted = heartbeats(now, status, epochs={1: 3, 2: 1, 3: 1})
    stopping = heartbeats(now, status, shutting_down=(1,))
    leader_stopping = heartbeats(now, status, shutting_down=(2,))
    for live, got in (lagging, restarted, stopping):
        d = decide(PartitionInput(SPEC, status, 1, "rv"), live, got, now, prefer=1)
        assert EventReason.PREFERRED_LEADER_ELECTED not in [e.reason for e in d.events]
        assert (d.status or status).leader == 2, d
    # A leader in a controlled shutdown hands over by the shutdown's own election.
    live, got = leader_stopping
    d = decide(PartitionInput(SPEC, status, 1, "rv"), live, got, now, prefer=1)
    assert EventReason.PREFERRED_LEADER_ELECTED not in [e.reason for e in d.events]
    assert EventReason.LEADER_ELECTED in [e.reason for e in d.events]
    outside = status.model_copy(update={"isr": (2, 3), "isr_broker_epochs": {2: 1, 3: 1}})
    live, got = heartbeats(now, outside)
    d = decide(PartitionInput(SPEC, outside, 1, "rv"), live, got, now, prefer=1)
    assert d.status is None or d.status.leader == 2


# --- the round: checks, moves, settling ------------------------------------------------------


def test_a_check_starts_a_round_that_moves_back_and_ends_when_settled() -> None:
    settings = RebalanceSettings(imbalance_percentage=10, check_interval_ms=10_000)
    prefs = PreferredLeaders.start(0, settings)
    specs = {f"t-{i}": PartitionSpec(topic="t", partition=i, replicas=r) for i, r in
             enumerate([(1, 2, 3), (1, 3, 2), (2, 3, 1), (3, 1, 2)])}  # fmt: skip
    # Broker 2 leads t-0 and t-1 (both preferring 1); 1 is back in sync in both.
    statuses = {
        "t-0": away(),
        "t-1": away().model_copy(update={"replicas": (1, 3, 2)}),
        "t-2": away().model_copy(update={"replicas": (2, 3, 1)}),
        "t-3": away().model_copy(update={"leader": 3, "replicas": (3, 1, 2)}),
    }

    def state(now: int) -> tuple[Liveness, dict[int, ReceivedHeartbeat]]:
        live = Liveness.start(0)
        got: dict[int, ReceivedHeartbeat] = {}
        for name in sorted(statuses):
            live, beats = heartbeats(now, statuses[name], name=name)
            for b, r in beats.items():
                reports = dict(got[b].all_reports()) if b in got else {}
                reports.update(r.all_reports())
                got[b] = ReceivedHeartbeat(r.heartbeat, now, reports)
        return live, got

    def parts() -> dict[str, tuple[PartitionSpec, PartitionStatus | None]]:
        return {n: (specs[n], statuses[n]) for n in specs}

    live, got = state(5_000)
    assert prefs.plan(parts(), got, live.view(5_000)) == ()  # no check before one interval
    live, got = state(10_000)
    [move] = prefs.plan(parts(), got, live.view(10_000))
    assert (move.name, move.source, move.target, move.leader_epoch) == ("t-0", 2, 1, 3)
    assert prefs.rebalancing == {1}
    assert prefs.target("t-0") == 1
    # The decision elects it; until the handover settles, 1 and 2 take part in no other.
    d = decide(PartitionInput(specs["t-0"], statuses["t-0"], 1, "rv"), live, got, 10_000, prefer=1)
    prefs.decided("t-0", d.status)
    assert d.status is not None
    statuses["t-0"] = d.status
    # The brokers have not heard of it yet: 1 and 2 stay busy.
    assert prefs.plan(parts(), got, live.view(10_100)) == ()
    assert "t-0" in prefs.pending
    # 1 leads the new epoch and every member holds the new assignment: settled.
    live, got = state(10_200)
    [second] = prefs.plan(parts(), got, live.view(10_200))
    assert (second.name, second.source, second.target) == ("t-1", 2, 1)
    prefs.decided("t-1", None)  # its decision did not elect: dropped at once
    assert prefs.pending == {}
    # Not tried again in this round; nothing else is left, so the round is over.
    live, got = state(10_300)
    assert prefs.plan(parts(), got, live.view(10_300)) == ()
    assert prefs.rebalancing == frozenset()
    # The next check tries it again.
    live, got = state(20_200)
    assert [m.name for m in prefs.plan(parts(), got, live.view(20_200))] == ["t-1"]


def test_no_move_while_a_reassignment_is_in_progress() -> None:
    prefs = PreferredLeaders.start(0, RebalanceSettings(check_interval_ms=1_000))
    status = away().model_copy(update={"replicas": (1, 2, 3, 4), "adding_replicas": (4,)})
    live, got = heartbeats(1_000, status)
    assert prefs.plan({NAME: (SPEC, status)}, got, live.view(1_000)) == ()


def test_a_move_that_never_settles_frees_its_brokers() -> None:
    prefs = PreferredLeaders.start(0, RebalanceSettings(check_interval_ms=1_000))
    status = away()
    live, got = heartbeats(1_000, status)
    [move] = prefs.plan({NAME: (SPEC, status)}, got, live.view(1_000))
    assert move.target == 1
    moved = status.model_copy(update={"leader": 1, "leader_epoch": 4, "partition_epoch": 6})
    prefs.decided(NAME, moved)
    # The new leader never reports leading (its heartbeats still say follower).
    live, got = heartbeats(1_000 + MOVE_TIMEOUT_MS, status)
    prefs.plan({NAME: (SPEC, moved)}, got, live.view(1_000 + MOVE_TIMEOUT_MS))
    assert NAME in prefs.pending
    live, got = heartbeats(1_001 + MOVE_TIMEOUT_MS, status)
    prefs.plan({NAME: (SPEC, moved)}, got, live.view(1_001 + MOVE_TIMEOUT_MS))
    assert NAME not in prefs.pending
