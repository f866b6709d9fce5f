"""A broker deletes a replica only when the controller says a reassignment took it away.

On the crash-simulating disk: the replica's files, and then its directory, go
only on a `stopReplicas` entry newer than the assignment the broker holds and
naming it there; a crash in the middle of the deletion never brings back a
shorter log nor leaves the directory behind; a leader reassigned away resigns.
Also the reassignment throttle's byte budget.
"""

from __future__ import annotations

import posixpath
import random

from epochlog.protocol.batch import Record
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore
from epochlog_broker.log.simfs import CrashFileSystem
from epochlog_broker.replica_deletion import DELETED_MARKER
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.messages import Acks
from epochlog_broker.replication.throttle import ByteRate
from tests.log.helpers import FaultyFileSystem

NAME = "orders-0"
DATA = "/data"


def assignment(leader: int, epoch: int, pe: int, replicas: tuple[int, ...]) -> PartitionAssignment:
    return PartitionAssignment(
        name=NAME,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=pe,
        isr=tuple(r for r in replicas if r == leader) or replicas[:1],
        replicas=replicas,
        min_insync_replicas=1,
    )


def broker(fs: CrashFileSystem, broker_epoch: int = 1) -> BrokerCore:
    c = BrokerCore(broker_id=1, broker_epoch=broker_epoch, fs=fs, data_dir=DATA)
    c.open()
    return c


def leading(fs: CrashFileSystem) -> BrokerCore:
    """Broker 1 leads NAME (replicas 1, 2) and holds two records on disk."""
    c = broker(fs)
    c.on_heartbeat_response(HeartbeatResponse(assignments=(assignment(1, 1, 1, (1,)),)), 0)
    c.produce(
        NAME,
        [Record(b"a"), Record(b"b")],
        acks=Acks.LEADER,
        timeout_ms=1000,
        now_ms=1,
        request_id=1,
    )
    c.flush()
    return c


def files(fs: CrashFileSystem) -> list[str]:
    return fs.listdir(posixpath.join(DATA, NAME))


def gone(fs: CrashFileSystem) -> bool:
    return not fs.exists(posixpath.join(DATA, NAME))


def test_a_replica_reassigned_away_resigns_and_deletes_its_files() -> None:
    fs = CrashFileSystem()
    c = leading(fs)
    assert isinstance(c.partitions[NAME].replica.role, Leader)
    away = assignment(2, 2, 3, (2, 3))
    c.on_heartbeat_response(HeartbeatResponse(stop_replicas=(away,)), 2)
    assert NAME not in c.partitions
    assert gone(fs)
    # Its next start (even after a crash) hosts nothing there; the checkpoints forget it,
    # so a replica added here again starts afresh.
    fs.crash(random.Random(2))
    again = broker(fs, 2)
    assert NAME not in again.partitions
    assert gone(fs)
    assert again.high_watermark_checkpoint.get(NAME) is None
    # ... in a new directory.
    again.on_heartbeat_response(HeartbeatResponse(assignments=(assignment(1, 4, 4, (1, 2)),)), 3)
    assert NAME in again.partitions
    assert again.partitions[NAME].log.log_end_offset == 0
    assert files(fs) != []


def test_a_stop_not_newer_than_the_assignment_held_deletes_nothing() -> None:
    fs = CrashFileSystem()
    c = leading(fs)
    stale = assignment(2, 1, 1, (2, 3))
    c.on_heartbeat_response(HeartbeatResponse(stop_replicas=(stale,)), 2)
    assert NAME in c.partitions
    assert files(fs) != []


def test_a_stop_naming_this_broker_deletes_nothing() -> None:
    fs = CrashFileSystem()
    c = leading(fs)
    still = assignment(2, 2, 3, (2, 1))
    c.on_heartbeat_response(HeartbeatResponse(stop_replicas=(still,)), 2)
    assert NAME in c.partitions


def test_a_replica_that_holds_no_assignment_naming_it_is_never_deleted() -> None:
    # A directory on disk whose held assignment does not name this broker (data the
    # controller never counted on): kept.
    fs = CrashFileSystem()
    c = leading(fs)
    c.on_heartbeat_response(HeartbeatResponse(assignments=(assignment(2, 2, 2, (2, 3)),)), 2)
    assert NAME in c.partitions  # applied: not a replica any more, offline, data kept
    c.on_heartbeat_response(HeartbeatResponse(stop_replicas=(assignment(2, 3, 3, (2, 3)),)), 3)
    assert NAME in c.partitions
    assert files(fs) != []


def test_a_crash_in_the_middle_of_a_deletion_never_brings_back_a_shorter_log() -> None:
    fs = CrashFileSystem()
    c = leading(fs)
    c.close()
    directory = posixpath.join(DATA, NAME)
    names = files(fs)
    # The marker is durable, then the crash takes every unsynced removal with it.
    from epochlog_broker.log.checkpoints import atomic_write

    atomic_write(fs, posixpath.join(directory, DELETED_MARKER), b"")
    fs.remove(posixpath.join(directory, names[0]))
    fs.crash(random.Random(1))
    again = broker(fs, 2)
    assert NAME not in again.partitions
    assert gone(fs)


def test_an_empty_directory_left_by_a_crash_after_the_deletion_is_removed_on_start() -> None:
    fs = CrashFileSystem()
    c = leading(fs)
    c.close()
    directory = posixpath.join(DATA, NAME)
    for name in files(fs):
        fs.remove(posixpath.join(directory, name))
    fs.sync_dir(directory)
    fs.crash(random.Random(3))
    assert files(fs) == []
    again = broker(fs, 2)
    assert NAME not in again.partitions
    assert gone(fs)


def test_an_empty_directory_that_cannot_be_removed_stays_and_the_broker_starts() -> None:
    # A volume mounted on a partition's directory: rmdir answers EBUSY. It holds no
    # replica, so the broker starts without hosting it, and the directory stays.
    fs = FaultyFileSystem()
    fs.mkdir(posixpath.join(DATA, NAME))
    fs.fail_on("rmdir", posixpath.join(DATA, NAME))
    c = broker(fs)
    assert NAME not in c.partitions
    assert files(fs) == []
    c.on_heartbeat_response(HeartbeatResponse(assignments=(assignment(1, 1, 1, (1,)),)), 0)
    assert NAME in c.partitions


def test_the_throttle_lets_a_burst_through_then_the_rate() -> None:
    rate = ByteRate(1000)
    assert rate.available(0) == 1000
    rate.spend(1500, 0)  # one batch always goes: the bucket runs into debt
    assert rate.available(0) < 0
    assert rate.available(1000) == 500
    assert rate.available(10_000) == 1000  # never above one second's worth
    assert ByteRate(0).available(0) > 1 << 40
