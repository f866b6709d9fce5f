"""The record batch: the unit the log stores, replicates and checks.

Layout (big-endian), 57-byte header then the records:

    length u32           bytes after this field
    crc u32              CRC-32 of every byte after this field
    magic u8             format version (1)
    attributes u16       reserved (compression, control batches), 0 today
    baseOffset i64       offset of the first record
    leaderEpoch i32      epoch of the leader that appended the batch
    recordCount i32      records in the batch; offsets are baseOffset + i
    firstTimestamp i64   ms since the epoch
    maxTimestamp i64
    producerId i64       idempotent producer id, -1 if none
    producerEpoch i16
    baseSequence i32

    record: timestamp i64, keyLength i32 (-1 = null), valueLength i32 (-1 = null),
            headerCount u16, key, value, then per header: keyLength u16,
            valueLength u32, key (UTF-8), value

The CRC covers base offset and leader epoch as well as the records, so any flipped
bit in a batch is detected. A batch is written once by the leader and copied
verbatim by followers.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

MAGIC = 1
HEADER = struct.Struct(">IIBHqiiqqqhi")
HEADER_SIZE = HEADER.size
_REC = struct.Struct(">qiiH")
_HDR = struct.Struct(">HI")
_LEN = struct.Struct(">I")
NO_PRODUCER_ID = -1


class BatchFormatError(ValueError):
    """Bytes that are not a valid batch; `reason` says which check failed."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"{reason} at byte {position}")
        self.reason = reason
        self.position = position


@dataclass(frozen=True, slots=True)
class Record:
    """A record as a producer hands it to the log (no offset yet)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record read back from the log."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    leader_epoch: int


class BatchHeader(NamedTuple):
    length: int
    crc: int
    magic: int
    attributes: int
    base_offset: int
    leader_epoch: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def size(self) -> int:
        return self.length + 4

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


def _record_parts(
    records: Sequence[Record], default_timestamp: int
) -> tuple[list[bytes], int, int]:
    """The record section as parts, after an empty slot for the batch header;
    returns (parts, first timestamp, max timestamp)."""
    parts: list[bytes] = [b""]
    add = parts.append
    pack = _REC.pack
    # Timestamps are any i64 (the header must match the records even for negative
    # ones), so no value can serve as "not seen yet".
    first_ts: int | None = None
    max_ts = -1
    for r in records:
        ts = default_timestamp if r.timestamp is None else r.timestamp
        if first_ts is None:
            first_ts = max_ts = ts
        elif ts > max_ts:
            max_ts = ts
        key, value = r.key, r.value
        add(
            pack(
                ts,
                -1 if key is None else len(key),
                -1 if value is None else len(value),
                len(r.headers),
            )
        )
        if key:
            add(key)
        if value:
            add(value)
        for hk, hv in r.headers:
            hkb = hk.encode()
            add(_HDR.pack(len(hkb), len(hv)))
            add(hkb)
            add(hv)
    return parts, -1 if first_ts is None else first_ts, max_ts


def encode_records(records: Sequence[Record], default_timestamp: int) -> tuple[bytes, int, int]:
    """Encode the record section; returns (bytes, first timestamp, max timestamp)."""
    parts, first_ts, max_ts = _record_parts(records, default_timestamp)
    return b"".join(parts), first_ts, max_ts


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    leader_epoch: int,
    timestamp: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytearray:
    if not records:
        raise ValueError("a batch holds at least one record")
    parts, first_ts, max_ts = _record_parts(records, timestamp)
    parts[0] = HEADER.pack(
        HEADER_SIZE - 4 + sum(map(len, parts)),
        0,
        MAGIC,
        0,
        base_offset,
        leader_epoch,
        len(records),
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
    )
    # One allocation and one copy of the payload: the CRC is patched in place.
    # (Joining the body and then prepending the header costs two fresh buffers,
    # which is most of the CPU time of a 1 MiB append.)
    buf = bytearray().join(parts)
    _LEN.pack_into(buf, 4, zlib.crc32(memoryview(buf)[8:]))
    return buf


def check_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Validate the framing and CRC of the batch at `pos` in `buf`; return its header."""
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise BatchFormatError("truncated batch header", pos)
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise BatchFormatError(f"unknown magic {h.magic}", pos)
    if h.length < HEADER_SIZE - 4:
        raise BatchFormatError(f"batch length {h.length} shorter than a header", pos)
    if h.size > available:
        raise BatchFormatError(f"batch of {h.size} bytes runs past the end", pos)
    if h.record_count < 1:
        raise BatchFormatError(f"record count {h.record_count}", pos)
    if h.base_offset < 0 or h.leader_epoch < 0:
        raise BatchFormatError("negative base offset or leader epoch", pos)
    if zlib.crc32(memoryview(buf)[pos + 8 : pos + h.size]) != h.crc:
        raise BatchFormatError("CRC mismatch", pos)
    return h


def _decode_headers(
    mv: memoryview, pos: int, count: int
) -> tuple[tuple[tuple[str, bytes], ...], int]:
    """`count` headers of a record from `pos`; the headers and the position after them."""
    hs = []
    for _ in range(count):
        hkl, hvl = _HDR.unpack_from(mv, pos)
        pos += _HDR.size
        hk = bytes(mv[pos : pos + hkl]).decode()
        pos += hkl
        hs.append((hk, bytes(mv[pos : pos + hvl])))
        pos += hvl
    return tuple(hs), pos


class RecordColumns(NamedTuple):
    """The records of one batch, column by column (record i has offset baseOffset + i)."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, bytes], ...]]


def decode_columns(raw: bytes | bytearray | memoryview, h: BatchHeader) -> RecordColumns:
    """Decode the records of a batch already checked by `check_batch` (raw starts at it),
    as columns: what columnar readers (Arrow) take without a per-record object."""
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple[tuple[str, bytes], ...]] = []
    pos = HEADER_SIZE
    end = h.size
    unpack = _REC.unpack_from
    mv = memoryview(raw)
    try:
        for _ in range(h.record_count):
            ts, klen, vlen, nh = unpack(mv, pos)
            pos += _REC.size
            timestamps.append(ts)
            if klen >= 0:
                keys.append(bytes(mv[pos : pos + klen]))
                pos += klen
            else:
                keys.append(None)
            if vlen >= 0:
                values.append(bytes(mv[pos : pos + vlen]))
                pos += vlen
            else:
                values.append(None)
            if nh:
                hs, pos = _decode_headers(mv, pos, nh)
                headers.append(hs)
            else:
                headers.append(())
            if pos > end:
                raise BatchFormatError("record runs past the batch", pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise BatchFormatError(f"malformed record section ({exc})", pos) from exc
    if pos != end:
        raise BatchFormatError("bytes left after the last record", pos)
    return RecordColumns(timestamps, keys, values, headers)


class PackedColumn(NamedTuple):
    """A column of optional byte strings packed back to back: item i is
    `data[ends[i - 1]:ends[i]]` (`ends[-1]` taken as 0), None where i is in `nulls`.
    The layout of an Arrow binary array, without depending on Arrow."""

    data: bytearray
    ends: array[int]
    """int32 end offsets into `data`, one per item."""
    nulls: list[int]


class PackedColumns(NamedTuple):
    timestamps: array[int]
    """int64 per record."""
    keys: PackedColumn
    values: PackedColumn
    headers: list[tuple[tuple[str, bytes], ...]] | None
    """Per record; None when no record of the batch has headers."""


def decode_packed(raw: bytes | bytearray | memoryview, h: BatchHeader) -> PackedColumns:
    """Decode the records of a checked batch into packed columns: no object per key or
    value, for columnar readers (Arrow) that take the buffers as they are."""
    timestamps = array("q")
    keys, key_ends, key_nulls = bytearray(), array("i"), []
    values, value_ends, value_nulls = bytearray(), array("i"), []
    headers: list[tuple[tuple[str, bytes], ...]] | None = None
    # Bound methods and running ends: this loop is the whole cost of a columnar read.
    add_ts, add_key_end, add_value_end = timestamps.append, key_ends.append, value_ends.append
    key_end = value_end = 0
    pos = HEADER_SIZE
    end = h.size
    unpack = _REC.unpack_from
    rec_size = _REC.size
    mv = memoryview(raw)
    try:
        for i in range(h.record_count):
            ts, klen, vlen, nh = unpack(mv, pos)
            pos += rec_size
            add_ts(ts)
            if klen > 0:
                keys += mv[pos : pos + klen]
                pos += klen
                key_end += klen
            elif klen < 0:
                key_nulls.append(i)
            add_key_end(key_end)
            if vlen > 0:
                values += mv[pos : pos + vlen]
                pos += vlen
                value_end += vlen
            elif vlen < 0:
                value_nulls.append(i)
            add_value_end(value_end)
            if nh:
                if headers is None:
                    headers = [()] * i
                hs, pos = _decode_headers(mv, pos, nh)
                headers.append(hs)
            elif headers is not None:
                headers.append(())
            if pos > end:
                raise BatchFormatError("record runs past the batch", pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise BatchFormatError(f"malformed record section ({exc})", pos) from exc
    if pos != end or len(values) != value_end or len(keys) != key_end:
        raise BatchFormatError("bytes left after the last record", pos)
    return PackedColumns(
        timestamps,
        PackedColumn(keys, key_ends, key_nulls),
        PackedColumn(values, value_ends, value_nulls),
        headers,
    )


def decode_records(raw: bytes | bytearray | memoryview, h: BatchHeader) -> list[LogRecord]:
    """Decode the records of a batch already checked by `check_batch` (raw starts at it)."""
    c = decode_columns(raw, h)
    base, epoch = h.base_offset, h.leader_epoch
    return [
        LogRecord(base + i, ts, key, value, hs, epoch)
        for i, (ts, key, value, hs) in enumerate(
            zip(c.timestamps, c.keys, c.values, c.headers, strict=True)
        )
    ]


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """One stored batch: its checked header and its exact bytes."""

    header: BatchHeader
    raw: bytes

    @classmethod
    def from_bytes(cls, raw: bytes | bytearray, *, deep: bool = False) -> RecordBatch:
        """Parse exactly one batch; `deep` also decodes every record (untrusted input)."""
        h = check_batch(raw)
        if h.size != len(raw):
            raise BatchFormatError(f"{len(raw) - h.size} bytes after the batch", h.size)
        if deep:
            decode_records(raw, h)
        return cls(h, raw if isinstance(raw, bytes) else bytes(raw))

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def leader_epoch(self) -> int:
        return self.header.leader_epoch

    @property
    def record_count(self) -> int:
        return self.header.record_count

    @property
    def size(self) -> int:
        return len(self.raw)

    def records(self) -> list[LogRecord]:
        return decode_records(self.raw, self.header)

    def columns(self) -> RecordColumns:
        return decode_columns(self.raw, self.header)

    def packed(self) -> PackedColumns:
        return decode_packed(self.raw, self.header)
