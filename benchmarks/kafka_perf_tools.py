"""Apache Kafka's own performance tools against epochlog's Kafka listener, next to
epochlog's own client and the raw disk, in one run on one disk.

On the embedded cluster (`epochlog_tools.devcluster.local`: three broker processes, the
operator and the Kubernetes API emulator on loopback; every Partition on all three
brokers, minInsyncReplicas 2, acks=all, every replica fsyncs what it counts), for
1 KiB and 100 B records, the same number of records of each (`--records-1k`,
`--records-100`) is written and read back by:

1. Kafka's `ProducerPerformance` (kafka-producer-perf-test, Apache Kafka 4.4 from
   Maven Central, the jars `benchmarks.kafka_cluster.kafka_lib` caches, run as
   `java -cp '<jars>/*' <class>` with its script's heap and JVM options) through
   the Kafka listener to the topic `tools-<size>` (one Partition): records/s, MiB/s
   of values and its own latency figures (avg, p50, p99: per record, from `send()`
   to its callback, whole milliseconds), as it prints them for the records after
   its warm-up (`--warmup-records`, a tenth of them: the JVM compiles meanwhile);
2. Kafka's `ConsumerPerformance` (kafka-consumer-perf-test) reading that topic from
   its start in a consumer group of its own: records/s and MiB/s of its fetches
   (`fetch.nMsg.sec`, `fetch.MB.sec`: from the group's first assignment on; joining
   a new group takes about 3 s, `group.initial.rebalance.delay.ms`, shown apart);
3. epochlog's own client (`epochlog.client.Producer`, binary batches over the HTTP
   API) writing the same records to `own-<size>`, timed as ProducerPerformance times
   itself (from the send of the first record after the same warm-up to the last
   acknowledgement; latency per record from `send()` to its acknowledgement);
   then one reader (`broker_bench.consume`, binary, as `broker_bench` reads)
   reading it back from offset 0 to the high watermark;
4. what the brokers take when the client costs next to nothing: prepared binary
   batches of 256 KiB, 16 requests in flight, for `--batch-seconds` to
   `batches-<size>` (`broker_bench.produce_throughput`, as `broker_bench` measures);
5. raw `write` + `fdatasync` of 1 MiB blocks on the same disk
   (`log_bench.raw_write_fdatasync`, the other benchmarks' baseline), before each
   cluster and at the end; their median divided by 3 (every byte is synced on
   three replicas).

Both producers are told the same: acks=all, idempotent, linger 5 ms, batches of
`broker_bench.REQUEST_BYTES` (256 KiB) of values, no compression. Kafka's Java
client keeps up to 5 requests in flight on its connection, which the listener
answers one at a time, as a Kafka broker does; epochlog's client has one batch in
flight per Partition.

All of it runs twice (`--modes`): on a cluster with TLS (the default; the tools
present the admin user's client certificate as a PEM keystore and trust the
cluster CA as a PEM truststore, as `tests/e2e/test_kafka_java.py` configures
them) and on a fresh cluster in plaintext.

How to read it: the ratios. `ProducerPerformance / epochlog's client` is what
Kafka's Java client gets through the listener next to epochlog's own client on the
same cluster at the same moment; `/ HTTP batches` how much of what the brokers take
it gets; `/ (raw / 3)` how close each comes to the disk. At full speed both
producers keep their buffers full, so their latencies are mostly time queued in the
client. Everything shares this machine's cores (the brokers, the JVM or the client,
the operator, and whatever else runs here), so absolute figures move from run to
run; the ratios within one run move less. The table goes to stdout (progress to
stderr); the figures are written to `build/bench/kafka_perf_tools.json`
(`benchmarks.results`; `--json PATH` writes them elsewhere).

Every count is checked: ProducerPerformance must count every record acknowledged
(it counts only those acknowledged without an error), ConsumerPerformance must read
exactly as many, both topics' high watermarks must equal the count (a duplicate
would raise it), and so must what epochlog's reader reads. Any difference is
printed as LOST and the exit status is 1.

Run with `make bench` or `.venv/bin/python -m benchmarks.kafka_perf_tools
[--records-1k N] [--records-100 N] [--modes tls,plaintext] [--batch-seconds S]
[--dir DIR] [--keep] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import functools
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import broker_bench, results
from benchmarks.kafka_cluster import (
    CONSUMER_PERFORMANCE,
    KAFKA_VERSION,
    PRODUCER_PERFORMANCE,
    KafkaError,
    java_version,
    kafka_lib,
    producer_performance_args,
    run_tool,
    summaries,
)
from benchmarks.log_bench import raw_write_fdatasync
from benchmarks.scale_report import say
from epochlog.client import LATEST, Client, Producer
from epochlog.logs import configure
from epochlog.resources import partition_name
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.partitions import partition_manifest

MiB = 1 << 20
SIZES = (1024, 100)
MODES = ("tls", "plaintext")
LINGER_MS = 5
PRODUCER_PROPS = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": str(LINGER_MS),
    "batch.size": str(broker_bench.REQUEST_BYTES),
    "compression.type": "none",
}
"""ProducerPerformance's producer; epochlog's client is told the same (`own_produce`)."""
WARM_UP_FRACTION = 10
"""A tenth of each producer's records are its warm-up, counted but not timed."""
CONSUMER_IDLE_MS = 30_000
"""ConsumerPerformance's --timeout: it gives up after this long without a record."""
TOOL_TIMEOUT_S = 600.0
"""A hang detector for one tool run."""


# -- one cluster ----------------------------------------------------------------------------


@dataclass
class Bench:
    """One running cluster and what the runs need of it."""

    cluster: LocalCluster
    http: aiohttp.ClientSession
    client: Client
    bootstrap: str
    """Every broker's Kafka listener, host:port, comma-separated."""
    tool_config: Path
    """The tools' client properties (`--command-config`)."""
    urls: dict[str, str]
    """The record URL of each Partition on its leader."""
    tools_dir: Path


def tool_properties(cluster: LocalCluster, directory: Path) -> dict[str, str]:
    """What Kafka's Java client is told to reach the cluster: over TLS the cluster CA as a
    PEM truststore and the admin user's key and certificate in one PEM file as its
    keystore (no password: the key is not encrypted); in plaintext nothing."""
    pki = cluster.security.pki
    if pki is None:
        return {"security.protocol": "PLAINTEXT"}
    cert, key = pki.user("admin")
    keystore = directory / "admin-keystore.pem"
    keystore.write_bytes(key.read_bytes() + cert.read_bytes())
    return {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.cluster_ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }


def topics(size: int) -> tuple[str, str]:
    """The topics of one record size: ProducerPerformance's and epochlog's client's."""
    return f"tools-{size}", f"own-{size}"


def batches_topic(size: int) -> str:
    """The topic of one record size's HTTP batches (`http_batches`)."""
    return f"batches-{size}"


@contextlib.asynccontextmanager
async def bench_cluster(root: Path, *, tls: bool, sizes: tuple[int, ...]) -> AsyncIterator[Bench]:
    """A fresh embedded cluster in `root` with one Partition per topic of `sizes` on every
    broker and in sync, and one Partition of the consumer groups' offsets; stopped at the
    end."""
    settings = DevSettings(checkpoint_interval_ms=1000, kafka_offsets_partitions=1)
    cluster = LocalCluster(root / "cluster", brokers=3, settings=settings, tls=tls)
    try:
        await cluster.up(example_partitions=False)
        await cluster.offsets_partitions()
        manifests = [
            partition_manifest(
                topic, 0, replica_lag_time_max_ms=10_000, replicas=broker_bench.REPLICAS
            )
            for size in sizes
            for topic in (*topics(size), batches_topic(size))
        ]
        urls = await broker_bench.ready_partitions(cluster, manifests)
        config = root / "client.properties"
        properties = tool_properties(cluster, root)
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        connector = aiohttp.TCPConnector(ssl=cluster.security.client_ssl())
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=60), connector=connector
            ) as http,
            Client(cluster.bootstrap, credentials=cluster.credentials) as client,
        ):
            yield Bench(
                cluster,
                http,
                client,
                ",".join(cluster.kafka_bootstrap),
                config,
                urls,
                root / "tools",
            )
    finally:
        await cluster.down()


# -- the runs -------------------------------------------------------------------------------


@dataclass
class Figures:
    """One record size on one cluster; None where a run did not get that far."""

    mode: str
    size: int
    records: int
    tool_records_s: float | None = None
    tool_mib_s: float | None = None
    tool_avg_ms: float | None = None
    tool_p50_ms: float | None = None
    tool_p99_ms: float | None = None
    tool_line: str = ""
    own_records_s: float | None = None
    own_mib_s: float | None = None
    own_avg_ms: float | None = None
    own_p50_ms: float | None = None
    own_p99_ms: float | None = None
    consumer_records_s: float | None = None
    consumer_mib_s: float | None = None
    consumer_join_ms: float | None = None
    consumer_line: str = ""
    own_read_records_s: float | None = None
    batches_records_s: float | None = None
    batches_mib_s: float | None = None
    lost: list[str] = field(default_factory=list)
    """Each count that differs from `records`, said in words."""


def check_count(figures: Figures, what: str, count: int) -> None:
    if count != figures.records:
        message = f"{figures.mode} {figures.size} B: {what}: {count} records, not {figures.records}"
        figures.lost.append(message)
        say(f"LOST: {message}")


def keep_output(bench: Bench, name: str, done: subprocess.CompletedProcess[str]) -> None:
    """A tool's output in the cluster's directory (kept with `--keep`)."""
    (bench.tools_dir / f"{name}.log").write_text(done.stdout + done.stderr)


def tool_produce(bench: Bench, lib: Path, figures: Figures) -> None:
    """ProducerPerformance writes `figures.records` to the size's tools topic."""
    topic, _ = topics(figures.size)
    warm = figures.records // WARM_UP_FRACTION
    args = producer_performance_args(
        bench.bootstrap,
        topic,
        figures.size,
        figures.records,
        -1,
        PRODUCER_PROPS,
        warmup_records=warm,
        config=bench.tool_config,
    )
    done = run_tool(lib, bench.tools_dir, PRODUCER_PERFORMANCE, args, TOOL_TIMEOUT_S)
    keep_output(bench, f"producer-performance-{topic}", done)
    found = summaries(done.stdout)
    whole = [s for s in found if not s.steady]
    steady = [s for s in found if s.steady]
    if not whole or (warm and not steady):
        raise KafkaError(f"no summary in ProducerPerformance's output: {done.stdout[-2000:]}")
    check_count(figures, "ProducerPerformance acknowledged", whole[-1].records)
    timed = steady[-1] if warm else whole[-1]
    figures.tool_records_s = timed.records_per_s
    figures.tool_mib_s = timed.mib_per_s
    figures.tool_avg_ms = timed.avg_ms
    figures.tool_p50_ms = timed.p50_ms
    figures.tool_p99_ms = timed.p99_ms
    figures.tool_line = timed.line
    failed = [line for line in done.stderr.splitlines() if "Exception" in line]
    if failed:
        say(f"  ProducerPerformance reported errors: {' / '.join(failed[:3])}")


@dataclass(frozen=True)
class ConsumerResult:
    """ConsumerPerformance's one line of figures (MiB as it prints MB)."""

    records: int
    mib: float
    join_ms: float
    fetch_mib_s: float
    fetch_records_s: float
    line: str


def parse_consumer(output: str) -> ConsumerResult:
    """The figures under ConsumerPerformance's header line (`start.time, end.time,
    data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
    fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec`): the first line after it with as many
    fields (a warning that it timed out comes between them)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("start.time, end.time,"):
            continue
        header = [h.strip() for h in line.split(",")]
        for later in lines[i + 1 :]:
            fields = next(csv.reader(io.StringIO(later), skipinitialspace=True), [])
            if len(fields) != len(header):
                continue
            row = dict(zip(header, fields, strict=True))
            return ConsumerResult(
                records=int(row["data.consumed.in.nMsg"]),
                mib=float(row["data.consumed.in.MB"]),
                join_ms=float(row["rebalance.time.ms"]),
                fetch_mib_s=float(row["fetch.MB.sec"]),
                fetch_records_s=float(row["fetch.nMsg.sec"]),
                line=later,
            )
    raise KafkaError(f"no figures in ConsumerPerformance's output: {output[-2000:]}")


def tool_consume(bench: Bench, lib: Path, figures: Figures) -> None:
    """ConsumerPerformance reads the size's tools topic from its start, in a new group,
    until it has read `figures.records` or `CONSUMER_IDLE_MS` passed without a record."""
    topic, _ = topics(figures.size)
    args = [
        *("--bootstrap-server", bench.bootstrap, "--topic", topic),
        *("--num-records", str(figures.records), "--timeout", str(CONSUMER_IDLE_MS)),
        *("--group", f"perf-{topic}", "--command-config", str(bench.tool_config)),
    ]
    done = run_tool(lib, bench.tools_dir, CONSUMER_PERFORMANCE, args, TOOL_TIMEOUT_S)
    keep_output(bench, f"consumer-performance-{topic}", done)
    result = parse_consumer(done.stdout)
    check_count(figures, "ConsumerPerformance read", result.records)
    figures.consumer_records_s = result.fetch_records_s
    figures.consumer_mib_s = result.fetch_mib_s
    figures.consumer_join_ms = result.join_ms
    figures.consumer_line = result.line


async def own_produce(bench: Bench, figures: Figures) -> None:
    """epochlog's client writes `figures.records` to the size's own topic, timed over the
    records after the warm-up as ProducerPerformance times itself."""
    _, topic = topics(figures.size)
    partition = partition_name(topic, 0)
    value = os.urandom(figures.size)
    warm = figures.records // WARM_UP_FRACTION
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    failures: list[BaseException] = []

    def acknowledged(i: int, sent: float, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            failures.append(future.exception() or asyncio.CancelledError())
        elif i >= warm:
            latencies.append(loop.time() - sent)

    async with Producer(
        bench.client,
        acks="all",
        linger_ms=LINGER_MS,
        batch_size=broker_bench.REQUEST_BYTES,
        binary=True,
    ) as producer:
        started = loop.time()
        for i in range(figures.records):
            now = loop.time()
            if i == warm:
                started = now
            future = await producer.send(partition, value)
            future.add_done_callback(functools.partial(acknowledged, i, now))
        await producer.flush()
        elapsed = loop.time() - started
    check_count(figures, "epochlog's client acknowledged", figures.records - len(failures))
    if failures:
        say(f"  epochlog's client: {len(failures)} failed, the first: {failures[0]!r}")
    timed = len(latencies)
    if timed:
        ordered = sorted(latencies)
        figures.own_records_s = timed / elapsed
        figures.own_mib_s = timed * figures.size / elapsed / MiB
        figures.own_avg_ms = 1000 * statistics.fmean(ordered)
        figures.own_p50_ms = 1000 * broker_bench.percentile(ordered, 50)
        figures.own_p99_ms = 1000 * broker_bench.percentile(ordered, 99)


async def own_read(bench: Bench, figures: Figures) -> None:
    """Read the size's own topic back from offset 0 to the high watermark, and check
    both topics' high watermarks."""
    tools, own = topics(figures.size)
    read = await broker_bench.consume(bench.http, bench.urls[partition_name(own, 0)], binary=True)
    check_count(figures, "epochlog's reader read", read.records)
    figures.own_read_records_s = read.records_per_s
    for topic in (tools, own):
        end = await bench.client.list_offsets(partition_name(topic, 0), LATEST)
        check_count(figures, f"the high watermark of {topic}", end.offset)


async def http_batches(bench: Bench, figures: Figures, seconds: float) -> None:
    """What the brokers take when the client costs next to nothing: prepared binary
    batches of `REQUEST_BYTES`, `CONCURRENCY` requests in flight for `seconds`
    (`broker_bench.produce_throughput`, as `broker_bench` measures the brokers)."""
    url = bench.urls[partition_name(batches_topic(figures.size), 0)]
    bodies = broker_bench.binary_bodies(figures.size, random.Random(figures.size))
    label = f"{figures.size} B binary"
    t = await broker_bench.produce_throughput(
        bench.http, url, label, figures.size, bodies, seconds, broker_bench.CONCURRENCY
    )
    figures.batches_records_s = t.records_per_s
    figures.batches_mib_s = t.mib_per_s


async def measure(bench: Bench, lib: Path, figures: Figures, batch_seconds: float) -> None:
    """One record size: the tools, then epochlog's client, each producer followed by its
    reader, then the brokers' ceiling (`http_batches`)."""
    say(f"{figures.mode} {figures.size} B: ProducerPerformance, {figures.records} records")
    await asyncio.to_thread(tool_produce, bench, lib, figures)
    say(f"  {figures.tool_line}")
    say(f"{figures.mode} {figures.size} B: ConsumerPerformance")
    await asyncio.to_thread(tool_consume, bench, lib, figures)
    say(f"  {figures.consumer_line}")
    say(f"{figures.mode} {figures.size} B: epochlog's client, {figures.records} records")
    await own_produce(bench, figures)
    say(
        f"  {cell(figures.own_records_s, 0)} records/s, p50 {cell(figures.own_p50_ms, 1)} ms, "
        f"p99 {cell(figures.own_p99_ms, 1)} ms"
    )
    await own_read(bench, figures)
    say(f"  read back at {cell(figures.own_read_records_s, 0)} records/s")
    if batch_seconds > 0:
        say(f"{figures.mode} {figures.size} B: HTTP batches for {batch_seconds:g} s")
        await http_batches(bench, figures, batch_seconds)
        say(f"  {cell(figures.batches_records_s, 0)} records/s")


# -- the report -----------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


@dataclass
class Report:
    raws: list[float] = field(default_factory=list)
    """Raw write+fdatasync MiB/s, each measurement."""
    runs: list[Figures] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    @property
    def third(self) -> float | None:
        return statistics.median(self.raws) / 3 if self.raws else None

    @property
    def lost(self) -> list[str]:
        return [message for run in self.runs for message in run.lost]


ROWS: tuple[tuple[str, str, int], ...] = (
    ("tool_records_s", "ProducerPerformance, records/s", 0),
    ("tool_mib_s", "  MiB/s of values", 1),
    ("tool_avg_ms", "  latency avg, ms", 1),
    ("tool_p50_ms", "  latency p50, ms", 0),
    ("tool_p99_ms", "  latency p99, ms", 0),
    ("own_records_s", "epochlog's client, records/s", 0),
    ("own_mib_s", "  MiB/s of values", 1),
    ("own_avg_ms", "  latency avg, ms", 1),
    ("own_p50_ms", "  latency p50, ms", 1),
    ("own_p99_ms", "  latency p99, ms", 1),
    ("tool_over_own", "ProducerPerformance / epochlog's client", 2),
    ("tool_over_raw", "ProducerPerformance / (raw / 3)", 2),
    ("own_over_raw", "epochlog's client / (raw / 3)", 2),
    (
        "batches_records_s",
        f"HTTP batches, {broker_bench.CONCURRENCY} x {broker_bench.REQUEST_BYTES // 1024} KiB "
        "in flight, records/s",
        0,
    ),
    ("tool_over_batches", "ProducerPerformance / HTTP batches", 2),
    ("batches_over_raw", "HTTP batches / (raw / 3)", 2),
    ("consumer_records_s", "ConsumerPerformance, records/s of its fetches", 0),
    ("consumer_mib_s", "  MiB/s of values", 1),
    ("consumer_join_ms", "  joining its group, ms", 0),
    ("own_read_records_s", "epochlog's reader, records/s", 0),
    ("consumer_over_own_read", "ConsumerPerformance / epochlog's reader", 2),
    ("records", "records written and read back by each", 0),
)


def values(run: Figures, third: float | None) -> dict[str, float | None]:
    """Every figure of `ROWS` for one run, the ratios included."""
    out: dict[str, float | None] = {
        key: getattr(run, key) for key, _, _ in ROWS if hasattr(run, key)
    }
    out["tool_over_own"] = ratio(run.tool_records_s, run.own_records_s)
    out["tool_over_raw"] = ratio(run.tool_mib_s, third)
    out["own_over_raw"] = ratio(run.own_mib_s, third)
    out["tool_over_batches"] = ratio(run.tool_records_s, run.batches_records_s)
    out["batches_over_raw"] = ratio(run.batches_mib_s, third)
    out["consumer_over_own_read"] = ratio(run.consumer_records_s, run.own_read_records_s)
    return out


def title(run: Figures) -> str:
    return title_of(run.mode, run.size)


def title_of(mode: str, size: int) -> str:
    """A column's title: the cluster's mode and the record size."""
    label = "1 KiB" if size == 1024 else f"{size} B"
    return f"{'TLS' if mode == 'tls' else mode} {label}"


def table(report: Report) -> list[str]:
    width = max(len(label) for _, label, _ in ROWS)
    columns = [(title(run), values(run, report.third)) for run in report.runs]
    lines = [
        f"{'':<{width}}" + "".join(f"  {name:>15}" for name, _ in columns),
        "-" * (width + 17 * len(columns)),
    ]
    for key, label, digits in ROWS:
        lines.append(
            f"{label:<{width}}" + "".join(f"  {cell(v.get(key), digits):>15}" for _, v in columns)
        )
    return lines


def print_report(report: Report) -> None:
    print()
    for line in table(report):
        print(line)
    raws = ", ".join(f"{r:.0f}" for r in report.raws)
    print(
        f"raw write + fdatasync of 1 MiB blocks on the same disk: {raws} MiB/s (before each "
        f"cluster and at the end); raw / 3 of their median: {cell(report.third, 1)} MiB/s"
    )
    print(
        f"Kafka {KAFKA_VERSION}'s ProducerPerformance and ConsumerPerformance ({java_version()}) "
        "through the Kafka listener; epochlog's client (binary batches over the HTTP API) and "
        "reader (broker_bench.consume) on the same cluster"
    )
    print(
        "both producers: "
        + " ".join(f"{k}={v}" for k, v in PRODUCER_PROPS.items())
        + f"; rates and latencies over the records after the first 1/{WARM_UP_FRACTION}; "
        "latency per record from send() to its acknowledgement (ProducerPerformance: whole ms)"
    )
    print(
        "the embedded cluster: 3 brokers, one Partition per topic on all three, "
        "minInsyncReplicas 2, every replica fsyncs what it counts; TLS: the admin user's "
        "client certificate (PEM keystore)"
    )
    print(
        f"machine: {os.cpu_count()} cores, shared; load average (1 min) before each cluster: "
        + ", ".join(f"{x:.2f}" for x in report.loads)
    )
    for message in report.lost:
        print(f"LOST: {message}")


RATIOS: dict[str, str | None] = {
    "tool_over_own": None,
    "tool_over_raw": "raw_third",
    "own_over_raw": "raw_third",
    "tool_over_batches": None,
    "batches_over_raw": "raw_third",
    "consumer_over_own_read": None,
}
"""The ratios of `values`, each with the baseline it is taken over (None: over another
figure of the same cluster)."""


def as_result(
    stamp: results.Stamp, args: argparse.Namespace, report: Report
) -> results.Result[results.KafkaToolsRun]:
    """The JSON of one run (`benchmarks.results`): a row per record size and cluster, the
    ratios of each by `<mode>_<size>_<ratio>`."""
    labels = {key: label.strip() for key, label, _ in ROWS}
    baselines = {}
    if report.third is not None:
        baselines["raw_third"] = results.Baseline(
            label="raw write + fdatasync of 1 MiB blocks on the same disk, / 3",
            unit="MiB/s",
            value=report.third,
            runs=[r / 3 for r in report.raws],
        )
    rows = [
        results.KafkaToolsRun(
            mode=run.mode,
            record_bytes=run.size,
            values=values(run, report.third),
            producer_performance_line=run.tool_line,
            consumer_performance_line=run.consumer_line,
            lost=run.lost,
        )
        for run in report.runs
    ]
    return results.Result[results.KafkaToolsRun](
        benchmark="kafka_perf_tools",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(
            args,
            leave_out=("json", "dir"),
            producer=PRODUCER_PROPS,
            kafka_version=KAFKA_VERSION,
            java=java_version(),
            load_average=report.loads,
        ),
        baselines=baselines,
        figures={},
        ratios={
            f"{row.mode}_{row.record_bytes}_{key}": results.Ratio(
                label=f"{title_of(row.mode, row.record_bytes)}: {labels[key]}",
                value=row.values[key],
                baseline=baseline,
            )
            for row in rows
            for key, baseline in RATIOS.items()
        },
        goals=[
            results.Goal.judge("records lost or doubled", len(report.lost), at_most=0),
        ],
        rows=rows,
        notes=report.lost,
        status=1 if report.lost else 0,
    )


# -- the command ----------------------------------------------------------------------------


async def run_mode(
    args: argparse.Namespace, lib: Path, root: Path, mode: str, report: Report
) -> None:
    records = {1024: args.records_1k, 100: args.records_100}
    report.loads.append(os.getloadavg()[0])
    say(f"=== {mode}: starting the embedded cluster (load average {report.loads[-1]:.2f})")
    async with bench_cluster(root / mode, tls=mode == "tls", sizes=SIZES) as bench:
        for size in SIZES:
            figures = Figures(mode, size, records[size])
            report.runs.append(figures)
            await measure(bench, lib, figures, args.batch_seconds)


async def run(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    lib = kafka_lib()
    report = Report()
    raw_path = str(root / "raw.bin")

    def raw() -> None:
        report.raws.append(raw_write_fdatasync(raw_path, args.raw_mib))
        say(f"raw write + fdatasync: {report.raws[-1]:.0f} MiB/s")

    os.environ["EPOCHLOG_LOG_LEVEL"] = "warning"
    try:
        for mode in args.modes:
            raw()
            await run_mode(args, lib, root, mode, report)
    finally:
        raw()
        print_report(report)
        results.write(as_result(stamp, args, report), Path(args.json) if args.json else None)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if report.lost:
        say(f"LOST records: {len(report.lost)} counts differ (see above)")
        return 1
    return 0


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(MODES)}")
    return modes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kafka_perf_tools")
    parser.add_argument("--records-1k", type=int, default=100_000, help="records of 1 KiB")
    parser.add_argument("--records-100", type=int, default=300_000, help="records of 100 B")
    parser.add_argument("--modes", type=_modes, default=list(MODES), help="tls,plaintext")
    parser.add_argument(
        "--batch-seconds", type=float, default=3.0, help="HTTP batches per size (0: none)"
    )
    parser.add_argument("--raw-mib", type=int, default=128, help="MiB per raw baseline run")
    parser.add_argument("--dir", default=".state/kafka-perf-tools", help="on the disk to use")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    parser.add_argument(
        "--json", help="write the figures to this file (default: build/bench/kafka_perf_tools.json)"
    )
    args = parser.parse_args(argv)
    configure("warning")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
