"""The order pipeline keeps every acknowledged record exactly once: across a leader's SIGKILL
in the middle of the stream, and across a stop and a restart from its checkpoint.

The job (`epochlog_spark.job`, its three queries) runs with real Spark in local
mode against the embedded cluster while a producer writes orders with acks=all.
The leader of one partition is SIGKILLed mid-stream; the operator elects another
and the producer goes on. Then the job is stopped, more orders are acknowledged
while it is down, and it is started again from its checkpoint. The audit table
must hold every acknowledged record once, at the offset it was acknowledged at,
and no (partition, offset) twice; the checkpoint's offsets must never go back.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from epochlog.client import Client
from epochlog_spark.config import JobConfig
from epochlog_spark.job import AUDIT, Job
from epochlog_spark.orders import order_event
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import SteadyProducer
from tests.spark.conftest import Background
from tests.spark.helpers import (
    LONG_S,
    bootstrap,
    checkpoint_offsets,
    create_topic,
    credential_options,
    produce,
    rows,
)
from tests.waiting import Patience

TOPIC = "eo-orders"
PARTITIONS = 2
START_MS = 1_764_000_000_000


def _value(n: int) -> str:
    return order_event(n, start_ms=START_MS)


@pytest.mark.slow
@pytest.mark.scenario  # a failover and a restart of the query: minutes of Spark, in make e2e
def test_every_acknowledged_order_lands_once_across_failover_and_restart(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    create_topic(background, cluster, TOPIC, PARTITIONS)
    names = {f"{TOPIC}-{i}": i for i in range(PARTITIONS)}
    config = JobConfig(
        bootstrap=bootstrap(cluster),
        topic=TOPIC,
        output=str(workdir / "out"),
        checkpoint=str(workdir / "checkpoint"),
        trigger_interval="500 milliseconds",
        source_options=credential_options(cluster),
    )
    client = background.run(_client(cluster))
    producer = SteadyProducer(client, list(names), rate=100, make_value=_value)
    background.run(producer.start())
    # A failure must stop the producer and the queries too: they would go on working this
    # package's cluster and Spark session, which later tests share, for the rest of the run.
    job = Job(spark, config)
    try:
        # Mid-stream: the job has written records, and the producer is going.
        patience = Patience("the job to read its first records", 60)
        while sum(p["numInputRows"] for p in job.queries[AUDIT].recentProgress) < 50:
            patience.check()
            job.check()
            time.sleep(0.1)

        victim = f"{TOPIC}-0"
        old = background.run(cluster.wait_leader(victim))
        assert old.leader is not None
        killed_at = time.monotonic()
        cluster.kill(f"broker-{old.leader}")
        new = background.run(
            cluster.wait_leader(
                victim, not_in={old.leader}, min_leader_epoch=old.leader_epoch + 1, timeout=LONG_S
            )
        )
        background.run(
            producer.wait_ack(victim, min_epoch=new.leader_epoch, after=killed_at, timeout=LONG_S)
        )
        acked = len(producer.acks)
        while len(producer.acks) < acked + 100:
            time.sleep(0.05)
        background.run(producer.stop())
        assert not producer.failed, producer.failed[:3]
        job.process_all_available()
        _check(spark, config, producer)
    except BaseException:
        job.stop()
        raise
    finally:
        background.run(producer.stop())
        background.run(client.close())

    # Stopped; more orders while it is down; started again from the checkpoint.
    job.stop()
    background.run(cluster.restart(f"broker-{old.leader}"))
    more = produce(
        background,
        cluster,
        [(f"{TOPIC}-{n % PARTITIONS}", _value(n)) for n in range(10_000, 10_300)],
    )
    job = Job(spark, config)
    try:
        job.process_all_available()
    finally:
        job.stop()
    _check(
        spark,
        config,
        producer,
        [(m.partition, m.offset, _value(10_000 + i)) for i, m in enumerate(more)],
    )


async def _client(cluster: LocalCluster) -> Client:
    return Client(
        cluster.bootstrap,
        request_timeout_ms=5000,
        retry_backoff_ms=20,
        credentials=cluster.credentials,
    )


def _check(
    spark: SparkSession,
    config: JobConfig,
    producer: SteadyProducer,
    extra: list[tuple[str, int, str]] | None = None,
) -> None:
    acks = [(a.partition, a.offset, a.value) for a in producer.acks] + (extra or [])
    got = rows(spark, Path(config.path(AUDIT)), "partition", "offset", "value")
    at: dict[tuple[int, int], bytes] = {}
    twice = []
    for partition, offset, value in got:
        if (partition, offset) in at:
            twice.append((partition, offset))
        at[(partition, offset)] = value
    index = {f"{TOPIC}-{i}": i for i in range(PARTITIONS)}
    missing = [a for a in acks if at.get((index[a[0]], a[1])) != a[2].encode()]
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {missing[:3]}"
    assert not twice, f"written twice: {twice[:5]}"
    # The checkpoint's offsets: JSON per partition, never going back.
    history = checkpoint_offsets(Path(config.checkpoint_of(AUDIT)))
    for before, after in itertools.pairwise(history):
        for i in range(PARTITIONS):
            assert after[TOPIC][str(i)] >= before[TOPIC][str(i)], (before, after)
