"""Retention, the log start offset and offsets by time in the log layer: the pure
decision (unit tests and a property: never the active segment, never at or above the
high watermark, only a prefix, the start only moving up), segment deletion on a log,
reads below the start, the log-start-offset-checkpoint, a follower's log starting over,
a crash at every step of a segment deletion, and the time index (against a scan of
every record, rebuilt when missing or damaged) with the largest timestamp below a bound."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.protocol.errors import OffsetOutOfRangeError
from epochlog_broker.log import LogConfig, PartitionLog, Record
from epochlog_broker.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    LogStartCheckpoint,
    read_log_starts,
)
from epochlog_broker.log.retention import (
    UNLIMITED,
    RetentionLimits,
    SegmentFacts,
    decide_retention,
)
from epochlog_broker.log.segment import INDEX_SUFFIX, segment_name
from tests.conftest import examples

from .helpers import PDIR, TS, FaultyFileSystem, file_bytes, read_all, write_file

DATA = "/data"
CONFIG = LogConfig(segment_bytes=400, max_batch_bytes=600, index_interval_bytes=150)
HOUR = 3_600_000


def seg(base: int, end: int, size: int = 100, ts: int = 0) -> SegmentFacts:
    return SegmentFacts(base, end, size, ts)


# -- the decision --------------------------------------------------------------------------


def test_time_retention_deletes_the_old_closed_segments_only() -> None:
    segments = [seg(0, 10, ts=1_000), seg(10, 20, ts=2_000), seg(20, 30, ts=9_000)]
    d = decide_retention(
        segments,
        log_start_offset=0,
        high_watermark=30,
        limits=RetentionLimits(retention_ms=5_000),
        now_ms=8_000,
    )
    assert (d.segments, d.log_start_offset, d.reason) == (2, 20, "time")


def test_retention_never_deletes_the_active_segment() -> None:
    segments = [seg(0, 10, ts=1), seg(10, 20, ts=2)]
    d = decide_retention(
        segments,
        log_start_offset=0,
        high_watermark=20,
        limits=RetentionLimits(retention_ms=1, retention_bytes=0),
        now_ms=10 * HOUR,
    )
    assert (d.segments, d.log_start_offset) == (1, 10)


def test_retention_never_deletes_at_or_above_the_high_watermark() -> None:
    segments = [seg(0, 10), seg(10, 20), seg(20, 30)]
    d = decide_retention(
        segments,
        log_start_offset=0,
        high_watermark=15,
        limits=RetentionLimits(retention_ms=1),
        now_ms=HOUR,
    )
    assert (d.segments, d.log_start_offset) == (1, 10)


def test_size_retention_deletes_only_while_the_rest_holds_retention_bytes() -> None:
    segments = [seg(0, 10, 100), seg(10, 20, 100), seg(20, 30, 100), seg(30, 35, 50)]
    d = decide_retention(
        segments,
        log_start_offset=0,
        high_watermark=35,
        limits=RetentionLimits(retention_ms=UNLIMITED, retention_bytes=160),
        now_ms=0,
    )
    # 350 bytes, 160 kept (as Kafka): deleting 100 leaves 250; 200 would leave 150.
    assert (d.segments, d.log_start_offset, d.reason) == (1, 10, "size")


def test_a_moved_log_start_deletes_the_segments_wholly_below_it() -> None:
    segments = [seg(0, 10), seg(10, 20), seg(20, 30)]
    d = decide_retention(
        segments,
        log_start_offset=15,
        high_watermark=30,
        limits=RetentionLimits(retention_ms=UNLIMITED),
        now_ms=0,
    )
    assert (d.segments, d.log_start_offset, d.reason) == (1, 15, "log-start")


def test_unlimited_retention_deletes_nothing() -> None:
    segments = [seg(0, 10), seg(10, 20)]
    d = decide_retention(
        segments,
        log_start_offset=0,
        high_watermark=20,
        limits=RetentionLimits(retention_ms=UNLIMITED, retention_bytes=UNLIMITED),
        now_ms=10**12,
    )
    assert (d.segments, d.log_start_offset) == (0, 0)


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[SegmentFacts], int, int]:
    sizes = draw(st.lists(st.tuples(st.integers(1, 20), st.integers(0, 500)), min_size=1))
    out, base = [], draw(st.integers(0, 50))
    first = base
    for count, size in sizes:
        out.append(SegmentFacts(base, base + count, size, draw(st.integers(-1, 10_000))))
        base += count
    end = base
    start = draw(st.integers(first, end))
    hw = draw(st.integers(start, end))
    return out, start, hw


@given(
    logs(),
    st.integers(-1, 10_000),
    st.integers(-1, 5_000),
    st.integers(0, 20_000),
)
@settings(max_examples=examples(300), deadline=None)
def test_retention_keeps_its_guarantees(
    log: tuple[list[SegmentFacts], int, int], retention_ms: int, retention_bytes: int, now: int
) -> None:
    segments, start, hw = log
    d = decide_retention(
        segments,
        log_start_offset=start,
        high_watermark=hw,
        limits=RetentionLimits(retention_ms, retention_bytes),
        now_ms=now,
    )
    assert 0 <= d.segments < len(segments), "the active segment is never deleted"
    assert all(s.next_offset <= hw for s in segments[: d.segments]), "nothing at/above the HW"
    assert d.log_start_offset >= start, "the log start only moves up"
    assert d.log_start_offset <= max(start, hw), "the log start never passes the HW"
    if d.segments:
        assert d.log_start_offset == max(start, segments[d.segments].base_offset)
    else:
        assert d.log_start_offset == start


# -- the log -------------------------------------------------------------------------------


def fill(plog: PartitionLog, n: int, *, ts: int = TS, epoch: int = 1) -> None:
    for i in range(n):
        plog.append_records(
            [Record(f"r{plog.log_end_offset}-{i}".encode().ljust(90, b"."))],
            leader_epoch=epoch,
            timestamp=ts,
        )
    plog.flush()


def test_deleting_segments_moves_the_log_start_and_refuses_reads_below_it() -> None:
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    fill(plog, 12)
    assert len(plog.segments) >= 3
    before = {r.offset: r.value for r in read_all(plog)}
    new_start = plog.segments[2].base_offset
    assert plog.advance_log_start(new_start)
    assert plog.delete_segments_below_start() == 2
    assert plog.log_start_offset == new_start
    with pytest.raises(OffsetOutOfRangeError) as err:
        plog.read_records(new_start - 1)
    assert err.value.log_start_offset == new_start
    after = {r.offset: r.value for r in read_all(plog)}
    assert after == {o: v for o, v in before.items() if o >= new_start}
    plog.close()
    reopened = PartitionLog.open(fs, PDIR, CONFIG, log_start_offset=new_start)
    assert reopened.log_start_offset == new_start
    assert {r.offset: r.value for r in read_all(reopened)} == after


def test_a_log_start_inside_a_segment_survives_a_restart_through_the_checkpoint() -> None:
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    fill(plog, 6)
    plog.advance_log_start(2)
    cp = LogStartCheckpoint.load(fs, DATA)
    cp.write({"orders-0": plog.log_start_offset})
    fs.crash()
    cp = LogStartCheckpoint.load(fs, DATA)
    assert cp.get("orders-0") == 2
    reopened = PartitionLog.open(fs, PDIR, CONFIG, log_start_offset=cp.get("orders-0"))
    assert reopened.log_start_offset == 2
    assert read_all(reopened)[0].offset == 2


def test_a_damaged_log_start_checkpoint_is_kept_aside_and_loses_nothing() -> None:
    fs = FaultyFileSystem()
    fs.mkdir(DATA)
    write_file(fs, f"{DATA}/{LOG_START_OFFSET_CHECKPOINT}", b"epochlog-log-start garbage\n")
    cp = LogStartCheckpoint.load(fs, DATA)
    assert cp.load_error is not None
    assert cp.known == {}
    assert fs.exists(f"{DATA}/{LOG_START_OFFSET_CHECKPOINT}.damaged")


def test_a_log_starting_over_at_the_leaders_log_start_is_empty_there() -> None:
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    fill(plog, 5, epoch=3)
    plog.reset_to(40)
    assert (plog.log_start_offset, plog.log_end_offset, len(plog.epochs)) == (40, 40, 0)
    plog.append_records([Record(b"x")], leader_epoch=2, timestamp=TS)
    plog.close()
    reopened = PartitionLog.open(fs, PDIR, CONFIG, log_start_offset=40)
    assert [r.offset for r in read_all(reopened)] == [40]


def test_a_start_past_the_log_end_after_a_crash_starts_the_log_over_there() -> None:
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    fill(plog, 3)
    plog.close()
    reopened = PartitionLog.open(fs, PDIR, CONFIG, log_start_offset=10)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (10, 10)


def test_segments_roll_by_time_as_their_batches_timestamps_say() -> None:
    fs = FaultyFileSystem()
    config = LogConfig(segment_bytes=1 << 20, max_batch_bytes=600, segment_ms=1_000)
    plog = PartitionLog.open(fs, PDIR, config)
    for ts in (TS, TS + 500, TS + 999, TS + 1_000, TS + 1_500, TS + 2_100):
        plog.append_records([Record(b"v")], leader_epoch=1, timestamp=ts)
    assert [s.base_offset for s in plog.segments] == [0, 3, 5]


@pytest.mark.parametrize("seed", range(6))
def test_crash_during_segment_deletion(seed: int) -> None:
    """A crash (process or power) at every step of a retention pass: checkpoint write,
    each segment's files, the directory sync. The log reopens from the checkpointed start
    (or its first remaining segment when the checkpoint had not landed), every record at
    or above the start it reopens with is intact, and the start never goes below the
    one it had before the pass."""
    rng = random.Random(seed)
    steps = 0
    while True:
        fs = FaultyFileSystem()
        plog = PartitionLog.open(fs, PDIR, CONFIG)
        fill(plog, 14)
        expected = {r.offset: r.value for r in read_all(plog)}
        cp = LogStartCheckpoint.load(fs, DATA)
        new_start = plog.segments[3].base_offset
        fs.fail_after(steps)
        finished = False
        try:
            plog.advance_log_start(new_start)
            cp.write({"orders-0": new_start})
            plog.delete_segments_below_start()
            finished = True
        except Exception:
            pass
        fs.crash(rng if rng.random() < 0.5 else None)
        starts = read_log_starts(fs, f"{DATA}/{LOG_START_OFFSET_CHECKPOINT}") or {}
        reopened = PartitionLog.open(fs, PDIR, CONFIG, log_start_offset=starts.get("orders-0"))
        start = reopened.log_start_offset
        assert start in (0, new_start) or 0 < start <= new_start
        got = {r.offset: r.value for r in read_all(reopened)}
        assert got == {o: v for o, v in expected.items() if o >= start}
        if "orders-0" in starts:
            assert start == new_start
            assert all(s.next_offset > new_start for s in reopened.segments)
        reopened.close()
        if finished:
            break
        steps += 1
    assert steps > 3


# -- offsets by time -----------------------------------------------------------------------


def brute_force(stamps: list[int], at: int, start: int = 0) -> int | None:
    return next((o for o, t in enumerate(stamps) if o >= start and t >= at), None)


def _stamped_log(fs: FaultyFileSystem, batches: list[list[int]]) -> tuple[PartitionLog, list[int]]:
    """A log of one batch per list, its records stamped with the list's timestamps, flushed;
    and every record's timestamp, in offset order."""
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    stamps: list[int] = []
    for batch in batches:
        plog.append_records(
            [Record(b"v".ljust(40, b"."), timestamp=t) for t in batch],
            leader_epoch=1,
            timestamp=0,
        )
        stamps += batch
    plog.flush()
    return plog, stamps


@given(
    st.lists(st.lists(st.integers(0, 5_000), min_size=1, max_size=5), min_size=1, max_size=30),
    st.integers(-1, 5_100),
    st.booleans(),
)
@settings(max_examples=examples(100), deadline=None)
def test_offsets_by_timestamp_answer_the_first_record_at_or_after_it(
    batches: list[list[int]], at: int, restart: bool
) -> None:
    """Whatever the timestamps (not monotonic, several per batch), the time index and the
    scan from its entry find the same offset as a scan of every record; also after a
    clean restart (indexes from their files) and a crash (indexes rebuilt)."""
    fs = FaultyFileSystem()
    plog, stamps = _stamped_log(fs, batches)
    if restart:
        plog.close()
        plog = PartitionLog.open(fs, PDIR, CONFIG)
    assert plog.offset_for_timestamp(at) == brute_force(stamps, at)
    assert plog.offset_for_timestamp(at, upper_bound=3) == next(
        (o for o in [brute_force(stamps, at)] if o is not None and o < 3), None
    )
    assert max(s.max_timestamp for s in plog.segments) == max(stamps)


def test_offsets_by_timestamp_skip_records_below_the_log_start() -> None:
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    for t in range(10):
        plog.append_records([Record(b"v", timestamp=1_000 + t)], leader_epoch=1, timestamp=0)
    plog.advance_log_start(4)
    assert plog.offset_for_timestamp(0) == 4
    assert plog.offset_for_timestamp(1_006) == 6
    assert plog.offset_for_timestamp(2_000) is None


@given(
    st.lists(st.lists(st.integers(0, 5_000), min_size=1, max_size=5), min_size=1, max_size=30),
    st.integers(0, 160),
    st.integers(0, 160),
    st.booleans(),
)
@settings(max_examples=examples(100), deadline=None)
def test_the_largest_timestamp_is_that_of_the_records_between_the_log_start_and_the_bound(
    batches: list[list[int]], start: int, bound: int, restart: bool
) -> None:
    """ListOffsets' max-timestamp: whatever the timestamps, the log start and the bound
    (the HW) cutting batches and segments, the largest timestamp of the records between
    them, as a scan of every record finds it, and the first record stamped with it."""
    fs = FaultyFileSystem()
    plog, stamps = _stamped_log(fs, batches)
    start = min(start, len(stamps))
    plog.advance_log_start(start)
    if restart:
        plog.close()
        plog = PartitionLog.open(fs, PDIR, CONFIG)
        plog.advance_log_start(start)
    between = stamps[start:bound]
    expected = max(between) if between else None
    assert plog.max_timestamp(bound) == expected
    if expected is not None:
        assert plog.offset_for_timestamp(expected, bound) == start + between.index(expected)


def test_a_truncation_that_cuts_the_largest_timestamp_away_forgets_it() -> None:
    """A follower's truncation (divergence) leaves the segment's largest timestamp that of
    what it kept: retention and max-timestamp read it."""
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, LogConfig(segment_bytes=4000, index_interval_bytes=150))
    for t in (5, 9, 7, 3, 50, 4):
        plog.append_records(
            [Record(b"v".ljust(60, b"."), timestamp=t)], leader_epoch=1, timestamp=0
        )
    assert len(plog.segments) == 1
    assert plog.max_timestamp() == 50
    plog.truncate_to(4)
    assert plog.segments[-1].max_timestamp == 9
    assert plog.max_timestamp() == 9
    assert plog.offset_for_timestamp(9) == 1
    plog.append_records([Record(b"w", timestamp=8)], leader_epoch=2, timestamp=0)
    assert plog.max_timestamp() == 9


@pytest.mark.parametrize("damage", ["missing", "torn", "other segment's"])
def test_a_missing_or_damaged_time_index_is_rebuilt(damage: str) -> None:
    fs = FaultyFileSystem()
    plog = PartitionLog.open(fs, PDIR, CONFIG)
    for t in range(30):
        plog.append_records(
            [Record(b"v".ljust(90, b"."), timestamp=t * 10)], leader_epoch=1, timestamp=0
        )
    plog.close()
    first = plog.segments[0]
    path, other = first.time_index_path, plog.segments[1].time_index_path
    if damage == "missing":
        fs.remove(path)
    elif damage == "torn":
        write_file(fs, path, file_bytes(fs, path)[:-3])
    else:
        write_file(fs, path, file_bytes(fs, other))
    reopened = PartitionLog.open(fs, PDIR, CONFIG)
    assert segment_name(first.base_offset, INDEX_SUFFIX) in reopened.recovery.indexes_rebuilt
    assert [reopened.offset_for_timestamp(t * 10 - 5) for t in range(31)] == [*range(30), None]
    assert reopened.segments[0].max_timestamp == first.max_timestamp
