"""The `epochlog` data source with real Spark against the embedded cluster: what it reads,
from where, how much per micro-batch, partitions that appear, and options it refuses.

Spark in local mode gives a task one attempt (`spark.task.maxFailures` is 1), so
any error a reader let out would fail these queries.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from epochlog_tools.devcluster.local import LocalCluster
from tests.spark.conftest import Background
from tests.spark.helpers import (
    batch,
    checkpoint_offsets,
    create_partition,
    create_topic,
    produce,
    stream,
    to_parquet,
)
from tests.waiting import Patience


def _memory(spark: SparkSession, name: str) -> list[tuple[int, int, str]]:
    return sorted(
        (r.partition, r.offset, bytes(r.value).decode())
        for r in spark.table(name).select("partition", "offset", "value").collect()
    )


def _to_memory(frame: DataFrame, name: str, **trigger: str) -> StreamingQuery:
    writer = frame.writeStream.format("memory").queryName(name)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def test_a_batch_read_gives_every_record_with_the_kafka_source_columns(
    spark: SparkSession, background: Background, cluster: LocalCluster
) -> None:
    create_topic(background, cluster, "src-batch", 2)
    sent = [(f"src-batch-{n % 2}", f"v{n}") for n in range(40)]
    acks = produce(background, cluster, sent, headers={"trace": b"\x00\xff"})
    frame = batch(spark, cluster, topic="src-batch", includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("leaderEpoch", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    got = frame.collect()
    assert sorted((r.partition, r.offset, bytes(r.value).decode()) for r in got) == sorted(
        (int(a.partition[-1]), a.offset, value) for a, (_, value) in zip(acks, sent, strict=True)
    )
    assert {r.topic for r in got} == {"src-batch"}
    assert all(r.leaderEpoch >= 1 and r.timestampType == 0 for r in got)
    assert all(
        [(h.key, bytes(h.value)) for h in r.headers] == [("trace", b"\x00\xff")] for r in got
    )

    # Explicit offsets per partition, Kafka's JSON: -2 earliest, -1 latest.
    ranged = batch(
        spark,
        cluster,
        topic="src-batch",
        startingOffsets=json.dumps({"src-batch": {"0": 5, "1": -2}}),
        endingOffsets=json.dumps({"src-batch": {"0": 12, "1": -1}}),
        minPartitions="5",
    )
    first = sorted((r.partition, r.offset) for r in ranged.collect())
    assert first == [(0, o) for o in range(5, 12)] + [(1, o) for o in range(20)]
    # The same offset range always gives the same records.
    again = sorted((r.partition, r.offset) for r in ranged.collect())
    assert again == first


def test_small_ranges_are_read_together_unless_max_ranges_per_task_is_one(
    spark: SparkSession, background: Background, cluster: LocalCluster
) -> None:
    create_topic(background, cluster, "src-many", 12)
    sent = [(f"src-many-{n % 12}", f"m{n}") for n in range(36)]
    acks = produce(background, cluster, sent)
    expected = sorted(
        (int(a.partition.rsplit("-", 1)[1]), a.offset, value)
        for a, (_, value) in zip(acks, sent, strict=True)
    )
    # Twelve ranges of three records: one task reads them all, in fetches of many.
    together = batch(spark, cluster, topic="src-many")
    assert together.rdd.getNumPartitions() == 1
    assert (
        sorted((r.partition, r.offset, bytes(r.value).decode()) for r in together.collect())
        == expected
    )
    # A task per range, as Spark's Kafka source plans.
    apart = batch(spark, cluster, topic="src-many", maxRangesPerTask="1")
    assert apart.rdd.getNumPartitions() == 12
    assert (
        sorted((r.partition, r.offset, bytes(r.value).decode()) for r in apart.collect())
        == expected
    )


def test_starting_offsets_latest_reads_only_records_that_come_after(
    spark: SparkSession, background: Background, cluster: LocalCluster
) -> None:
    create_topic(background, cluster, "src-latest", 2)
    produce(background, cluster, [("src-latest-0", "old-0"), ("src-latest-1", "old-1")])
    query = _to_memory(stream(spark, cluster, topic="src-latest"), "latest_rows")
    try:
        query.processAllAvailable()
        assert _memory(spark, "latest_rows") == []
        produce(background, cluster, [(f"src-latest-{n % 2}", f"new-{n}") for n in range(6)])
        query.processAllAvailable()
        assert sorted(v for _, _, v in _memory(spark, "latest_rows")) == [
            f"new-{n}" for n in range(6)
        ]
    finally:
        query.stop()


def test_starting_timestamp_starts_at_the_first_record_at_or_after_it(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    create_topic(background, cluster, "src-time", 2)
    produce(background, cluster, [(f"src-time-{n % 2}", f"before-{n}") for n in range(10)])
    stamps = batch(spark, cluster, topic="src-time").select("timestamp").collect()
    at_ms = int(max(r.timestamp for r in stamps).timestamp() * 1000) + 1
    patience = Patience("the clock to pass the last record's time", 1)
    while time.time() * 1000 <= at_ms:
        patience.check()
        time.sleep(0.001)
    produce(background, cluster, [(f"src-time-{n % 2}", f"after-{n}") for n in range(10)])
    query = to_parquet(
        stream(spark, cluster, topic="src-time", startingTimestamp=str(at_ms)), workdir
    )
    query.awaitTermination()
    got = spark.read.parquet(str(workdir / "data")).select("value").collect()
    assert sorted(bytes(r.value).decode() for r in got) == sorted(f"after-{n}" for n in range(10))


def test_max_records_per_trigger_bounds_each_micro_batch(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    create_topic(background, cluster, "src-limit", 3)
    produce(background, cluster, [(f"src-limit-{n % 3}", f"r{n}") for n in range(130)])
    query = to_parquet(
        stream(
            spark, cluster, topic="src-limit", startingOffsets="earliest", maxRecordsPerTrigger="25"
        ),
        workdir,
    )
    query.awaitTermination()
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert max(sizes) <= 25, sizes
    assert sum(sizes) == 130
    # Every micro-batch's end is in the checkpoint as JSON per partition.
    ends = checkpoint_offsets(workdir / "checkpoint")
    assert ends[-1] == {"src-limit": {"0": 44, "1": 43, "2": 43}}
    totals = [sum(e["src-limit"].values()) for e in ends]
    assert all(b - a <= 25 for a, b in itertools.pairwise(totals))


def test_a_partition_added_while_the_query_runs_is_read_from_its_earliest_offset(
    spark: SparkSession, background: Background, cluster: LocalCluster
) -> None:
    create_topic(background, cluster, "src-grow", 2)
    produce(background, cluster, [(f"src-grow-{n % 2}", f"a{n}") for n in range(4)])
    query = _to_memory(
        stream(spark, cluster, topic="src-grow", startingOffsets="earliest"),
        "grow_rows",
        processingTime="200 milliseconds",
    )
    try:
        query.processAllAvailable()
        create_partition(background, cluster, "src-grow", 2)
        produce(background, cluster, [("src-grow-2", f"c{n}") for n in range(5)])
        patience = Patience("the query to read the new partition", 30)
        while len(_memory(spark, "grow_rows")) < 9:
            assert query.isActive, query.exception()
            patience.check()
            time.sleep(0.1)
        got = _memory(spark, "grow_rows")
        assert [(p, o, v) for p, o, v in got if p == 2] == [(2, n, f"c{n}") for n in range(5)]
        assert len(got) == 9
    finally:
        query.stop()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (
            {"topic": "x", "startingOffset": "earliest"},
            "(?i)startingOffset: unknown option; did you mean startingOffsets",
        ),
        ({}, "topic: give exactly one of topic"),
        ({"topic": "x", "startingOffsets": "{orders: 1"}, "startingOffsets: is not earliest"),
        ({"topic": "x", "startingOffsets": '{"x": {"0": "a"}}'}, "startingOffsets: x/0"),
        ({"topic": "x", "maxRecordsPerTrigger": "none"}, "maxRecordsPerTrigger: 'none'"),
        ({"topic": "x", "failOnDataLoss": "yes"}, "failOnDataLoss: must be true or false"),
    ],
)
def test_a_bad_option_fails_the_query_at_its_start_naming_the_option(
    spark: SparkSession, cluster: LocalCluster, options: dict[str, str], named: str
) -> None:
    with pytest.raises((PySparkException, CapturedException), match=named):
        stream(spark, cluster, **options)


def test_unreachable_brokers_fail_the_query_at_its_start_naming_bootstrap(
    spark: SparkSession, workdir: Path
) -> None:
    frame = (
        spark.readStream.format("epochlog")
        .option("bootstrap", "http://127.0.0.1:9")
        .option("topic", "orders")
        .option("retryTimeoutMs", "0")
        .load()
    )
    query = to_parquet(frame, workdir)
    with pytest.raises(CapturedException, match="epochlog source option bootstrap: no broker"):
        query.awaitTermination()
