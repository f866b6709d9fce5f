"""A real kube-apiserver, with etcd and kube-controller-manager, on loopback: what the
API emulator's tests also run against (`EPOCHLOG_TEST_APISERVER=real`, in `make e2e`),
and the operator benchmark with `--apiserver real`.

The binaries are the test cluster's (cluster/build.sh), found in
`EPOCHLOG_KUBE_BIN`. The controller manager runs for what the tests rely on a real
cluster doing: deleting namespaces, collecting garbage. Every client authenticates
with a certificate of `system:masters`, as the emulator lets every client do anything.

`reset()` puts the server back where a fresh emulator starts, between tests:
every object a test may have made is deleted, and the namespaces it made are gone.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import aiohttp

ENV_BIN: Final = "EPOCHLOG_KUBE_BIN"
SERVER_AUTH: Final = "1.3.6.1.5.5.7.3.1"
CLIENT_AUTH: Final = "1.3.6.1.5.5.7.3.2"
"""Extended key usages by OID (openssl's names for them are serverAuth, clientAuth)."""
SYSTEM_NAMESPACES: Final = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
WAIT_S: Final = 300.0
"""A hang detector, not a measurement: a busy machine is slow, never wrong."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _issue(pki: Path, name: str, subject: str, usage: str, san: str = "") -> None:
    key, csr, crt = (pki / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))  # fmt: skip
    ext = pki / f"{name}.ext"
    ext.write_text(f"extendedKeyUsage={usage}\n" + (f"subjectAltName={san}\n" if san else ""))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey",
             str(pki / "ca.key"), "-CAcreateserial", "-days", "2", "-out", str(crt),
             "-extfile", str(ext))  # fmt: skip


class KubeApiServer:
    """Started by `async with`; `url`, `ssl` and `write_kubeconfig` as the emulator's."""

    def __init__(self, bin_dir: Path, workdir: Path, crds: Path) -> None:
        self.bin = bin_dir
        self.dir = workdir
        self.crds = crds
        self.port = _free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._names: list[str] = []
        pki = self.pki = workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
                 "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))  # fmt: skip
        _issue(pki, "apiserver", "/CN=kube-apiserver", SERVER_AUTH, "IP:127.0.0.1,DNS:localhost")
        _issue(pki, "admin", "/O=system:masters/CN=test-admin", CLIENT_AUTH)
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(pki / "sa.key"))
        _openssl("ec", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        self.ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.kubeconfig = self.write_kubeconfig(workdir / "kubeconfig")

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: real, cluster: {{server: '{self.url}', "
            f"certificate-authority: '{self.pki / 'ca.crt'}'}}}}]\n"
            f"users: [{{name: admin, user: {{client-certificate: '{self.pki / 'admin.crt'}', "
            f"client-key: '{self.pki / 'admin.key'}'}}}}]\n"
            "contexts: [{name: real, context: {cluster: real, user: admin, namespace: default}}]\n"
            "current-context: real\n"
        )
        return path

    def pid(self, name: str) -> int | None:
        """The process id of one of its processes (kube-apiserver, etcd)."""
        return next(
            (p.pid for n, p in zip(self._names, self._procs, strict=True) if n == name), None
        )

    def session(self, **kwargs: Any) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            base_url=self.url, connector=aiohttp.TCPConnector(ssl=self.ssl), **kwargs
        )

    def _start(self, name: str, *args: str) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (the process keeps it)
        self._procs.append(subprocess.Popen([str(self.bin / name), *args], stdout=log, stderr=log))
        self._names.append(name)

    async def __aenter__(self) -> KubeApiServer:
        try:
            await self._start_all()
        except BaseException:
            self._stop()
            raise
        return self

    async def _start_all(self) -> None:
        etcd, peer = _free_port(), _free_port()
        self._start("etcd", "--data-dir", str(self.dir / "etcd"),
                    "--listen-client-urls", f"http://127.0.0.1:{etcd}",
                    "--advertise-client-urls", f"http://127.0.0.1:{etcd}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-cluster", f"default=http://127.0.0.1:{peer}")  # fmt: skip
        pki = self.pki
        self._start("kube-apiserver", "--etcd-servers", f"http://127.0.0.1:{etcd}",
                    "--bind-address", "127.0.0.1", "--secure-port", str(self.port),
                    "--service-cluster-ip-range", "10.0.0.0/24",
                    "--client-ca-file", str(pki / "ca.crt"),
                    "--tls-cert-file", str(pki / "apiserver.crt"),
                    "--tls-private-key-file", str(pki / "apiserver.key"),
                    "--service-account-issuer", "https://kubernetes.default.svc",
                    "--service-account-key-file", str(pki / "sa.pub"),
                    "--service-account-signing-key-file", str(pki / "sa.key"),
                    "--authorization-mode", "RBAC", "--profiling=false")  # fmt: skip
        async with self.session() as http:
            await self._until(http, "/readyz")
            self._start("kube-controller-manager", "--kubeconfig", str(self.kubeconfig),
                        "--bind-address", "127.0.0.1", "--secure-port", "0",
                        "--leader-elect=false", "--controllers",
                        "namespace-controller,garbage-collector-controller,serviceaccount-controller",
                        "--service-account-private-key-file", str(pki / "sa.key"),
                        "--root-ca-file", str(pki / "ca.crt"))  # fmt: skip
            for crd in sorted(self.crds.glob("*.yaml")):
                subprocess.run(
                    [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), "apply",
                     "--server-side", "-f", str(crd)], check=True, capture_output=True,
                )  # fmt: skip
            for crd in sorted(self.crds.glob("*.yaml")):
                subprocess.run(
                    [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), "wait",
                     "--for", "condition=Established", "-f", str(crd)], check=True,
                    capture_output=True,
                )  # fmt: skip
            await self._until(http, "/api/v1/namespaces/default/serviceaccounts/default")

    async def _until(self, http: aiohttp.ClientSession, path: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            for name, proc in zip(self._names, self._procs, strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} (see {self.dir})")
            try:
                async with http.get(path) as rsp:
                    if rsp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} not ready ({self.dir})")
            await asyncio.sleep(0.1)

    async def reset(self) -> None:
        """Every object a test may have made deleted; namespaces it made gone."""
        ours = {
            line.split("name: ", 1)[1].strip()
            for crd in self.crds.glob("*.yaml")
            for line in crd.read_text().splitlines()
            if line.startswith("  name: ")
        }
        merge = {"Content-Type": "application/merge-patch+json"}
        async with self.session() as http:
            # Finalizers first: a test that put one there expects the object to go.
            for kind in ("/apis/epochlog.dev/v1alpha1/partitions", "/api/v1/secrets"):
                async with http.get(kind) as rsp:
                    held = (await rsp.json()).get("items", [])
                for obj in held:
                    meta = obj["metadata"]
                    if meta.get("finalizers"):
                        prefix, _, plural = kind.rpartition("/")
                        path = f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
                        body = {"metadata": {"finalizers": None}}
                        async with http.patch(path, json=body, headers=merge):
                            pass
            kinds = (
                "partitions,epochlogusers,clusterkopfpeerings,kopfpeerings,events,secrets,"
                "configmaps"
            )
            proc = await asyncio.create_subprocess_exec(
                str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), "delete", kinds,
                "--all", "--all-namespaces", "--wait=false",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await proc.wait()
            # ServiceAccounts a test made; each namespace's `default` is the cluster's.
            async with http.get("/api/v1/serviceaccounts") as rsp:
                accounts = (await rsp.json())["items"]
            for sa in accounts:
                meta = sa["metadata"]
                if meta["name"] != "default" and not meta["namespace"].startswith("kube-"):
                    path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{meta['name']}"
                    async with http.delete(path):
                        pass
            crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            async with http.get(crds) as rsp:
                names = [c["metadata"]["name"] for c in (await rsp.json())["items"]]
            for name in names:
                if name not in ours:
                    async with http.delete(f"{crds}/{name}"):
                        pass
            async with http.get("/api/v1/namespaces") as rsp:
                names = [n["metadata"]["name"] for n in (await rsp.json())["items"]]
            for name in names:
                if name not in SYSTEM_NAMESPACES:
                    async with http.delete(f"/api/v1/namespaces/{name}"):
                        pass
            await self._gone(http, names)

    async def _gone(self, http: aiohttp.ClientSession, names: list[str]) -> None:
        deadline = time.monotonic() + WAIT_S
        for name in names:
            if name in SYSTEM_NAMESPACES:
                continue
            while True:
                async with http.get(f"/api/v1/namespaces/{name}") as rsp:
                    if rsp.status == 404:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"namespace {name} not deleted")
                await asyncio.sleep(0.1)

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        for proc in reversed(self._procs):
            proc.terminate()
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def bin_dir() -> Path | None:
    value = os.environ.get(ENV_BIN)
    return Path(value) if value else None
