"""The reads of all consumers of one client, gathered per broker into fetches of many partitions.

Kafka's consumer fetches all its partitions of a broker in one FetchRequest.
Here every `Consumer` of a `Client` reads its own partition, and `FetchLanes`
gathers their reads: each broker has one lane with one fetch of many
partitions (`POST /v1/fetch`, `client.many.fetch`) in flight at a time; the
reads that arrive meanwhile go together in the next one. A fetch is held by
the broker while none of its partitions has records, for the shortest wait any
of its reads has left. A read whose partition got nothing while another got
records goes into the next fetch until its own wait is over, so a long poll
returns empty only once its `max_wait_ms` has passed, as it does alone.

Each read gets its partition's answer (its batches, high watermark, log start
and the epoch that answered) or its own error; a fetch that fails as a whole
(an unreachable broker) fails every read in it. Retrying is the readers'.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from epochlog.client import many
from epochlog.client.metadata import PartitionLeader
from epochlog.client.records import BatchesAnswer
from epochlog.client.transport import Transport
from epochlog.tasks import cancel_and_wait


@dataclass(slots=True)
class _Read:
    leader: PartitionLeader
    offset: int
    max_bytes: int
    deadline: float
    """When its long poll is over (the event loop's clock)."""
    future: asyncio.Future[BatchesAnswer]


class _Lane:
    """The reads waiting for one broker, and the task that fetches them."""

    def __init__(self, lanes: FetchLanes, url: str) -> None:
        self.lanes = lanes
        self.url = url
        self.waiting: list[_Read] = []
        self.in_flight: dict[asyncio.Task[None], float] = {}
        """Fetches under way, with when the broker answers them at the latest."""
        self.wakeup = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"epochlog-fetch-lane-{url}"
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.waiting = [r for r in self.waiting if not r.future.done()]
            now = loop.time()
            # The reads wait for the fetch under way, unless one of them would wait past
            # its own long poll: then another fetch goes now.
            if not self.waiting or (
                self.in_flight
                and min(r.deadline for r in self.waiting) >= min(self.in_flight.values())
            ):
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            # One read per partition in a fetch (a partition named twice is refused);
            # another read of the same partition waits for the next fetch.
            batch: dict[str, _Read] = {}
            for r in self.waiting:
                batch.setdefault(r.leader.partition, r)
            reads = list(batch.values())
            taken = {id(r) for r in reads}
            self.waiting = [r for r in self.waiting if id(r) not in taken]
            wait_s = max(0.0, min(r.deadline for r in reads) - now)
            task = loop.create_task(self._fetch(reads, int(wait_s * 1000)))
            self.in_flight[task] = now + wait_s

    async def _fetch(self, reads: list[_Read], wait_ms: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            results = await many.fetch(
                self.lanes.transport,
                self.url,
                [(r.leader, r.offset, r.max_bytes) for r in reads],
                max_wait_ms=wait_ms,
                max_bytes=sum(r.max_bytes for r in reads),
                timeout_s=self.lanes.request_timeout_s,
            )
        except asyncio.CancelledError:
            for r in reads:
                r.future.cancel()
            raise
        except Exception as exc:
            for r in reads:
                if not r.future.done():
                    r.future.set_exception(exc)
            results = None
        finally:
            current = asyncio.current_task()
            if current is not None:
                self.in_flight.pop(current, None)
        after = loop.time()
        for r, result in zip(reads, results or (), strict=False):
            if r.future.done():
                continue
            if isinstance(result, Exception):
                r.future.set_exception(result)
            elif not result.records and r.deadline > after:
                # Another partition's records ended the wait early: this read waits on.
                self.waiting.append(r)
            else:
                r.future.set_result(result)
        self.wakeup.set()

    async def close(self) -> None:
        await cancel_and_wait([self.task, *self.in_flight])


class FetchLanes:
    """The fetch lanes of one client, one per broker URL."""

    def __init__(self, transport: Transport, *, request_timeout_s: float) -> None:
        self.transport = transport
        self.request_timeout_s = request_timeout_s
        self._lanes: dict[str, _Lane] = {}

    async def read(
        self, leader: PartitionLeader, offset: int, *, max_bytes: int, max_wait_ms: int
    ) -> BatchesAnswer:
        """`leader.partition` from `offset`: its batches once it has some, or its (empty)
        answer after `max_wait_ms`; raises its error."""
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(leader.url)
        if lane is None:
            lane = self._lanes[leader.url] = _Lane(self, leader.url)
        future: asyncio.Future[BatchesAnswer] = loop.create_future()
        deadline = loop.time() + max_wait_ms / 1000
        lane.waiting.append(_Read(leader, offset, max_bytes, deadline, future))
        lane.wakeup.set()
        return await future

    async def close(self) -> None:
        for lane in self._lanes.values():
            await lane.close()
        self._lanes.clear()
