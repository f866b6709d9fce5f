"""Run the Kubernetes API emulator on a loopback port: in-process (`ApiServer`) or as a command.

This is an emulator for development and tests; production runs on a real
Kubernetes cluster. It serves plain HTTP on 127.0.0.1 without authentication
(or https on a given address, for clients in containers that log in as a pod's
service account does; any bearer token is taken),
loads the CRDs from a folder (`crds/`), and writes a kubeconfig so that the
real `kubectl`, kopf and the kubernetes client can talk to it:

    python -m epochlog_tools.kubeapi.apiserver --port 8001 --crds crds/ --kubeconfig dev.kubeconfig
    kubectl --kubeconfig dev.kubeconfig get partitions

In tests:

    async with ApiServer(crds=Path("crds")) as api:
        ...  # api.url, api.kubeconfig(path), api.handler (the KubernetesApi)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import yaml
from aiohttp.test_utils import RawTestServer
from kmock import Server

from epochlog import collector
from epochlog_tools.kubeapi.emulator import KubernetesApi
from epochlog_tools.kubeapi.errors import ApiError
from epochlog_tools.kubeapi.registry import CRDS
from epochlog_tools.kubeapi.store import WATCH_WINDOW

HOST = "127.0.0.1"
CONTEXT = "epochlog-dev"


class CrdLoadError(Exception):
    """A CRD file could not be loaded; the message names the file and the reason."""


def load_crds(api: KubernetesApi, folder: Path) -> list[str]:
    """Create every CustomResourceDefinition found in the YAML files of `folder`; their names."""
    names = []
    for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except yaml.YAMLError as exc:
            raise CrdLoadError(f"{path}: not YAML: {exc}") from exc
        for doc in docs:
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            try:
                obj, _ = api.create_object(CRDS, doc)
            except ApiError as exc:
                raise CrdLoadError(f"{path}: {exc.message}") from exc
            names.append(obj["metadata"]["name"])
    return names


def kubeconfig(
    server_url: str,
    namespace: str = "default",
    *,
    ca_pem: bytes | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """A kubeconfig for the emulator: one cluster, one user, one context. `ca_pem`: the CA
    of an https server; `token`: a bearer token (the emulator takes any)."""
    cluster: dict[str, Any] = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    user = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


class _TlsTestServer(RawTestServer):
    """kmock's server with TLS: aiohttp's test server takes the context at start."""

    ssl_context: ssl.SSLContext | None = None

    async def start_server(self, loop: Any = None, **kwargs: Any) -> None:
        await super().start_server(loop=loop, ssl=self.ssl_context, **kwargs)


class ApiServer:
    """The emulator on a loopback port; `async with` starts and stops it.

    `host`: the address to listen on (an address of a container network's bridge, so
    that containers reach it and nothing else does); `tls`: a certificate and key to
    serve https with, as a real API server does (in-cluster clients require it)."""

    def __init__(
        self,
        *,
        port: int = 0,
        crds: Path | None = None,
        watch_window: int = WATCH_WINDOW,
        host: str = HOST,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.handler = KubernetesApi(watch_window=watch_window)
        self._port = port
        self._crds = crds
        self._host = host
        self._tls = tls
        self._server: Server | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the API server is not running")
        return self._server.port

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{self._host}:{self.port}"

    async def start(self) -> None:
        if self._crds is not None:
            load_crds(self.handler, self._crds)
        await self.handler.__aenter__()
        server_cls: type[RawTestServer] = RawTestServer
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self._tls)
            server_cls = type("TlsServer", (_TlsTestServer,), {"ssl_context": context})
        self._server = Server(
            self.handler,
            host=self._host,
            port=self._port or None,
            server_cls=server_cls,
            # kmock's own client (unused here) must not fail on the server's own CA.
            client_fct=_unverified_session,
        )
        await self._server.__aenter__()

    async def stop(self) -> None:
        # Open watches would hold the HTTP server's shutdown: end them first.
        self.handler.store.close_subscriptions()
        await asyncio.sleep(0)
        if self._server is not None:
            await self._server.__aexit__(None, None, None)
            self._server = None
        await self.handler.__aexit__(None, None, None)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(kubeconfig(self.url, namespace), sort_keys=False))
        return path

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _unverified_session(url: Any) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(ssl=False))


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    kubeconfig_path = args.kubeconfig
    async with ApiServer(
        port=args.port, crds=args.crds, watch_window=args.watch_window, host=args.host, tls=tls
    ) as api:
        if kubeconfig_path is not None:
            if tls is not None:
                doc = kubeconfig(api.url, ca_pem=args.tls_ca.read_bytes(), token=args.token)
                kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
                kubeconfig_path.write_text(yaml.safe_dump(doc, sort_keys=False))
            else:
                api.write_kubeconfig(kubeconfig_path)
        crd_names = [o["metadata"]["name"] for o in api.handler.store.items(CRDS, None)]
        print(
            f"Kubernetes API emulator (development and tests only) on {api.url}; "
            f"CRDs: {', '.join(crd_names) or 'none'}"
            + (f"; kubeconfig: {kubeconfig_path}" if kubeconfig_path else ""),
            flush=True,
        )
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m epochlog_tools.kubeapi.apiserver",
        description="Kubernetes API emulator for development and tests (not for production).",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument("--host", default=HOST, help=f"address to listen on (default {HOST})")
    parser.add_argument("--tls-cert", type=Path, help="serve https with this certificate")
    parser.add_argument("--tls-key", type=Path, help="the key of --tls-cert")
    parser.add_argument("--tls-ca", type=Path, help="the CA of --tls-cert, for the kubeconfig")
    parser.add_argument("--token", help="the bearer token the kubeconfig names (any is taken)")
    parser.add_argument("--crds", type=Path, help="folder of CRD YAML files to load")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the server here")
    parser.add_argument(
        "--watch-window",
        type=int,
        default=WATCH_WINDOW,
        help="changes kept per resource type for resuming watches; older ones are 410 Expired",
    )
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_cert and not args.tls_ca):
        parser.error("--tls-cert, --tls-key and --tls-ca go together")
    collector.tune()
    try:
        asyncio.run(_serve(args))
    except CrdLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
