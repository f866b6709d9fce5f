"""Fetch sessions between broker cores: limits and fairness of an answer, a leader that
forgot the session, partitions moving between sessions, and followers of idle partitions
that stay caught up without being listed."""

from __future__ import annotations

from pathlib import Path

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import FetchSessionIdNotFoundError
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog.resources import DEFAULT_REPLICA_LAG_TIME_MAX_MS
from epochlog_broker.core import BrokerCore, Effect, ProduceDone, SendToLeader
from epochlog_broker.replication.fetch_session import SessionFetchRequest
from epochlog_broker.replication.messages import Acks, FetchData, FetchRequest
from tests.core.test_broker_core import core

NAMES = ("t-0", "t-1", "t-2", "t-3")


def assign(
    names: tuple[str, ...], leader: int, epoch: int = 1, replicas: tuple[int, ...] = (1, 2)
) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=tuple(
            PartitionAssignment(
                name=n,
                leader=leader,
                leader_epoch=epoch,
                partition_epoch=epoch,
                isr=replicas,
                replicas=replicas,
                min_insync_replicas=1,
            )
            for n in names
        )
    )


def produce(c: BrokerCore, name: str, value: bytes, request_id: int, acks: Acks) -> None:
    c.produce(name, [Record(value)], acks=acks, timeout_ms=5000, now_ms=1, request_id=request_id)


def round_trip(
    leader: BrokerCore, follower: BrokerCore, leader_id: int, now_ms: int
) -> list[Effect]:
    """The follower's next session request to `leader_id`, served and applied, then the
    follower's fsync; returns the leader's effects."""
    assert leader_id in [d.leader_id for d in follower.session_requests()]
    request = follower.session_request(leader_id)
    assert request is not None
    try:
        served = leader.handle_session_fetch(request, now_ms)
    except FetchSessionIdNotFoundError as exc:
        follower.on_session_answer(leader_id, request, exc)
        return []
    follower.on_session_answer(leader_id, request, served.answer)
    follower.flush()
    return served.effects


def test_an_answer_is_bounded_and_busy_partitions_take_turns(tmp_path: Path) -> None:
    leader = core(tmp_path, 1)
    leader.on_heartbeat_response(assign(NAMES, 1), 0)
    for i, name in enumerate(NAMES):
        for j in range(3):
            produce(leader, name, b"x" * 200, 10 * i + j, Acks.LEADER)
    leader.flush()
    listed = tuple((n, FetchRequest(2, 1, 1, 0)) for n in NAMES)
    # 500 bytes per answer, 250 per partition: one 200-byte-plus batch per partition
    # fits, and the answer has room for two partitions.
    first = leader.handle_session_fetch(
        SessionFetchRequest(2, 1, 0, 0, listed, max_bytes=500, partition_max_bytes=250), 2
    ).answer
    served = [n for n, a in first.partitions if isinstance(a, FetchData) and a.batches]
    assert served == ["t-0", "t-1"]
    assert all(len(a.batches) == 1 for _n, a in first.partitions if isinstance(a, FetchData))
    # The next request lists where t-0 and t-1 stand now; t-2 and t-3 go first.
    moved = tuple((n, FetchRequest(2, 1, 1, 1)) for n in served)
    second = leader.handle_session_fetch(
        SessionFetchRequest(2, 1, first.session_id, 1, moved, max_bytes=500), 3
    ).answer
    assert [n for n, a in second.partitions if isinstance(a, FetchData) and a.batches] == [
        "t-2",
        "t-3",
    ]


def test_a_leader_that_forgot_the_session_is_asked_with_a_new_one(tmp_path: Path) -> None:
    leader, follower = core(tmp_path, 1), core(tmp_path, 2)
    leader.on_heartbeat_response(assign(NAMES[:1], 1), 0)
    follower.on_heartbeat_response(assign(NAMES[:1], 1), 0)
    round_trip(leader, follower, 1, 1)
    # The leader's process restarts: its sessions are gone.
    leader.close()
    leader = core(tmp_path, 1, broker_epoch=2)
    leader.on_heartbeat_response(assign(NAMES[:1], 1), 0)
    produce(leader, "t-0", b"a", 7, Acks.ALL)
    leader.flush()
    assert round_trip(leader, follower, 1, 2) == [], "refused: unknown session"
    assert follower.fetch_sessions[1].delay_ms == 0, "reopened at once"
    round_trip(leader, follower, 1, 3)  # a new full session brings the record
    assert follower.partitions["t-0"].log.log_end_offset == 1
    assert round_trip(leader, follower, 1, 4) == [ProduceDone(7, "t-0", 0, 0, 1)]


def test_a_partition_moves_to_the_session_with_its_new_leader(tmp_path: Path) -> None:
    one, three = core(tmp_path, 1), core(tmp_path, 3)
    follower = core(tmp_path, 2)
    both = NAMES[:2]
    one.on_heartbeat_response(assign(both, 1, replicas=(1, 2, 3)), 0)
    follower.on_heartbeat_response(assign(both, 1, replicas=(1, 2, 3)), 0)
    round_trip(one, follower, 1, 1)
    moved = assign(NAMES[:1], 3, epoch=2, replicas=(1, 2, 3))
    three.on_heartbeat_response(moved, 2)
    one.on_heartbeat_response(moved, 2)
    follower.on_heartbeat_response(moved, 2)
    to_one = follower.session_request(1)
    assert to_one is not None
    assert to_one.forgotten == ("t-0",)
    assert "t-0" not in [n for n, _ in to_one.partitions]
    to_three = follower.session_request(3)
    assert to_three is not None
    assert [(n, f.leader_epoch) for n, f in to_three.partitions] == [("t-0", 2)]


def test_a_follower_of_an_idle_partition_stays_caught_up_while_its_session_asks(
    tmp_path: Path,
) -> None:
    leader = core(tmp_path, 1)
    leader.on_heartbeat_response(assign(NAMES[:1], 1), 0)
    s = leader.handle_session_fetch(
        SessionFetchRequest(2, 1, 0, 0, (("t-0", FetchRequest(2, 1, 1, 0)),)), 1_000
    ).answer
    for i, t in enumerate((1_500, 2_000, 2_500), start=1):
        assert leader.handle_session_fetch(SessionFetchRequest(2, 1, s.session_id, i, ()), t)
    [follower] = leader.heartbeat(2_600).partitions[0].followers
    assert follower.caught_up, "unlisted, but fetched by every request of its session"
    # The session falls silent: once the caught-up window (half the partition's
    # replicaLagTimeMaxMs) has passed, the follower's last caught-up time is its
    # session's last request.
    window = DEFAULT_REPLICA_LAG_TIME_MAX_MS // 2
    [follower] = leader.heartbeat(2_500 + window).partitions[0].followers
    assert follower.caught_up
    [follower] = leader.heartbeat(2_500 + window + 1).partitions[0].followers
    assert not follower.caught_up
    assert follower.last_caught_up_time == 2_500


def test_a_session_whose_request_crashed_starts_over_and_every_partition_fetches_again(
    tmp_path: Path,
) -> None:
    """The shell could not finish a session request (building, sending or applying it
    raised): left in flight, the session would never ask again and its partitions would
    stop replicating for good. It starts over, and each partition asks again."""
    leader, follower = core(tmp_path, 1), core(tmp_path, 2)
    both = NAMES[:2]
    leader.on_heartbeat_response(assign(both, 1), 0)
    follower.on_heartbeat_response(assign(both, 1), 0)
    round_trip(leader, follower, 1, 1)
    for i, name in enumerate(both):
        produce(leader, name, b"x", i, Acks.LEADER)
    leader.flush()
    [due] = follower.session_requests()
    lost = follower.session_request(due.leader_id)
    assert lost is not None, "in flight now; its answer never applied"
    assert follower.session_requests() == [], "one request in flight per session"
    effects = follower.on_session_crashed(1, "RuntimeError('boom')")
    # Each partition wants its fetch again (a backoff first, as after a lost answer).
    wanted = {e.partition for e in effects if isinstance(e, SendToLeader)}
    for e in effects:
        if isinstance(e, SendToLeader):
            follower.fetch_due(e)
    assert wanted <= set(both)
    request = follower.session_request(1)
    assert request is not None
    assert request.full, "a new session"
    assert sorted(n for n, _ in request.partitions) == list(both)
    follower.on_session_answer(1, request, leader.handle_session_fetch(request, 2).answer)
    follower.flush()
    assert [follower.partitions[n].log.log_end_offset for n in both] == [1, 1]
