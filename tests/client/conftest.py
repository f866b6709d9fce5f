"""One cluster of three real broker processes (RF3) shared by the client tests of this
package that do not kill brokers; each test uses partitions of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from epochlog.client import Client
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

TOPICS = (
    "orders",
    "dedup",
    "plain",
    "seq",
    "errors",
    "offsets",
    "sync",
    "cli",
    "poll",
    "hint",
    "shrunk",
    "trim",
    "epochs",
)
MAX_RECORD = 64 * 1024
SESSION_MS = 60_000


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    specs = [spec(t, 0) for t in TOPICS] + [spec("orders", 1)]
    c = await Cluster(
        tmp_path_factory.mktemp("client"),
        specs,
        extra_args=["--max-record-bytes", str(MAX_RECORD)],
        # Nobody is fenced here on purpose: a session long enough that a busy machine's
        # stall is not fenced either (a fenced broker starts over and lists no partition
        # until it has them back; a new leader would fail these tests). A whole-machine
        # stall of 15 s, the controller's answers and every broker's loop late together,
        # fenced all three brokers at 10 s.
        session_timeout_ms=SESSION_MS,
    ).start()
    try:
        for s in specs:
            await c.wait_leader(s.name)
        yield c
    finally:
        await c.stop()


@pytest_asyncio.fixture(loop_scope="package")
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with cluster.client() as c:
        yield c
