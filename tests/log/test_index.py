"""Sparse offset index: lookup, truncation, file encoding and its sanity checks."""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochlog_broker.log.index import IndexFormatError, OffsetIndex

BASE = 1000


def sample() -> OffsetIndex:
    index = OffsetIndex(BASE)
    for rel, pos in [(5, 300), (12, 700), (30, 1500)]:
        index.add(BASE + rel, pos)
    return index


@given(
    base=st.integers(0, 2**40),
    steps=st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 5000)), max_size=30),
)
def test_encode_decode_roundtrip(base: int, steps: list[tuple[int, int]]) -> None:
    index = OffsetIndex(base)
    offset, pos = base, 0
    for d_off, d_pos in steps:
        offset, pos = offset + d_off, pos + d_pos
        index.add(offset, pos)
    back = OffsetIndex.decode(index.encode(), base, pos + 1)
    assert list(back.offsets) == list(index.offsets)
    assert list(back.positions) == list(index.positions)
    assert back.base_offset == base


def test_lookup_returns_the_last_entry_at_or_below_the_offset() -> None:
    index = sample()
    assert index.lookup(BASE) == (BASE, 0)  # before the first entry: segment start
    assert index.lookup(BASE + 4) == (BASE, 0)
    assert index.lookup(BASE + 5) == (BASE + 5, 300)
    assert index.lookup(BASE + 11) == (BASE + 5, 300)
    assert index.lookup(BASE + 12) == (BASE + 12, 700)
    assert index.lookup(BASE + 10**6) == (BASE + 30, 1500)


def test_empty_index_points_at_the_segment_start() -> None:
    index = OffsetIndex(BASE)
    assert index.lookup(BASE + 3) == index.last() == (BASE, 0)


def test_add_rejects_entries_that_do_not_increase() -> None:
    index = sample()
    with pytest.raises(ValueError, match="increase"):
        index.add(BASE + 30, 2000)
    with pytest.raises(ValueError, match="increase"):
        index.add(BASE + 31, 1500)


def test_truncate_to_position_drops_entries_at_or_after_the_cut() -> None:
    index = sample()
    index.truncate_to_position(700)
    assert index.last() == (BASE + 5, 300)
    index.truncate_to_position(0)
    assert len(index) == 0


def _with_crc(raw: bytes) -> bytes:
    return raw + struct.pack(">I", zlib.crc32(raw))


@pytest.mark.parametrize(
    ("raw", "segment_size", "reason"),
    [
        (b"ELIX", 10_000, "too short"),
        (b"XXXX" + sample().encode()[4:], 10_000, "not an index file"),
        (OffsetIndex(BASE + 1).encode(), 10_000, "base offset"),
        (sample().encode()[:-5] + sample().encode()[-4:], 10_000, "length"),
        (sample().encode()[:-1] + b"\0", 10_000, "CRC"),
        (sample().encode(), 1500, "beyond segment end"),
        (
            _with_crc(
                struct.pack(">4sB3xqI", b"ELIX", 1, BASE, 2) + struct.pack(">IIII", 9, 10, 5, 20)
            ),
            10_000,
            "increase",
        ),
    ],
    ids=["short", "magic", "other-base", "length", "crc", "position-past-end", "out-of-order"],
)
def test_decode_rejects_files_that_do_not_match(raw: bytes, segment_size: int, reason: str) -> None:
    with pytest.raises(IndexFormatError, match=reason):
        OffsetIndex.decode(raw, BASE, segment_size)


@given(garbage=st.binary(max_size=200))
def test_decode_of_arbitrary_bytes_raises_only_index_format_error(garbage: bytes) -> None:
    with contextlib.suppress(IndexFormatError):
        OffsetIndex.decode(garbage, BASE, 10_000)
