"""The whole decision for one Partition, scenario by scenario."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from epochlog.protocol.heartbeat import IsrProposal
from epochlog.resources import (
    ConditionStatus,
    ConditionType,
    EpochHistoryEntry,
    PartitionStatus,
)
from epochlog_operator.assignment import BrokerLoad
from epochlog_operator.decide import MAX_EPOCH_HISTORY, Decision
from epochlog_operator.events import EventReason, EventType

from .harness import (
    LAG_MAX,
    Controller,
    follower_report,
    leader_report,
    make_spec,
    reasons,
    started,
)

CaughtUp = Callable[[int], Mapping[int, int | None]]


def everyone_caught_up(now: int) -> Mapping[int, int | None]:
    return {2: now, 3: now}


def steady(
    c: Controller,
    start: int,
    end: int,
    *,
    live: Iterable[int] = (1, 2, 3),
    caught_up: CaughtUp = everyone_caught_up,
    step: int = 500,
    epochs: Mapping[int, int] | None = None,
    check: Callable[[int, Decision], None] | None = None,
) -> Decision:
    """Heartbeats from `live` every `step` ms, the leader reporting its followers, and a
    decision after each round; returns the last decision."""
    live = tuple(live)
    decision = None
    for now in range(start, end + 1, step):
        for b in live:
            parts = []
            if c.status is not None and b == c.status.leader:
                parts = [leader_report(c.current, caught_up=caught_up(now))]
            c.beat(b, now, epoch=(epochs or {}).get(b, 1), partitions=parts)
        decision = c.decide(now)
        if check is not None:
            check(now, decision)
    assert decision is not None
    return decision


def condition(status: PartitionStatus, type_: ConditionType) -> tuple[ConditionStatus, str]:
    c = status.condition(type_)
    assert c is not None
    return c.status, c.reason


# --- first election and assignment -------------------------------------------------------


def test_first_decision_elects_the_preferred_replica_in_leader_epoch_one() -> None:
    c = Controller(make_spec(preferred_leader=2))
    c.beat_all(0)
    d = c.decide(0)
    s = c.current
    assert (s.leader, s.leader_epoch, s.partition_epoch) == (2, 1, 1)
    assert s.isr == (1, 2, 3)
    assert s.isr_broker_epochs == {1: 1, 2: 1, 3: 1}
    assert s.epoch_history == (EpochHistoryEntry(epoch=1, leader=2, start_offset=0, time=0),)
    assert reasons(d) == [EventReason.LEADER_ELECTED]
    assert d.material
    assert d.resource_version == "rv"
    assert condition(s, ConditionType.READY) == (ConditionStatus.TRUE, "InSync")
    assert condition(s, ConditionType.OFFLINE)[0] is ConditionStatus.FALSE


def test_partition_without_replicas_is_assigned_to_live_brokers_preferred_leader_first() -> None:
    load = {1: BrokerLoad(replicas=4, leaders=4)}
    c = Controller(make_spec(replicas=()), load=load)
    c.beat_all(0, brokers=(1, 2, 3, 4))
    c.decide(0)
    s = c.current
    assert len(s.replicas) == 3
    assert len(set(s.replicas)) == 3
    assert set(s.replicas) <= {1, 2, 3, 4}
    assert 1 not in s.replicas  # by far the most loaded broker
    assert s.leader == s.replicas[0]


def test_partition_waits_for_enough_live_brokers_before_assigning() -> None:
    c = Controller(make_spec(replicas=()))
    c.beat_all(0, brokers=(1, 2))
    # In the start-up grace period other brokers may still report: nothing is written.
    assert c.decide(0).status is None
    for now in (1_500, 3_001):
        c.beat_all(now, brokers=(1, 2))
    d = c.decide(3_001)
    s = c.current
    assert s.replicas == ()
    assert s.leader is None
    assert s.leader_epoch == 0
    assert condition(s, ConditionType.OFFLINE) == (ConditionStatus.TRUE, "NotEnoughBrokers")
    assert d.material
    assert d.events == ()
    c.beat_all(3_500, brokers=(1, 2))
    c.beat(3, 3_500, epoch=2)  # fenced at the end of the grace period: a new process
    c.decide(3_500)
    assert c.current.replicas
    assert c.current.leader is not None


def test_new_partition_waits_for_every_replica_to_be_heard() -> None:
    c = Controller()
    c.beat(1, 0)
    c.beat(2, 0)
    # Broker 3 may yet report an epoch: no status (with epochs it might undercut) so far.
    assert c.decide(0).status is None
    assert c.status is None
    for now in (1_500, 3_000, 3_001):
        c.beat(1, now)
        c.beat(2, now)
    # Broker 3 is fenced now, but this controller never heard what it holds: it may hold
    # the records of a Partition deleted and created again. No leader, no epoch yet.
    c.decide(3_001)
    waiting = c.current
    assert waiting.leader is None
    assert "leaderEpoch" not in waiting.model_dump(mode="json")
    assert condition(waiting, ConditionType.OFFLINE) == (ConditionStatus.TRUE, "AwaitingReplicas")
    c.beat(3, 3_500)
    c.decide(3_500)
    first = c.current
    assert first.leader == 1
    assert first.isr == (1, 2, 3)


def test_new_partition_with_unclean_election_elects_without_a_replica_never_heard() -> None:
    c = Controller(make_spec(unclean_leader_election=True))
    for now in (0, 1_500, 3_000, 3_001):
        c.beat(1, now)
        c.beat(2, now)
    c.decide(3_001)
    first = c.current
    assert first.leader == 1
    assert first.isr == (1, 2)


# --- leader failure ------------------------------------------------------------------------


def test_fenced_leader_is_replaced_by_the_first_live_isr_member_in_preference_order() -> None:
    c = started()
    steady(c, 500, 1_000)
    for now in range(1_500, 4_501, 500):  # broker 1 goes silent after 1_000
        c.beat(2, now, partitions=[follower_report(1, log_end_offset=42)])
        c.beat(3, now)
        d = c.decide(now)
        if now <= 4_000:  # silent for no more than brokerSessionTimeoutMs
            assert d.events == ()
            assert c.current.leader == 1
    s = c.current
    assert s.leader == 2
    assert (s.leader_epoch, s.partition_epoch) == (2, 2)
    assert s.isr == (2, 3)
    assert s.epoch_history[-1] == EpochHistoryEntry(epoch=2, leader=2, start_offset=42, time=4_500)
    elected = [d for d in c.decisions[1:] if d.events]  # after the first election
    assert len(elected) == 1
    assert reasons(elected[0]) == [
        EventReason.BROKER_FENCED,
        EventReason.ISR_SHRUNK,
        EventReason.LEADER_ELECTED,
    ]
    assert "no heartbeat for 3500 ms" in elected[0].events[0].message


def test_leader_fenced_exactly_after_the_session_timeout() -> None:
    c = started()
    for now in (1_000, 2_000, 3_000):
        c.beat(2, now)
        c.beat(3, now)
    assert c.decide(3_000).events == ()  # broker 1 silent for exactly 3_000 ms
    assert c.current.leader == 1
    c.beat(2, 3_001)
    c.beat(3, 3_001)
    c.decide(3_001)
    assert c.current.leader == 2


def test_a_heartbeating_leader_keeps_its_epoch() -> None:
    c = started()
    steady(c, 500, 30_000)
    s = c.current
    assert (s.leader, s.leader_epoch, s.partition_epoch, s.isr) == (1, 1, 1, (1, 2, 3))
    assert all(d.events == () for d in c.decisions[1:])


def test_no_live_isr_member_takes_the_partition_offline_and_keeps_leader_epoch_and_isr() -> None:
    c = started()
    c.beat(4, 3_500)
    d = c.decide(3_500)  # 1, 2 and 3 all silent since 0
    s = c.current
    assert s.leader is None
    # A new partitionEpoch: the brokers apply the leaderless assignment and stop following.
    assert (s.leader_epoch, s.partition_epoch) == (1, 2)
    assert s.isr == (1, 2, 3)  # every one of them holds all that was committed
    assert reasons(d) == [EventReason.BROKER_FENCED, EventReason.PARTITION_OFFLINE]
    assert all(e.type is EventType.WARNING for e in d.events)
    assert condition(s, ConditionType.OFFLINE) == (ConditionStatus.TRUE, "NoLiveInSyncReplica")
    assert condition(s, ConditionType.READY)[0] is ConditionStatus.FALSE
    assert d.material
    # Staying offline repeats nothing.
    again = c.decide(4_000)
    assert again.events == ()


def test_an_offline_partition_does_not_elect_a_fenced_broker_heartbeating_with_its_old_epoch() -> (
    None
):
    c = started()
    c.decide(3_500)
    assert c.current.leader is None
    c.beat(2, 4_000, epoch=1)  # the same process, back from a partition
    c.decide(4_000)
    assert c.current.leader is None


def test_an_offline_partition_elects_the_first_isr_member_that_returns() -> None:
    c = started()
    c.decide(3_500)
    c.beat(3, 5_000, epoch=2, partitions=[follower_report(1, log_end_offset=70)])
    d = c.decide(5_000)
    s = c.current
    assert s.leader == 3
    assert (s.leader_epoch, s.partition_epoch) == (2, 3)
    assert s.isr == (3,)
    assert s.isr_broker_epochs == {3: 2}
    assert s.epoch_history[-1] == EpochHistoryEntry(epoch=2, leader=3, start_offset=70, time=5_000)
    assert reasons(d)[-1] is EventReason.LEADER_ELECTED
    assert EventReason.UNCLEAN_LEADER_ELECTION not in reasons(d)


def shrink_isr_to_leader(c: Controller, until: int) -> None:
    """Followers 2 and 3 stop catching up at 0 and leave the ISR after LAG_MAX."""
    steady(c, 500, until, caught_up=lambda now: {2: 0, 3: 0})
    assert c.current.isr == (1,)


def test_unclean_election_picks_the_longest_live_log_and_reports_the_range_lost() -> None:
    # minInsyncReplicas 1: the leader committed alone once the followers left, so neither is
    # an eligible leader replica (with 2 both would be: test_eligible_leader_replicas).
    c = started(make_spec(unclean_leader_election=True, min_insync_replicas=1))
    shrink_isr_to_leader(c, 10_500)
    c.beat(1, 11_000, partitions=[leader_report(c.current, log_end_offset=120, high_watermark=100)])
    c.decide(11_000)
    assert c.current.high_watermark == 100
    for now in range(11_500, 14_501, 500):  # broker 1 is gone
        c.beat(2, now, partitions=[follower_report(1, log_end_offset=80)])
        c.beat(3, now, partitions=[follower_report(1, log_end_offset=90)])
    d = c.decide(14_500)
    s = c.current
    assert s.leader == 3
    assert s.isr == (3,)
    assert (s.leader_epoch, s.partition_epoch) == (2, 3)
    assert s.high_watermark == 90
    unclean = [e for e in d.events if e.reason is EventReason.UNCLEAN_LEADER_ELECTION]
    assert len(unclean) == 1
    assert unclean[0].type is EventType.WARNING
    assert "offsets [90, 120) may be lost" in unclean[0].message


def test_without_unclean_election_a_partition_whose_isr_is_gone_stays_offline() -> None:
    c = started(make_spec(min_insync_replicas=1))  # no eligible leader replica, as above
    shrink_isr_to_leader(c, 10_500)
    for now in range(11_000, 14_001, 500):
        c.beat(2, now, partitions=[follower_report(1, log_end_offset=80)])
        c.beat(3, now, partitions=[follower_report(1, log_end_offset=90)])
    d = c.decide(14_000)
    assert c.current.leader is None
    assert c.current.isr == (1,)
    assert EventReason.PARTITION_OFFLINE in reasons(d)


# --- ISR by time ---------------------------------------------------------------------------


def test_a_follower_that_stops_catching_up_leaves_at_the_first_decision_past_the_window() -> None:
    c = started()
    stuck_since = 2_000

    def caught_up(now: int) -> Mapping[int, int | None]:
        return {2: now, 3: min(now, stuck_since)}

    steady(c, 500, stuck_since + LAG_MAX, caught_up=caught_up)
    assert c.current.isr == (1, 2, 3)  # lagging exactly replicaLagTimeMaxMs is still in sync
    d = steady(c, stuck_since + LAG_MAX + 1, stuck_since + LAG_MAX + 1, caught_up=caught_up)
    s = c.current
    assert s.isr == (1, 2)
    assert (s.leader, s.leader_epoch, s.partition_epoch) == (1, 1, 2)
    assert reasons(d) == [EventReason.ISR_SHRUNK]
    assert f"not caught up for {LAG_MAX + 1} ms" in d.events[0].message


def test_a_burst_does_not_throw_out_a_follower_that_keeps_catching_up() -> None:
    c = started()
    # Bursts keep follower 3 behind; it reaches the leader's log end only every 9 s,
    # within replicaLagTimeMaxMs (KIP-16).
    c_ups = {2: 0, 3: 0}

    def caught_up(now: int) -> Mapping[int, int | None]:
        c_ups[2] = now
        if now % 9_000 == 0:
            c_ups[3] = now
        return dict(c_ups)

    def stays(now: int, d: Decision) -> None:
        assert c.current.isr == (1, 2, 3), now

    steady(c, 500, 90_000, caught_up=caught_up, check=stays)
    assert c.current.partition_epoch == 1


def test_a_restarted_follower_leaves_the_isr() -> None:
    c = started()
    steady(c, 500, 1_000)
    d = steady(c, 1_500, 1_500, epochs={3: 2})
    s = c.current
    assert s.isr == (1, 2)
    assert (s.leader_epoch, s.partition_epoch) == (1, 2)
    assert reasons(d) == [EventReason.ISR_SHRUNK]
    assert "restarted (brokerEpoch 1 -> 2)" in d.events[0].message


def test_a_restarted_leader_hands_over_to_an_isr_member_in_good_standing() -> None:
    c = started()
    steady(c, 500, 1_000)
    c.beat(1, 1_500, epoch=2)
    c.beat(2, 1_500)
    c.beat(3, 1_500)
    d = c.decide(1_500)
    s = c.current
    assert s.leader == 2
    assert s.isr == (2, 3)
    assert s.leader_epoch == 2
    assert reasons(d) == [EventReason.ISR_SHRUNK, EventReason.LEADER_ELECTED]


def test_a_restarted_sole_isr_member_leads_again_in_a_new_epoch() -> None:
    c = started()
    shrink_isr_to_leader(c, 10_500)
    c.beat(1, 11_000, epoch=2)
    d = c.decide(11_000)
    s = c.current
    assert s.leader == 1
    assert s.isr == (1,)
    assert s.isr_broker_epochs == {1: 2}
    assert s.leader_epoch == 2
    assert reasons(d) == [EventReason.LEADER_ELECTED]


def test_the_isr_expands_only_on_the_leaders_proposal() -> None:
    c = started()
    steady(c, 500, 11_000, caught_up=lambda now: {2: now, 3: 0})
    assert c.current.isr == (1, 2)
    # Follower 3 catches up; without a proposal it stays out.
    steady(c, 11_500, 12_000)
    assert c.current.isr == (1, 2)
    pe = c.current.partition_epoch
    proposal = IsrProposal(replica=3, broker_epoch=1, log_end_offset=0)
    c.beat(1, 12_500, partitions=[leader_report(c.current, proposals=[proposal])])
    d = c.decide(12_500)
    s = c.current
    assert s.isr == (1, 2, 3)
    assert s.isr_broker_epochs[3] == 1
    assert s.last_caught_up_time[3] == 12_500
    assert (s.leader_epoch, s.partition_epoch) == (1, pe + 1)
    assert reasons(d) == [EventReason.ISR_EXPANDED]
    assert d.events[0].type is EventType.NORMAL


def test_a_proposal_made_against_an_old_partition_epoch_is_rejected() -> None:
    c = started()
    steady(c, 500, 11_000, caught_up=lambda now: {2: now, 3: 0})
    stale = c.current.model_copy(update={"partition_epoch": c.current.partition_epoch - 1})
    proposal = IsrProposal(replica=3, broker_epoch=1, log_end_offset=0)
    c.beat(1, 11_500, partitions=[leader_report(stale, proposals=[proposal])])
    d = c.decide(11_500)
    assert c.current.isr == (1, 2)
    assert [r.replica for r in d.rejected_proposals] == [3]


def test_a_proposal_for_a_restarted_broker_needs_its_new_broker_epoch() -> None:
    c = started()
    steady(c, 500, 1_000)
    steady(c, 1_500, 1_500, epochs={3: 2})
    assert c.current.isr == (1, 2)
    old = IsrProposal(replica=3, broker_epoch=1, log_end_offset=0)
    c.beat(1, 2_000, partitions=[leader_report(c.current, proposals=[old])])
    d = c.decide(2_000)
    assert c.current.isr == (1, 2)
    assert "broker now runs brokerEpoch 2" in d.rejected_proposals[0].reason
    new = IsrProposal(replica=3, broker_epoch=2, log_end_offset=0)
    c.beat(1, 2_500, partitions=[leader_report(c.current, proposals=[new])])
    c.decide(2_500)
    rejoined = c.current
    assert rejoined.isr == (1, 2, 3)
    assert rejoined.isr_broker_epochs[3] == 2


def broker_1_lost_to_2_at_42() -> Controller:
    """Broker 1 leads, then falls silent; broker 2, last heard at log end 42, is elected."""
    c = started()
    steady(c, 500, 1_000)
    for now in range(1_500, 4_501, 500):
        c.beat(2, now, partitions=[follower_report(1, log_end_offset=42)])
        c.beat(3, now)
    c.decide(4_500)
    assert c.current.leader == 2
    return c


def test_a_proposal_below_the_leaders_epoch_start_offset_is_rejected() -> None:
    c = broker_1_lost_to_2_at_42()
    c.beat(1, 5_000, epoch=2, partitions=[follower_report(1, log_end_offset=30)])
    behind = IsrProposal(replica=1, broker_epoch=2, log_end_offset=30)
    c.beat(2, 5_000, partitions=[leader_report(c.current, log_end_offset=42, proposals=[behind])])
    d = c.decide(5_000)
    assert 1 not in c.current.isr
    assert "below the leader's epoch start offset 42" in d.rejected_proposals[0].reason


def test_the_leaders_reported_epoch_start_counts_over_the_one_recorded_at_election() -> None:
    """Soak seed 9358: the controller recorded the new leader's epoch as starting at 42,
    its last reported log end, but the broker had truncated to 40 before it took the
    epoch. A follower at 41 of that leader's log is in sync and must be let in."""
    c = broker_1_lost_to_2_at_42()
    assert c.current.epoch_history[-1].start_offset == 42
    c.beat(1, 5_000, epoch=2, partitions=[follower_report(1, log_end_offset=41)])
    caught_up = IsrProposal(replica=1, broker_epoch=2, log_end_offset=41)
    report = leader_report(
        c.current, log_end_offset=41, epoch_start_offset=40, proposals=[caught_up]
    )
    c.beat(2, 5_000, partitions=[report])
    d = c.decide(5_000)
    assert d.rejected_proposals == ()
    assert 1 in c.current.isr


def test_a_leader_holding_less_than_the_shown_high_watermark_brings_it_down() -> None:
    """Simulator seed 2401672: an unclean election went by a stale report of the new
    leader's log end (191); the broker had deleted its replica when a reassignment
    removed it and led from an empty log. Its next election kept the shown HW of 191,
    and every follower's proposal was refused for a log end "below the high watermark
    191" for good. A leader's log holds everything committed: one that ends below the
    HW shown makes its own HW the measurement."""
    c = broker_1_lost_to_2_at_42()
    c.status = c.current.model_copy(update={"high_watermark": 191})
    c.beat(1, 5_000, epoch=2, partitions=[follower_report(1, log_end_offset=3)])
    caught_up = IsrProposal(replica=1, broker_epoch=2, log_end_offset=3)
    report = leader_report(
        c.current, log_end_offset=3, high_watermark=0, epoch_start_offset=0, proposals=[caught_up]
    )
    c.beat(2, 5_000, partitions=[report])
    d = c.decide(5_000)
    assert d.rejected_proposals == ()
    assert 1 in c.current.isr
    assert c.current.high_watermark == 0


def test_a_report_for_an_old_leader_epoch_does_not_speak_for_followers() -> None:
    c = started()
    steady(c, 500, 1_000)
    old_epoch = c.current.model_copy(update={"leader_epoch": 0})
    c.beat(1, 1_500, partitions=[leader_report(old_epoch, high_watermark=500)])
    c.decide(1_500)
    assert c.current.high_watermark == 0


def test_lag_is_measured_on_the_controllers_clock_whatever_the_brokers_clock() -> None:
    c = started()
    skew = 3_600_000  # the leader's clock is an hour ahead
    for now in range(500, 20_001, 500):
        report = leader_report(c.current, caught_up={2: now + skew - 200, 3: now + skew - 300})
        c.beat(1, now, partitions=[report], broker_time=now + skew)
        c.beat(2, now)
        c.beat(3, now)
        c.decide(now)
    s = c.current
    assert s.isr == (1, 2, 3)
    # On the controller's clock, as first written: later heartbeats that move only these
    # clocks (the lag shown stays 200 and 300) are not worth a status write.
    assert s.last_caught_up_time == {2: 300, 3: 200}
    assert s.lag_ms == {1: 0, 2: 200, 3: 300}


# --- controller restarts and re-created resources ------------------------------------------


def previous_status() -> PartitionStatus:
    c = started()
    steady(c, 500, 1_000)
    return c.current.model_copy(update={"leader_epoch": 5, "partition_epoch": 9})


def test_a_restarted_controller_fences_nobody_during_its_grace_period() -> None:
    status = previous_status()
    c = Controller(started_ms=100_000, status=status)
    for now in (100_000, 101_500, 103_000):
        d = c.decide(now)
        assert not d.material
        assert d.events == ()
    assert c.current.leader == 1
    assert c.current.isr == (1, 2, 3)
    d = c.decide(103_001)
    assert c.current.leader is None
    assert (c.current.leader_epoch, c.current.partition_epoch) == (5, 10)


def test_a_restarted_controller_continues_from_the_status_epochs() -> None:
    c = Controller(started_ms=100_000, status=previous_status())
    steady(c, 100_000, 120_000)
    s = c.current
    assert (s.leader, s.leader_epoch, s.partition_epoch, s.isr) == (1, 5, 9, (1, 2, 3))
    c.beat(2, 120_500)
    c.beat(3, 120_500)
    for now in range(121_000, 124_001, 500):
        c.beat(2, now)
        c.beat(3, now)
    c.decide(124_000)
    assert c.current.leader == 2
    assert c.current.leader_epoch == 6


def test_a_restarted_controller_does_not_count_time_it_was_away_as_lag() -> None:
    status = previous_status()  # followers last caught up at 1_000
    c = Controller(started_ms=100_000, status=status)
    c.beat_all(100_000)
    c.decide(100_000)
    assert c.current.isr == (1, 2, 3)


def test_a_recreated_partition_continues_above_the_epochs_brokers_report() -> None:
    c = Controller()
    c.beat(1, 0, partitions=[follower_report(7, log_end_offset=100, partition_epoch=12)])
    c.beat(2, 0, partitions=[follower_report(7, log_end_offset=90, partition_epoch=12)])
    c.beat(3, 0, partitions=[follower_report(6, log_end_offset=130, partition_epoch=11)])
    d = c.decide(0)
    s = c.current
    assert s.leader == 1  # newest epoch, then longest log: 3's extra records are from epoch 6
    assert s.isr == (1,)
    assert (s.leader_epoch, s.partition_epoch) == (8, 13)
    assert reasons(d) == [EventReason.LEADER_ELECTED]


def test_a_recreated_partition_waits_for_every_replica_before_electing() -> None:
    c = Controller()
    for now in range(0, 3_501, 500):
        c.beat(1, now, partitions=[follower_report(7, log_end_offset=100)])
        c.beat(2, now, partitions=[follower_report(7, log_end_offset=90)])
        d = c.decide(now)
        # Broker 3, never heard from (unknown, then fenced), may hold data and a higher
        # epoch than reported: nothing is elected, and no epoch published, until it reports.
        assert d.status is None
    c.beat(3, 4_000, partitions=[follower_report(7, log_end_offset=110)])
    c.decide(4_000)
    elected = c.current
    assert (elected.leader, elected.leader_epoch) == (3, 8)


def test_brokers_reporting_a_newer_epoch_than_the_status_force_a_fresh_epoch() -> None:
    c = started()
    c.beat(2, 500, partitions=[follower_report(6)])
    c.beat(1, 500)
    d = c.decide(500)
    s = c.current
    assert s.leader == 1
    assert s.leader_epoch == 7
    assert reasons(d) == [EventReason.LEADER_ELECTED]
    assert "brokers report leaderEpoch 6 above the recorded 1" in d.events[0].message


# --- what gets written ---------------------------------------------------------------------


def test_high_watermark_and_lag_refreshes_are_not_material() -> None:
    c = started()
    for now, hw in ((500, 10), (1_000, 25)):
        c.beat(1, now, partitions=[leader_report(c.current, log_end_offset=hw, high_watermark=hw)])
        c.beat(2, now, partitions=[follower_report(1, log_end_offset=hw)])
        d = c.decide(now)
        assert d.status is not None
        assert not d.material
        assert d.status.high_watermark == hw
        assert d.status.log_end_offsets == {1: hw, 2: hw}


def test_a_decision_with_nothing_new_returns_no_status() -> None:
    c = started()
    c.beat(1, 500, partitions=[leader_report(c.current, caught_up={2: 400, 3: 400})])
    assert c.decide(500).status is not None
    again = c.decide(500)
    assert again.status is None
    assert not again.material
    assert again.events == ()


def test_a_new_generation_is_acknowledged_in_status_and_conditions() -> None:
    c = started()
    c.generation = 2
    c.spec = make_spec(min_insync_replicas=3)
    d = c.decide(0)
    assert d.material
    s = c.current
    assert s.observed_generation == 2
    assert {cond.observed_generation for cond in s.conditions} == {2}


def test_conditions_follow_the_isr_and_keep_their_transition_times() -> None:
    c = started()
    shrink_isr_to_leader(c, 10_500)
    s = c.current
    assert condition(s, ConditionType.READY) == (ConditionStatus.FALSE, "UnderMinIsr")
    assert condition(s, ConditionType.UNDER_REPLICATED)[0] is ConditionStatus.TRUE
    assert condition(s, ConditionType.UNDER_MIN_ISR)[0] is ConditionStatus.TRUE
    assert condition(s, ConditionType.OFFLINE)[0] is ConditionStatus.FALSE
    under = s.condition(ConditionType.UNDER_MIN_ISR)
    offline = s.condition(ConditionType.OFFLINE)
    assert under is not None
    assert under.last_transition_time == "1970-01-01T00:00:10Z"
    assert offline is not None
    assert offline.last_transition_time == "1970-01-01T00:00:00Z"


def test_epoch_history_keeps_the_most_recent_elections() -> None:
    c = started()
    epoch = 1
    for i in range(MAX_EPOCH_HISTORY + 5):
        now = 500 * (i + 1)
        leader = c.current.leader
        assert leader is not None
        epoch += 1
        c.beat(leader, now, epoch=epoch)  # the leader restarts: another member takes over
        for b in (1, 2, 3):
            if b != leader:
                c.beat(b, now, epoch=c.current.isr_broker_epochs.get(b, 1))
        c.decide(now)
        # bring the restarted broker back into the ISR
        proposal = IsrProposal(replica=leader, broker_epoch=epoch, log_end_offset=0)
        assert c.current.leader is not None
        c.beat(
            c.current.leader,
            now,
            epoch=c.current.isr_broker_epochs[c.current.leader],
            partitions=[leader_report(c.current, proposals=[proposal])],
        )
        c.decide(now)
    elections = 1 + MAX_EPOCH_HISTORY + 5
    assert c.current.leader_epoch == elections
    history = c.current.epoch_history
    assert [h.epoch for h in history] == list(
        range(elections - MAX_EPOCH_HISTORY + 1, elections + 1)
    )
