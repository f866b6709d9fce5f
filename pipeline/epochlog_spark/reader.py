"""What a Spark task runs: offset ranges of partitions, read into Arrow batches.

`read_ranges` runs in a Python worker of an executor. It opens one client (a
connection to each leader, a new one only when a leader moves), reads exactly
each range's records with `epochlog.client.ranges.RangeReader` (binary reads of
the stored batches, below the high watermark; leader changes,
OFFSET_NOT_AVAILABLE and NOT_LEADER_OR_FOLLOWER retried inside), all ranges at
once, so that the ranges one broker leads are read in fetches of many
partitions, and yields one Arrow record batch per range and read. Records that
are gone fail the task with a message naming partition and offsets
(`failOnDataLoss`, the default), or are logged and skipped. A range planned
with the leader epoch of the record below it validates its start against the
leader's epochs before its first read (KIP-320), as it does after every leader
change.

The asynchronous client runs on an event loop private to the call; nothing is
kept between calls, as Spark asks of `read`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import structlog

from epochlog.client import Client
from epochlog.client.ranges import RangeChunk, RangeReader
from epochlog.logs import configure_once
from epochlog.security.options import Credentials
from epochlog_spark.arrow import to_arrow
from epochlog_spark.offsets import OffsetRange
from epochlog_spark.options import SourceOptions, option_name

log = structlog.get_logger("epochlog.spark")

DATA_LOSS_ADVICE = (
    f"Some data may have been lost. If this is expected, set the option "
    f"{option_name('fail_on_data_loss')} to false to skip it and go on."
)


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """What a task needs of the source's options (kept small: it travels with every task)."""

    bootstrap: tuple[str, ...]
    fail_on_data_loss: bool
    request_timeout_ms: int
    retry_timeout_ms: int
    poll_timeout_ms: int
    fetch_max_bytes: int
    credentials: Credentials

    @classmethod
    def of(cls, options: SourceOptions) -> ReadSettings:
        return cls(
            options.bootstrap,
            options.fail_on_data_loss,
            options.request_timeout_ms,
            options.retry_timeout_ms,
            options.poll_timeout_ms,
            options.fetch_max_bytes,
            options.credentials,
        )


def read_range(
    settings: ReadSettings, offset_range: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The records of `offset_range`, in offset order, as Arrow record batches."""
    return read_ranges(settings, (offset_range,), schema)


_Done = OffsetRange
"""A range whose reader finished, as its last item in the queue."""


def read_ranges(
    settings: ReadSettings, ranges: Sequence[OffsetRange], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The records of every range, each range's in offset order, as Arrow record batches.

    The ranges are read at the same time, on one client: the reads of ranges with the
    same leader go in one fetch of many partitions (`epochlog.client.fetching`)."""
    configure_once()
    loop = asyncio.new_event_loop()
    client = Client(
        settings.bootstrap,
        request_timeout_ms=settings.request_timeout_ms,
        credentials=settings.credentials,
    )
    readers = [
        RangeReader(
            client,
            r.name,
            r.start,
            r.end,
            fail_on_data_loss=settings.fail_on_data_loss,
            data_loss_advice=DATA_LOSS_ADVICE,
            max_bytes=settings.fetch_max_bytes,
            retry_timeout_ms=settings.retry_timeout_ms,
            poll_timeout_ms=settings.poll_timeout_ms,
            start_epoch=r.start_epoch,
        )
        for r in ranges
    ]
    # A chunk of each range at most waits here: memory stays bounded by the ranges' reads.
    queue: asyncio.Queue[tuple[OffsetRange, RangeChunk] | _Done | BaseException] = asyncio.Queue(
        maxsize=max(1, len(ranges))
    )

    async def pump(offset_range: OffsetRange, reader: RangeReader) -> None:
        try:
            async for chunk in reader:
                await queue.put((offset_range, chunk))
        except Exception as exc:
            await queue.put(exc)
        else:
            await queue.put(offset_range)

    async def start() -> list[asyncio.Task[None]]:
        return [asyncio.create_task(pump(r, rd)) for r, rd in zip(ranges, readers, strict=True)]

    tasks = loop.run_until_complete(start())
    try:
        left = len(ranges)
        while left:
            item = loop.run_until_complete(queue.get())
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, OffsetRange):
                left -= 1
                continue
            offset_range, chunk = item
            yield to_arrow(
                chunk.batches,
                topic=offset_range.topic,
                partition=offset_range.partition,
                start=chunk.start,
                end=chunk.end,
                schema=schema,
            )
    finally:
        for t in tasks:
            t.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(client.close())
        loop.close()
    for r, reader in zip(ranges, readers, strict=True):
        log.debug("range_read", partition=r.name, start=r.start, end=r.end, lost=len(reader.losses))
