"""Fetch sessions' bookkeeping on both sides (KIP-227): what a request lists, what the
leader holds, and the session-level refusals."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from epochlog.protocol.errors import (
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from epochlog_broker.replication.fetch_session import (
    NEW_SESSION,
    FollowerSession,
    LeaderSessions,
    SessionFetchAnswer,
    SessionFetchRequest,
)
from epochlog_broker.replication.messages import Batch, FetchData, FetchRequest


@dataclass(frozen=True)
class W:
    request: FetchRequest
    session: int = 1


def fetch(offset: int, epoch: int = 1, replica: int = 2) -> FetchRequest:
    return FetchRequest(replica, 1, epoch, offset)


batches = (Batch(0, 3, 1),)


def build(s: FollowerSession[W]) -> SessionFetchRequest:
    request = s.build(max_wait_ms=500, max_bytes=1000, partition_max_bytes=100)
    assert request is not None
    return request


def listed(request: SessionFetchRequest) -> dict[str, int]:
    return {n: f.fetch_offset for n, f in request.partitions}


def test_a_session_lists_everything_once_then_only_what_changed() -> None:
    s: FollowerSession[W] = FollowerSession(1, 2, 1)
    assert not s.ready()
    for name in ("a", "b", "c"):
        s.want(name, W(fetch(0)))
    assert s.ready()
    first = build(s)
    assert (first.session_id, first.session_epoch) == (NEW_SESSION, NEW_SESSION)
    assert listed(first) == {"a": 0, "b": 0, "c": 0}
    assert not s.ready(), "one request in flight"
    s.on_answer(SessionFetchAnswer(7))
    second = build(s)
    assert (second.session_id, second.session_epoch) == (7, 1)
    assert (second.partitions, second.forgotten) == ((), ()), "nothing changed: a long poll"
    s.on_answer(SessionFetchAnswer(7))
    s.want("b", W(fetch(5)))
    s.want("a", W(fetch(0)))  # the same fetch again: not news
    s.drop("c")
    third = build(s)
    assert listed(third) == {"b": 5}
    assert third.forgotten == ("c",)
    assert third.session_epoch == 2


def test_answered_partitions_are_listed_again_and_errors_leave_the_session() -> None:
    s: FollowerSession[W] = FollowerSession(1, 2, 1)
    s.want("a", W(fetch(0)))
    s.want("b", W(fetch(0)))
    build(s)
    answered = s.on_answer(
        SessionFetchAnswer(7, (("a", FetchData(1, 3)), ("b", UnknownLeaderEpochError("x"))))
    )
    assert [(w.request.fetch_offset, type(pa).__name__) for w, pa in answered] == [
        (0, "FetchData"),
        (0, "UnknownLeaderEpochError"),
    ]
    assert s.wanted == {}, "the core wants each one's next fetch after applying it"
    s.want("a", W(fetch(0)))
    request = build(s)
    assert listed(request) == {"a": 0}, "answered: listed again though unchanged"
    assert request.forgotten == (), "b left the session with its error"
    assert "b" not in s.known


def test_a_moved_log_start_lists_the_partition_again() -> None:
    """The leader's low watermark counts the log start each fetch reports: a follower
    that moved its log start says so, even with its position unchanged."""
    s: FollowerSession[W] = FollowerSession(1, 2, 1)
    s.want("a", W(fetch(4)))
    build(s)
    s.on_answer(SessionFetchAnswer(7))
    s.want("a", W(FetchRequest(2, 1, 1, 4, log_start_offset=3)))
    request = build(s)
    assert [(n, f.fetch_offset, f.log_start_offset) for n, f in request.partitions] == [("a", 4, 3)]


def syncing(offset: int, persisted: int) -> FetchRequest:
    return FetchRequest(2, 1, 1, offset, persisted_log_end_offset=persisted)


def syncing_after_data() -> FollowerSession[W]:
    """A session on a and b whose answer brought a's records, appended, not fsynced yet."""
    s: FollowerSession[W] = FollowerSession(1, 2, 1)
    s.want("a", W(fetch(0)))
    s.want("b", W(fetch(0)))
    build(s)
    s.on_answer(SessionFetchAnswer(7, (("a", FetchData(1, 0, batches)),)))
    s.want("a", W(syncing(4, 0)))
    return s


def test_after_data_the_next_request_goes_while_the_data_syncs() -> None:
    s = syncing_after_data()
    assert s.ready(), "pipelined: ask for more while a's records sync"
    request = build(s)
    assert [(n, f.fetch_offset, f.persisted) for n, f in request.partitions] == [("a", 4, 0)]


def test_after_an_empty_answer_the_session_waits_for_its_syncs() -> None:
    s = syncing_after_data()
    build(s)
    s.on_answer(SessionFetchAnswer(7, (("a", FetchData(1, 0)),)))
    s.want("a", W(syncing(4, 0)))
    assert not s.ready(), "nothing new came: the next request waits for a's fsync"
    s.want("a", W(syncing(4, 3)))
    assert not s.ready(), "a still holds records past its persisted end"
    s.want("a", W(fetch(4)))
    assert s.ready()
    assert [(n, f.persisted) for n, f in build(s).partitions] == [("a", 4)]


def test_a_failure_starts_the_session_over() -> None:
    s: FollowerSession[W] = FollowerSession(1, 2, 1)
    s.want("a", W(fetch(0)))
    build(s)
    s.on_answer(SessionFetchAnswer(7))
    build(s)
    assert s.on_failure(None) == 1
    assert s.on_failure(None) == 2
    assert s.on_failure(InvalidFetchSessionEpochError("x")) == 0, "a reopen goes at once"
    request = build(s)
    assert request.full
    assert listed(request) == {"a": 0}


def test_a_role_replaced_with_the_same_fetch_is_listed_again() -> None:
    s: FollowerSession[W] = FollowerSession(1, 2, 1)
    s.want("a", W(fetch(3), session=1))
    build(s)
    s.on_answer(SessionFetchAnswer(7))
    s.want("a", W(fetch(3), session=2))
    assert listed(build(s)) == {"a": 3}


# -- leader side -----------------------------------------------------------------------


def request(
    session_id: int = 0,
    epoch: int = 0,
    partitions: dict[str, int] | None = None,
    forgotten: tuple[str, ...] = (),
    replica: int = 2,
    broker_epoch: int = 1,
) -> SessionFetchRequest:
    return SessionFetchRequest(
        replica,
        broker_epoch,
        session_id,
        epoch,
        tuple(
            (n, FetchRequest(replica, broker_epoch, 1, o)) for n, o in (partitions or {}).items()
        ),
        forgotten,
    )


def test_leader_sessions_check_id_and_sequence() -> None:
    sessions = LeaderSessions(id_base=5_000_000)
    s = sessions.receive(request(partitions={"a": 0, "b": 0}), 10)
    assert s.session_id == 5_000_001
    assert sorted(s.take_pending()) == ["a", "b"]
    assert sessions.receive(request(s.session_id, 1), 11) is s
    with pytest.raises(InvalidFetchSessionEpochError):
        sessions.receive(request(s.session_id, 1), 12)
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.receive(request(s.session_id + 1, 2), 12)
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.receive(request(s.session_id, 2, broker_epoch=2), 12)
    # A new process of the follower opens a new session; the old process cannot.
    newer = sessions.receive(request(partitions={"a": 0}, broker_epoch=2), 13)
    assert newer.session_id != s.session_id
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.current(2, s.session_id)
    with pytest.raises(NotLeaderOrFollowerError):
        sessions.receive(request(partitions={"a": 0}, broker_epoch=1), 14)
    assert sessions.interest == {"a": {2}}, "b went with the replaced session"


def test_appends_wake_only_the_sessions_holding_the_partition() -> None:
    sessions = LeaderSessions()
    two = sessions.receive(request(partitions={"a": 0, "b": 0}), 1)
    three = sessions.receive(request(partitions={"b": 0}, replica=3), 1)
    two.take_pending()
    three.take_pending()
    sessions.appended("a")
    assert sessions.take_woken() == {2}
    assert two.take_pending() == ["a"]
    assert three.take_pending() == []
    sessions.high_watermark_moved("b")
    assert sessions.take_woken() == set(), "a moved high watermark rides along"
    assert two.take_high_watermark_moved() == ["b"]
    sessions.receive(request(two.session_id, 1, forgotten=("a",)), 2)
    sessions.appended("a")
    assert sessions.take_woken() == set()


def test_pending_partitions_start_after_the_one_served_last() -> None:
    sessions = LeaderSessions()
    s = sessions.receive(request(partitions={n: 0 for n in "abcd"}), 1)
    s.take_pending()
    s.last_served = "b"
    s.pending.update("abcd")
    assert s.take_pending() == ["c", "d", "a", "b"]


def test_a_session_still_syncing_is_not_held() -> None:
    sessions = LeaderSessions()
    s = sessions.receive(request(partitions={"a": 0, "b": 0}), 1)
    assert s.may_wait
    pipelined = SessionFetchRequest(
        2, 1, s.session_id, 1, (("a", FetchRequest(2, 1, 1, 4, persisted_log_end_offset=0)),)
    )
    sessions.receive(pipelined, 2)
    assert not s.may_wait, "a's persisted end is about to move: answer at once"
    sessions.receive(request(s.session_id, 2, partitions={"a": 4}), 3)
    assert s.may_wait
    sessions.receive(
        SessionFetchRequest(
            2, 1, s.session_id, 3, (("b", FetchRequest(2, 1, 1, 9, persisted_log_end_offset=1)),)
        ),
        4,
    )
    sessions.receive(request(s.session_id, 4, forgotten=("b",)), 5)
    assert s.may_wait, "a forgotten partition syncs nothing the leader waits for"


def test_a_partition_that_stopped_fetching_holds_up_no_request() -> None:
    s = syncing_after_data()
    build(s)
    # a's leader moved on: its answer is an error and a stops fetching (no new want),
    # with its records still syncing. b must go on.
    s.on_answer(SessionFetchAnswer(7, (("a", NotLeaderOrFollowerError("moved")),)))
    s.want("b", W(fetch(0)))
    assert s.ready()
