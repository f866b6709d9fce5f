"""The demo's Spark act: the order pipeline reading the demo's topic through a leader's
SIGKILL and a restart of the job, checked against the log.

`PipelineAct.start` starts Spark in local mode in this process and the
pipeline job (`epochlog_spark.job`: revenue per minute and category, an audit
copy, dead letters) as streaming queries with a one-second trigger, before
the producer starts. The cluster demo kills a leader while they run.
`PipelineAct.finish` stops the job, starts it again from its checkpoints with
Trigger.AvailableNow (it processes what the topic holds, then stops), reads
the job's Parquet outputs and compares them with the log as read back by the
client: the audit copy holds every record of the log once, the dead letters
every malformed value, and the revenue table exactly the totals of the log's
orders for every window the watermark closed.

Spark's API blocks; the act runs it in a worker thread so the cluster's event
loop goes on.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from epochlog.security.options import Credentials
from epochlog_tools.devcluster.local_workload import WorkloadAck

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from epochlog_spark.config import JobConfig
    from epochlog_spark.job import Job

WINDOW_MS: Final = 60_000
WATERMARK_MS: Final = 60_000
ORDER_STEP_MS: Final = 250
"""Event time between one order and the next: at 200 orders/s, a demo of some seconds
spans several minutes of orders, so windows close while it runs."""
MALFORMED_EVERY: Final = 250
MALFORMED_FIRST: Final = 10
"""Value 10 and every 250th after it are not well-formed orders: they must land in the
dead letters (the first comes early, so that even a short demo has one)."""


def spark_missing() -> str | None:
    """Why the act cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (make venv EXTRAS=dev,operator,spark)"
    if shutil.which("java") is None:
        return "no Java runtime on the PATH (scripts/bootstrap.sh installs one with spark)"
    return None


def order_value(n: int, start_ms: int) -> str:
    """The demo producer's n-th value: an order event, or now and then a malformed one."""
    from epochlog_spark.orders import order_event

    if n % MALFORMED_EVERY == MALFORMED_FIRST:
        return f'{{"order_id": "o-{n}", "category": "books", "amount": "twelve"}}'
    return order_event(n, start_ms=start_ms, step_ms=ORDER_STEP_MS)


@dataclass
class Report:
    records: int
    """Records in the log (read back with the client)."""
    audit_rows: int
    audit_once: bool
    """The audit copy holds every record of the log once, with its value, and nothing else."""
    acknowledged_in_audit: int
    acknowledged: int
    dead_letters: int
    malformed_in_log: int
    windows: int
    """Windows (minute x category) the watermark closed."""
    revenue_equal: bool
    revenue: Decimal
    orders: int
    acknowledged_totals_equal: bool
    """The closed windows' totals over the acknowledged orders alone are the same."""
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.audit_once
            and self.acknowledged_in_audit == self.acknowledged
            and self.dead_letters == self.malformed_in_log
            and self.revenue_equal
        )


class PipelineAct:
    def __init__(
        self, base: Path, bootstrap: list[str], topic: str, credentials: Credentials
    ) -> None:
        from epochlog_spark.config import JobConfig

        tls = credentials.tls
        self.base = base
        self.config: JobConfig = JobConfig(
            bootstrap=",".join(bootstrap),
            topic=topic,
            output=str(base / "out"),
            checkpoint=str(base / "checkpoint"),
            trigger_interval="1 second",
            window=f"{WINDOW_MS // 1000} seconds",
            watermark=f"{WATERMARK_MS // 1000} seconds",
            ca=tls.ca if tls else None,
            cert=tls.cert if tls else None,
            key=tls.key if tls else None,
            token=credentials.token,
        )
        self.spark: SparkSession | None = None
        self.job: Job | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        from epochlog_spark.job import Job
        from epochlog_spark.session import SHORT_RUN_JAVA_OPTIONS, local_session

        # The demo prints its own story: Spark's and the source's logs only when they
        # report something wrong.
        self.spark = local_session(
            app_name="epochlog-demo",
            log_level="ERROR",
            worker_env={"EPOCHLOG_LOG_LEVEL": "warning"},
            java_options=SHORT_RUN_JAVA_OPTIONS,
        )
        self.job = job = Job(self.spark, self.config)
        # Each query's first micro-batch (an empty topic) starts its Python workers: once
        # it is done, the job keeps up with the producer from the first record.
        while any(q.lastProgress is None for q in job.queries.values()):
            job.check()
            time.sleep(0.1)

    @property
    def queries(self) -> dict[str, StreamingQuery]:
        return {} if self.job is None else self.job.queries

    def progress(self) -> str:
        """Micro-batches done so far and records they read, per query."""
        parts = []
        for name, query in self.queries.items():
            last = query.lastProgress
            batches = 0 if last is None else last.batchId + 1
            rows = sum(p.numInputRows for p in query.recentProgress)
            parts.append(f"{name} {batches} micro-batches ({rows} records)")
        return ", ".join(parts)

    async def finish(
        self, logs: dict[str, list[tuple[int, str]]], acks: list[WorkloadAck]
    ) -> Report:
        return await asyncio.to_thread(self._finish, logs, acks)

    def _finish(self, logs: dict[str, list[tuple[int, str]]], acks: list[WorkloadAck]) -> Report:
        from epochlog_spark.job import Job

        assert self.spark is not None
        # Stopping interrupts a micro-batch in flight; Spark logs the interruption as an
        # error with a stack trace, which here is expected: the batch runs again later.
        # The killed tasks log it from their own threads after `stop` returns, so the
        # level stays off until the final run is done; that run's failure, if any, is
        # raised by `Job.wait`.
        assert self.job is not None
        self.spark.sparkContext.setLogLevel("OFF")
        try:
            self.job.check()
            self.job.stop()
            Job(self.spark, replace(self.config, available_now=True)).wait()
        finally:
            self.spark.sparkContext.setLogLevel("ERROR")
        return self._report(logs, acks)

    def stop(self) -> None:
        if self.spark is not None:
            if self.job is not None:
                self.job.stop()
            self.spark.stop()
            self.spark = None

    def _report(self, logs: dict[str, list[tuple[int, str]]], acks: list[WorkloadAck]) -> Report:
        from epochlog_spark.job import AUDIT, DEAD_LETTERS, REVENUE
        from epochlog_spark.orders import parse_order, window_totals

        assert self.spark is not None
        topic = self.config.topic
        audit_rows = self._rows(AUDIT, "partition", "offset", "value")
        audit = Counter((f"{topic}-{p}", o) for p, o, _ in audit_rows)
        values = {(f"{topic}-{p}", o): bytes(v).decode() for p, o, v in audit_rows}
        log_records = {(p, o): v for p, records in logs.items() for o, v in records}
        audit_once = all(n == 1 for n in audit.values()) and values == log_records
        acked_in_audit = sum(1 for a in acks if values.get((a.partition, a.offset)) == a.value)

        all_values = list(log_records.values())
        malformed = sum(1 for v in all_values if parse_order(v) is None)
        dead = len(self._rows(DEAD_LETTERS, "offset"))

        times = [o.event_time_ms for o in map(parse_order, all_values) if o is not None]
        closed = (max(times) - WATERMARK_MS) if times else 0

        def closed_totals(vs: list[str]) -> dict[tuple[int, str], tuple[Decimal, int]]:
            return {
                key: (t.revenue, t.orders)
                for key, t in window_totals(vs, WINDOW_MS).items()
                if key[0] + WINDOW_MS <= closed
            }

        expected = closed_totals(all_values)
        got = {
            (int(start.replace(tzinfo=UTC).timestamp() * 1000), category): (revenue, orders)
            for start, category, revenue, orders in self._rows(
                REVENUE, "window_start", "category", "revenue", "orders"
            )
        }
        mismatches = [
            f"window {datetime.fromtimestamp(k[0] / 1000, UTC):%H:%M} {k[1]}: job "
            f"{got.get(k)}, log {expected.get(k)}"
            for k in sorted(set(expected) | set(got))
            if got.get(k) != expected.get(k)
        ]
        acked_totals = closed_totals([a.value for a in acks])
        return Report(
            records=len(log_records),
            audit_rows=len(audit_rows),
            audit_once=audit_once,
            acknowledged_in_audit=acked_in_audit,
            acknowledged=len(acks),
            dead_letters=dead,
            malformed_in_log=malformed,
            windows=len(expected),
            revenue_equal=not mismatches,
            revenue=sum((r for r, _ in expected.values()), Decimal(0)),
            orders=sum(n for _, n in expected.values()),
            acknowledged_totals_equal=acked_totals == expected,
            mismatches=mismatches,
        )

    def _rows(self, table: str, *columns: str) -> list[Any]:
        assert self.spark is not None
        path = Path(self.config.path(table))
        if not path.exists():
            return []
        return [tuple(r) for r in self.spark.read.parquet(str(path)).select(*columns).collect()]
