"""The embedded cluster with certificates the operator keeps in Secrets, as the chart runs it.

With `DevSettings.managed_certificates` the operator runs with `--manage-certificates`
and the brokers read their certificates from Secret volumes that a kubelet stand-in
process keeps up to date (`secret_mounts`), so that the operator's renewals, CA
replacements included, reach running brokers as they reach pods.

`ManagedCertificates` says where each Secret is mounted, seeds the API with the two
CA Secrets before the operator starts (CAs of `DevSettings.ca_validity_s`, labelled
as the operator's own, so that a test can have them near their end and watch the
operator replace them), gives each process its flags, and issues users'
certificates from the clients CA that signs at the moment (what a user would ask
their administrator for).
"""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from epochlog.objects import ObjectMeta, SecretObject, to_body
from epochlog.security.options import Credentials
from epochlog.security.pki import CLIENTS_CA_NAME, CLUSTER_CA_NAME, Issued, issue_user, new_ca
from epochlog.security.tls import TlsFiles
from epochlog_tools.devcluster.partitions import NAMESPACE
from epochlog_tools.harness import LOOPBACK

PREFIX: Final = "epochlog"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "epochlog-operator"}
HOSTS: Final = f"{LOOPBACK},localhost"
CHECK_INTERVAL_S: Final = 0.5
DAY_S: Final = 86400.0


def secret_name(what: str) -> str:
    return f"{PREFIX}-{what}"


@dataclass(frozen=True)
class ManagedCertificates:
    state_dir: Path
    brokers: int
    ca_validity_s: float
    ca_renew_before_s: float

    @property
    def mounts_dir(self) -> Path:
        return self.state_dir / "mounts"

    @property
    def users_dir(self) -> Path:
        return self.state_dir / "users"

    def mount(self, secret: str) -> Path:
        return self.mounts_dir / secret

    def mounts(self) -> dict[str, Path]:
        """Every mounted Secret: each broker's and the cluster CA's bundle for clients."""
        names = [secret_name(f"broker-{b}") for b in range(1, self.brokers + 1)]
        names.append(secret_name("cluster-ca-cert"))
        return {n: self.mount(n) for n in names}

    @property
    def cluster_ca_bundle(self) -> Path:
        """What clients trust: the mounted `epochlog-cluster-ca-cert` (a bundle while the
        cluster CA is replaced)."""
        return self.mount(secret_name("cluster-ca-cert")) / "ca.crt"

    def ready(self) -> bool:
        """Every mounted Secret has been written once."""
        return all((d / "ca.crt").exists() for d in self.mounts().values())

    def operator_flags(self) -> list[str]:
        return [
            "--manage-certificates",
            "--certificates-namespace",
            NAMESPACE,
            "--certificate-prefix",
            PREFIX,
            "--broker-ids",
            f"1-{self.brokers}",
            "--broker-hosts",
            HOSTS,
            "--operator-hosts",
            HOSTS,
            "--certificate-check-interval-s",
            str(CHECK_INTERVAL_S),
            "--ca-renew-before-days",
            repr(self.ca_renew_before_s / DAY_S),
        ]

    def broker_flags(self, broker_id: int) -> list[str]:
        d = self.mount(secret_name(f"broker-{broker_id}"))
        return [
            "--ca",
            str(d / "ca.crt"),
            "--cert",
            str(d / "tls.crt"),
            "--key",
            str(d / "tls.key"),
            "--clients-ca",
            str(d / "clients-ca.crt"),
        ]

    def kubelet_argv(self, api_url: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "epochlog_tools.devcluster.secret_mounts",
            "--api",
            api_url,
            "--namespace",
            NAMESPACE,
            *(f"{name}={folder}" for name, folder in self.mounts().items()),
        ]

    async def seed(self, api_url: str) -> None:
        """Create the CA Secrets the operator will keep, unless they exist."""
        days = self.ca_validity_s / DAY_S
        async with aiohttp.ClientSession() as http:
            for stem, common_name in (
                ("cluster-ca", CLUSTER_CA_NAME),
                ("clients-ca", CLIENTS_CA_NAME),
            ):
                ca = new_ca(common_name, days=days)
                secret = SecretObject(
                    metadata=ObjectMeta(
                        name=secret_name(stem), namespace=NAMESPACE, labels=dict(MANAGED_BY)
                    ),
                    data={
                        "ca.crt": base64.b64encode(ca.cert_pem()).decode(),
                        "ca.key": base64.b64encode(ca.key_pem()).decode(),
                    },
                )
                path = f"{api_url}/api/v1/namespaces/{NAMESPACE}/secrets"
                async with http.post(path, json=to_body(secret)) as rsp:
                    if rsp.status not in (201, 409):
                        raise RuntimeError(f"seeding {stem}: HTTP {rsp.status} {await rsp.text()}")

    async def secret(self, api_url: str, name: str) -> dict[str, bytes] | None:
        path = f"{api_url}/api/v1/namespaces/{NAMESPACE}/secrets/{name}"
        async with aiohttp.ClientSession() as http, http.get(path) as rsp:
            if rsp.status == 404:
                return None
            obj: dict[str, Any] = await rsp.json()
        return {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}

    async def signing_ca(self, api_url: str, stem: str) -> Issued:
        data = await self.secret(api_url, secret_name(stem))
        if data is None:
            raise RuntimeError(f"no Secret {secret_name(stem)}")
        return Issued.from_pem(data["ca.crt"], data["ca.key"])

    async def issue_user(self, api_url: str, user: str) -> Issued:
        """A certificate for `user` from the clients CA that signs now, written where
        `credentials(user)` reads it (key first: a reader never pairs a new certificate
        with an old key)."""
        issued = issue_user(await self.signing_ca(api_url, "clients-ca"), user)
        issued.write(self.users_dir, user)
        return issued

    def credentials(self, user: str) -> Credentials:
        cert, key = self.users_dir / f"{user}.crt", self.users_dir / f"{user}.key"
        return Credentials(TlsFiles(str(self.cluster_ca_bundle), str(cert), str(key)))
