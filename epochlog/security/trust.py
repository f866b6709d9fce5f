"""What a CA file says to trust: its certificates, checked whole, and their fingerprints.

A CA file is a bundle: one certificate, or several while a CA is being replaced
(the old and the new one, both trusted). `trusted_cas` reads a bundle and refuses
anything that is not wholly a bundle of certificates: garbage, a file that is
empty, or one cut off in the middle of a write (`-----BEGIN` without its
`-----END`, or the first dashes of a BEGIN line; text outside the blocks, as
some tools write, is let be). A file cut off after a complete first certificate would otherwise read
as a bundle of that one certificate, and whoever loaded it would stop trusting the
others; refusing it keeps the trust in force until the whole file is there.

`fingerprint` names a certificate by the SHA-256 of its DER bytes (what
`openssl x509 -fingerprint -sha256` prints, lower-case hex without colons):
processes report the CAs they trust by it, and the operator compares.

Pure: the caller reads the bytes.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization

MAX_BUNDLE: Final = 8
"""Certificates a CA file may hold: a rotation needs two; a few more for hand-made ones."""

_BLOCK: Final = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)
_BEGIN: Final = re.compile(rb"-----BEGIN ")
_ARMOR: Final = re.compile(rb"^\s*-", re.MULTILINE)
"""A line outside the blocks that starts like PEM armor: the start of a block cut off."""


class TrustFileError(ValueError):
    """A CA file that is not wholly a bundle of certificates (the reason says why)."""


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def trusted_cas(pem: bytes) -> tuple[x509.Certificate, ...]:
    """The certificates of the bundle `pem`, in order; TrustFileError unless every PEM block
    in it is a whole certificate and there is at least one."""
    blocks = _BLOCK.findall(pem)
    if len(_BEGIN.findall(pem)) != len(blocks) or _ARMOR.search(_BLOCK.sub(b"", pem)):
        raise TrustFileError("a PEM block without its END line (a file cut off mid-write?)")
    if not blocks:
        raise TrustFileError("no certificate in the file")
    if len(blocks) > MAX_BUNDLE:
        raise TrustFileError(f"{len(blocks)} certificates; a CA file holds at most {MAX_BUNDLE}")
    if any(kind != b"CERTIFICATE" for kind, _ in blocks):
        raise TrustFileError("a PEM block that is not a certificate (a key?)")
    try:
        certs = tuple(x509.load_pem_x509_certificates(pem))
    except ValueError as exc:
        raise TrustFileError(f"a certificate that does not parse: {exc}") from None
    if len(certs) != len(blocks):
        raise TrustFileError("a certificate that does not parse")
    return certs


def fingerprints(certs: tuple[x509.Certificate, ...]) -> tuple[str, ...]:
    return tuple(sorted({fingerprint(c) for c in certs}))


def bundle_pem(certs: tuple[x509.Certificate, ...]) -> bytes:
    """The PEM of a bundle of `certs`, in order."""
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
