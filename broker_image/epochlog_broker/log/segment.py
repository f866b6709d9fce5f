"""One segment: a file of consecutive record batches plus its in-memory offset and time
indexes.

File names are the base offset, zero-padded: `00000000000000001234.log`, its
`.index` and its `.timeindex`. A segment owns reading by offset or by time, scanning
(for recovery), and cutting its tail. Cutting inside a batch rewrites that batch with
only its earlier records; the rewrite goes through a small redo file (`.log.truncate`) so that a
crash in the middle can neither lose the kept records nor leave a torn batch.
"""

from __future__ import annotations

import bisect
import posixpath
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from epochlog.protocol.batch import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    BatchFormatError,
    BatchHeader,
    RecordBatch,
    check_batch,
    decode_records,
    encode_batch,
)
from epochlog.protocol.batch import Record as _Record
from epochlog.protocol.errors import CorruptRecordError
from epochlog_broker.log.checkpoints import atomic_write
from epochlog_broker.log.fs import File, FileSystem, read_all
from epochlog_broker.log.index import IndexFormatError, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
REDO_SUFFIX = ".log.truncate"
_LEN = struct.Struct(">I")
_REDO_HEAD = struct.Struct(">4sq")
_CRC = struct.Struct(">I")
_CHUNK = 1 << 20
TAIL_CACHE_BYTES = 4 << 20
"""Bytes of the most recent appends a segment keeps in memory for reads of its tail."""


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    if dot and ext == "log" and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


@dataclass(frozen=True)
class ScanFailure:
    """Where a scan stopped: the first byte that is not a valid, consecutive batch."""

    position: int
    reason: str


def iter_batches(
    file: File, start: int, end: int, expected_offset: int | None = None
) -> Iterator[tuple[int, BatchHeader] | ScanFailure]:
    """Yield (position, header) of each valid batch in [start, end), then a ScanFailure if
    the region does not end exactly on a batch boundary with valid, consecutive batches."""
    buf = b""
    buf_pos = start
    pos = start
    while pos < end:
        off = pos - buf_pos
        if len(buf) - off < HEADER_SIZE:
            buf, buf_pos, off = file.pread(min(_CHUNK, end - pos), pos), pos, 0
        if len(buf) - off >= 4:
            size = _LEN.unpack_from(buf, off)[0] + 4
            if size <= end - pos and len(buf) - off < size:
                buf, buf_pos, off = file.pread(max(_CHUNK, size), pos), pos, 0
        try:
            h = check_batch(memoryview(buf)[: min(len(buf), end - buf_pos)], off)
        except BatchFormatError as exc:
            yield ScanFailure(pos, exc.reason)
            return
        if expected_offset is not None and h.base_offset != expected_offset:
            yield ScanFailure(pos, f"base offset {h.base_offset}, expected {expected_offset}")
            return
        yield pos, h
        expected_offset = h.next_offset
        pos += h.size


def find_valid_batch_after(file: File, position: int, end: int, min_offset: int) -> int | None:
    """Position of some valid batch with base offset >= `min_offset` after `position`.

    Used only when a scan fails, to tell a torn tail (nothing valid follows) from
    damage in the middle of the log (valid batches follow the bad bytes).
    """
    pos = position + 1
    while pos < end:
        buf = file.pread(min(_CHUNK + HEADER_SIZE, end - pos), pos)
        i = buf.find(bytes([MAGIC]), 8)
        while i != -1:
            cand = i - 8
            if cand + HEADER_SIZE <= len(buf):
                h = BatchHeader._make(HEADER.unpack_from(buf, cand))
                if (
                    h.attributes == 0
                    and h.base_offset >= min_offset
                    and HEADER_SIZE <= h.size <= end - (pos + cand)
                    and h.record_count > 0
                ):
                    raw = buf[cand : cand + h.size]
                    if len(raw) < h.size:
                        raw = file.pread(h.size, pos + cand)
                    if zlib.crc32(memoryview(raw)[8:]) == h.crc:
                        return pos + cand
            i = buf.find(bytes([MAGIC]), i + 1)
        pos += max(1, len(buf) - HEADER_SIZE)
    return None


class Segment:
    def __init__(self, fs: FileSystem, directory: str, base_offset: int, file: File) -> None:
        self.fs = fs
        self.directory = directory
        self.base_offset = base_offset
        self.file = file
        self.size = file.size()
        self.next_offset = base_offset
        self.index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.first_timestamp = -1
        """The first batch's largest timestamp (-1: none yet): segment_ms counts from it."""
        # The batches appended since the segment was opened (or last cut), newest last,
        # as written: a contiguous suffix of the file. Readers near the end (followers,
        # tailing consumers) get them without a read and a CRC pass over the disk.
        self._tail: list[RecordBatch] = []
        self._tail_next: list[int] = []
        """next_offset of each batch in `_tail`, for bisect."""
        self._tail_head = 0
        """Index of the oldest batch still cached."""
        self._tail_bytes = 0

    @property
    def log_path(self) -> str:
        return posixpath.join(self.directory, segment_name(self.base_offset))

    @property
    def index_path(self) -> str:
        return posixpath.join(self.directory, segment_name(self.base_offset, INDEX_SUFFIX))

    @property
    def redo_path(self) -> str:
        return posixpath.join(self.directory, segment_name(self.base_offset, REDO_SUFFIX))

    def corrupt(self, position: int, reason: str, offset: int | None = None) -> CorruptRecordError:
        where = f"offset {offset}, " if offset is not None else ""
        return CorruptRecordError(
            f"corrupt batch in {self.log_path} at {where}byte {position}: {reason}",
            file=self.log_path,
            position=position,
            offset=offset,
        )

    # -- writing ----------------------------------------------------------------------

    @property
    def time_index_path(self) -> str:
        return posixpath.join(self.directory, segment_name(self.base_offset, TIME_INDEX_SUFFIX))

    def _add_index_entry(self, offset: int, position: int) -> None:
        self.index.add(offset, position)
        self.time_index.add(self.max_timestamp, offset)
        self.bytes_since_index = 0

    def reset_indexes(self) -> None:
        self.index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self.bytes_since_index = 0

    def append(self, raw: bytes | bytearray, h: BatchHeader, interval: int) -> None:
        if self.bytes_since_index >= interval:
            self._add_index_entry(h.base_offset, self.size)
        self.file.append(raw)
        self.size += len(raw)
        self.bytes_since_index += len(raw)
        self.next_offset = h.next_offset
        self.max_timestamp = max(self.max_timestamp, h.max_timestamp)
        if self.first_timestamp < 0:
            self.first_timestamp = h.max_timestamp
        self._cache(RecordBatch(h, raw if isinstance(raw, bytes) else bytes(raw)))

    def _cache(self, batch: RecordBatch) -> None:
        self._tail.append(batch)
        self._tail_next.append(batch.next_offset)
        self._tail_bytes += batch.size
        while self._tail_bytes > TAIL_CACHE_BYTES and self._tail_head < len(self._tail) - 1:
            self._tail_bytes -= self._tail[self._tail_head].size
            self._tail_head += 1
        if self._tail_head > 64 and self._tail_head * 2 > len(self._tail):
            del self._tail[: self._tail_head]
            del self._tail_next[: self._tail_head]
            self._tail_head = 0

    def drop_cache(self) -> None:
        self._tail.clear()
        self._tail_next.clear()
        self._tail_head = 0
        self._tail_bytes = 0

    def note_scanned(self, position: int, h: BatchHeader, interval: int) -> None:
        """Account for a batch found on disk (recovery) as if it had been appended."""
        if self.bytes_since_index >= interval and position > 0:
            self._add_index_entry(h.base_offset, position)
        self.bytes_since_index += h.size
        self.next_offset = h.next_offset
        self.max_timestamp = max(self.max_timestamp, h.max_timestamp)
        if self.first_timestamp < 0:
            self.first_timestamp = h.max_timestamp

    def write_index(self) -> None:
        atomic_write(self.fs, self.index_path, self.index.encode())
        atomic_write(self.fs, self.time_index_path, self.time_index.encode())

    def load_index(self) -> tuple[OffsetIndex, TimeIndex] | None:
        """Both indexes from their files; None when either is missing, damaged or out of
        step with the other (both are rebuilt then)."""
        if not (self.fs.exists(self.index_path) and self.fs.exists(self.time_index_path)):
            return None
        try:
            index = OffsetIndex.decode(
                read_all(self.fs, self.index_path), self.base_offset, self.size
            )
            time_index = TimeIndex.decode(read_all(self.fs, self.time_index_path), self.base_offset)
        except IndexFormatError:
            return None
        if list(time_index.offsets) != list(index.offsets):
            return None
        return index, time_index

    def offset_for_timestamp(self, timestamp: int, min_offset: int, limit: int) -> int | None:
        """The first offset in [min_offset, limit) of a record stamped at or after
        `timestamp`; None if this segment holds none."""
        start = max(self.time_index.lookup(timestamp), min_offset)
        _, pos = self.index.lookup(start)
        for item in iter_batches(self.file, pos, self.size):
            if isinstance(item, ScanFailure):
                raise self.corrupt(item.position, item.reason)
            p, h = item
            if h.base_offset >= limit:
                return None
            if h.next_offset <= min_offset or h.max_timestamp < timestamp:
                continue
            for r in decode_records(self.file.pread(h.size, p), h):
                if r.offset >= limit:
                    return None
                if r.offset >= min_offset and r.timestamp >= timestamp:
                    return r.offset
        return None

    def max_timestamp_between(self, min_offset: int, limit: int) -> int | None:
        """The largest timestamp of a record in [min_offset, limit) in this segment; None
        if it holds none.

        From the segment's first batch, the time index answers for every batch before
        its last entry at or below `limit` and only the batches from there are scanned;
        from inside the segment (a log start there), the scan starts at the batch holding
        `min_offset`. A batch the range cuts is decoded, the others answer from their
        headers."""
        if min_offset <= self.base_offset:
            _, pos = self.index.lookup(limit)
            known = self.time_index.largest_before(limit)
            best = None if known < 0 else known
        else:
            _, pos = self.index.lookup(min_offset)
            best = None
        for item in iter_batches(self.file, pos, self.size):
            if isinstance(item, ScanFailure):
                raise self.corrupt(item.position, item.reason)
            p, h = item
            if h.base_offset >= limit:
                break
            if h.next_offset <= min_offset:
                continue
            if h.base_offset >= min_offset and h.next_offset <= limit:
                stamp = h.max_timestamp
            else:
                inside = [
                    r.timestamp
                    for r in decode_records(self.file.pread(h.size, p), h)
                    if min_offset <= r.offset < limit
                ]
                if not inside:
                    continue
                stamp = max(inside)
            best = stamp if best is None else max(best, stamp)
        return best

    def _recount_max_timestamp(self) -> None:
        """`max_timestamp` of what a truncation kept: the last time index entry's (every
        batch before it) and the batches from that entry on."""
        _, pos = self.index.last()
        best = self.time_index.last_timestamp()
        for item in iter_batches(self.file, pos, self.size):
            if isinstance(item, ScanFailure):
                raise self.corrupt(item.position, item.reason)
            best = max(best, item[1].max_timestamp)
        self.max_timestamp = best

    # -- reading ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None) -> list[RecordBatch]:
        """Batches holding offsets >= `offset` (and starting below `upper_bound`).

        Returns at least one batch if any qualifies, even when it is larger than
        `max_bytes`, so that a reader always makes progress.
        """
        head = self._tail_head
        if head < len(self._tail) and offset >= self._tail[head].base_offset:
            return self._read_cached(offset, max_bytes, upper_bound)
        _, pos = self.index.lookup(offset)
        out: list[RecordBatch] = []
        total = 0
        buf = b""
        buf_pos = pos
        while pos < self.size:
            off = pos - buf_pos
            want = max(max_bytes - total, HEADER_SIZE) + 8192
            if len(buf) - off < HEADER_SIZE:
                buf, buf_pos, off = self.file.pread(min(want, self.size - pos), pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    raise self.corrupt(pos, "truncated batch header")
            size = _LEN.unpack_from(buf, off)[0] + 4
            if len(buf) - off < size:
                buf, buf_pos, off = (
                    self.file.pread(min(max(want, size), self.size - pos), pos),
                    pos,
                    0,
                )
            try:
                h = check_batch(buf, off)
            except BatchFormatError as exc:
                raise self.corrupt(pos, exc.reason) from exc
            if h.next_offset <= offset:
                pos += h.size
                continue
            if upper_bound is not None and h.base_offset >= upper_bound:
                break
            if out and total + h.size > max_bytes:
                break
            out.append(RecordBatch(h, bytes(buf[off : off + h.size])))
            total += h.size
            pos += h.size
            if total >= max_bytes:
                break
        return out

    def _read_cached(
        self, offset: int, max_bytes: int, upper_bound: int | None
    ) -> list[RecordBatch]:
        """`read` served from the cached tail (offset is at or after its first batch)."""
        tail = self._tail
        out: list[RecordBatch] = []
        total = 0
        for i in range(bisect.bisect_right(self._tail_next, offset, self._tail_head), len(tail)):
            b = tail[i]
            if upper_bound is not None and b.base_offset >= upper_bound:
                break
            if out and total + b.size > max_bytes:
                break
            out.append(b)
            total += b.size
            if total >= max_bytes:
                break
        return out

    # -- truncation -------------------------------------------------------------------

    def locate(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the batch holding `offset`, or None at/after the end."""
        _, pos = self.index.lookup(offset)
        for item in iter_batches(self.file, pos, self.size):
            if isinstance(item, ScanFailure):
                raise self.corrupt(item.position, item.reason)
            p, h = item
            if h.base_offset <= offset < h.next_offset:
                return p, h
        return None

    def truncate_to(self, offset: int) -> None:
        """Keep offsets below `offset`; durable when this returns."""
        if offset >= self.next_offset:
            return
        self.drop_cache()
        kept: bytes | bytearray = b""
        if offset <= self.base_offset:
            cut = 0
        else:
            found = self.locate(offset)
            assert found is not None
            cut, h = found
            if h.base_offset < offset:
                batch = self.file.pread(h.size, cut)
                records = decode_records(batch, h)[: offset - h.base_offset]
                kept = encode_batch(
                    [_Record(r.value, r.key, r.headers, r.timestamp) for r in records],
                    base_offset=h.base_offset,
                    leader_epoch=h.leader_epoch,
                    timestamp=h.first_timestamp,
                    producer_id=h.producer_id,
                    producer_epoch=h.producer_epoch,
                    base_sequence=h.base_sequence,
                )
        if kept:
            # The redo record cuts the file at `cut` on recovery, so the bytes before it
            # must be durable first: applied to a file that lost its unsynced tail, it
            # would zero-fill up to `cut` and leave a hole in front of the kept batch.
            self.file.sync()
            redo = _REDO_HEAD.pack(b"ELTR", cut) + kept
            atomic_write(self.fs, self.redo_path, redo + _CRC.pack(zlib.crc32(redo)))
        self.file.truncate(cut)
        if kept:
            self.file.append(kept)
        self.file.sync()
        if kept:
            self.fs.remove(self.redo_path)
            self.fs.sync_dir(self.directory)
        self.size = cut + len(kept)
        if self.size == 0:
            self.first_timestamp = self.max_timestamp = -1
        self.index.truncate_to_position(cut)
        kept_entries = self.index.offsets
        self.time_index.truncate_to_offset(
            kept_entries[-1] + 1 if kept_entries else self.base_offset
        )
        self.next_offset = offset
        self.bytes_since_index = self.size - self.index.last()[1]
        # What was cut may have held the largest timestamp (retention and ListOffsets'
        # max-timestamp read it).
        self._recount_max_timestamp()

    def apply_redo(self) -> bool:
        """Finish a mid-batch truncation interrupted by a crash; True if one was applied."""
        if not self.fs.exists(self.redo_path):
            return False
        self.drop_cache()
        raw = read_all(self.fs, self.redo_path)
        valid = (
            len(raw) > _REDO_HEAD.size + _CRC.size
            and raw[:4] == b"ELTR"
            and _CRC.unpack_from(raw, len(raw) - 4)[0] == zlib.crc32(raw[:-4])
        )
        if valid:
            cut = _REDO_HEAD.unpack_from(raw)[1]
            self.file.truncate(cut)
            self.file.append(raw[_REDO_HEAD.size : -4])
            self.file.sync()
            self.size = self.file.size()
        self.fs.remove(self.redo_path)
        self.fs.sync_dir(self.directory)
        return valid

    def close(self) -> None:
        self.drop_cache()
        self.file.close()
