"""Trusted CAs reloaded when their files change (`TlsSource`), over real TLS connections
to a real listening socket: a CA added to the bundle is trusted by the next connection,
one removed is refused by the next connection while an open one goes on, and a CA
file that is garbage or cut off mid-write leaves the trust in force, said once in
the log."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import structlog

from epochlog.security.pki import (
    CLIENTS_CA_NAME,
    CLUSTER_CA_NAME,
    Issued,
    issue_broker,
    issue_user,
    new_ca,
    write_file,
)
from epochlog.security.tls import TlsFiles, TlsSource, client_context
from epochlog.security.trust import bundle_pem, fingerprint


def _bundle(path: Path, *cas: Issued) -> None:
    write_file(path, bundle_pem(tuple(c.cert for c in cas)), 0o644)


@asynccontextmanager
async def _echo(source: TlsSource) -> AsyncIterator[int]:
    """A listener with `source`'s server context that answers each line it reads."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(line)
                await writer.drain()
        except (ssl.SSLError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=source.server)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _talk(port: int, context: ssl.SSLContext) -> bool:
    """Whether a new connection with `context` is answered (under TLS 1.3 a refused client
    certificate shows at the first read)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (ssl.SSLError, ConnectionError):
        return False
    try:
        writer.write(b"ping\n")
        await writer.drain()
        return await reader.readline() == b"ping\n"
    except (ssl.SSLError, ConnectionError):
        return False
    finally:
        writer.close()


class _Pki:
    def __init__(self, d: Path) -> None:
        self.d = d
        self.cluster = new_ca(CLUSTER_CA_NAME)
        self.clients_old = new_ca(CLIENTS_CA_NAME)
        self.clients_new = new_ca(CLIENTS_CA_NAME)
        _bundle(d / "ca.crt", self.cluster)
        _bundle(d / "clients-ca.crt", self.clients_old)
        issue_broker(self.cluster, 1).write(d, "broker")
        self.files = TlsFiles(
            str(d / "ca.crt"),
            str(d / "broker.crt"),
            str(d / "broker.key"),
            str(d / "clients-ca.crt"),
        )

    def user(self, name: str, ca: Issued) -> ssl.SSLContext:
        cert, key = issue_user(ca, name).write(self.d, f"user-{name}")
        return client_context(TlsFiles(str(self.d / "ca.crt"), str(cert), str(key)))


async def test_the_next_connection_takes_the_new_trust_and_open_ones_go_on(
    tmp_path: Path,
) -> None:
    pki = _Pki(tmp_path)
    source = TlsSource(pki.files)
    old_user = pki.user("old", pki.clients_old)
    new_user = pki.user("new", pki.clients_new)
    async with _echo(source) as port:
        assert await _talk(port, old_user)
        assert not await _talk(port, new_user)

        _bundle(tmp_path / "clients-ca.crt", pki.clients_old, pki.clients_new)
        assert await _talk(port, new_user)
        assert await _talk(port, old_user)
        assert set(source.loaded.clients_cas) == {
            fingerprint(pki.clients_old.cert),
            fingerprint(pki.clients_new.cert),
        }

        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=old_user)
        _bundle(tmp_path / "clients-ca.crt", pki.clients_new)
        assert not await _talk(port, old_user)
        assert await _talk(port, new_user)
        # The connection opened before is not dropped.
        writer.write(b"still here\n")
        await writer.drain()
        assert await reader.readline() == b"still here\n"
        writer.close()
        assert source.loaded.clients_cas == (fingerprint(pki.clients_new.cert),)


async def test_a_bad_ca_file_keeps_the_trust_in_force_and_says_so_once(tmp_path: Path) -> None:
    pki = _Pki(tmp_path)
    source = TlsSource(pki.files, owner="broker-1")
    user = pki.user("carol", pki.clients_old)
    whole = (tmp_path / "clients-ca.crt").read_bytes()
    async with _echo(source) as port:
        for bad in (b"garbage\n", whole[: len(whole) // 2]):
            # Written in place, as a careless tool or a half-finished copy would.
            (tmp_path / "clients-ca.crt").write_bytes(bad)
            with structlog.testing.capture_logs() as logs:
                assert await _talk(port, user)
                assert await _talk(port, user)
            refused = [e for e in logs if e["event"] == "trusted_cas_invalid"]
            assert len(refused) == 1, logs
            assert "clients-ca.crt" in refused[0]["error"]
            assert refused[0]["owner"] == "broker-1"
            assert source.loaded.clients_cas == (fingerprint(pki.clients_old.cert),)
        (tmp_path / "clients-ca.crt").write_bytes(whole + b"\n")
        assert await _talk(port, user)
        assert source.refused == 2
        assert source.reloads == 1
