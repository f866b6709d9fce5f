"""Spark's own Kafka source (spark-sql-kafka-0-10, `format("kafka")`, with the Java Kafka
client it brings) reading the embedded cluster through the brokers' Kafka listener, over
TLS with the admin user's certificate: the options a Spark job sets against any Kafka
cluster, nothing of epochlog's own source.

The connector is 4.2.0 on pyspark 4.3.0: Maven Central serves no 4.3.0 of it
(tests/interop/spark-kafka.pom.xml); its jars are on the package's session
(tests/spark/conftest.py), fetched by `make interop-jars`.

- A batch read (earliest to latest) gives every record epochlog's client was told is
  acknowledged, in the partition and at the offset it was acknowledged at, with its
  headers, as a CreateTime record of its topic.
- A streaming query (trigger availableNow, to Parquet with a checkpoint) reads the same;
  run again from its checkpoint after more records came, it adds those and nothing it
  had read before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from epochlog.client import RecordMetadata
from epochlog_tools.devcluster.local import LocalCluster
from tests.interop.jars import SPARK_KAFKA, jars
from tests.interop.java import tls_properties
from tests.spark.conftest import Background
from tests.spark.helpers import create_topic, produce, to_parquet

TOPIC = "kafka-src"
PARTITIONS = 2
HEADERS = {"trace": b"\x00\xff"}


@pytest.fixture
def kafka_format(spark: SparkSession) -> None:
    """Spark's Kafka source is on the session's class path; a missing jar set fails here,
    saying how to fetch it (`make interop-jars`), and is never skipped."""
    needed = {p.name for p in jars(SPARK_KAFKA)}
    given = {
        Path(j).name for j in spark.sparkContext.getConf().get("spark.jars", "").split(",") if j
    }
    assert needed <= given, (
        f"the session started without Spark's Kafka source ({sorted(needed - given)}): "
        "it was started before `make interop-jars` fetched it"
    )


def _options(cluster: LocalCluster, directory: Path) -> dict[str, str]:
    """What a Spark job sets to read a Kafka cluster over TLS with a client certificate:
    the Java client's properties, each prefixed `kafka.`."""
    properties = tls_properties(cluster, "admin", directory)
    return {
        "kafka.bootstrap.servers": ",".join(cluster.kafka_bootstrap),
        **{f"kafka.{k}": v for k, v in properties.items()},
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
        "includeHeaders": "true",
    }


def _written(acks: list[RecordMetadata], sent: list[tuple[str, str]]) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of each acknowledged record."""
    return sorted(
        (int(a.partition.rsplit("-", 1)[1]), a.offset, value)
        for a, (_, value) in zip(acks, sent, strict=True)
    )


def _read(rows: list[Any]) -> list[tuple[int, int, str]]:
    assert {r.topic for r in rows} <= {TOPIC}
    assert all(r.timestampType == 0 for r in rows), "not CreateTime"
    assert all([(h.key, bytes(h.value)) for h in r.headers] == list(HEADERS.items()) for r in rows)
    return sorted((r.partition, r.offset, bytes(r.value).decode()) for r in rows)


def _stream_once(spark: SparkSession, frame: DataFrame, out: Path) -> list[Any]:
    """One run of a streaming query to the end of what is there (availableNow), to Parquet
    with its checkpoint in `out`; every row its sink has committed."""
    query = to_parquet(frame, out)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return spark.read.parquet(str(out / "data")).collect()


@pytest.mark.usefixtures("kafka_format")
def test_sparks_own_kafka_source_reads_every_acknowledged_record_where_it_was_written(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    create_topic(background, cluster, TOPIC, PARTITIONS)
    first = [(f"{TOPIC}-{n % PARTITIONS}", f"a{n}") for n in range(60)]
    written = _written(produce(background, cluster, first, headers=HEADERS), first)
    options = _options(cluster, workdir)

    batch = spark.read.format("kafka").options(**options, endingOffsets="latest").load()
    assert _read(batch.collect()) == written

    stream = spark.readStream.format("kafka").options(**options).load()
    out = workdir / "stream"
    assert _read(_stream_once(spark, stream, out)) == written

    more = [(f"{TOPIC}-{n % PARTITIONS}", f"b{n}") for n in range(30)]
    added = _written(produce(background, cluster, more, headers=HEADERS), more)
    assert _read(_stream_once(spark, stream, out)) == sorted(written + added)
