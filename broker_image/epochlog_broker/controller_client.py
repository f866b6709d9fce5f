"""The broker's requests to the controller: host name lookups and one heartbeat to one endpoint.

The I/O shell of `controller_targets`: `ControllerClient.resolve` looks up
the host names `ControllerTargets` asks for, and `send` posts one heartbeat to
one endpoint and sorts its outcome into an answer or a typed failure
(`ControllerUnanswered`), which the broker's heartbeat loop hands back to
`ControllerTargets`. A connection to a resolved address verifies TLS against
the host name of the configured URL (aiohttp's `server_hostname`), so one
certificate naming the Service serves every replica behind it.

Where there are several endpoints, connecting gets less time than the whole
request: an address where nothing listens any more (a replaced pod) should
cost a fraction of a heartbeat interval, not a session timeout, before the
next one is tried.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Final

import aiohttp
import structlog
from pydantic import ValidationError

from epochlog.protocol.errors import NotControllerError, decode_error_answer
from epochlog.protocol.heartbeat import HeartbeatResponse
from epochlog_broker.controller_targets import ControllerEndpoint, ControllerTargets, Failure

log = structlog.get_logger("epochlog.broker")

HEARTBEAT_PATH: Final = "/v1/heartbeat"
MIN_CONNECT_TIMEOUT_S: Final = 0.5
"""Connecting to a live process takes milliseconds; this much covers a busy event loop."""


class ControllerUnanswered(Exception):
    """A heartbeat got no answer from an endpoint: how (`failure`) and the detail."""

    def __init__(self, failure: Failure, detail: str) -> None:
        super().__init__(f"{failure}: {detail}")
        self.failure = failure
        self.detail = detail


class ControllerClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        targets: ControllerTargets,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        now_ms: Callable[[], int],
    ) -> None:
        self.session = session
        self.targets = targets
        connect_s = min(timeout_s, max(MIN_CONNECT_TIMEOUT_S, connect_timeout_s))
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_s)
        """With other endpoints to try: connecting gets less time than the request."""
        self.single_timeout = aiohttp.ClientTimeout(total=timeout_s)
        """With one endpoint: there is nowhere else to go sooner."""
        self._now_ms = now_ms

    async def resolve(self) -> None:
        """Look up the host names that are due (`ControllerTargets.hosts_to_resolve`)."""
        hosts = self.targets.hosts_to_resolve(self._now_ms())
        if not hosts:
            return
        found = await asyncio.gather(*(lookup(h) for h in hosts))
        before = self.targets.endpoints
        self.targets.resolved(dict(zip(hosts, found, strict=True)), self._now_ms())
        if self.targets.endpoints != before:
            log.info(
                "controller_addresses",
                controllers=[str(e) for e in self.targets.endpoints],
            )

    async def send(self, endpoint: ControllerEndpoint, data: str) -> tuple[HeartbeatResponse, int]:
        """Post one heartbeat to `endpoint`: its answer and the answer's size in bytes;
        ControllerUnanswered when there is none."""
        headers = {"Content-Type": "application/json"}
        if endpoint.host_header is not None:
            headers["Host"] = endpoint.host_header
        try:
            async with self.session.post(
                endpoint.request_url(HEARTBEAT_PATH),
                data=data,
                headers=headers,
                timeout=self.timeout if len(self.targets.endpoints) > 1 else self.single_timeout,
                server_hostname=endpoint.server_hostname,
            ) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError as exc:
            raise ControllerUnanswered(Failure.TIMED_OUT, f"no answer: {exc!r}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ControllerUnanswered(Failure.UNREACHABLE, f"{type(exc).__name__}: {exc}") from exc
        if status != 200:
            decoded = decode_error_answer(body)
            if decoded is not None and isinstance(decoded.error, NotControllerError):
                raise ControllerUnanswered(Failure.NOT_CONTROLLER, decoded.body.message)
            raise ControllerUnanswered(Failure.BAD_ANSWER, f"HTTP {status}: {body[:300]!r}")
        try:
            return HeartbeatResponse.model_validate_json(body), len(body)
        except ValidationError as exc:
            detail = f"not a heartbeat answer: {exc}"
            raise ControllerUnanswered(Failure.BAD_ANSWER, detail) from exc


async def lookup(host: str) -> tuple[str, ...]:
    """The addresses `host` resolves to (TCP), in the resolver's order; none when the
    lookup fails (the caller keeps what it had)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        log.warning("controller_lookup_failed", host=host, error=f"{type(exc).__name__}: {exc}")
        return ()
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))
