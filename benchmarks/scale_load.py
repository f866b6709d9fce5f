"""The writes of the scale benchmark: a timed acks=all load, one write per partition, reading
back.

All through the repo's own client (`epochlog.client.Producer`, idempotent, acks=all):

- `TimedLoad`: records at a fixed total rate, round robin over the partitions,
  on an open-loop schedule; each record's latency runs from the time it was
  due, so a stall of the producer or the brokers delays the records behind it
  and shows in the percentiles instead of thinning the load;
- `write_each`: one record to each partition, all at once or a few at a time,
  with when each was acknowledged (the warm-up, and the first writes after a
  failover);
- `read_all`: every partition read back, for `verify` against what was
  acknowledged.

Every acknowledgement is kept as a `WorkloadAck`, the form
`epochlog_tools.devcluster.local_workload.verify` checks.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from epochlog.client import Client, ClientError, Producer, RecordMetadata
from epochlog_tools.devcluster.local_workload import WorkloadAck, read_back

READERS = 8
"""Partitions read back at once."""


def producer(client: Client, delivery_timeout_ms: int, linger_ms: float = 0) -> Producer:
    """acks=all, by default without lingering: a record goes out as soon as its broker's
    sender is free, so that latency is the brokers' and not a batching delay."""
    return Producer(
        client, acks="all", linger_ms=linger_ms, delivery_timeout_ms=delivery_timeout_ms
    )


@dataclass
class TimedLoad:
    """`rate` records per second over `partitions` for a given time; see the module docstring."""

    producer: Producer
    partitions: Sequence[str]
    rate: float
    prefix: str
    latencies: list[float] = field(default_factory=list)
    acks: list[WorkloadAck] = field(default_factory=list)
    failed: list[tuple[str, BaseException]] = field(default_factory=list)
    sent: int = 0

    async def run(self, seconds: float) -> None:
        """Send for `seconds`, then wait until every record sent was acknowledged or failed
        (the producer's delivery timeout bounds that)."""
        futures: list[asyncio.Future[RecordMetadata]] = []
        start = time.monotonic()
        while True:
            due = start + self.sent / self.rate
            if due - start >= seconds:
                break
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            partition = self.partitions[self.sent % len(self.partitions)]
            value = f"{self.prefix}-{self.sent}"
            future = await self.producer.send(partition, value)
            future.add_done_callback(functools.partial(self._done, value, due))
            futures.append(future)
            self.sent += 1
        await asyncio.gather(*futures, return_exceptions=True)

    def _done(self, value: str, due: float, future: asyncio.Future[RecordMetadata]) -> None:
        now = time.monotonic()
        if future.cancelled():
            self.failed.append((value, asyncio.CancelledError()))
            return
        exc = future.exception()
        if exc is not None:
            self.failed.append((value, exc))
            return
        meta = future.result()
        self.latencies.append(now - due)
        self.acks.append(WorkloadAck(meta.partition, meta.offset, value, meta.leader_epoch, now))


async def write_each(
    producer: Producer, partitions: Sequence[str], prefix: str, at_once: int | None = None
) -> tuple[dict[str, WorkloadAck], dict[str, BaseException]]:
    """One record to each partition, all at once or `at_once` partitions at a time: the
    acknowledgement of each (with when it arrived), and the error of each that failed."""
    gate = asyncio.Semaphore(at_once or len(partitions) or 1)
    acks: dict[str, WorkloadAck] = {}
    failed: dict[str, BaseException] = {}

    async def one(partition: str) -> None:
        value = f"{prefix}-{partition}"
        async with gate:
            try:
                meta = await (await producer.send(partition, value))
            except Exception as exc:  # reported with the others, not raised
                failed[partition] = exc
                return
        # Taken as soon as this task resumes: the first writes after a failover are timed
        # by it.
        acks[partition] = WorkloadAck(
            partition, meta.offset, value, meta.leader_epoch, time.monotonic()
        )

    await asyncio.gather(*(one(p) for p in partitions))
    return acks, failed


async def read_all(
    client: Client, partitions: Sequence[str]
) -> tuple[dict[str, list[tuple[int, str]]], dict[str, BaseException]]:
    """Every committed record of every partition, as (offset, value); and why each partition
    that could not be read was not (the client gives up after its retry timeout)."""
    gate = asyncio.Semaphore(READERS)
    logs: dict[str, list[tuple[int, str]]] = {}
    failed: dict[str, BaseException] = {}

    async def one(p: str) -> None:
        async with gate:
            try:
                logs[p] = await read_back(client, p)
            except ClientError as exc:
                failed[p] = exc

    await asyncio.gather(*(one(p) for p in partitions))
    return logs, failed
