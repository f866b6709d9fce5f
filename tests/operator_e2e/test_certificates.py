"""The operator keeping the cluster's certificates in Secrets (`--manage-certificates`),
on a real operator process against the API emulator: the CAs and a certificate per
broker are created, brokers holding what their Secrets hold are taken, a certificate
near its end is renewed, and the CA stays."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

from cryptography import x509

from epochlog.security.pki import Issued, issue
from epochlog.security.principal import broker_uri
from epochlog.security.tls import TlsFiles, client_context
from epochlog_tools.harness.scripted_brokers import ScriptedBrokers
from tests import waiting
from tests.operator_e2e.conftest import HEARTBEAT_MS, NAMESPACE, Env

SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
MANAGED = (
    "--manage-certificates",
    "--certificates-namespace",
    NAMESPACE,
    "--broker-ids",
    "1-3",
    "--broker-hosts",
    "127.0.0.1,localhost",
    "--operator-hosts",
    "127.0.0.1,localhost",
    "--certificate-check-interval-s",
    "0.2",
)


async def secret(env: Env, name: str) -> dict[str, bytes]:
    obj = await env.api.ok("GET", f"{SECRETS}/{name}")
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


async def test_the_operator_keeps_the_cluster_certificates_in_secrets(
    env: Env, tmp_path: Path
) -> None:
    op = await env.operator("--standalone", *MANAGED, own_certificates=True)
    cluster_ca = await secret(env, "epochlog-cluster-ca")
    assert set(cluster_ca) == {"ca.crt", "ca.key"}
    assert (await secret(env, "epochlog-cluster-ca-cert")) == {"ca.crt": cluster_ca["ca.crt"]}
    clients_ca = await secret(env, "epochlog-clients-ca-cert")
    ca = Issued.from_pem(cluster_ca["ca.crt"], cluster_ca["ca.key"])
    files: dict[int, TlsFiles] = {}
    for b in (1, 2, 3):
        held = await secret(env, f"epochlog-broker-{b}")
        assert held["ca.crt"] == cluster_ca["ca.crt"]
        assert held["clients-ca.crt"] == clients_ca["ca.crt"]
        cert = certificate(held["tls.crt"])
        assert cert.issuer == ca.cert.subject
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert broker_uri(b) in names.get_values_for_type(x509.UniformResourceIdentifier)
        files[b] = _write(tmp_path / f"broker-{b}", held)

    # Brokers holding what their Secrets hold are taken by the operator, which serves
    # the certificate of its own Secret.
    brokers = ScriptedBrokers(
        lambda: [op.heartbeat_url],
        [1, 2, 3],
        HEARTBEAT_MS,
        tls=lambda b: client_context(files[b]),
    )
    async with brokers:
        await brokers.heard(timeout_s=None)
        await env.api.create("orders-0")
        await env.watch.wait_for(
            "orders-0", lambda s: s.leader is not None and len(s.isr) == 3, 10, "3 in sync"
        )

        # Broker 2's certificate near its end (a day left, 30 days before the end the
        # operator renews): a new one within a round, from the same CA.
        short = issue(ca, "epochlog-broker-2", uris=[broker_uri(2)], hosts=["127.0.0.1"], days=1)
        obj = await env.api.ok("GET", f"{SECRETS}/epochlog-broker-2")
        obj["data"]["tls.crt"] = base64.b64encode(short.cert_pem()).decode()
        obj["data"]["tls.key"] = base64.b64encode(short.key_pem()).decode()
        await env.api.ok("PUT", f"{SECRETS}/epochlog-broker-2", obj)

        async def renewed() -> bool:
            cert = certificate((await secret(env, "epochlog-broker-2"))["tls.crt"])
            left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
            return cert.serial_number != short.cert.serial_number and left.days > 300

        await waiting.until(renewed, "broker 2's certificate renewed", 20)
        # The Secret is written before the operator logs why: wait for the line too.
        await waiting.until_true(
            lambda: 'reason="expires' in op.log.read_text(), "the renewal logged", 10
        )
        assert (await secret(env, "epochlog-cluster-ca")) == cluster_ca
        assert brokers.all_heard


def _write(directory: Path, held: dict[str, Any]) -> TlsFiles:
    directory.mkdir(parents=True)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (directory / name).write_bytes(held[name])
    return TlsFiles(
        str(directory / "ca.crt"), str(directory / "tls.crt"), str(directory / "tls.key")
    )
