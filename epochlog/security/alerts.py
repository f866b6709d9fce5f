"""What a server's fatal TLS alert says about the client's certificate.

OpenSSL names a received alert in the `reason` of the `ssl.SSLError` it raises
(TLSV1_ALERT_UNKNOWN_CA, ...); HTTP clients wrap that error in their own.
`certificate_refusal` finds it in an exception's chain and answers the alert's
name (RFC 8446) and what it means for whoever configured the client, for the
alerts a server sends about the certificate it was given, or not given. Anything
else (a reset, a timeout, an alert about something else) answers None: the caller
treats it as the network fault it may be.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class CertificateRefusal:
    alert: str
    """The alert's name in RFC 8446: unknown_ca, bad_certificate, ..."""
    meaning: str


_BY_REASON: Final = {
    "TLSV1_ALERT_UNKNOWN_CA": CertificateRefusal(
        "unknown_ca", "unknown CA: the server does not trust the CA that issued the certificate"
    ),
    "SSLV3_ALERT_BAD_CERTIFICATE": CertificateRefusal(
        "bad_certificate", "bad certificate: its signature or contents did not verify"
    ),
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": CertificateRefusal(
        "unsupported_certificate",
        "unsupported certificate: its key usage does not allow a TLS client",
    ),
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": CertificateRefusal(
        "certificate_expired", "certificate expired (or not valid yet)"
    ),
    "SSLV3_ALERT_CERTIFICATE_REVOKED": CertificateRefusal(
        "certificate_revoked", "certificate revoked"
    ),
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": CertificateRefusal(
        "certificate_unknown", "certificate unknown: it could not be verified"
    ),
    "TLSV1_ALERT_ACCESS_DENIED": CertificateRefusal(
        "access_denied", "access denied: the certificate is valid but not let in"
    ),
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": CertificateRefusal(
        "certificate_required", "certificate required: none was presented"
    ),
}

_CHAIN_LIMIT: Final = 8
"""Causes looked through: HTTP clients wrap the TLS error once or twice."""


def certificate_refusal(exc: BaseException) -> CertificateRefusal | None:
    """The server's refusal of the client certificate that `exc` carries, if it does."""
    seen: BaseException | None = exc
    for _ in range(_CHAIN_LIMIT):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            found = _BY_REASON.get(seen.reason or "")
            if found is not None:
                return found
        seen = seen.__cause__ or seen.__context__
    return None
