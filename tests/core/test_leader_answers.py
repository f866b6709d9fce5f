"""A follower's requests to its leader, as the core decides them for every shell: the wait
before each one (backoff after failures, the idle wait), the leader's high watermark for
readiness, answers that do not fit the log, and the long-poll wake-up."""

from __future__ import annotations

from pathlib import Path

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import NotLeaderOrFollowerError, UnknownLeaderEpochError
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore, Effect, SendToLeader
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.replication.fetch_backoff import FetchBackoff
from epochlog_broker.replication.messages import Acks, FetchData, FetchRequest

NAME = "orders-0"
BACKOFF = FetchBackoff(backoff_ms=50, backoff_max_ms=200)


def assign(leader: int, epoch: int) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=(
            PartitionAssignment(
                name=NAME,
                leader=leader,
                leader_epoch=epoch,
                partition_epoch=epoch,
                isr=(1, 2),
                replicas=(1, 2),
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


def follower_of_1(
    tmp_path: Path, backoff: FetchBackoff = BACKOFF
) -> tuple[BrokerCore, SendToLeader]:
    follower = core(tmp_path, 2, backoff)
    send = only_send(follower.on_heartbeat_response(assign(1, 1), 0))
    assert isinstance(send.request, FetchRequest)
    assert send.delay_ms == 0
    return follower, send


def test_failed_requests_back_off_doubling_up_to_the_bound(tmp_path: Path) -> None:
    follower, send = follower_of_1(tmp_path)
    delays = []
    for _ in range(4):
        applied = follower.on_leader_answer(send, None, "connection refused")
        assert applied.result == "unreachable"
        send = only_send(applied.effects)
        delays.append(send.delay_ms)
    assert delays == [50, 100, 200, 200]


def test_an_answer_ends_the_backoff_and_gives_the_leaders_high_watermark(tmp_path: Path) -> None:
    follower, send = follower_of_1(tmp_path)
    assert follower.partitions[NAME].leader_high_watermark is None
    send = only_send(follower.on_leader_answer(send, UnknownLeaderEpochError("not yet")).effects)
    assert send.delay_ms == 50
    applied = follower.on_leader_answer(send, FetchData(leader_epoch=1, high_watermark=0))
    assert applied.result == "ok"
    assert only_send(applied.effects).delay_ms == 0
    assert follower.partitions[NAME].leader_high_watermark == 0


def test_the_first_request_to_a_new_leader_goes_at_once(tmp_path: Path) -> None:
    follower, send = follower_of_1(tmp_path)
    for _ in range(2):
        send = only_send(follower.on_leader_answer(send, None, "timed out").effects)
    assert send.delay_ms == 100
    send = only_send(follower.on_heartbeat_response(assign(1, 2), 10))
    assert send.request.leader_epoch == 2
    assert send.delay_ms == 0


def test_an_answer_that_does_not_fit_the_log_is_asked_again_after_a_backoff(
    tmp_path: Path,
) -> None:
    follower, send = follower_of_1(tmp_path)
    applied = follower.on_leader_answer(send, FetchData(leader_epoch=7, high_watermark=3))
    assert applied.result == "unreachable"
    again = only_send(applied.effects)
    assert again.request == send.request
    assert again.delay_ms == 50
    assert follower.partitions[NAME].leader_high_watermark is None


def test_a_stopping_error_sends_nothing_until_the_next_assignment(tmp_path: Path) -> None:
    follower, send = follower_of_1(tmp_path)
    applied = follower.on_leader_answer(send, NotLeaderOrFollowerError("not the leader"))
    assert applied.effects == []
    assert applied.result == str(NotLeaderOrFollowerError("x").code)


def test_after_an_answer_without_data_the_next_fetch_waits_the_idle_time(tmp_path: Path) -> None:
    backoff = FetchBackoff(backoff_ms=50, backoff_max_ms=200, idle_fetch_ms=25)
    follower, send = follower_of_1(tmp_path, backoff)
    idle = FetchData(leader_epoch=1, high_watermark=0)
    assert only_send(follower.on_leader_answer(send, idle).effects).delay_ms == 25


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
