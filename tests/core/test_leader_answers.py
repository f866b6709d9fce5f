"""A follower's requests to its leaders, as the core decides them for every shell: one
fetch session per leader broker, the wait before each request (backoff after failures,
per session and per partition, the idle wait), reopening a session the leader forgot,
the leader's high watermark for readiness, answers that do not fit the log, and the
long-poll wake-up."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import (
    FetchSessionIdNotFoundError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore, Effect, SendSession, SendToLeader
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.replication.fetch_backoff import FetchBackoff
from epochlog_broker.replication.fetch_session import SessionFetchAnswer, SessionFetchRequest
from epochlog_broker.replication.messages import Acks, FetchData, FetchRequest

NAME = "orders-0"
BACKOFF = FetchBackoff(backoff_ms=50, backoff_max_ms=200)


def assign(leader: int, epoch: int, replicas: tuple[int, ...] = (1, 2)) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=(
            PartitionAssignment(
                name=NAME,
                leader=leader,
                leader_epoch=epoch,
                partition_epoch=epoch,
                isr=(1, 2),
                replicas=replicas,
                min_insync_replicas=1,
            ),
        )
    )


def core(tmp_path: Path, broker_id: int, backoff: FetchBackoff = BACKOFF) -> BrokerCore:
    c = BrokerCore(
        broker_id=broker_id,
        broker_epoch=1,
        fs=OsFileSystem(),
        data_dir=str(tmp_path / f"b{broker_id}"),
        fetch_backoff=backoff,
    )
    c.open()
    return c


def only_send(effects: list[Effect]) -> SendToLeader:
    [send] = effects
    assert isinstance(send, SendToLeader)
    return send


def due(c: BrokerCore) -> SendSession:
    [session] = c.session_requests()
    return session


def next_request(c: BrokerCore, leader: int = 1) -> SessionFetchRequest:
    request = c.session_request(leader)
    assert request is not None
    return request


def follower_of_1(
    tmp_path: Path, backoff: FetchBackoff = BACKOFF
) -> tuple[BrokerCore, SessionFetchRequest]:
    """Broker 2 follows broker 1: its fetch joins the session with 1, which opens with a
    full request at once."""
    follower = core(tmp_path, 2, backoff)
    assert follower.on_heartbeat_response(assign(1, 1), 0) == []
    assert due(follower) == SendSession(1, 0)
    request = next_request(follower)
    assert request.full
    ((name, fetch),) = request.partitions
    assert (name, fetch.leader_epoch, fetch.fetch_offset) == (NAME, 1, 0)
    return follower, request


def test_failed_session_requests_back_off_doubling_up_to_the_bound(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    delays = []
    for _ in range(4):
        applied = follower.on_session_answer(1, request, None, "connection refused")
        assert applied.result == "unreachable"
        delays.append(due(follower).delay_ms)
        request = next_request(follower)
        assert request.full, "after a failure the session starts over"
    assert delays == [50, 100, 200, 200]


def test_an_answer_ends_the_backoff_and_gives_the_leaders_high_watermark(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    assert follower.partitions[NAME].leader_high_watermark is None
    follower.on_session_answer(1, request, None, "timed out")
    assert due(follower).delay_ms == 50
    request = next_request(follower)
    answer = SessionFetchAnswer(7, ((NAME, FetchData(leader_epoch=1, high_watermark=0)),))
    applied = follower.on_session_answer(1, request, answer)
    assert applied.result == "ok"
    assert follower.partitions[NAME].leader_high_watermark == 0
    assert due(follower).delay_ms == 0
    again = next_request(follower)
    assert (again.session_id, again.session_epoch) == (7, 1)
    assert [n for n, _ in again.partitions] == [NAME], "an answered partition is listed again"


def test_a_session_the_leader_forgot_is_opened_again_at_once(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    follower.on_session_answer(1, request, SessionFetchAnswer(7))
    request = next_request(follower)
    assert (request.session_id, request.session_epoch, request.partitions) == (7, 1, ())
    applied = follower.on_session_answer(1, request, FetchSessionIdNotFoundError("restarted"))
    assert applied.result == "FETCH_SESSION_ID_NOT_FOUND"
    assert due(follower).delay_ms == 0
    reopened = next_request(follower)
    assert reopened.full
    assert [n for n, _ in reopened.partitions] == [NAME]


def test_the_first_request_to_a_new_leader_goes_at_once(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    for _ in range(2):
        follower.on_session_answer(1, request, None, "timed out")
        assert due(follower).leader_id == 1
        request = next_request(follower)
    assert follower.on_heartbeat_response(assign(3, 2, replicas=(1, 2, 3)), 10) == []
    [session] = follower.session_requests()
    assert session == SendSession(3, 0)
    ((name, fetch),) = next_request(follower, 3).partitions
    assert (name, fetch.leader_epoch) == (NAME, 2)


def test_a_partition_error_backs_off_that_partition_alone(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    answer = SessionFetchAnswer(7, ((NAME, UnknownLeaderEpochError("not yet")),))
    send = only_send(follower.on_session_answer(1, request, answer).effects)
    assert isinstance(send.request, FetchRequest)
    assert send.delay_ms == 50
    assert follower.session_requests() == [], "the partition waits out its backoff"
    follower.fetch_due(send)
    assert due(follower).delay_ms == 0
    listed = next_request(follower)
    assert [n for n, _ in listed.partitions] == [NAME]


def test_an_answer_that_does_not_fit_the_log_is_asked_again_after_a_backoff(
    tmp_path: Path,
) -> None:
    follower, request = follower_of_1(tmp_path)
    answer = SessionFetchAnswer(7, ((NAME, FetchData(leader_epoch=7, high_watermark=3)),))
    applied = follower.on_session_answer(1, request, answer)
    again = only_send(applied.effects)
    # The same fetch; the session fills in the log start when it lists it.
    assert isinstance(again.request, FetchRequest)
    assert replace(again.request, log_start_offset=0) == request.partitions[0][1]
    assert again.delay_ms == 50
    assert follower.partitions[NAME].leader_high_watermark is None


def test_a_stopping_error_sends_nothing_until_the_next_assignment(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    answer = SessionFetchAnswer(7, ((NAME, NotLeaderOrFollowerError("not the leader")),))
    assert follower.on_session_answer(1, request, answer).effects == []
    assert follower.session_requests() == []


def test_after_an_answer_without_data_the_next_request_waits_the_idle_time(
    tmp_path: Path,
) -> None:
    backoff = FetchBackoff(backoff_ms=50, backoff_max_ms=200, idle_fetch_ms=25)
    follower, request = follower_of_1(tmp_path, backoff)
    follower.on_session_answer(1, request, SessionFetchAnswer(7))
    assert due(follower).delay_ms == 25


def test_an_answer_to_a_request_no_longer_in_flight_is_dropped(tmp_path: Path) -> None:
    follower, request = follower_of_1(tmp_path)
    follower.on_session_answer(1, request, None, "timed out")
    late = SessionFetchAnswer(7, ((NAME, FetchData(leader_epoch=1, high_watermark=5)),))
    assert follower.on_session_answer(1, request, late).result == "stale"
    assert follower.partitions[NAME].leader_high_watermark is None


def test_high_watermark_moved_answers_once_per_change(tmp_path: Path) -> None:
    leader = core(tmp_path, 1)
    leader.on_heartbeat_response(assign(1, 1), 0)
    assert leader.high_watermark_moved(NAME)
    assert not leader.high_watermark_moved(NAME)
    leader.produce(NAME, [Record(b"a")], acks=Acks.LEADER, timeout_ms=100, now_ms=1, request_id=1)
    leader.flush()
    assert not leader.high_watermark_moved(NAME), "the follower has not fetched it yet"
    fetch = FetchRequest(
        replica_id=2, broker_epoch=1, leader_epoch=1, fetch_offset=1, last_fetched_epoch=1
    )
    leader.handle_fetch(NAME, fetch, 2)
    assert leader.high_watermark_moved(NAME)
    assert not leader.high_watermark_moved(NAME)
