"""Who a peer is: the principal a verified certificate or a bearer token stands for.

The cluster CA issues certificates to brokers and the operator; each names its
holder in a URI subject alternative name (`spiffe://epochlog/broker/3`,
`spiffe://epochlog/operator`), so a broker's certificate names its broker id.
The clients CA issues user certificates; a user is the certificate's common
name (`User:<CN>`), as in Kafka and Strimzi. Which CA issued a certificate is
read from its issuer: the TLS handshake has already checked the signature
against the trusted CAs, and the two CAs have different names.

Parsing a certificate is pure: the caller hands over the DER bytes the TLS
layer verified.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.x509.oid import NameOID

TRUST_DOMAIN: Final = "epochlog"
BROKER_URI_PREFIX: Final = f"spiffe://{TRUST_DOMAIN}/broker/"
OPERATOR_URI: Final = f"spiffe://{TRUST_DOMAIN}/operator"


class Kind(enum.StrEnum):
    BROKER = "Broker"
    OPERATOR = "Operator"
    USER = "User"
    ANONYMOUS = "Anonymous"
    """No credentials: only on a listener that was explicitly started in plaintext."""


@dataclass(frozen=True)
class Principal:
    kind: Kind
    name: str
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    """Names in the certificate: the addresses its holder may advertise."""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def broker_id(self) -> int | None:
        return int(self.name) if self.kind is Kind.BROKER else None

    @property
    def is_cluster(self) -> bool:
        """A broker or the operator: a holder of a cluster CA certificate."""
        return self.kind in (Kind.BROKER, Kind.OPERATOR)

    def may_advertise(self, address: str) -> bool:
        """Whether `address` (a base URL) names a host this certificate was issued for."""
        host = urlsplit(address).hostname
        if not host:
            return False
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return host.lower().rstrip(".") in self.dns_names
        return str(ip) in self.ip_addresses


ANONYMOUS: Final = Principal(Kind.ANONYMOUS, "anonymous")


def broker_uri(broker_id: int) -> str:
    return f"{BROKER_URI_PREFIX}{broker_id}"


def principal_from_certificate(der: bytes, cluster_ca: x509.Name) -> Principal | None:
    """The principal of a verified peer certificate; None when it names nobody we know
    (a cluster certificate without an epochlog URI, a client certificate without CN)."""
    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = san.get_values_for_type(x509.UniformResourceIdentifier)
        dns = tuple(d.lower().rstrip(".") for d in san.get_values_for_type(x509.DNSName))
        ips = tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        uris, dns, ips = [], (), ()
    if cert.issuer == cluster_ca:
        for uri in uris:
            if uri == OPERATOR_URI:
                return Principal(Kind.OPERATOR, "operator", dns, ips)
            ident = uri.removeprefix(BROKER_URI_PREFIX)
            if ident != uri and ident.isdigit() and ident == str(int(ident)):
                return Principal(Kind.BROKER, ident, dns, ips)
        return None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = names[0].value if names else ""
    if not isinstance(cn, str) or not cn:
        return None
    return Principal(Kind.USER, cn)
