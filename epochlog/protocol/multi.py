"""Requests that carry many partitions: produce, fetch and list-offsets, with answers per partition.

Kafka's ProduceRequest, FetchRequest and ListOffsetsRequest each carry many
partitions of one leader broker, and so do these: a producer sends what it has
for every partition a broker leads in one request, a consumer fetches all its
partitions of a broker at once, a reader asks for the offsets of many
partitions in one trip. Each partition is answered on its own: its offsets,
or its error (`ErrorBody`, the body of a one-partition error answer, with the
leader hints), in the order asked. The request fails as a whole (HTTP 400)
only when it cannot be read: malformed JSON, a field of the wrong type or
width, a partition named twice, more than `MAX_PARTITIONS_PER_REQUEST`.

    POST /v1/produce?acks=&timeoutMs=&encoding=      ProduceManyBody (JSON) or a framed body
    POST /v1/fetch                                   FetchManyBody -> a framed answer
    POST /v1/list-offsets                            ListOffsetsManyBody -> ListOffsetsManyAnswer

The binary produce body is framed as `framing` frames stored batches: a u32
header length, a JSON header listing `{"partition", "leaderEpoch", "size"}`
per partition, then each partition's batch (one encoded batch, as the
one-partition binary produce takes) back to back. The fetch answer is framed
the same way: its header lists per partition where the partition stands and
its batches' `[baseOffset, lastOffset, leaderEpoch, sizeInBytes]`, or its
error, and the batches of all partitions follow in that order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal, NamedTuple, NotRequired

import orjson
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config

# pydantic needs typing_extensions' TypedDict before Python 3.12.
from typing_extensions import TypedDict

from epochlog.protocol.batch import BatchFormatError, RecordBatch
from epochlog.protocol.bodies import ProducerIdentity, RecordIn, producer_identity
from epochlog.protocol.errors import ErrorBody, InvalidRequestError
from epochlog.protocol.framing import MAX_HEADER_BYTES
from epochlog.protocol.replica import PartitionName
from epochlog.protocol.wire import (
    Int64,
    NonNegInt16,
    NonNegInt32,
    NonNegInt64,
    PositiveInt32,
    WireModel,
    describe_validation_error,
)

PRODUCE_MANY_PATH: Final = "/v1/produce"
FETCH_MANY_PATH: Final = "/v1/fetch"
LIST_OFFSETS_MANY_PATH: Final = "/v1/list-offsets"
MAX_PARTITIONS_PER_REQUEST: Final = 10_000
"""Partitions one request may carry (a bound on the work one request can ask for)."""
DEFAULT_PARTITION_MAX_BYTES: Final = 1 << 20
"""A fetch's default bytes per partition (Kafka's max.partition.fetch.bytes)."""
DEFAULT_FETCH_MAX_BYTES: Final = 50 << 20
"""A fetch's default bytes in all (Kafka's fetch.max.bytes); the broker's largest request
bounds it further."""

LATEST: Final = "latest"
EARLIEST: Final = "earliest"
_LEN = struct.Struct(">I")
_STRICT = ConfigDict(strict=True, extra="forbid")

# -- produce -----------------------------------------------------------------------------


@with_config(_STRICT)
class PartitionRecordsIn(TypedDict):
    """One partition of a JSON produce of many: its records and the idempotent producer's
    fields for them (together or not at all), at the leader epoch the client knows."""

    partition: PartitionName
    leaderEpoch: NotRequired[NonNegInt32]
    records: Annotated[list[RecordIn], Field(min_length=1)]
    producerId: NotRequired[NonNegInt64]
    producerEpoch: NotRequired[NonNegInt16]
    baseSequence: NotRequired[NonNegInt32]


@with_config(_STRICT)
class ProduceManyBody(TypedDict):
    """The JSON body of a produce of many partitions."""

    partitions: Annotated[
        list[PartitionRecordsIn], Field(min_length=1, max_length=MAX_PARTITIONS_PER_REQUEST)
    ]


@with_config(_STRICT)
class FramedPartitionIn(TypedDict):
    """One partition of a binary produce of many: the size of its batch in the payload."""

    partition: PartitionName
    leaderEpoch: NotRequired[NonNegInt32]
    size: PositiveInt32


@with_config(_STRICT)
class FramedProduceHeader(TypedDict):
    """The header of a binary produce of many partitions."""

    partitions: Annotated[
        list[FramedPartitionIn], Field(min_length=1, max_length=MAX_PARTITIONS_PER_REQUEST)
    ]


_PRODUCE_MANY: Final = TypeAdapter(ProduceManyBody)
_FRAMED_PRODUCE: Final = TypeAdapter(FramedProduceHeader)


def _validated(adapter: TypeAdapter[Any], raw: bytes, what: str) -> Any:
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid {what}: {describe_validation_error(exc)}") from None


def _unique(names: Sequence[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidRequestError(f"partition {name} is named twice")
        seen.add(name)


class PartitionRecords(NamedTuple):
    """One partition of a JSON produce of many, as read."""

    partition: str
    leader_epoch: int | None
    records: list[RecordIn]
    producer: ProducerIdentity | None


def decode_produce_many(body: bytes) -> list[PartitionRecords]:
    """The partitions of a JSON produce of many, each named once."""
    parts: list[PartitionRecordsIn] = _validated(_PRODUCE_MANY, body, "produce body")["partitions"]
    _unique([p["partition"] for p in parts])
    return [
        PartitionRecords(p["partition"], p.get("leaderEpoch"), p["records"], producer_identity(p))
        for p in parts
    ]


def partition_records(
    partition: str,
    leader_epoch: int | None,
    records: list[RecordIn],
    producer: ProducerIdentity | None,
) -> PartitionRecordsIn:
    """One partition of a JSON produce of many."""
    entry: PartitionRecordsIn = {"partition": partition, "records": records}
    if leader_epoch is not None:
        entry["leaderEpoch"] = leader_epoch
    if producer is not None:
        entry["producerId"], entry["producerEpoch"], entry["baseSequence"] = producer
    return entry


def encode_produce_many(parts: Sequence[PartitionRecordsIn]) -> bytes:
    return orjson.dumps({"partitions": parts})


def _split_frame(body: bytes) -> tuple[bytes, int]:
    """The JSON header of a framed body and where its payload starts."""
    if len(body) < _LEN.size:
        raise InvalidRequestError("framed body shorter than its length prefix")
    (n,) = _LEN.unpack_from(body)
    if n > MAX_HEADER_BYTES or _LEN.size + n > len(body):
        raise InvalidRequestError(f"framed body: header length {n} runs past the body")
    return body[_LEN.size : _LEN.size + n], _LEN.size + n


def decode_framed_produce(body: bytes) -> list[tuple[str, int | None, bytes]]:
    """(partition, leaderEpoch or None, the batch's bytes) of a binary produce of many. The
    bytes are not checked here: each partition's batch is checked on its own, so that a bad
    one fails only its partition."""
    raw, pos = _split_frame(body)
    parts = _validated(_FRAMED_PRODUCE, raw, "produce header")["partitions"]
    _unique([p["partition"] for p in parts])
    out = []
    for p in parts:
        end = pos + p["size"]
        if end > len(body):
            raise InvalidRequestError(f"framed body: the batch of {p['partition']} runs past it")
        out.append((p["partition"], p.get("leaderEpoch"), body[pos:end]))
        pos = end
    if pos != len(body):
        raise InvalidRequestError(f"framed body: {len(body) - pos} bytes after the batches")
    return out


def encode_framed_produce(parts: Sequence[tuple[str, int | None, bytes]]) -> bytes:
    """A binary produce of many: (partition, leaderEpoch or None, one encoded batch)."""
    listed: list[dict[str, Any]] = []
    for name, epoch, raw in parts:
        entry: dict[str, Any] = {"partition": name, "size": len(raw)}
        if epoch is not None:
            entry["leaderEpoch"] = epoch
        listed.append(entry)
    header = orjson.dumps({"partitions": listed})
    return b"".join([_LEN.pack(len(header)), header, *(raw for _, _, raw in parts)])


class PartitionProduced(WireModel):
    """One partition of a produce answer: where its records went (no offsets with
    acks=none), or its error."""

    partition: str
    base_offset: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    last_offset: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    leader_epoch: NonNegInt32 | None = Field(default=None, exclude_if=lambda v: v is None)
    error: ErrorBody | None = Field(default=None, exclude_if=lambda v: v is None)


class ProduceManyAnswer(WireModel):
    partitions: tuple[PartitionProduced, ...]


# -- list offsets ------------------------------------------------------------------------

At = Literal["earliest", "latest"] | NonNegInt64
"""earliest, latest, or a time in ms since the Unix epoch (the first offset stamped at or
after it)."""


@with_config(_STRICT)
class OffsetQueryIn(TypedDict):
    partition: PartitionName
    at: NotRequired[At]
    leaderEpoch: NotRequired[NonNegInt32]


@with_config(_STRICT)
class ListOffsetsManyBody(TypedDict):
    partitions: Annotated[
        list[OffsetQueryIn], Field(min_length=1, max_length=MAX_PARTITIONS_PER_REQUEST)
    ]


_LIST_OFFSETS_MANY: Final = TypeAdapter(ListOffsetsManyBody)


class OffsetQuery(NamedTuple):
    partition: str
    at: str | int
    leader_epoch: int | None


def decode_list_offsets_many(body: bytes) -> list[OffsetQuery]:
    parts: list[OffsetQueryIn] = _validated(_LIST_OFFSETS_MANY, body, "list-offsets body")[
        "partitions"
    ]
    _unique([p["partition"] for p in parts])
    return [OffsetQuery(p["partition"], p.get("at", LATEST), p.get("leaderEpoch")) for p in parts]


def encode_list_offsets_many(parts: Sequence[OffsetQuery]) -> bytes:
    wire: list[OffsetQueryIn] = []
    for p in parts:
        query: OffsetQueryIn = {"partition": p.partition, "at": _at(p.at)}
        if p.leader_epoch is not None:
            query["leaderEpoch"] = p.leader_epoch
        wire.append(query)
    return orjson.dumps({"partitions": wire})


def _at(at: str | int) -> At:
    if at == EARLIEST:
        return EARLIEST
    if at == LATEST:
        return LATEST
    if isinstance(at, int) and at >= 0:
        return at
    raise ValueError(f"at must be earliest, latest or a time in ms, got {at!r}")


class PartitionOffset(WireModel):
    """One partition of a list-offsets answer: the offset and the epoch that answered, or
    its error."""

    partition: str
    offset: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    leader_epoch: NonNegInt32 | None = Field(default=None, exclude_if=lambda v: v is None)
    error: ErrorBody | None = Field(default=None, exclude_if=lambda v: v is None)


class ListOffsetsManyAnswer(WireModel):
    partitions: tuple[PartitionOffset, ...]


# -- fetch -------------------------------------------------------------------------------


@with_config(_STRICT)
class PartitionFetchIn(TypedDict):
    """One partition of a fetch: from which offset, at the leader epoch the reader knows
    (KIP-320), at most how many bytes (at least one batch when there is one)."""

    partition: PartitionName
    offset: Int64
    leaderEpoch: NotRequired[NonNegInt32]
    maxBytes: NotRequired[PositiveInt32]


@with_config(_STRICT)
class FetchManyBody(TypedDict):
    """A fetch of many partitions: the leader holds it up to maxWaitMs while none of them
    has records to return, and returns at most maxBytes in all (at least one batch of the
    first partition that has one)."""

    partitions: Annotated[
        list[PartitionFetchIn], Field(min_length=1, max_length=MAX_PARTITIONS_PER_REQUEST)
    ]
    maxWaitMs: NotRequired[Annotated[int, Field(strict=True, ge=0, le=(1 << 31) - 1)]]
    maxBytes: NotRequired[PositiveInt32]


_FETCH_MANY: Final = TypeAdapter(FetchManyBody)


class FetchAsk(NamedTuple):
    """One partition of a fetch, as read (`max_bytes`: its own limit)."""

    partition: str
    offset: int
    leader_epoch: int | None
    max_bytes: int


class FetchMany(NamedTuple):
    """A fetch of many partitions, as read."""

    partitions: list[FetchAsk]
    max_wait_ms: int
    max_bytes: int


def decode_fetch_many(body: bytes) -> FetchMany:
    parsed: FetchManyBody = _validated(_FETCH_MANY, body, "fetch body")
    _unique([p["partition"] for p in parsed["partitions"]])
    asks = [
        FetchAsk(
            p["partition"],
            p["offset"],
            p.get("leaderEpoch"),
            p.get("maxBytes", DEFAULT_PARTITION_MAX_BYTES),
        )
        for p in parsed["partitions"]
    ]
    return FetchMany(
        asks, parsed.get("maxWaitMs", 0), parsed.get("maxBytes", DEFAULT_FETCH_MAX_BYTES)
    )


def encode_fetch_many(fetch: FetchMany) -> bytes:
    wanted: list[PartitionFetchIn] = []
    for p in fetch.partitions:
        ask: PartitionFetchIn = {
            "partition": p.partition,
            "offset": p.offset,
            "maxBytes": p.max_bytes,
        }
        if p.leader_epoch is not None:
            ask["leaderEpoch"] = p.leader_epoch
        wanted.append(ask)
    body: FetchManyBody = {
        "partitions": wanted,
        "maxWaitMs": fetch.max_wait_ms,
        "maxBytes": fetch.max_bytes,
    }
    return orjson.dumps(body)


class FetchedPartition(WireModel):
    """One partition of a fetch answer's header: where the partition stands and its
    batches as `[baseOffset, lastOffset, leaderEpoch, sizeInBytes]` (the first may start
    below the offset asked for), or its error."""

    partition: str
    offset: Int64
    high_watermark: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    log_start_offset: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    leader_epoch: NonNegInt32 | None = Field(default=None, exclude_if=lambda v: v is None)
    batches: tuple[tuple[NonNegInt64, NonNegInt64, NonNegInt32, PositiveInt32], ...] = ()
    error: ErrorBody | None = Field(default=None, exclude_if=lambda v: v is None)


class FetchManyHeader(WireModel):
    partitions: tuple[FetchedPartition, ...]


def encode_fetch_answer(parts: Sequence[tuple[FetchedPartition, Sequence[RecordBatch]]]) -> bytes:
    """The framed fetch answer: each partition's header entry (its batches listed from the
    batches given) and then every batch."""
    entries = []
    for entry, batches in parts:
        listed = tuple((b.base_offset, b.last_offset, b.leader_epoch, len(b.raw)) for b in batches)
        entries.append(entry.model_copy(update={"batches": listed}) if listed else entry)
    header = FetchManyHeader(partitions=tuple(entries)).model_dump_json().encode()
    return b"".join(
        [_LEN.pack(len(header)), header, *(b.raw for _, batches in parts for b in batches)]
    )


def decode_fetch_answer(body: bytes) -> list[tuple[FetchedPartition, list[RecordBatch]]]:
    """Each partition's header entry and its batches, every batch checked (framing, CRC)
    against its entry."""
    raw, pos = _split_frame(body)
    try:
        header = FetchManyHeader.model_validate_json(raw)
    except ValidationError as exc:
        raise InvalidRequestError(
            f"invalid fetch answer: {describe_validation_error(exc)}"
        ) from None
    view = memoryview(body)
    out = []
    for entry in header.partitions:
        batches = []
        for base, last, epoch, size in entry.batches:
            if pos + size > len(body):
                raise InvalidRequestError(
                    f"fetch answer: batch at {base} of {entry.partition} runs past the body"
                )
            try:
                batch = RecordBatch.from_bytes(bytes(view[pos : pos + size]))
            except BatchFormatError as exc:
                raise InvalidRequestError(
                    f"fetch answer: batch at {base} of {entry.partition}: {exc}"
                ) from exc
            if (batch.base_offset, batch.last_offset, batch.leader_epoch) != (base, last, epoch):
                raise InvalidRequestError(
                    f"fetch answer: batch of {entry.partition} listed at {base}..{last} "
                    f"(epoch {epoch}) holds {batch.base_offset}..{batch.last_offset} "
                    f"(epoch {batch.leader_epoch})"
                )
            batches.append(batch)
            pos += size
        out.append((entry, batches))
    if pos != len(body):
        raise InvalidRequestError(f"fetch answer: {len(body) - pos} bytes after the batches")
    return out
