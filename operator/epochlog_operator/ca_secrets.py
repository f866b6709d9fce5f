"""A CA's Secret as the operator keeps it, through a replacement: what it holds and means.

    ca.crt, ca.key                 the CA that signs now
    incoming-ca.crt, incoming-ca.key   TrustingNew: the next CA, trusted, not signing yet
    outgoing-ca.crt                Reissuing: the previous CA, trusted, signing no more

The phase is what the keys say (`epochlog_operator.ca_rotation.CaSet`); the annotation
`epochlog.dev/ca-phase` repeats it for people (`kubectl get secret -o yaml`). The
trusted bundle (`bundle`) is the signing CA followed by the other one: it goes into
`<prefix>-<ca>-cert`, the brokers' Secrets and the operator's own files.

A CA Secret without the label `app.kubernetes.io/managed-by: epochlog-operator` was
brought by the user (or cert-manager keeps it): the operator uses it and never
replaces it (`managed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from epochlog.security.pki import Issued
from epochlog.security.trust import bundle_pem, fingerprint
from epochlog_operator.ca_rotation import Action, CaSet

MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "epochlog-operator"}
PHASE_ANNOTATION: Final = "epochlog.dev/ca-phase"


@dataclass(frozen=True)
class CaKeys:
    signing: Issued
    incoming: Issued | None = None
    outgoing: x509.Certificate | None = None
    managed: bool = True

    @classmethod
    def from_data(cls, data: dict[str, bytes], *, managed: bool) -> CaKeys:
        """From a Secret's decoded data (ValueError when it lacks ca.crt and ca.key)."""
        if "ca.crt" not in data or "ca.key" not in data:
            raise ValueError("a CA Secret holds ca.crt and ca.key")
        incoming = None
        if "incoming-ca.crt" in data and "incoming-ca.key" in data:
            incoming = Issued.from_pem(data["incoming-ca.crt"], data["incoming-ca.key"])
        outgoing = None
        if "outgoing-ca.crt" in data and incoming is None:
            outgoing = x509.load_pem_x509_certificate(data["outgoing-ca.crt"])
        signing = Issued.from_pem(data["ca.crt"], data["ca.key"])
        return cls(signing, incoming, outgoing, managed)

    def data(self) -> dict[str, bytes]:
        out = {"ca.crt": self.signing.cert_pem(), "ca.key": self.signing.key_pem()}
        if self.incoming is not None:
            out["incoming-ca.crt"] = self.incoming.cert_pem()
            out["incoming-ca.key"] = self.incoming.key_pem()
        if self.outgoing is not None:
            out["outgoing-ca.crt"] = bundle_pem((self.outgoing,))
        return out

    def certificates(self) -> tuple[x509.Certificate, ...]:
        """The trusted CAs, the signing one first."""
        others = (self.incoming.cert if self.incoming else None, self.outgoing)
        return (self.signing.cert, *(c for c in others if c is not None))

    def bundle(self) -> bytes:
        return bundle_pem(self.certificates())

    def cas(self) -> CaSet:
        return CaSet(
            signing=fingerprint(self.signing.cert),
            incoming=fingerprint(self.incoming.cert) if self.incoming else None,
            outgoing=fingerprint(self.outgoing) if self.outgoing else None,
        )

    def issuer_of(self, cert: x509.Certificate) -> str | None:
        """Fingerprint of the trusted CA whose key signed `cert`; None: none of them."""
        for ca in self.certificates():
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return fingerprint(ca)
        return None

    def after(self, action: Action, made: Issued | None = None) -> CaKeys:
        """The Secret after `action` (START takes the CA made for it)."""
        if action is Action.START:
            assert made is not None
            assert self.incoming is None
            assert self.outgoing is None
            return CaKeys(self.signing, incoming=made, managed=self.managed)
        if action is Action.PROMOTE:
            assert self.incoming is not None
            return CaKeys(self.incoming, outgoing=self.signing.cert, managed=self.managed)
        if action is Action.DROP:
            return CaKeys(self.signing, managed=self.managed)
        return self
