"""Opening a damaged or interrupted partition directory: what recovery repairs, what it
refuses, and what it reports."""

from __future__ import annotations

import random
import zlib

import pytest

from epochlog.protocol.batch import encode_batch
from epochlog.protocol.errors import CorruptRecordError
from epochlog_broker.log import LogConfig, PartitionLog, Record
from epochlog_broker.log.checkpoints import read_leader_epochs, write_leader_epochs
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.log.fs import ensure_dir
from epochlog_broker.log.index import OffsetIndex
from epochlog_broker.log.segment import INDEX_SUFFIX, segment_name

from .helpers import (
    PDIR,
    SMALL,
    TS,
    FaultyFileSystem,
    epoch_starts,
    file_bytes,
    fill_segments,
    index_path,
    read_all,
    read_all_batches,
    records,
    seg_path,
    snapshot,
    write_file,
)

EPOCHS = f"{PDIR}/leader-epoch-checkpoint"


@pytest.fixture
def fs() -> FaultyFileSystem:
    return FaultyFileSystem()


def open_log(fs: FaultyFileSystem, config: LogConfig = SMALL) -> PartitionLog:
    return PartitionLog.open(fs, PDIR, config)


def build(fs: FaultyFileSystem, batches: int = 6, config: LogConfig = SMALL) -> PartitionLog:
    """A flushed log of `batches` batches of 1-3 records, epochs 1 then 2."""
    plog = open_log(fs, config)
    for i in range(batches):
        plog.append_records(
            records(1 + i % 3, f"b{i}-", size=20), leader_epoch=1 + i // 3, timestamp=TS
        )
    plog.flush()
    return plog


# -- torn tail ------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 30, -1])
def test_torn_tail_is_truncated_and_reported(fs: FaultyFileSystem, cut: int) -> None:
    plog = build(fs, config=LogConfig())
    batches = read_all_batches(plog)
    before = read_all(plog)
    last = batches[-1]
    keep = cut if cut > 0 else last.size + cut  # bytes of the last batch that "made it"
    size = plog.active.size
    fs.crash()
    f = fs.open(seg_path(0))
    f.truncate(size - last.size + keep)
    f.sync()
    plog = open_log(fs, LogConfig())
    report = plog.recovery
    assert report.truncated
    assert (report.truncated_bytes, report.truncated_batches) == (keep, 1)
    assert report.truncated_reason is not None
    assert report.log_end_offset == plog.log_end_offset == last.base_offset
    assert read_all(plog) == before[: last.base_offset]
    assert file_bytes(fs, seg_path(0)) == b"".join(b.raw for b in batches[:-1])


def test_two_damaged_trailing_batches_are_both_cut(fs: FaultyFileSystem) -> None:
    plog = build(fs, config=LogConfig())
    batches = read_all_batches(plog)
    tail = batches[-2].size + batches[-1].size
    start = plog.active.size - tail
    fs.corrupt(seg_path(0), start + 30, b"\xee")
    fs.corrupt(seg_path(0), start + batches[-2].size + 30, b"\xee")
    plog = open_log(fs, LogConfig())
    assert (plog.recovery.truncated_bytes, plog.recovery.truncated_batches) == (tail, 2)
    assert plog.log_end_offset == batches[-2].base_offset


def test_garbage_after_the_last_batch_is_cut(fs: FaultyFileSystem) -> None:
    plog = build(fs, config=LogConfig())
    before = read_all(plog)
    garbage = bytes(random.Random(7).randrange(256) for _ in range(333))
    f = fs.open(seg_path(0))
    f.append(garbage)
    f.sync()
    plog = open_log(fs, LogConfig())
    assert plog.recovery.truncated_bytes == len(garbage)
    assert read_all(plog) == before


@pytest.mark.parametrize("seed", range(25))
def test_random_crash_of_unflushed_appends_leaves_a_reported_valid_prefix(
    fs: FaultyFileSystem, seed: int
) -> None:
    plog = build(fs)
    flushed = read_all(plog)
    for i in range(8):
        plog.append_records(records(2, f"late{i}-", size=40), leader_epoch=3, timestamp=TS)
    everything = read_all(plog)
    persisted = plog.persisted_log_end_offset  # the flush, and segments rolled since
    fs.crash(random.Random(seed))
    on_disk = {
        base: len(file_bytes(fs, seg_path(base)))
        for base in (s.base_offset for s in plog.segments)
        if fs.exists(seg_path(base))
    }
    plog = open_log(fs)
    got = read_all(plog)
    assert got == everything[: len(got)]
    assert len(got) >= persisted >= len(flushed)
    assert plog.recovery.truncated_bytes == sum(on_disk.values()) - sum(
        s.size for s in plog.segments
    )
    assert list(plog.epochs.entries) == epoch_starts(read_all_batches(plog))


# -- damage in the middle -------------------------------------------------------------


def test_corrupt_batch_in_the_middle_refuses_to_open_and_changes_nothing(
    fs: FaultyFileSystem,
) -> None:
    plog = build(fs, config=LogConfig())
    victim = read_all_batches(plog)[2]
    position = sum(b.size for b in read_all_batches(plog)[:2])
    fs.crash()
    fs.corrupt(seg_path(0), position + 40, b"\x00\x01")
    before = snapshot(fs)
    with pytest.raises(CorruptRecordError) as err:
        open_log(fs, LogConfig())
    message = err.value.message
    assert seg_path(0) in message
    assert f"byte {position}" in message
    assert f"offset {victim.base_offset}" in message
    assert err.value.details["position"] == position
    assert err.value.details["offset"] == victim.base_offset
    assert snapshot(fs) == before
    with pytest.raises(CorruptRecordError):  # and again: nothing was "repaired" meanwhile
        open_log(fs, LogConfig())
    assert snapshot(fs) == before


def test_corrupt_non_last_segment_refuses_to_open(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    fill_segments(plog, 3)
    first = plog.segments[0]
    last_batch = first.read(first.next_offset - 1, 1, None)[0]
    position = first.size - last_batch.size
    fs.crash()
    fs.corrupt(seg_path(0), first.size - 3, b"\xff\xff")
    before = snapshot(fs)
    with pytest.raises(CorruptRecordError) as err:
        open_log(fs)
    assert seg_path(0) in err.value.message
    assert f"byte {position}" in err.value.message
    assert snapshot(fs) == before


def test_torn_end_of_a_non_last_segment_is_not_cut(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    fill_segments(plog, 3)
    size = plog.segments[0].size
    fs.crash()
    f = fs.open(seg_path(0))
    f.truncate(size - 5)
    f.sync()
    with pytest.raises(CorruptRecordError, match=segment_name(0)):
        open_log(fs)
    assert len(file_bytes(fs, seg_path(0))) == size - 5


def test_damage_before_the_index_tail_of_a_segment_fails_the_read(fs: FaultyFileSystem) -> None:
    # Recovery trusts the index of a finished segment and checks only its tail; damage
    # earlier in it is reported when it is read, never served or silently skipped.
    plog = open_log(fs)
    fill_segments(plog, 3)
    fs.crash()
    fs.corrupt(seg_path(0), 40, b"\xff")
    plog = open_log(fs)
    with pytest.raises(CorruptRecordError, match=f"{seg_path(0)} at byte 0"):
        plog.read_records(0)


def test_damage_in_the_last_segment_after_a_clean_shutdown_refuses_to_open(
    fs: FaultyFileSystem,
) -> None:
    plog = build(fs, batches=12, config=LogConfig(index_interval_bytes=100))
    assert len(plog.active.index) > 0
    plog.close()
    fs.corrupt(seg_path(0), 40, b"\xff")
    with pytest.raises(CorruptRecordError, match=f"{seg_path(0)} at offset 0, byte 0"):
        open_log(fs, LogConfig(index_interval_bytes=100))


def test_gap_between_segments_refuses_to_open(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    fill_segments(plog, 4)
    middle = plog.segments[1]
    fs.crash()
    fs.remove(seg_path(middle.base_offset))
    fs.sync_dir(PDIR)
    with pytest.raises(CorruptRecordError, match="but the next segment starts at"):
        open_log(fs)


# -- index files ----------------------------------------------------------------------


def _assert_reads_by_offset(plog: PartitionLog, expected: list[bytes | None]) -> None:
    assert len(expected) == plog.log_end_offset
    for offset in range(plog.log_end_offset):
        assert plog.read_records(offset, max_records=1)[0].value == expected[offset]


@pytest.mark.parametrize("damage", ["missing", "garbage", "torn", "wrong-positions"])
def test_bad_index_of_a_non_last_segment_is_rebuilt(fs: FaultyFileSystem, damage: str) -> None:
    plog = open_log(fs)
    fill_segments(plog, 4)
    plog.flush()
    expected = [r.value for r in read_all(plog)]
    target = plog.segments[1]
    good = file_bytes(fs, index_path(target.base_offset))
    assert len(OffsetIndex.decode(good, target.base_offset, target.size)) > 0
    fs.crash()
    if damage == "missing":
        fs.remove(index_path(target.base_offset))
        fs.sync_dir(PDIR)
    elif damage == "garbage":
        write_file(fs, index_path(target.base_offset), b"not an index at all")
    elif damage == "torn":
        write_file(fs, index_path(target.base_offset), good[: len(good) // 2])
    else:
        bad = OffsetIndex(target.base_offset)
        bad.add(target.base_offset + 1, 7)  # well-formed, but not a batch start
        write_file(fs, index_path(target.base_offset), bad.encode())
    plog = open_log(fs)
    name = segment_name(target.base_offset, INDEX_SUFFIX)
    assert plog.recovery.indexes_rebuilt == [name]
    _assert_reads_by_offset(plog, expected)
    # Rewritten as the segment's roll wrote it.
    assert file_bytes(fs, index_path(target.base_offset)) == good


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_bad_index_of_the_last_segment_after_clean_shutdown_is_rebuilt(
    fs: FaultyFileSystem, damage: str
) -> None:
    plog = build(fs, batches=12, config=LogConfig(index_interval_bytes=100))
    expected = [r.value for r in read_all(plog)]
    plog.close()
    if damage == "missing":
        fs.remove(index_path(0))
        fs.sync_dir(PDIR)
    else:
        write_file(fs, index_path(0), b"\x00" * 64)
    plog = open_log(fs, LogConfig(index_interval_bytes=100))
    assert plog.recovery.clean_shutdown
    assert plog.recovery.indexes_rebuilt == [segment_name(0, INDEX_SUFFIX)]
    assert len(plog.active.index) > 0
    _assert_reads_by_offset(plog, expected)


def test_index_without_entries_is_not_reported_as_rebuilt(fs: FaultyFileSystem) -> None:
    plog = open_log(fs, LogConfig())
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    plog.close()
    plog = open_log(fs, LogConfig())
    assert plog.recovery.clean_shutdown
    assert plog.recovery.indexes_rebuilt == []


# -- leader-epoch-checkpoint ----------------------------------------------------------


def _with_crc(body: bytes) -> bytes:
    return body + f"crc32 {zlib.crc32(body):08x}\n".encode()


def _damaged(kind: str) -> bytes:
    good = b"epochlog-leader-epoch-checkpoint v1\n2\n1 0\n2 7\n"
    return {
        "garbage": b"\x89PNG\r\n\x1a\n...",
        "partially-written": _with_crc(good)[:-6],
        "wrong-crc": good + b"crc32 00000000\n",
        "wrong-header": _with_crc(good.replace(b"v1", b"v2")),
        "out-of-order": _with_crc(b"epochlog-leader-epoch-checkpoint v1\n2\n2 0\n1 7\n"),
    }[kind]


@pytest.mark.parametrize(
    "kind", ["garbage", "partially-written", "wrong-crc", "wrong-header", "out-of-order"]
)
def test_damaged_epoch_checkpoint_is_rebuilt_from_the_batches(
    fs: FaultyFileSystem, kind: str
) -> None:
    plog = build(fs)
    before = read_all(plog)
    expected = list(plog.epochs.entries)
    assert len(expected) == 2
    fs.crash()
    write_file(fs, EPOCHS, _damaged(kind))
    plog = open_log(fs)
    report = plog.recovery.epoch_checkpoint
    assert report.startswith("damaged (")
    assert EPOCHS in report
    assert report.endswith(", rebuilt from the log")
    assert list(plog.epochs.entries) == expected
    assert read_all(plog) == before
    assert read_leader_epochs(fs, EPOCHS) == expected  # rewritten, durably
    fs.crash()
    assert read_leader_epochs(fs, EPOCHS) == expected


def test_missing_epoch_checkpoint_is_rebuilt(fs: FaultyFileSystem) -> None:
    plog = build(fs)
    expected = list(plog.epochs.entries)
    fs.remove(EPOCHS)
    fs.sync_dir(PDIR)
    plog = open_log(fs)
    assert plog.recovery.epoch_checkpoint == "missing, rebuilt from the log"
    assert list(plog.epochs.entries) == expected
    assert read_leader_epochs(fs, EPOCHS) == expected


def test_epoch_checkpoint_inconsistent_with_the_batches_is_rebuilt(fs: FaultyFileSystem) -> None:
    plog = build(fs)
    expected = list(plog.epochs.entries)
    fs.crash()
    write_leader_epochs(fs, EPOCHS, [EpochEntry(5, 0)])
    plog = open_log(fs)
    assert plog.recovery.epoch_checkpoint == "inconsistent with the log, rebuilt from the log"
    assert list(plog.epochs.entries) == expected


def test_epoch_checkpointed_for_a_batch_lost_in_a_crash_is_dropped(fs: FaultyFileSystem) -> None:
    plog = build(fs)
    expected = list(plog.epochs.entries)
    end = plog.log_end_offset
    plog.append_records(records(1), leader_epoch=9, timestamp=TS)  # not flushed
    # The checkpoint installed without the batch being synced (a roll's own sync of the
    # segment failing after it, say; here directly).
    plog.sync_epochs()
    assert read_leader_epochs(fs, EPOCHS) == [*expected, EpochEntry(9, end)]
    fs.crash()
    plog = open_log(fs)
    assert plog.log_end_offset == end
    assert plog.recovery.epoch_entries_dropped == 1
    assert list(plog.epochs.entries) == expected
    assert read_leader_epochs(fs, EPOCHS) == expected


# -- leftovers and interrupted work ---------------------------------------------------


def test_leftover_tmp_files_are_removed_on_open(fs: FaultyFileSystem) -> None:
    plog = build(fs)
    before = read_all(plog)
    fs.crash()
    leftovers = [
        "leader-epoch-checkpoint.tmp",
        segment_name(0, ".index.tmp"),
        segment_name(0, ".log.truncate.tmp"),
        ".clean-shutdown.tmp",
    ]
    for name in leftovers:
        write_file(fs, f"{PDIR}/{name}", b"half-written")
    plog = open_log(fs)
    assert sorted(plog.recovery.temp_files_removed) == sorted(leftovers)
    assert not plog.recovery.clean_shutdown
    fs.crash()  # the removal is durable
    assert not [n for n in fs.listdir(PDIR) if n.endswith(".tmp")]
    assert read_all(open_log(fs)) == before


def test_segment_created_by_a_crashed_roll_survives_a_later_power_loss(
    fs: FaultyFileSystem,
) -> None:
    plog = open_log(fs)
    fill_segments(plog, 2)
    plog.flush()
    fs.fail_on("sync_dir", PDIR, skip=1)  # the roll's index write syncs first
    with pytest.raises(Exception, match="injected I/O error on sync_dir"):
        fill_segments(plog, 3)
    # The process dies; a new one opens the log on the same (page-cached) state.
    plog = open_log(fs)
    for i in range(3):
        plog.append_records([Record(f"acked-{i}".encode())], leader_epoch=1, timestamp=TS)
    plog.flush()
    acknowledged = read_all(plog)
    fs.crash()
    assert read_all(open_log(fs)) == acknowledged


def test_segments_removed_by_a_crashed_truncation_stay_removed_after_power_loss(
    fs: FaultyFileSystem,
) -> None:
    plog = open_log(fs)
    fill_segments(plog, 4)
    plog.flush()
    bases = [s.base_offset for s in plog.segments]
    fs.fail_on("sync_dir", PDIR)
    with pytest.raises(Exception, match="injected I/O error on sync_dir"):
        plog.truncate_to(bases[1] + 1)
    # Process restart: the removals are in the page cache only. (A larger segment
    # size now, so that nothing below happens to sync the directory by rolling.)
    roomy = LogConfig(segment_bytes=10_000, max_batch_bytes=600, index_interval_bytes=150)
    plog = open_log(fs, roomy)
    assert [s.base_offset for s in plog.segments] == bases[:2]
    plog.append_records([Record(b"acked")], leader_epoch=1, timestamp=TS)
    plog.flush()
    acknowledged = read_all(plog)
    fs.crash()
    assert read_all(open_log(fs, roomy)) == acknowledged


def test_partition_directory_of_a_crashed_process_survives_a_power_loss(
    fs: FaultyFileSystem,
) -> None:
    ensure_dir(fs, "/data")
    fs.mkdir(PDIR)  # created, then the process died before syncing /data
    plog = open_log(fs)
    plog.append_records(records(3), leader_epoch=1, timestamp=TS)
    plog.flush()
    fs.crash()
    assert [r.value for r in read_all(open_log(fs))] == [r.value for r in records(3)]


def test_first_segment_may_start_above_zero(fs: FaultyFileSystem) -> None:
    ensure_dir(fs, PDIR)
    write_file(
        fs, seg_path(50), encode_batch(records(2), base_offset=50, leader_epoch=4, timestamp=TS)
    )
    plog = open_log(fs)
    assert (plog.log_start_offset, plog.log_end_offset) == (50, 52)
    assert list(plog.epochs.entries) == [EpochEntry(4, 50)]
