"""Which of the cluster's certificates to issue or renew: decisions only.

With `--manage-certificates` the operator keeps the cluster's TLS material in
Secrets, as Strimzi's cluster operator does (`cert_manager` reads and writes
them):

    <prefix>-cluster-ca        ca.crt, ca.key   the cluster CA (brokers, operator)
    <prefix>-cluster-ca-cert   ca.crt           its certificate alone, for clients
    <prefix>-clients-ca        ca.crt, ca.key   the clients CA (users)
    <prefix>-clients-ca-cert   ca.crt
    <prefix>-broker-<id>       tls.crt, tls.key, ca.crt, clients-ca.crt
    <prefix>-operator          tls.crt, tls.key, ca.crt

`due` says why a leaf certificate must be issued now (missing, expiring within
the renewal window, issued by another CA, naming other hosts or another
identity) or None when the one held is good. CAs are created when missing; one the
operator made is replaced with an overlap as it nears its end (`ca_rotation`,
`ca_secrets`), one the user brought is only reported (`ca_expiring`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509

from epochlog.security.principal import OPERATOR_URI, broker_uri
from epochlog.security.renewal import renewal_due


@dataclass(frozen=True)
class CertificateSettings:
    namespace: str
    prefix: str = "epochlog"
    broker_ids: tuple[int, ...] = ()
    broker_hosts: str = "epochlog-broker-{id}.epochlog-broker.{namespace}.svc"
    """Host names of broker `{id}` (comma separated): what it advertises."""
    operator_hosts: str = "epochlog-operator.{namespace}.svc"
    validity_days: int = 365
    renew_before_days: int = 30
    ca_validity_days: float = 3650
    ca_renew_before_days: float = 30

    def secret(self, what: str) -> str:
        return f"{self.prefix}-{what}"

    def hosts_of(self, template: str, **values: object) -> tuple[str, ...]:
        names = template.format(namespace=self.namespace, **values)
        return tuple(h.strip() for h in names.split(",") if h.strip())

    def wanted(self) -> list[Leaf]:
        leaves = [
            Leaf(
                self.secret(f"broker-{b}"),
                broker_uri(b),
                self.hosts_of(self.broker_hosts, id=b),
                broker_id=b,
            )
            for b in self.broker_ids
        ]
        leaves.append(
            Leaf(self.secret("operator"), OPERATOR_URI, self.hosts_of(self.operator_hosts))
        )
        return leaves


@dataclass(frozen=True)
class Leaf:
    """A certificate the cluster needs: its Secret, identity and host names."""

    secret: str
    uri: str
    hosts: tuple[str, ...]
    broker_id: int | None = None
    """The broker that serves it; None: the operator."""


def _names(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    uris = set(san.get_values_for_type(x509.UniformResourceIdentifier))
    hosts = {d.lower() for d in san.get_values_for_type(x509.DNSName)}
    hosts |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return uris, hosts


def due(
    leaf: Leaf,
    held: x509.Certificate | None,
    ca: x509.Certificate,
    now: datetime,
    renew_before: timedelta,
) -> str | None:
    """Why `leaf` must be issued now, or None when `held` serves."""
    why = renewal_due(held, ca, now, renew_before)
    if why is not None or held is None:
        return why
    uris, hosts = _names(held)
    if leaf.uri not in uris:
        return f"names another identity than {leaf.uri}"
    if {h.lower() for h in leaf.hosts} - hosts:
        return f"does not name {', '.join(sorted(set(leaf.hosts) - hosts))}"
    return None


def ca_expiring(ca: x509.Certificate, now: datetime, renew_before: timedelta) -> bool:
    return ca.not_valid_after_utc - renew_before <= now
