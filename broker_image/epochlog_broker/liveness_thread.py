"""A broker's liveness that its busy event loop cannot starve: the keepalive thread.

Heartbeats with partition reports are built on the event loop, from the core's
state. Under a full data path that loop can fall behind by more than a session
timeout, and a controller that hears nothing fences a broker that is alive and
serving: every partition it leads fails over, and the load lands on the
others (the cascade Kafka avoids by answering heartbeats ahead of data
requests). This thread watches when the loop last sent a heartbeat; when it is
a heartbeat interval late, the thread sends a keepalive (`livenessOnly`) in the
same report session, on its own connection, with a blocking client that needs
nothing of the loop. A keepalive renews the broker's session and nothing else:
it carries no report and re-asserts none, so the controller keeps judging
followers' lag by the last heartbeat that had reports.

The thread hands a `fenced` answer to the loop; every other answer is the
loop's business and comes with its next heartbeat. It sends to the controller
address the loop's heartbeats last reached (`ControllerTargets.current`), the
replica that holds the report session; it never moves on by itself.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog
from pydantic import ValidationError

from epochlog.protocol.heartbeat import BrokerHeartbeat, HeartbeatResponse
from epochlog_broker.controller_client import HEARTBEAT_PATH
from epochlog_broker.controller_targets import ControllerEndpoint

log = structlog.get_logger("epochlog.broker")


@dataclass(frozen=True, slots=True)
class KeepaliveHeader:
    """What a keepalive says: who the broker is and which report session it continues."""

    broker_id: int
    broker_epoch: int
    address: str
    storage_id: str | None
    session_id: int


class KeepaliveThread:
    def __init__(
        self,
        *,
        target: Callable[[], ControllerEndpoint],
        interval_s: float,
        timeout_s: float,
        header: Callable[[], KeepaliveHeader | None],
        now_ms: Callable[[], int],
        on_fenced: Callable[[int], object],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._ssl = ssl_context
        self._target = target
        self._interval = interval_s
        self._timeout = timeout_s
        self._header = header
        self._now_ms = now_ms
        self._on_fenced = on_fenced
        self._last_sent = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keepalive", daemon=True)
        self.sent = 0
        """Keepalives sent so far (the loop was late this many times)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._timeout + self._interval)

    def loop_sent(self) -> None:
        """The event loop sent a heartbeat (called on the loop; a float store is atomic)."""
        self._last_sent = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(self._interval / 4):
            if time.monotonic() - self._last_sent < self._interval * 1.5:
                continue
            header = self._header()
            if header is None or header.session_id == 0:
                continue  # no session yet: the loop's full heartbeat opens one
            self._send(header)

    def _send(self, header: KeepaliveHeader) -> None:
        body = BrokerHeartbeat(
            broker_id=header.broker_id,
            broker_epoch=header.broker_epoch,
            address=header.address,
            storage_id=header.storage_id,
            time_ms=self._now_ms(),
            full=False,
            session_id=header.session_id,
            liveness_only=True,
        ).model_dump_json(by_alias=True)
        self._last_sent = time.monotonic()
        self.sent += 1
        try:
            answer = HeartbeatResponse.model_validate_json(
                post(self._target(), body.encode(), self._timeout, self._ssl)
            )
        except (OSError, http.client.HTTPException, ValidationError, ValueError) as exc:
            log.debug("keepalive_failed", broker=header.broker_id, error=str(exc))
            return
        log.info(
            "keepalive_sent",
            broker=header.broker_id,
            brokerEpoch=header.broker_epoch,
            reason="event loop late with the heartbeat",
        )
        if answer.fenced:
            # The brokerEpoch it was sent for: by the time the answer is applied the loop
            # may have restarted the core already, and the new one is not fenced.
            self._on_fenced(header.broker_epoch)


class _TlsConnection(http.client.HTTPSConnection):
    """HTTPS to an address, verifying the certificate against a host name (the URL's)."""

    def __init__(
        self,
        address: str,
        port: int,
        *,
        server_hostname: str,
        context: ssl.SSLContext,
        timeout: float,
    ) -> None:
        super().__init__(address, port, timeout=timeout, context=context)
        self._server_hostname = server_hostname
        self._tls = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_hostname)


def post(
    endpoint: ControllerEndpoint, body: bytes, timeout_s: float, context: ssl.SSLContext | None
) -> bytes:
    """POST a heartbeat to `endpoint` with a blocking client: the answer's body; OSError
    (a TimeoutError too) or http.client.HTTPException without one, ValueError for an
    error status."""
    parts = urlsplit(endpoint.url)
    host = endpoint.address or endpoint.host
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    connection: http.client.HTTPConnection
    if tls:
        context = context or ssl.create_default_context()
        connection = _TlsConnection(
            host, port, server_hostname=endpoint.host, context=context, timeout=timeout_s
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request(
            "POST",
            parts.path + HEARTBEAT_PATH,
            body=body,
            headers={"Content-Type": "application/json", "Host": parts.netloc},
        )
        response = connection.getresponse()
        answer = response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise ValueError(f"HTTP {response.status}: {answer[:300]!r}")
    return answer
