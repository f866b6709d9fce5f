"""Retention and DeleteRecords in the broker core, on the crash-simulating disk: spec
settings from the assignment, the log-start-offset-checkpoint written before segments go
(so a power loss keeps the new start), the leader's log start carried to a follower, and
DeleteRecords bounded by the high watermark and answered once the in-sync replicas' log
starts reached it."""

from __future__ import annotations

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import OffsetOutOfRangeError, RequestTimedOutError
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore, DeleteRecordsDone, Effect
from epochlog_broker.log.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_log_starts
from epochlog_broker.log.simfs import CrashFileSystem
from epochlog_broker.replication.messages import Acks
from tests.core.test_fetch_sessions import round_trip

NAME = "orders-0"
T0 = 1_700_000_000_000


def assign(
    replicas: tuple[int, ...] = (1,), *, retention_ms: int, retention_bytes: int = -1
) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=(
            PartitionAssignment(
                name=NAME,
                leader=1,
                leader_epoch=1,
                partition_epoch=1,
                isr=replicas,
                replicas=replicas,
                min_insync_replicas=1,
                segment_bytes=1024,
                retention_ms=retention_ms,
                retention_bytes=retention_bytes,
            ),
        )
    )


def core(fs: CrashFileSystem, broker_id: int = 1, epoch: int = 1) -> BrokerCore:
    c = BrokerCore(broker_id=broker_id, broker_epoch=epoch, fs=fs, data_dir=f"/b{broker_id}")
    c.open()
    return c


def fill(c: BrokerCore, batches: int, now_ms: int = T0) -> None:
    for i in range(batches):
        value = f"v{i}".ljust(200, ".").encode()
        c.produce(
            NAME, [Record(value)], acks=Acks.LEADER, timeout_ms=1000, now_ms=now_ms, request_id=i
        )
        c.flush()


def test_size_retention_checkpoints_the_start_before_segments_go_and_survives_a_crash() -> None:
    fs = CrashFileSystem()
    c = core(fs)
    c.on_heartbeat_response(assign(retention_bytes=2048, retention_ms=-1), T0)
    fill(c, 30)
    plog = c.partitions[NAME].log
    assert len(plog.segments) > 4
    assert c.enforce_retention(T0) == [NAME]
    start = plog.log_start_offset
    assert start > 0
    assert plog.size_bytes >= 2048
    assert read_log_starts(fs, f"/b1/{LOG_START_OFFSET_CHECKPOINT}") == {NAME: start}
    assert c.enforce_retention(T0) == [], "nothing more to do: a pass changes nothing"
    fs.crash()
    again = core(fs, epoch=2)
    assert again.partitions[NAME].log.log_start_offset == start
    with pytest.raises(OffsetOutOfRangeError) as err:
        again.partitions[NAME].log.read_records(start - 1)
    assert err.value.log_start_offset == start


def test_time_retention_follows_the_clock_passed_in() -> None:
    fs = CrashFileSystem()
    c = core(fs)
    c.on_heartbeat_response(assign(retention_ms=60_000), T0)
    fill(c, 10, now_ms=T0)
    fill(c, 10, now_ms=T0 + 50_000)
    assert c.enforce_retention(T0 + 60_000) == []
    assert c.enforce_retention(T0 + 60_001) == [NAME]
    plog = c.partitions[NAME].log
    kept = plog.read_records(plog.log_start_offset, max_bytes=1 << 20)
    assert plog.log_start_offset > 0
    assert [r.offset for r in kept if r.timestamp == T0 + 50_000] == list(range(10, 20))
    assert c.enforce_retention(T0 + 110_001) == [NAME], "later, all but the active one"
    assert len(plog.segments) == 1


def delete(c: BrokerCore, before: int, *, rid: int = 0, now_ms: int = T0) -> list[Effect]:
    return c.delete_records(NAME, before, request_id=rid, now_ms=now_ms, timeout_ms=1000)


def deleted(c: BrokerCore, before: int) -> int:
    """DeleteRecords answered at once (a sole-member ISR): the new log start."""
    [done] = delete(c, before)
    assert isinstance(done, DeleteRecordsDone)
    assert done.error is None, done
    return done.log_start_offset


def test_delete_records_is_bounded_by_the_high_watermark() -> None:
    fs = CrashFileSystem()
    c = core(fs)
    c.on_heartbeat_response(assign(retention_ms=-1), T0)
    fill(c, 12)
    hw = c.partitions[NAME].replica.high_watermark
    with pytest.raises(OffsetOutOfRangeError):
        delete(c, hw + 1)
    assert deleted(c, 5) == 5
    assert deleted(c, 2) == 5, "below the log start: nothing changes"
    assert c.list_offsets(NAME, "earliest")[0] == 5
    assert deleted(c, -1) == hw
    fs.crash()
    assert core(fs, epoch=2).partitions[NAME].log.log_start_offset == hw


def test_delete_records_is_answered_once_the_follower_reports_the_new_log_start() -> None:
    """The leader's log start moves at once; the answer waits until the follower took it
    from a fetch answer and said so in its next fetch (Kafka's low watermark)."""
    fs = CrashFileSystem()
    leader, follower = core(fs, 1), core(fs, 2)
    for c in (leader, follower):
        c.on_heartbeat_response(assign((1, 2), retention_ms=-1), T0)
    fill(leader, 12)
    for i in range(3):
        round_trip(leader, follower, 1, T0 + i)
    assert follower.partitions[NAME].replica.high_watermark == 12
    assert delete(leader, 8, rid=7) == [], "the follower's log still starts at 0"
    assert leader.partitions[NAME].log.log_start_offset == 8
    assert leader.next_deadline_ms() == T0 + 1000
    assert round_trip(leader, follower, 1, T0 + 10) == []  # brings the log start
    assert follower.partitions[NAME].log.log_start_offset == 8
    assert round_trip(leader, follower, 1, T0 + 20) == [DeleteRecordsDone(7, NAME, 8, 1)]
    assert leader.next_deadline_ms() is None


def test_a_followers_own_retention_moves_the_log_start_its_next_fetch_reports() -> None:
    """The log start a follower's fetch carries counts toward the leader's low watermark.
    A request lists again only partitions whose start moved since they were wanted (it
    looked at every partition of the session, a cost that grew with the partitions an
    idle broker follows)."""
    fs = CrashFileSystem()
    leader, follower = core(fs, 1), core(fs, 2)
    for c in (leader, follower):
        c.on_heartbeat_response(assign((1, 2), retention_ms=-1, retention_bytes=2048), T0)
    fill(leader, 30)
    for i in range(3):
        round_trip(leader, follower, 1, T0 + i)
    assert follower.partitions[NAME].replica.high_watermark == 30
    assert follower.enforce_retention(T0 + 10) == [NAME]
    start = follower.partitions[NAME].log.log_start_offset
    assert start > 0
    assert 1 in [d.leader_id for d in follower.session_requests()]
    request = follower.session_request(1)
    assert request is not None
    assert [(n, f.log_start_offset) for n, f in request.partitions] == [(NAME, start)]
    follower.on_session_answer(1, request, leader.handle_session_fetch(request, T0 + 11).answer)
    again = follower.session_request(1)
    assert again is not None
    assert again.partitions == (), "listed once: the leader holds the new start"


def test_delete_records_times_out_while_the_follower_does_not_fetch() -> None:
    fs = CrashFileSystem()
    leader, follower = core(fs, 1), core(fs, 2)
    for c in (leader, follower):
        c.on_heartbeat_response(assign((1, 2), retention_ms=-1), T0)
    fill(leader, 12)
    for i in range(3):
        round_trip(leader, follower, 1, T0 + i)
    assert delete(leader, 8, rid=7) == []
    assert leader.tick(T0 + 999) == []
    [done] = leader.tick(T0 + 1000)
    assert isinstance(done, DeleteRecordsDone)
    assert done.request_id == 7
    assert isinstance(done.error, RequestTimedOutError)
    assert leader.partitions[NAME].log.log_start_offset == 8, "the deletion stands"


def assign_all(
    names: list[str], *, retention_ms: int, retention_bytes: int = -1
) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=tuple(
            PartitionAssignment(
                name=name,
                leader=1,
                leader_epoch=1,
                partition_epoch=1,
                isr=(1,),
                replicas=(1,),
                min_insync_replicas=1,
                segment_bytes=1024,
                retention_ms=retention_ms,
                retention_bytes=retention_bytes,
            )
            for name in names
        )
    )


def write(c: BrokerCore, name: str, batches: int, now_ms: int) -> None:
    for i in range(batches):
        value = f"v{i}".ljust(200, ".").encode()
        c.produce(
            name, [Record(value)], acks=Acks.LEADER, timeout_ms=1000, now_ms=now_ms, request_id=i
        )
    c.flush()


def visits(c: BrokerCore, now_ms: int) -> tuple[int, list[str]]:
    """Partitions one retention pass looked at, and the ones it deleted from."""
    before = c.retention_visits
    moved = c.enforce_retention(now_ms)
    return c.retention_visits - before, moved


def test_an_idle_brokers_retention_pass_looks_only_at_partitions_that_may_delete() -> None:
    """A pass decided every hosted partition, so an idle broker's pass cost grew with its
    partition count. It now looks at those that may have something to delete: opened,
    written to with closed segments, with new settings, or whose oldest closed segment's
    time has come. What it deletes is what the full pass deleted."""
    c = core(CrashFileSystem())
    idle = [f"idle-{i}" for i in range(400)]
    busy = ["busy-0", "busy-1", "busy-2"]
    c.on_heartbeat_response(assign_all(idle + busy, retention_ms=60_000), T0)
    for name in idle:
        write(c, name, 1, T0)  # one segment: nothing retention could ever take
    for name in busy:
        write(c, name, 12, T0)  # closed segments, all expiring at T0 + 60 s
    assert all(len(c.partitions[n].log.segments) > 2 for n in busy)
    assert visits(c, T0)[1] == [], "nothing expired yet"  # the newly hosted, once
    assert visits(c, T0 + 1) == (0, []), "idle: nothing to look at"
    assert visits(c, T0 + 30_000) == (0, [])
    write(c, "idle-7", 1, T0 + 30_000)  # still one segment
    write(c, "busy-1", 1, T0 + 30_000)
    assert visits(c, T0 + 30_001) == (1, []), "only the partition written to"
    assert visits(c, T0 + 60_000) == (0, [])
    assert visits(c, T0 + 60_001) == (3, busy), "the three whose oldest segment expired"
    assert visits(c, T0 + 60_002)[1] == [], "what a pass deleted is looked at again, once"
    assert visits(c, T0 + 60_003) == (0, [])
    write(c, "idle-3", 12, T0 + 60_003)
    assert visits(c, T0 + 60_004) == (1, []), "closed segments now, not expired"
    assert visits(c, T0 + 60_005) == (0, [])
    # New settings make a partition a candidate at once.
    c.on_heartbeat_response(assign_all(["idle-3"], retention_ms=-1, retention_bytes=0), T0)
    assert visits(c, T0 + 60_006) == (1, ["idle-3"])
    assert len(c.partitions["idle-3"].log.segments) == 1
