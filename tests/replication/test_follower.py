"""Unit tests of the follower's rules, one behaviour per test."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from epochlog_broker.log.epochs import EpochEntry, EpochHistory
from epochlog_broker.replication.follower import (
    Append,
    Follower,
    FollowerState,
    SendFetch,
    SendOffsetsForLeaderEpoch,
    Truncate,
)
from epochlog_broker.replication.messages import (
    UNDEFINED,
    Batch,
    DivergingEpoch,
    EpochEndOffset,
    FetchData,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)


def make_follower(
    *,
    history: tuple[tuple[int, int], ...] = (),
    log_end: int = 0,
    persisted: int | None = None,
    hw: int = 0,
    epoch: int = 5,
    find_divergence_first: bool = True,
) -> Follower:
    return Follower(
        partition="t-0",
        broker_id=2,
        broker_epoch=9,
        leader_id=1,
        leader_epoch=epoch,
        log_end_offset=log_end,
        persisted_log_end_offset=log_end if persisted is None else persisted,
        high_watermark=hw,
        epochs=EpochHistory(EpochEntry(e, s) for e, s in history),
        find_divergence_first=find_divergence_first,
    )


def batches(start: int, n: int, epoch: int) -> tuple[Batch, ...]:
    return tuple(Batch(o, o, epoch, f"r{o}") for o in range(start, start + n))


def fetch_of(actions) -> FetchRequest:
    assert isinstance(actions[-1], SendFetch)
    assert actions[-1].leader_id == 1
    return actions[-1].request


def test_empty_log_fetches_from_zero_at_once():
    f = make_follower()
    (action,) = f.start()
    assert action == SendFetch(1, FetchRequest(2, 9, 5, 0, UNDEFINED))
    assert f.state is FollowerState.FETCHING


def test_log_with_data_first_asks_where_its_latest_epoch_ends():
    f = make_follower(history=((1, 0), (3, 4)), log_end=6)
    (action,) = f.start()
    assert action == SendOffsetsForLeaderEpoch(1, OffsetsForLeaderEpochRequest(2, 5, 3))


def test_unflushed_tail_is_dropped_before_anything_else():
    f = make_follower(history=((1, 0), (3, 4)), log_end=6, persisted=3)
    actions = f.start()
    assert actions[0] == Truncate(3)
    assert f.epochs.entries == (EpochEntry(1, 0),)
    assert actions[1] == SendOffsetsForLeaderEpoch(1, OffsetsForLeaderEpochRequest(2, 5, 1))


def test_truncates_to_leaders_end_of_our_latest_epoch():
    # KAFKA-1211 example 1 from A's side: leader B says epoch 1 ends at 1.
    f = make_follower(history=((1, 0),), log_end=2, hw=1)
    f.start()
    actions = f.on_epoch_end_offset(EpochEndOffset(1, 1))
    assert actions[0] == Truncate(1)
    assert fetch_of(actions) == FetchRequest(2, 9, 5, 1, 1)


def test_keeps_records_the_leader_has_in_the_same_epoch_even_above_hw():
    # KAFKA-1211 example 2: m2 is above A's HW but B has it in epoch 1.
    f = make_follower(history=((1, 0),), log_end=2, hw=0)
    f.start()
    actions = f.on_epoch_end_offset(EpochEndOffset(1, 2))
    assert actions == [SendFetch(1, FetchRequest(2, 9, 5, 2, 1))]
    assert f.log_end_offset == 2


def test_never_truncates_to_local_hw_when_leader_has_more():
    f = make_follower(history=((1, 0),), log_end=10, hw=2)
    f.start()
    actions = f.on_epoch_end_offset(EpochEndOffset(1, 30))
    assert not any(isinstance(a, Truncate) for a in actions)


def test_leader_missing_our_epoch_uses_our_end_of_its_epoch():
    # We: epoch 1 at 0..3, epoch 3 from 4. Leader's largest <= 3 is 2, ending at 9.
    f = make_follower(history=((1, 0), (3, 4)), log_end=7)
    assert f.divergence_point(EpochEndOffset(2, 9)) == 4
    f.start()
    assert f.on_epoch_end_offset(EpochEndOffset(2, 9))[0] == Truncate(4)


def test_leader_without_any_of_our_epochs_means_truncate_everything():
    f = make_follower(history=((3, 0),), log_end=7)
    assert f.divergence_point(EpochEndOffset(UNDEFINED, UNDEFINED)) == 0
    assert f.divergence_point(EpochEndOffset(1, 5)) == 0


def test_diverging_epoch_answer_truncates_then_fetches_again():
    f = make_follower(history=((1, 0),), log_end=8, find_divergence_first=False)
    assert fetch_of(f.start()) == FetchRequest(2, 9, 5, 8, 1)
    actions = f.on_fetch_response(DivergingEpoch(5, 3, 1, 5))
    assert actions[0] == Truncate(5)
    assert fetch_of(actions) == FetchRequest(2, 9, 5, 5, 1)


def test_appends_then_fetches_on_while_the_records_sync():
    f = make_follower()
    f.start()
    data = batches(0, 3, 5)
    actions = f.on_fetch_response(FetchData(5, 2, data))
    assert actions[0] == Append(data)
    assert fetch_of(actions) == FetchRequest(2, 9, 5, 3, 5, persisted_log_end_offset=0)
    assert f.state is FollowerState.FETCHING
    assert f.persisted_log_end_offset == 0
    assert f.high_watermark == 0, "a committed offset counts here only once it is on disk"
    actions = f.on_flushed(3)
    assert fetch_of(actions) == FetchRequest(2, 9, 5, 3, 5, persisted_log_end_offset=3)
    assert f.high_watermark == 2
    assert f.on_flushed(3) == [], "nothing new on disk: nothing to tell"


def test_the_leader_counts_the_persisted_end_not_the_log_end():
    f = make_follower()
    f.start()
    f.on_fetch_response(FetchData(5, 0, batches(0, 4, 5)))
    assert f.log_end_offset == 4
    request = fetch_of(f.on_flushed(2))
    assert (request.fetch_offset, request.persisted) == (4, 2)
    assert request.flushing
    with pytest.raises(ValueError, match="beyond log end"):
        f.on_flushed(5)


def test_a_restart_drops_the_unsynced_tail_it_fetched():
    f = make_follower(log_end=6, persisted=4, history=((5, 0),))
    actions = f.start()
    assert actions[0] == Truncate(4)
    assert f.log_end_offset == 4


def test_appended_batches_extend_epoch_history():
    f = make_follower(history=((1, 0),), log_end=2)
    f.start()
    f.on_epoch_end_offset(EpochEndOffset(1, 2))
    f.on_fetch_response(FetchData(5, 0, batches(2, 2, 3) + batches(4, 1, 5)))
    assert f.epochs.entries == (EpochEntry(1, 0), EpochEntry(3, 2), EpochEntry(5, 4))


def test_batches_must_continue_the_log():
    f = make_follower()
    f.start()
    with pytest.raises(InvalidRequestError):
        f.on_fetch_response(FetchData(5, 0, batches(1, 2, 5)))


def test_answer_from_other_leader_epoch_is_rejected():
    f = make_follower()
    f.start()
    with pytest.raises(InvalidRequestError):
        f.on_fetch_response(FetchData(4, 0, ()))


def test_hw_is_min_of_leader_hw_and_persisted_end_and_never_decreases():
    f = make_follower()
    f.start()
    f.on_fetch_response(FetchData(5, 3, batches(0, 5, 5)))
    assert f.high_watermark == 0, "nothing on disk yet"
    f.on_flushed(5)
    assert f.high_watermark == 3
    f.on_fetch_response(FetchData(5, 9, batches(5, 2, 5)))
    assert f.high_watermark == 5
    f.on_flushed(7)
    assert f.high_watermark == 7
    f.on_fetch_response(FetchData(5, 4, ()))
    assert f.high_watermark == 7


def test_empty_answer_fetches_again():
    f = make_follower()
    f.start()
    assert fetch_of(f.on_fetch_response(FetchData(5, 0, ()))).fetch_offset == 0


@pytest.mark.parametrize(
    "error", [FencedLeaderEpochError, NotLeaderOrFollowerError, OffsetOutOfRangeError]
)
def test_fenced_or_not_leader_stops_until_next_assignment(error):
    f = make_follower()
    f.start()
    assert f.on_error(error("x")) == []
    assert f.state is FollowerState.STOPPED
    assert isinstance(f.stop_reason, error)


def test_unknown_leader_epoch_retries_the_fetch():
    f = make_follower()
    f.start()
    assert fetch_of(f.on_error(UnknownLeaderEpochError("x"))).fetch_offset == 0
    assert f.state is FollowerState.FETCHING


def test_failed_epoch_query_is_resent():
    f = make_follower(history=((1, 0),), log_end=2)
    first = f.start()
    assert f.on_error(RequestTimedOutError("x")) == first
    assert f.on_error(None) == first
