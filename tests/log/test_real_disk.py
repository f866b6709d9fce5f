"""The basics on the real disk: OsFileSystem under pytest's tmp_path, real fsync."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epochlog.protocol.errors import CorruptRecordError
from epochlog_broker.log import LogConfig, OsFileSystem, PartitionLog, Record
from epochlog_broker.log.checkpoints import (
    HighWatermarkCheckpoint,
    read_high_watermarks,
    read_leader_epochs,
)
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.log.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_name

from .helpers import TS, read_all, read_all_batches, records

SMALL = LogConfig(segment_bytes=2000, max_batch_bytes=1000, index_interval_bytes=300)


def fill(plog: PartitionLog, batches: int) -> None:
    for i in range(batches):
        plog.append_records(
            records(1 + i % 4, f"d{i}-", size=60), leader_epoch=1 + i // 10, timestamp=TS + i
        )


def test_append_flush_close_reopen_roundtrip(tmp_path: Path) -> None:
    pdir = str(tmp_path / "orders-0")
    plog = PartitionLog.open(OsFileSystem(), pdir, SMALL)
    fill(plog, 30)
    assert plog.flush() == plog.log_end_offset
    before = read_all(plog)
    epochs = plog.epochs.entries
    bases = [s.base_offset for s in plog.segments]
    segments = len(bases)
    assert segments > 3
    plog.close()

    files = set(os.listdir(pdir))
    assert ".clean-shutdown" in files
    for base in bases:
        assert {segment_name(base), segment_name(base, INDEX_SUFFIX)} <= files

    plog = PartitionLog.open(OsFileSystem(), pdir, SMALL)
    report = plog.recovery
    assert report.clean_shutdown
    assert (report.truncated_bytes, report.indexes_rebuilt, report.segments) == (0, [], segments)
    assert read_all(plog) == before
    assert plog.epochs.entries == epochs
    assert read_leader_epochs(OsFileSystem(), f"{pdir}/leader-epoch-checkpoint") == list(epochs)
    # Appending and reading go on after the restart.
    plog.append_records([Record(b"after")], leader_epoch=plog.latest_epoch, timestamp=TS)
    plog.flush()
    assert read_all(plog)[-1].value == b"after"
    plog.close()


def test_reopen_without_close_keeps_flushed_records(tmp_path: Path) -> None:
    pdir = str(tmp_path / "orders-0")
    plog = PartitionLog.open(OsFileSystem(), pdir, SMALL)
    fill(plog, 12)
    plog.flush()
    before = read_all(plog)
    # The process dies: no close, the files stay as they are.
    plog = PartitionLog.open(OsFileSystem(), pdir, SMALL)
    assert not plog.recovery.clean_shutdown
    assert read_all(plog) == before
    plog.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 40, b"\xff\x13garbage" * 30, b"\x00\x00\x01"])
def test_torn_tail_of_garbage_bytes_is_truncated_on_reopen(tmp_path: Path, garbage: bytes) -> None:
    pdir = tmp_path / "orders-0"
    plog = PartitionLog.open(OsFileSystem(), str(pdir), SMALL)
    fill(plog, 12)
    plog.flush()
    before = read_all(plog)
    last = pdir / segment_name(plog.active.base_offset)
    size = last.stat().st_size
    plog.close()
    os.remove(pdir / ".clean-shutdown")  # as after a crash
    with open(last, "ab") as f:
        f.write(garbage)
        f.flush()
        os.fsync(f.fileno())

    plog = PartitionLog.open(OsFileSystem(), str(pdir), SMALL)
    report = plog.recovery
    assert report.truncated
    assert report.truncated_bytes == len(garbage)
    assert report.truncated_batches >= 1
    assert last.stat().st_size == size
    assert read_all(plog) == before
    plog.close()


def test_torn_last_batch_is_truncated_on_reopen(tmp_path: Path) -> None:
    pdir = tmp_path / "orders-0"
    plog = PartitionLog.open(OsFileSystem(), str(pdir), SMALL)
    fill(plog, 12)
    plog.flush()
    batches = read_all_batches(plog)
    before = read_all(plog)
    last = pdir / segment_name(plog.active.base_offset)
    plog.close()
    os.remove(pdir / ".clean-shutdown")
    os.truncate(last, last.stat().st_size - batches[-1].size // 2)

    plog = PartitionLog.open(OsFileSystem(), str(pdir), SMALL)
    assert plog.recovery.truncated_bytes == batches[-1].size - batches[-1].size // 2
    assert plog.recovery.truncated_batches == 1
    assert read_all(plog) == before[: batches[-1].base_offset]
    plog.close()


def test_corrupt_middle_batch_refuses_to_open_and_leaves_the_file(tmp_path: Path) -> None:
    pdir = tmp_path / "orders-0"
    plog = PartitionLog.open(OsFileSystem(), str(pdir), LogConfig())
    fill(plog, 5)
    plog.close()
    seg = pdir / segment_name(0)
    data = bytearray(seg.read_bytes())
    data[80] ^= 0x01
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=str(seg)):
        PartitionLog.open(OsFileSystem(), str(pdir), LogConfig())
    assert seg.read_bytes() == bytes(data)


def test_relative_directory_is_created_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plog = PartitionLog.open(OsFileSystem(), "orders-0")
    plog.append_records(records(2), leader_epoch=0, timestamp=TS)
    plog.close()
    assert (tmp_path / "orders-0" / segment_name(0)).exists()
    assert [r.value for r in read_all(PartitionLog.open(OsFileSystem(), "orders-0"))] == [
        r.value for r in records(2)
    ]


def test_hw_checkpoint_on_disk_keeps_partitions_not_updated(tmp_path: Path) -> None:
    fs = OsFileSystem()
    cp = HighWatermarkCheckpoint.load(fs, str(tmp_path))
    cp.update("orders-0", 10)
    cp.update("orders-1", 20)
    cp.write(["orders-0", "orders-1"])
    again = HighWatermarkCheckpoint.load(fs, str(tmp_path))
    again.update("orders-0", 15)
    again.write(["orders-0", "orders-1"])
    assert read_high_watermarks(fs, str(tmp_path / "replication-offset-checkpoint")) == {
        "orders-0": 15,
        "orders-1": 20,
    }
    assert not list(tmp_path.glob("*.tmp"))


def test_epochs_and_truncation_on_disk(tmp_path: Path) -> None:
    pdir = str(tmp_path / "orders-0")
    plog = PartitionLog.open(OsFileSystem(), pdir, SMALL)
    fill(plog, 25)
    start_of_2 = plog.epochs.start_offset_of(2)
    before = read_all(plog)
    plog.truncate_to(start_of_2 + 1)
    plog.truncate_to(start_of_2 - 1)
    plog.close()
    plog = PartitionLog.open(OsFileSystem(), pdir, SMALL)
    assert read_all(plog) == before[: start_of_2 - 1]
    assert list(plog.epochs.entries) == [EpochEntry(1, 0)]
    assert sorted(os.listdir(pdir)) == sorted(
        [segment_name(s.base_offset) for s in plog.segments]
        + [segment_name(s.base_offset, INDEX_SUFFIX) for s in plog.segments]
        + [segment_name(s.base_offset, TIME_INDEX_SUFFIX) for s in plog.segments]
        + ["leader-epoch-checkpoint"]
    )
    plog.close()
