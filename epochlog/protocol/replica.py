"""Replication between brokers: the internal endpoints' paths and bodies.

A follower POSTs a `SessionFetchBody` to `SESSION_FETCH_PATH`: one request of
its fetch session with that leader broker (KIP-227), covering every partition
it follows there. The answer is a framed body (`framing`) whose JSON header
holds the session id and one entry per partition with news: "data" (the
leader's epoch and high watermark, and how many of the body's batches are this
partition's, which the follower appends verbatim), "diverging" (the follower's
log differs from the leader's: the largest epoch the leader has at or below the
follower's last one, and where it ends) or "error" (an error body; the
partition leaves the session). A session-level failure is an error answer of
its own. The follower POSTs an `EpochQueryBody` to `EPOCH_PATH` and gets an
`EpochAnswerBody` (KIP-279). Errors are the client API's error bodies
(`errors.ErrorAnswer`).

Both requests carry the follower's brokerEpoch in the query too
(`bodies.Params.BROKER_EPOCH`): the leader checks the broker's certificate and
that brokerEpoch before it reads a body, so nobody else can make it parse one.

The answer's header is on the replication hot path, so it is plain dicts built
and checked by hand; the request bodies are models. Epochs here use
`epochs.NO_EPOCH` for none, and offsets -1 for an undefined end offset
(KIP-279's UNDEFINED_EPOCH_OFFSET).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any, Final, NamedTuple

from pydantic import Field, model_validator

from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.errors import InvalidRequestError
from epochlog.protocol.wire import (
    INT32_MAX,
    INT64_MAX,
    NonNegInt32,
    NonNegInt64,
    PositiveInt32,
    WireModel,
)

MAX_PARTITIONS: Final = 100_000
"""Partitions one session request may list (a bound on what a request can make a
leader hold)."""
MAX_WAIT_MS: Final = 60_000

PartitionName = Annotated[str, Field(min_length=1, max_length=255)]

SESSION_FETCH_PATH: Final = "/internal/v1/fetch-session"
EPOCH_PATH: Final = "/internal/v1/partitions/{name}/offsets-for-leader-epoch"

UNDEFINED_OFFSET: Final = -1
"""An end offset the answering log does not know (KIP-279's UNDEFINED_EPOCH_OFFSET)."""

EpochOrNone = Annotated[int, Field(strict=True, ge=NO_EPOCH, le=INT32_MAX)]
"""A leader epoch, or NO_EPOCH."""

OffsetOrUndefined = Annotated[int, Field(strict=True, ge=UNDEFINED_OFFSET, le=INT64_MAX)]


class PartitionFetchBody(WireModel):
    """One partition of a fetch session request: at which leader epoch, from which
    offset (and the epoch of the batch before it, so the leader can tell whether the
    logs diverge), how much of its log the follower has fsynced (the only part
    the leader counts; fetches are pipelined, so it may lag the fetch offset), and
    where the follower's log starts (Kafka's LogStartOffset: a DeleteRecords answer
    waits until every in-sync replica's log starts at or above its offset)."""

    partition: PartitionName
    leader_epoch: NonNegInt32
    fetch_offset: NonNegInt64
    persisted_log_end_offset: NonNegInt64
    last_fetched_epoch: EpochOrNone = NO_EPOCH
    log_start_offset: NonNegInt64 | None = None
    """Absent from followers of versions before it (a rolling upgrade)."""

    @model_validator(mode="after")
    def _persisted_within_log(self) -> PartitionFetchBody:
        if self.persisted_log_end_offset > self.fetch_offset:
            raise ValueError(
                f"persistedLogEndOffset {self.persisted_log_end_offset} is above "
                f"fetchOffset {self.fetch_offset}"
            )
        return self


class SessionFetchBody(WireModel):
    """A request of a follower's fetch session with one leader broker (KIP-227): who
    asks, which session and which request of it (both 0 to open a session, which then
    lists every partition), the partitions added or changed, those forgotten, and the
    limits of the answer."""

    replica_id: NonNegInt32
    broker_epoch: NonNegInt64
    # Wider than Kafka's int32s: ids start at brokerEpoch * 1e6 (`LeaderSessions`), and
    # a session's requests are numbered without wrapping.
    session_id: NonNegInt64 = 0
    session_epoch: NonNegInt64 = 0
    partitions: list[PartitionFetchBody] = Field(default_factory=list, max_length=MAX_PARTITIONS)
    forgotten: list[PartitionName] = Field(default_factory=list, max_length=MAX_PARTITIONS)
    max_wait_ms: Annotated[int, Field(strict=True, ge=0, le=MAX_WAIT_MS)] = 0
    """How long the leader may hold a request that finds nothing new."""
    max_bytes: PositiveInt32 = 10 << 20
    partition_max_bytes: PositiveInt32 = 1 << 20


class EpochQueryBody(WireModel):
    """Where does `epoch` end in the leader's log? (OffsetsForLeaderEpoch)"""

    replica_id: NonNegInt32
    leader_epoch: NonNegInt32
    epoch: EpochOrNone


class EpochAnswerBody(WireModel):
    """The largest epoch at or below the one asked for and where it ends; NO_EPOCH and
    UNDEFINED_OFFSET when the leader has none. NO_EPOCH with an offset: the leader holds
    no epoch at or below the one asked for, and its history begins at that offset (the
    follower starts its log over there)."""

    epoch: EpochOrNone
    end_offset: OffsetOrUndefined


class FetchAnswerKind(enum.StrEnum):
    DATA = "data"
    DIVERGING = "diverging"
    ERROR = "error"


class PartitionEntry(NamedTuple):
    """One partition of a session answer's header. `batch_count` batches of the body
    are this partition's (entries take the body's batches in order); `epoch` and
    `end_offset` only when diverging; `error` (an `ErrorBody` as JSON) only for errors."""

    partition: str
    kind: FetchAnswerKind
    leader_epoch: int = 0
    high_watermark: int = 0
    batch_count: int = 0
    epoch: int = NO_EPOCH
    end_offset: int = UNDEFINED_OFFSET
    error: Mapping[str, Any] | None = None
    log_start_offset: int = 0


_SESSION_ID: Final = "sessionId"
_PARTITIONS: Final = "partitions"
_PARTITION: Final = "partition"
_TYPE: Final = "type"
_LEADER_EPOCH: Final = "leaderEpoch"
_HIGH_WATERMARK: Final = "highWatermark"
_BATCH_COUNT: Final = "batchCount"
_EPOCH: Final = "epoch"
_END_OFFSET: Final = "endOffset"
_ERROR: Final = "error"
_LOG_START_OFFSET: Final = "logStartOffset"


def data_entry(
    partition: str,
    leader_epoch: int,
    high_watermark: int,
    batch_count: int,
    log_start_offset: int = 0,
) -> dict[str, Any]:
    entry = {
        _PARTITION: partition,
        _TYPE: FetchAnswerKind.DATA.value,
        _LEADER_EPOCH: leader_epoch,
        _HIGH_WATERMARK: high_watermark,
        _BATCH_COUNT: batch_count,
    }
    if log_start_offset:
        entry[_LOG_START_OFFSET] = log_start_offset
    return entry


def diverging_entry(
    partition: str, leader_epoch: int, high_watermark: int, epoch: int, end_offset: int
) -> dict[str, Any]:
    return {
        _PARTITION: partition,
        _TYPE: FetchAnswerKind.DIVERGING.value,
        _LEADER_EPOCH: leader_epoch,
        _HIGH_WATERMARK: high_watermark,
        _EPOCH: epoch,
        _END_OFFSET: end_offset,
    }


def error_entry(partition: str, error: Mapping[str, Any]) -> dict[str, Any]:
    return {_PARTITION: partition, _TYPE: FetchAnswerKind.ERROR.value, _ERROR: dict(error)}


def session_header(session_id: int, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {_SESSION_ID: session_id, _PARTITIONS: entries}


def _int(entry: Mapping[str, Any], key: str) -> int:
    value = entry.get(key)
    if type(value) is not int:
        raise InvalidRequestError(f"fetch session answer: {key} is not an integer in {entry}")
    return value


def decode_session_header(header: Mapping[str, Any]) -> tuple[int, list[PartitionEntry]]:
    """The session id and the partition entries of a session answer's header."""
    session_id = _int(header, _SESSION_ID)
    listed = header.get(_PARTITIONS)
    if not isinstance(listed, list):
        raise InvalidRequestError("fetch session answer without a partitions list")
    out: list[PartitionEntry] = []
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get(_PARTITION), str):
            raise InvalidRequestError(f"fetch session answer: bad partition entry {entry!r}")
        name, kind = entry[_PARTITION], entry.get(_TYPE)
        if kind == FetchAnswerKind.ERROR:
            error = entry.get(_ERROR)
            if not isinstance(error, dict):
                raise InvalidRequestError(f"fetch session answer: {name}: error without body")
            out.append(PartitionEntry(name, FetchAnswerKind.ERROR, error=error))
            continue
        leader_epoch, high_watermark = _int(entry, _LEADER_EPOCH), _int(entry, _HIGH_WATERMARK)
        if kind == FetchAnswerKind.DIVERGING:
            out.append(
                PartitionEntry(
                    name,
                    FetchAnswerKind.DIVERGING,
                    leader_epoch,
                    high_watermark,
                    epoch=_int(entry, _EPOCH),
                    end_offset=_int(entry, _END_OFFSET),
                )
            )
        elif kind == FetchAnswerKind.DATA:
            count = _int(entry, _BATCH_COUNT)
            if count < 0:
                raise InvalidRequestError(f"fetch session answer: {name}: negative batchCount")
            start = _int(entry, _LOG_START_OFFSET) if _LOG_START_OFFSET in entry else 0
            if start < 0:
                raise InvalidRequestError(f"fetch session answer: {name}: negative logStartOffset")
            out.append(
                PartitionEntry(
                    name,
                    FetchAnswerKind.DATA,
                    leader_epoch,
                    high_watermark,
                    count,
                    log_start_offset=start,
                )
            )
        else:
            raise InvalidRequestError(f"fetch session answer: {name}: unknown type {kind!r}")
    return session_id, out
