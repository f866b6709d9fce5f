"""A record batch encoded by a producer (the binary produce format), checked and stamped.

The binary produce body is one batch in the log's own format
(`epochlog.protocol.batch`), as `encode_batch` writes it, with any base
offset and leader epoch (0 is customary): the producer does the per-record
encoding, the broker checks the bytes once and appends them whole, which is
what makes this path fast. The producer id, epoch and base sequence in the
header are the idempotent producer's fields (-1: none).

`ClientBatch.parse` checks, because these bytes are written to the log as they
are and every replica and consumer will decode them: framing, magic, CRC,
that no compression or other attribute is set, that the record section
decodes exactly (lengths, UTF-8 header names, no trailing bytes), the size of
each record, and the producer fields. `stamp` then sets the base offset and
leader epoch the leader assigns, rewrites the first and maximum timestamps
from the records, recomputes the CRC and hands the log a checked `RecordBatch`.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

from epochlog.protocol.batch import (
    HEADER,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    BatchFormatError,
    BatchHeader,
    RecordBatch,
    check_batch,
)
from epochlog.protocol.errors import InvalidRequestError, RecordTooLargeError
from epochlog_broker.core import ProducerFields

# Field positions in the batch header (see the layout in epochlog/protocol/batch.py).
_CRC_AT: Final = 4
_BASE_OFFSET_AT: Final = 11
_LEADER_EPOCH_AT: Final = 19
_FIRST_TS_AT: Final = 27
_MAX_TS_AT: Final = 35
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_REC = struct.Struct(">qiiH")
_HDR = struct.Struct(">HI")


class ClientBatch:
    """Satisfies `epochlog_broker.core.PreparedBatch`."""

    __slots__ = ("_buf", "first_timestamp", "header", "max_timestamp", "value_bytes")

    def __init__(
        self,
        buf: bytearray,
        header: BatchHeader,
        first_timestamp: int,
        max_timestamp: int,
        value_bytes: int,
    ) -> None:
        self._buf = buf
        self.header = header
        self.first_timestamp = first_timestamp
        self.max_timestamp = max_timestamp
        self.value_bytes = value_bytes
        """Bytes of keys, values and headers: the payload, for metrics."""

    @property
    def record_count(self) -> int:
        return self.header.record_count

    @property
    def size(self) -> int:
        return len(self._buf)

    @property
    def producer(self) -> ProducerFields | None:
        h = self.header
        if h.producer_id == NO_PRODUCER_ID:
            return None
        return ProducerFields(h.producer_id, h.producer_epoch, h.base_sequence)

    @classmethod
    def parse(cls, body: bytes | bytearray, *, max_record_bytes: int) -> ClientBatch:
        if not body:
            raise InvalidRequestError("empty body: expected one record batch")
        try:
            h = check_batch(body)
        except BatchFormatError as exc:
            raise InvalidRequestError(f"invalid record batch: {exc}") from exc
        if h.size != len(body):
            raise InvalidRequestError(
                f"invalid record batch: {len(body) - h.size} bytes after the batch "
                "(send one batch per request)"
            )
        if h.attributes != 0:
            raise InvalidRequestError(
                f"invalid record batch: attributes {h.attributes} (compression and control "
                "batches are not supported)"
            )
        if h.producer_id != NO_PRODUCER_ID and (
            h.producer_id < 0 or h.producer_epoch < 0 or h.base_sequence < 0
        ):
            raise InvalidRequestError(
                "invalid record batch: producerId, producerEpoch and baseSequence must be "
                "all >= 0, or producerId -1 for none"
            )
        first_ts, max_ts, payload = _scan_records(body, h, max_record_bytes)
        return cls(bytearray(body), h, first_ts, max_ts, payload)

    def stamp(self, base_offset: int, leader_epoch: int) -> RecordBatch:
        buf = self._buf
        _I64.pack_into(buf, _BASE_OFFSET_AT, base_offset)
        _I32.pack_into(buf, _LEADER_EPOCH_AT, leader_epoch)
        _I64.pack_into(buf, _FIRST_TS_AT, self.first_timestamp)
        _I64.pack_into(buf, _MAX_TS_AT, self.max_timestamp)
        _U32.pack_into(buf, _CRC_AT, zlib.crc32(memoryview(buf)[8:]))
        raw = bytes(buf)
        return RecordBatch(BatchHeader._make(HEADER.unpack_from(raw)), raw)


def _scan_records(
    buf: bytes | bytearray, h: BatchHeader, max_record_bytes: int
) -> tuple[int, int, int]:
    """Walk the record section without building records; returns (first ts, max ts, payload
    bytes). Raises INVALID_REQUEST for a malformed section, RECORD_TOO_LARGE for a record
    over the limit."""
    end = h.size
    count = h.record_count
    # This loop is the leader's largest cost per record on the binary path: keep it lean.
    # When the whole section fits the limit no record can exceed it, so sizes are only
    # checked one by one (in a second pass that names the record) for larger batches.
    unpack = _REC.unpack_from
    rec_size = _REC.size
    pos = HEADER_SIZE
    first_ts = max_ts = 0
    i = 0
    try:
        if count:
            first_ts = max_ts = unpack(buf, pos)[0]
        for i in range(count):  # noqa: B007 -- the error below names the record
            ts, klen, vlen, nh = unpack(buf, pos)
            if ts > max_ts:
                max_ts = ts
            if klen < 0:
                if klen != -1:
                    raise BatchFormatError("negative length", pos)
                klen = 0
            if vlen < 0:
                if vlen != -1:
                    raise BatchFormatError("negative length", pos)
                vlen = 0
            start = pos
            pos += rec_size + klen + vlen
            if nh:
                pos = _skip_headers(buf, pos, nh)
            if pos > end:
                raise BatchFormatError("record runs past the batch", start)
    except (struct.error, UnicodeDecodeError, BatchFormatError) as exc:
        raise InvalidRequestError(f"invalid record batch: record {i} is malformed ({exc})") from exc
    if pos != end:
        raise InvalidRequestError(
            f"invalid record batch: {end - pos} bytes after the last of {count} records"
        )
    payload = end - HEADER_SIZE - count * rec_size
    if payload > max_record_bytes:
        _check_record_sizes(buf, count, max_record_bytes)
    return first_ts, max_ts, payload


def _skip_headers(buf: bytes | bytearray, pos: int, count: int) -> int:
    """Position after `count` record headers at `pos`; their names must be UTF-8."""
    for _ in range(count):
        hkl, hvl = _HDR.unpack_from(buf, pos)
        pos += _HDR.size
        bytes(buf[pos : pos + hkl]).decode()
        pos += hkl + hvl
    return pos


def _check_record_sizes(buf: bytes | bytearray, count: int, max_record_bytes: int) -> None:
    """RECORD_TOO_LARGE for the first record over the limit (the section is well formed)."""
    pos = HEADER_SIZE
    for i in range(count):
        _, klen, vlen, nh = _REC.unpack_from(buf, pos)
        start = pos + _REC.size
        pos = start + max(klen, 0) + max(vlen, 0)
        if nh:
            pos = _skip_headers(buf, pos, nh)
        if pos - start > max_record_bytes:
            raise RecordTooLargeError(
                f"record {i} of the batch holds {pos - start} bytes, more than the limit of "
                f"{max_record_bytes}"
            )
