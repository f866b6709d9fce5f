"""TLS contexts from certificate files, the peer's principal, and reload on rotation.

`TlsFiles` names what a process was given: the CA that verifies its peers, its own
certificate and key, and for a listener that also serves users, the clients CA.
`server_context` asks the peer for a certificate (required for the operator's
heartbeat listener, optional where a bearer token may stand in for one);
`client_context` checks the server's name against its certificate.

`CertReloader` watches the files and loads a changed certificate and key into the
same contexts: new connections use them, open ones keep theirs, and nothing
restarts (Kubernetes updates a mounted Secret in place).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog
from cryptography import x509

from epochlog.security.principal import Principal, principal_from_certificate
from epochlog.security.watch import FileWatch

log = structlog.get_logger("epochlog.tls")
DEFAULT_RELOAD_INTERVAL_S: Final = 5.0


@dataclass(frozen=True)
class TlsFiles:
    ca: str
    """PEM of the CA(s) that issued the peers' certificates (the cluster CA)."""
    cert: str | None = None
    key: str | None = None
    clients_ca: str | None = None
    """A listener that serves users: PEM of the CA(s) of their client certificates."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("a certificate needs its key, and a key its certificate")
        for path in (self.ca, self.cert, self.key, self.clients_ca):
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"TLS file {path} does not exist")

    def watched(self) -> tuple[str, ...]:
        return tuple(p for p in (self.cert, self.key) if p is not None)


def _base(ctx: ssl.SSLContext, files: TlsFiles) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.cert and files.key:
        ctx.load_cert_chain(files.cert, files.key)
    return ctx


def server_context(files: TlsFiles, *, require_client_cert: bool) -> ssl.SSLContext:
    if not files.cert:
        raise ValueError("a TLS listener needs a certificate and key")
    ctx = _base(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), files)
    ctx.load_verify_locations(files.ca)
    if files.clients_ca:
        ctx.load_verify_locations(files.clients_ca)
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(files: TlsFiles) -> ssl.SSLContext:
    ctx = _base(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), files)
    ctx.load_verify_locations(files.ca)
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def ca_name(ca_file: str) -> x509.Name:
    """The subject of the first certificate in `ca_file`: the issuer of cluster certs."""
    return x509.load_pem_x509_certificate(Path(ca_file).read_bytes()).subject


class PeerIdentities:
    """Principals of verified peer certificates, parsed once per certificate."""

    def __init__(self, cluster_ca: x509.Name) -> None:
        self._cluster_ca = cluster_ca
        self._of = functools.lru_cache(maxsize=4096)(self._parse)

    def _parse(self, der: bytes) -> Principal | None:
        return principal_from_certificate(der, self._cluster_ca)

    def of_transport(self, transport: Any) -> Principal | None:
        """The principal of the certificate the peer of `transport` presented, if any."""
        if transport is None:
            return None
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return None
        der = ssl_object.getpeercert(binary_form=True)
        return self._of(der) if der else None


def serial_of(cert_file: str) -> int:
    return x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).serial_number


class CertReloader:
    """Loads `files`' certificate and key into `contexts` again whenever they change."""

    def __init__(
        self,
        files: TlsFiles,
        contexts: Sequence[ssl.SSLContext],
        *,
        interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
        owner: str = "",
    ) -> None:
        self.files = files
        self.contexts = tuple(contexts)
        self.interval_s = interval_s
        self.owner = owner
        self.reloads = 0
        self._watch = FileWatch(files.watched())
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Reload if the files changed since the last look; whether it did."""
        if not self._watch.changed() or not self.files.cert or not self.files.key:
            return False
        try:
            for ctx in self.contexts:
                ctx.load_cert_chain(self.files.cert, self.files.key)
            serial = serial_of(self.files.cert)
        except (OSError, ssl.SSLError, ValueError) as exc:
            # Mid-rotation (a certificate without its new key yet): keep serving the old
            # pair and look again next time.
            log.warning("certificate_reload_failed", owner=self.owner, error=str(exc))
            return False
        self._watch.loaded()
        self.reloads += 1
        log.info("certificate_reloaded", owner=self.owner, cert=self.files.cert, serial=serial)
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.check()

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
