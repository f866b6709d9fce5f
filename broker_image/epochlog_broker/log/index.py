"""Sparse indexes of one segment: `OffsetIndex` (offset, byte position) of some batch
starts, and `TimeIndex` (timestamp, offset) at the same points.

Kept in memory while the segment is open and written to `<base>.index` when the
segment rolls or the log closes cleanly. The file is only a cache: one that is
missing, torn or inconsistent with its segment is rebuilt by scanning the
segment, so it is written without fsync ordering constraints.

File layout: b"ELIX", version u8, 3 zero bytes, base offset i64, count u32,
count x (relative offset u32, position u32), CRC-32 u32 of everything before.
"""

from __future__ import annotations

import bisect
import struct
import zlib
from array import array

_HEAD = struct.Struct(">4sB3xqI")
_ENTRY = struct.Struct(">II")
_CRC = struct.Struct(">I")
_MAGIC = b"ELIX"


class IndexFormatError(ValueError):
    pass


class OffsetIndex:
    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.offsets: array[int] = array("q")
        self.positions: array[int] = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, offset: int, position: int) -> None:
        if self.offsets and (offset <= self.offsets[-1] or position <= self.positions[-1]):
            raise ValueError("index entries must increase")
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below `offset`; (base offset, 0) if there is none."""
        i = bisect.bisect_right(self.offsets, offset)
        if i == 0:
            return self.base_offset, 0
        return self.offsets[i - 1], self.positions[i - 1]

    def last(self) -> tuple[int, int]:
        if not self.offsets:
            return self.base_offset, 0
        return self.offsets[-1], self.positions[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after `position` (the segment was cut there)."""
        i = bisect.bisect_left(self.positions, position)
        del self.offsets[i:]
        del self.positions[i:]

    def encode(self) -> bytes:
        parts = [_HEAD.pack(_MAGIC, 1, self.base_offset, len(self.offsets))]
        base = self.base_offset
        parts.extend(
            _ENTRY.pack(o - base, p) for o, p in zip(self.offsets, self.positions, strict=True)
        )
        raw = b"".join(parts)
        return raw + _CRC.pack(zlib.crc32(raw))

    @classmethod
    def decode(cls, raw: bytes, base_offset: int, segment_size: int) -> OffsetIndex:
        """Parse and sanity-check an index file against its segment; IndexFormatError if off."""
        if len(raw) < _HEAD.size + _CRC.size:
            raise IndexFormatError("index file too short")
        magic, version, base, count = _HEAD.unpack_from(raw)
        if magic != _MAGIC or version != 1:
            raise IndexFormatError("not an index file")
        if base != base_offset:
            raise IndexFormatError(f"index is for base offset {base}, not {base_offset}")
        if len(raw) != _HEAD.size + count * _ENTRY.size + _CRC.size:
            raise IndexFormatError("index length does not match its entry count")
        if _CRC.unpack_from(raw, len(raw) - _CRC.size)[0] != zlib.crc32(raw[: -_CRC.size]):
            raise IndexFormatError("index CRC mismatch")
        index = cls(base_offset)
        try:
            for rel, pos in _ENTRY.iter_unpack(raw[_HEAD.size : -_CRC.size]):
                if pos >= segment_size:
                    raise IndexFormatError(f"index position {pos} beyond segment end")
                index.add(base_offset + rel, pos)
        except ValueError as exc:
            raise IndexFormatError(str(exc)) from exc
        return index


_TIME_HEAD = struct.Struct(">4sB3xqI")
_TIME_ENTRY = struct.Struct(">qI")
_TIME_MAGIC = b"ELTI"


class TimeIndex:
    """Sparse time index of one segment: (timestamp, offset) pairs, both non-decreasing.

    An entry (t, o) says every record of the segment below offset `o` has a timestamp
    of at most `t`: entries are the largest timestamp seen before some batch start (the
    points of the offset index). Finding the first record at or after a time is then a
    binary search for the last entry below it and a scan of the batches from there
    (Kafka's `.timeindex`). Like the offset index, the file (`<base>.timeindex`) is a
    cache rebuilt by scanning the segment when it is missing, torn or inconsistent.

    File layout: b"ELTI", version u8, 3 zero bytes, base offset i64, count u32,
    count x (timestamp i64, relative offset u32), CRC-32 u32 of everything before.
    """

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.timestamps: array[int] = array("q")
        self.offsets: array[int] = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, timestamp: int, offset: int) -> None:
        if self.offsets and (offset <= self.offsets[-1] or timestamp < self.timestamps[-1]):
            raise ValueError("time index entries must increase")
        self.timestamps.append(timestamp)
        self.offsets.append(offset)

    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def largest_before(self, offset: int) -> int:
        """The largest timestamp of the batches before the last entry at or below `offset`
        (that entry's own timestamp); -1 if there is no such entry."""
        i = bisect.bisect_right(self.offsets, offset)
        return self.timestamps[i - 1] if i else -1

    def lookup(self, timestamp: int) -> int:
        """An offset from which scanning finds the first record at or after `timestamp`:
        that of the last entry below it (the segment's base offset if there is none)."""
        i = bisect.bisect_left(self.timestamps, timestamp)
        return self.offsets[i - 1] if i else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries at or after `offset` (the segment was cut there)."""
        i = bisect.bisect_left(self.offsets, offset)
        del self.timestamps[i:]
        del self.offsets[i:]

    def encode(self) -> bytes:
        parts = [_TIME_HEAD.pack(_TIME_MAGIC, 1, self.base_offset, len(self.offsets))]
        base = self.base_offset
        parts.extend(
            _TIME_ENTRY.pack(t, o - base)
            for t, o in zip(self.timestamps, self.offsets, strict=True)
        )
        raw = b"".join(parts)
        return raw + _CRC.pack(zlib.crc32(raw))

    @classmethod
    def decode(cls, raw: bytes, base_offset: int) -> TimeIndex:
        """Parse and sanity-check a time index file; IndexFormatError if off."""
        if len(raw) < _TIME_HEAD.size + _CRC.size:
            raise IndexFormatError("time index file too short")
        magic, version, base, count = _TIME_HEAD.unpack_from(raw)
        if magic != _TIME_MAGIC or version != 1:
            raise IndexFormatError("not a time index file")
        if base != base_offset:
            raise IndexFormatError(f"time index is for base offset {base}, not {base_offset}")
        if len(raw) != _TIME_HEAD.size + count * _TIME_ENTRY.size + _CRC.size:
            raise IndexFormatError("time index length does not match its entry count")
        if _CRC.unpack_from(raw, len(raw) - _CRC.size)[0] != zlib.crc32(raw[: -_CRC.size]):
            raise IndexFormatError("time index CRC mismatch")
        index = cls(base_offset)
        try:
            for t, rel in _TIME_ENTRY.iter_unpack(raw[_TIME_HEAD.size : -_CRC.size]):
                index.add(t, base_offset + rel)
        except ValueError as exc:
            raise IndexFormatError(str(exc)) from exc
        return index
