"""How the processes the harness starts are secured: TLS from a `DevPki`, or plaintext.

`Security.tls(directory, broker_ids)` creates (or reuses) the cluster CA, the clients
CA and a certificate per broker, for the operator and for the `admin` user, and
gives each program its flags; `PLAINTEXT` is the explicit opposite. Tests, the
local cluster and the benchmarks all start their processes through this, so that
they run as a secured cluster does unless they say otherwise.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from epochlog.security.options import Credentials
from epochlog.security.pki import DevPki
from epochlog.security.tls import TlsFiles, client_context

ADMIN = "admin"


@dataclass(frozen=True)
class Security:
    pki: DevPki | None
    """None: plaintext."""

    @classmethod
    def tls(cls, directory: Path | str, broker_ids: Iterable[int]) -> Security:
        return cls(DevPki(Path(directory)).ensure(broker_ids, users=(ADMIN,)))

    @property
    def scheme(self) -> str:
        return "https" if self.pki else "http"

    def _files(self, cert: Path, key: Path, clients_ca: Path | None = None) -> TlsFiles:
        assert self.pki is not None
        return TlsFiles(
            str(self.pki.cluster_ca), str(cert), str(key), str(clients_ca) if clients_ca else None
        )

    def broker_flags(self, broker_id: int) -> list[str]:
        if self.pki is None:
            return ["--plaintext"]
        cert, key = self.pki.broker(broker_id)
        return [
            "--ca",
            str(self.pki.cluster_ca),
            "--cert",
            str(cert),
            "--key",
            str(key),
            "--clients-ca",
            str(self.pki.clients_ca),
        ]

    def operator_flags(self) -> list[str]:
        if self.pki is None:
            return ["--plaintext"]
        cert, key = self.pki.operator()
        return ["--ca", str(self.pki.cluster_ca), "--cert", str(cert), "--key", str(key)]

    def client_flags(self, user: str = ADMIN) -> list[str]:
        """`epochlog produce/consume/...` flags of `user`."""
        if self.pki is None:
            return []
        cert, key = self.pki.user(user)
        return ["--ca", str(self.pki.cluster_ca), "--cert", str(cert), "--key", str(key)]

    def credentials(self, user: str = ADMIN) -> Credentials:
        if self.pki is None:
            return Credentials()
        return Credentials(self._files(*self.pki.user(user)))

    def client_ssl(self, user: str = ADMIN) -> ssl.SSLContext | bool:
        """For an aiohttp connector: `user`'s certificate, or True (default checks) in
        plaintext, where no https:// URL is used anyway."""
        if self.pki is None:
            return True
        return client_context(self._files(*self.pki.user(user)))

    def broker_ssl(self, broker_id: int) -> ssl.SSLContext | bool:
        """What broker `broker_id` presents when it calls a peer or the operator."""
        if self.pki is None:
            return True
        return client_context(self._files(*self.pki.broker(broker_id)))


PLAINTEXT = Security(None)
