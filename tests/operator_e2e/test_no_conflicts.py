"""A new Partition costs its first status write and no 409 Conflict (counted by the emulator).

The operator writes status with the resourceVersion it decided from, so any
other writer between its read and its write costs a 409, a re-read and a
second decision. kopf's change-detecting handlers were such a writer: they
patch their bookkeeping annotations onto every new object, and that patch
landed before the operator's first status write, one 409 per new Partition.
The operator registers only event-watching handlers, which keep no state in
the object (`handlers`); this test keeps it that way, counting the responses
the emulator sends while 20 Partitions are created and elected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from epochlog_tools.harness import Security
from epochlog_tools.kubeapi.apiserver import ApiServer
from epochlog_tools.kubeapi.emulator import KubernetesApi
from tests.operator_e2e.conftest import CRDS, Api, Env, StatusWatch, until
from tests.operator_e2e.test_election import ready

PARTITIONS = 20


@dataclass(frozen=True)
class Answer:
    method: str
    path: str
    status: int


class CountingApi(KubernetesApi):
    """The emulator, noting the method, path and status of every response it sends."""

    answers: list[Answer]

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        response = await super().__call__(raw_request)
        self.answers.append(Answer(raw_request.method, raw_request.path, response.status))
        return response


@dataclass
class Counted:
    env: Env
    handler: CountingApi

    def answered(self, status: int) -> list[Answer]:
        return [a for a in self.handler.answers if a.status == status]


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[Counted]:
    """The `env` of conftest, on an emulator that counts its answers."""
    server = ApiServer(crds=CRDS)
    handler = CountingApi()
    handler.answers = []
    server.handler = handler
    async with server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        async with (
            aiohttp.ClientSession(base_url=server.url) as api_session,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        ):
            watch = StatusWatch()
            watcher = asyncio.create_task(watch.run(api_session))
            security = Security.tls(tmp_path / "pki", [1, 2, 3])
            env = Env(Api(api_session), server, kubeconfig, tmp_path, session, watch, security)
            try:
                yield Counted(env, handler)
            finally:
                await env.close_sessions()
                await asyncio.gather(*(op.stop() for op in env.operators))
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await watcher


async def test_new_partitions_are_written_without_a_409(counted: Counted) -> None:
    env = counted.env
    op = await env.operator("--standalone")
    names = [f"fresh-{i}" for i in range(PARTITIONS)]
    async with env.cluster([1, 2, 3]) as cluster:
        await until(lambda: cluster.all_heard, 5, "a heartbeat answer to every broker")
        await asyncio.gather(*(env.api.create(n) for n in names))
        for name in names:
            await env.watch.wait_for(name, ready, 10, "Ready")
        # Every Partition was first written from the object as created: nothing else wrote
        # to it in between (no annotation, no finalizer).
        for name in names:
            obj = await env.api.get(name)
            assert obj is not None
            meta = obj["metadata"]
            assert not meta.get("annotations"), meta
            assert not meta.get("finalizers"), meta
    conflicts = counted.answered(409)
    assert conflicts == [], conflicts
    assert await op.metric(env.session, "epochlog_operator_status_conflicts_total") == 0
    writes = [
        a
        for a in counted.handler.answers
        if a.method == "PUT" and a.path.endswith("/status") and a.status == 200
    ]
    assert len({a.path for a in writes}) == PARTITIONS
    patches = [
        a for a in counted.handler.answers if a.method == "PATCH" and "/partitions/" in a.path
    ]
    assert patches == [], patches
