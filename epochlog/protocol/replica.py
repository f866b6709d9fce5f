"""Replication between brokers: the internal endpoints' paths and bodies.

A follower POSTs a `FetchBody` to `FETCH_PATH` and gets back a framed body
(`framing`) whose JSON header is either "data" (the leader's epoch and high
watermark; the stored batches follow) or "diverging" (the follower's log
differs from the leader's: the largest epoch the leader has at or below the
follower's last one, and where it ends). It POSTs an `EpochQueryBody` to
`EPOCH_PATH` and gets an `EpochAnswerBody` (KIP-279). Errors are the client
API's error bodies (`errors.ErrorAnswer`).

The fetch answer's header is on the replication hot path (one per fetch, up
to one per append), so it is a plain dict built and checked by hand; the
request bodies are models. Epochs here use `epochs.NO_EPOCH` for none, and
offsets -1 for an undefined end offset (KIP-279's UNDEFINED_EPOCH_OFFSET).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any, Final, NamedTuple

from pydantic import Field

from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.errors import InvalidRequestError
from epochlog.protocol.wire import BrokerId, NonNegativeInt, PositiveInt, WireModel

FETCH_PATH: Final = "/internal/v1/partitions/{name}/fetch"
EPOCH_PATH: Final = "/internal/v1/partitions/{name}/offsets-for-leader-epoch"

UNDEFINED_OFFSET: Final = -1
"""An end offset the answering log does not know (KIP-279's UNDEFINED_EPOCH_OFFSET)."""

EpochOrNone = Annotated[int, Field(strict=True, ge=NO_EPOCH)]
"""A leader epoch, or NO_EPOCH."""

OffsetOrUndefined = Annotated[int, Field(strict=True, ge=UNDEFINED_OFFSET)]


class FetchBody(WireModel):
    """A follower's fetch: who asks, at which epoch, from which offset (and the epoch of
    the batch before it, so the leader can tell whether the logs diverge)."""

    replica_id: BrokerId
    broker_epoch: NonNegativeInt
    leader_epoch: NonNegativeInt
    fetch_offset: NonNegativeInt
    last_fetched_epoch: EpochOrNone = NO_EPOCH
    max_wait_ms: NonNegativeInt = 0
    """How long the leader may hold a fetch that finds nothing new."""
    max_bytes: PositiveInt = 1 << 20


class EpochQueryBody(WireModel):
    """Where does `epoch` end in the leader's log? (OffsetsForLeaderEpoch)"""

    replica_id: BrokerId
    leader_epoch: NonNegativeInt
    epoch: EpochOrNone


class EpochAnswerBody(WireModel):
    """The largest epoch at or below the one asked for and where it ends; NO_EPOCH and
    UNDEFINED_OFFSET when the leader has none."""

    epoch: EpochOrNone
    end_offset: OffsetOrUndefined


class FetchAnswerKind(enum.StrEnum):
    DATA = "data"
    DIVERGING = "diverging"


class FetchHeader(NamedTuple):
    """The JSON header of a fetch answer; `epoch` and `end_offset` only when diverging."""

    kind: FetchAnswerKind
    leader_epoch: int
    high_watermark: int
    epoch: int = NO_EPOCH
    end_offset: int = UNDEFINED_OFFSET


_TYPE: Final = "type"
_DATA: Final = FetchAnswerKind.DATA.value
_DIVERGING: Final = FetchAnswerKind.DIVERGING.value
_LEADER_EPOCH: Final = "leaderEpoch"
_HIGH_WATERMARK: Final = "highWatermark"
_EPOCH: Final = "epoch"
_END_OFFSET: Final = "endOffset"


def data_header(leader_epoch: int, high_watermark: int) -> dict[str, Any]:
    return {
        _TYPE: _DATA,
        _LEADER_EPOCH: leader_epoch,
        _HIGH_WATERMARK: high_watermark,
    }


def diverging_header(
    leader_epoch: int, high_watermark: int, epoch: int, end_offset: int
) -> dict[str, Any]:
    return {
        _TYPE: _DIVERGING,
        _LEADER_EPOCH: leader_epoch,
        _HIGH_WATERMARK: high_watermark,
        _EPOCH: epoch,
        _END_OFFSET: end_offset,
    }


def decode_fetch_header(header: Mapping[str, Any]) -> FetchHeader:
    kind = header.get(_TYPE)
    leader_epoch, high_watermark = header.get(_LEADER_EPOCH), header.get(_HIGH_WATERMARK)
    if type(leader_epoch) is not int or type(high_watermark) is not int:
        raise InvalidRequestError(f"fetch answer header without epochs: {dict(header)}")
    if kind == FetchAnswerKind.DIVERGING:
        epoch, end = header.get(_EPOCH), header.get(_END_OFFSET)
        if type(epoch) is not int or type(end) is not int:
            raise InvalidRequestError(f"diverging answer without epoch/endOffset: {dict(header)}")
        return FetchHeader(FetchAnswerKind.DIVERGING, leader_epoch, high_watermark, epoch, end)
    if kind != FetchAnswerKind.DATA:
        raise InvalidRequestError(f"fetch answer of unknown type {kind!r}")
    return FetchHeader(FetchAnswerKind.DATA, leader_epoch, high_watermark)
