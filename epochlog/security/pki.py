"""Certificate authorities and the certificates they issue, as PEM files.

Two CAs, as Strimzi has: the cluster CA signs the certificates of brokers and the
operator (server and client use: they call each other), the clients CA signs
users' client certificates. Keys are ECDSA P-256. Certificates are written next
to their keys as `<name>.crt` / `<name>.key`; a key is readable by its owner
only. Files are replaced by rename, so a process that reloads them on rotation
never reads half a file.

`DevPki` lays out what a local cluster needs in one directory: both CAs, a
certificate per broker, one for the operator and one for the `admin` user.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from epochlog.security.principal import OPERATOR_URI, broker_uri

CLUSTER_CA_NAME: Final = "epochlog cluster CA"
CLIENTS_CA_NAME: Final = "epochlog clients CA"
DEFAULT_CA_DAYS: Final = 3650
DEFAULT_CERT_DAYS: Final = 365
LOCAL_HOSTS: Final = ("localhost", "127.0.0.1", "::1")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, directory: Path | str, name: str) -> tuple[Path, Path]:
        """Write `<name>.crt` and `<name>.key` (mode 0600) atomically; their paths."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = d / f"{name}.crt", d / f"{name}.key"
        # The key first: a reader that sees the new certificate must find its key.
        write_file(key_path, self.key_pem(), 0o600)
        write_file(cert_path, self.cert_pem(), 0o644)
        return cert_path, key_path

    @classmethod
    def load(cls, cert_path: Path | str, key_path: Path | str) -> Issued:
        return cls.from_pem(Path(cert_path).read_bytes(), Path(key_path).read_bytes())

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> Issued:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("not an EC private key")
        return cls(cert, key)


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data` (mode `mode`) by rename: a reader sees the old file or
    the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def new_ca(common_name: str, *, days: float = DEFAULT_CA_DAYS) -> Issued:
    key = _key()
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued,
    common_name: str,
    *,
    uris: Iterable[str] = (),
    hosts: Iterable[str] = (),
    days: int = DEFAULT_CERT_DAYS,
    server: bool = True,
) -> Issued:
    """A certificate signed by `ca` for `common_name`, naming `uris` and `hosts` (DNS
    names or IP addresses) as subject alternative names; client use always, server use
    when `server`."""
    key = _key()
    now = _now()
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + (
        [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def issue_broker(ca: Issued, broker_id: int, hosts: Iterable[str] = LOCAL_HOSTS) -> Issued:
    return issue(ca, f"epochlog-broker-{broker_id}", uris=[broker_uri(broker_id)], hosts=hosts)


def issue_operator(ca: Issued, hosts: Iterable[str] = LOCAL_HOSTS) -> Issued:
    return issue(ca, "epochlog-operator", uris=[OPERATOR_URI], hosts=hosts)


def issue_user(ca: Issued, user: str) -> Issued:
    return issue(ca, user, server=False)


@dataclass(frozen=True)
class DevPki:
    """The certificates of a local cluster, in one directory:

    cluster-ca.crt/.key, clients-ca.crt/.key, broker-<id>.crt/.key,
    operator.crt/.key, user-<name>.crt/.key."""

    directory: Path

    @property
    def cluster_ca(self) -> Path:
        return self.directory / "cluster-ca.crt"

    @property
    def clients_ca(self) -> Path:
        return self.directory / "clients-ca.crt"

    def broker(self, broker_id: int) -> tuple[Path, Path]:
        return self._pair(f"broker-{broker_id}")

    def operator(self) -> tuple[Path, Path]:
        return self._pair("operator")

    def user(self, name: str) -> tuple[Path, Path]:
        return self._pair(f"user-{name}")

    def _pair(self, name: str) -> tuple[Path, Path]:
        return self.directory / f"{name}.crt", self.directory / f"{name}.key"

    def _ca(self, stem: str, common_name: str) -> Issued:
        cert, key = self._pair(stem)
        if cert.exists() and key.exists():
            return Issued.load(cert, key)
        ca = new_ca(common_name)
        ca.write(self.directory, stem)
        return ca

    def ensure(
        self,
        broker_ids: Iterable[int],
        users: Iterable[str] = ("admin",),
        hosts: Iterable[str] = LOCAL_HOSTS,
    ) -> DevPki:
        """Create whatever of the CAs and certificates is missing; keep what exists."""
        self.directory.mkdir(parents=True, exist_ok=True)
        cluster = self._ca("cluster-ca", CLUSTER_CA_NAME)
        clients = self._ca("clients-ca", CLIENTS_CA_NAME)
        hosts = tuple(hosts)
        for b in broker_ids:
            if self._missing(f"broker-{b}"):
                issue_broker(cluster, b, hosts).write(self.directory, f"broker-{b}")
        if self._missing("operator"):
            issue_operator(cluster, hosts).write(self.directory, "operator")
        for u in users:
            if self._missing(f"user-{u}"):
                issue_user(clients, u).write(self.directory, f"user-{u}")
        return self

    def _missing(self, stem: str) -> bool:
        cert, key = self._pair(stem)
        return not (cert.exists() and key.exists())

    def cluster_ca_issuer(self) -> Issued:
        return Issued.load(*self._pair("cluster-ca"))

    def clients_ca_issuer(self) -> Issued:
        return Issued.load(*self._pair("clients-ca"))
