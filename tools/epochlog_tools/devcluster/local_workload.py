"""Client workloads run against the embedded cluster: a steady acks=all producer that records
when each write was acknowledged and by which leader epoch, reading partitions back, and the
check that every acknowledged record is there exactly once.

Shared by `epochlog demo` and the failover benchmark. The producer is the
real client (`epochlog.client.Producer`, idempotent); only the bookkeeping is
here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from epochlog.client import Client, Consumer, Producer, RecordMetadata


@dataclass(frozen=True, slots=True)
class WorkloadAck:
    """A record acknowledged to the steady producer: where, in which leader epoch, and when
    on this machine's monotonic clock (failover timings are measured against it)."""

    partition: str
    offset: int
    value: str
    leader_epoch: int
    at: float
    """time.monotonic() when the acknowledgement arrived."""


@dataclass
class SteadyProducer:
    """Sends `rate` records per second, round robin over `partitions`, with acks=all, until
    stopped; every acknowledgement lands in `acks` as it arrives."""

    client: Client
    partitions: Sequence[str]
    rate: float = 200.0
    prefix: str = "r"
    make_value: Callable[[int], str] | None = None
    """The value of the n-th record (each must be unique); default `{prefix}-{n}`."""
    delivery_timeout_ms: int = 120_000
    acks: list[WorkloadAck] = field(default_factory=list)
    failed: list[tuple[str, BaseException]] = field(default_factory=list)
    sent: int = 0
    _producer: Producer | None = None
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _acked: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> SteadyProducer:
        self._producer = Producer(
            self.client, acks="all", linger_ms=2, delivery_timeout_ms=self.delivery_timeout_ms
        )
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        assert self._producer is not None
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            partition = self.partitions[self.sent % len(self.partitions)]
            value = (
                f"{self.prefix}-{self.sent}"
                if self.make_value is None
                else self.make_value(self.sent)
            )
            future = await self._producer.send(partition, value)
            future.add_done_callback(functools.partial(self._done, value))
            self.sent += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
            else:
                next_at = time.monotonic()  # behind (an outage): no burst to catch up
                await asyncio.sleep(0)

    def _done(self, value: str, future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled():
            self.failed.append((value, asyncio.CancelledError()))
            return
        exc = future.exception()
        if exc is not None:
            self.failed.append((value, exc))
            return
        meta = future.result()
        self.acks.append(
            WorkloadAck(meta.partition, meta.offset, value, meta.leader_epoch, time.monotonic())
        )
        self._acked.set()

    async def stop(self) -> None:
        """Stop sending and wait until every record sent was acknowledged or failed."""
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._producer is not None:
            await self._producer.close()

    def first_ack(self, partition: str, *, min_epoch: int, after: float) -> WorkloadAck | None:
        """The earliest acknowledgement on `partition` in a leader epoch >= `min_epoch` that
        arrived after `after`."""
        found = [
            a
            for a in self.acks
            if a.partition == partition and a.leader_epoch >= min_epoch and a.at >= after
        ]
        return min(found, key=lambda a: a.at) if found else None

    async def wait_ack(
        self, partition: str, *, min_epoch: int, after: float, timeout: float
    ) -> WorkloadAck:
        deadline = time.monotonic() + timeout
        while True:
            ack = self.first_ack(partition, min_epoch=min_epoch, after=after)
            if ack is not None:
                return ack
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"no write on {partition} acknowledged in leaderEpoch >= {min_epoch} "
                    f"within {timeout} s"
                )
            self._acked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._acked.wait(), min(left, 0.5))

    async def wait_acks(self, count: int) -> None:
        """Until at least `count` records were acknowledged in all (no limit: the caller
        chose a count its producer reaches, however slowly)."""
        while len(self.acks) < count:
            self._acked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._acked.wait(), 0.5)

    async def wait_each(
        self, partitions: Sequence[str], *, after: float = 0.0, timeout: float = 120.0
    ) -> None:
        """Until a write on each of `partitions` was acknowledged after `after`."""
        for partition in partitions:
            await self.wait_ack(partition, min_epoch=1, after=after, timeout=timeout)


async def read_back(client: Client, partition: str) -> list[tuple[int, str]]:
    """Every committed record of `partition` as (offset, value), from the earliest offset."""
    consumer = Consumer(client, partition, start="earliest", max_wait_ms=0, max_records=5000)
    out: list[tuple[int, str]] = []
    while True:
        records = await consumer.poll()
        out.extend((r.offset, (r.value or b"").decode()) for r in records)
        if consumer.caught_up:
            return out


@dataclass(frozen=True)
class Verdict:
    acknowledged: int
    read: int
    missing: list[WorkloadAck]
    """Acknowledged, but not read back at the offset it was acknowledged at."""
    duplicated: list[str]
    """Values read more than once."""
    unacknowledged_read: int
    """Read back though never acknowledged (allowed: the answer was lost, or it failed)."""

    @property
    def ok(self) -> bool:
        return not self.missing and not self.duplicated


def verify(acks: Sequence[WorkloadAck], logs: dict[str, list[tuple[int, str]]]) -> Verdict:
    at = {(p, offset): value for p, records in logs.items() for offset, value in records}
    missing = [a for a in acks if at.get((a.partition, a.offset)) != a.value]
    counts = Counter(value for records in logs.values() for _, value in records)
    duplicated = sorted(v for v, n in counts.items() if n > 1)
    acked_values = {a.value for a in acks}
    return Verdict(
        acknowledged=len(acks),
        read=sum(counts.values()),
        missing=missing,
        duplicated=duplicated,
        unacknowledged_read=sum(1 for v in counts if v not in acked_values),
    )
