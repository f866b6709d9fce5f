"""`epochlog.security.trust`: a CA file is taken whole or not at all: a bundle of old and
new CA is two certificates, and garbage, a key, or a file cut off anywhere is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochlog.security.pki import CLUSTER_CA_NAME, Issued, new_ca
from epochlog.security.trust import (
    TrustFileError,
    bundle_pem,
    fingerprint,
    fingerprints,
    trusted_cas,
)

OLD = new_ca(CLUSTER_CA_NAME)
NEW = new_ca(CLUSTER_CA_NAME)
BUNDLE = bundle_pem((OLD.cert, NEW.cert))


def _fp(issued: Issued) -> str:
    return fingerprint(issued.cert)


def test_a_bundle_trusts_each_of_its_certificates() -> None:
    assert fingerprints(trusted_cas(OLD.cert_pem())) == (_fp(OLD),)
    assert fingerprints(trusted_cas(BUNDLE)) == tuple(sorted({_fp(OLD), _fp(NEW)}))
    # Same name, other key: two CAs, told apart by fingerprint.
    assert OLD.cert.subject == NEW.cert.subject
    assert _fp(OLD) != _fp(NEW)


@pytest.mark.parametrize(
    "pem",
    [
        b"",
        b"not a certificate\n",
        OLD.key_pem(),
        OLD.cert_pem() + OLD.key_pem(),
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ],
    ids=["empty", "garbage", "a key", "certificate and key", "bad base64 content"],
)
def test_what_is_not_a_bundle_is_refused(pem: bytes) -> None:
    with pytest.raises(TrustFileError):
        trusted_cas(pem)


@given(st.integers(min_value=1, max_value=len(BUNDLE) - 1))
def test_a_bundle_cut_off_anywhere_is_refused_or_is_a_whole_first_certificate(cut: int) -> None:
    """A writer that replaces the file in place is seen at any length. Whatever a cut-off
    file is taken for, it never drops a CA the whole file trusts, except exactly at the
    boundary after the first certificate, where the file is a whole bundle of one (the
    writers of CA files replace them by rename, so that no reader sees that)."""
    head = BUNDLE[:cut]
    try:
        got = fingerprints(trusted_cas(head))
    except TrustFileError:
        return
    if head.strip() == BUNDLE.strip():  # only the last newline missing
        assert got == fingerprints((OLD.cert, NEW.cert))
    else:
        assert head.strip() == OLD.cert_pem().strip()
        assert got == (_fp(OLD),)
