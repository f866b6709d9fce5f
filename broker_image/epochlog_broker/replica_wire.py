"""Replication between brokers over HTTP: the replica bodies as the core's messages, and
their client.

The bodies are `epochlog.protocol.replica`: a follower sends each request of its
fetch session with a leader broker (`SessionFetchRequest`) as a
`SessionFetchBody` to `POST /internal/v1/fetch-session`, and gets back a framed
body whose header lists the partitions with news and whose batches follow in
the same order (`SessionFetchAnswer`). `POST
/internal/v1/partitions/{name}/offsets-for-leader-epoch` answers an
`EpochAnswerBody`. Both requests name the follower's brokerEpoch in the query
(`Params.BROKER_EPOCH`) as well, which the leader checks with the certificate
before it reads the body. Errors are the API's error bodies and come back as
the same typed exceptions, per partition inside a session answer, or for the
whole request.
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from epochlog.protocol.batch import RecordBatch
from epochlog.protocol.bodies import Params, decode_model
from epochlog.protocol.errors import (
    EpochlogError,
    InvalidRequestError,
    decode_error_answer,
    decode_error_body,
)
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, StoredBatch, frame, unframe
from epochlog.protocol.replica import (
    EPOCH_PATH,
    SESSION_FETCH_PATH,
    EpochAnswerBody,
    EpochQueryBody,
    FetchAnswerKind,
    PartitionFetchBody,
    SessionFetchBody,
    data_entry,
    decode_session_header,
    diverging_entry,
    error_entry,
    session_header,
)
from epochlog.protocol.wire import WireModel, describe_validation_error
from epochlog_broker.replication.fetch_session import (
    PartitionAnswer,
    SessionFetchAnswer,
    SessionFetchRequest,
)
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


def session_request(body: SessionFetchBody) -> SessionFetchRequest:
    return SessionFetchRequest(
        replica_id=body.replica_id,
        broker_epoch=body.broker_epoch,
        session_id=body.session_id,
        session_epoch=body.session_epoch,
        partitions=tuple(
            (
                p.partition,
                FetchRequest(
                    body.replica_id,
                    body.broker_epoch,
                    p.leader_epoch,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    p.persisted_log_end_offset,
                    p.log_start_offset,
                ),
            )
            for p in body.partitions
        ),
        forgotten=tuple(body.forgotten),
        max_wait_ms=body.max_wait_ms,
        max_bytes=body.max_bytes,
        partition_max_bytes=body.partition_max_bytes,
    )


def session_body(request: SessionFetchRequest) -> dict[str, Any]:
    return SessionFetchBody(
        replica_id=request.replica_id,
        broker_epoch=request.broker_epoch,
        session_id=request.session_id,
        session_epoch=request.session_epoch,
        partitions=[
            PartitionFetchBody(
                partition=name,
                leader_epoch=f.leader_epoch,
                fetch_offset=f.fetch_offset,
                last_fetched_epoch=f.last_fetched_epoch,
                persisted_log_end_offset=f.persisted,
                log_start_offset=f.log_start_offset,
            )
            for name, f in request.partitions
        ],
        forgotten=list(request.forgotten),
        max_wait_ms=request.max_wait_ms,
        max_bytes=request.max_bytes,
        partition_max_bytes=request.partition_max_bytes,
    ).model_dump(mode="json")


def epoch_query(body: EpochQueryBody) -> OffsetsForLeaderEpochRequest:
    return OffsetsForLeaderEpochRequest(body.replica_id, body.leader_epoch, body.epoch)


# -- leader side: answers ----------------------------------------------------------------


def encode_session_answer(answer: SessionFetchAnswer) -> bytes:
    entries: list[dict[str, Any]] = []
    batches: list[StoredBatch] = []
    for name, pa in answer.partitions:
        if isinstance(pa, EpochlogError):
            entries.append(error_entry(name, pa.to_dict()["error"]))
        elif isinstance(pa, DivergingEpoch):
            entries.append(
                diverging_entry(name, pa.leader_epoch, pa.high_watermark, pa.epoch, pa.end_offset)
            )
        else:
            for b in pa.batches:
                if not isinstance(b.payload, RecordBatch):
                    raise TypeError("fetch answers carry the stored batches")
                batches.append((b.base_offset, b.last_offset, b.leader_epoch, b.payload.raw))
            entries.append(
                data_entry(
                    name, pa.leader_epoch, pa.high_watermark, len(pa.batches), pa.log_start_offset
                )
            )
    return frame(session_header(answer.session_id, entries), batches)


def encode_epoch_answer(answer: EpochEndOffset) -> EpochAnswerBody:
    return EpochAnswerBody(epoch=answer.epoch, end_offset=answer.end_offset)


# -- follower side: decoding -------------------------------------------------------------


def decode_session_answer(body: bytes) -> SessionFetchAnswer:
    """A session answer; every batch checked (framing, CRC). Raises InvalidRequestError
    for a body that does not hold together."""
    raw_header, batches = unframe(body)
    session_id, entries = decode_session_header(raw_header)
    if sum(e.batch_count for e in entries) != len(batches):
        raise InvalidRequestError(
            f"fetch session answer: entries count {sum(e.batch_count for e in entries)} "
            f"batches, the body holds {len(batches)}"
        )
    out: list[tuple[str, PartitionAnswer]] = []
    pos = 0
    for e in entries:
        if e.kind is FetchAnswerKind.ERROR:
            decoded = decode_error_body(e.error)
            if decoded is None or decoded.error is None:
                raise InvalidRequestError(f"fetch session answer: {e.partition}: unknown error")
            out.append((e.partition, decoded.error))
        elif e.kind is FetchAnswerKind.DIVERGING:
            out.append(
                (
                    e.partition,
                    DivergingEpoch(e.leader_epoch, e.high_watermark, e.epoch, e.end_offset),
                )
            )
        else:
            mine = batches[pos : pos + e.batch_count]
            pos += e.batch_count
            out.append(
                (
                    e.partition,
                    FetchData(
                        e.leader_epoch,
                        e.high_watermark,
                        tuple(Batch(b.base_offset, b.last_offset, b.leader_epoch, b) for b in mine),
                        e.log_start_offset,
                    ),
                )
            )
    return SessionFetchAnswer(session_id, tuple(out))


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

    async def _post(
        self, url: str, payload: dict[str, Any], broker_epoch: int, timeout_s: float
    ) -> bytes:
        # The brokerEpoch goes in the query too: the leader checks it, with the
        # certificate, before it reads the body.
        try:
            async with self.session.post(
                url,
                json=payload,
                params={Params.BROKER_EPOCH: str(broker_epoch)},
                timeout=aiohttp.ClientTimeout(total=timeout_s),
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

    async def session_fetch(
        self, base_url: str, request: SessionFetchRequest, *, timeout_s: float
    ) -> SessionFetchAnswer:
        url = base_url + SESSION_FETCH_PATH
        raw = await self._post(
            url,
            session_body(request),
            request.broker_epoch,
            timeout_s + request.max_wait_ms / 1000,
        )
        try:
            return decode_session_answer(raw)
        except InvalidRequestError as exc:
            raise ReplicaRequestFailed(f"{url}: {exc.message}") from exc

    async def offsets_for_leader_epoch(
        self,
        base_url: str,
        partition: str,
        request: OffsetsForLeaderEpochRequest,
        *,
        broker_epoch: int,
        timeout_s: float,
    ) -> EpochEndOffset:
        body = EpochQueryBody(
            replica_id=request.replica_id, leader_epoch=request.leader_epoch, epoch=request.epoch
        ).model_dump(mode="json")
        url = base_url + EPOCH_PATH.format(name=quote(partition, safe=""))
        raw = await self._post(url, body, broker_epoch, timeout_s)
        try:
            answer = EpochAnswerBody.model_validate_json(raw)
        except ValidationError as exc:
            raise ReplicaRequestFailed(f"{url}: {describe_validation_error(exc)}") from exc
        return EpochEndOffset(answer.epoch, answer.end_offset)


__all__ = [
    "BATCH_CONTENT_TYPE",
    "EPOCH_PATH",
    "SESSION_FETCH_PATH",
    "EpochQueryBody",
    "ReplicaClient",
    "ReplicaRequestFailed",
    "SessionFetchBody",
    "decode_session_answer",
    "encode_epoch_answer",
    "encode_session_answer",
    "epoch_query",
    "error_from_body",
    "parse_body",
    "session_body",
    "session_request",
]
