"""HTTP to brokers: one aiohttp session, and every failure turned into a typed error.

`Transport.request` returns the body of a 200 answer. Anything else raises:
the broker's typed error for an error body (`error_from_response`), and
`BrokerUnreachableError` when no answer came (refused, reset, timed out on
our side), in which case the request may or may not have been carried out;
`CertificateRefusedError` when the broker's TLS alert refused our certificate.
The session is created on first use, inside the event loop that uses it.

`Credentials` go with every request: TLS (the CA that verifies brokers, and a
client certificate if given; each new connection takes the files as they are then,
so a long-running client follows a renewed certificate and a CA bundle that gains or
loses a CA) for https:// URLs, and a bearer token in the
Authorization header. `resolve` maps host names to addresses for a client outside the
brokers' network (their advertised names do not resolve there).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping

import aiohttp
import aiohttp.abc

from epochlog.client.errors import (
    BrokerUnreachableError,
    CertificateRefusedError,
    TlsHandshakeError,
    error_from_response,
)
from epochlog.security.alerts import certificate_refusal
from epochlog.security.options import Credentials
from epochlog.security.tls import client_context


class HostsResolver(aiohttp.abc.AbstractResolver):
    """Names in `addresses` to their given address, the rest as usual: how a client outside
    the brokers' network reaches them by the names they advertise (curl's --resolve), and
    how a broker reaches a peer at the IP the controller reported for it."""

    def __init__(self, addresses: Mapping[str, str]) -> None:
        self._addresses = addresses  # read at each connection: its owner may update it
        self._default = aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        address = self._addresses.get(host)
        if address is None:
            return await self._default.resolve(host, port, family)
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        await self._default.close()


class Transport:
    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        credentials: Credentials | None = None,
        resolve: Mapping[str, str] | None = None,
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._resolve = resolve
        self._session: aiohttp.ClientSession | None = None
        self.credentials = credentials or Credentials()
        self._ssl = client_context(self.credentials.tls) if self.credentials.tls else None
        self._auth = {"Authorization": f"Bearer {t}"} if (t := self.credentials.token) else {}

    @property
    def tls_context(self) -> ssl.SSLContext | None:
        """The context of https:// connections: each new one takes the CA bundle and the
        client certificate as their files hold them then (`ReloadingContext`)."""
        return self._ssl

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,
                    enable_cleanup_closed=True,
                    ssl=self._ssl or True,
                    resolver=HostsResolver(self._resolve) if self._resolve is not None else None,
                    # aiohttp keeps what a resolver answered for 10 s by default: a broker
                    # restarted at a new address would be dialled at its old one until then
                    # (measured: a follower's fetches timed out for 6 s in a rolling
                    # restart). The map is read at each connection instead.
                    use_dns_cache=self._resolve is None,
                ),
                # A fresh session per client; no cookies or proxies from the environment
                # must change where records go.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout_s: float,
    ) -> tuple[bytes, str]:
        """(body, content type) of a 200 answer; raises a typed error otherwise."""
        headers: dict[str, str] = dict(self._auth)
        if content_type is not None:
            headers["Content-Type"] = content_type
        if accept is not None:
            headers["Accept"] = accept
        target = url.rstrip("/") + path
        timeout = aiohttp.ClientTimeout(
            total=max(timeout_s, 0.001), connect=min(self._connect_timeout_s, timeout_s)
        )
        try:
            async with self._get_session().request(
                method,
                target,
                params=dict(params or {}),
                data=body,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as resp:
                data = await resp.read()
                status = resp.status
                ctype = resp.content_type
        except aiohttp.ClientConnectorCertificateError as exc:
            raise TlsHandshakeError(
                f"{method} {target}: the broker's certificate is not trusted: "
                f"{exc.certificate_error} (give the CA that issued it with --ca)"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            refused = certificate_refusal(exc)
            if refused is not None:
                # An alert, not a silent close: the broker's verdict on our certificate,
                # which asking again does not change.
                raise CertificateRefusedError(
                    f"{method} {target}: the broker refused the client certificate: "
                    f"{refused.meaning} (TLS alert {refused.alert})",
                    alert=refused.alert,
                ) from exc
            raise BrokerUnreachableError(
                f"{method} {target}: {type(exc).__name__}: {exc or 'no answer'}"
            ) from exc
        except TimeoutError as exc:
            raise BrokerUnreachableError(
                f"{method} {target}: no answer within {timeout_s:.3g} s"
            ) from exc
        if status != 200:
            raise error_from_response(status, data, target)
        return data, ctype

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            # Let the connector's transports close before the loop may end.
            await asyncio.sleep(0)
