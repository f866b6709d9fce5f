"""Spark source throughput next to the plain client reading the same records.

Starts the embedded cluster (API emulator, the real operator, three real
brokers on loopback) under `--dir`, writes a topic of two partitions per
record size (100 B and 1 KiB values, acks=all, binary batches), then reads
every record of it, from offset 0 to the high watermark, in three ways:

- the plain client, the baseline: a `Consumer` per partition (binary reads,
  10,000 records per poll), the two partitions at once, every record handed to
  the caller as a `ConsumerRecord`;
- the client's floor, for reference: `epochlog.client.ranges.RangeReader`
  over each partition, decoding every batch column by column and keeping no
  object per record;
- the `epochlog` source in a Structured Streaming query with
  Trigger.AvailableNow into Spark's no-op sink (`format("noop")`): what the
  source itself costs, Arrow conversion and Spark's Python-worker hand-over
  included;
- the same query into Parquet files.

Spark runs in local mode with as many cores as the machine (`local[*]`), in
this process; the brokers, the operator and the API emulator share the same
cores. Each figure is the median of `--repeats` runs after one warm-up query;
a Spark run includes planning the query, as a micro-batch does. The ratio
printed is records/s over the plain client's records/s, measured in the same
run. Goal: no-op sink >= 0.5 x the plain client. The figures are also written to
`build/bench/spark_bench.json` (`benchmarks.results`).

Run with `.venv/bin/python -m benchmarks.spark_bench [--dir DIR] [--records-100 N]
[--records-1k N] [--repeats R]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import results
from epochlog.client import Client, Consumer, Producer
from epochlog.client.ranges import RangeReader
from epochlog.logs import configure
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.partitions import partition_manifest

PARTITIONS = 2


@dataclass
class Figure:
    label: str
    records: int
    seconds: list[float]

    @property
    def records_per_s(self) -> float:
        return self.records / statistics.median(self.seconds)


def credential_options(cluster: LocalCluster) -> dict[str, str]:
    """The source's `ca`, `cert` and `key`: the cluster's admin certificate (TLS, as the
    cluster runs by default)."""
    tls = cluster.credentials.tls
    if tls is None or tls.cert is None or tls.key is None:
        return {}
    return {"ca": tls.ca, "cert": tls.cert, "key": tls.key}


def _values(size: int, count: int) -> list[bytes]:
    # Distinct values, so no layer sees the same bytes over and over.
    return [(f"{n:012d}" * (size // 12 + 1))[:size].encode() for n in range(count)]


async def write_topic(cluster: LocalCluster, topic: str, size: int, count: int) -> dict[str, int]:
    """`count` records of `size` bytes over the topic's partitions; the high watermarks."""
    names = [f"{topic}-{i}" for i in range(PARTITIONS)]
    for i in range(PARTITIONS):
        await cluster.apply(partition_manifest(topic, i))
    for name in names:
        status = await cluster.wait_leader(name, timeout=120)
        await cluster.wait_serving(name, status, timeout=120)
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        producer = Producer(client, acks="all", binary=True, linger_ms=5, batch_size=256 << 10)
        futures = []
        for n, value in enumerate(_values(size, count)):
            futures.append(await producer.send(names[n % PARTITIONS], value))
        await producer.flush()
        await producer.close()
        for f in futures:
            f.result()
        ends = {}
        for name in names:
            ends[name] = (await client.list_offsets(name, "latest")).offset
    return ends


async def consumer_read(cluster: LocalCluster, ends: dict[str, int]) -> int:
    """Every record below `ends` through the `Consumer`; the number read."""

    async def one(client: Client, name: str, end: int) -> int:
        consumer = Consumer(
            client, name, start=0, binary=True, max_records=10_000, max_bytes=4 << 20
        )
        n = 0
        while (consumer.position or 0) < end:
            n += len(await consumer.poll())
        return n

    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        counts = await asyncio.gather(*(one(client, n, e) for n, e in ends.items()))
    return sum(counts)


async def client_read(cluster: LocalCluster, ends: dict[str, int]) -> int:
    """Every record below `ends`, decoded column by column; the number read."""

    async def one(client: Client, name: str, end: int) -> int:
        n = 0
        async for chunk in RangeReader(client, name, 0, end):
            for batch in chunk.batches:
                lo = max(chunk.start - batch.base_offset, 0)
                hi = min(chunk.end, batch.next_offset) - batch.base_offset
                n += len(batch.columns().values[lo:hi])
        return n

    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
        counts = await asyncio.gather(*(one(client, n, e) for n, e in ends.items()))
    return sum(counts)


def spark_read(spark: object, cluster: LocalCluster, topic: str, sink: str, work: Path) -> None:
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    shutil.rmtree(work, ignore_errors=True)
    frame = (
        spark.readStream.format("epochlog")
        .option("bootstrap", ",".join(cluster.bootstrap))
        .options(**credential_options(cluster))
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    writer = frame.writeStream.trigger(availableNow=True).option(
        "checkpointLocation", str(work / "checkpoint")
    )
    if sink == "parquet":
        writer = writer.format("parquet").option("path", str(work / "out"))
    else:
        writer = writer.format("noop")
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


async def bench(base: Path, counts: dict[int, int], repeats: int) -> list[tuple[int, list[Figure]]]:
    from epochlog_spark.session import local_session

    cluster = LocalCluster(base / "cluster", brokers=3, settings=DevSettings())
    results: list[tuple[int, list[Figure]]] = []
    await cluster.up(example_partitions=False)
    try:
        print("starting Spark (local mode)...", flush=True)
        spark = await asyncio.to_thread(local_session, "local[*]", "epochlog-bench")
        try:
            for size, count in counts.items():
                topic = f"bench-{size}"
                print(f"writing {count} records of {size} B to {topic}...", flush=True)
                ends = await write_topic(cluster, topic, size, count)
                total = sum(ends.values())
                await asyncio.to_thread(spark_read, spark, cluster, topic, "noop", base / "warm-up")
                figures = [
                    Figure("plain client", total, []),
                    Figure("client, no objects", total, []),
                    Figure("Spark, no-op sink", total, []),
                    Figure("Spark, Parquet", total, []),
                ]
                for r in range(repeats):
                    print(f"   {size} B: run {r + 1}/{repeats}", flush=True)
                    for figure, read in zip(figures[:2], (consumer_read, client_read), strict=True):
                        t = time.perf_counter()
                        got = await read(cluster, ends)
                        figure.seconds.append(time.perf_counter() - t)
                        if got != total:
                            raise RuntimeError(f"{figure.label} read {got} records, not {total}")
                    for figure, sink in zip(figures[2:], ("noop", "parquet"), strict=True):
                        t = time.perf_counter()
                        await asyncio.to_thread(
                            spark_read, spark, cluster, topic, sink, base / sink
                        )
                        figure.seconds.append(time.perf_counter() - t)
                written = spark.read.parquet(str(base / "parquet" / "out")).count()
                if written != total:
                    raise RuntimeError(f"Parquet holds {written} records, expected {total}")
                results.append((size, figures))
        finally:
            await asyncio.to_thread(spark.stop)
    finally:
        await cluster.down()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--dir", type=Path, default=None, help="work directory (default: a temporary one)"
    )
    p.add_argument("--records-100", type=int, default=2_000_000, help="records of 100 B")
    p.add_argument("--records-1k", type=int, default=400_000, help="records of 1 KiB")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    configure("warning")
    stamp = results.Stamp.now()
    os.environ.setdefault("EPOCHLOG_LOG_LEVEL", "warning")
    base = args.dir or Path(tempfile.mkdtemp(prefix="epochlog-spark-bench-"))
    try:
        measured = asyncio.run(
            bench(base, {100: args.records_100, 1024: args.records_1k}, args.repeats)
        )
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\nSpark source vs plain client ({os.cpu_count()} cores shared with 3 brokers)")
    print(
        f"{'values':>7} {'reader':<20} {'records':>9} {'records/s':>11} {'MiB/s':>7} {'ratio':>6}"
    )
    ok = True
    for size, figures in measured:
        baseline = figures[0].records_per_s
        for figure in figures:
            ratio = figure.records_per_s / baseline
            mib = figure.records_per_s * size / (1 << 20)
            print(
                f"{size:>5} B {figure.label:<20} {figure.records:>9} "
                f"{figure.records_per_s:>11,.0f} {mib:>7.1f} {ratio:>6.2f}"
            )
        noop_ratio = figures[2].records_per_s / baseline
        ok = ok and noop_ratio >= 0.5
    print(f"\ngoal (no-op sink >= 0.5 x the plain client): {'met' if ok else 'NOT met'}")
    results.write(as_result(stamp, args, measured))
    return 0


def as_result(
    stamp: results.Stamp, args: argparse.Namespace, measured: list[tuple[int, list[Figure]]]
) -> results.Result[results.Row]:
    """The JSON of one run (`benchmarks.results`): the plain client of each size is its
    baseline."""
    baselines: dict[str, results.Baseline] = {}
    ratios: dict[str, results.Ratio] = {}
    goals: list[results.Goal] = []
    rows: list[results.Row] = []
    for size, figures in measured:
        plain = figures[0]
        key = f"plain_{size}"
        baselines[key] = results.Baseline(
            label=f"plain client, {size} B values, records/s",
            unit="records/s",
            value=plain.records_per_s,
            runs=[plain.records / s for s in plain.seconds],
        )
        for figure in figures:
            ratio = figure.records_per_s / plain.records_per_s
            name = figure.label.replace(",", "").replace(" ", "_")
            ratios[f"{name}_{size}"] = results.Ratio(
                label=f"{figure.label}, {size} B / plain client", value=ratio, baseline=key
            )
            rows.append(
                {
                    "values_bytes": size,
                    "reader": figure.label,
                    "records": figure.records,
                    "seconds": figure.seconds,
                    "records_s": figure.records_per_s,
                    "mib_s": figure.records_per_s * size / (1 << 20),
                }
            )
        goals.append(
            results.Goal.judge(
                f"Spark no-op sink / plain client, {size} B",
                figures[2].records_per_s / plain.records_per_s,
                at_least=0.5,
            )
        )
    return results.Result[results.Row](
        benchmark="spark_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(args, leave_out=("dir",)),
        baselines=baselines,
        figures={},
        ratios=ratios,
        goals=goals,
        rows=rows,
        notes=[],
        status=0,
    )


if __name__ == "__main__":
    sys.exit(main())
