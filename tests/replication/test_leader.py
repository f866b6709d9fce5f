"""Unit tests of the leader's rules, one behaviour per test."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from epochlog_broker.log.epochs import EpochEntry, EpochHistory
from epochlog_broker.replication.leader import (
    Leader,
    ProduceCompleted,
    ProduceFailed,
    ProposeIsr,
    ReadRange,
)
from epochlog_broker.replication.messages import (
    UNDEFINED,
    Acks,
    DivergingEpoch,
    EpochEndOffset,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)


def make_leader(
    *,
    isr: tuple[int, ...] = (1, 2, 3),
    replicas: tuple[int, ...] = (1, 2, 3),
    log_end: int = 0,
    persisted: int | None = None,
    hw: int = 0,
    epoch: int = 5,
    history: tuple[tuple[int, int], ...] = (),
    min_isr: int = 2,
    now_ms: int = 0,
    reported_hw: int = 0,
) -> Leader:
    return Leader(
        partition="t-0",
        broker_id=1,
        leader_epoch=epoch,
        partition_epoch=10,
        isr=isr,
        replicas=replicas,
        min_insync_replicas=min_isr,
        replica_lag_time_max_ms=10_000,
        log_end_offset=log_end,
        persisted_log_end_offset=log_end if persisted is None else persisted,
        high_watermark=hw,
        epochs=EpochHistory(EpochEntry(e, s) for e, s in history),
        now_ms=now_ms,
        reported_high_watermark=reported_hw,
    )


def fetch(
    leader: Leader,
    replica: int,
    offset: int,
    *,
    now_ms: int = 0,
    epoch: int | None = None,
    broker_epoch: int = 1,
    last_epoch: int | None = None,
    persisted: int | None = None,
):
    return leader.on_fetch(
        FetchRequest(
            replica_id=replica,
            broker_epoch=broker_epoch,
            leader_epoch=leader.leader_epoch if epoch is None else epoch,
            fetch_offset=offset,
            last_fetched_epoch=(
                (leader.leader_epoch if offset > 0 else UNDEFINED)
                if last_epoch is None
                else last_epoch
            ),
            persisted_log_end_offset=persisted,
        ),
        now_ms,
    )


def append(leader: Leader, n: int, *, rid: int = 0, acks: Acks = Acks.ALL, now_ms: int = 0):
    epoch = leader.begin_produce(acks)
    assert epoch == leader.leader_epoch
    last = leader.log_end_offset + n - 1
    return leader.on_appended(
        request_id=rid,
        last_offset=last,
        log_end_offset=last + 1,
        acks=acks,
        now_ms=now_ms,
        timeout_ms=500,
    )


# -- high watermark ---------------------------------------------------------------------


def test_hw_is_min_persisted_end_of_isr():
    leader = make_leader()
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 7)
    assert leader.high_watermark == 0, "replica 3 not heard from yet"
    fetch(leader, 3, 4)
    assert leader.high_watermark == 4
    fetch(leader, 3, 9)
    assert leader.high_watermark == 7


def test_hw_counts_leader_end_only_after_fsync():
    leader = make_leader()
    append(leader, 10)
    fetch(leader, 2, 10)
    fetch(leader, 3, 10)
    assert leader.high_watermark == 0, "the leader's own records are not on disk yet"
    leader.on_flushed(6)
    assert leader.high_watermark == 6
    leader.on_flushed(10)
    assert leader.high_watermark == 10


def test_hw_never_decreases_when_a_follower_reports_less():
    leader = make_leader()
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 8)
    fetch(leader, 3, 8)
    assert leader.high_watermark == 8
    fetch(leader, 2, 3, broker_epoch=2)
    assert leader.high_watermark == 8


def test_hw_from_checkpoint_is_kept_and_clamped_to_log_end():
    assert make_leader(log_end=20, hw=12).high_watermark == 12
    assert make_leader(log_end=20, hw=50).high_watermark == 20


def test_replica_leaves_hw_quorum_only_after_recorded_isr_drops_it():
    leader = make_leader()
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 10)
    fetch(leader, 3, 2)
    assert leader.high_watermark == 2
    fetch(leader, 2, 10, now_ms=60_000)
    assert leader.high_watermark == 2, "lagging replica 3 still holds the HW back"
    leader.on_isr_update({1, 2}, partition_epoch=11)
    assert leader.high_watermark == 10


def test_stale_isr_update_is_ignored():
    leader = make_leader()
    leader.on_isr_update({1}, partition_epoch=10)
    assert leader.isr == {1, 2, 3}
    leader.on_isr_update({1}, partition_epoch=9)
    assert leader.isr == {1, 2, 3}
    assert leader.partition_epoch == 10


# -- ISR expansion (KIP-497) ------------------------------------------------------------


def test_caught_up_follower_is_proposed_and_counts_for_hw_from_proposal():
    leader = make_leader(isr=(1, 2))
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 10)
    assert leader.high_watermark == 10
    append(leader, 5)
    leader.on_flushed(15)
    decision = fetch(leader, 3, 10)
    assert decision.actions == (ProposeIsr("t-0", 5, 10, frozenset({1, 2, 3}), ((3, 1),), 1),)
    assert leader.isr == {1, 2}, "not recorded yet"
    assert leader.maximal_isr == {1, 2, 3}
    fetch(leader, 2, 15)
    assert leader.high_watermark == 10, "replica 3 (at 10) is already in the HW quorum"
    fetch(leader, 3, 15)
    assert leader.high_watermark == 15


def test_follower_below_hw_is_not_proposed():
    leader = make_leader(isr=(1, 2))
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 10)
    assert fetch(leader, 3, 9).actions == ()
    assert leader.maximal_isr == {1, 2}


def test_follower_below_epoch_start_offset_is_not_proposed():
    leader = make_leader(isr=(1, 2), log_end=20, hw=5, history=((4, 0),))
    assert leader.epoch_start_offset == 20
    assert fetch(leader, 3, 12, last_epoch=4).actions == ()
    assert leader.high_watermark == 5
    assert fetch(leader, 3, 20, last_epoch=4).actions != ()


def test_only_one_proposal_in_flight_and_rejection_reverts_quorum():
    leader = make_leader(isr=(1,), min_isr=1)
    assert len(fetch(leader, 2, 0).actions) == 1
    assert fetch(leader, 3, 0).actions == ()
    assert leader.maximal_isr == {1, 2}
    leader.on_isr_proposal_rejected()
    assert leader.maximal_isr == {1}
    (proposal,) = fetch(leader, 3, 0).actions
    assert isinstance(proposal, ProposeIsr)
    assert proposal.isr == {1, 3}


def test_refusal_of_an_earlier_proposal_leaves_a_later_one_counted():
    """The controller may refuse proposal 1 after the leader already made proposal 2 for the
    same replica (from an older report); proposal 2 may be recorded next, so the leader
    must keep counting it for the high watermark."""
    leader = make_leader(isr=(1,), min_isr=1)
    (first,) = fetch(leader, 2, 0).actions
    assert isinstance(first, ProposeIsr)
    leader.on_isr_proposal_rejected(first.proposal_id)
    (second,) = fetch(leader, 2, 0).actions
    assert isinstance(second, ProposeIsr)
    assert second.proposal_id != first.proposal_id
    leader.on_isr_proposal_rejected(first.proposal_id)
    assert leader.maximal_isr == {1, 2}
    append(leader, 3)
    leader.on_flushed(3)
    assert leader.high_watermark == 0, "replica 2 has not fetched the new records"
    leader.on_isr_proposal_rejected(second.proposal_id)
    assert leader.maximal_isr == {1}


def test_recorded_isr_update_clears_pending_proposal():
    leader = make_leader(isr=(1,), min_isr=1)
    fetch(leader, 2, 0)
    leader.on_isr_update({1, 2}, partition_epoch=11)
    assert leader.pending_proposal is None
    assert leader.maximal_isr == {1, 2}
    (proposal,) = fetch(leader, 3, 0).actions
    assert proposal == ProposeIsr("t-0", 5, 11, frozenset({1, 2, 3}), ((3, 1),), 2)


# -- fetch validation (KIP-320) ---------------------------------------------------------


def test_fetch_with_older_leader_epoch_is_fenced():
    leader = make_leader()
    with pytest.raises(FencedLeaderEpochError):
        fetch(leader, 2, 0, epoch=4)


def test_fetch_with_newer_leader_epoch_is_unknown():
    leader = make_leader()
    with pytest.raises(UnknownLeaderEpochError):
        fetch(leader, 2, 0, epoch=6)


def test_fetch_from_non_replica_is_rejected():
    # Retriable: a replica a reassignment adds may fetch before the leader hears of it.
    leader = make_leader()
    with pytest.raises(LeaderNotAvailableError):
        fetch(leader, 9, 0)
    with pytest.raises(LeaderNotAvailableError):
        fetch(leader, 1, 0)


def test_a_reassignment_at_the_same_leader_epoch_adds_and_drops_followers():
    leader = make_leader()
    leader.on_isr_update({1, 2}, leader.partition_epoch + 1, (1, 2, 9))
    fetch(leader, 9, 0)
    assert leader.follower_log_end_offset(9) == 0
    assert leader.follower_log_end_offset(3) is None
    with pytest.raises(LeaderNotAvailableError):
        fetch(leader, 3, 0)


def test_fetch_with_older_broker_epoch_is_rejected_and_not_counted():
    leader = make_leader()
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 4, broker_epoch=7)
    with pytest.raises(NotLeaderOrFollowerError):
        fetch(leader, 2, 10, broker_epoch=6)
    assert leader.follower_log_end_offset(2) == 4


def test_fetch_beyond_log_end_without_an_epoch_is_out_of_range():
    leader = make_leader(log_end=3, history=((1, 0),))
    with pytest.raises(OffsetOutOfRangeError):
        fetch(leader, 2, 4, last_epoch=UNDEFINED)


def test_fetch_beyond_log_end_with_an_epoch_answers_where_to_truncate():
    # Kafka looks at the fetch's last epoch before the offset range: a follower past
    # the leader's log end is told where that epoch ends here, and truncates there.
    leader = make_leader(epoch=3, log_end=7, hw=5, history=((1, 0), (3, 5)))
    assert fetch(leader, 2, 9, last_epoch=3).answer == DivergingEpoch(3, 5, 3, 7)
    assert fetch(leader, 2, 9, last_epoch=2).answer == DivergingEpoch(3, 5, 1, 5)
    assert leader.follower_log_end_offset(2) is None, "a diverged position is not recorded"


def test_fetch_returns_range_to_log_end_and_hw():
    leader = make_leader(isr=(1, 2))
    append(leader, 10)
    leader.on_flushed(10)
    decision = fetch(leader, 2, 4)
    assert decision.answer == ReadRange(5, 4, 10, 4)


def test_fetch_past_end_of_followers_epoch_answers_diverging_epoch():
    # Leader: epoch 1 at 0..4, epoch 3 from 5. Follower wrote epoch 1 up to 8.
    leader = make_leader(epoch=3, log_end=12, hw=5, history=((1, 0), (3, 5)))
    decision = fetch(leader, 2, 8, last_epoch=1)
    assert decision.answer == DivergingEpoch(3, 5, 1, 5)
    assert leader.follower_log_end_offset(2) is None, "a diverged position is not recorded"


def test_fetch_with_epoch_unknown_to_leader_answers_largest_smaller_epoch():
    leader = make_leader(epoch=4, log_end=12, hw=2, history=((1, 0), (4, 7)))
    decision = fetch(leader, 2, 6, last_epoch=2)
    assert decision.answer == DivergingEpoch(4, 2, 1, 7)


def test_fetch_within_followers_epoch_gets_data():
    leader = make_leader(epoch=3, log_end=12, hw=5, history=((1, 0), (3, 5)))
    assert isinstance(fetch(leader, 2, 5, last_epoch=1).answer, ReadRange)


def test_offsets_for_leader_epoch_uses_history_and_validates_epoch():
    leader = make_leader(epoch=3, log_end=12, history=((1, 0), (2, 4)))
    ask = leader.offsets_for_leader_epoch
    assert ask(OffsetsForLeaderEpochRequest(2, 3, 1)) == EpochEndOffset(1, 4)
    assert ask(OffsetsForLeaderEpochRequest(2, 3, 2)) == EpochEndOffset(2, 12)
    # Below the first epoch (its head removed): no epoch of ours, and where the history
    # starts, so that the follower starts over there instead of keeping records of an
    # epoch nothing here vouches for.
    assert ask(OffsetsForLeaderEpochRequest(2, 3, 0)) == EpochEndOffset(UNDEFINED, 0)
    with pytest.raises(FencedLeaderEpochError):
        ask(OffsetsForLeaderEpochRequest(2, 2, 1))


def test_leader_history_gains_its_epoch_at_the_log_end():
    leader = make_leader(epoch=3, log_end=12, history=((1, 0),))
    assert leader.epochs.entries == (EpochEntry(1, 0), EpochEntry(3, 12))


# -- lastCaughtUpTime (KIP-16) ----------------------------------------------------------


def test_isr_members_start_caught_up_at_election_others_never():
    leader = make_leader(isr=(1, 2), now_ms=1_000)
    assert leader.last_caught_up_time_ms(2) == 1_000
    assert leader.last_caught_up_time_ms(3) is None


def test_fetch_at_log_end_is_caught_up_now():
    leader = make_leader()
    append(leader, 10)
    fetch(leader, 2, 10, now_ms=5_000)
    assert leader.last_caught_up_time_ms(2) == 5_000


def test_fetch_reaching_previous_log_end_is_caught_up_as_of_previous_fetch():
    leader = make_leader()
    append(leader, 10)
    fetch(leader, 2, 3, now_ms=1_000)  # leader end was 10 at this fetch
    append(leader, 10)  # a burst
    fetch(leader, 2, 10, now_ms=2_000)
    assert leader.last_caught_up_time_ms(2) == 1_000
    append(leader, 5)  # leader end was 20 at the previous fetch, is 25 now
    fetch(leader, 2, 15, now_ms=3_000)
    assert leader.last_caught_up_time_ms(2) == 1_000, "15 is short of the previous end 20"
    append(leader, 5)  # end was 25 at the previous fetch, is 30 now
    fetch(leader, 2, 25, now_ms=4_000)
    assert leader.last_caught_up_time_ms(2) == 3_000


def test_pipelined_fetches_count_only_what_the_follower_persisted():
    leader = make_leader(isr=(1, 2), min_isr=2)
    append(leader, 10)
    leader.on_flushed(10)
    fetch(leader, 2, 10, persisted=4, now_ms=1_000)
    assert leader.follower_log_end_offset(2) == 4
    assert leader.high_watermark == 4, "the records past 4 are not on the follower's disk"
    assert leader.last_caught_up_time_ms(2) == 0
    fetch(leader, 2, 10, persisted=10, now_ms=1_100)
    assert leader.high_watermark == 10
    assert leader.last_caught_up_time_ms(2) == 1_100


def test_a_pipelined_follower_under_steady_load_stays_caught_up():
    # Each answer is persisted a fetch or two after it came: the follower is caught up
    # as of the fetch whose leader end its disk has reached.
    leader = make_leader(isr=(1, 2), min_isr=2)
    fetched = 0
    persisted: list[int] = []
    for t in range(1, 31):
        append(leader, 3)
        leader.on_flushed(leader.log_end_offset)
        persisted.append(fetched)
        decision = fetch(
            leader, 2, fetched, persisted=persisted[max(0, len(persisted) - 3)], now_ms=t * 100
        )
        assert isinstance(decision.answer, ReadRange)
        fetched = decision.answer.end_offset
    caught_up = leader.last_caught_up_time_ms(2)
    assert caught_up is not None
    assert caught_up >= 2_700
    assert leader.high_watermark > 0


def test_a_fetch_claiming_more_on_disk_than_it_holds_is_refused():
    leader = make_leader()
    append(leader, 10)
    with pytest.raises(InvalidRequestError):
        fetch(leader, 2, 4, persisted=5)
    assert leader.follower_log_end_offset(2) is None


def test_follower_that_never_reaches_the_end_keeps_its_old_caught_up_time():
    leader = make_leader(now_ms=0)
    append(leader, 10)
    fetch(leader, 2, 0, now_ms=1_000)
    append(leader, 10)
    fetch(leader, 2, 5, now_ms=2_000)
    fetch(leader, 2, 8, now_ms=3_000)
    assert leader.last_caught_up_time_ms(2) == 0


def test_heartbeat_reports_followers_and_own_state():
    leader = make_leader(now_ms=100)
    append(leader, 4)
    leader.on_flushed(4)
    fetch(leader, 2, 4, now_ms=200)
    assert (leader.leader_epoch, leader.persisted_log_end_offset, leader.high_watermark) == (
        5,
        4,
        0,
    )
    # Replica 3 has not fetched: nothing to report. Replica 2 caught up at 200.
    assert leader.reported_followers(now_ms=200, window_ms=0) == ((2, 4, True, None),)
    assert leader.reported_followers(now_ms=201, window_ms=0) == ((2, 4, False, 200),)


# -- acks ---------------------------------------------------------------------------------


def test_acks_all_refused_when_recorded_isr_below_min():
    leader = make_leader(isr=(1,), min_isr=2)
    with pytest.raises(NotEnoughReplicasError):
        leader.begin_produce(Acks.ALL)
    assert leader.begin_produce(Acks.LEADER) == 5


def test_acks_all_completes_when_hw_passes_last_offset():
    leader = make_leader(isr=(1, 2))
    assert append(leader, 3, rid=7) == []
    assert leader.on_flushed(3) == []
    assert fetch(leader, 2, 2).actions == ()
    assert fetch(leader, 2, 3).actions == (ProduceCompleted(7, 2),)


def test_acks_leader_completes_on_leader_fsync():
    leader = make_leader(isr=(1, 2))
    assert append(leader, 3, rid=1, acks=Acks.LEADER) == []
    assert leader.on_flushed(3) == [ProduceCompleted(1, 2)]


def test_acks_none_completes_immediately():
    leader = make_leader(isr=(1, 2))
    assert append(leader, 3, rid=1, acks=Acks.NONE) == [ProduceCompleted(1, 2)]


def test_pending_acks_complete_in_offset_order_up_to_hw():
    leader = make_leader(isr=(1, 2))
    append(leader, 2, rid=1)
    append(leader, 2, rid=2)
    append(leader, 2, rid=3)
    leader.on_flushed(6)
    assert fetch(leader, 2, 4).actions == (ProduceCompleted(1, 1), ProduceCompleted(2, 3))
    assert fetch(leader, 2, 6).actions == (ProduceCompleted(3, 5),)


def test_acks_time_out_at_deadline():
    leader = make_leader(isr=(1, 2))
    append(leader, 2, rid=1, now_ms=1_000)
    assert leader.next_deadline_ms() == 1_500
    assert leader.tick(1_499) == []
    (failed,) = leader.tick(1_500)
    assert isinstance(failed, ProduceFailed)
    assert isinstance(failed.error, RequestTimedOutError)
    assert leader.next_deadline_ms() is None


def test_acks_all_fails_when_isr_shrank_below_min_before_hw_passed():
    leader = make_leader(isr=(1, 2), min_isr=2)
    append(leader, 2, rid=1)
    leader.on_flushed(2)
    (failed,) = leader.on_isr_update({1}, partition_epoch=11)
    assert isinstance(failed, ProduceFailed)
    assert isinstance(failed.error, NotEnoughReplicasAfterAppendError)
    assert leader.high_watermark == 0, "KIP-966: the HW stays below minInsyncReplicas"


def test_resign_fails_waiting_requests_and_stops_serving():
    leader = make_leader(isr=(1, 2))
    append(leader, 2, rid=1)
    (failed,) = leader.resign()
    assert isinstance(failed, ProduceFailed)
    assert isinstance(failed.error, NotLeaderOrFollowerError)
    with pytest.raises(NotLeaderOrFollowerError):
        leader.begin_produce(Acks.NONE)
    with pytest.raises(NotLeaderOrFollowerError):
        fetch(leader, 2, 0)


# -- KIP-207 ----------------------------------------------------------------------------


def test_latest_offset_unavailable_until_hw_reaches_log_end_at_election():
    leader = make_leader(isr=(1, 2), log_end=10, hw=6, history=((4, 0),))
    with pytest.raises(OffsetNotAvailableError) as info:
        leader.latest_offset()
    assert info.value.retriable
    with pytest.raises(OffsetNotAvailableError):
        leader.client_high_watermark()
    with pytest.raises(OffsetNotAvailableError):
        leader.check_offsets_available()
    append(leader, 5)
    leader.on_flushed(15)
    fetch(leader, 2, 9, last_epoch=4)
    assert leader.high_watermark == 9
    with pytest.raises(OffsetNotAvailableError):
        leader.latest_offset()
    fetch(leader, 2, 12, last_epoch=5)
    assert leader.latest_offset() == 12
    assert leader.client_high_watermark() == 12


def test_gate_also_holds_until_previously_served_hw():
    leader = make_leader(isr=(1,), min_isr=1, log_end=5, hw=5, reported_hw=8, history=((4, 0),))
    with pytest.raises(OffsetNotAvailableError):
        leader.latest_offset()
    append(leader, 3)
    leader.on_flushed(8)
    assert leader.latest_offset() == 8


def test_latest_offsets_served_never_decrease():
    leader = make_leader(isr=(1, 2))
    seen = []
    broker_epoch = 1
    for end in (3, 7, 12):
        append(leader, end - leader.log_end_offset)
        leader.on_flushed(end)
        fetch(leader, 2, end - 1, broker_epoch=broker_epoch)
        seen.append(leader.latest_offset())
        # The follower restarts having lost data it claimed: served offsets hold.
        broker_epoch += 1
        fetch(leader, 2, 1, broker_epoch=broker_epoch)
        seen.append(leader.latest_offset())
    assert seen == sorted(seen)
    assert seen[-1] == 11
