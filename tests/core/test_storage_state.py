"""What a broker keeps apart from the resource: its data directory's storage id, the
assignment it holds, and its log's last epoch, all reported in its heartbeat."""

from __future__ import annotations

import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.core import BrokerCore
from epochlog_broker.held_assignment import ASSIGNMENT_CHECKPOINT
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.log.storage_id import META_FILE, StorageIdError
from epochlog_broker.replication.messages import Acks
from epochlog_tools.harness import Security

NAME = "orders-0"


def core(data_dir: Path, broker_epoch: int = 1) -> BrokerCore:
    c = BrokerCore(
        broker_id=1, broker_epoch=broker_epoch, fs=OsFileSystem(), data_dir=str(data_dir)
    )
    c.open()
    return c


def assignment(leader: int, epoch: int, pe: int, isr: tuple[int, ...]) -> HeartbeatResponse:
    return HeartbeatResponse(
        assignments=(
            PartitionAssignment(
                name=NAME,
                leader=leader,
                leader_epoch=epoch,
                partition_epoch=pe,
                isr=isr,
                replicas=(1, 2),
                isr_storage_ids={1: "11111111-1111-4111-8111-111111111111"},
                min_insync_replicas=1,
            ),
        )
    )


def test_a_new_data_directory_gets_a_storage_id_that_survives_restarts(tmp_path: Path) -> None:
    first = core(tmp_path / "data")
    assert uuid.UUID(first.storage_id)
    assert first.heartbeat(0).storage_id == first.storage_id
    first.close()
    assert core(tmp_path / "data", broker_epoch=2).storage_id == first.storage_id


def test_a_wiped_data_directory_gets_another_storage_id(tmp_path: Path) -> None:
    before = core(tmp_path / "a").storage_id
    assert core(tmp_path / "b").storage_id != before


@pytest.mark.parametrize(
    "content",
    [b"", b"epochlog-meta v1\n1\nstorage-id not-a-uuid\ncrc32 00000000\n", b"\x00" * 40],
)
def test_a_damaged_storage_id_file_stops_the_broker_naming_the_file(
    tmp_path: Path, content: bytes
) -> None:
    core(tmp_path / "data").close()
    (tmp_path / "data" / META_FILE).write_bytes(content)
    with pytest.raises(StorageIdError, match=META_FILE):
        core(tmp_path / "data", broker_epoch=2)


def test_a_damaged_storage_id_file_makes_the_broker_process_exit_with_the_file_named(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    core(data).close()
    (data / META_FILE).write_bytes(b"garbage\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochlog_tools.cli",
            "broker",
            "--id",
            "1",
            "--data-dir",
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--controller",
            "https://127.0.0.1:9",
            *Security.tls(tmp_path / "pki", [1]).broker_flags(1),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert str(data / META_FILE) in proc.stderr


def test_reports_carry_the_held_assignment_and_the_last_batch_epoch(tmp_path: Path) -> None:
    c = core(tmp_path / "data")
    c.on_heartbeat_response(assignment(1, 3, 4, (1,)), 0)
    c.produce(NAME, [Record(b"m1")], acks=Acks.LEADER, timeout_ms=1000, now_ms=0, request_id=1)
    c.flush()
    # Told of a newer epoch in which it writes nothing: it knows 5, its log's last batch is 3.
    c.on_heartbeat_response(assignment(2, 5, 6, (2,)), 0)
    (report,) = c.heartbeat(0).partitions
    assert report.leader_epoch == 5
    assert report.last_epoch == 3
    assert report.log_end_offset == 1
    assert report.assignment is not None
    assert (report.assignment.leader, report.assignment.leader_epoch) == (2, 5)
    assert report.assignment.partition_epoch == 6
    assert report.assignment.isr == (2,)
    assert report.assignment.isr_storage_ids == {1: "11111111-1111-4111-8111-111111111111"}


def test_an_empty_log_reports_last_epoch_zero_and_no_assignment(tmp_path: Path) -> None:
    c = core(tmp_path / "data")
    c.on_heartbeat_response(assignment(1, 1, 1, (1,)), 0)
    c2 = core(tmp_path / "data2")
    assert c2.heartbeat(0).partitions == ()
    (report,) = c.heartbeat(0).partitions
    assert report.last_epoch == 0
    assert report.assignment is not None


def test_the_held_assignment_is_reported_after_a_restart_before_any_controller_answer(
    tmp_path: Path,
) -> None:
    c = core(tmp_path / "data")
    c.on_heartbeat_response(assignment(2, 5, 6, (2,)), 0)
    c.close()
    again = core(tmp_path / "data", broker_epoch=2)
    (report,) = again.heartbeat(0).partitions
    assert report.assignment is not None
    assert (report.assignment.leader, report.assignment.partition_epoch) == (2, 6)
    assert report.assignment.isr_storage_ids == {1: "11111111-1111-4111-8111-111111111111"}


def test_a_damaged_assignment_checkpoint_is_reported_as_absent(tmp_path: Path) -> None:
    c = core(tmp_path / "data")
    c.on_heartbeat_response(assignment(2, 5, 6, (2,)), 0)
    c.close()
    (tmp_path / "data" / NAME / ASSIGNMENT_CHECKPOINT).write_bytes(b"epochlog-assign")
    again = core(tmp_path / "data", broker_epoch=2)
    (report,) = again.heartbeat(0).partitions
    assert report.assignment is None
    assert report.log_end_offset == 0  # the log itself is untouched


def test_the_held_assignment_keeps_the_eligible_leader_replicas_across_a_restart(
    tmp_path: Path,
) -> None:
    c = core(tmp_path / "data")
    pa = (
        assignment(2, 5, 6, (2,))
        .assignments[0]
        .model_copy(
            update={
                "eligible_leader_replicas": (1,),
                "eligible_leader_replica_storage_ids": {1: "11111111-1111-4111-8111-111111111111"},
            }
        )
    )
    c.on_heartbeat_response(HeartbeatResponse(assignments=(pa,)), 0)
    (report,) = c.heartbeat(0).partitions
    assert report.assignment is not None
    assert report.assignment.eligible_leader_replicas == (1,)
    c.close()
    again = core(tmp_path / "data", broker_epoch=2)
    (report,) = again.heartbeat(0).partitions
    assert report.assignment is not None
    assert report.assignment.eligible_leader_replicas == (1,)
    assert report.assignment.eligible_leader_replica_storage_ids == {
        1: "11111111-1111-4111-8111-111111111111"
    }


def test_an_assignment_checkpoint_written_before_eligible_leader_replicas_still_reads(
    tmp_path: Path,
) -> None:
    c = core(tmp_path / "data")
    c.on_heartbeat_response(assignment(2, 5, 6, (2,)), 0)
    c.close()
    path = tmp_path / "data" / NAME / ASSIGNMENT_CHECKPOINT
    older = (
        b"epochlog-assignment-checkpoint v1\n6\nleader 2\nleader-epoch 5\npartition-epoch 6\n"
        b"isr 2\nreplicas 1,2\nisr-storage-ids 1=11111111-1111-4111-8111-111111111111\n"
    )
    path.write_bytes(older + f"crc32 {zlib.crc32(older):08x}\n".encode())
    again = core(tmp_path / "data", broker_epoch=2)
    (report,) = again.heartbeat(0).partitions
    assert report.assignment is not None
    assert (report.assignment.leader, report.assignment.partition_epoch) == (2, 6)
    assert report.assignment.eligible_leader_replicas == ()
