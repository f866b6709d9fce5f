"""Run the Kubernetes API emulator on a loopback port: in-process (`ApiServer`) or as a command.

This is an emulator for development and tests; production runs on a real
Kubernetes cluster. It serves plain HTTP on 127.0.0.1 without authentication,
loads the CRDs from a folder (`crds/`), and writes a kubeconfig so that the
real `kubectl`, kopf and the kubernetes client can talk to it:

    python -m epochlog.kubeapi.apiserver --port 8001 --crds crds/ --kubeconfig dev.kubeconfig
    kubectl --kubeconfig dev.kubeconfig get partitions

In tests:

    async with ApiServer(crds=Path("crds")) as api:
        ...  # api.url, api.kubeconfig(path), api.handler (the KubernetesApi)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from kmock import Server

from epochlog.kubeapi.emulator import KubernetesApi
from epochlog.kubeapi.errors import ApiError
from epochlog.kubeapi.registry import CRDS
from epochlog.kubeapi.store import WATCH_WINDOW

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


def kubeconfig(server_url: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig for the emulator: one cluster, one user without credentials, one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


class ApiServer:
    """The emulator on a loopback port; `async with` starts and stops it."""

    def __init__(
        self, *, port: int = 0, crds: Path | None = None, watch_window: int = WATCH_WINDOW
    ) -> None:
        self.handler = KubernetesApi(watch_window=watch_window)
        self._port = port
        self._crds = crds
        self._server: Server | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the API server is not running")
        return self._server.port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def start(self) -> None:
        if self._crds is not None:
            load_crds(self.handler, self._crds)
        await self.handler.__aenter__()
        self._server = Server(self.handler, host=HOST, port=self._port or None)
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


async def _serve(
    port: int, crds: Path | None, kubeconfig_path: Path | None, watch_window: int
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ApiServer(port=port, crds=crds, watch_window=watch_window) as api:
        if kubeconfig_path is not None:
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
        prog="python -m epochlog.kubeapi.apiserver",
        description="Kubernetes API emulator for development and tests (not for production).",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--crds", type=Path, help="folder of CRD YAML files to load")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the server here")
    parser.add_argument(
        "--watch-window",
        type=int,
        default=WATCH_WINDOW,
        help="changes kept per resource type for resuming watches; older ones are 410 Expired",
    )
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args.port, args.crds, args.kubeconfig, args.watch_window))
    except CrdLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
