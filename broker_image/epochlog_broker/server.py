"""The broker's HTTP server: the client API and the replication endpoints, on aiohttp.

Routes (DESIGN.md, "HTTP API"):

    POST /v1/partitions/{name}/records?acks=&timeoutMs=&leaderEpoch=&encoding=
    GET  /v1/partitions/{name}/records?offset=&maxRecords=&maxBytes=&maxWaitMs=&leaderEpoch=
    GET  /v1/partitions/{name}/offsets?at=earliest|latest|<ms>&leaderEpoch=
    GET  /v1/partitions/{name}/epochs/{epoch}?leaderEpoch=       (a reader's epoch query)
    GET  /v1/partitions
    POST /v1/produce?acks=&timeoutMs=&encoding=    (many partitions, `protocol.multi`;
    POST /v1/fetch                                  each answered on its own)
    POST /v1/list-offsets
    GET  /healthz, /readyz, /metrics   (/readyz: 503 while a replica is offline after
                                        a storage error, naming it and why)
    GET  /openapi.json                  (this API as OpenAPI 3.1, `protocol.openapi`)
    POST /internal/v1/fetch-session?brokerEpoch=                  (replica fetch session)
    POST /internal/v1/partitions/{name}/offsets-for-leader-epoch?brokerEpoch=
                                                                  (divergence query)

Produce takes JSON (`http_api`) or one encoded batch with Content-Type
`application/vnd.epochlog.batch` (`client_batch`); a read that accepts
`application/vnd.epochlog.batch` gets the stored batches framed (`framing`):
its header holds highWatermark, logStartOffset, leaderEpoch and the `offset`
asked for; the reader skips records below `offset` (the first batch may start
earlier) and at or above highWatermark. Every body and parameter name is
`epochlog.protocol.bodies` (client API), `.replica` (replication) or
`.errors` (error bodies).

Errors are `{"error":{"code","message","retriable","leader","leaderEpoch",...}}`
with the protocol's HTTP status; `leaderAddress` is added when the leader's
URL is known. The handlers only parse, call `Broker` and render; the broker
logic is in `broker` and the core.

`serve` runs a broker until SIGTERM or SIGINT, then shuts down gracefully: a
controlled shutdown first (`Broker.controlled_shutdown`: the controller moves its
leaderships and ISR places while it keeps serving), then the
listening socket closes, loops stop, waiting requests are answered, in-flight
requests finish, and the logs are flushed, checkpointed and closed (clean
shutdown markers, so the next start skips the full recovery scan).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import posixpath
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Final

import structlog
from aiohttp import web

from epochlog import collector
from epochlog.http_limits import LimitedSite, read_body
from epochlog.protocol.batch import Record, RecordBatch
from epochlog.protocol.bodies import (
    MAX_RECORDS_PER_READ,
    READER_EPOCH_PATH,
    READER_EPOCH_RANGE,
    DeleteRecordsAnswer,
    Encoding,
    EpochEndAnswer,
    HealthAnswer,
    OffsetsAnswer,
    Params,
    ProduceAnswer,
    ReadyAnswer,
    dump_json,
    encode_read_answer,
    read_header,
)
from epochlog.protocol.errors import (
    INTERNAL_ERROR,
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    EpochlogError,
    ErrorAnswer,
    ErrorBody,
    ErrorCode,
    InvalidRequestError,
    RecordTooLargeError,
    StorageError,
    TopicAuthorizationFailedError,
    error_answer,
    generic_error_answer,
)
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, frame, stored
from epochlog.protocol.multi import (
    FETCH_MANY_PATH,
    LIST_OFFSETS_MANY_PATH,
    PRODUCE_MANY_PATH,
    FetchedPartition,
    ListOffsetsManyAnswer,
    PartitionOffset,
    PartitionProduced,
    PartitionRecords,
    ProduceManyAnswer,
    decode_fetch_many,
    decode_framed_produce,
    decode_list_offsets_many,
    decode_produce_many,
    encode_fetch_answer,
)
from epochlog.protocol.openapi import render as render_openapi
from epochlog.protocol.replica import (
    EPOCH_PATH,
    SESSION_FETCH_PATH,
    EpochQueryBody,
    SessionFetchBody,
)
from epochlog.protocol.wire import WireModel
from epochlog.security.access import Operation
from epochlog.security.principal import Principal
from epochlog.security.tls import CertReloader
from epochlog_broker.broker import Broker
from epochlog_broker.client_batch import ClientBatch
from epochlog_broker.config import BrokerConfig
from epochlog_broker.core import BatchReadResult, PreparedBatch, ProducerFields, ReadAsk
from epochlog_broker.gate import Gate
from epochlog_broker.http_api import (
    acks_param,
    at_param,
    check_records,
    encoding_param,
    int_param,
    optional_epoch,
    parse_produce_json,
)
from epochlog_broker.log.config import MiB
from epochlog_broker.log.storage_id import StorageIdError
from epochlog_broker.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from epochlog_broker.replica_wire import (
    encode_epoch_answer,
    encode_session_answer,
    epoch_query,
    parse_body,
    session_request,
)
from epochlog_broker.replication.messages import Acks
from epochlog_broker.token_reviews import TokenReviews

log = structlog.get_logger("epochlog.broker")
OPENAPI: Final = render_openapi().encode()
"""The API as `openapi/broker.json` holds it, served at GET /openapi.json."""

BROKER_KEY = web.AppKey("broker", Broker)
GATE_KEY = web.AppKey("gate", Gate)
PRINCIPAL = "epochlog.principal"
_REFUSALS = (
    AuthenticationFailedError,
    TopicAuthorizationFailedError,
    ClusterAuthorizationFailedError,
)
DEFAULT_MAX_RECORDS = 500
DEFAULT_MAX_BYTES = 1 * MiB

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _answer(model: WireModel, status: int = 200) -> web.Response:
    return _json(dump_json(model), status)


def _error(answer: ErrorAnswer, status: int) -> web.Response:
    # Details are whatever an error was raised with: anything JSON cannot hold is shown
    # as text rather than failing the answer.
    return _json(json.dumps(answer.dump(), separators=(",", ":"), default=str).encode(), status)


def error_response(exc: EpochlogError, broker: Broker, partition: str | None) -> web.Response:
    return _error(_error_answer(exc, broker, partition), exc.http_status)


def _error_answer(exc: EpochlogError, broker: Broker, partition: str | None) -> ErrorAnswer:
    leader, epoch = broker.leader_hint(partition) if partition else (None, None)
    return error_answer(exc, leader=leader, leader_epoch=epoch, leader_url=broker.config.peer_url)


def _partition_error(exc: BaseException, broker: Broker, partition: str) -> ErrorBody:
    """One partition's error in an answer of many, with the hints a one-partition error
    answer would carry (none for a refusal: who may not ask learns nothing)."""
    if not isinstance(exc, EpochlogError):
        log.error("partition_request_failed", partition=partition, exc_info=exc)
        message = f"{type(exc).__name__}: {exc}"
        return generic_error_answer(INTERNAL_ERROR, message, retriable=True).error
    if isinstance(exc, StorageError):
        broker.run_deferred()
    hinted = None if isinstance(exc, _REFUSALS) else partition
    return _error_answer(exc, broker, hinted).error


def _answer_many(model: WireModel) -> web.Response:
    # Unset fields stay out: a partition's entry says its offsets or its error.
    return _json(model.model_dump_json(exclude_unset=True).encode())


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    broker = request.app[BROKER_KEY]
    try:
        return await handler(request)
    except EpochlogError as exc:
        if isinstance(exc, StorageError):
            broker.run_deferred()
        # Who may not ask learns nothing about the partition, its leader included.
        hinted = None if isinstance(exc, _REFUSALS) else request.match_info.get("name")
        return error_response(exc, broker, hinted)
    except web.HTTPRequestEntityTooLarge:
        too_large = RecordTooLargeError(
            f"request body exceeds the limit of {broker.config.max_request_bytes} bytes"
        )
        return error_response(too_large, broker, request.match_info.get("name"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = f"{request.method} {request.path}: {exc.reason}"
        answer = generic_error_answer(ErrorCode.INVALID_REQUEST, message, retriable=False)
        return _error(answer, exc.status)
    except Exception as exc:
        log.exception("request_failed", method=request.method, path=request.path)
        message = f"{type(exc).__name__}: {exc}"
        return _error(generic_error_answer(INTERNAL_ERROR, message, retriable=True), 500)


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Every route of the API listener, /healthz included: unauthenticated probes go to
    # the probe listener.
    request[PRINCIPAL] = await request.app[GATE_KEY].principal(request)
    return await handler(request)


def _allow(request: web.Request, operation: Operation, name: str) -> None:
    topic = request.app[BROKER_KEY].topic_of(name)
    request.app[GATE_KEY].check_topic(_who(request), operation, topic)


def _who(request: web.Request) -> Principal:
    principal: Principal = request[PRINCIPAL]
    return principal


async def _body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise RecordTooLargeError(
            f"request body of {request.content_length} bytes exceeds the limit of {limit}"
        )
    return await read_body(request, request.app[BROKER_KEY].config.http)


# -- client API --------------------------------------------------------------------------


async def produce(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    cfg = broker.config
    name = request.match_info["name"]
    q = request.query
    started = time.perf_counter()
    acks_label = q.get(Params.ACKS, "all")
    result = "ok"
    try:
        _allow(request, Operation.WRITE, name)
        acks = acks_param(q)
        timeout_ms = int_param(
            q, Params.TIMEOUT_MS, cfg.default_timeout_ms, minimum=1, maximum=cfg.max_timeout_ms
        )
        leader_epoch = optional_epoch(q)
        body = await _body(request, cfg.max_request_bytes)
        records: list[Record] | PreparedBatch
        if request.content_type == BATCH_CONTENT_TYPE:
            batch = ClientBatch.parse(body, max_record_bytes=cfg.max_record_bytes)
            records, producer = batch, batch.producer
            count, payload = batch.record_count, batch.value_bytes
        else:
            records, producer, payload = parse_produce_json(
                body, encoding=encoding_param(q), max_record_bytes=cfg.max_record_bytes
            )
            count = len(records)
        done = await broker.produce(
            name,
            records,
            acks=acks,
            timeout_ms=timeout_ms,
            leader_epoch=leader_epoch,
            producer=producer,
        )
    except EpochlogError as exc:
        result = str(exc.code)
        raise
    finally:
        m = broker.metrics
        if acks_label not in ("all", "leader", "none"):
            acks_label = "invalid"
        m.produce_requests.labels(broker.metric_label(name), acks_label, result).inc()
        m.produce_latency.labels(acks_label).observe(time.perf_counter() - started)
    broker.metrics.produce_records.labels(name).inc(count)
    broker.metrics.produce_bytes.labels(name).inc(payload)
    if acks is Acks.NONE:
        return _answer(ProduceAnswer(leader_epoch=done.leader_epoch))
    return _answer(
        ProduceAnswer(
            base_offset=done.base_offset,
            last_offset=done.last_offset,
            leader_epoch=done.leader_epoch,
        )
    )


async def read_records(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    cfg = broker.config
    name = request.match_info["name"]
    q = request.query
    started = time.perf_counter()
    result = "ok"
    try:
        _allow(request, Operation.READ, name)
        offset = int_param(q, Params.OFFSET)
        max_records = int_param(
            q, Params.MAX_RECORDS, DEFAULT_MAX_RECORDS, minimum=1, maximum=MAX_RECORDS_PER_READ
        )
        max_bytes = int_param(
            q, Params.MAX_BYTES, DEFAULT_MAX_BYTES, minimum=1, maximum=cfg.max_request_bytes
        )
        max_wait_ms = int_param(q, Params.MAX_WAIT_MS, 0, minimum=0, maximum=cfg.max_wait_ms)
        leader_epoch = optional_epoch(q)
        if BATCH_CONTENT_TYPE in request.headers.get("Accept", ""):
            batches = await broker.read_batches(
                name,
                offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
                leader_epoch=leader_epoch,
            )
            header = read_header(
                offset=offset,
                high_watermark=batches.high_watermark,
                log_start_offset=batches.log_start_offset,
                leader_epoch=batches.leader_epoch,
            )
            body = frame(header, [stored(b) for b in batches.batches])
            broker.metrics.fetch_bytes.labels(name, "consumer").inc(len(body))
            return web.Response(body=body, content_type=BATCH_CONTENT_TYPE)
        encoding = encoding_param(q)
        res = await broker.read(
            name,
            offset,
            max_records=max_records,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            leader_epoch=leader_epoch,
        )
        m = broker.metrics
        m.fetch_records.labels(name).inc(len(res.records))
        m.fetch_bytes.labels(name, "consumer").inc(
            sum(len(r.value or b"") + len(r.key or b"") for r in res.records)
        )
        return _json(
            encode_read_answer(
                res.records,
                encoding=encoding,
                high_watermark=res.high_watermark,
                log_start_offset=res.log_start_offset,
                leader_epoch=res.leader_epoch,
            )
        )
    except EpochlogError as exc:
        result = str(exc.code)
        raise
    finally:
        broker.metrics.fetch_requests.labels(broker.metric_label(name), "consumer", result).inc()
        broker.metrics.fetch_latency.labels("consumer").observe(time.perf_counter() - started)


# -- requests of many partitions (`epochlog.protocol.multi`) ------------------------------


async def produce_many(request: web.Request) -> web.Response:
    """One produce of many partitions: each appended (and acknowledged) on its own, the
    answer once all of them are, with each partition's offsets or error."""
    broker = request.app[BROKER_KEY]
    cfg = broker.config
    q = request.query
    acks = acks_param(q)
    timeout_ms = int_param(
        q, Params.TIMEOUT_MS, cfg.default_timeout_ms, minimum=1, maximum=cfg.max_timeout_ms
    )
    encoding = encoding_param(q)
    body = await _body(request, cfg.max_request_bytes)
    parts: list[tuple[str, int | None, Callable[[], _Parsed]]] = []
    if request.content_type == BATCH_CONTENT_TYPE:
        for name, epoch, raw in decode_framed_produce(body):
            parts.append((name, epoch, functools.partial(_parse_batch, raw, cfg.max_record_bytes)))
    else:
        for p in decode_produce_many(body):
            parse = functools.partial(_parse_json, p, encoding, cfg.max_record_bytes)
            parts.append((p.partition, p.leader_epoch, parse))
    produced = await asyncio.gather(
        *(
            _produce_one(request, name, epoch, parse, acks=acks, timeout_ms=timeout_ms)
            for name, epoch, parse in parts
        )
    )
    return _answer_many(ProduceManyAnswer(partitions=tuple(produced)))


_Parsed = tuple["list[Record] | PreparedBatch", "ProducerFields | None", int, int]
"""What a produce appends: records, producer fields, record count, payload bytes."""


def _parse_batch(raw: bytes, max_record_bytes: int) -> _Parsed:
    batch = ClientBatch.parse(raw, max_record_bytes=max_record_bytes)
    return batch, batch.producer, batch.record_count, batch.value_bytes


def _parse_json(part: PartitionRecords, encoding: Encoding, max_record_bytes: int) -> _Parsed:
    records, producer, payload = check_records(
        part.records, part.producer, encoding=encoding, max_record_bytes=max_record_bytes
    )
    return records, producer, len(records), payload


async def _produce_one(
    request: web.Request,
    name: str,
    leader_epoch: int | None,
    parse: Callable[[], _Parsed],
    *,
    acks: Acks,
    timeout_ms: int,
) -> PartitionProduced:
    broker = request.app[BROKER_KEY]
    started = time.perf_counter()
    result = "ok"
    try:
        _allow(request, Operation.WRITE, name)
        records, producer, count, payload = parse()
        done = await broker.produce(
            name,
            records,
            acks=acks,
            timeout_ms=timeout_ms,
            leader_epoch=leader_epoch,
            producer=producer,
        )
    except Exception as exc:
        result = str(exc.code) if isinstance(exc, EpochlogError) else str(INTERNAL_ERROR)
        return PartitionProduced(partition=name, error=_partition_error(exc, broker, name))
    finally:
        m = broker.metrics
        m.produce_requests.labels(broker.metric_label(name), acks.value, result).inc()
        m.produce_latency.labels(acks.value).observe(time.perf_counter() - started)
    broker.metrics.produce_records.labels(name).inc(count)
    broker.metrics.produce_bytes.labels(name).inc(payload)
    if acks is Acks.NONE:
        return PartitionProduced(partition=name, leader_epoch=done.leader_epoch)
    return PartitionProduced(
        partition=name,
        base_offset=done.base_offset,
        last_offset=done.last_offset,
        leader_epoch=done.leader_epoch,
    )


async def fetch_many(request: web.Request) -> web.Response:
    """One fetch of many partitions (binary answer): held while none has records, up to
    maxWaitMs; each partition's batches or error."""
    broker = request.app[BROKER_KEY]
    cfg = broker.config
    started = time.perf_counter()
    parsed = decode_fetch_many(await _body(request, cfg.max_request_bytes))
    if parsed.max_wait_ms > cfg.max_wait_ms:
        raise InvalidRequestError(
            f"{Params.MAX_WAIT_MS} must be <= {cfg.max_wait_ms}, got {parsed.max_wait_ms}"
        )
    # As Kafka's fetch.max.bytes against the broker's limit: the smaller one holds.
    max_bytes = min(parsed.max_bytes, cfg.max_request_bytes)
    refused: dict[str, EpochlogError] = {}
    asks: list[ReadAsk] = []
    for p in parsed.partitions:
        try:
            _allow(request, Operation.READ, p.partition)
        except EpochlogError as exc:
            refused[p.partition] = exc
            continue
        asks.append(ReadAsk(p.partition, p.offset, p.max_bytes, p.leader_epoch))
    results = await broker.read_many(asks, max_bytes=max_bytes, max_wait_ms=parsed.max_wait_ms)
    by_name = {ask.name: res for ask, res in zip(asks, results, strict=True)}
    parts: list[tuple[FetchedPartition, list[RecordBatch]]] = []
    m = broker.metrics
    for p in parsed.partitions:
        name = p.partition
        res: BatchReadResult | EpochlogError = refused.get(name) or by_name[name]
        if isinstance(res, EpochlogError):
            m.fetch_requests.labels(broker.metric_label(name), "consumer", str(res.code)).inc()
            error = _partition_error(res, broker, name)
            parts.append((FetchedPartition(partition=name, offset=p.offset, error=error), []))
            continue
        m.fetch_requests.labels(broker.metric_label(name), "consumer", "ok").inc()
        if res.batches:
            m.fetch_bytes.labels(name, "consumer").inc(sum(len(b.raw) for b in res.batches))
        entry = FetchedPartition(
            partition=name,
            offset=p.offset,
            high_watermark=res.high_watermark,
            log_start_offset=res.log_start_offset,
            leader_epoch=res.leader_epoch,
        )
        parts.append((entry, res.batches))
    m.fetch_latency.labels("consumer").observe(time.perf_counter() - started)
    return web.Response(body=encode_fetch_answer(parts), content_type=BATCH_CONTENT_TYPE)


async def list_offsets_many(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    parsed = decode_list_offsets_many(await _body(request, broker.config.max_request_bytes))
    out = []
    for p in parsed:
        name = p.partition
        try:
            _allow(request, Operation.DESCRIBE, name)
            offset, epoch = broker.list_offsets(name, p.at, p.leader_epoch)
        except Exception as exc:
            out.append(PartitionOffset(partition=name, error=_partition_error(exc, broker, name)))
            continue
        out.append(PartitionOffset(partition=name, offset=offset, leader_epoch=epoch))
    return _answer_many(ListOffsetsManyAnswer(partitions=tuple(out)))


async def list_offsets(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    name = request.match_info["name"]
    _allow(request, Operation.DESCRIBE, name)
    at = at_param(request.query)
    offset, epoch = broker.list_offsets(name, at, optional_epoch(request.query))
    return _answer(OffsetsAnswer(offset=offset, leader_epoch=epoch))


async def epoch_end(request: web.Request) -> web.Response:
    """A reader's epoch query (KIP-320): authorized as a read of the topic, since it tells
    what the log holds."""
    broker = request.app[BROKER_KEY]
    name = request.match_info["name"]
    _allow(request, Operation.READ, name)
    epoch = int_param(
        request.match_info,
        "epoch",
        minimum=READER_EPOCH_RANGE.minimum,
        maximum=READER_EPOCH_RANGE.maximum,
    )
    answer, leader_epoch = broker.epoch_end(name, epoch, optional_epoch(request.query))
    return _answer(
        EpochEndAnswer(epoch=answer.epoch, end_offset=answer.end_offset, leader_epoch=leader_epoch)
    )


async def delete_records(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    name = request.match_info["name"]
    _allow(request, Operation.WRITE, name)
    cfg = broker.config
    before = int_param(request.query, Params.BEFORE_OFFSET, minimum=-1)
    # As produce's: the request timeout (30 s by default, as the DeleteRecords of
    # Kafka's admin client) bounds the wait for the followers' log starts.
    timeout_ms = int_param(
        request.query,
        Params.TIMEOUT_MS,
        cfg.default_timeout_ms,
        minimum=1,
        maximum=cfg.max_timeout_ms,
    )
    start, epoch = await broker.delete_records(
        name, before, optional_epoch(request.query), timeout_ms
    )
    return _answer(DeleteRecordsAnswer(log_start_offset=start, leader_epoch=epoch))


async def list_partitions(request: web.Request) -> web.Response:
    broker, gate, who = request.app[BROKER_KEY], request.app[GATE_KEY], _who(request)
    listing = broker.describe()
    # As Kafka's metadata: the partitions of topics the principal may describe, only.
    shown = tuple(
        p
        for p in listing.partitions
        if gate.allows(who, Operation.DESCRIBE, broker.topic_of(p.name))
    )
    if len(shown) != len(listing.partitions):
        listing = listing.model_copy(update={"partitions": shown})
    return _answer(listing)


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=OPENAPI, content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    core = broker.core
    answer = HealthAnswer(
        status="failed" if broker.failed else "ok",
        error=broker.failed,
        broker_id=broker.config.broker_id,
        broker_epoch=core.broker_epoch if core else None,
        restarts=broker.restarts,
    )
    return _answer(answer, 503 if broker.failed else 200)


async def readyz(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    ready, waiting = broker.readiness()
    broker.metrics.ready.set(1 if ready else 0)
    return _answer(ReadyAnswer(ready=ready, waiting=tuple(waiting)), 200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    broker.metrics.ready.set(1 if broker.readiness()[0] else 0)
    return web.Response(
        body=broker.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE}
    )


# -- replication -------------------------------------------------------------------------


def _replica_caller(request: web.Request) -> int | None:
    """Who sends a replication request, checked before its body is read, so that nobody
    but a broker can make the broker parse one or learn what is wrong with it: a broker's
    certificate, and the brokerEpoch the request names apart from its body (followers of
    versions before it name none; their body's is checked when it is read). Returns that
    brokerEpoch."""
    who = _who(request)
    request.app[GATE_KEY].check_broker(who)
    broker_epoch = optional_epoch(request.query, Params.BROKER_EPOCH)
    if broker_epoch is not None and who.broker_id is not None:
        request.app[BROKER_KEY].check_replica_epoch(who.broker_id, broker_epoch)
    return broker_epoch


async def fetch_session(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    result = "ok"
    peer = "_unknown"
    started = time.perf_counter()
    try:
        broker_epoch = _replica_caller(request)
        body = parse_body(SessionFetchBody, await _body(request, broker.config.max_request_bytes))
        request.app[GATE_KEY].check_replica(_who(request), body.replica_id)
        if broker_epoch is not None and body.broker_epoch != broker_epoch:
            raise InvalidRequestError(
                f"the body's brokerEpoch {body.broker_epoch} is not the query's {broker_epoch}"
            )
        peer = str(body.replica_id)
        answer = await broker.serve_session_fetch(session_request(body))
        encoded = encode_session_answer(answer)
        broker.metrics.fetch_session_bytes.inc(len(encoded))
        return web.Response(body=encoded, content_type=BATCH_CONTENT_TYPE)
    except EpochlogError as exc:
        result = str(exc.code)
        raise
    finally:
        broker.metrics.fetch_sessions.labels(peer, "leader", result).inc()
        broker.metrics.fetch_latency.labels("replica").observe(time.perf_counter() - started)


async def offsets_for_leader_epoch(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    _replica_caller(request)
    body = parse_body(EpochQueryBody, await _body(request, 1 * MiB))
    request.app[GATE_KEY].check_replica(_who(request), body.replica_id)
    answer = broker.serve_offsets_for_leader_epoch(request.match_info["name"], epoch_query(body))
    return _answer(encode_epoch_answer(answer))


def build_app(broker: Broker, gate: Gate | None = None) -> web.Application:
    app = web.Application(
        client_max_size=broker.config.max_request_bytes, middlewares=[_errors, _authenticate]
    )
    app[BROKER_KEY] = broker
    cfg = broker.config
    app[GATE_KEY] = gate or Gate(cfg.tls, cfg.access_policy, cfg.access_policy_file)
    app.router.add_post("/v1/partitions/{name}/records", produce)
    app.router.add_get("/v1/partitions/{name}/records", read_records)
    app.router.add_get("/v1/partitions/{name}/offsets", list_offsets)
    app.router.add_get(READER_EPOCH_PATH, epoch_end)
    app.router.add_post("/v1/partitions/{name}/delete-records", delete_records)
    app.router.add_get("/v1/partitions", list_partitions)
    app.router.add_post(PRODUCE_MANY_PATH, produce_many)
    app.router.add_post(FETCH_MANY_PATH, fetch_many)
    app.router.add_post(LIST_OFFSETS_MANY_PATH, list_offsets_many)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_post(SESSION_FETCH_PATH, fetch_session)
    app.router.add_post(EPOCH_PATH, offsets_for_leader_epoch)
    return app


def build_probe_app(broker: Broker) -> web.Application:
    """The probe listener's routes: health, readiness, metrics and the API document."""
    app = web.Application(client_max_size=1 * MiB, middlewares=[_errors])
    app[BROKER_KEY] = broker
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    return app


def _dump_tasks(broker_id: int) -> None:
    """On SIGUSR1: every task of the event loop and where it waits, one event each (what a
    thread dump is to a JVM), for a broker that stopped making progress."""
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        frames = []
        awaited: object = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                code = frame.f_code
                name = posixpath.basename(code.co_filename)
                frames.append(f"{code.co_name} ({name}:{frame.f_lineno})")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        log.warning(
            "task_dumped", broker=broker_id, task=task.get_name(), awaits=" > ".join(frames)
        )


async def serve(config: BrokerConfig, stop: asyncio.Event | None = None) -> int:
    """Run a broker until `stop` is set or SIGTERM/SIGINT arrives; 0 after a clean stop."""
    broker = Broker(config)
    await broker.start()
    tokens = None
    if config.service_account_tokens:
        tokens = TokenReviews(lambda: broker.peer_session, lambda: broker.controllers.current)
    gate = Gate(config.tls, config.access_policy, config.access_policy_file, tokens)
    runner = web.AppRunner(
        build_app(broker, gate),
        access_log=None,
        shutdown_timeout=config.shutdown_timeout_s,
        **config.http.runner_args(),
    )
    await runner.setup()
    # One source for the API listener, the Kafka listener and the requests to peers:
    # each new connection takes the newest certificate and trusted CAs.
    tls = broker.tls.server if broker.tls else None
    site = LimitedSite(runner, config.host, config.port, config.http, backlog=1024, ssl_context=tls)
    reloader = None
    if broker.tls is not None:
        reloader = CertReloader(broker.tls, interval_s=config.tls_reload_interval_s)
    runners = [runner]
    sites = [site]
    kafka = None
    if config.kafka_port is not None:
        # Imported here: kio's message classes load only where the listener runs.
        from epochlog_broker.kafka.listener import KafkaListener

        kafka = KafkaListener(broker, gate, tls, config.host, config.kafka_port)
    if config.probe_port is not None:
        probes = web.AppRunner(
            build_probe_app(broker), access_log=None, **config.http.runner_args()
        )
        await probes.setup()
        runners.append(probes)
        sites.append(
            LimitedSite(probes, config.probe_host or config.host, config.probe_port, config.http)
        )
    try:
        for s in sites:
            await s.start()
        if kafka is not None:
            await kafka.start()
    except OSError:
        for r in runners:
            await r.cleanup()
        await broker.close()
        raise
    reloads = asyncio.create_task(_reload_loop(config, reloader, gate), name="reload")
    # Modules, schemas and the opened logs live as long as the process: keeping them
    # out of the collector's generations keeps full collections (tens of ms) out of
    # request latency.
    gc.collect()
    gc.freeze()
    log.info(
        "broker_listening",
        broker=config.broker_id,
        host=config.host,
        port=config.port,
        controller=config.controller_url,
        tls=config.tls is not None,
        authorization="policy" if config.access_policy else "any authenticated principal",
    )
    if config.tls is None:
        log.warning(
            "plaintext_listener",
            broker=config.broker_id,
            note="no TLS: anyone who reaches this port can act as a client or as a broker",
        )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks, config.broker_id)
    try:
        await stop.wait()
        log.info("shutdown_requested", broker=config.broker_id)
        # Still serving: producers and followers keep going while leadership moves. A
        # second signal stops waiting for it.
        again = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, again.set)
        handover = asyncio.create_task(
            broker.controlled_shutdown(config.controlled_shutdown_timeout_s)
        )
        interrupted = asyncio.create_task(again.wait())
        await asyncio.wait([handover, interrupted], return_when=asyncio.FIRST_COMPLETED)
        for task in (handover, interrupted):
            task.cancel()
        await asyncio.gather(handover, interrupted, return_exceptions=True)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        reloads.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reloads
        for s in sites:
            await s.stop()
        if kafka is not None:
            await kafka.stop()
        await broker.shutdown()
        for r in runners:
            await r.cleanup()
        await broker.close()
    return 0


async def _reload_loop(config: BrokerConfig, certs: CertReloader | None, gate: Gate) -> None:
    """Rotated certificates and a changed access policy, picked up without a restart."""
    while True:
        await asyncio.sleep(config.tls_reload_interval_s)
        if certs is not None:
            certs.check()
        gate.reload_policy()


def run_broker(config: BrokerConfig) -> int:
    collector.tune()
    try:
        return asyncio.run(serve(config))
    except StorageIdError as exc:
        # Starting anyway would either make every replica on the disk a new one or keep
        # data under an id nobody can check: the operator decides (docs/concepts/state.md).
        log.error("broker_cannot_start", broker=config.broker_id, error=exc.message)
        print(f"epochlog broker {config.broker_id}: {exc.message}", file=sys.stderr)
        return 2
