"""The follower's rules for the leader's log start offset: a follower whose log ends below
it starts its log over there (Kafka's truncateFullyAndStartAt), and an empty log meeting a
batch that holds the start starts over at the batch's base offset instead."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import InvalidRequestError, OffsetOutOfRangeError
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.replication.follower import (
    Append,
    Follower,
    FollowerState,
    SendFetch,
    SendOffsetsForLeaderEpoch,
    StartAt,
    Truncate,
)
from epochlog_broker.replication.messages import (
    UNDEFINED,
    Batch,
    DivergingEpoch,
    EpochEndOffset,
    FetchData,
)

from .test_follower import batches, make_follower
from .test_leader import make_leader


def fetching(history: tuple[tuple[int, int], ...] = (), log_end: int = 0, hw: int = 0) -> Follower:
    f = make_follower(history=history, log_end=log_end, hw=hw, find_divergence_first=False)
    f.start()
    return f


def test_a_follower_below_the_leaders_log_start_starts_over_there() -> None:
    f = fetching(history=((1, 0),), log_end=4, hw=4)
    actions = f.on_error(OffsetOutOfRangeError("below the log start", logStartOffset=40))
    assert actions[0] == StartAt(40)
    [send] = actions[1:]
    assert isinstance(send, SendFetch)
    assert send.request.fetch_offset == 40
    assert (f.log_end_offset, f.persisted_log_end_offset, len(f.epochs)) == (40, 40, 0)
    assert f.high_watermark == 40
    assert f.state is FollowerState.FETCHING


def test_out_of_range_beyond_the_leaders_log_end_still_stops_the_follower() -> None:
    f = fetching(history=((1, 0),), log_end=4)
    assert f.on_error(OffsetOutOfRangeError("beyond the log end", logEndOffset=2)) == []
    assert f.state is FollowerState.STOPPED


def test_an_empty_log_beyond_the_leaders_log_end_starts_over_from_the_beginning() -> None:
    """Simulator seed 7400180: a follower whose disk was wiped started over at its
    leader's log start, 407; unclean recoveries since began a history whose log ended at
    353. Fetching at 407 was out of range, and the follower stopped for good: the leader's
    records below 407 never reached it. With an empty log it has nothing to lose: it
    starts over at 0, and the leader's answer moves it up to the leader's log start."""
    f = fetching()
    f.on_error(OffsetOutOfRangeError("below the log start", logStartOffset=407))
    assert (f.log_end_offset, f.high_watermark) == (407, 407)
    actions = f.on_error(OffsetOutOfRangeError("beyond the log end 353", logEndOffset=353))
    assert actions[0] == StartAt(0)
    [send] = actions[1:]
    assert isinstance(send, SendFetch)
    assert send.request.fetch_offset == 0
    assert (f.log_end_offset, f.high_watermark, f.state) == (0, 0, FollowerState.FETCHING)
    # A leader whose log starts above 0 says so, and the follower starts over there.
    assert f.on_error(OffsetOutOfRangeError("below", logStartOffset=120))[0] == StartAt(120)


def test_a_late_below_the_log_start_answer_after_starting_over_is_asked_again() -> None:
    """Soak seed 19984: the follower started over at the leader's log start (265) on one
    answer; a second "fetch offset 0 is below the log start 265", for an older fetch,
    stopped it for good. A log start at or below our log end cannot be about the fetch
    we send now: fetch again."""
    f = fetching()
    f.on_error(
        OffsetOutOfRangeError("fetch offset 0 is below the log start 265", logStartOffset=265)
    )
    assert f.log_end_offset == 265
    [send] = f.on_error(
        OffsetOutOfRangeError("fetch offset 0 is below the log start 265", logStartOffset=265)
    )
    assert isinstance(send, SendFetch)
    assert send.request.fetch_offset == 265
    assert f.state is FollowerState.FETCHING
    g = fetching(history=((1, 0),), log_end=50)
    [again] = g.on_error(OffsetOutOfRangeError("x", logStartOffset=40))
    assert isinstance(again, SendFetch)
    assert (g.state, g.log_end_offset) == (FollowerState.FETCHING, 50)


def test_an_empty_log_meeting_a_batch_that_holds_the_start_starts_at_its_base() -> None:
    f = fetching()
    f.on_error(OffsetOutOfRangeError("below the log start", logStartOffset=13))
    straddling = (Batch(10, 15, 5, "r10-15"), *batches(16, 2, 5))
    actions = f.on_fetch_response(FetchData(5, 18, straddling, 13))
    assert actions[:2] == [StartAt(10), Append(straddling)]
    assert isinstance(actions[2], SendFetch)
    assert f.log_end_offset == 18


def test_a_log_with_records_never_starts_over_on_a_batch() -> None:
    f = fetching(history=((5, 0),), log_end=12)
    with pytest.raises(InvalidRequestError, match="batch at 10, expected 12"):
        f.on_fetch_response(FetchData(5, 18, (Batch(10, 15, 5, "x"),)))
    assert (f.log_end_offset, len(f.epochs)) == (12, 1)


def test_a_follower_of_a_leader_that_started_over_starts_over_at_its_log_start() -> None:
    """Soak seed 3295: a broker whose log started over at the leader's log start (49) is
    elected with an empty history; a follower asking where its epoch 3 ends must not
    truncate to 0 (a later leader would hand out offsets 0..48 again). The leader's
    history begins at 49: the follower starts its log over there, in one durable step,
    and its log end stays 49."""
    leader = make_leader(epoch=4, log_end=49, hw=49)
    assert leader.epochs.entries == (EpochEntry(4, 49),)
    f = make_follower(history=((2, 0), (3, 30)), log_end=49, hw=49, epoch=4)
    [query] = f.start()
    assert isinstance(query, SendOffsetsForLeaderEpoch)
    answer = leader.offsets_for_leader_epoch(query.request)
    assert answer == EpochEndOffset(UNDEFINED, 49)
    actions = f.on_epoch_end_offset(answer)
    assert not any(isinstance(a, Truncate) for a in actions)
    assert actions[0] == StartAt(49)
    assert (f.log_end_offset, len(f.epochs), f.high_watermark) == (49, 0, 49)
    [send] = actions[1:]
    assert isinstance(send, SendFetch)
    assert send.request.fetch_offset == 49


def test_a_deposed_leaders_tail_below_the_leaders_history_is_not_kept() -> None:
    """The leader's history begins at 55 in epoch 2 (its log started over there); a
    follower holding epoch 1 up to 65, of which only 0..29 were ever committed, hears
    that none of its epochs is the leader's and starts over at 55: it keeps none of its
    epoch-1 records, neither above 55 nor below (30..54 were never committed)."""
    leader = make_leader(epoch=3, log_end=80, hw=80, history=((2, 55), (3, 80)))
    f = make_follower(history=((1, 0),), log_end=65, hw=30, epoch=3)
    [query] = f.start()
    assert isinstance(query, SendOffsetsForLeaderEpoch)
    answer = leader.offsets_for_leader_epoch(query.request)
    assert answer == EpochEndOffset(UNDEFINED, 55)
    actions = f.on_epoch_end_offset(answer)
    assert actions[0] == StartAt(55)
    assert (f.log_end_offset, len(f.epochs)) == (55, 0)


def test_a_fetch_from_below_the_leaders_history_diverges_to_its_start() -> None:
    """The same with KIP-320 fetches (no epoch query first): the leader answers a diverging
    epoch UNDEFINED ending at 55 and the follower starts over there."""
    leader = make_leader(epoch=3, log_end=80, hw=80, history=((2, 55), (3, 80)))
    f = make_follower(history=((1, 0),), log_end=65, hw=30, epoch=3, find_divergence_first=False)
    [send] = f.start()
    assert isinstance(send, SendFetch)
    decision = leader.on_fetch(send.request, 0)
    assert isinstance(decision.answer, DivergingEpoch)
    assert (decision.answer.epoch, decision.answer.end_offset) == (UNDEFINED, 55)
    actions = f.on_fetch_response(decision.answer)
    assert actions[0] == StartAt(55)
    assert f.log_end_offset == 55
