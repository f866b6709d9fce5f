"""Record batch codec: roundtrip, and every check of `check_batch` / `decode_records`."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochlog.protocol.batch import (
    HEADER,
    HEADER_SIZE,
    BatchFormatError,
    LogRecord,
    Record,
    RecordBatch,
    check_batch,
    decode_records,
    encode_batch,
)

I64 = st.integers(-(2**63), 2**63 - 1)
header_keys = st.text(max_size=8)
record_st = st.builds(
    Record,
    value=st.none() | st.binary(max_size=40),
    key=st.none() | st.binary(max_size=10),
    headers=st.lists(st.tuples(header_keys, st.binary(max_size=10)), max_size=3).map(tuple),
    timestamp=st.none() | I64,
)


def reframe(raw: bytes, **fields: int) -> bytes:
    """`raw` with header fields replaced and a CRC that matches again."""
    h = check_batch(raw)._replace(**fields)
    head = HEADER.pack(*h)
    body = head[8:] + raw[HEADER_SIZE:]
    return head[:4] + struct.pack(">I", zlib.crc32(body)) + body


def one_batch(base_offset: int = 7) -> bytes:
    return bytes(
        encode_batch(
            [Record(b"a", key=b"k"), Record(b"bb", headers=(("h", b"1"),))],
            base_offset=base_offset,
            leader_epoch=3,
            timestamp=1000,
        )
    )


@given(
    recs=st.lists(record_st, min_size=1, max_size=6),
    base=st.integers(0, 2**62),
    epoch=st.integers(0, 2**31 - 1),
    default_ts=I64,
    producer=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 9)),
)
def test_encode_decode_roundtrip_keeps_every_field(
    recs: list[Record], base: int, epoch: int, default_ts: int, producer: tuple[int, int, int]
) -> None:
    pid, pepoch, seq = producer
    raw = encode_batch(
        recs,
        base_offset=base,
        leader_epoch=epoch,
        timestamp=default_ts,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=seq,
    )
    batch = RecordBatch.from_bytes(raw, deep=True)
    stamps = [default_ts if r.timestamp is None else r.timestamp for r in recs]
    assert batch.records() == [
        LogRecord(base + i, stamps[i], r.key, r.value, r.headers, epoch) for i, r in enumerate(recs)
    ]
    h = batch.header
    assert (h.base_offset, h.leader_epoch, h.record_count) == (base, epoch, len(recs))
    assert (batch.last_offset, batch.next_offset) == (base + len(recs) - 1, base + len(recs))
    assert (h.first_timestamp, h.max_timestamp) == (stamps[0], max(stamps))
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    assert batch.size == len(raw) == h.size


def test_null_and_empty_keys_and_values_stay_distinct() -> None:
    recs = [Record(None), Record(b""), Record(b"v", key=None), Record(b"v", key=b"")]
    got = RecordBatch.from_bytes(
        encode_batch(recs, base_offset=0, leader_epoch=0, timestamp=5), deep=True
    ).records()
    assert [(r.key, r.value) for r in got] == [(None, None), (None, b""), (None, b"v"), (b"", b"v")]


def test_encode_batch_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([], base_offset=0, leader_epoch=0, timestamp=0)


def test_check_batch_reads_a_batch_at_a_position_inside_a_buffer() -> None:
    a, b = one_batch(base_offset=0), one_batch(base_offset=2)
    h = check_batch(a + b, len(a))
    assert (h.base_offset, h.size) == (2, len(b))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda raw: raw[: HEADER_SIZE - 1], "truncated batch header"),
        (lambda raw: reframe(raw, magic=2), "unknown magic 2"),
        (lambda raw: reframe(raw, length=HEADER_SIZE - 5), "shorter than a header"),
        (lambda raw: raw[:-1], "runs past the end"),
        (lambda raw: reframe(raw, record_count=0), "record count 0"),
        (lambda raw: reframe(raw, base_offset=-1), "negative base offset"),
        (lambda raw: reframe(raw, leader_epoch=-1), "negative base offset or leader epoch"),
        (lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]), "CRC mismatch"),
        (lambda raw: raw[:20] + bytes([raw[20] ^ 1]) + raw[21:], "CRC mismatch"),
    ],
    ids=[
        "short-header",
        "magic",
        "length-below-header",
        "runs-past-end",
        "zero-records",
        "negative-base-offset",
        "negative-epoch",
        "crc-body",
        "crc-header-field",
    ],
)
def test_check_batch_rejects_each_malformed_case(
    damage: Callable[[bytes], bytes], reason: str
) -> None:
    raw = one_batch()
    with pytest.raises(BatchFormatError, match=reason) as err:
        check_batch(damage(raw))
    assert err.value.position == 0


@given(data=st.data())
def test_any_single_flipped_bit_is_detected(data: st.DataObject) -> None:
    raw = one_batch()
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    flipped = bytearray(raw)
    flipped[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(BatchFormatError):
        RecordBatch.from_bytes(bytes(flipped), deep=True)


def test_from_bytes_rejects_bytes_after_the_batch() -> None:
    with pytest.raises(BatchFormatError, match="1 bytes after the batch"):
        RecordBatch.from_bytes(one_batch() + b"\0")


def _records_section(*recs: bytes, count: int) -> bytes:
    """A batch with a hand-made record section and a valid CRC."""
    body = b"".join(recs)
    head = HEADER.pack(HEADER_SIZE - 4 + len(body), 0, 1, 0, 0, 0, count, 0, 0, -1, -1, -1)
    rest = head[8:] + body
    return head[:4] + struct.pack(">I", zlib.crc32(rest)) + rest


_REC = struct.Struct(">qiiH")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (_records_section(_REC.pack(0, -1, 1, 0) + b"x", count=2), "malformed record section"),
        (_records_section(_REC.pack(0, -1, 5, 0) + b"x", count=1), "runs past the batch"),
        (_records_section(_REC.pack(0, -1, 1, 0) + b"xy", count=1), "bytes left after"),
        (
            _records_section(_REC.pack(0, -1, 0, 1) + struct.pack(">HI", 1, 0) + b"\xff", count=1),
            "malformed record section",
        ),
    ],
    ids=["fewer-records-than-count", "record-past-batch-end", "trailing-bytes", "bad-utf8-header"],
)
def test_decode_rejects_a_malformed_record_section_with_a_valid_crc(
    raw: bytes, reason: str
) -> None:
    h = check_batch(raw)  # framing and CRC are fine
    with pytest.raises(BatchFormatError, match=reason):
        decode_records(raw, h)
    with pytest.raises(BatchFormatError, match=reason):
        RecordBatch.from_bytes(raw, deep=True)
