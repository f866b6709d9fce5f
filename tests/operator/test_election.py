"""Leader election rules: clean from the ISR, offline, unclean, first election, epochs."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from epochlog.protocol.heartbeat import PartitionReport, PartitionRole
from epochlog.resources import PartitionStatus
from epochlog_operator.election import (
    OfflineReason,
    OffsetRange,
    elect_initial_leader,
    elect_leader,
    next_epoch,
    preference_order,
)
from epochlog_operator.events import EventReason
from epochlog_operator.isr import IsrRemoval, RemovalReason
from epochlog_operator.liveness import Liveness, LivenessView

from .harness import Controller, leader_report, reasons


def view_of(live: Mapping[int, int], now: int = 10_000, started: int = 0) -> LivenessView:
    """`live` brokers heartbeat with their epochs at `now`; others were never heard from."""
    liveness = Liveness.start(started, 3_000)
    for b, e in live.items():
        liveness, _ = liveness.heartbeat(b, e, now)
    return liveness.view(now)


def elect(
    view: LivenessView,
    *,
    isr: tuple[int, ...] = (1, 2, 3),
    replicas: tuple[int, ...] = (1, 2, 3),
    preferred: int | None = None,
    assessment: Mapping[int, IsrRemoval] | None = None,
    ends: Mapping[int, int] | None = None,
    unclean: bool = False,
    reached: int = 0,
):
    return elect_leader(
        isr=isr,
        replicas=replicas,
        preferred_leader=preferred,
        assessment=assessment or {},
        liveness=view,
        log_end_offsets=ends or {},
        unclean_allowed=unclean,
        reached_end=reached,
    )


def test_preference_is_the_preferred_leader_then_the_replicas_order() -> None:
    assert preference_order((3, 1, 2), None) == (3, 1, 2)
    assert preference_order((3, 1, 2), 2) == (2, 3, 1)
    assert preference_order((3, 1, 2), 9) == (3, 1, 2)


def test_clean_election_picks_the_first_live_isr_member_in_preference_order() -> None:
    view = view_of({2: 1, 3: 1})  # broker 1 unheard after grace: fenced
    assert elect(view).leader == 2
    assert elect(view, preferred=3).leader == 3


def test_clean_election_never_picks_a_replica_outside_the_isr() -> None:
    view = view_of({2: 1, 3: 1})
    result = elect(view, isr=(1, 3), preferred=2)
    assert result.leader == 3
    assert not result.unclean


def test_members_in_good_standing_go_before_restarted_and_lagging_ones() -> None:
    view = view_of({1: 1, 2: 2, 3: 1})
    assessment = {
        1: IsrRemoval(1, RemovalReason.LAGGING, "lagging"),
        2: IsrRemoval(2, RemovalReason.RESTARTED, "restarted"),
    }
    assert elect(view, assessment=assessment).leader == 3
    assert elect(view, isr=(1, 2), assessment=assessment).leader == 2  # restarted, then lagging
    assert elect(view, isr=(1,), assessment=assessment).leader == 1


def heard_at(times: Mapping[int, int], now: int = 10_000) -> LivenessView:
    """Each broker's last heartbeat (brokerEpoch 1) arrived at the time given."""
    liveness = Liveness.start(0, 3_000)
    for b, t in sorted(times.items(), key=lambda bt: bt[1]):
        liveness, _ = liveness.heartbeat(b, 1, t)
    return liveness.view(now)


def test_members_heard_within_two_heartbeat_intervals_go_before_a_silent_one() -> None:
    # Broker 1 died 1.5 s ago: live until its session expires, but no longer heartbeating.
    view = heard_at({1: 8_500, 2: 9_800, 3: 9_600})
    assert view.is_live(1)
    assert elect(view).leader == 2
    restarted = {2: IsrRemoval(2, RemovalReason.RESTARTED, "restarted")}
    assert elect(view, assessment=restarted).leader == 3, "standing counts within the group"


def test_the_preferred_leader_rule_applies_within_the_recently_heard_group() -> None:
    view = heard_at({1: 8_500, 2: 9_800, 3: 9_600})
    assert elect(view, preferred=3).leader == 3
    assert elect(view, preferred=1).leader == 2
    # One heartbeat late is not silent: two intervals (1 s at the default 500 ms) are allowed.
    assert elect(heard_at({1: 9_000, 2: 9_800, 3: 9_600})).leader == 1


def test_a_silent_member_is_still_elected_when_nobody_else_can_lead() -> None:
    view = heard_at({1: 8_000, 2: 8_500, 3: 9_900})
    assert elect(view, isr=(1, 2)).leader == 1
    assert elect(view, isr=(1, 2), preferred=2).leader == 2


def test_no_live_isr_member_means_offline_and_nobody_elected() -> None:
    view = view_of({3: 1})
    result = elect(view, isr=(1, 2), ends={3: 500})
    assert result.leader is None
    assert result.offline is not None
    assert result.offline.reason is OfflineReason.NO_LIVE_IN_SYNC_REPLICA
    assert "uncleanLeaderElection is off" in result.offline.message


def test_unclean_election_picks_the_live_replica_with_the_highest_log_end() -> None:
    view = view_of({3: 1, 4: 1})
    result = elect(
        view,
        isr=(1, 2),
        replicas=(1, 2, 3, 4),
        ends={1: 900, 3: 500, 4: 700},
        unclean=True,
        reached=900,
    )
    assert result.leader == 4
    assert result.unclean
    assert result.may_be_lost == OffsetRange(700, 900)
    assert str(result.may_be_lost) == "[700, 900)"


def test_unclean_election_with_nothing_behind_the_new_leader_loses_nothing() -> None:
    view = view_of({3: 1})
    result = elect(view, isr=(1,), ends={3: 500}, unclean=True, reached=400)
    assert result.leader == 3
    assert result.may_be_lost is None


def test_unclean_election_waits_for_isr_members_not_yet_heard_after_a_restart() -> None:
    view = view_of({3: 1}, now=1_000)  # the controller is still in its grace period
    result = elect(view, isr=(1, 2), ends={3: 500}, unclean=True)
    assert result.leader is None
    assert result.offline is not None
    assert result.offline.reason is OfflineReason.AWAITING_HEARTBEATS


def test_next_epoch_is_above_both_the_recorded_and_every_reported_epoch() -> None:
    assert next_epoch(4, 0) == 5
    assert next_epoch(4, 9) == 10
    assert next_epoch(0, 0) == 1


def report(
    leader_epoch: int, log_end_offset: int, *, last_epoch: int | None = None
) -> PartitionReport:
    """A follower's report whose last batch is of `last_epoch` (default: `leader_epoch`)."""
    return PartitionReport(
        name="orders-0",
        role=PartitionRole.FOLLOWER,
        leader_epoch=leader_epoch,
        log_end_offset=log_end_offset,
        last_epoch=leader_epoch if last_epoch is None else last_epoch,
        high_watermark=0,
    )


def first(
    view: LivenessView,
    reports: Mapping[int, PartitionReport],
    *,
    unclean: bool = False,
    heard: Collection[int] = (1, 2, 3),
):
    return elect_initial_leader(
        replicas=(1, 2, 3),
        preferred_leader=None,
        liveness=view,
        reports=reports,
        unclean_allowed=unclean,
        heard=heard,
    )


def test_a_new_partition_elects_its_preferred_live_replica_with_every_live_replica_in_sync() -> (
    None
):
    result, isr = first(view_of({2: 1, 3: 1}), {})
    assert result.leader == 2
    assert isr == (2, 3)


def test_a_first_election_waits_for_a_replica_this_controller_never_heard() -> None:
    # Replica 1 was down before the controller started: 2 and 3 reporting nothing says
    # nothing of what 1 holds (a re-created Partition's records, its assignment).
    view = view_of({2: 1, 3: 1}, now=10_000)
    result, isr = first(view, {}, heard=(2, 3))
    assert result.leader is None
    assert isr == ()
    assert result.offline is not None
    assert result.offline.reason is OfflineReason.AWAITING_REPLICAS
    assert "[1]" in result.offline.message


def test_unclean_election_does_not_wait_for_a_replica_never_heard() -> None:
    result, isr = first(view_of({2: 1, 3: 1}), {}, heard=(2, 3), unclean=True)
    assert result.leader == 2
    assert isr == (2, 3)


def test_a_recreated_partition_waits_until_every_replica_is_live() -> None:
    result, isr = first(view_of({1: 1, 2: 1}), {1: report(3, 100), 2: report(3, 90)})
    assert result.leader is None
    assert isr == ()
    assert result.offline is not None
    assert result.offline.reason is OfflineReason.AWAITING_REPLICAS
    assert "[3]" in result.offline.message


def test_a_recreated_partition_elects_the_most_advanced_replica_alone_in_the_isr() -> None:
    reports = {1: report(3, 100), 2: report(4, 80), 3: report(4, 95)}
    result, isr = first(view_of({1: 1, 2: 1, 3: 1}), reports)
    assert result.leader == 3  # newest epoch first, then the longest log
    assert isr == (3,)
    assert not result.unclean


def test_rank_by_the_last_batch_epoch_not_an_epoch_known_from_an_assignment() -> None:
    # Broker 1 holds a stale tail of epoch 1 and only heard of epoch 2; brokers 2 and 3
    # wrote epoch 2 (the re-create shape): the log with epoch-2 batches wins.
    reports = {
        1: report(2, 6, last_epoch=1),
        2: report(2, 3),
        3: report(2, 3),
    }
    result, isr = first(view_of({1: 1, 2: 1, 3: 1}), reports)
    assert result.leader == 2
    assert isr == (2,)


def test_a_recreated_partition_waits_while_its_most_advanced_replica_is_offline() -> None:
    reports = {
        1: report(3, 100).model_copy(update={"storage_error": "disk full"}),
        2: report(3, 90),
        3: report(3, 80),
    }
    result, _ = first(view_of({1: 1, 2: 1, 3: 1}), reports)
    assert result.leader is None
    assert result.offline is not None
    assert "disk full" in result.offline.message


def test_a_recreated_partition_with_unclean_election_reports_what_may_be_lost() -> None:
    result, isr = first(view_of({2: 1}), {1: report(3, 100), 2: report(3, 60)}, unclean=True)
    assert result.leader == 2
    assert result.unclean
    assert result.may_be_lost == OffsetRange(60, 100)
    assert isr == (2,)


def test_a_new_partition_with_no_live_replica_waits() -> None:
    result, _ = first(view_of({}, now=1_000), {})
    assert result.leader is None
    assert result.offline is not None
    assert result.offline.reason is OfflineReason.AWAITING_HEARTBEATS
    result, _ = first(view_of({}, now=10_000), {})
    assert result.offline is not None
    assert result.offline.reason is OfflineReason.NO_LIVE_REPLICA


def test_a_leader_restarting_just_after_the_preferred_replica_died_passes_it_over() -> None:
    """Broker 1, the preferred replica, dies; moments later broker 3, the leader, restarts.
    The election comes before 1's session expires: 1 would lead nobody for seconds."""
    status = PartitionStatus(
        leader=3,
        leader_epoch=4,
        partition_epoch=6,
        isr=(1, 2, 3),
        isr_broker_epochs={1: 1, 2: 1, 3: 1},
        replicas=(1, 2, 3),
    )
    c = Controller(status=status)
    for now in (0, 500):
        c.beat(1, now)
        c.beat(2, now)
        c.beat(3, now, partitions=[leader_report(status, caught_up={1: now, 2: now})])
        c.decide(now)
    c.beat(2, 1_000)
    c.beat(2, 1_500)
    c.beat(2, 2_000)
    c.beat(3, 2_000, epoch=2)  # the leader's new process
    d = c.decide(2_000)
    assert c.current.leader == 2
    assert EventReason.LEADER_ELECTED in reasons(d)
