"""The Kafka listener: connections, frames, one request at a time per connection.

As Kafka's socket server does, a connection's requests are answered in the order
they came, one at a time (a Fetch that waits holds the requests behind it on that
connection; clients keep their own connection per broker). Over TLS (the API
listener's context, so rotated certificates reach it too) the connection's principal
is its client certificate. A connection without one authenticates with SASL
(SaslHandshake, then SaslAuthenticate: `sasl.py`, PLAIN and SCRAM against the access
policy) before anything but ApiVersions; any other request closes it, and so does a
failed authentication (after its SASL_AUTHENTICATION_FAILED answer). In plaintext, an
explicit choice for local development, everyone is `Anonymous` unless they
authenticate with SASL (SASL_PLAINTEXT).

Limits, each ending the connection and nothing else: a frame larger than
`max_request_bytes` plus 64 KiB of headers, a frame (its 4-byte size included) that
does not arrive whole within the body timeout once its first byte came, a connection idle for
`IDLE_TIMEOUT_S`, and more connections than the API listener's cap. A request of
an unknown API or version is answered UNSUPPORTED_VERSION when it is ApiVersions (the
client retries with one it finds in the answer), else the connection is closed, as
Kafka does; bytes that do not parse close it too. Nothing is appended from a frame
that was not read and decoded whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from typing import Any, Final

import structlog
from kio.static.primitive import i64Timedelta

from epochlog.protocol.errors import EpochlogError
from epochlog.security.principal import ANONYMOUS, Principal
from epochlog_broker.broker import Broker
from epochlog_broker.gate import Gate
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.coordinator import GroupCoordinator
from epochlog_broker.kafka.handlers import KafkaHandlers, api_versions
from epochlog_broker.kafka.metadata import ClusterView
from epochlog_broker.kafka.sasl import MECHANISMS, SaslExchange, SaslFailed

log = structlog.get_logger("epochlog.broker")

HEADER_SLACK: Final = 64 * 1024
IDLE_TIMEOUT_S: Final = 600.0
"""Kafka's connections.max.idle.ms default."""
NO_SESSION_LIFETIME: Final = i64Timedelta.parse(datetime.timedelta(0))
"""SaslAuthenticate's session lifetime: 0, the connection needs no re-authentication."""
INITIAL_REBALANCE_DELAY_MS: Final = 3000
"""Kafka's group.initial.rebalance.delay.ms default: a new group waits this long for
more members before its first generation."""


class KafkaListener:
    def __init__(
        self, broker: Broker, gate: Gate, tls: ssl.SSLContext | None, host: str, port: int
    ) -> None:
        self.broker = broker
        self.gate = gate
        self.tls = tls
        self.host = host
        self.port = port
        view = ClusterView(broker.describe, broker.peer_addresses, lambda: broker.peer_session)
        self.coordinator = GroupCoordinator(
            broker,
            partitions=broker.config.kafka_offsets_partitions,
            initial_delay_ms=INITIAL_REBALANCE_DELAY_MS,
            rewrite_records=broker.config.kafka_offsets_rewrite_records,
        )
        self.handlers = KafkaHandlers(broker, gate, view, self.coordinator)
        self.max_frame = broker.config.max_request_bytes + HEADER_SLACK
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self.coordinator.start()
        self._server = await asyncio.start_server(
            self._accepted, self.host, self.port, ssl=self.tls, backlog=1024
        )
        log.info(
            "kafka_listening",
            broker=self.broker.config.broker_id,
            host=self.host,
            port=self.bound_port,
            tls=self.tls is not None,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.coordinator.stop()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        limit = self.broker.config.http.max_connections
        if len(self._connections) >= limit:
            log.warning("kafka_connection_refused", reason=f"over {limit} connections")
            writer.close()
            return
        self._connections.add(task)
        metrics = self.broker.metrics
        metrics.kafka_connections.inc()
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except Exception:
            # A bug answering one request: that connection ends (its client reconnects
            # and retries), the listener goes on.
            log.exception("kafka_request_failed", broker=self.broker.config.broker_id)
        finally:
            metrics.kafka_connections.dec()
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        who: Principal | None
        try:
            who = self.gate.principal_of_transport(writer.transport)
        except EpochlogError:
            who = None  # no certificate: SASL, or nothing
        sasl: SaslExchange | None = None
        body_timeout = self.broker.config.http.body_timeout_s
        metrics = self.broker.metrics.kafka_requests
        while True:
            try:
                first = await asyncio.wait_for(reader.readexactly(1), IDLE_TIMEOUT_S)
            except TimeoutError:
                return
            size = -1
            try:
                # From a frame's first byte on, the rest of it (its size too) has the body
                # timeout: a size sent in part does not hold the connection until idle.
                async with asyncio.timeout(body_timeout):
                    size = wire.frame_size(first + await reader.readexactly(3))
                    if not 0 < size <= self.max_frame:
                        log.warning(
                            "kafka_frame_refused", peer=str(peer), size=size, limit=self.max_frame
                        )
                        metrics.labels("-", "malformed").inc()
                        return
                    frame = await reader.readexactly(size)
            except TimeoutError:
                log.warning("kafka_frame_timed_out", peer=str(peer), size=size)
                return
            try:
                req = wire.read_request(frame)
            except wire.KafkaFrameError as exc:
                log.warning("kafka_frame_malformed", peer=str(peer), error=str(exc))
                metrics.labels("-", "malformed").inc()
                return
            if isinstance(req, wire.Unsupported):
                metrics.labels(str(req.api_key), "unsupported").inc()
                if req.api_key != wire.API_VERSIONS:
                    log.warning(
                        "kafka_request_unsupported",
                        peer=str(peer),
                        api=req.api_key,
                        version=req.api_version,
                    )
                    return
                answer = api_versions(0, "unsupported_version")
                writer.write(wire.encode_response(wire.API_VERSIONS, 0, req.correlation_id, answer))
                await writer.drain()
                continue
            if req.api_key in (wire.SASL_HANDSHAKE, wire.SASL_AUTHENTICATE):
                sasl, body, failed = self._sasl(req, sasl, str(peer))
                if sasl is not None and sasl.principal is not None:
                    who = sasl.principal
                    log.info(
                        "kafka_sasl_authenticated",
                        peer=str(peer),
                        principal=str(who),
                        mechanism=sasl.mechanism,
                    )
                    sasl = None
                writer.write(
                    wire.encode_response(req.api_key, req.api_version, req.correlation_id, body)
                )
                await writer.drain()
                metrics.labels(str(req.api_key), "refused" if failed else "answered").inc()
                if failed:
                    return
                continue
            if who is None and req.api_key != wire.API_VERSIONS:
                log.warning(
                    "kafka_connection_unauthenticated",
                    peer=str(peer),
                    api=req.api_key,
                    error="no client certificate and no SASL authentication",
                )
                metrics.labels(str(req.api_key), "refused").inc()
                return
            body = await self.handlers.handle(req, who or ANONYMOUS, client_host)
            metrics.labels(str(req.api_key), "answered").inc()
            if body is None:
                continue
            writer.write(
                wire.encode_response(req.api_key, req.api_version, req.correlation_id, body)
            )
            await writer.drain()

    def _sasl(
        self, req: wire.Request, sasl: SaslExchange | None, peer: str
    ) -> tuple[SaslExchange | None, Any, bool]:
        """(the exchange under way, the answer, whether the connection ends after it)."""
        cls = wire.response_schema(req.api_key, req.api_version)
        if req.api_key == wire.SASL_HANDSHAKE:
            try:
                started = SaslExchange(req.body.mechanism, self.gate.policy)
            except SaslFailed:
                answer = wire.build(
                    cls, error_code=wire.error("unsupported_sasl_mechanism"), mechanisms=MECHANISMS
                )
                return None, answer, True
            ok = wire.error("none")
            return started, wire.build(cls, error_code=ok, mechanisms=MECHANISMS), False
        failure: str
        if sasl is None:
            failure = detail = "SaslAuthenticate without a SaslHandshake before it"
        else:
            try:
                token = sasl.step(bytes(req.body.auth_bytes))
            except SaslFailed as exc:
                failure, detail = str(exc), exc.detail
            else:
                answer = wire.build(
                    cls,
                    error_code=wire.error("none"),
                    error_message=None,
                    auth_bytes=token,
                    session_lifetime=NO_SESSION_LIFETIME,
                )
                return sasl, answer, False
        log.warning("kafka_sasl_failed", peer=peer, error=failure, detail=detail)
        answer = wire.build(
            cls,
            error_code=wire.error("sasl_authentication_failed"),
            error_message=failure,
            auth_bytes=b"",
            session_lifetime=NO_SESSION_LIFETIME,
        )
        return None, answer, True
