"""TLS contexts from certificate files, the peer's principal, and reload on change.

`TlsFiles` names what a process was given: the CA(s) that verify its peers, its own
certificate and key, and for a listener that also serves users, the clients CA(s).
A CA file may be a bundle (while a CA is replaced, the old and the new one).

`TlsSource` reads them and makes the process's contexts: `server` asks the peer for
a certificate (required for the operator's heartbeat listener, optional where a
bearer token may stand in for one), `client` checks the server's name against its
certificate. Both are `ReloadingContext`s: each new connection, accepted or made,
first looks at the files (a `stat` each) and, when one changed, the source reads
them all again and builds new contexts, which that connection and the later ones
use; open connections keep theirs, and nothing restarts (Kubernetes updates a
mounted Secret in place). A new context is needed because OpenSSL can add a trusted
CA to a context but never remove one. Files that do not read (a CA file that is
garbage or cut off mid-write, a certificate whose new key has not arrived) leave the
contexts in force, logged once per state of the files, and are read again when they
change again.

`CertReloader` also looks every interval, so that what a process reports it trusts
(`TlsSource.loaded`) follows the files on an idle process too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog
from cryptography import x509

from epochlog.security.principal import Principal, principal_from_certificate
from epochlog.security.trust import TrustFileError, fingerprint, fingerprints, trusted_cas
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
        return tuple(p for p in (self.ca, self.clients_ca, self.cert, self.key) if p is not None)


@dataclass(frozen=True)
class Loaded:
    """What a `TlsSource` read last, and the contexts it built from it."""

    server: ssl.SSLContext | None
    client: ssl.SSLContext
    cluster_cas: tuple[str, ...]
    """Fingerprints (`epochlog.security.trust.fingerprint`) of the CAs of `TlsFiles.ca`."""
    clients_cas: tuple[str, ...]
    """Of `TlsFiles.clients_ca`; () without one."""
    certificate: str | None
    """Fingerprint of the process's own certificate; None without one."""


def _read_bundle(path: str) -> tuple[bytes, tuple[str, ...]]:
    pem = Path(path).read_bytes()
    try:
        return pem, fingerprints(trusted_cas(pem))
    except TrustFileError as exc:
        raise TrustFileError(f"{path}: {exc}") from None


def _build(files: TlsFiles, require_client_cert: bool) -> Loaded:
    ca_pem, cluster = _read_bundle(files.ca)
    clients_pem, clients = _read_bundle(files.clients_ca) if files.clients_ca else (b"", ())
    own = None
    if files.cert:
        own = fingerprint(x509.load_pem_x509_certificate(Path(files.cert).read_bytes()))

    def base(ctx: ssl.SSLContext) -> ssl.SSLContext:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if files.cert and files.key:
            ctx.load_cert_chain(files.cert, files.key)
        # The bytes checked above, not the file again: it may have changed meanwhile.
        ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
        return ctx

    server = None
    if files.cert:
        server = base(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
        if clients_pem:
            server.load_verify_locations(cadata=clients_pem.decode("ascii"))
        server.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    client = base(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    client.check_hostname = True
    client.verify_mode = ssl.CERT_REQUIRED
    return Loaded(server, client, cluster, clients, own)


class ReloadingContext(ssl.SSLContext):
    """An `ssl.SSLContext` whose every new connection takes its source's newest context.

    asyncio, aiohttp and http.client make a connection's TLS through the context's
    `wrap_bio` or `wrap_socket`; here those look at the files first and delegate to
    the context built from them. Its own settings mirror that context's; of what is set
    on it afterwards, the protocol versions are carried over."""

    _source: TlsSource
    _server_side: bool

    def __new__(cls, source: TlsSource, *, server: bool) -> ReloadingContext:
        protocol = ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT
        return super().__new__(cls, protocol)

    def __init__(self, source: TlsSource, *, server: bool) -> None:
        self._source = source
        self._server_side = server
        inner = self.current()
        self.minimum_version = inner.minimum_version
        self.verify_mode = inner.verify_mode

    @property
    def source(self) -> TlsSource:
        return self._source

    def current(self) -> ssl.SSLContext:
        """The context a connection made now uses (after a look at the files)."""
        self._source.refresh()
        loaded = self._source.loaded
        inner = loaded.server if self._server_side else loaded.client
        assert inner is not None  # a server side exists only with a certificate
        # Protocol versions set on this context (a test pinning TLS 1.2) hold for the
        # contexts built later too.
        if inner.minimum_version != self.minimum_version:
            inner.minimum_version = self.minimum_version
        if inner.maximum_version != self.maximum_version:
            inner.maximum_version = self.maximum_version
        return inner

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.current().wrap_bio(incoming, outgoing, server_side, server_hostname, session)

    def wrap_socket(
        self,
        sock: Any,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self.current().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            server_hostname,
            session,
        )


class TlsSource:
    """The contexts of one process from `files`, rebuilt when the files change.

    Raises at construction when the files do not make contexts (a process must not start
    on them); afterwards a change that does not read keeps the contexts in force."""

    def __init__(
        self, files: TlsFiles, *, require_client_cert: bool = False, owner: str = ""
    ) -> None:
        if files.key is not None and files.cert is None:
            raise ValueError("a key needs its certificate")
        self.files = files
        self.require_client_cert = require_client_cert
        self.owner = owner
        self.reloads = 0
        """Times the files were read again after a change."""
        self.refused = 0
        """Changed files that did not read (each state of the files counted once)."""
        self._watch = FileWatch(files.watched())
        self._lock = threading.Lock()  # a broker's keepalive thread connects too
        self.loaded = _build(files, require_client_cert)
        self._refused_stamp: object = None
        self.server = ReloadingContext(self, server=True) if files.cert else None
        self.client = ReloadingContext(self, server=False)

    def refresh(self) -> bool:
        """Read the files again if they changed since they were last read; whether the
        contexts were rebuilt."""
        if not self._watch.changed():
            return False
        with self._lock:
            stamp = self._watch.stamp()
            if stamp == self._refused_stamp or not self._watch.changed():
                return False
            try:
                loaded = _build(self.files, self.require_client_cert)
            except (OSError, ssl.SSLError, ValueError) as exc:
                self._refused_stamp = stamp
                self.refused += 1
                self._log_refused(exc)
                return False
            self._watch.loaded(stamp)
            before, self.loaded = self.loaded, loaded
            self.reloads += 1
        self._log_loaded(before, loaded)
        return True

    def _log_refused(self, exc: BaseException) -> None:
        if isinstance(exc, TrustFileError):
            log.error(
                "trusted_cas_invalid",
                owner=self.owner,
                error=str(exc),
                note="the CAs trusted before stay in force until the file is whole again",
            )
        else:
            # Mid-rotation (a certificate without its new key yet): keep serving the old
            # pair and look again when the files change again.
            log.warning("certificate_reload_failed", owner=self.owner, error=str(exc))

    def _log_loaded(self, before: Loaded, after: Loaded) -> None:
        if (before.cluster_cas, before.clients_cas) != (after.cluster_cas, after.clients_cas):
            log.info(
                "trusted_cas_reloaded",
                owner=self.owner,
                clusterCas=list(after.cluster_cas),
                clientsCas=list(after.clients_cas),
            )
        if before.certificate != after.certificate and self.files.cert:
            log.info(
                "certificate_reloaded",
                owner=self.owner,
                cert=self.files.cert,
                serial=serial_of(self.files.cert),
                fingerprint=after.certificate,
            )


def server_context(
    files: TlsFiles, *, require_client_cert: bool, owner: str = ""
) -> ReloadingContext:
    if not files.cert:
        raise ValueError("a TLS listener needs a certificate and key")
    server = TlsSource(files, require_client_cert=require_client_cert, owner=owner).server
    assert server is not None
    return server


def client_context(files: TlsFiles, *, owner: str = "") -> ReloadingContext:
    return TlsSource(files, owner=owner).client


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
    """Looks at `source`'s files every `interval_s` (connections look too, when made)."""

    def __init__(self, source: TlsSource, *, interval_s: float = DEFAULT_RELOAD_INTERVAL_S) -> None:
        self.source = source
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Reload if the files changed since the last look; whether it did."""
        return self.source.refresh()

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
