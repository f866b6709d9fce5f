"""What the client hands out and takes in, and how records travel: JSON or binary batches.

Produce bodies are JSON (`epochlog.protocol.bodies`: UTF-8 text, or base64
with `encoding=base64` when a key, value or header is not valid UTF-8) or one
record batch in the log's own format (`application/vnd.epochlog.batch`,
encoded here exactly as the broker stores it, which is what makes that path
cheap for the broker). Reads ask for base64 JSON, so keys, values and headers
come back as the exact bytes, or for framed binary batches. Either way the
caller gets `ConsumerRecord`s.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final, NamedTuple, TypeVar

from epochlog.client.errors import UnexpectedResponseError
from epochlog.protocol.batch import NO_PRODUCER_ID, Record, RecordBatch, encode_batch
from epochlog.protocol.bodies import (
    DeleteRecordsAnswer,
    Encoding,
    EpochEndAnswer,
    OffsetsAnswer,
    Params,
    ProduceAnswer,
    ProducerIdentity,
    ReadAnswer,
    RecordIn,
    decode_model,
    decode_read_answer,
    encode_produce_body,
    read_answer_from_header,
)
from epochlog.protocol.errors import EpochlogError
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, unframe
from epochlog.protocol.multi import encode_framed_produce, encode_produce_many, partition_records
from epochlog.protocol.wire import WireModel

__all__ = [
    "BATCH_CONTENT_TYPE",
    "BatchesAnswer",
    "ConsumerRecord",
    "FetchAnswer",
    "OffsetAndEpoch",
    "OutgoingRecord",
    "ProducerIdentity",
    "RecordMetadata",
    "TopicPartition",
]

RECORD_OVERHEAD: Final = 24
"""Bytes a record costs beyond its key, value and headers (binary framing, JSON quoting)."""


UNKNOWN_OFFSET: Final = -1
"""The offset of a record sent with acks=none (as Kafka's producer reports for acks=0)."""


class RecordMetadata(NamedTuple):
    """Where an acknowledged record is: its partition, offset and the leader epoch that
    acknowledged it; the offset is `UNKNOWN_OFFSET` for acks=none."""

    partition: str
    offset: int
    leader_epoch: int


class TopicPartition(NamedTuple):
    """A partition of a topic: the topic, the partition's index in it, and the name that
    addresses it (the Partition resource's name)."""

    topic: str
    partition: int
    name: str


class OffsetAndEpoch(NamedTuple):
    offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    partition: str
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]
    leader_epoch: int

    def text(self) -> str | None:
        """The value as text (invalid UTF-8 shown as U+FFFD)."""
        return None if self.value is None else self.value.decode(errors="replace")


def as_bytes(data: str | bytes | bytearray | memoryview) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


@dataclass(slots=True)
class OutgoingRecord:
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def size(self) -> int:
        return (
            RECORD_OVERHEAD
            + len(self.value)
            + (len(self.key) if self.key is not None else 0)
            + sum(len(k) + len(v) + 8 for k, v in self.headers)
        )


def make_record(
    value: str | bytes,
    key: str | bytes | None = None,
    headers: Mapping[str, str | bytes] | None = None,
) -> OutgoingRecord:
    if not isinstance(value, str | bytes | bytearray | memoryview):
        raise TypeError(f"value must be str or bytes, got {type(value).__name__}")
    if key is not None and not isinstance(key, str | bytes | bytearray | memoryview):
        raise TypeError(f"key must be str, bytes or None, got {type(key).__name__}")
    hs: tuple[tuple[str, bytes], ...] = ()
    if headers:
        for name in headers:
            if not isinstance(name, str):
                raise TypeError(f"header names must be str, got {type(name).__name__}")
        hs = tuple((k, as_bytes(v)) for k, v in headers.items())
    return OutgoingRecord(None if key is None else as_bytes(key), as_bytes(value), hs)


# -- produce bodies ----------------------------------------------------------------------


def _utf8(records: Sequence[OutgoingRecord]) -> bool:
    try:
        for r in records:
            r.value.decode()
            if r.key is not None:
                r.key.decode()
            for _, v in r.headers:
                v.decode()
    except UnicodeDecodeError:
        return False
    return True


def batch_bytes(records: Sequence[OutgoingRecord], identity: ProducerIdentity | None) -> bytes:
    """`records` as one encoded batch (the binary produce body)."""
    return bytes(
        encode_batch(
            [Record(r.value, r.key, r.headers, r.timestamp_ms) for r in records],
            base_offset=0,
            # Placeholders: the leader stamps the offsets and its epoch when it appends the
            # batch (the format holds no negative epoch, so not NO_EPOCH).
            leader_epoch=0,
            timestamp=records[0].timestamp_ms,
            producer_id=identity.producer_id if identity else NO_PRODUCER_ID,
            producer_epoch=identity.producer_epoch if identity else -1,
            base_sequence=identity.base_sequence if identity else -1,
        )
    )


def _wire_records(records: Sequence[OutgoingRecord], text: bool) -> list[RecordIn]:
    def enc(data: bytes) -> str:
        return data.decode() if text else base64.b64encode(data).decode()

    wire_records: list[RecordIn] = []
    for r in records:
        record: RecordIn = {"key": None if r.key is None else enc(r.key), "value": enc(r.value)}
        if r.headers:
            record["headers"] = {k: enc(v) for k, v in r.headers}
        wire_records.append(record)
    return wire_records


def _encoding_params(text: bool) -> dict[str, str]:
    return {} if text else {Params.ENCODING: Encoding.BASE64.value}


def produce_body(
    records: Sequence[OutgoingRecord], identity: ProducerIdentity | None, *, binary: bool
) -> tuple[bytes, str, dict[str, str]]:
    """(body, content type, extra query parameters) of a produce request."""
    if binary:
        return batch_bytes(records, identity), BATCH_CONTENT_TYPE, {}
    text = _utf8(records)
    body = encode_produce_body(_wire_records(records, text), identity)
    return body, "application/json", _encoding_params(text)


@dataclass(frozen=True, slots=True)
class PartitionBatch:
    """One partition's part of a produce of many: its records and their producer fields,
    at the leader epoch the client knows (None: none sent)."""

    partition: str
    leader_epoch: int | None
    records: Sequence[OutgoingRecord]
    identity: ProducerIdentity | None


def produce_many_body(
    parts: Sequence[PartitionBatch], *, binary: bool
) -> tuple[bytes, str, dict[str, str]]:
    """(body, content type, extra query parameters) of a produce of many partitions. JSON
    keys and values are text when every part's are valid UTF-8, else all are base64."""
    if binary:
        framed = [(p.partition, p.leader_epoch, batch_bytes(p.records, p.identity)) for p in parts]
        return encode_framed_produce(framed), BATCH_CONTENT_TYPE, {}
    text = all(_utf8(p.records) for p in parts)
    wire = [
        partition_records(p.partition, p.leader_epoch, _wire_records(p.records, text), p.identity)
        for p in parts
    ]
    return encode_produce_many(wire), "application/json", _encoding_params(text)


# -- answers -----------------------------------------------------------------------------


M = TypeVar("M", bound=WireModel)

FetchAnswer = ReadAnswer[ConsumerRecord]
BatchesAnswer = ReadAnswer[RecordBatch]


def decode_answer(model: type[M], body: bytes, where: str) -> M:
    """A JSON answer as `model`; anything else is an UnexpectedResponseError."""
    try:
        return decode_model(model, body)
    except EpochlogError as exc:
        raise UnexpectedResponseError(f"{where}: {exc.message}") from None


def parse_produce_answer(body: bytes, where: str) -> ProduceAnswer:
    return decode_answer(ProduceAnswer, body, where)


def parse_offsets_answer(body: bytes, where: str) -> OffsetAndEpoch:
    answer = decode_answer(OffsetsAnswer, body, where)
    return OffsetAndEpoch(answer.offset, answer.leader_epoch)


def parse_delete_records_answer(body: bytes, where: str) -> OffsetAndEpoch:
    """DeleteRecords' answer: (the log start offset after it, leaderEpoch)."""
    answer = decode_answer(DeleteRecordsAnswer, body, where)
    return OffsetAndEpoch(answer.log_start_offset, answer.leader_epoch)


def parse_epoch_end_answer(body: bytes, where: str) -> EpochEndAnswer:
    """A reader's epoch query's answer (KIP-320)."""
    return decode_answer(EpochEndAnswer, body, where)


def parse_fetch_json(partition: str, body: bytes, where: str) -> FetchAnswer:
    """A read answer asked with `encoding=base64`."""
    try:
        return decode_read_answer(body, partial(ConsumerRecord, partition))
    except EpochlogError as exc:
        raise UnexpectedResponseError(f"{where}: {exc.message}") from None


def consumer_records(partition: str, batches: Sequence[RecordBatch]) -> list[ConsumerRecord]:
    """The records of checked batches, as a consumer hands them out."""
    return [
        ConsumerRecord(
            partition=partition,
            offset=r.offset,
            timestamp=r.timestamp,
            key=r.key,
            value=r.value,
            headers=dict(r.headers),
            leader_epoch=r.leader_epoch,
        )
        for b in batches
        for r in b.records()
    ]


def fetch_answer(partition: str, answer: BatchesAnswer) -> FetchAnswer:
    """A batch answer (of a fetch of many partitions, say) with its records decoded."""
    return ReadAnswer(
        consumer_records(partition, answer.records),
        answer.high_watermark,
        answer.log_start_offset,
        answer.leader_epoch,
    )


def parse_fetch_binary(partition: str, body: bytes, where: str) -> FetchAnswer:
    """A read answer in the framed batch format; every batch's CRC is checked."""
    try:
        header, batches = unframe(body)
        return read_answer_from_header(header, consumer_records(partition, batches))
    except EpochlogError as exc:
        raise UnexpectedResponseError(f"{where}: {exc.message}") from None


def parse_fetch_batches(body: bytes, where: str) -> BatchesAnswer:
    """A read answer in the framed batch format, as its checked batches (not decoded)."""
    try:
        header, batches = unframe(body)
        return read_answer_from_header(header, batches)
    except EpochlogError as exc:
        raise UnexpectedResponseError(f"{where}: {exc.message}") from None
