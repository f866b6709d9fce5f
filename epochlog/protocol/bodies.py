"""The client API's bodies and query parameters, as the broker and the client exchange them.

DESIGN.md, "HTTP API". Names follow `epochlog.protocol.wire`: snake_case in
Python, camelCase on the wire; every wire name is spelt here and nowhere else.

- Query parameters: `Params` (names) and `Encoding` (`encoding=`).
- Produce: the JSON request (`encode_produce_body` / `decode_produce_body`,
  strict: a problem names its field) and the answer (`ProduceAnswer`).
- Read: the JSON answer (`encode_read_answer` / `decode_read_answer`) and the
  header of the framed binary answer (`read_header` / `read_answer_from_header`).
  These run once per record, so they are plain functions over dicts, not models.
- ListOffsets: `OffsetsAnswer`.
- A reader's epoch query (KIP-320): `EpochEndAnswer`, at `READER_EPOCH_PATH`.
- `GET /v1/partitions`: `PartitionsListing` of `HostedPartition`s.
- `GET /healthz`, `GET /readyz`: `HealthAnswer`, `ReadyAnswer`.

Decoders raise `InvalidRequestError` naming the field, as `framing.unframe`
does: a broker answers it as 400, a client turns it into its own "unexpected
answer" error.
"""

from __future__ import annotations

import base64
import binascii
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Generic, NamedTuple, NotRequired, TypeVar

import orjson
from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    with_config,
)

# pydantic needs typing_extensions' TypedDict before Python 3.12.
from typing_extensions import TypedDict

from epochlog.protocol.batch import LogRecord
from epochlog.protocol.epochs import REPORTED_NO_EPOCH
from epochlog.protocol.errors import InvalidRequestError
from epochlog.protocol.replica import EpochOrNone, OffsetOrUndefined
from epochlog.protocol.wire import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    Int64,
    IntRange,
    NonNegInt16,
    NonNegInt32,
    NonNegInt64,
    WireModel,
    describe_validation_error,
)

MAX_RECORDS_PER_READ: Final = 10_000
"""The most records one read may ask for (`maxRecords`)."""

M = TypeVar("M", bound=WireModel)
T = TypeVar("T")


def decode_model(model: type[M], body: bytes | str) -> M:
    """`body` as `model`; a problem raises InvalidRequestError naming the field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_error(exc)) from None


def dump_json(model: WireModel) -> bytes:
    """A model as a compact JSON body."""
    return model.model_dump_json().encode()


# -- query parameters --------------------------------------------------------------------


class Params:
    """Query parameter names of the broker's API (`PARAM_RANGES`: the integers they take)."""

    ACKS: Final = "acks"
    """Produce: all, leader or none."""
    TIMEOUT_MS: Final = "timeoutMs"
    """Produce: how long the leader may wait for acks=all."""
    LEADER_EPOCH: Final = "leaderEpoch"
    """Every request: the leader epoch the client knows; the broker fences other epochs."""
    ENCODING: Final = "encoding"
    """Produce and JSON reads: how keys, values and header values are written (`Encoding`)."""
    OFFSET: Final = "offset"
    """Read: the first offset wanted."""
    MAX_RECORDS: Final = "maxRecords"
    MAX_BYTES: Final = "maxBytes"
    MAX_WAIT_MS: Final = "maxWaitMs"
    """Read: how long the leader may hold a read that has nothing to return yet."""
    AT: Final = "at"
    """ListOffsets: earliest, latest or a time in ms since the Unix epoch."""
    BEFORE_OFFSET: Final = "beforeOffset"
    """DeleteRecords: records below this offset go (-1: below the high watermark)."""
    BROKER_EPOCH: Final = "brokerEpoch"
    """Replication requests: the asking broker's brokerEpoch, checked with its certificate
    before the body is read (absent from brokers of versions before it)."""


PARAM_RANGES: Final[Mapping[str, IntRange]] = {
    # Kafka's int32 request timeout; the broker's maxTimeoutMs bounds it further.
    Params.TIMEOUT_MS: IntRange(1, INT32_MAX),
    Params.LEADER_EPOCH: IntRange(0, INT32_MAX),
    # A fetch offset is an int64; below the log start it is OFFSET_OUT_OF_RANGE, which
    # tells the reader where the log starts, so negative ones are answered, not refused.
    Params.OFFSET: IntRange(INT64_MIN, INT64_MAX),
    Params.MAX_RECORDS: IntRange(1, MAX_RECORDS_PER_READ),
    Params.MAX_BYTES: IntRange(1, INT32_MAX),
    Params.MAX_WAIT_MS: IntRange(0, INT32_MAX),
    Params.AT: IntRange(0, INT64_MAX),
    Params.BEFORE_OFFSET: IntRange(-1, INT64_MAX),
    Params.BROKER_EPOCH: IntRange(0, INT64_MAX),
}
"""The integers each integer query parameter takes (for `at`, its time in ms): a value
outside is INVALID_REQUEST. The broker's own limits (maxTimeoutMs, maxWaitMs, the largest
request) may bound them further."""


class Encoding(enum.StrEnum):
    """How a JSON body writes keys, values and header values: UTF-8 text, or base64."""

    UTF8 = "utf8"
    BASE64 = "base64"


def _decoder(encoding: Encoding) -> Callable[[str], bytes]:
    if encoding is Encoding.UTF8:
        return str.encode

    def b64(text: str) -> bytes:
        return base64.b64decode(text, validate=True)

    return b64


def _text(data: bytes, encoding: Encoding) -> str:
    if encoding is Encoding.BASE64:
        return base64.b64encode(data).decode()
    return data.decode(errors="replace")


# -- produce -----------------------------------------------------------------------------


@with_config(ConfigDict(strict=True, extra="forbid"))
class RecordIn(TypedDict):
    """One record of a JSON produce body."""

    key: NotRequired[str | None]
    value: str
    headers: NotRequired[dict[str, str]]


@with_config(ConfigDict(strict=True, extra="forbid"))
class ProduceBody(TypedDict):
    """The JSON produce body. The idempotent producer's fields come together or not at all."""

    records: Annotated[list[RecordIn], Field(min_length=1)]
    # Kafka's widths, which the record batch stores them in: a producerId past int64 was
    # taken here and failed when the batch was encoded (HTTP 500, retried by clients).
    producerId: NotRequired[NonNegInt64]
    producerEpoch: NotRequired[NonNegInt16]
    baseSequence: NotRequired[NonNegInt32]


_PRODUCE_BODY: Final = TypeAdapter(ProduceBody)
_PRODUCER_FIELDS: Final = ("producerId", "producerEpoch", "baseSequence")


class ProducerIdentity(NamedTuple):
    """The idempotent producer's fields for one batch: id, epoch, sequence of its first
    record."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


def encode_produce_body(records: Sequence[RecordIn], producer: ProducerIdentity | None) -> bytes:
    doc: dict[str, Any] = {"records": records}
    if producer is not None:
        doc.update(zip(_PRODUCER_FIELDS, producer, strict=True))
    return orjson.dumps(doc)


def decode_produce_body(body: bytes) -> tuple[list[RecordIn], ProducerIdentity | None]:
    """The records and producer fields of a JSON produce body."""
    try:
        parsed = _PRODUCE_BODY.validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(
            f"invalid produce body: {describe_validation_error(exc)}"
        ) from None
    return parsed["records"], producer_identity(parsed)


def producer_identity(fields: Mapping[str, Any]) -> ProducerIdentity | None:
    """The idempotent producer's fields of a validated produce body (or one partition of a
    produce of many): all three or none."""
    given = [f for f in _PRODUCER_FIELDS if f in fields]
    if not given:
        return None
    if len(given) != len(_PRODUCER_FIELDS):
        raise InvalidRequestError(
            "producerId, producerEpoch and baseSequence go together; got only " + ", ".join(given)
        )
    return ProducerIdentity(*(fields[f] for f in _PRODUCER_FIELDS))


def decode_record_text(
    records: Sequence[RecordIn], encoding: Encoding
) -> Iterable[tuple[int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]]:
    """(index, key, value, headers) of each record, as bytes; raises InvalidRequestError
    naming a record whose text is not valid in `encoding`."""
    decode = _decoder(encoding)
    for i, r in enumerate(records):
        try:
            key_text = r.get("key")
            key = None if key_text is None else decode(key_text)
            value = decode(r["value"])
            hs = r.get("headers")
            headers = tuple((k, decode(v)) for k, v in hs.items()) if hs else ()
        except (binascii.Error, ValueError) as exc:
            what = "base64" if encoding is Encoding.BASE64 else "UTF-8"
            raise InvalidRequestError(f"records.{i}: not valid {what} ({exc})") from None
        yield i, key, value, headers


class ProduceAnswer(WireModel):
    """Where the records went: their offsets and the leader epoch that appended them.

    An acks=none answer carries no offsets: it is sent before the leader knows the
    records will last (not synced, not replicated), and a leader that fails may give
    those offsets to other records."""

    base_offset: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    last_offset: NonNegInt64 | None = Field(default=None, exclude_if=lambda v: v is None)
    leader_epoch: NonNegInt32


# -- read --------------------------------------------------------------------------------


class RecordOut(TypedDict):
    """One record of a JSON read answer."""

    offset: NonNegInt64
    key: str | None
    value: str | None
    headers: dict[str, str]
    timestamp: Int64
    leaderEpoch: NonNegInt32


def record_json(r: LogRecord, encoding: Encoding) -> RecordOut:
    """A record as a JSON read answer (and the CLI's output) writes it."""
    return {
        "offset": r.offset,
        "key": None if r.key is None else _text(r.key, encoding),
        "value": None if r.value is None else _text(r.value, encoding),
        "headers": {k: _text(v, encoding) for k, v in r.headers},
        "timestamp": r.timestamp,
        "leaderEpoch": r.leader_epoch,
    }


def encode_read_answer(
    records: Iterable[LogRecord],
    *,
    encoding: Encoding,
    high_watermark: int,
    log_start_offset: int,
    leader_epoch: int,
) -> bytes:
    doc = {
        "records": [record_json(r, encoding) for r in records],
        "highWatermark": high_watermark,
        "logStartOffset": log_start_offset,
        "leaderEpoch": leader_epoch,
    }
    return orjson.dumps(doc)


RecordFactory = Callable[[int, int, bytes | None, bytes | None, dict[str, bytes], int], T]
"""Makes the caller's record from (offset, timestamp, key, value, headers, leaderEpoch)."""


@dataclass(frozen=True, slots=True)
class ReadAnswer(Generic[T]):
    """A read answer, JSON or binary: the records and where the partition stands."""

    records: list[T]
    high_watermark: int
    log_start_offset: int
    leader_epoch: int


def _int(doc: Mapping[str, Any], name: str) -> int:
    value = doc.get(name)
    if type(value) is not int:
        raise InvalidRequestError(f"{name} is not an integer: {value!r}")
    return value


def _object(doc: Any, what: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise InvalidRequestError(f"{what} is not a JSON object")
    return doc


def decode_json_object(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except ValueError as exc:
        raise InvalidRequestError(f"answer is not JSON ({exc})") from None
    return _object(doc, "answer")


def decode_read_answer(
    body: bytes, record: RecordFactory[T], encoding: Encoding = Encoding.BASE64
) -> ReadAnswer[T]:
    """A JSON read answer; `record` makes each record."""
    doc = decode_json_object(body)
    raw = doc.get("records")
    if not isinstance(raw, list):
        raise InvalidRequestError("records is not a list")
    text = _decoder(encoding)

    def data(value: Any) -> bytes:
        if not isinstance(value, str):
            raise InvalidRequestError(f"expected a {encoding} string, got {value!r}")
        try:
            return text(value)
        except ValueError as exc:
            raise InvalidRequestError(f"not {encoding} ({exc})") from None

    out: list[T] = []
    for r in raw:
        r = _object(r, "a record")
        headers = _object(r.get("headers") or {}, "headers")
        key, value = r.get("key"), r.get("value")
        out.append(
            record(
                _int(r, "offset"),
                _int(r, "timestamp"),
                None if key is None else data(key),
                None if value is None else data(value),
                {str(k): data(v) for k, v in headers.items()},
                _int(r, "leaderEpoch"),
            )
        )
    return ReadAnswer(
        out, _int(doc, "highWatermark"), _int(doc, "logStartOffset"), _int(doc, "leaderEpoch")
    )


def read_header(
    *, offset: int, high_watermark: int, log_start_offset: int, leader_epoch: int
) -> dict[str, Any]:
    """The JSON header of a binary read answer (`framing`); `offset` is the one asked for
    (the first batch may start below it)."""
    return {
        "offset": offset,
        "highWatermark": high_watermark,
        "logStartOffset": log_start_offset,
        "leaderEpoch": leader_epoch,
    }


def read_answer_from_header(header: Mapping[str, Any], records: list[T]) -> ReadAnswer[T]:
    """A binary read answer from its header and the records of its batches."""
    return ReadAnswer(
        records,
        _int(header, "highWatermark"),
        _int(header, "logStartOffset"),
        _int(header, "leaderEpoch"),
    )


# -- ListOffsets -------------------------------------------------------------------------


class OffsetsAnswer(WireModel):
    """ListOffsets: the offset asked for, and the leader epoch that answered."""

    offset: NonNegInt64
    leader_epoch: NonNegInt32


class DeleteRecordsAnswer(WireModel):
    """DeleteRecords: the log start offset after the deletion (Kafka's low watermark)."""

    log_start_offset: NonNegInt64
    leader_epoch: NonNegInt32


# -- a reader's epoch query (KIP-320) ----------------------------------------------------

READER_EPOCH_PATH: Final = "/v1/partitions/{name}/epochs/{epoch}"
"""Where a leader epoch ends in the leader's log, for a reader validating its position."""
READER_EPOCH_RANGE: Final = IntRange(0, INT32_MAX)
"""The epochs a reader may ask about (the path's `{epoch}`): those of the records it read."""


class EpochEndAnswer(WireModel):
    """A reader's epoch query (Kafka's OffsetsForLeaderEpoch, as a consumer sends it after a
    leader change): the largest epoch at or below the one asked for that the leader's log
    holds (`epoch`) and where it ends in that log (`end_offset`: the next epoch's start, or
    the log end for the latest), with the leader epoch that answered. `epoch` is NO_EPOCH
    (-1) when the leader's history begins above the epoch asked for, and `end_offset` then
    says where it begins (-1: it holds no epoch at all). A reader that read records of the
    epoch asked for at or past `end_offset`, or records of an epoch the leader does not
    hold, read records that are not in this log: it was truncated under the reader (an
    unclean leader election)."""

    epoch: EpochOrNone
    end_offset: OffsetOrUndefined
    leader_epoch: NonNegInt32


# -- the partition listing, health and readiness -----------------------------------------


class HostedRole(enum.StrEnum):
    """What a broker's replica of a partition is doing."""

    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"
    """No role: no assignment yet, or offline after a storage error."""


class HostedPartition(WireModel):
    """One replica a broker hosts, as `GET /v1/partitions` lists it.

    Epochs are spelt as in the Partition status (0: none, `epochs.reported_epoch`).
    Fields past `leader_epoch` have defaults so that a client can read listings from
    brokers that say less.
    """

    name: str
    role: HostedRole
    topic: str | None = None
    """The topic the partition belongs to, and its index in it, as the controller's
    assignment says (None until the broker has heard one since it started)."""
    partition: NonNegInt32 | None = None
    leader: NonNegInt32 | None = None
    leader_epoch: NonNegInt32 = REPORTED_NO_EPOCH
    partition_epoch: NonNegInt32 = REPORTED_NO_EPOCH
    isr: tuple[NonNegInt32, ...] = ()
    replicas: tuple[NonNegInt32, ...] = ()
    high_watermark: NonNegInt64 = 0
    log_start_offset: NonNegInt64 = 0
    log_end_offset: NonNegInt64 = 0
    persisted_log_end_offset: NonNegInt64 = 0
    storage_error: str | None = None
    """Why the replica is offline after a storage error (None: it is not)."""
    follower_state: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """Followers only: where the follower is in catching up (fetching, truncating, ...)."""


class PartitionsListing(WireModel):
    """`GET /v1/partitions`: who the broker is and every replica it hosts."""

    broker_id: NonNegInt32 | None = None
    broker_epoch: NonNegInt64 | None = None
    address: str | None = None
    """The URL the broker advertises to its peers."""
    kafka_address: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """host:port of the broker's Kafka listener, as its clients reach it; None without one."""
    partitions: tuple[HostedPartition, ...]


class HealthAnswer(WireModel):
    """`GET /healthz`: "ok", or "failed" with why (the process should be restarted)."""

    status: str
    error: str | None = None
    broker_id: NonNegInt32
    broker_epoch: NonNegInt64 | None = None
    restarts: NonNegInt64 = 0
    """In-place restarts of the broker's core (after being fenced)."""


class ReadyAnswer(WireModel):
    """`GET /readyz`: ready, or what the broker still waits for."""

    ready: StrictBool
    waiting: tuple[str, ...] = ()
