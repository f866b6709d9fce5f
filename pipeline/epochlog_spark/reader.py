"""What a Spark task runs: one offset range of one partition, read into Arrow batches.

`read_range` runs in a Python worker of an executor. It opens one client (one
connection to the partition's leader, a new one only when the leader moves),
reads exactly the range's records with `epochlog.client.ranges.RangeReader`
(binary reads of the stored batches, below the high watermark; leader changes,
OFFSET_NOT_AVAILABLE and NOT_LEADER_OR_FOLLOWER retried inside), and yields
one Arrow record batch per read. Records that are gone fail the task with a
message naming partition and offsets (`failOnDataLoss`, the default), or are
logged and skipped. A range planned with the leader epoch of the record below
it validates its start against the leader's epochs before its first read
(KIP-320), as it does after every leader change.

The asynchronous client runs on an event loop private to the call; nothing is
kept between calls, as Spark asks of `read`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import structlog

from epochlog.client import Client
from epochlog.client.ranges import RangeReader
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
    configure_once()
    loop = asyncio.new_event_loop()
    client = Client(
        settings.bootstrap,
        request_timeout_ms=settings.request_timeout_ms,
        credentials=settings.credentials,
    )
    reader = RangeReader(
        client,
        offset_range.name,
        offset_range.start,
        offset_range.end,
        fail_on_data_loss=settings.fail_on_data_loss,
        data_loss_advice=DATA_LOSS_ADVICE,
        max_bytes=settings.fetch_max_bytes,
        retry_timeout_ms=settings.retry_timeout_ms,
        poll_timeout_ms=settings.poll_timeout_ms,
        start_epoch=offset_range.start_epoch,
    )
    chunks = reader.chunks()
    try:
        while True:
            try:
                chunk = loop.run_until_complete(anext(chunks))
            except StopAsyncIteration:
                break
            yield to_arrow(
                chunk.batches,
                topic=offset_range.topic,
                partition=offset_range.partition,
                start=chunk.start,
                end=chunk.end,
                schema=schema,
            )
    finally:
        loop.run_until_complete(chunks.aclose())
        loop.run_until_complete(client.close())
        loop.close()
    log.debug(
        "range_read",
        partition=offset_range.name,
        start=offset_range.start,
        end=offset_range.end,
        lost=len(reader.losses),
    )
