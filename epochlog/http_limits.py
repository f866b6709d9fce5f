"""Limits that keep slow, half-sent and surplus connections from exhausting an HTTP server.

Every listener of a broker and of the operator is reachable by anyone on the
network, and an aiohttp server on its own waits for a request's headers and
body as long as the peer likes (a connection that sent half a request stays
open for an hour). `HttpLimits` bounds that:

- `request_timeout_s`: a connection with no complete request's headers for this
  long is closed, whether it is half-sent (a slow or stopped client) or idle
  between keep-alive requests. A request whose headers arrived is not timed
  here: long polls (fetch sessions, consumers' `maxWaitMs`) wait inside it.
  The default is above the 15 s for which aiohttp clients keep idle pooled
  connections, so a client never reuses a connection the server just closed.
- `body_timeout_s`: a request whose body has not fully arrived this long after
  its headers is answered 408 REQUEST_TIMED_OUT and closed (`read_body`).
- `max_connections`: a listener holding this many connections closes new ones
  at once (as Kafka's `max.connections`) instead of running out of file
  descriptors; connections already open are served as before.

Request size limits are the listener's own (`client_max_size`, per endpoint
in the handlers). A request aiohttp cannot parse (a header line over its 8190
bytes, a malformed request line) is answered with epochlog's error body
(INVALID_REQUEST, with aiohttp's status and reason), as every other error is.
`LimitedSite` applies the connection limits to an aiohttp runner's listener;
handlers read bodies with `read_body`. A TLS listener runs its handshakes
through `epochlog.security.handshake.ServerTls`: a refused certificate is
answered with its TLS alert, and a connection whose handshake failed stops
counting against `max_connections` when it closes.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from epochlog.protocol.errors import InvalidRequestError, RequestBodyTimeoutError, error_answer
from epochlog.security.handshake import ServerTls

log = structlog.get_logger("epochlog.http")

DEFAULT_REQUEST_TIMEOUT_S: Final = 30.0
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_CONNECTIONS: Final = 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        if not self.request_timeout_s > 0 or not self.body_timeout_s > 0:
            raise ValueError("request and body timeouts must be positive")
        if self.max_connections < 1:
            raise ValueError(f"max connections must be at least 1, not {self.max_connections}")

    def runner_args(self) -> dict[str, Any]:
        """Keyword arguments for `web.AppRunner`: aiohttp closes a connection that waits
        for a request's headers longer than its keep-alive timeout, from the first byte."""
        return {"keepalive_timeout": self.request_timeout_s}


class _Refused(asyncio.Protocol):
    """A connection over the limit: closed as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted from its creation to its loss.

    asyncio creates the protocols of a burst of accepted connections before any of them
    is told of its connection, so the server's own list of connections lags: counting
    here keeps a flood of connections within the limit."""

    __slots__ = ("_inner", "_site")

    def __init__(self, inner: asyncio.Protocol, site: LimitedSite) -> None:
        self._inner = inner
        self._site = site
        site.open += 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._site.open -= 1
        self._inner.connection_lost(exc)


class _Answering(RequestHandler):
    """aiohttp's handler of a connection, answering a request it could not parse with
    epochlog's error body instead of plain text."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        plain = super().handle_error(request, status, exc, message)  # logs; closes after
        if not 400 <= status < 500:
            return plain
        reason = message or HTTPStatus(status).phrase
        body = error_answer(InvalidRequestError(reason), leader=None, leader_epoch=None)
        answer = web.json_response(body.dump(), status=status)
        answer.force_close()
        return answer


def _handler(server: web.Server) -> RequestHandler:
    """What `server()` makes, as `_Answering`."""
    return _Answering(server, loop=server._loop, **server._kwargs)


class LimitedSite(web.TCPSite):
    """A TCP listener for an aiohttp runner that refuses connections over the limit."""

    def __init__(
        self, runner: web.BaseRunner, host: str | None, port: int, limits: HttpLimits, **kw: Any
    ) -> None:
        super().__init__(runner, host, port, **kw)
        self.limits = limits
        self.open = 0
        """Connections accepted and not yet lost."""
        self.refused = 0
        """Connections closed at once because the listener was full."""
        self.handshakes_failed = 0
        """TLS handshakes OpenSSL refused (a certificate of an unknown CA, none, ...)."""

    async def start(self) -> None:
        # TCPSite.start, with the runner's protocol factory behind the connection limit.
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        cap = self.limits.max_connections
        tls = self._ssl_context

        def accept() -> asyncio.BaseProtocol:
            if self.open >= cap:
                self.refused += 1
                if self.refused == 1 or self.refused % 1000 == 0:
                    log.warning("connection_refused", limit=cap, refused=self.refused)
                return _Refused()
            if tls is None:
                return _Counted(_handler(server), self)
            protocol = ServerTls(
                _handler(server),
                tls,
                # A TLS handshake that does not finish holds a connection like half-sent
                # headers do: the same time limit.
                handshake_timeout_s=self.limits.request_timeout_s,
                lost=self._tls_lost,
                failed=self._handshake_failed,
            )
            self.open += 1  # until `_tls_lost`, handshake or not
            return protocol

        loop = asyncio.get_running_loop()
        # TLS is not asyncio's here (`ServerTls`): a refusal must reach the peer as an alert.
        self._server = await loop.create_server(
            accept,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )

    def _tls_lost(self) -> None:
        self.open -= 1

    def _handshake_failed(self, reason: ssl.SSLError, peer: object) -> None:
        # Bounded like refusals: anyone can make handshakes fail.
        self.handshakes_failed += 1
        if self.handshakes_failed == 1 or self.handshakes_failed % 1000 == 0:
            log.warning(
                "tls_handshake_refused",
                peer=str(peer),
                reason=reason.reason or str(reason),
                refused=self.handshakes_failed,
            )


async def read_body(request: web.BaseRequest, limits: HttpLimits) -> bytes:
    """The request's body, or RequestBodyTimeoutError when it does not arrive in time (the
    connection is then closed: what is left of the body cannot be told from the next
    request)."""
    if request.content.is_eof():
        return await request.read()  # all there already (most bodies): no timer needed
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            return await request.read()
    except TimeoutError:
        request.protocol.keep_alive(False)
        raise RequestBodyTimeoutError(
            f"the request body did not arrive within {limits.body_timeout_s:g} s"
        ) from None
