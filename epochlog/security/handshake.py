"""The server side of TLS over asyncio, telling the peer why its handshake was refused.

asyncio's TLS protocol of Python 3.11 drops what OpenSSL wrote for the peer when a
handshake fails (CPython gh-98078): the fatal alert that says unknown_ca,
bad_certificate or certificate_required never leaves, and the peer sees the
connection closed as if by a network fault. OpenSSL still decides everything, during
the handshake and from the context's `verify_mode`; `ServerTls` only sends the alert
before the connection is closed.

It also tells its owner when the connection is gone, whether or not the handshake
finished: asyncio tells the application's protocol only about connections that got
past the handshake, so a listener counting open connections through it never saw
the failed ones end (a TCP probe, a port scan, a client of another CA) and counted
them forever.

The shell: a listener created without `ssl=` returns a `ServerTls` around its
application protocol from its protocol factory, one per accepted connection.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

HandshakeFailed = Callable[[ssl.SSLError, Any], None]
"""Told the reason and the peer's address of a handshake refused by OpenSSL."""


class ServerTls(sslproto.SSLProtocol):
    """TLS around `app` for one accepted connection; `lost` is called once it is gone."""

    def __init__(
        self,
        app: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        *,
        handshake_timeout_s: float | None,
        lost: Callable[[], None],
        failed: HandshakeFailed | None = None,
    ) -> None:
        super().__init__(
            asyncio.get_running_loop(),
            app,
            context,
            # No waiter: nothing awaits an accepted connection's handshake (one failed
            # would leave a future whose exception nobody retrieves).
            None,  # type: ignore[arg-type]
            server_side=True,
            ssl_handshake_timeout=handshake_timeout_s,  # type: ignore[arg-type]  # seconds
        )
        self._lost = lost
        self._failed = failed

    def _on_handshake_complete(self, handshake_exc: Any) -> None:
        # Also given the ConnectionResetError class when the peer left mid-handshake:
        # then there is nobody to tell.
        if isinstance(handshake_exc, ssl.SSLError) and self._transport is not None:
            self._process_outgoing()  # type: ignore[attr-defined]  # the alert goes first
            if self._failed is not None:
                self._failed(handshake_exc, self._transport.get_extra_info("peername"))
        super()._on_handshake_complete(handshake_exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            lost, self._lost = self._lost, _nothing
            lost()


def _nothing() -> None:
    pass
