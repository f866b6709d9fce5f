"""Kafka's record batch (magic 2) as it travels in Produce and Fetch, and its translation
to and from epochlog's own batch.

A Kafka producer sends one batch per partition (`decode_produced`): its CRC-32C is
checked, its records become `Record`s (key, value, headers, CreateTime timestamp) and its
idempotent-producer fields (`ProducerFields`) go to the same duplicate and sequence
checks as the HTTP API's. A consumer gets each stored epochlog batch back as one Kafka
batch (`encode_stored`) with the same base offset, partitionLeaderEpoch, timestamps and
producer fields, so a client's KIP-320 checks see the epoch that appended each record.

A compressed batch (gzip, snappy, lz4 or zstd, as Kafka's producers write them: snappy
raw or in xerial's framing, lz4 in the frame format) is inflated on the way in and its
records are stored uncompressed; it may inflate to no more than its records may hold
(`max_record_bytes` each) nor than `MAX_INFLATED_BYTES`, checked while inflating, so a
small batch cannot make the broker allocate without bound.

What epochlog's log cannot hold is refused, not approximated: transactional and control
batches, header values that are null, more than one batch in a partition's produce data
(Kafka refuses it too from Produce v3 on).

No I/O here: bytes in, records out.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import cramjam
import lz4.frame
import zstandard
from crc32c import crc32c

from epochlog.protocol.batch import BatchHeader, LogRecord, Record
from epochlog_broker.core import ProducerFields

MAGIC = 2
_HEAD = struct.Struct(">qiibIhiqqqhii")
"""baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, record count."""
HEAD_SIZE = _HEAD.size
_CRC_FROM = 21
"""The CRC covers every byte from the attributes on."""
_LENGTH_FROM = 12
"""batchLength counts the bytes after itself."""

COMPRESSION_MASK = 0x07
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODECS = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
MAX_INFLATED_BYTES = 64 * 1024 * 1024
"""The most a compressed batch inflates to (raised to `max_record_bytes` when that is
larger, so that one record of the largest size fits)."""
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEAD = 16
"""The magic, then a version and a compatible version (big-endian int32 each)."""
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
NO_PRODUCER_ID = -1


class KafkaRecordsError(ValueError):
    """Produce data epochlog does not take; `error` names the Kafka error code
    (`kio.schema.errors.ErrorCode` member name)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """A Kafka producer's batch for one partition, as epochlog appends it."""

    records: list[Record]
    producer: ProducerFields | None
    payload_bytes: int


# -- varints (zig-zag, as Kafka's records use them) ---------------------------------------


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise KafkaRecordsError("corrupt_message", "record ends inside a varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise KafkaRecordsError("corrupt_message", "varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise KafkaRecordsError("corrupt_message", "record field runs past the batch")
    return bytes(buf[pos : pos + n]), pos + n


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _write_varint(out, -1)
        return
    _write_varint(out, len(value))
    out += value


# -- produce: Kafka batch in, epochlog records out -----------------------------------------


def decode_produced(data: bytes | None, max_record_bytes: int) -> ProducedBatch:
    """The one batch of a partition's produce data, checked and translated."""
    if not data:
        raise KafkaRecordsError("invalid_record", "produce data holds no record batch")
    buf = memoryview(data)
    if len(buf) < HEAD_SIZE:
        raise KafkaRecordsError("corrupt_message", "record batch shorter than its header")
    (
        _base_offset,
        length,
        _leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        _max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEAD.unpack_from(buf, 0)
    if magic != MAGIC:
        raise KafkaRecordsError(
            "unsupported_for_message_format", f"record batch magic {magic}, only 2 is taken"
        )
    end = _LENGTH_FROM + length
    if length < HEAD_SIZE - _LENGTH_FROM or end > len(buf):
        raise KafkaRecordsError("corrupt_message", "record batch length runs past the data")
    if end != len(buf):
        raise KafkaRecordsError("invalid_record", "produce data holds more than one record batch")
    if crc32c(buf[_CRC_FROM:end]) != crc:
        raise KafkaRecordsError("corrupt_message", "record batch CRC-32C does not match")
    if attributes & (TRANSACTIONAL | CONTROL):
        raise KafkaRecordsError(
            "invalid_record", "transactional and control batches are not supported"
        )
    if count < 1 or count != last_offset_delta + 1:
        raise KafkaRecordsError(
            "invalid_record", f"record count {count} and lastOffsetDelta {last_offset_delta}"
        )
    body = buf[HEAD_SIZE:end]
    compression = attributes & COMPRESSION_MASK
    if compression:
        limit = min(max_record_bytes * count, max(MAX_INFLATED_BYTES, max_record_bytes))
        body = memoryview(inflate(compression, body, limit))
    records: list[Record] = []
    payload = 0
    pos = 0
    log_append = bool(attributes & TIMESTAMP_LOG_APPEND)
    for i in range(count):
        size, pos = _read_varint(body, pos)
        start = pos
        if size < 0 or start + size > len(body):
            raise KafkaRecordsError("corrupt_message", f"record {i} runs past the batch")
        pos += 1  # the record's attributes, unused
        ts_delta, pos = _read_varint(body, pos)
        offset_delta, pos = _read_varint(body, pos)
        if offset_delta != i:
            raise KafkaRecordsError("invalid_record", f"record {i} has offsetDelta {offset_delta}")
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        n_headers, pos = _read_varint(body, pos)
        if n_headers < 0:
            raise KafkaRecordsError("corrupt_message", f"record {i}: {n_headers} headers")
        headers: list[tuple[str, bytes]] = []
        for _ in range(n_headers):
            hkey, pos = _read_bytes(body, pos)
            hvalue, pos = _read_bytes(body, pos)
            if hkey is None:
                raise KafkaRecordsError("corrupt_message", f"record {i}: a null header key")
            if hvalue is None:
                raise KafkaRecordsError(
                    "invalid_record", f"record {i}: a null header value is not supported"
                )
            try:
                headers.append((hkey.decode(), hvalue))
            except UnicodeDecodeError:
                raise KafkaRecordsError(
                    "invalid_record", f"record {i}: a header key that is not UTF-8"
                ) from None
        if pos != start + size:
            raise KafkaRecordsError("corrupt_message", f"record {i} length does not match")
        size_of = len(key or b"") + len(value or b"")
        if size_of > max_record_bytes:
            raise KafkaRecordsError(
                "message_too_large",
                f"record {i} of {size_of} bytes exceeds the limit of {max_record_bytes}",
            )
        payload += size_of
        timestamp = None if log_append else base_timestamp + ts_delta
        records.append(Record(value, key, tuple(headers), timestamp))
    if pos != len(body):
        raise KafkaRecordsError("corrupt_message", "bytes after the last record")
    producer = (
        ProducerFields(producer_id, producer_epoch, base_sequence)
        if producer_id != NO_PRODUCER_ID
        else None
    )
    return ProducedBatch(records, producer, payload)


# -- compression ---------------------------------------------------------------------------


def inflate(compression: int, data: memoryview, limit: int) -> bytes:
    """The records of a batch compressed with `compression`, at most `limit` bytes of
    them (`message_too_large` beyond); `corrupt_message` for data that is no such
    stream, `unsupported_compression_type` for a codec Kafka does not have."""
    name = CODECS.get(compression)
    if name is None:
        raise KafkaRecordsError(
            "unsupported_compression_type", f"compression type {compression} does not exist"
        )
    try:
        if compression == GZIP:
            out = _gunzip(data, limit)
        elif compression == SNAPPY:
            out = _unsnappy(data, limit)
        elif compression == LZ4:
            out = _unlz4(data, limit)
        else:
            out = _unzstd(data, limit)
    except KafkaRecordsError:
        raise
    except Exception as exc:  # each library raises its own kinds for bad data
        raise KafkaRecordsError("corrupt_message", f"{name} data: {exc}") from None
    if len(out) > limit:
        raise KafkaRecordsError(
            "message_too_large", f"{name} records inflate past the limit of {limit} bytes"
        )
    return out


def _gunzip(data: memoryview, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    out = inflater.decompress(data, limit + 1)
    if len(out) <= limit and not inflater.eof:
        raise KafkaRecordsError("corrupt_message", "gzip data ends before its stream does")
    return out


def _unsnappy(data: memoryview, limit: int) -> bytes:
    """Raw snappy (librdkafka, kafka-python) or xerial's framing of raw blocks (Kafka's
    Java producer): each block's inflated length, its first varint, is checked against
    what is left of `limit` before the block is inflated."""
    if bytes(data[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _snappy_block(data, limit)
    out = bytearray()
    pos = _XERIAL_HEAD
    if len(data) < pos:
        raise KafkaRecordsError("corrupt_message", "snappy data: a xerial header cut short")
    while pos < len(data):
        if pos + 4 > len(data):
            raise KafkaRecordsError("corrupt_message", "snappy data: a block length cut short")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise KafkaRecordsError("corrupt_message", "snappy data: a block runs past the data")
        out += _snappy_block(data[pos : pos + size], limit - len(out))
        pos += size
    return bytes(out)


def _snappy_block(block: memoryview, limit: int) -> bytes:
    size, shift, pos = 0, 0, 0
    while True:
        if pos >= len(block) or shift > 28:
            raise KafkaRecordsError("corrupt_message", "snappy data: a bad length varint")
        byte = block[pos]
        size |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if not byte & 0x80:
            break
    if size > limit:
        raise KafkaRecordsError(
            "message_too_large", f"snappy records inflate past the limit of {limit} bytes"
        )
    return bytes(cramjam.snappy.decompress_raw(bytes(block)))


def _unlz4(data: memoryview, limit: int) -> bytes:
    inflater = lz4.frame.LZ4FrameDecompressor()
    out = inflater.decompress(bytes(data), max_length=limit + 1)
    if len(out) <= limit and not inflater.eof:
        raise KafkaRecordsError("corrupt_message", "lz4 data ends before its frame does")
    return bytes(out)


def _unzstd(data: memoryview, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    out = bytearray()
    while len(out) <= limit:
        chunk = reader.read(min(limit + 1 - len(out), 1 << 20))
        if not chunk:
            break
        out += chunk
    return bytes(out)


# -- fetch: epochlog batches out as Kafka batches ------------------------------------------


def encode_batch(h: BatchHeader, records: Sequence[LogRecord]) -> bytes:
    """One stored epochlog batch as a Kafka batch: same offsets, epoch and producer."""
    body = bytearray()
    base_ts = h.first_timestamp
    for i, r in enumerate(records):
        rec = bytearray(b"\x00")
        _write_varint(rec, r.timestamp - base_ts)
        _write_varint(rec, i)
        _write_bytes(rec, r.key)
        _write_bytes(rec, r.value)
        _write_varint(rec, len(r.headers))
        for hk, hv in r.headers:
            _write_bytes(rec, hk.encode())
            _write_bytes(rec, hv)
        _write_varint(body, len(rec))
        body += rec
    head = bytearray(
        _HEAD.pack(
            h.base_offset,
            HEAD_SIZE - _LENGTH_FROM + len(body),
            h.leader_epoch,
            MAGIC,
            0,
            0,
            h.record_count - 1,
            base_ts,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.record_count,
        )
    )
    out = head + body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_CRC_FROM:]))
    return bytes(out)
