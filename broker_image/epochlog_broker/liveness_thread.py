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
loop's business and comes with its next heartbeat.
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from pydantic import ValidationError

from epochlog.protocol.heartbeat import BrokerHeartbeat, HeartbeatResponse

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
        url: str,
        interval_s: float,
        timeout_s: float,
        header: Callable[[], KeepaliveHeader | None],
        now_ms: Callable[[], int],
        on_fenced: Callable[[], object],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._ssl = ssl_context
        self._url = url
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
        request = urllib.request.Request(
            self._url,
            data=body.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        self._last_sent = time.monotonic()
        self.sent += 1
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._ssl) as rsp:
                answer = HeartbeatResponse.model_validate_json(rsp.read())
        except (urllib.error.URLError, OSError, ValidationError, ValueError) as exc:
            log.debug("keepalive_failed", broker=header.broker_id, error=str(exc))
            return
        log.info(
            "keepalive_sent",
            broker=header.broker_id,
            brokerEpoch=header.broker_epoch,
            reason="event loop late with the heartbeat",
        )
        if answer.fenced:
            self._on_fenced()
