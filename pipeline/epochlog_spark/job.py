"""The pipeline job: order events from an epochlog topic to revenue per minute, an audit copy
and dead letters, in Parquet, exactly once.

Three streaming queries read the topic through the `epochlog` source, each
with its own checkpoint under `--checkpoint` and its own output under
`--output`:

- `revenue`: the values parsed as order events (`epochlog_spark.orders`),
  revenue and order count per category in event-time windows (`--window`,
  default 1 minute) with a watermark (`--watermark`, default 1 minute); a
  window's row is written once the watermark has passed its end (append
  mode). Columns: window_start, window_end, category, revenue, orders.
- `audit`: every record as it is in the log: topic, partition, offset,
  leaderEpoch, timestamp, key, value.
- `dead-letters`: the records whose value is not a well-formed order event,
  with topic, partition, offset, value and why (`error`), instead of failing
  the job.

Parquet file sinks with checkpoints are exactly once: a restarted job goes on
from its checkpoint, re-reads the same offset ranges (the source gives the
same records for the same range) and its sink keeps one copy.

Run it here with `epochlog pipeline run ...` (Spark in local mode), or on a
cluster with `spark-submit pipeline/epochlog_spark/job.py ...` (the same
arguments; see `build_parser`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from epochlog_spark.arrow import LEADER_EPOCH
from epochlog_spark.config import JobConfig, build_parser, config_from_args
from epochlog_spark.options import option_name
from epochlog_spark.orders import AMOUNT, AMOUNT_TYPE, ORDER_SCHEMA
from epochlog_spark.progress import ran_a_batch
from epochlog_spark.source import FORMAT, register

REVENUE: Final = "revenue"
AUDIT: Final = "audit"
DEAD_LETTERS: Final = "dead-letters"
QUERIES: Final = (REVENUE, AUDIT, DEAD_LETTERS)

NOT_JSON: Final = "not a JSON object"
BAD_FIELDS: Final = "order_id, category, amount or event_time missing or malformed"


def read_topic(spark: SparkSession, config: JobConfig) -> DataFrame:
    options = {
        option_name("bootstrap"): config.bootstrap,
        option_name("topic"): config.topic,
        option_name("starting_offsets"): config.starting_offsets,
        **config.credential_options(),
        **config.source_options,
    }
    return spark.readStream.format(FORMAT).options(**options).load()


def parse_orders(records: DataFrame) -> DataFrame:
    """The records with `order` (the parsed event, null fields where malformed), `ok`
    (well-formed) and `error` (why not)."""
    text = F.col("value").cast("string")
    parsed = F.from_json(text, ORDER_SCHEMA)
    as_object = F.from_json(text, "MAP<STRING, STRING>")
    amount_ok = parsed["amount"].rlike(AMOUNT.pattern)
    event_time = F.try_to_timestamp(parsed["event_time"])
    ok: Column = (
        as_object.isNotNull()
        & parsed["order_id"].isNotNull()
        & parsed["category"].isNotNull()
        & F.coalesce(amount_ok, F.lit(False))
        & event_time.isNotNull()
    )
    return records.select(
        "*",
        F.struct(
            parsed["order_id"].alias("order_id"),
            parsed["category"].alias("category"),
            parsed["amount"].try_cast(AMOUNT_TYPE).alias("amount"),
            event_time.alias("event_time"),
        ).alias("order"),
        ok.alias("ok"),
        F.when(as_object.isNull(), F.lit(NOT_JSON)).when(~ok, F.lit(BAD_FIELDS)).alias("error"),
    )


def revenue(orders: DataFrame, config: JobConfig) -> DataFrame:
    return (
        orders.where("ok")
        .select("order.*")
        .withWatermark("event_time", config.watermark)
        .groupBy(F.window("event_time", config.window), "category")
        .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "category",
            "revenue",
            "orders",
        )
    )


def audit(records: DataFrame) -> DataFrame:
    return records.select("topic", "partition", "offset", LEADER_EPOCH, "timestamp", "key", "value")


def dead_letters(orders: DataFrame) -> DataFrame:
    return orders.where(~F.col("ok")).select("topic", "partition", "offset", "value", "error")


WORKER_START_FAILURE: Final = "Python worker failed to connect back"
"""How Spark reports a Python worker that did not connect back to the JVM in time. Spark
waits a fixed 10 s for the worker that plans a Python data source's micro-batches (no
setting changes it), which a loaded driver can exceed; nothing was read or written."""
MAX_RESTARTS: Final = 5
"""Restarts in a row of one query after a Python worker failed to start, before its
failure stands. A restarted query that runs a batch before it fails again starts a new row:
a driver busy for a while fails a few starts, a worker that never starts fails them all."""


def _frames(spark: SparkSession, config: JobConfig) -> dict[str, DataFrame]:
    register(spark)
    records = read_topic(spark, config)
    orders = parse_orders(records)
    return {
        REVENUE: revenue(orders, config),
        AUDIT: audit(records),
        DEAD_LETTERS: dead_letters(orders),
    }


def _start(name: str, frame: DataFrame, config: JobConfig) -> StreamingQuery:
    writer = (
        frame.writeStream.format("parquet")
        .queryName(name)
        .outputMode("append")
        .option("path", config.path(name))
    )
    writer = (
        writer.trigger(availableNow=True)
        if config.available_now
        else writer.trigger(processingTime=config.trigger_interval)
    )
    return writer.start(checkpointLocation=config.checkpoint_of(name))


def start_job(spark: SparkSession, config: JobConfig) -> dict[str, StreamingQuery]:
    """Start the three queries; they run until stopped (or, with available_now, until the
    topic's current end is processed)."""
    return {name: _start(name, frame, config) for name, frame in _frames(spark, config).items()}


def restartable(failure: str, restarts: int) -> bool:
    """A query that ended with `failure` after `restarts` restarts in a row is started again: only
    when a Python worker did not start in time, which starting it again from its
    checkpoint mends without losing or repeating anything (the sinks are exactly once)."""
    return WORKER_START_FAILURE in failure and restarts < MAX_RESTARTS


class Job:
    """The three queries, with the restarts a worker start failure calls for.

    `check()` raises the first failure that stands and starts again, from its checkpoint,
    a query whose Python worker failed to start (up to `MAX_RESTARTS` times in a row)."""

    def __init__(self, spark: SparkSession, config: JobConfig) -> None:
        self.spark = spark
        self.config = config
        self.queries = start_job(spark, config)
        self.restarts: dict[str, int] = dict.fromkeys(self.queries, 0)

    def check(self) -> list[str]:
        """Restart what may be restarted; raise a failure that may not. The names restarted."""
        restarted = []
        for name, query in list(self.queries.items()):
            failure = None if query.isActive else query.exception()
            if failure is None:
                continue
            if ran_a_batch(query.recentProgress):
                self.restarts[name] = 0
            if not restartable(str(failure), self.restarts[name]):
                raise failure
            self.restarts[name] += 1
            print(
                f"pipeline: query {name}: a Python worker did not start in time; starting "
                f"again from its checkpoint ({self.restarts[name]} of {MAX_RESTARTS})",
                file=sys.stderr,
                flush=True,
            )
            self.queries[name] = _start(name, _frames(self.spark, self.config)[name], self.config)
            restarted.append(name)
        return restarted

    def running(self) -> bool:
        """Some query has not ended (a failure, not restarted, is raised by `check`)."""
        self.check()
        return any(q.isActive for q in self.queries.values())

    def process_all_available(self) -> None:
        """Until every query processed what its source has now (restarting as `check`)."""
        for name in self.queries:
            while True:
                try:
                    self.queries[name].processAllAvailable()
                    break
                except StreamingQueryException:
                    if not self.check():
                        raise

    def stop(self) -> None:
        stop_job(self.queries)

    def wait(self) -> None:
        """Until every query ended; the first failure that stands stops the others and is
        raised."""
        try:
            while self.running():
                self.spark.streams.awaitAnyTermination()
                self.spark.streams.resetTerminated()
        finally:
            self.stop()


def stop_job(queries: dict[str, StreamingQuery]) -> None:
    for query in queries.values():
        if query.isActive:
            query.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit job.py ...`: the session comes from spark-submit's configuration."""
    config = config_from_args(build_parser().parse_args(argv))
    spark = SparkSession.builder.appName("epochlog-orders").getOrCreate()
    Job(spark, config).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
