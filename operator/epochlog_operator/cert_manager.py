"""The cluster's certificates in Kubernetes Secrets, issued and renewed by the operator.

`CertificateManager.reconcile` creates the cluster CA and the clients CA when
their Secrets are missing (and keeps them otherwise), issues a certificate per
broker and one for the operator into their Secrets (`certificates` lists them
and says which are due), and writes the operator's own certificate to a private
directory for its heartbeat listener, where `CertReloader` picks a renewal up.
`run` does it again every `interval_s`. Brokers mount their Secret; a rotated
certificate reaches them when the kubelet updates the mount, and their own
reloader takes it without a restart.

Secrets are created with POST and replaced with PUT at the resourceVersion read:
two operators racing get a 409 for one of them, which tries again next round.
"""

from __future__ import annotations

import asyncio
import base64
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import structlog
from cryptography import x509

from epochlog.objects import ObjectMeta, SecretObject, to_body
from epochlog.security.pki import (
    CLIENTS_CA_NAME,
    CLUSTER_CA_NAME,
    Issued,
    issue,
    new_ca,
    write_file,
)
from epochlog.security.tls import TlsFiles
from epochlog_operator.certificates import CertificateSettings, Leaf, ca_expiring, due
from epochlog_operator.kube import ConflictError, KubeClient, NotFoundError

log = structlog.get_logger("epochlog.operator.certificates")

TLS_TYPE: Final = "kubernetes.io/tls"
OPAQUE: Final = "Opaque"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "epochlog-operator"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(obj: SecretObject | None, key: str) -> bytes | None:
    value = obj.data.get(key) if obj is not None else None
    return base64.b64decode(value) if value is not None else None


class CertificateManager:
    def __init__(self, kube: KubeClient, settings: CertificateSettings, files_dir: Path) -> None:
        self.kube = kube
        self.settings = settings
        self.files_dir = files_dir
        self.issued: list[str] = []
        """Secrets written, in order, with why (for logs and tests)."""

    def _path(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{self.settings.namespace}/secrets"
        return base if name is None else f"{base}/{name}"

    async def _get(self, name: str) -> SecretObject | None:
        try:
            got = await self.kube.request("GET", self._path(name))
        except NotFoundError:
            return None
        return SecretObject.model_validate(got)

    async def _put(
        self,
        name: str,
        data: dict[str, bytes],
        kind: str,
        current: SecretObject | None,
    ) -> None:
        secret = SecretObject(
            metadata=ObjectMeta(
                name=name,
                namespace=self.settings.namespace,
                labels=dict(MANAGED_BY),
                resource_version=current.metadata.resource_version if current else None,
            ),
            type=kind,
            data={k: _b64(v) for k, v in data.items()},
        )
        if current is None:
            await self.kube.request("POST", self._path(), to_body(secret))
        else:
            await self.kube.request("PUT", self._path(name), to_body(secret))

    async def _ca(self, stem: str, common_name: str) -> Issued:
        name = self.settings.secret(stem)
        current = await self._get(name)
        cert, key = _unb64(current, "ca.crt"), _unb64(current, "ca.key")
        if cert is not None and key is not None:
            ca = Issued.from_pem(cert, key)
        else:
            ca = new_ca(common_name)
            try:
                await self._put(
                    name, {"ca.crt": ca.cert_pem(), "ca.key": ca.key_pem()}, OPAQUE, current
                )
            except ConflictError:
                # Another operator replica made it first: use that one.
                raced = await self._get(name)
                cert, key = _unb64(raced, "ca.crt"), _unb64(raced, "ca.key")
                if cert is None or key is None:
                    raise
                return Issued.from_pem(cert, key)
            log.info("ca_created", secret=name, notAfter=ca.cert.not_valid_after_utc.isoformat())
            self.issued.append(f"{name}: missing")
        public = self.settings.secret(f"{stem}-cert")
        held = await self._get(public)
        if _unb64(held, "ca.crt") != ca.cert_pem():
            try:
                await self._put(public, {"ca.crt": ca.cert_pem()}, OPAQUE, held)
            except ConflictError as exc:
                # Another replica wrote it meanwhile; the next round checks it again.
                log.info("certificate_write_conflict", secret=public, error=exc.message)
        now = datetime.now(UTC)
        if ca_expiring(ca.cert, now, timedelta(days=self.settings.renew_before_days)):
            log.warning(
                "ca_expiring",
                secret=name,
                notAfter=ca.cert.not_valid_after_utc.isoformat(),
                note="replace the CA by hand: every trust store needs the new one first",
            )
        return ca

    async def reconcile(self) -> None:
        """One round: the CAs, every certificate that is due, the operator's files."""
        cluster = await self._ca("cluster-ca", CLUSTER_CA_NAME)
        clients = await self._ca("clients-ca", CLIENTS_CA_NAME)
        now = datetime.now(UTC)
        renew_before = timedelta(days=self.settings.renew_before_days)
        for leaf in self.settings.wanted():
            try:
                await self._leaf(leaf, cluster, clients, now, renew_before)
            except ConflictError as exc:
                log.info("certificate_write_conflict", secret=leaf.secret, error=exc.message)
        await self._write_operator_files()

    async def _leaf(
        self,
        leaf: Leaf,
        cluster: Issued,
        clients: Issued,
        now: datetime,
        renew_before: timedelta,
    ) -> None:
        current = await self._get(leaf.secret)
        pem = _unb64(current, "tls.crt")
        held = x509.load_pem_x509_certificate(pem) if pem else None
        why = due(leaf, held, cluster.cert, now, renew_before)
        trust = {"ca.crt": cluster.cert_pem(), "clients-ca.crt": clients.cert_pem()}
        if why is None:
            if any(_unb64(current, k) != v for k, v in trust.items()):
                data = {k: _unb64(current, k) or b"" for k in ("tls.crt", "tls.key")}
                await self._put(leaf.secret, {**data, **trust}, TLS_TYPE, current)
            return
        new = issue(
            cluster,
            leaf.secret,
            uris=[leaf.uri],
            hosts=leaf.hosts,
            days=self.settings.validity_days,
        )
        data = {"tls.crt": new.cert_pem(), "tls.key": new.key_pem(), **trust}
        await self._put(leaf.secret, data, TLS_TYPE, current)
        self.issued.append(f"{leaf.secret}: {why}")
        log.info(
            "certificate_issued",
            secret=leaf.secret,
            reason=why,
            serial=new.cert.serial_number,
            notAfter=new.cert.not_valid_after_utc.isoformat(),
        )

    async def _write_operator_files(self) -> None:
        secret = await self._get(self.settings.secret("operator"))
        self.files_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for key, file, mode in (
            ("ca.crt", "ca.crt", 0o644),
            ("tls.key", "tls.key", 0o600),
            ("tls.crt", "tls.crt", 0o644),
        ):
            data = _unb64(secret, key)
            path = self.files_dir / file
            if data is not None and (not path.exists() or path.read_bytes() != data):
                write_file(path, data, mode)

    def operator_files(self) -> TlsFiles:
        d = self.files_dir
        return TlsFiles(str(d / "ca.crt"), str(d / "tls.crt"), str(d / "tls.key"))

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.reconcile()
            except Exception as exc:
                log.error("certificate_round_failed", error=f"{type(exc).__name__}: {exc}")


def private_dir() -> Path:
    """A fresh directory only this process's user can read, for the operator's key."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="epochlog-operator-tls-"))
    os.chmod(path, 0o700)
    return path
