"""What the Spark tests do to the cluster and read from Spark: topics, producers, outputs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from epochlog.client import Client, Producer, RecordMetadata
from epochlog.resources import PartitionStatus
from epochlog_spark.offsets import LEADER_EPOCHS
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.partitions import partition_manifest
from tests.spark.conftest import Background

LONG_S = 300.0
"""Patience for elections and catch-up: a hang detector, not a time limit."""


def create_topic(
    bg: Background, cluster: LocalCluster, topic: str, partitions: int, **spec: Any
) -> dict[str, PartitionStatus]:
    """Partitions `<topic>-0..n-1` (replicationFactor 3), each led and served."""
    return {
        f"{topic}-{i}": create_partition(bg, cluster, topic, i, **spec) for i in range(partitions)
    }


def create_partition(
    bg: Background, cluster: LocalCluster, topic: str, index: int, **spec: Any
) -> PartitionStatus:
    async def go() -> PartitionStatus:
        await cluster.apply(
            partition_manifest(
                topic,
                index,
                replica_lag_time_max_ms=cluster.settings.replica_lag_time_max_ms,
                **spec,
            )
        )
        name = f"{topic}-{index}"
        status = await cluster.wait_leader(name, timeout=LONG_S)
        await cluster.wait_serving(name, status, timeout=LONG_S)
        return status

    return bg.run(go())


def produce(
    bg: Background,
    cluster: LocalCluster,
    records: Sequence[tuple[str, str]],
    *,
    headers: dict[str, bytes] | None = None,
) -> list[RecordMetadata]:
    """(partition, value) records sent with acks=all; every one acknowledged, in order."""

    async def go() -> list[RecordMetadata]:
        async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
            producer = Producer(client, acks="all", linger_ms=2)
            futures = [
                await producer.send(partition, value, headers=headers)
                for partition, value in records
            ]
            await producer.flush()
            await producer.close()
            return [f.result() for f in futures]

    return bg.run(go())


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(cluster.bootstrap)


def credential_options(cluster: LocalCluster) -> dict[str, str]:
    """The source options `ca`, `cert`, `key`: the cluster's admin certificate."""
    tls = cluster.credentials.tls
    if tls is None:
        return {}
    assert tls.cert is not None
    assert tls.key is not None
    return {"ca": tls.ca, "cert": tls.cert, "key": tls.key}


def stream(spark: SparkSession, cluster: LocalCluster, **options: str) -> DataFrame:
    return (
        spark.readStream.format("epochlog")
        .option("bootstrap", bootstrap(cluster))
        .options(**credential_options(cluster))
        .options(**options)
        .load()
    )


def batch(spark: SparkSession, cluster: LocalCluster, **options: str) -> DataFrame:
    return (
        spark.read.format("epochlog")
        .option("bootstrap", bootstrap(cluster))
        .options(**credential_options(cluster))
        .options(**options)
        .load()
    )


def to_parquet(
    frame: DataFrame, out: Path, *, available_now: bool = True, **trigger: Any
) -> StreamingQuery:
    writer = (
        frame.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(**trigger)
    return writer.start()


def rows(spark: SparkSession, path: Path, *columns: str) -> list[tuple[Any, ...]]:
    """The rows a Parquet sink committed (its metadata log says which files count)."""
    if not (path / "_spark_metadata").exists():
        return []
    frame = spark.read.parquet(str(path))
    return [tuple(r) for r in frame.select(*columns).collect()]


def checkpoint_offsets(checkpoint: Path) -> list[dict[str, dict[str, int]]]:
    """The source's end offsets of every micro-batch, in batch order, from the checkpoint's
    offset log (a version line, the batch metadata, then one line per source), without the
    leader epochs kept beside them (`checkpoint_epochs`)."""
    return [{t: p for t, p in doc.items() if t != LEADER_EPOCHS} for doc in _offset_log(checkpoint)]


def checkpoint_epochs(checkpoint: Path) -> list[dict[str, dict[str, int]]]:
    """The leader epochs of the records below the end offsets of every micro-batch."""
    return [doc.get(LEADER_EPOCHS, {}) for doc in _offset_log(checkpoint)]


def _offset_log(checkpoint: Path) -> list[dict[str, Any]]:
    logs = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[2]) for p in logs]
