"""The order pipeline as a user runs it (`epochlog pipeline run`): revenue per minute and
category equal to the orders in the log, an audit copy of every record, and malformed
values in the dead letters instead of a failed job."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from epochlog_spark.job import AUDIT, BAD_FIELDS, DEAD_LETTERS, NOT_JSON, REVENUE
from epochlog_spark.orders import order_event, parse_order, window_totals
from epochlog_tools.devcluster.local import LocalCluster
from tests.spark.conftest import Background
from tests.spark.helpers import bootstrap, create_topic, produce, rows

TOPIC = "job-orders"
START_MS = 1_764_057_600_000  # 2025-11-25T08:00:00Z
WATERMARK_MS = 60_000
MALFORMED = {
    "not json at all": NOT_JSON,
    "[1, 2, 3]": NOT_JSON,
    '{"order_id": "m-1", "category": "books"}': BAD_FIELDS,
    '{"order_id": "m-2", "category": "books", "amount": "1.234", '
    '"event_time": "2025-11-25T08:01:00Z"}': BAD_FIELDS,
    '{"order_id": "m-3", "category": "books", "amount": "5", "event_time": "yesterday"}': (
        BAD_FIELDS
    ),
}


@pytest.mark.slow
def test_the_job_computes_revenue_keeps_an_audit_copy_and_routes_malformed_values(
    spark: SparkSession, background: Background, cluster: LocalCluster, workdir: Path
) -> None:
    create_topic(background, cluster, TOPIC, 2)
    values = [order_event(n, start_ms=START_MS, step_ms=1000) for n in range(300)]
    values[100:100] = list(MALFORMED)
    # One late order moves the watermark past every window above: they close.
    values.append(order_event(10_000, start_ms=START_MS + 6 * 60_000, step_ms=0))
    records = [(f"{TOPIC}-{n % 2}", v) for n, v in enumerate(values)]
    acks = produce(background, cluster, records)
    out, checkpoint = workdir / "out", workdir / "checkpoint"

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochlog_tools.cli",
            "pipeline",
            "run",
            "--bootstrap",
            bootstrap(cluster),
            "--topic",
            TOPIC,
            "--output",
            str(out),
            "--checkpoint",
            str(checkpoint),
            "--available-now",
            *cluster.security.client_flags(),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]

    where = {(int(a.partition[-1]), a.offset): v for a, (_, v) in zip(acks, records, strict=True)}
    audit = rows(spark, out / AUDIT, "partition", "offset", "value")
    assert sorted((p, o) for p, o, _ in audit) == sorted(where)
    assert all(bytes(v).decode() == where[(p, o)] for p, o, v in audit)

    dead = rows(spark, out / DEAD_LETTERS, "partition", "offset", "value", "error")
    assert sorted((bytes(v).decode(), e) for _, _, v, e in dead) == sorted(MALFORMED.items())
    assert all(where[(p, o)] == bytes(v).decode() for p, o, v, _ in dead)

    latest = max(o.event_time_ms for o in map(parse_order, values) if o is not None)
    closed = latest - WATERMARK_MS
    expected = {
        (datetime.fromtimestamp(start / 1000, UTC), category, t.revenue, t.orders)
        for (start, category), t in window_totals(values).items()
        if start + 60_000 <= closed
    }
    got = {
        (start.replace(tzinfo=UTC), category, revenue, orders)
        for start, category, revenue, orders in rows(
            spark, out / REVENUE, "window_start", "category", "revenue", "orders"
        )
    }
    assert len(expected) == 25  # five categories, five closed minutes
    assert got == expected
