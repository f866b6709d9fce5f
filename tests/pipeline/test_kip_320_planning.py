"""The Spark source's planning (`EpochlogStreamReader.latestOffset`, `partitions`) and a task's
read (`read_range`) across an unclean election, against real brokers (no Spark: the
planner's and the task's code, called as Spark calls them).

The query reads offsets 0..49 of a partition; a follower left behind at 20 is elected
uncleanly and its log grows to 60 with other records at 20..59 (`tests.client.helpers`).
The latest offset (60) is past the query's position (50): offsets alone see nothing, and
a checkpoint without leader epochs (as written before they were kept) plans on. The
checkpoint's leader epoch of the record below 50 shows the truncation: the next planning
fails naming the partition, the offsets and the epochs (failOnDataLoss=true), or goes on
from the divergence offset 20 (false); a task given a range planned before the election
fails before its first read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import pytest_asyncio
from pyspark.sql.streaming.datasource import ReadAllAvailable

from epochlog.client import LogTruncationError
from epochlog_spark.arrow import arrow_schema, spark_schema
from epochlog_spark.offsets import LEADER_EPOCHS, OffsetRange
from epochlog_spark.options import parse_options
from epochlog_spark.reader import ReadSettings, read_range
from epochlog_spark.source import DataLossDetected, EpochlogStreamReader, RangePartition
from tests.broker.cluster import Cluster
from tests.client.helpers import (
    UNCLEAN,
    UNCLEAN_SPEC,
    elect_it_and_grow_back,
    leave_a_follower_behind,
)

TOPIC = UNCLEAN_SPEC.topic


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, [UNCLEAN_SPEC], session_timeout_ms=1500).serving(UNCLEAN) as c:
        yield c


def stream_reader(cluster: Cluster, **options: str) -> EpochlogStreamReader:
    tls = cluster.credentials.tls
    assert tls is not None
    assert tls.cert is not None
    assert tls.key is not None
    given = {
        "bootstrap": ",".join(p.url for p in cluster.brokers.values()),
        "topic": TOPIC,
        "startingOffsets": "earliest",
        "retryTimeoutMs": "30000",
        "ca": tls.ca,
        "cert": tls.cert,
        "key": tls.key,
        **options,
    }
    return EpochlogStreamReader(parse_options(given, "stream"), spark_schema(False))


def offsets_of(doc: dict[str, Any]) -> dict[str, Any]:
    return {t: p for t, p in doc.items() if t != LEADER_EPOCHS}


async def plan(reader: EpochlogStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    """`latestOffset` as Spark calls it, off the event loop (it runs one of its own)."""
    end: dict[str, Any] = await asyncio.to_thread(reader.latestOffset, start, ReadAllAvailable())
    return end


def ranges(reader: EpochlogStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
    planned: Sequence[Any] = reader.partitions(start, end)
    return [r for p in planned if isinstance(p, RangePartition) for r in p.ranges]


def read_values(reader: EpochlogStreamReader, offset_range: OffsetRange) -> list[str]:
    batches: list[pa.RecordBatch] = list(
        read_range(ReadSettings.of(reader.options), offset_range, arrow_schema(reader.schema))
    )
    return [bytes(v).decode() for b in batches for v in b.column("value").to_pylist()]


async def test_planning_finds_a_truncation_the_log_grew_back_over_through_epochs(
    cluster: Cluster,
) -> None:
    stale = await leave_a_follower_behind(cluster)
    strict = stream_reader(cluster)
    lenient = stream_reader(cluster, failOnDataLoss="false")
    blind = stream_reader(cluster)
    try:
        await truncated_under(cluster, stale, strict, lenient, blind)
    finally:
        for reader in (strict, lenient, blind):
            await asyncio.to_thread(reader.stop)


async def truncated_under(
    cluster: Cluster,
    stale: int,
    strict: EpochlogStreamReader,
    lenient: EpochlogStreamReader,
    blind: EpochlogStreamReader,
) -> None:
    start = await asyncio.to_thread(strict.initialOffset)
    assert start == {TOPIC: {"0": 0}}
    first = await plan(strict, start)
    assert offsets_of(first) == {TOPIC: {"0": 50}}
    epoch = first[LEADER_EPOCHS][TOPIC]["0"]
    assert epoch >= 1
    [planned] = ranges(strict, start, first)
    assert (planned.start, planned.end, planned.start_epoch) == (0, 50, None)
    assert len(await asyncio.to_thread(read_values, strict, planned)) == 50
    # A range planned now, to be read after the election: [50, 60) below 50 in `epoch`.
    later = OffsetRange(TOPIC, 0, UNCLEAN, 50, 60, epoch)

    await elect_it_and_grow_back(cluster, stale)

    # Offsets alone: a checkpoint without epochs plans on to 60.
    assert offsets_of(await plan(blind, offsets_of(first))) == {TOPIC: {"0": 60}}

    with pytest.raises(DataLossDetected) as failed:
        await plan(strict, first)
    message = str(failed.value)
    assert f"{UNCLEAN}: the log was truncated under the reader" in message, message
    assert "records it read at offsets 20..49" in message, message
    assert f"asked where leaderEpoch {epoch} ends" in message, message
    assert "failOnDataLoss" in message, message

    with pytest.raises(LogTruncationError, match=r"offsets 20\.\.49"):
        await asyncio.to_thread(read_values, strict, later)

    # failOnDataLoss=false: this batch ends at the divergence offset (its range is empty),
    # the next one reads from there what the log holds now.
    back = await plan(lenient, first)
    assert offsets_of(back) == {TOPIC: {"0": 20}}
    assert ranges(lenient, first, back) == []
    on = await plan(lenient, back)
    assert offsets_of(on) == {TOPIC: {"0": 60}}
    [rest] = ranges(lenient, back, on)
    assert (rest.start, rest.end, rest.start_epoch) == (20, 60, back[LEADER_EPOCHS][TOPIC]["0"])
    got = await asyncio.to_thread(read_values, lenient, rest)
    assert got == [f"third-{n}" for n in range(40)]
