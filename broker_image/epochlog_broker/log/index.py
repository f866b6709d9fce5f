"""Sparse offset index of one segment: (offset, byte position) of some batch starts.

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
