"""The cluster's certificates in Kubernetes Secrets, issued and renewed by the operator.

`CertificateManager.reconcile` creates the cluster CA and the clients CA when
their Secrets are missing, takes one step of the replacement of a CA it made
that nears its end (`ca_rotation` decides from the brokers' heartbeat reports of
what they trust and serve, and the operator's own; `ca_secrets` says what the CA
Secret holds), publishes each CA's trusted bundle, issues a certificate per
broker and one for the operator into their Secrets from the signing CA
(`certificates` lists them and says which are due), and writes the operator's own
files to a private directory for its heartbeat listener, where its `TlsSource`
picks a change up. Each step of a replacement is logged (`ca_rotation_step`),
posted as an Event on the CA Secret and counted; the phase is a metric
(`epochlog_operator_ca_phase`) and an annotation of the Secret.
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
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import structlog
from cryptography import x509

from epochlog.objects import ObjectMeta, SecretObject, to_body
from epochlog.protocol.heartbeat import TlsReport
from epochlog.security.pki import (
    CLIENTS_CA_NAME,
    CLUSTER_CA_NAME,
    issue,
    new_ca,
    write_file,
)
from epochlog.security.tls import TlsFiles, TlsSource
from epochlog.security.trust import fingerprint
from epochlog_operator.ca_rotation import (
    Action,
    Holder,
    Observed,
    Phase,
    Policy,
    decide,
)
from epochlog_operator.ca_rotation import Leaf as RotationLeaf
from epochlog_operator.ca_secrets import MANAGED_BY, PHASE_ANNOTATION, CaKeys
from epochlog_operator.certificates import CertificateSettings, Leaf, ca_expiring, due
from epochlog_operator.kube import ConflictError, KubeClient, NotFoundError
from epochlog_operator.metrics import Metrics

log = structlog.get_logger("epochlog.operator.certificates")

TLS_TYPE: Final = "kubernetes.io/tls"
OPAQUE: Final = "Opaque"
CAS: Final = (("cluster-ca", CLUSTER_CA_NAME), ("clients-ca", CLIENTS_CA_NAME))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(obj: SecretObject | None, key: str) -> bytes | None:
    value = obj.data.get(key) if obj is not None else None
    return base64.b64decode(value) if value is not None else None


class CertificateManager:
    def __init__(
        self,
        kube: KubeClient,
        settings: CertificateSettings,
        files_dir: Path,
        *,
        metrics: Metrics | None = None,
        reports: Mapping[int, TlsReport] | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.files_dir = files_dir
        self.metrics = metrics or Metrics()
        self.reports: Mapping[int, TlsReport] = reports if reports is not None else {}
        """Each broker's last heartbeat report of what it trusts and serves."""
        self.own: TlsSource | None = None
        """The operator's own contexts, once it serves (a holder of the cluster CA)."""
        self.issued: list[str] = []
        """Secrets written, in order, with why (for logs and tests)."""
        self._waiting: dict[str, str] = {}

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
        annotations: dict[str, str] | None = None,
    ) -> None:
        secret = SecretObject(
            metadata=ObjectMeta(
                name=name,
                namespace=self.settings.namespace,
                labels=dict(MANAGED_BY),
                annotations=annotations,
                resource_version=current.metadata.resource_version if current else None,
            ),
            type=kind,
            data={k: _b64(v) for k, v in data.items()},
        )
        if current is None:
            await self.kube.request("POST", self._path(), to_body(secret))
        else:
            await self.kube.request("PUT", self._path(name), to_body(secret))

    async def _ca(self, stem: str, common_name: str) -> tuple[CaKeys, SecretObject | None]:
        """The CA of Secret `<prefix>-<stem>`, made when missing, and the Secret."""
        name = self.settings.secret(stem)
        current = await self._get(name)
        if current is not None and {"ca.crt", "ca.key"} <= current.data.keys():
            labels = current.metadata.labels or {}
            managed = all(labels.get(k) == v for k, v in MANAGED_BY.items())
            data = {k: base64.b64decode(v) for k, v in current.data.items()}
            return CaKeys.from_data(data, managed=managed), current
        keys = CaKeys(new_ca(common_name, days=self.settings.ca_validity_days))
        try:
            await self._put(name, keys.data(), OPAQUE, current, _phase(Phase.STEADY))
        except ConflictError:
            # Another operator replica made it first: use that one.
            raced = await self._get(name)
            if raced is None or not {"ca.crt", "ca.key"} <= raced.data.keys():
                raise
            data = {k: base64.b64decode(v) for k, v in raced.data.items()}
            return CaKeys.from_data(data, managed=True), raced
        ends = keys.signing.cert.not_valid_after_utc.isoformat()
        log.info("ca_created", secret=name, notAfter=ends)
        self.issued.append(f"{name}: missing")
        return keys, await self._get(name)

    async def _publish(self, stem: str, keys: CaKeys) -> None:
        """The trusted bundle into `<prefix>-<stem>-cert`, for clients to mount."""
        public = self.settings.secret(f"{stem}-cert")
        held = await self._get(public)
        if _unb64(held, "ca.crt") != keys.bundle():
            try:
                await self._put(public, {"ca.crt": keys.bundle()}, OPAQUE, held)
            except ConflictError as exc:
                # Another replica wrote it meanwhile; the next round checks it again.
                log.info("certificate_write_conflict", secret=public, error=exc.message)

    def _holders(self, stem: str) -> tuple[Holder, ...]:
        def trusted(report: TlsReport | None) -> frozenset[str] | None:
            if report is None:
                return None
            return frozenset(report.cluster_cas if stem == "cluster-ca" else report.clients_cas)

        holders = [
            Holder(f"broker-{b}", trusted(self.reports.get(b))) for b in self.settings.broker_ids
        ]
        if stem == "cluster-ca" and self.own is not None:
            self.own.refresh()
            holders.append(Holder("operator", frozenset(self.own.loaded.cluster_cas)))
        elif stem == "cluster-ca":
            holders.append(Holder("operator", None))
        return tuple(holders)

    def _served(self, leaf: Leaf, cert: x509.Certificate) -> bool:
        if leaf.broker_id is None:
            served = self.own.loaded.certificate if self.own is not None else None
        else:
            report = self.reports.get(leaf.broker_id)
            served = report.certificate if report is not None else None
        return served == fingerprint(cert)

    def _leaves(
        self, stem: str, keys: CaKeys, held: Mapping[str, x509.Certificate | None]
    ) -> tuple[RotationLeaf, ...]:
        if stem != "cluster-ca":
            return ()  # users' certificates: not kept here
        out = []
        for leaf in self.settings.wanted():
            cert = held.get(leaf.secret)
            out.append(
                RotationLeaf(
                    leaf.secret,
                    keys.issuer_of(cert) if cert is not None else None,
                    cert is not None and self._served(leaf, cert),
                )
            )
        return tuple(out)

    async def _rotate(
        self,
        stem: str,
        common_name: str,
        keys: CaKeys,
        secret: SecretObject | None,
        held: Mapping[str, x509.Certificate | None],
    ) -> CaKeys:
        """One step of the replacement of CA `stem`, when one is due; the CA after it."""
        name = self.settings.secret(stem)
        now = datetime.now(UTC)
        renew_before = timedelta(days=self.settings.ca_renew_before_days)
        if not keys.managed:
            if ca_expiring(keys.signing.cert, now, renew_before):
                log.warning(
                    "ca_expiring",
                    secret=name,
                    notAfter=keys.signing.cert.not_valid_after_utc.isoformat(),
                    note="a CA the operator did not make is not replaced here: put the new "
                    "CA beside the old one in the Secret's trust first (docs: certificates)",
                )
            self._phase_metric(stem, Phase.STEADY)
            return keys
        cas = keys.cas()
        seen = Observed(
            now=now,
            signing_ends=keys.signing.cert.not_valid_after_utc,
            outgoing_ends=keys.outgoing.not_valid_after_utc if keys.outgoing else None,
            holders=self._holders(stem),
            leaves=self._leaves(stem, keys, held),
        )
        policy = Policy(renew_before, keep_outgoing_until_it_ends=stem == "clients-ca")
        decision = decide(cas, seen, policy)
        if decision.action is Action.WAIT:
            self._phase_metric(stem, cas.phase)
            if cas.phase is not Phase.STEADY and self._waiting.get(stem) != decision.reason:
                self._waiting[stem] = decision.reason
                log.info(
                    "ca_rotation_waiting", secret=name, phase=cas.phase, reason=decision.reason
                )
            return keys
        made = None
        if decision.action is Action.START:
            made = new_ca(common_name, days=self.settings.ca_validity_days)
        after = keys.after(decision.action, made)
        phase = after.cas().phase
        await self._put(name, after.data(), OPAQUE, secret, _phase(phase))
        self._waiting.pop(stem, None)
        self.metrics.ca_steps.inc(ca=stem, step=str(decision.action))
        self._phase_metric(stem, phase)
        log.info(
            "ca_rotation_step",
            secret=name,
            step=str(decision.action),
            phase=phase,
            reason=decision.reason,
            signing=after.cas().signing,
            trusted=sorted(after.cas().trusted),
        )
        await self._event(name, decision.action, phase, decision.reason)
        return after

    def _phase_metric(self, stem: str, phase: Phase) -> None:
        for p in Phase:
            self.metrics.ca_phase.set(1 if p is phase else 0, ca=stem, phase=str(p))

    async def _event(self, name: str, action: Action, phase: Phase, reason: str) -> None:
        secret = await self._get(name)
        if secret is None:
            return
        try:
            await self.kube.post_event(
                to_body(secret),
                type_="Normal",
                reason=f"CaRotation{str(action).capitalize()}",
                message=f"{phase}: {reason}",
                instance="epochlog-operator",
                kind="Secret",
                api_version="v1",
            )
        except Exception as exc:  # an Event is for people; the step is written
            log.info("ca_event_not_posted", secret=name, error=f"{type(exc).__name__}: {exc}")

    async def reconcile(self) -> None:
        """One round: the CAs and a step of their replacement, every certificate that is
        due, the operator's files."""
        leaves = self.settings.wanted()
        current = {leaf.secret: await self._get(leaf.secret) for leaf in leaves}
        held = {name: _certificate(obj) for name, obj in current.items()}
        cas: dict[str, CaKeys] = {}
        for stem, common_name in CAS:
            keys, secret = await self._ca(stem, common_name)
            try:
                cas[stem] = await self._rotate(stem, common_name, keys, secret, held)
            except ConflictError as exc:
                log.info("certificate_write_conflict", secret=stem, error=exc.message)
                return  # another replica moved: start again from what is there next round
            await self._publish(stem, cas[stem])
        now = datetime.now(UTC)
        renew_before = timedelta(days=self.settings.renew_before_days)
        for leaf in leaves:
            try:
                await self._leaf(
                    leaf,
                    current[leaf.secret],
                    cas["cluster-ca"],
                    cas["clients-ca"],
                    now,
                    renew_before,
                )
            except ConflictError as exc:
                log.info("certificate_write_conflict", secret=leaf.secret, error=exc.message)
        await self._write_operator_files()

    async def _leaf(
        self,
        leaf: Leaf,
        current: SecretObject | None,
        cluster: CaKeys,
        clients: CaKeys,
        now: datetime,
        renew_before: timedelta,
    ) -> None:
        held = _certificate(current)
        why = due(leaf, held, cluster.signing.cert, now, renew_before)
        trust = {"ca.crt": cluster.bundle(), "clients-ca.crt": clients.bundle()}
        if why is None:
            if any(_unb64(current, k) != v for k, v in trust.items()):
                data = {k: _unb64(current, k) or b"" for k in ("tls.crt", "tls.key")}
                await self._put(leaf.secret, {**data, **trust}, TLS_TYPE, current)
            return
        new = issue(
            cluster.signing,
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


def _phase(phase: Phase) -> dict[str, str]:
    return {PHASE_ANNOTATION: str(phase)}


def _certificate(obj: SecretObject | None) -> x509.Certificate | None:
    pem = _unb64(obj, "tls.crt")
    return x509.load_pem_x509_certificate(pem) if pem else None


def private_dir() -> Path:
    """A fresh directory only this process's user can read, for the operator's key."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="epochlog-operator-tls-"))
    os.chmod(path, 0o700)
    return path
