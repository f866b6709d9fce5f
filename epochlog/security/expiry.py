"""When the certificates a process was given end: the `notAfter` its metrics export.

`CertificateExpiry` reads the PEM files of a `TlsFiles` (its own certificate, the
cluster CA, the clients CA) and answers, for each, the time its validity ends in
seconds since the epoch (`epochlog_certificate_expiry_timestamp_seconds`). A file
is parsed again only when its modification time, size or inode changed (a
rotated Secret is swapped in place), so a scrape costs three `stat` calls.

Which certificate of a file counts: the first of the process's own file (the
leaf; a chain may follow it), and the latest-ending of a CA bundle (while a CA
is rotated, the bundle holds the old and the new one, and trust goes on until
the last of them ends).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from epochlog.security.tls import TlsFiles


class CertificateRole(enum.StrEnum):
    """The `certificate` label: which of the process's files."""

    OWN = "own"
    CLUSTER_CA = "cluster-ca"
    CLIENTS_CA = "clients-ca"


Stamp = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class _Parsed:
    stamp: Stamp
    not_after: float | None


def not_after(pem: bytes, *, bundle: bool) -> float | None:
    """The end of validity (epoch seconds) of the first certificate in `pem`, or with
    `bundle` of the latest-ending one; None when it holds none."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return None
    ends = [c.not_valid_after_utc.timestamp() for c in certificates]
    if not ends:
        return None
    return max(ends) if bundle else ends[0]


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class CertificateExpiry:
    """The `notAfter` of each certificate file of `files`, parsed again only on change."""

    def __init__(self, files: TlsFiles | None) -> None:
        self._paths: dict[CertificateRole, str] = {}
        if files is not None:
            self._paths[CertificateRole.CLUSTER_CA] = files.ca
            if files.cert is not None:
                self._paths[CertificateRole.OWN] = files.cert
            if files.clients_ca is not None:
                self._paths[CertificateRole.CLIENTS_CA] = files.clients_ca
        self._parsed: dict[CertificateRole, _Parsed] = {}

    def not_after(self) -> dict[CertificateRole, float]:
        """Each role's end of validity, for the files that exist and hold a certificate."""
        out = {}
        for role, path in self._paths.items():
            stamp = _stamp(path)
            if stamp is None:
                continue
            parsed = self._parsed.get(role)
            if parsed is None or parsed.stamp != stamp:
                try:
                    pem = Path(path).read_bytes()
                except OSError:
                    continue
                bundle = role is not CertificateRole.OWN
                parsed = self._parsed[role] = _Parsed(stamp, not_after(pem, bundle=bundle))
            if parsed.not_after is not None:
                out[role] = parsed.not_after
        return out
