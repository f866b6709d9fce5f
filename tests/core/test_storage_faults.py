"""Storage faults stay inside the partition: BrokerCore on the crash-simulating disk.

A full disk, an I/O error or a damaged segment takes only the affected replica
offline (typed, retriable STORAGE_ERROR; the heartbeat says why); the other
partitions of the broker go on. A full disk or an I/O error is retried until
the directory works again; damage is cut away automatically only when the ISR
without this replica still has minInsyncReplicas members, otherwise by
`epochlog log repair`.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import ErrorCode, NotLeaderOrFollowerError, ReplicaOfflineError
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment, PartitionRole
from epochlog_broker.core import BrokerCore, Effect, ProduceDone, SendToLeader
from epochlog_broker.log import CrashFileSystem, LogConfig, OsFileSystem, PartitionLog
from epochlog_broker.log.repair import apply_repair, plan_repair
from epochlog_broker.log.segment import segment_name
from epochlog_broker.replication.follower import Follower
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.messages import Acks
from epochlog_broker.storage_faults import may_repair
from epochlog_tools.cli import main

NAME = "orders-0"
OTHER = "orders-1"
DATA = "/data/b1"
SMALL = LogConfig(segment_bytes=1200, max_batch_bytes=600, index_interval_bytes=150)


def assignment(
    name: str,
    leader: int,
    epoch: int,
    isr: tuple[int, ...],
    *,
    replicas: tuple[int, ...] = (1, 2, 3),
    min_isr: int = 1,
    pe: int | None = None,
) -> PartitionAssignment:
    return PartitionAssignment(
        name=name,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=pe if pe is not None else epoch,
        isr=isr,
        replicas=replicas,
        min_insync_replicas=min_isr,
    )


def respond(*assignments: PartitionAssignment) -> HeartbeatResponse:
    return HeartbeatResponse(assignments=assignments)


def new_core(fs: CrashFileSystem, broker_epoch: int = 1) -> BrokerCore:
    c = BrokerCore(broker_id=1, broker_epoch=broker_epoch, fs=fs, data_dir=DATA, log_config=SMALL)
    c.open()
    return c


def records(*values: str) -> list[Record]:
    return [Record(v.encode()) for v in values]


def report(c: BrokerCore, name: str) -> object:
    return next(p for p in c.heartbeat(0).partitions if p.name == name)


def asks_leader(c: BrokerCore, effects: list[Effect], name: str, leader: int) -> bool:
    """`name` asks `leader` for data: its fetch waits in the session with `leader`, or
    its divergence query goes on its own."""
    session = c.fetch_sessions.get(leader)
    return (session is not None and name in session.wanted) or any(
        isinstance(e, SendToLeader) and e.partition == name and e.leader_id == leader
        for e in effects
    )


def storage_error(c: BrokerCore, name: str) -> str | None:
    return next(p.storage_error for p in c.heartbeat(0).partitions if p.name == name)


def test_disk_full_on_a_leader_append_takes_only_that_partition_offline_until_space_is_back() -> (
    None
):
    fs = CrashFileSystem()
    c = new_core(fs)
    c.on_heartbeat_response(
        respond(assignment(NAME, 1, 1, (1, 2)), assignment(OTHER, 1, 1, (1,))), 0
    )
    # Waits for follower 2: pending when the disk fills up.
    assert (
        c.produce(NAME, records("a"), acks=Acks.ALL, timeout_ms=10_000, now_ms=1, request_id=1)
        == []
    )
    fs.fail_next("write", error=errno.ENOSPC)
    effects = c.produce(
        NAME, records("b"), acks=Acks.ALL, timeout_ms=10_000, now_ms=2, request_id=2
    )
    done = {e.request_id: e for e in effects if isinstance(e, ProduceDone)}
    assert isinstance(done[1].error, NotLeaderOrFollowerError), "the leader resigned"
    failed = done[2].error
    assert isinstance(failed, ReplicaOfflineError)
    assert failed.code is ErrorCode.STORAGE_ERROR
    assert failed.retriable
    assert not isinstance(c.partitions[NAME].replica.role, Leader)

    error = storage_error(c, NAME)
    assert error is not None
    assert "disk-full" in error
    assert storage_error(c, OTHER) is None
    assert c.offline_replicas().keys() == {NAME}
    with pytest.raises(ReplicaOfflineError):
        c.read(NAME, 0)
    with pytest.raises(ReplicaOfflineError):
        c.produce(NAME, records("c"), acks=Acks.LEADER, timeout_ms=10, now_ms=3, request_id=3)

    # The other partition on the same broker goes on.
    c.produce(OTHER, records("x"), acks=Acks.ALL, timeout_ms=1000, now_ms=3, request_id=4)
    assert [e for e in c.flush() if isinstance(e, ProduceDone)] == [ProduceDone(4, OTHER, 0, 0, 1)]

    # Still full: the probe write fails, the replica stays offline, retried later.
    assert c.recover(10) == []
    fs.fail_next("write", error=errno.ENOSPC)
    assert c.recover(2_000) == []
    assert storage_error(c, NAME) is not None
    fault = c.partitions[NAME].fault
    assert fault is not None
    assert fault.attempts == 1

    # Space is back: the replica recovers, and does not lead the epoch it led before.
    c.recover(60_000)
    assert storage_error(c, NAME) is None
    assert c.offline_replicas() == {}
    assert not isinstance(c.partitions[NAME].replica.role, Leader)
    # "a" was appended but never fsynced before the fault: not trusted, fetched again.
    assert c.partitions[NAME].log.log_end_offset == 0
    # The controller moves leadership: it follows the new leader.
    effects = c.on_heartbeat_response(respond(assignment(NAME, 2, 2, (2,))), 60_001)
    assert isinstance(c.partitions[NAME].replica.role, Follower)
    assert asks_leader(c, effects, NAME, 2)


def test_io_error_on_a_follower_fsync_is_reported_and_the_follower_comes_back() -> None:
    fs = CrashFileSystem()
    leader = BrokerCore(broker_id=2, broker_epoch=1, fs=fs, data_dir="/data/b2")
    leader.open()
    follower = new_core(fs)
    a = assignment(NAME, 2, 1, (1, 2), replicas=(1, 2))
    leader.on_heartbeat_response(respond(a), 0)
    assert follower.on_heartbeat_response(respond(a), 0) == []
    leader.produce(NAME, records("a"), acks=Acks.LEADER, timeout_ms=1000, now_ms=1, request_id=1)
    leader.flush()
    [due] = follower.session_requests()
    request = follower.session_request(due.leader_id)
    assert request is not None
    answer = leader.handle_session_fetch(request, 2).answer
    follower.on_session_answer(2, request, answer)
    assert follower.partitions[NAME].log.log_end_offset == 1
    fs.fail_next("sync")
    assert follower.flush() == []
    error = storage_error(follower, NAME)
    assert error is not None
    assert error.startswith("io-error")
    assert report(follower, NAME).role is PartitionRole.FOLLOWER  # type: ignore[attr-defined]
    assert follower.session_requests() == [], "offline: nothing to fetch"
    # An answer to the old role is dropped.
    ((_, data),) = answer.partitions
    session = follower.partitions[NAME].session - 1
    assert follower.on_fetch_response(NAME, session, data) == []  # type: ignore[arg-type]

    assert follower.recover(10_000) == [], "the first look schedules the first attempt"
    effects = follower.recover(20_000)
    assert storage_error(follower, NAME) is None
    assert isinstance(follower.partitions[NAME].replica.role, Follower)
    assert follower.partitions[NAME].log.log_end_offset == 0, "its fsync failed: fetched again"
    assert asks_leader(follower, effects, NAME, 2), "it fetches from the leader again"


def _damaged_broker(fs: CrashFileSystem) -> tuple[int, int]:
    """A broker that led NAME and OTHER with several segments, then a damaged first segment
    of NAME. Returns (offset of the damaged batch, log end)."""
    c = new_core(fs)
    c.on_heartbeat_response(respond(assignment(NAME, 1, 1, (1,)), assignment(OTHER, 1, 1, (1,))), 0)
    for i in range(30):
        for name in (NAME, OTHER):
            c.produce(
                name, records(f"v{i}" * 40), acks=Acks.LEADER, timeout_ms=10, now_ms=1, request_id=i
            )
        c.flush()
    end = c.partitions[NAME].log.log_end_offset
    assert len(c.partitions[NAME].log.segments) > 2
    c.close()
    seg = f"{DATA}/{NAME}/{segment_name(0)}"
    size = len(fs.inodes[fs._lookup(seg)].data)  # type: ignore[index]
    fs.corrupt(seg, size // 2, b"\xff\xff\xff")
    plan = plan_repair(fs, f"{DATA}/{NAME}")
    assert plan is not None
    return plan.first_offset, end


def test_damaged_segment_at_start_takes_only_that_replica_offline_and_repairs_when_allowed() -> (
    None
):
    fs = CrashFileSystem()
    damaged_at, end = _damaged_broker(fs)
    c = new_core(fs, broker_epoch=2)
    error = storage_error(c, NAME)
    assert error is not None
    assert error.startswith("damaged")
    assert segment_name(0) in error
    assert "byte" in error
    assert storage_error(c, OTHER) is None

    # Still in the ISR: no automatic repair, whatever the time.
    c.on_heartbeat_response(
        respond(assignment(NAME, 2, 2, (1, 2, 3), min_isr=2), assignment(OTHER, 1, 2, (1,))),
        0,
    )
    assert isinstance(c.partitions[OTHER].replica.role, Leader)
    assert c.recover(0) == []
    assert c.recover(100_000) == []
    assert storage_error(c, NAME) is not None

    # Out of the ISR, which still has minInsyncReplicas without it: cut and fetch.
    c.on_heartbeat_response(respond(assignment(NAME, 2, 2, (2, 3), min_isr=2, pe=3)), 100_001)
    effects = c.recover(200_000)
    assert storage_error(c, NAME) is None
    host = c.partitions[NAME]
    assert host.log.log_end_offset == damaged_at < end
    assert isinstance(host.replica.role, Follower)
    assert asks_leader(c, effects, NAME, 2)


def test_damage_is_not_repaired_below_min_isr_but_by_an_explicit_repair() -> None:
    fs = CrashFileSystem()
    damaged_at, _ = _damaged_broker(fs)
    c = new_core(fs, broker_epoch=2)
    c.on_heartbeat_response(respond(assignment(NAME, 2, 2, (2,), min_isr=2)), 0)
    assert c.recover(0) == []
    assert c.recover(100_000) == []
    assert storage_error(c, NAME) is not None
    c.close()

    plan = plan_repair(fs, f"{DATA}/{NAME}")
    assert plan is not None
    assert plan.first_offset == damaged_at
    apply_repair(fs, plan)
    again = new_core(fs, broker_epoch=3)
    assert again.offline_replicas() == {}
    assert again.partitions[NAME].log.log_end_offset == damaged_at


def test_may_repair_needs_the_replica_out_of_an_isr_of_min_insync_members() -> None:
    assert may_repair(1, assignment(NAME, 2, 1, (2, 3), min_isr=2))
    assert not may_repair(1, assignment(NAME, 2, 1, (1, 2, 3), min_isr=2))
    assert not may_repair(1, assignment(NAME, 2, 1, (2,), min_isr=2))
    assert not may_repair(1, assignment(NAME, 1, 1, (2, 3), min_isr=2))
    assert not may_repair(1, None)


def _damaged_dir(root: Path) -> Path:
    pdir = root / NAME
    plog = PartitionLog.open(OsFileSystem(), str(pdir), SMALL)
    for i in range(12):
        plog.append_records(records(f"v{i}" * 20), leader_epoch=1, timestamp=1)
    plog.close()
    seg = pdir / segment_name(0)
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    return pdir


def test_log_repair_says_what_it_discards_and_needs_confirmation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pdir = _damaged_dir(tmp_path)
    before = sorted(p.name for p in pdir.iterdir())
    assert main(["log", "repair", str(tmp_path), "--partition", NAME]) == 1
    out = capsys.readouterr().out
    assert f"will discard: {pdir / segment_name(0)}: discard from byte" in out
    assert "records" in out
    assert "offsets" in out
    assert sorted(p.name for p in pdir.iterdir()) == before, "nothing changed unconfirmed"

    assert main(["log", "repair", str(tmp_path), "--yes"]) == 0
    assert "repaired" in capsys.readouterr().out
    assert main(["log", "check", str(pdir)]) == 0
    assert main(["log", "repair", str(pdir), "--yes"]) == 0
    assert "nothing to repair" in capsys.readouterr().out
