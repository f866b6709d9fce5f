"""PartitionLog on the crash-simulating file system: appends, reads, rolls, truncation,
typed errors and the offline state after an I/O error."""

from __future__ import annotations

import random

import pytest

from epochlog.protocol.batch import encode_batch
from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from epochlog_broker.log import LogConfig, LogRecord, PartitionLog, Record
from epochlog_broker.log.checkpoints import read_leader_epochs
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.log.simfs import ProcessStopped

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
    values,
)

EPOCHS = f"{PDIR}/leader-epoch-checkpoint"


@pytest.fixture
def fs() -> FaultyFileSystem:
    return FaultyFileSystem()


def open_log(fs: FaultyFileSystem, config: LogConfig = SMALL) -> PartitionLog:
    return PartitionLog.open(fs, PDIR, config)


def test_append_assigns_consecutive_offsets_and_reads_back_every_field(
    fs: FaultyFileSystem,
) -> None:
    plog = open_log(fs)
    first = [Record(b"a", key=b"k", headers=(("h", b"1"),), timestamp=5), Record(None)]
    r1 = plog.append_records(first, leader_epoch=2, timestamp=TS)
    r2 = plog.append_records([Record(b"c", key=None)], leader_epoch=2, timestamp=TS + 1)
    assert (r1.base_offset, r1.last_offset, r1.log_end_offset, r1.leader_epoch) == (0, 1, 2, 2)
    assert (r2.base_offset, r2.last_offset, r2.log_end_offset) == (2, 2, 3)
    assert read_all(plog) == [
        LogRecord(0, 5, b"k", b"a", (("h", b"1"),), 2),
        LogRecord(1, TS, None, None, (), 2),
        LogRecord(2, TS + 1, None, b"c", (), 2),
    ]


def test_append_batch_stores_the_batch_verbatim(fs: FaultyFileSystem) -> None:
    leader = PartitionLog.open(fs, "/data/leader-0", SMALL)
    leader.append_records(records(3), leader_epoch=1, timestamp=TS)
    leader.append_records(records(2, "w"), leader_epoch=4, timestamp=TS)
    follower = open_log(fs)
    for batch in read_all_batches(leader):
        follower.append_batch(batch.raw)
    assert [b.raw for b in read_all_batches(follower)] == [b.raw for b in read_all_batches(leader)]
    assert follower.epochs.entries == leader.epochs.entries


def test_empty_append_is_an_invalid_request(fs: FaultyFileSystem) -> None:
    with pytest.raises(InvalidRequestError, match="no records"):
        open_log(fs).append_records([], leader_epoch=0, timestamp=TS)


def _assert_nothing_written(fs: FaultyFileSystem, plog: PartitionLog, before: bytes) -> None:
    assert file_bytes(fs, seg_path(plog.active.base_offset)) == before
    plog.flush()
    fs.crash()
    assert file_bytes(fs, seg_path(0)) == before


def test_append_batch_with_a_bad_crc_is_refused_and_writes_nothing(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    plog.flush()
    before = file_bytes(fs, seg_path(0))
    raw = bytearray(encode_batch(records(2), base_offset=2, leader_epoch=1, timestamp=TS))
    raw[-1] ^= 0x40
    with pytest.raises(InvalidRequestError, match="CRC mismatch"):
        plog.append_batch(bytes(raw))
    with pytest.raises(InvalidRequestError, match="bytes after the batch"):
        plog.append_batch(
            encode_batch(records(1), base_offset=2, leader_epoch=1, timestamp=TS) + b"\0"
        )
    assert plog.log_end_offset == 2
    _assert_nothing_written(fs, plog, before)


@pytest.mark.parametrize("base_offset", [0, 1, 3, 100])
def test_append_batch_that_does_not_start_at_the_log_end_is_refused(
    fs: FaultyFileSystem, base_offset: int
) -> None:
    plog = open_log(fs)
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    plog.flush()
    before = file_bytes(fs, seg_path(0))
    raw = encode_batch(records(1), base_offset=base_offset, leader_epoch=1, timestamp=TS)
    with pytest.raises(InvalidRequestError, match=f"starts at offset {base_offset}, log end is 2"):
        plog.append_batch(raw)
    assert plog.log_end_offset == 2
    _assert_nothing_written(fs, plog, before)


def test_oversized_batch_raises_record_too_large_and_writes_nothing(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    plog.flush()
    before = file_bytes(fs, seg_path(0))
    big = [Record(b"x" * SMALL.max_batch_bytes)]
    with pytest.raises(RecordTooLargeError, match="exceeds max_batch_bytes 600"):
        plog.append_records(big, leader_epoch=1, timestamp=TS)
    with pytest.raises(RecordTooLargeError):
        plog.append_batch(encode_batch(big, base_offset=2, leader_epoch=1, timestamp=TS))
    # A new epoch in a refused batch must not reach the epoch history either.
    with pytest.raises(RecordTooLargeError):
        plog.append_records(big, leader_epoch=9, timestamp=TS)
    assert plog.log_end_offset == 2
    assert plog.latest_epoch == 1
    assert read_leader_epochs(fs, EPOCHS) == [EpochEntry(1, 0)]
    _assert_nothing_written(fs, plog, before)


def test_batch_of_exactly_max_batch_bytes_is_accepted(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    overhead = len(encode_batch([Record(b"")], base_offset=0, leader_epoch=1, timestamp=TS))
    rec = Record(b"x" * (SMALL.max_batch_bytes - overhead))
    assert len(encode_batch([rec], base_offset=0, leader_epoch=1, timestamp=TS)) == 600
    plog.append_records([rec], leader_epoch=1, timestamp=TS)
    assert values(plog) == [rec.value]


@pytest.mark.parametrize("epoch", [-1, -7, 1 << 31])
def test_append_with_an_invalid_leader_epoch_is_refused(fs: FaultyFileSystem, epoch: int) -> None:
    plog = open_log(fs)
    with pytest.raises(InvalidRequestError, match=f"invalid leader epoch {epoch}"):
        plog.append_records(records(1), leader_epoch=epoch, timestamp=TS)
    assert plog.log_end_offset == 0
    assert file_bytes(fs, seg_path(0)) == b""


def test_stale_leader_epoch_append_is_fenced_and_writes_nothing(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    plog.append_records(records(1), leader_epoch=3, timestamp=TS)
    plog.append_records(records(1), leader_epoch=5, timestamp=TS)
    plog.flush()
    before = file_bytes(fs, seg_path(0))
    with pytest.raises(FencedLeaderEpochError, match="epoch 4 is older") as err:
        plog.append_records(records(1), leader_epoch=4, timestamp=TS)
    assert err.value.details["leaderEpoch"] == 5
    with pytest.raises(FencedLeaderEpochError):
        plog.append_batch(encode_batch(records(1), base_offset=2, leader_epoch=3, timestamp=TS))
    assert plog.epochs.entries == (EpochEntry(3, 0), EpochEntry(5, 1))
    _assert_nothing_written(fs, plog, before)


def test_a_new_epoch_is_written_before_its_first_batch_and_installed_with_the_log(
    fs: FaultyFileSystem,
) -> None:
    plog = open_log(fs)
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    plog.flush()
    syncs = fs.syncs
    plog.append_records(records(1), leader_epoch=4, timestamp=TS)
    expected = [EpochEntry(1, 0), EpochEntry(4, 2)]
    assert list(plog.epochs.entries) == expected
    assert fs.syncs == syncs, "nothing synced on the append path"
    assert plog.epochs_unsynced
    # Written to a temporary file of its own before the batch; the checkpoint is replaced
    # (synced, renamed, directory synced) only when the log is synced, before the log's
    # end counts as persisted past the batch.
    assert read_leader_epochs(fs, EPOCHS) == expected[:1]
    [pending] = [n for n in fs.listdir(PDIR) if n.endswith(".tmp")]
    assert pending.startswith("leader-epoch-checkpoint.")
    assert plog.flush() == 3
    assert not plog.epochs_unsynced
    assert not [n for n in fs.listdir(PDIR) if n.endswith(".tmp")]
    fs.crash()
    assert read_leader_epochs(fs, EPOCHS) == expected


@pytest.mark.parametrize("seed", range(40))
def test_a_crash_before_the_sync_leaves_a_history_recovery_rebuilds_from_the_batches(
    fs: FaultyFileSystem, seed: int
) -> None:
    plog = open_log(fs)
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    plog.flush()
    plog.append_records(records(1), leader_epoch=4, timestamp=TS)
    plog.append_records(records(1), leader_epoch=6, timestamp=TS)
    # The checkpoint may come back old, new or torn, the batches whole or not.
    fs.crash(random.Random(seed))
    again = open_log(fs)
    implied = epoch_starts(read_all_batches(again))
    assert implied[0] == EpochEntry(1, 0)
    assert list(again.epochs.entries) == implied
    assert read_leader_epochs(fs, EPOCHS) == implied


def test_a_crash_at_any_step_of_installing_a_new_epoch_leaves_the_old_or_the_new_one() -> None:
    def prepared() -> tuple[FaultyFileSystem, PartitionLog]:
        fs = FaultyFileSystem()
        plog = open_log(fs)
        plog.append_records(records(2), leader_epoch=1, timestamp=TS)
        plog.flush()
        plog.append_records(records(1), leader_epoch=4, timestamp=TS)
        return fs, plog

    fs, plog = prepared()
    fs.stop_after(1_000_000)
    plog.flush()
    steps = 1_000_000 - (fs._stop_countdown or 0)
    assert steps >= 4  # the log's sync, the checkpoint's, its rename, the directory's
    versions = ([EpochEntry(1, 0)], [EpochEntry(1, 0), EpochEntry(4, 2)])
    for step in range(steps):
        fs, plog = prepared()
        fs.stop_after(step)
        with pytest.raises(ProcessStopped):
            plog.flush()
        fs.stop_after(None)
        fs.crash(random.Random(step))
        # Never torn: the temporary file is synced before it is renamed in.
        assert read_leader_epochs(fs, EPOCHS) in versions, step


def test_a_roll_syncs_a_new_epoch_before_its_batches_leave_the_last_segment(
    fs: FaultyFileSystem,
) -> None:
    plog = open_log(fs)
    plog.append_records(records(1), leader_epoch=1, timestamp=TS)
    plog.flush()
    plog.append_records(records(1), leader_epoch=2, timestamp=TS)
    assert plog.epochs_unsynced
    segments = len(plog.segments)
    while len(plog.segments) == segments:  # appends until one rolls the segment
        plog.append_records(records(1), leader_epoch=2, timestamp=TS)
    assert not plog.epochs_unsynced
    # The crash loses the batch in the new segment: the segment recovery checks the
    # checkpoint against is empty, and the batches of epoch 2 lie in the one before. A
    # checkpoint without epoch 2 would be taken as it is.
    fs.crash()
    again = open_log(fs)
    assert again.segments[-1].size == 0
    assert list(again.epochs.entries) == [EpochEntry(1, 0), EpochEntry(2, 1)]
    assert epoch_starts(read_all_batches(again)) == list(again.epochs.entries)


def test_reads_outside_the_log_raise_offset_out_of_range(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    plog.append_records(records(3), leader_epoch=1, timestamp=TS)
    assert plog.read_records(3) == []
    assert plog.read_batches(3) == []
    for offset in (4, 100, -1):
        with pytest.raises(OffsetOutOfRangeError, match=r"outside \[0, 3\]") as err:
            plog.read_records(offset)
        assert err.value.details == {
            "partition": "orders-0",
            "logStartOffset": 0,
            "logEndOffset": 3,
        }
        with pytest.raises(OffsetOutOfRangeError):
            plog.read_batches(offset)


def test_read_below_a_log_start_above_zero_is_out_of_range(fs: FaultyFileSystem) -> None:
    # A directory whose first segment starts at 100 (older segments deleted).
    raw = encode_batch(records(3), base_offset=100, leader_epoch=2, timestamp=TS)
    fs.mkdir(PDIR)
    f = fs.open(seg_path(100), create=True)
    f.append(raw)
    f.sync()
    plog = open_log(fs)
    assert (plog.log_start_offset, plog.log_end_offset) == (100, 103)
    assert [r.offset for r in plog.read_records(100)] == [100, 101, 102]
    for offset in (0, 99):
        with pytest.raises(OffsetOutOfRangeError, match=r"outside \[100, 103\]"):
            plog.read_records(offset)
    assert plog.append_records(records(1), leader_epoch=2, timestamp=TS).base_offset == 103
    # Truncating below the log start starts the log over there, empty (Kafka's truncateTo).
    assert plog.truncate_to(50)
    assert (plog.log_start_offset, plog.log_end_offset, len(plog.epochs)) == (50, 50, 0)
    assert plog.append_records(records(1), leader_epoch=3, timestamp=TS).base_offset == 50


def _three_batches(fs: FaultyFileSystem) -> PartitionLog:
    plog = open_log(fs, LogConfig())
    for n in (3, 4, 2):
        plog.append_records(records(n), leader_epoch=1, timestamp=TS)
    return plog


@pytest.mark.parametrize("config", [LogConfig(), SMALL], ids=["one-segment", "small-segments"])
def test_upper_bound_hides_every_record_at_or_above_it(
    fs: FaultyFileSystem, config: LogConfig
) -> None:
    plog = open_log(fs, config)
    for i in range(12):
        plog.append_records(records(1 + i % 4, f"r{i}-", size=40), leader_epoch=1, timestamp=TS)
    everything = read_all(plog)
    end = plog.log_end_offset
    boundaries = {b.base_offset for b in read_all_batches(plog)} | {end}
    for hw in range(end + 1):
        for start in range(0, hw + 1):
            got = plog.read_records(start, upper_bound=hw, max_bytes=1 << 30)
            assert got == everything[start:hw]
            batches = plog.read_batches(start, upper_bound=hw, max_bytes=1 << 30)
            assert all(b.base_offset < hw for b in batches)
            if hw in boundaries:
                assert all(b.last_offset < hw for b in batches)
    assert plog.read_records(0, upper_bound=end + 50, max_bytes=1 << 30) == everything


def test_read_returns_at_least_one_batch_even_if_larger_than_max_bytes(
    fs: FaultyFileSystem,
) -> None:
    plog = _three_batches(fs)
    sizes = [b.size for b in read_all_batches(plog)]
    one = plog.read_batches(0, max_bytes=1)
    assert [b.base_offset for b in one] == [0]
    assert [r.offset for r in plog.read_records(0, max_bytes=1)] == [0, 1, 2]
    two = plog.read_batches(0, max_bytes=sizes[0] + sizes[1])
    assert [b.base_offset for b in two] == [0, 3]
    just_under = plog.read_batches(0, max_bytes=sizes[0] + sizes[1] - 1)
    assert [b.base_offset for b in just_under] == [0]


def test_read_from_inside_a_batch_starts_at_the_requested_offset(fs: FaultyFileSystem) -> None:
    plog = _three_batches(fs)
    assert [b.base_offset for b in plog.read_batches(4)] == [3, 7]
    assert [r.offset for r in plog.read_records(4)] == [4, 5, 6, 7, 8]
    assert [r.offset for r in plog.read_records(4, max_records=2)] == [4, 5]


def test_segments_roll_and_reads_cross_segment_boundaries(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    appended: list[bytes | None] = []
    for i in range(40):
        batch = records(1 + i % 3, f"b{i}-", size=50)
        plog.append_records(batch, leader_epoch=1 + i // 15, timestamp=TS)
        appended += [r.value for r in batch]
    assert len(plog.segments) >= 5
    for prev, seg in zip(plog.segments, plog.segments[1:], strict=False):
        assert seg.base_offset == prev.next_offset
        assert 0 < prev.size <= SMALL.segment_bytes
        assert fs.exists(index_path(prev.base_offset))  # written when it rolled
    assert values(plog) == appended
    for offset in range(plog.log_end_offset):
        got = plog.read_records(offset, max_records=3)
        assert [r.value for r in got] == appended[offset : offset + 3]
        assert [r.offset for r in got] == list(range(offset, min(offset + 3, len(appended))))
    # Small max_bytes: the reader still moves forward one batch at a time.
    offset, seen = 0, []
    while offset < plog.log_end_offset:
        got = plog.read_records(offset, max_bytes=1)
        assert got
        seen += [r.value for r in got]
        offset = got[-1].offset + 1
    assert seen == appended


def test_flush_advances_the_persisted_log_end(fs: FaultyFileSystem) -> None:
    plog = open_log(fs, LogConfig())
    plog.append_records(records(3), leader_epoch=1, timestamp=TS)
    assert (plog.log_end_offset, plog.persisted_log_end_offset) == (3, 0)
    assert plog.flush() == 3
    assert plog.persisted_log_end_offset == 3
    plog.append_records(records(2), leader_epoch=1, timestamp=TS)
    assert plog.persisted_log_end_offset == 3
    fs.crash()
    assert values(open_log(fs, LogConfig())) == [r.value for r in records(3)]


def test_roll_makes_the_finished_segment_durable(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    fill_segments(plog, 3)
    assert plog.persisted_log_end_offset == plog.active.base_offset
    expected = values(plog)[: plog.active.base_offset]
    fs.crash()
    assert values(open_log(fs)) == expected


# -- truncation -----------------------------------------------------------------------


def _epochs_log(fs: FaultyFileSystem) -> tuple[PartitionLog, list[LogRecord]]:
    plog = open_log(fs)
    for i in range(24):
        plog.append_records(
            records(1 + i % 3, f"t{i}-", size=30), leader_epoch=1 + i // 6, timestamp=TS
        )
    plog.flush()
    return plog, read_all(plog)


def test_truncate_to_inside_a_batch_keeps_the_records_before_it(fs: FaultyFileSystem) -> None:
    plog, before = _epochs_log(fs)
    batch = next(b for b in read_all_batches(plog) if b.record_count == 3)
    cut = batch.base_offset + 2
    assert plog.truncate_to(cut)
    assert read_all(plog) == before[:cut]
    rewritten = read_all_batches(plog)[-1]
    assert (rewritten.base_offset, rewritten.record_count) == (batch.base_offset, 2)
    assert rewritten.leader_epoch == batch.leader_epoch
    assert rewritten.header.first_timestamp == batch.header.first_timestamp
    assert not fs.exists(seg_path(plog.active.base_offset) + ".truncate")


def test_truncate_to_across_segments_removes_later_segment_files(fs: FaultyFileSystem) -> None:
    plog, before = _epochs_log(fs)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 4
    cut = bases[1] + 1
    plog.truncate_to(cut)
    assert [s.base_offset for s in plog.segments] == bases[:2]
    for base in bases[2:]:
        assert not fs.exists(seg_path(base))
        assert not fs.exists(index_path(base))
    assert read_all(plog) == before[:cut]
    # Appends continue at the cut, in the same segment or new ones.
    for i in range(10):
        plog.append_records(
            records(3, f"new{i}-", size=30), leader_epoch=plog.latest_epoch, timestamp=TS
        )
    assert [r.offset for r in read_all(plog)] == list(range(cut + 30))
    assert read_all(plog)[:cut] == before[:cut]


def test_truncate_to_a_segment_base_removes_that_segment(fs: FaultyFileSystem) -> None:
    plog, before = _epochs_log(fs)
    base = plog.segments[2].base_offset
    plog.truncate_to(base)
    assert plog.active.base_offset < base
    assert not fs.exists(seg_path(base))
    assert read_all(plog) == before[:base]


def test_truncate_to_drops_epochs_that_start_at_or_after_the_cut(fs: FaultyFileSystem) -> None:
    plog, _ = _epochs_log(fs)
    starts = {e.epoch: e.start_offset for e in plog.epochs.entries}
    plog.truncate_to(starts[3])
    assert plog.latest_epoch == 2
    assert list(plog.epochs.entries) == epoch_starts(read_all_batches(plog))
    assert read_leader_epochs(fs, EPOCHS) == list(plog.epochs.entries)
    # A follower may now take a newer leader's epoch 3 at a different offset.
    plog.append_records(records(1), leader_epoch=7, timestamp=TS)
    assert plog.epochs.entries[-1] == EpochEntry(7, starts[3])


def test_truncate_to_zero_and_past_the_end(fs: FaultyFileSystem) -> None:
    plog, before = _epochs_log(fs)
    end = plog.log_end_offset
    assert not plog.truncate_to(end)
    assert not plog.truncate_to(end + 10)
    assert read_all(plog) == before
    assert plog.truncate_to(0)
    assert (len(plog.segments), plog.log_end_offset, len(plog.epochs)) == (1, 0, 0)
    assert read_all(plog) == []
    assert plog.append_records(records(1), leader_epoch=9, timestamp=TS).base_offset == 0


@pytest.mark.parametrize("seed", [None, *range(5)])
def test_truncation_is_durable_when_truncate_to_returns(
    fs: FaultyFileSystem, seed: int | None
) -> None:
    plog, before = _epochs_log(fs)
    cut = plog.log_end_offset // 2 + 1
    plog.truncate_to(cut)
    fs.crash(None if seed is None else random.Random(seed))
    plog = open_log(fs)
    assert read_all(plog) == before[:cut]
    assert list(plog.epochs.entries) == epoch_starts(read_all_batches(plog))


def _mid_batch_cut(plog: PartitionLog) -> int:
    batch = next(b for b in reversed(read_all_batches(plog)) if b.record_count == 3)
    return batch.base_offset + 1


@pytest.mark.parametrize("seed", [None, *range(6)])
@pytest.mark.parametrize("op", ["truncate", "write", "sync"])
@pytest.mark.parametrize("flushed", [True, False], ids=["flushed", "unflushed"])
def test_crash_between_redo_file_and_segment_rewrite_recovers_the_truncation(
    fs: FaultyFileSystem, flushed: bool, op: str, seed: int | None
) -> None:
    plog = open_log(fs, LogConfig())
    for i in range(4):
        plog.append_records(records(3, f"b{i}-"), leader_epoch=1, timestamp=TS)
        if i == 1 or flushed:
            plog.flush()
    before = read_all(plog)
    cut = 10  # inside the last batch, which is not flushed in the "unflushed" case
    segment = seg_path(0)
    redo = segment + ".truncate"
    # The rewrite of the segment fails once the redo file is in place.
    fs.fail_when(lambda o, path: o == op and path == segment and fs.exists(redo))
    with pytest.raises(StorageError, match=f"injected I/O error on {op}"):
        plog.truncate_to(cut)
    fs.crash(None if seed is None else random.Random(seed))
    plog = open_log(fs, LogConfig())
    assert plog.recovery.redo_applied
    assert read_all(plog) == before[:cut]
    assert not any(n.endswith(".truncate") for n in fs.listdir(PDIR))


@pytest.mark.parametrize("step", range(16))
def test_mid_batch_truncation_interrupted_at_any_step_is_all_or_nothing(
    fs: FaultyFileSystem, step: int
) -> None:
    plog, before = _epochs_log(fs)
    cut = _mid_batch_cut(plog)
    fs.fail_after(step)
    try:
        plog.truncate_to(cut)
        done = True
    except StorageError:
        done = False
    fs.crash()
    got = read_all(open_log(fs))
    assert got == before[:cut] if done else got in (before, before[:cut])


# -- I/O errors -----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["write", "sync"])
def test_io_error_takes_the_log_offline_and_a_restart_recovers(
    fs: FaultyFileSystem, op: str
) -> None:
    plog = open_log(fs)
    plog.append_records(records(3), leader_epoch=1, timestamp=TS)
    plog.flush()
    plog.append_records(records(2, "unflushed"), leader_epoch=1, timestamp=TS)
    fs.fail_next(op)
    failing = {
        "write": lambda: plog.append_records(records(1, "failed"), leader_epoch=1, timestamp=TS),
        "sync": plog.flush,
    }[op]
    with pytest.raises(StorageError, match=f"injected I/O error on {op}"):
        failing()
    for call in (
        lambda: plog.append_records(records(1), leader_epoch=1, timestamp=TS),
        plog.flush,
        lambda: plog.read_records(0),
        lambda: plog.truncate_to(1),
    ):
        with pytest.raises(StorageError, match="offline after an I/O error"):
            call()
    plog.close()
    assert not fs.exists(f"{PDIR}/.clean-shutdown")
    fs.crash()
    plog = open_log(fs)
    assert not plog.recovery.clean_shutdown
    assert values(plog) == [r.value for r in records(3)]
    plog.append_records(records(1, "after"), leader_epoch=1, timestamp=TS)
    assert values(plog)[-1] == b"after0"


def test_io_error_during_recovery_raises_storage_error(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    plog.append_records(records(3), leader_epoch=1, timestamp=TS)
    plog.flush()
    fs.fail_next("sync")
    with pytest.raises(StorageError, match="I/O error opening log orders-0"):
        open_log(fs)
    assert values(open_log(fs)) == [r.value for r in records(3)]


# -- close ----------------------------------------------------------------------------


def test_clean_close_then_reopen_keeps_everything_and_reports_clean_shutdown(
    fs: FaultyFileSystem,
) -> None:
    plog, before = _epochs_log(fs)
    plog.append_records(records(2, "last"), leader_epoch=plog.latest_epoch, timestamp=TS)
    before = read_all(plog)
    epochs = plog.epochs.entries
    plog.close()
    plog.close()  # idempotent
    fs.crash()
    plog = open_log(fs)
    report = plog.recovery
    assert report.clean_shutdown
    assert (report.truncated_bytes, report.indexes_rebuilt, report.epoch_checkpoint) == (
        0,
        [],
        "ok",
    )
    assert (report.log_end_offset, report.segments) == (len(before), len(plog.segments))
    assert read_all(plog) == before
    assert plog.epochs.entries == epochs
    # The marker is consumed: a crash now is not mistaken for a clean shutdown.
    fs.crash()
    assert not open_log(fs).recovery.clean_shutdown


def test_closed_log_refuses_use(fs: FaultyFileSystem) -> None:
    plog = open_log(fs)
    plog.close()
    with pytest.raises(StorageError, match="is closed"):
        plog.append_records(records(1), leader_epoch=1, timestamp=TS)
    with pytest.raises(StorageError, match="is closed"):
        plog.read_records(0)


@pytest.mark.parametrize("op", ["sync", "write", "rename", "sync_dir"])
def test_io_error_in_close_raises_storage_error_and_releases_the_log(
    fs: FaultyFileSystem, op: str
) -> None:
    plog = open_log(fs)
    plog.append_records(records(3), leader_epoch=1, timestamp=TS)
    plog.flush()
    fs.fail_next(op)
    with pytest.raises(StorageError, match=f"injected I/O error on {op}"):
        plog.close()
    with pytest.raises(StorageError, match="is closed"):
        plog.read_records(0)
    plog.close()  # nothing left to do
    fs.crash()
    plog = open_log(fs)
    assert [r.value for r in read_all(plog)] == [r.value for r in records(3)]


@pytest.mark.parametrize("config", [LogConfig(), SMALL], ids=["one-segment", "small-segments"])
def test_reads_of_recent_appends_match_reads_from_disk(
    fs: FaultyFileSystem, config: LogConfig
) -> None:
    """Recent batches are served from memory; every read must equal the same read from disk."""
    plog = open_log(fs, config)
    for n in (3, 1, 4, 2, 5, 1, 3):
        plog.append_records(records(n), leader_epoch=1, timestamp=TS)
    plog.truncate_to(15)
    for n in (2, 3):
        plog.append_records(records(n), leader_epoch=2, timestamp=TS)
    end = plog.log_end_offset

    def reads(log: PartitionLog) -> list[list[tuple[int, bytes]]]:
        out = []
        for offset in range(end + 1):
            for max_bytes in (1, 200, 1 << 20):
                for bound in (None, offset + 1, end - 1):
                    batches = log.read_batches(offset, max_bytes, bound)
                    out.append([(b.base_offset, b.raw) for b in batches])
        return out

    from_memory = reads(plog)
    plog.flush()
    plog.close()
    assert reads(open_log(fs, config)) == from_memory
