"""epochlog and Apache Kafka side by side: the same figures, on this machine, in one run.

This module owns the comparison: which figures, with which parameters on each
side, in which order, and the table. Each system is measured in turn, never both
at once, each on clusters of its own started for the step and stopped after it;
the 1-minute load average is recorded before each. Both sides run in plaintext,
three brokers on loopback, replication factor 3, acks=all, minInsyncReplicas 2,
an fsync of every batch on every replica before it counts, no unclean elections.

epochlog is measured by its own benchmarks' code, called with the same
parameters as Kafka: `benchmarks.broker_bench` (the embedded cluster, binary
batches), `benchmarks.failover_bench` and `benchmarks.scale_bench`. Kafka (a
KRaft cluster of three combined broker+controller nodes,
`benchmarks.kafka_cluster`, session timeout and heartbeat interval those of
epochlog's `DevSettings`) by its own ProducerPerformance for the first two
figures and by confluent-kafka for the others (`benchmarks.kafka_workload`):

1. produce throughput on one partition, 1 KiB and 100 B records, records/s and
   MiB/s of values: epochlog with `broker_bench.CONCURRENCY` requests of
   `broker_bench.REQUEST_BYTES` of values in flight for `--seconds`, after a
   warm-up; Kafka's ProducerPerformance with batch.size of the same bytes,
   linger.ms=5, after a calibrating run that sizes its run to about `--seconds`
   and `WARM_UP_S` of warm-up records;
2. produce latency p50/p99 of 1 KiB records at a tenth of each system's own
   peak 1 KiB throughput, for twice `--seconds`: epochlog per request (about
   100 requests a second), Kafka per record (ProducerPerformance, whole
   milliseconds);
3. failover of one partition: a steady acks=all idempotent producer
   (`--rate`), its leader SIGKILLed after `--steady-seconds`, the median over
   `--failover-runs` of the time from the kill to the first write acknowledged
   in a newer leader epoch (and until the new leader is visible: in epochlog's
   Partition status, in the metadata a Kafka broker answers);
4. failover of a third of `--partitions` partitions, each broker the preferred
   leader of a third: SIGKILL of one broker, the time until every partition it
   led has a new leader, and until one acks=all write sent to each right after
   the kill is acknowledged (Kafka's killed node is never its active
   controller: epochlog's controller, the operator, is not killed either);
5. idle CPU at `--partitions` partitions, % of one core per broker process (and
   of the whole cluster), over `--idle-seconds` without traffic from
   /proc/PID/stat, once every ISR is full, no leader or ISR changed for two
   seconds and `--settle-seconds` more passed.

Every acknowledged record of steps 3 and 4 is read back on both sides. The first
run fetches Kafka's jars with Maven into `~/.cache/epochlog-kafka/`. Progress
goes to stderr; the table (`epochlog`, `Kafka`, `epochlog / Kafka`) and the
settings of each side to stdout; the figures go to `build/bench/side_by_side.json`
(`benchmarks.results`, Kafka's figures the baseline; `--json PATH` elsewhere). The exit
status is 1 only when a cluster could not start or an acknowledged record is
missing.

Run with `make bench` or `.venv/bin/python -m benchmarks.side_by_side [--seconds S]
[--partitions N] [--skip-kafka | --skip-epochlog] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import confluent_kafka

from benchmarks import broker_bench, failover_bench, kafka_workload, scale_bench
from benchmarks import results as schema
from benchmarks.kafka_cluster import (
    KAFKA_VERSION,
    NODES,
    KafkaCluster,
    KafkaDidNotStart,
    KafkaSettings,
    java_version,
    kafka_lib,
    producer_performance,
)
from benchmarks.scale_report import say
from epochlog.logs import configure
from epochlog_tools.devcluster.local import DevClusterError, DevSettings
from epochlog_tools.devcluster.local_workload import Verdict

MiB = 1 << 20
SIZES = (1024, 100)
STEPS = ("produce", "failover", "partitions")
CALIBRATE_BYTES = 32 * MiB
"""Values Kafka's calibrating ProducerPerformance run sends for each record size."""
WARM_UP_S = 2.0
"""Seconds of records ProducerPerformance sends before it counts (`--warmup-records`): the
JVM compiles its hot paths meanwhile. The calibrating run before warms the brokers."""
LINGER_MS = 5
KAFKA_PERF_PROPS = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": str(LINGER_MS),
    "batch.size": str(broker_bench.REQUEST_BYTES),
    "compression.type": "none",
}
QUIET_S = 2 * DevSettings.status_refresh_interval_ms / 1000
"""What `scale_bench.settle` waits without a change of leader, epoch or ISR: Kafka waits
as long before its idle window."""
SYSTEMS = ("epochlog", "kafka")


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str
    digits: int


ROWS = (
    Row("produce_1k_records_s", "produce 1 KiB, records/s", "records/s", 0),
    Row("produce_1k_mib_s", "produce 1 KiB, MiB/s of values", "MiB/s", 1),
    Row("produce_100_records_s", "produce 100 B, records/s", "records/s", 0),
    Row("produce_100_mib_s", "produce 100 B, MiB/s of values", "MiB/s", 1),
    Row("latency_p50_ms", "latency p50 at 1/10 of own peak 1 KiB, ms", "ms", 2),
    Row("latency_p99_ms", "latency p99 at 1/10 of own peak 1 KiB, ms", "ms", 2),
    Row("failover_first_ack_s", "failover 1 partition: kill -> first ack, median s", "s", 2),
    Row("failover_elected_s", "  kill -> new leader visible, median s", "s", 2),
    Row("many_leaders_s", "failover of a third: kill -> all new leaders, s", "s", 2),
    Row("many_first_writes_s", "  kill -> a write acknowledged on each, s", "s", 2),
    Row("load_p50_ms", "load over many partitions: p50 from when due, ms", "ms", 1),
    Row("load_p99_ms", "  p99 from when due, ms", "ms", 1),
    Row("load_cpu_cluster_pct", "  CPU of the whole cluster, % of a core", "%", 0),
    Row("idle_cpu_broker_pct", "idle CPU per broker, % of a core (mean)", "%", 1),
    Row("idle_cpu_cluster_pct", "  idle CPU of the whole cluster, % of a core", "%", 1),
    Row("many_led_s", "partitions created -> every one led, s", "s", 1),
)


@dataclass
class Results:
    figures: dict[str, dict[str, float | None]] = field(
        default_factory=lambda: {s: {} for s in SYSTEMS}
    )
    settings: dict[str, list[str]] = field(default_factory=lambda: {s: [] for s in SYSTEMS})
    loads: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, dict[str, int]] = field(
        default_factory=lambda: {s: {"acknowledged": 0, "missing": 0} for s in SYSTEMS}
    )
    status: int = 0

    def load(self, step: str, system: str) -> None:
        load1 = os.getloadavg()[0]
        self.loads.append({"step": step, "system": system, "load1": round(load1, 2)})
        say(f"=== {step}: {system} (load average {load1:.2f} on {os.cpu_count()} cores)")

    def checked(self, system: str, what: str, verdict: Verdict) -> None:
        self.data[system]["acknowledged"] += verdict.acknowledged
        self.data[system]["missing"] += len(verdict.missing)
        if verdict.missing:
            self.status = 1
            self.notes.append(
                f"{system} {what}: {len(verdict.missing)} of {verdict.acknowledged} "
                "acknowledged records MISSING"
            )
        if verdict.duplicated:
            self.notes.append(f"{system} {what}: {len(verdict.duplicated)} records read twice")


def guarded(results: Results, system: str, step: str, body: Callable[[], None]) -> None:
    """Run one system's step; a cluster that cannot start sets the exit status, any other
    failure is noted and the run goes on with the next step."""
    results.load(step, system)
    try:
        body()
    except (DevClusterError, scale_bench.ClusterDidNotStart, KafkaDidNotStart) as exc:
        results.status = 1
        results.notes.append(f"{system} {step}: the cluster did not start: {exc}")
        say(f"{system} {step}: the cluster did not start: {exc}")
    except Exception as exc:  # noted in the report: the next step still runs
        results.notes.append(f"{system} {step}: stopped early: {type(exc).__name__}: {exc}")
        say(f"{system} {step}: stopped early: {type(exc).__name__}: {exc}")


def indent(line: str) -> None:
    say("  " + line.strip("\n"))


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# -- epochlog -------------------------------------------------------------------------------


def epochlog_produce(args: argparse.Namespace, work: Path, results: Results) -> None:
    async def body() -> None:
        rng = random.Random(7)
        async with broker_bench.bench_cluster(work / "epochlog-produce", tls=False) as (
            http,
            url,
            lat_url,
        ):
            runs = await broker_bench.produce_runs(
                http,
                url,
                rng,
                SIZES,
                ("binary",),
                args.seconds,
                broker_bench.CONCURRENCY,
                say=indent,
            )
            figures = results.figures["epochlog"]
            for size, t in zip(SIZES, runs, strict=True):
                tag = "1k" if size == 1024 else "100"
                figures[f"produce_{tag}_records_s"] = t.records_per_s
                figures[f"produce_{tag}_mib_s"] = t.mib_per_s
            peak = runs[0]
            latencies, per, req_rate = await broker_bench.latency_at(
                http, lat_url, peak, 2 * args.seconds, rng
            )
            figures["latency_p50_ms"] = 1000 * broker_bench.percentile(latencies, 50)
            figures["latency_p99_ms"] = 1000 * broker_bench.percentile(latencies, 99)
            results.settings["epochlog"].append(
                f"latency run: {peak.records_per_s / 10:.0f} records/s of 1 KiB for "
                f"{2 * args.seconds:g} s, {per} records per request, {req_rate:.0f} requests/s, "
                "latency per request (send to acks=all answer)"
            )

    asyncio.run(body())


def epochlog_failover(args: argparse.Namespace, results: Results) -> None:
    result = asyncio.run(
        failover_bench.measure(
            args.failover_runs, args.rate, args.steady_seconds, tls=False, say=indent
        )
    )
    figures = results.figures["epochlog"]
    figures["failover_first_ack_s"] = _median(result.failovers)
    figures["failover_elected_s"] = _median(result.elections)
    results.checked("epochlog", "failover", result.verdict)
    if result.not_acknowledged:
        results.notes.append(
            f"epochlog failover: {result.not_acknowledged} records not acknowledged"
        )


def epochlog_partitions(args: argparse.Namespace, work: Path, results: Results) -> None:
    opts = scale_bench.options(
        [
            "--partitions",
            str(args.partitions),
            "--load-seconds",
            str(args.load_seconds),
            "--rate",
            str(args.load_rate),
            "--idle-seconds",
            str(args.idle_seconds),
            "--settle-seconds",
            str(args.settle_seconds),
            "--plaintext",
        ]
    )
    directory = work / "epochlog-partitions"
    directory.mkdir()
    row = asyncio.run(scale_bench.measure(opts, args.partitions, directory))
    figures = results.figures["epochlog"]
    figures["many_led_s"] = row.led_s
    figures["many_leaders_s"] = row.leaders_s
    figures["many_first_writes_s"] = row.first_write_s
    figures["load_p50_ms"] = row.p50_ms
    figures["load_p99_ms"] = row.p99_ms
    figures["load_cpu_cluster_pct"] = row.load_cluster_cpu
    results.notes.extend(
        f"epochlog {args.partitions} partitions: {n}" for n in row.notes if n.startswith("load")
    )
    brokers = [row.cpu_pct[f"broker-{b}"] for b in NODES if f"broker-{b}" in row.cpu_pct]
    if brokers:
        figures["idle_cpu_broker_pct"] = statistics.mean(brokers)
        figures["idle_cpu_cluster_pct"] = sum(row.cpu_pct.values())
        results.notes.append(
            "epochlog idle CPU % of a core: "
            + ", ".join(f"{name} {pct:.1f}" for name, pct in sorted(row.cpu_pct.items()))
            + "; RSS MiB per broker "
            + "/".join("-" if v is None else f"{v:.0f}" for v in row.rss_mib.values())
        )
    if row.victim is not None:
        results.notes.append(
            f"epochlog {args.partitions} partitions: killed broker {row.victim}, leader of "
            f"{row.victim_led}"
        )
    if row.lost is not None and row.acknowledged is not None:
        results.data["epochlog"]["acknowledged"] += row.acknowledged
        results.data["epochlog"]["missing"] += row.lost
        if row.lost:
            results.status = 1
            results.notes.append(
                f"epochlog {args.partitions} partitions: {row.lost} of {row.acknowledged} "
                "acknowledged records MISSING"
            )
    if row.doubled:
        results.notes.append(f"epochlog partitions: {row.doubled} records read twice")
    if row.error:
        results.notes.append(f"epochlog {args.partitions} partitions: stopped early: {row.error}")


# -- Kafka ----------------------------------------------------------------------------------


def kafka_settings(heap: str, kafka_version: str) -> KafkaSettings:
    dev = DevSettings()
    return KafkaSettings(
        session_timeout_ms=dev.session_timeout_ms,
        heartbeat_interval_ms=dev.heartbeat_interval_ms,
        version=kafka_version,
        heap=heap,
    )


class KafkaStep:
    """A fresh Kafka cluster for one step, stopped (and its directory left for `--keep`)
    at the end."""

    def __init__(self, args: argparse.Namespace, lib: Path, directory: Path) -> None:
        self.cluster = KafkaCluster(
            directory, lib, kafka_settings(args.kafka_heap, args.kafka_version)
        )

    def __enter__(self) -> KafkaCluster:
        say(f"starting Kafka in {self.cluster.root}")
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.stop()
            raise
        return self.cluster

    def __exit__(self, *exc: object) -> None:
        say("stopping Kafka")
        self.cluster.stop()


def kafka_produce(args: argparse.Namespace, lib: Path, work: Path, results: Results) -> None:
    with KafkaStep(args, lib, work / "kafka-produce") as cluster:
        admin = cluster.admin()
        for topic in ("bench", "latency"):
            kafka_workload.create_topic(admin, topic, [list(NODES)], min_insync=2)
            kafka_workload.wait_full_isr(admin, topic, timeout_s=120)
        del admin
        figures = results.figures["kafka"]
        peak = 0.0
        for size in SIZES:
            say(f"Kafka: ProducerPerformance, {size} B records: calibrating, then measuring")
            calibrate = producer_performance(
                cluster, "bench", size, CALIBRATE_BYTES // size, -1, KAFKA_PERF_PROPS
            )
            rate = calibrate.records_per_s
            warm = max(1, int(rate * WARM_UP_S))
            run = producer_performance(
                cluster,
                "bench",
                size,
                warm + max(1000, int(rate * args.seconds)),
                -1,
                KAFKA_PERF_PROPS,
                warmup_records=warm,
            )
            indent(f"produce {size:>4} B {run.records_per_s:10.0f} records/s  ({run.line})")
            tag = "1k" if size == 1024 else "100"
            figures[f"produce_{tag}_records_s"] = run.records_per_s
            figures[f"produce_{tag}_mib_s"] = run.records_per_s * size / MiB
            if size == 1024:
                peak = run.records_per_s
        rate = peak / 10
        say(f"Kafka: ProducerPerformance at {rate:.0f} records/s of 1 KiB")
        warm = max(1, int(rate * WARM_UP_S))
        latency = producer_performance(
            cluster,
            "latency",
            1024,
            warm + max(100, int(rate * 2 * args.seconds)),
            rate,
            KAFKA_PERF_PROPS,
            warmup_records=warm,
        )
        indent(f"latency at {rate:.0f} records/s: {latency.line}")
        figures["latency_p50_ms"] = latency.p50_ms
        figures["latency_p99_ms"] = latency.p99_ms
        results.settings["kafka"].append(
            f"latency run: ProducerPerformance --throughput {rate:.0f} (records/s of 1 KiB) for "
            f"about {2 * args.seconds:g} s after {warm} warm-up records; latency per record "
            "(send() to its callback), whole milliseconds"
        )


def kafka_failover(args: argparse.Namespace, lib: Path, work: Path, results: Results) -> None:
    with KafkaStep(args, lib, work / "kafka-failover") as cluster:
        say(f"Kafka: {args.failover_runs} failovers of one partition")
        indent(f"{'run':>3}  {'killed':>6}  {'':>12}  {'elected':>8}")
        result = kafka_workload.failovers(
            cluster, args.failover_runs, args.rate, args.steady_seconds, indent
        )
    figures = results.figures["kafka"]
    figures["failover_first_ack_s"] = _median(result.failovers)
    figures["failover_elected_s"] = _median(result.elections)
    indent("first acks after the kill, s: " + ", ".join(f"{f:.2f}" for f in result.failovers))
    results.checked("kafka", "failover", result.verdict)
    results.notes.extend(f"Kafka failover: {n}" for n in result.notes)
    if len(result.failovers) < len(result.runs):
        results.notes.append(
            f"Kafka failover: {len(result.runs) - len(result.failovers)} runs without an "
            "acknowledgement in a newer leader epoch"
        )
    if result.failed:
        results.notes.append(f"Kafka failover: {result.failed} records not acknowledged")


def kafka_partitions(args: argparse.Namespace, lib: Path, work: Path, results: Results) -> None:
    with KafkaStep(args, lib, work / "kafka-partitions") as cluster:
        row = kafka_workload.many_partitions(
            cluster,
            args.partitions,
            args.idle_seconds,
            args.settle_seconds,
            quiet_s=QUIET_S,
            load_rate=args.load_rate,
            load_s=args.load_seconds,
        )
    figures = results.figures["kafka"]
    figures["load_p50_ms"] = row.p50_ms
    figures["load_p99_ms"] = row.p99_ms
    figures["load_cpu_cluster_pct"] = sum(row.load_cpu_pct.values()) if row.load_cpu_pct else None
    figures["many_led_s"] = row.led_s
    figures["many_leaders_s"] = row.leaders_s
    figures["many_first_writes_s"] = row.first_write_s
    if row.cpu_pct:
        figures["idle_cpu_broker_pct"] = statistics.mean(row.cpu_pct.values())
        figures["idle_cpu_cluster_pct"] = sum(row.cpu_pct.values())
        results.notes.append(
            "Kafka idle CPU % of a core: "
            + ", ".join(f"node-{n} {pct:.1f}" for n, pct in sorted(row.cpu_pct.items()))
            + "; RSS MiB per node "
            + "/".join("-" if v is None else f"{v:.0f}" for v in row.rss_mib.values())
        )
    if row.victim is not None:
        results.notes.append(
            f"Kafka {args.partitions} partitions: killed node {row.victim}, leader of "
            f"{row.victim_led}"
            + (" (and the active controller)" if row.was_controller else ", not the controller")
        )
    results.notes.extend(f"Kafka {args.partitions} partitions: {n}" for n in row.notes)
    if row.verdict is not None:
        results.checked("kafka", f"{args.partitions} partitions", row.verdict)


# -- the report -----------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(results: Results) -> list[str]:
    width = max(len(r.label) for r in ROWS)
    lines = [
        f"{'figure':<{width}}  {'epochlog':>12}  {'Kafka':>12}  {'epochlog / Kafka':>16}",
        "-" * (width + 48),
    ]
    for r in ROWS:
        a = results.figures["epochlog"].get(r.key)
        b = results.figures["kafka"].get(r.key)
        lines.append(
            f"{r.label:<{width}}  {cell(a, r.digits):>12}  {cell(b, r.digits):>12}  "
            f"{cell(ratio(a, b), 2):>16}"
        )
    return lines


def describe_settings(args: argparse.Namespace, results: Results) -> None:
    dev = DevSettings()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    results.settings["epochlog"][:0] = [
        f"epochlog {version('epochlog')} ({commit or 'no git commit'}), Python "
        f"{platform.python_version()}; the embedded cluster: 3 broker processes, the operator "
        "and the Kubernetes API emulator, plaintext",
        f"session timeout {dev.session_timeout_ms} ms, heartbeat {dev.heartbeat_interval_ms} "
        f"ms, replicaLagTimeMaxMs {dev.replica_lag_time_max_ms} (DevSettings defaults)",
        "fsync: a replica counts and acknowledges only what it has fsynced (always on; group "
        "commits)",
        f"produce: binary batches of {broker_bench.REQUEST_BYTES // 1024} KiB of values, "
        f"{broker_bench.CONCURRENCY} requests in flight, {args.seconds:g} s per size after a "
        "0.5 s warm-up",
        f"failover: epochlog's client, idempotent, acks=all, linger 2 ms, retry backoff "
        f"{failover_bench.RETRY_BACKOFF_MS[0]}..{failover_bench.RETRY_BACKOFF_MS[1]} ms; "
        "many partitions: Partitions applied with kubectl, the warm-up record 8 partitions at "
        "a time; the load from `benchmarks.scale_load.TimedLoad` (epochlog's client, "
        "idempotent, acks=all, linger 0)",
    ]
    ks = kafka_settings(args.kafka_heap, args.kafka_version)
    results.settings["kafka"][:0] = [
        ks.describe(),
        f"{java_version()}, G1 (kafka-run-class.sh's JVM options); replica.lag.time.max.ms "
        "30000 (default)",
        "produce: ProducerPerformance "
        + " ".join(f"{k}={v}" for k, v in KAFKA_PERF_PROPS.items())
        + f", max.in.flight.requests.per.connection=5 (default); {args.seconds:g} s per "
        f"size (sized by a calibrating run of {CALIBRATE_BYTES // MiB} MiB) after "
        f"{WARM_UP_S:g} s of warm-up records",
        f"failover: confluent-kafka {confluent_kafka.version()} (librdkafka "
        f"{confluent_kafka.libversion()[0]}), idempotent, acks=all, linger 2 ms (0 for the "
        f"many-partition writes), retry.backoff.ms {kafka_workload.RETRY_BACKOFF_MS[0]}, "
        f"retry.backoff.max.ms {kafka_workload.RETRY_BACKOFF_MS[1]}; the node killed is "
        "not the active controller (leadership moved back to it by a preferred election "
        "before each single-partition run); the load from `kafka_workload.timed_load` on the "
        "same schedule, linger 0",
    ]


LEGEND = (
    "latency: epochlog per produce request (send to its acks=all answer), Kafka per record "
    "(send() to its callback, lingering up to linger.ms included)",
    "new leader visible: epochlog in the Partition's status (the API's watch), Kafka in the "
    "metadata a live broker answers (asked every 0.1 s)",
    "whole cluster: epochlog's brokers, operator and API emulator; Kafka's three nodes, each "
    "broker and controller (the load generator on neither side)",
)


def report(args: argparse.Namespace, results: Results) -> None:
    print()
    for line in table(results):
        print(line)
    for line in LEGEND:
        print(f"  {line}")
    print()
    print(
        f"one partition, RF 3, acks=all, minInsyncReplicas 2, fsync per batch; failovers: "
        f"{args.failover_runs} runs at {args.rate:g} records/s after {args.steady_seconds:g} s "
        f"of steady writes; many partitions: {args.partitions}, idle window "
        f"{args.idle_seconds:g} s after {args.settle_seconds:g} s settled, then a load of "
        f"{args.load_rate:g} acks=all records/s round robin over them for "
        f"{args.load_seconds:g} s (each record sent when due, its latency from then)"
    )
    for system, title in (("epochlog", "epochlog"), ("kafka", "Kafka")):
        print(f"{title}:")
        for line in results.settings[system]:
            print(f"  {line}")
    print(
        "machine: "
        + f"{os.cpu_count()} cores; load average (1 min) before each: "
        + ", ".join(f"{x['step']} {x['system']} {x['load1']:.2f}" for x in results.loads)
    )
    for system in SYSTEMS:
        d = results.data[system]
        print(
            f"{system}: {d['acknowledged']} acknowledged records read back, {d['missing']} missing"
        )
    if results.notes:
        print("notes:")
        for note in results.notes:
            print(f"  {note}")


def as_result(
    stamp: schema.Stamp, args: argparse.Namespace, results: Results
) -> schema.Result[schema.Row]:
    """The JSON of one run (`benchmarks.results`): each figure of Kafka is the baseline of
    epochlog's, the ratio epochlog / Kafka."""
    ours, kafka = results.figures["epochlog"], results.figures["kafka"]
    return schema.Result[schema.Row](
        benchmark="side_by_side",
        date=stamp.date,
        machine=stamp.machine,
        parameters=schema.parameters(
            args,
            leave_out=("json", "dir"),
            settings=results.settings,
            load_average=results.loads,
            records=results.data,
        ),
        baselines={
            r.key: schema.Baseline(
                label=f"Kafka: {r.label.strip()}", unit=r.unit, value=value, runs=[value]
            )
            for r in ROWS
            if (value := kafka.get(r.key)) is not None
        },
        figures={
            r.key: schema.Figure(
                label=f"epochlog: {r.label.strip()}", unit=r.unit, value=ours.get(r.key)
            )
            for r in ROWS
        },
        ratios={
            r.key: schema.Ratio(
                label=f"{r.label.strip()}: epochlog / Kafka",
                value=ratio(ours.get(r.key), kafka.get(r.key)),
                baseline=r.key if kafka.get(r.key) is not None else None,
            )
            for r in ROWS
        },
        goals=[
            schema.Goal.judge(
                f"{system}: acknowledged records missing",
                results.data[system]["missing"],
                at_most=0,
            )
            for system in SYSTEMS
        ],
        rows=[
            {
                "key": r.key,
                "label": r.label.strip(),
                "unit": r.unit,
                "epochlog": ours.get(r.key),
                "kafka": kafka.get(r.key),
                "ratio": ratio(ours.get(r.key), kafka.get(r.key)),
            }
            for r in ROWS
        ],
        notes=results.notes,
        status=results.status,
    )


# -- the command ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    stamp = schema.Stamp.now()
    results = Results()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="side-by-side-"))
    work.mkdir(parents=True, exist_ok=True)
    lib: Path | None = None
    if not args.skip_kafka:
        try:
            lib = kafka_lib(args.kafka_version)
        except KafkaDidNotStart as exc:
            results.status = 1
            results.notes.append(f"Kafka: {exc}")
            say(f"Kafka cannot run: {exc}")
    describe_settings(args, results)
    steps: dict[str, tuple[Callable[[], None], Callable[[Path], None]]] = {
        "produce": (
            lambda: epochlog_produce(args, work, results),
            lambda lib: kafka_produce(args, lib, work, results),
        ),
        "failover": (
            lambda: epochlog_failover(args, results),
            lambda lib: kafka_failover(args, lib, work, results),
        ),
        "partitions": (
            lambda: epochlog_partitions(args, work, results),
            lambda lib: kafka_partitions(args, lib, work, results),
        ),
    }
    try:
        for step in args.steps:
            on_epochlog, on_kafka = steps[step]
            if not args.skip_epochlog:
                guarded(results, "epochlog", step, on_epochlog)
            if lib is not None:
                guarded(results, "kafka", step, functools.partial(on_kafka, lib))
    finally:
        if args.keep:
            say(f"the clusters' directories are in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(args, results)
    schema.write(as_result(stamp, args, results), Path(args.json) if args.json else None)
    return results.status


def _steps(text: str) -> list[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    if not steps or any(s not in STEPS for s in steps):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(STEPS)}")
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.side_by_side")
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="each throughput run (latency: twice)"
    )
    parser.add_argument("--partitions", type=int, default=1000, help="for failover and idle CPU")
    parser.add_argument("--failover-runs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200.0, help="records/s of the failover runs")
    parser.add_argument("--steady-seconds", type=float, default=2.0, help="before each kill")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument(
        "--load-rate",
        type=float,
        default=1000.0,
        help="records/s of the load over the many partitions (issue goal: 1,000)",
    )
    parser.add_argument(
        "--load-seconds", type=float, default=30.0, help="of that load (0: no load)"
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=60.0,
        help="more seconds after the partitions settled, before the idle window",
    )
    parser.add_argument(
        "--steps",
        type=_steps,
        default=list(STEPS),
        help="which of produce,failover,partitions (default: all)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--skip-epochlog", action="store_true")
    which.add_argument("--skip-kafka", action="store_true")
    parser.add_argument("--kafka-version", default=KAFKA_VERSION)
    parser.add_argument("--kafka-heap", default="1g", help="-Xmx and -Xms of each Kafka node")
    parser.add_argument("--dir", help="where the clusters keep their data (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    parser.add_argument(
        "--json", help="write the figures to this file (default: build/bench/side_by_side.json)"
    )
    args = parser.parse_args(argv)
    configure("warning")
    # Info logs would be measured as the processes' idle CPU (as in scale_bench).
    os.environ["EPOCHLOG_LOG_LEVEL"] = "warning"
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
