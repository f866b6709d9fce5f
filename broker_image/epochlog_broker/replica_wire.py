"""Replication between brokers over HTTP: the replica bodies as the core's messages, and
their client.

The bodies are `epochlog.protocol.replica`: a follower sends its
`FetchRequest` as a `FetchBody` to `POST /internal/v1/partitions/{name}/fetch`
(with `maxWaitMs`, how long the leader may hold a caught-up fetch, and
`maxBytes`), and gets back a framed body (`framing`) whose header is "data"
(then the stored batches, which the follower appends verbatim) or
"diverging". `POST /internal/v1/partitions/{name}/offsets-for-leader-epoch`
answers an `EpochAnswerBody`. Errors are the API's error bodies and come back
as the same typed exceptions.
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from epochlog.protocol.batch import RecordBatch
from epochlog.protocol.bodies import decode_model
from epochlog.protocol.errors import EpochlogError, InvalidRequestError, decode_error_answer
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, StoredBatch, frame, unframe
from epochlog.protocol.replica import (
    EPOCH_PATH,
    FETCH_PATH,
    EpochAnswerBody,
    EpochQueryBody,
    FetchAnswerKind,
    FetchBody,
    data_header,
    decode_fetch_header,
    diverging_header,
)
from epochlog.protocol.wire import WireModel, describe_validation_error
from epochlog_broker.replication.messages import (
    Batch,
    DivergingEpoch,
    EpochEndOffset,
    FetchData,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)

M = TypeVar("M", bound=WireModel)


def parse_body(model: type[M], body: bytes) -> M:
    """A replica request body; problems are INVALID_REQUEST naming the field."""
    return decode_model(model, body)


def fetch_request(body: FetchBody) -> FetchRequest:
    return FetchRequest(
        body.replica_id,
        body.broker_epoch,
        body.leader_epoch,
        body.fetch_offset,
        body.last_fetched_epoch,
    )


def epoch_query(body: EpochQueryBody) -> OffsetsForLeaderEpochRequest:
    return OffsetsForLeaderEpochRequest(body.replica_id, body.leader_epoch, body.epoch)


# -- leader side: answers ----------------------------------------------------------------


def encode_fetch_answer(answer: FetchData | DivergingEpoch) -> bytes:
    if isinstance(answer, DivergingEpoch):
        header = diverging_header(
            answer.leader_epoch, answer.high_watermark, answer.epoch, answer.end_offset
        )
        return frame(header, [])
    batches: list[StoredBatch] = []
    for b in answer.batches:
        if not isinstance(b.payload, RecordBatch):
            raise TypeError("fetch answers carry the stored batches")
        batches.append((b.base_offset, b.last_offset, b.leader_epoch, b.payload.raw))
    return frame(data_header(answer.leader_epoch, answer.high_watermark), batches)


def encode_epoch_answer(answer: EpochEndOffset) -> EpochAnswerBody:
    return EpochAnswerBody(epoch=answer.epoch, end_offset=answer.end_offset)


# -- follower side: decoding -------------------------------------------------------------


def decode_fetch_answer(body: bytes) -> FetchData | DivergingEpoch:
    raw_header, batches = unframe(body)
    header = decode_fetch_header(raw_header)
    if header.kind is FetchAnswerKind.DIVERGING:
        return DivergingEpoch(
            header.leader_epoch, header.high_watermark, header.epoch, header.end_offset
        )
    return FetchData(
        header.leader_epoch,
        header.high_watermark,
        tuple(Batch(b.base_offset, b.last_offset, b.leader_epoch, b) for b in batches),
    )


def error_from_body(status: int, body: bytes) -> EpochlogError | None:
    """The typed error an error body names; None when it names none (not our server, or a
    code this broker does not know)."""
    decoded = decode_error_answer(body)
    if decoded is None or decoded.error is None:
        return None
    if "message" not in decoded.body.model_fields_set:
        return type(decoded.error)(f"HTTP {status}", **decoded.body.details())
    return decoded.error


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
        ).model_dump(mode="json")
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
        ).model_dump(mode="json")
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
    "epoch_query",
    "error_from_body",
    "fetch_request",
    "parse_body",
]
