"""A rolling restart of the embedded cluster's brokers, as `kubectl rollout restart` does it.

One broker at a time: SIGTERM (its controlled shutdown hands leaderships and
ISR places over first), wait for it to exit, start it again, and go on to the
next only once its /readyz says it is back in every ISR, as a StatefulSet's
rolling update waits for the pod's readiness. `IsrWatch` follows every
Partition's status through the API server's watch meanwhile, so that a caller
can tell whether any partition fell below minInsyncReplicas because of the
roll.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from epochlog.protocol.wire import WireModel
from epochlog.resources import GROUP, PLURAL, VERSION
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.partitions import Partition


@dataclass(frozen=True)
class RollStep:
    broker: int
    restarted_s: float
    """SIGTERM until the new process was healthy (mostly the controlled shutdown)."""
    ready_s: float
    """Healthy again until /readyz answered 200 (back in every ISR)."""


@dataclass(frozen=True)
class IsrLow:
    """A status with fewer ISR members than the Partition's minInsyncReplicas."""

    name: str
    isr: tuple[int, ...]
    min_insync_replicas: int
    at: float


def isr_low(partition: Partition) -> IsrLow | None:
    """The Partition as an `IsrLow` when its status names a leader and fewer ISR members
    than its minInsyncReplicas (both ISR watches, `IsrWatch` and the e2e suite's
    `KubeIsrWatch`, note each status they see with it)."""
    status = partition.status
    if status is None or status.leader is None:
        return None
    need = partition.spec.min_insync_replicas
    if len(status.isr) >= need:
        return None
    return IsrLow(partition.name, status.isr, need, time.monotonic())


async def wait_ready(cluster: LocalCluster, broker: int, timeout_s: float = 120) -> None:
    """Until broker `broker`'s /readyz answers 200 (its probe listener, no credentials)."""
    url = cluster.probe_url(f"broker-{broker}") + "/readyz"
    deadline = time.monotonic() + timeout_s
    last = ""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with http.get(url) as rsp:
                    if rsp.status == 200:
                        return
                    last = await rsp.text()
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {broker} not ready within {timeout_s} s: {last}")
            await asyncio.sleep(0.05)


async def rolling_restart(
    cluster: LocalCluster,
    brokers: Sequence[int],
    *,
    say: Callable[[str], None] = lambda _: None,
) -> list[RollStep]:
    """Restart `brokers` one by one, each once the previous one is ready again."""
    steps = []
    for b in brokers:
        name = f"broker-{b}"
        began = time.monotonic()
        say(f"SIGTERM {name}")
        await cluster.restart(name)
        healthy = time.monotonic()
        await wait_ready(cluster, b)
        ready = time.monotonic()
        steps.append(RollStep(b, healthy - began, ready - healthy))
        say(f"{name} ready again after {ready - began:.1f} s")
    return steps


@dataclass
class IsrWatch:
    """Every Partition status the API server at `api_url` publishes while the watch runs
    (`ssl`: the context for an https server)."""

    api_url: str
    ssl: ssl.SSLContext | None = None
    namespace: str | None = None
    low: list[IsrLow] = field(default_factory=list)
    seen: int = 0
    _task: asyncio.Task[None] | None = None
    _started: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> IsrWatch:
        self._task = asyncio.create_task(self._run())
        await self._started.wait()
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _path(self) -> str:
        ns = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"/apis/{GROUP}/{VERSION}{ns}/{PLURAL}"

    def _note(self, partition: Partition) -> None:
        self.seen += 1
        low = isr_low(partition)
        if low is not None:
            self.low.append(low)

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        connector = aiohttp.TCPConnector(ssl=self.ssl if self.ssl is not None else True)
        async with aiohttp.ClientSession(
            base_url=self.api_url, timeout=timeout, connector=connector
        ) as http:
            while True:
                async with http.get(self._path()) as rsp:
                    listing = _Listing.model_validate_json(await rsp.read())
                for item in listing.items:
                    self._note(item)
                self._started.set()
                query = f"?watch=true&resourceVersion={listing.metadata.resource_version}"
                async with http.get(self._path() + query) as rsp:
                    async for line in rsp.content:
                        if not line.strip():
                            continue
                        event = _WatchEvent.model_validate_json(line)
                        if event.type == "ERROR":
                            break  # 410 Expired: list again
                        if event.type in ("ADDED", "MODIFIED"):
                            self._note(Partition.model_validate(event.object))


class _ListMeta(WireModel):
    resource_version: str


class _Listing(WireModel):
    metadata: _ListMeta
    items: tuple[Partition, ...] = ()


class _WatchEvent(WireModel):
    type: str
    object: dict[str, Any]
