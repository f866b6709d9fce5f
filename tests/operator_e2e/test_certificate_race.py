"""Two operator replicas issuing the cluster's certificates at the same moment, against the
API emulator: Secrets are created with POST and replaced with PUT at the resourceVersion
read, so one of two racing writers gets a 409. Whichever wins, both end up with one CA,
every broker holds one certificate issued by it, and a loser goes on with the winner's CA
instead of failing."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import kopf
from cryptography import x509

from epochlog_operator.cert_manager import CertificateManager
from epochlog_operator.certificates import CertificateSettings
from epochlog_operator.kube import KubeClient
from epochlog_tools.kubeapi.apiserver import ApiServer

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "default"
SETTINGS = CertificateSettings(namespace=NAMESPACE, broker_ids=(1, 2, 3))


async def _secret(kube: KubeClient, name: str) -> dict[str, bytes]:
    obj = await kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}")
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


async def test_two_operators_issuing_at_once_agree_on_one_ca(tmp_path: Path) -> None:
    async with ApiServer(crds=REPO / "crds") as api:
        info = kopf.ConnectionInfo(server=api.url)
        async with KubeClient(info) as first_kube, KubeClient(info) as second_kube:
            first = CertificateManager(first_kube, SETTINGS, tmp_path / "first")
            second = CertificateManager(second_kube, SETTINGS, tmp_path / "second")
            await asyncio.gather(first.reconcile(), second.reconcile())

            ca_secret = await _secret(first_kube, "epochlog-cluster-ca")
            created = [m for m in (first, second) if "epochlog-cluster-ca: missing" in m.issued]
            assert len(created) == 1, (first.issued, second.issued)
            # A round later (the loser of a leaf's race writes it then), all is settled.
            await asyncio.gather(first.reconcile(), second.reconcile())
            assert await _secret(first_kube, "epochlog-cluster-ca") == ca_secret
            ca = x509.load_pem_x509_certificate(ca_secret["ca.crt"])
            for b in SETTINGS.broker_ids:
                held = await _secret(first_kube, f"epochlog-broker-{b}")
                assert held["ca.crt"] == ca_secret["ca.crt"]
                x509.load_pem_x509_certificate(held["tls.crt"]).verify_directly_issued_by(ca)
            # Both replicas serve with a certificate of that CA and trust it.
            for manager in (first, second):
                files = manager.operator_files()
                assert Path(files.ca).read_bytes() == ca_secret["ca.crt"]
                assert files.cert is not None
                cert = x509.load_pem_x509_certificate(Path(files.cert).read_bytes())
                cert.verify_directly_issued_by(ca)
