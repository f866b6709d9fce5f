"""Replication between brokers over HTTP: the internal endpoints' bodies and their client.

A follower sends its `FetchRequest` as JSON to
`POST /internal/v1/partitions/{name}/fetch` (with `maxWaitMs`, how long the
leader may hold a caught-up fetch, and `maxBytes`), and gets back a framed
body (`framing`): a JSON header with `type` "data" (leaderEpoch,
highWatermark, the batches) or "diverging" (leaderEpoch, highWatermark, epoch,
endOffset), then the stored batches, which the follower appends verbatim.
`POST /internal/v1/partitions/{name}/offsets-for-leader-epoch` answers
`{"epoch","endOffset"}`. Errors are the API's error bodies and come back as
the same typed exceptions.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import Field, ValidationError

from epochlog.protocol.batch import RecordBatch
from epochlog.protocol.errors import ERRORS_BY_CODE, EpochlogError, ErrorCode, InvalidRequestError
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, StoredBatch, frame, unframe
from epochlog.protocol.wire import BrokerId, NonNegativeInt, PositiveInt, WireModel
from epochlog_broker.replication.messages import (
    Batch,
    DivergingEpoch,
    EpochEndOffset,
    FetchData,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)

FETCH_PATH: Final = "/internal/v1/partitions/{name}/fetch"
EPOCH_PATH: Final = "/internal/v1/partitions/{name}/offsets-for-leader-epoch"

EpochOrUndefined = Annotated[int, Field(strict=True, ge=-1)]


class FetchBody(WireModel):
    replica_id: BrokerId
    broker_epoch: NonNegativeInt
    leader_epoch: NonNegativeInt
    fetch_offset: NonNegativeInt
    last_fetched_epoch: EpochOrUndefined = -1
    max_wait_ms: NonNegativeInt = 0
    max_bytes: PositiveInt = 1 << 20

    def request(self) -> FetchRequest:
        return FetchRequest(
            self.replica_id,
            self.broker_epoch,
            self.leader_epoch,
            self.fetch_offset,
            self.last_fetched_epoch,
        )


class EpochQueryBody(WireModel):
    replica_id: BrokerId
    leader_epoch: NonNegativeInt
    epoch: EpochOrUndefined

    def request(self) -> OffsetsForLeaderEpochRequest:
        return OffsetsForLeaderEpochRequest(self.replica_id, self.leader_epoch, self.epoch)


class EpochAnswerBody(WireModel):
    epoch: EpochOrUndefined
    end_offset: EpochOrUndefined


M = TypeVar("M", bound=WireModel)


def parse_body(model: type[M], body: bytes) -> M:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, naming the field: "records.0.value: Input should be ..."."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else str(err["msg"]))
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


# -- leader side: answers ----------------------------------------------------------------


def encode_fetch_answer(answer: FetchData | DivergingEpoch) -> bytes:
    if isinstance(answer, DivergingEpoch):
        return frame(
            {
                "type": "diverging",
                "leaderEpoch": answer.leader_epoch,
                "highWatermark": answer.high_watermark,
                "epoch": answer.epoch,
                "endOffset": answer.end_offset,
            },
            [],
        )
    batches: list[StoredBatch] = []
    for b in answer.batches:
        if not isinstance(b.payload, RecordBatch):
            raise TypeError("fetch answers carry the stored batches")
        batches.append((b.base_offset, b.last_offset, b.leader_epoch, b.payload.raw))
    header = {
        "type": "data",
        "leaderEpoch": answer.leader_epoch,
        "highWatermark": answer.high_watermark,
    }
    return frame(header, batches)


def encode_epoch_answer(answer: EpochEndOffset) -> dict[str, Any]:
    return EpochAnswerBody(epoch=answer.epoch, end_offset=answer.end_offset).model_dump(
        mode="json", by_alias=True
    )


# -- follower side: decoding -------------------------------------------------------------


def decode_fetch_answer(body: bytes) -> FetchData | DivergingEpoch:
    header, batches = unframe(body)
    kind = header.get("type")
    ints = {k: header.get(k) for k in ("leaderEpoch", "highWatermark", "epoch", "endOffset")}
    if type(ints["leaderEpoch"]) is not int or type(ints["highWatermark"]) is not int:
        raise InvalidRequestError(f"fetch answer header without epochs: {header}")
    if kind == "diverging":
        if type(ints["epoch"]) is not int or type(ints["endOffset"]) is not int:
            raise InvalidRequestError(f"diverging answer without epoch/endOffset: {header}")
        return DivergingEpoch(
            ints["leaderEpoch"], ints["highWatermark"], ints["epoch"], ints["endOffset"]
        )
    if kind != "data":
        raise InvalidRequestError(f"fetch answer of unknown type {kind!r}")
    return FetchData(
        ints["leaderEpoch"],
        ints["highWatermark"],
        tuple(Batch(b.base_offset, b.last_offset, b.leader_epoch, b) for b in batches),
    )


def error_from_body(status: int, body: bytes) -> EpochlogError | None:
    """The typed error an error body names; None when it names none (not our server)."""
    try:
        data = json.loads(body)
        err = data["error"]
        cls = ERRORS_BY_CODE[ErrorCode(err["code"])]
    except (ValueError, KeyError, TypeError):
        return None
    details = {k: v for k, v in err.items() if k not in ("code", "message", "retriable")}
    return cls(str(err.get("message", f"HTTP {status}")), **details)


class ReplicaRequestFailed(Exception):
    """No usable answer (network error, timeout, or a body that is not ours)."""


class ReplicaClient:
    """Sends replica requests to other brokers over one pooled aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def _post(self, url: str, payload: dict[str, Any], timeout_s: float) -> bytes:
        try:
            async with self.session.post(
                url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                body = await resp.read()
                if resp.status == 200:
                    return body
                error = error_from_body(resp.status, body)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ReplicaRequestFailed(f"{url}: {type(exc).__name__} {exc}") from exc
        if error is None:
            raise ReplicaRequestFailed(f"{url}: HTTP {resp.status}")
        raise error

    async def fetch(
        self,
        base_url: str,
        partition: str,
        request: FetchRequest,
        *,
        max_wait_ms: int,
        max_bytes: int,
        timeout_s: float,
    ) -> FetchData | DivergingEpoch:
        body = FetchBody(
            replica_id=request.replica_id,
            broker_epoch=request.broker_epoch,
            leader_epoch=request.leader_epoch,
            fetch_offset=request.fetch_offset,
            last_fetched_epoch=request.last_fetched_epoch,
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
        ).model_dump(mode="json", by_alias=True)
        url = base_url + FETCH_PATH.format(name=quote(partition, safe=""))
        raw = await self._post(url, body, timeout_s + max_wait_ms / 1000)
        try:
            return decode_fetch_answer(raw)
        except InvalidRequestError as exc:
            raise ReplicaRequestFailed(f"{url}: {exc.message}") from exc

    async def offsets_for_leader_epoch(
        self,
        base_url: str,
        partition: str,
        request: OffsetsForLeaderEpochRequest,
        *,
        timeout_s: float,
    ) -> EpochEndOffset:
        body = EpochQueryBody(
            replica_id=request.replica_id, leader_epoch=request.leader_epoch, epoch=request.epoch
        ).model_dump(mode="json", by_alias=True)
        url = base_url + EPOCH_PATH.format(name=quote(partition, safe=""))
        raw = await self._post(url, body, timeout_s)
        try:
            answer = EpochAnswerBody.model_validate_json(raw)
        except ValidationError as exc:
            raise ReplicaRequestFailed(f"{url}: {describe_validation_error(exc)}") from exc
        return EpochEndOffset(answer.epoch, answer.end_offset)


__all__ = [
    "BATCH_CONTENT_TYPE",
    "EPOCH_PATH",
    "FETCH_PATH",
    "EpochQueryBody",
    "FetchBody",
    "ReplicaClient",
    "ReplicaRequestFailed",
    "decode_fetch_answer",
    "encode_epoch_answer",
    "encode_fetch_answer",
    "error_from_body",
    "parse_body",
]
