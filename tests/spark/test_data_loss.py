"""failOnDataLoss on a log truncated, or deleted from its start, under a running query, with
real Spark and real brokers.

A Partition with uncleanLeaderElection: replicas 1, 2, 3 (the first leads). The
query reads the first records; one follower is SIGKILLed and leaves the ISR;
more records are acknowledged by the two others and read by the query too. Then
those two are SIGKILLed and the stale follower comes back: the operator elects
it uncleanly, its log ending below where the query stands, and it takes new
records until its log reaches past the query's position again: the latest
offset says nothing is wrong. The leader epoch the checkpoint keeps of the
record below the position does (KIP-320).

- failOnDataLoss=true (the default): the query's next run fails, and the error
  names the partition, the offsets and the leader epoch.
- failOnDataLoss=false: from a copy of the same checkpoint, the query logs the
  loss and goes on from the divergence offset: it reads what the log holds
  there now.

Records deleted below where the query stands (DeleteRecords, as retention does) are
the other loss: the next run fails naming the deleted offsets, or with
failOnDataLoss=false goes on from the new log start and reads all that is left.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import SparkSession

from epochlog.client import Client
from epochlog_tools.devcluster.local import LocalCluster
from tests.spark.conftest import Background
from tests.spark.helpers import (
    LONG_S,
    checkpoint_epochs,
    checkpoint_offsets,
    create_partition,
    produce,
    rows,
    stream,
    to_parquet,
)
from tests.waiting import until

TOPIC = "loss"
NAME = f"{TOPIC}-0"
REPLICAS = (1, 2, 3)
STALE = 3
"""The follower that falls behind and is elected uncleanly."""


def _run(spark: SparkSession, cluster: LocalCluster, out: Path, **options: str) -> None:
    query = to_parquet(
        stream(spark, cluster, topic=TOPIC, startingOffsets="earliest", **options), out
    )
    query.awaitTermination()


@pytest.mark.scenario  # brokers killed and a log truncated under two queries: in make e2e
def test_fail_on_data_loss_both_ways_on_a_log_truncated_under_the_query(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    create_partition(
        background,
        cluster,
        TOPIC,
        0,
        replicas=REPLICAS,
        min_insync_replicas=1,
        unclean_leader_election=True,
    )
    out = workdir / "query"
    produce(background, cluster, [(NAME, f"first-{n}") for n in range(20)])
    _run(spark, cluster, out)

    cluster.kill(f"broker-{STALE}")

    async def out_of_isr() -> bool:
        status = await cluster.wait_leader(NAME, timeout=LONG_S)
        return STALE not in status.isr

    background.run(until(out_of_isr, f"broker {STALE} to leave the ISR", 30))
    produce(background, cluster, [(NAME, f"second-{n}") for n in range(30)])
    _run(spark, cluster, out)
    assert checkpoint_offsets(out / "checkpoint")[-1] == {TOPIC: {"0": 50}}

    epoch = checkpoint_epochs(out / "checkpoint")[-1][TOPIC]["0"]

    # The two brokers holding offsets 20..49 go; the stale one comes back and is elected.
    for broker in REPLICAS:
        if broker != STALE:
            cluster.kill(f"broker-{broker}")
    background.run(cluster.restart(f"broker-{STALE}"))
    others = set(REPLICAS) - {STALE}
    status = background.run(cluster.wait_leader(NAME, not_in=others, timeout=LONG_S))
    assert status.leader == STALE, status
    background.run(cluster.wait_serving(NAME, status, timeout=LONG_S))
    # Its log grows back past the query's position, with other records at 20..49.
    produce(background, cluster, [(NAME, f"third-{n}") for n in range(40)])

    lenient = workdir / "lenient"
    shutil.copytree(out, lenient)
    with pytest.raises(CapturedException) as failed:
        _run(spark, cluster, out)
    message = str(failed.value)
    assert "loss-0: the log was truncated under the reader" in message, message
    assert "records it read at offsets 20..49" in message, message
    assert f"leaderEpoch {epoch}" in message, message
    assert "failOnDataLoss" in message

    _run(spark, cluster, lenient, failOnDataLoss="false")
    got = sorted(
        (o, bytes(v).decode()) for o, v in rows(spark, lenient / "data", "offset", "value")
    )
    # From the divergence offset on, what the log holds now: third-0..39 at 20..59.
    assert [(o, v) for o, v in got if v.startswith("third")] == [
        (20 + n, f"third-{n}") for n in range(40)
    ]
    assert checkpoint_offsets(lenient / "checkpoint")[-1] == {TOPIC: {"0": 60}}


def test_fail_on_data_loss_both_ways_on_records_deleted_under_the_query(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    topic, name = "trimmed", "trimmed-0"
    create_partition(background, cluster, topic, 0)
    out = workdir / "query"

    def run(path: Path, **options: str) -> None:
        frame = stream(spark, cluster, topic=topic, startingOffsets="earliest", **options)
        to_parquet(frame, path).awaitTermination()

    produce(background, cluster, [(name, f"first-{n}") for n in range(20)])
    run(out)
    assert checkpoint_offsets(out / "checkpoint")[-1] == {topic: {"0": 20}}
    produce(background, cluster, [(name, f"second-{n}") for n in range(30)])

    async def delete_below(offset: int) -> int:
        async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
            return (await client.delete_records(name, offset, timeout_ms=int(LONG_S * 1000))).offset

    assert background.run(delete_below(40)) == 40

    lenient = workdir / "lenient"
    shutil.copytree(out, lenient)
    with pytest.raises(CapturedException) as failed:
        run(out)
    message = str(failed.value)
    assert "trimmed-0: offsets 20..39 (20 records) were deleted" in message, message
    assert "failOnDataLoss" in message

    run(lenient, failOnDataLoss="false")
    assert checkpoint_offsets(lenient / "checkpoint")[-1] == {topic: {"0": 50}}
    read = rows(spark, lenient / "data", "offset", "value")
    got = sorted((o, bytes(v).decode()) for o, v in read)
    # What the lenient run read: everything from the new log start, nothing below it.
    assert [(o, v) for o, v in got if v.startswith("second")] == [
        (20 + n, f"second-{n}") for n in range(20, 30)
    ]
