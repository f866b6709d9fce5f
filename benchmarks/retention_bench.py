"""Produce throughput on real brokers while retention deletes segments, next to without.

Starts the embedded cluster (`epochlog_tools.devcluster.local`: API emulator, operator,
three broker processes on loopback, plaintext) with the brokers checking retention
every 100 ms instead of Kafka's five minutes, so that deletions happen during the
measurement. Two Partitions on brokers 1, 2, 3 with 8 MiB segments: `kept-0` keeps
everything, `retained-0` keeps 32 MiB (`retentionBytes`), so while it is written each
replica deletes a closed segment about every 8 MiB and its log start moves on. Both
are written alike (acks=all, binary batches of 1 KiB records, 256 KiB requests, 16 in
flight) in alternating runs, so that drift of the disk or of the machine's load hits
both. Printed: MiB/s of each run, the medians and their ratio, where each replica's
log starts at the end, and the bytes each replica keeps (retained: at most
retentionBytes plus one closed segment and the active one). The exit status is 1 when
retention deleted nothing or kept more than that. The figures are also written to
`build/bench/retention_bench.json` (`benchmarks.results`; the baseline: the runs
without retention).

Run with `make bench` or `python -m benchmarks.retention_bench [--seconds S] [--rounds N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
from pathlib import Path

import aiohttp

from benchmarks import results
from benchmarks.broker_bench import (
    REPLICAS,
    Throughput,
    binary_bodies,
    produce_throughput,
    ready_partitions,
    throughput_row,
)
from epochlog.logs import configure
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.partitions import partition_manifest

MiB = 1 << 20
SEGMENT_BYTES = 8 * MiB
RETENTION_BYTES = 32 * MiB
KEPT, RETAINED = "kept-0", "retained-0"
RECORD_BYTES = 1024


def replica_bytes(cluster: LocalCluster, name: str) -> dict[int, int]:
    """Bytes in each broker's directory of partition `name` (segments and indexes)."""
    out = {}
    for b in REPLICAS:
        directory = cluster.state_dir / "brokers" / str(b) / name
        out[b] = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
    return out


async def log_starts(cluster: LocalCluster, name: str) -> dict[int, int]:
    """Each replica's log start offset, as its broker lists it."""
    out = {}
    async with aiohttp.ClientSession() as http:
        for b in REPLICAS:
            async with http.get(f"{cluster.broker_url(b)}/v1/partitions") as resp:
                resp.raise_for_status()
                listed = {p["name"]: p for p in (await resp.json())["partitions"]}
            out[b] = int(listed[name]["logStartOffset"])
    return out


async def run(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    os.environ["EPOCHLOG_LOG_LEVEL"] = "warning"
    cluster = LocalCluster(
        root / "cluster",
        brokers=3,
        settings=DevSettings(broker_args=("--retention-check-interval-ms", "100")),
        tls=False,
    )
    runs: dict[str, list[Throughput]] = {KEPT: [], RETAINED: []}
    try:
        await cluster.up(example_partitions=False)
        urls = await ready_partitions(
            cluster,
            [
                partition_manifest(
                    topic,
                    0,
                    replicas=REPLICAS,
                    replica_lag_time_max_ms=10_000,
                    retention_ms=-1,
                    retention_bytes=retention,
                    segment_bytes=SEGMENT_BYTES,
                )
                for topic, retention in (("kept", -1), ("retained", RETENTION_BYTES))
            ],
        )
        bodies = binary_bodies(RECORD_BYTES, random.Random(7))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            for r in range(args.rounds):
                for name in (KEPT, RETAINED) if r % 2 == 0 else (RETAINED, KEPT):
                    t = await produce_throughput(
                        http, urls[name], name, RECORD_BYTES, bodies, args.seconds, args.concurrency
                    )
                    runs[name].append(t)
                    print(f"  round {r + 1} {name:<11} {t.mib_per_s:7.1f} MiB/s", flush=True)
        # The last pass over the retained log runs within a check interval.
        await asyncio.sleep(0.5)
        starts = await log_starts(cluster, RETAINED)
        kept_bytes = replica_bytes(cluster, KEPT)
        retained_bytes = replica_bytes(cluster, RETAINED)
    finally:
        await cluster.down()
    shutil.rmtree(root, ignore_errors=True)

    kept = statistics.median(t.mib_per_s for t in runs[KEPT])
    retained = statistics.median(t.mib_per_s for t in runs[RETAINED])
    print()
    print(
        "Produce, RF3 acks=all, 1 KiB binary records, 8 MiB segments "
        f"({args.rounds} alternating runs of {args.seconds:g} s each, medians):"
    )
    print(f"  {'without retention':<38} {kept:7.1f} MiB/s")
    print(
        f"  {'retention keeping 32 MiB, deleting':<38} {retained:7.1f} MiB/s"
        f"   ratio {retained / kept:.2f}"
    )
    print(f"  retained-0 log start per replica: {starts}")
    mib = {b: round(n / MiB, 1) for b, n in retained_bytes.items()}
    print(
        f"  MiB kept per replica: retained-0 {mib}, kept-0 "
        f"{ {b: round(n / MiB, 1) for b, n in kept_bytes.items()} }"
    )
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    bound = RETENTION_BYTES + 2 * SEGMENT_BYTES + MiB  # + indexes and checkpoints
    deleted_nothing = min(starts.values()) == 0
    kept_too_much = max(retained_bytes.values()) > bound
    status = 1 if deleted_nothing or kept_too_much else 0
    goals = [
        results.Goal.judge(
            "lowest log start of retained-0's replicas", min(starts.values()), at_least=1
        ),
        results.Goal.judge(
            "most bytes a replica of retained-0 keeps", max(retained_bytes.values()), at_most=bound
        ),
    ]
    results.write(as_result(stamp, args, runs, goals, status))
    if deleted_nothing:
        print("retention deleted nothing: make the runs longer (--seconds)", file=sys.stderr)
        return 1
    if kept_too_much:
        print(f"a replica keeps more than {bound} bytes", file=sys.stderr)
        return 1
    return 0


def as_result(
    stamp: results.Stamp,
    args: argparse.Namespace,
    runs: dict[str, list[Throughput]],
    goals: list[results.Goal],
    status: int,
) -> results.Result[results.Row]:
    """The JSON of one run (`benchmarks.results`): the runs without retention are the
    baseline."""
    kept = [t.mib_per_s for t in runs[KEPT]]
    retained = [t.mib_per_s for t in runs[RETAINED]]
    median = statistics.median(retained)
    return results.Result[results.Row](
        benchmark="retention_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(args, leave_out=("dir",)),
        baselines={
            "without_retention": results.Baseline(
                label="produce to kept-0, no retention",
                unit="MiB/s",
                value=statistics.median(kept),
                runs=kept,
            )
        },
        figures={
            "with_retention": results.Figure(
                label="produce to retained-0, retention keeping 32 MiB, deleting",
                unit="MiB/s",
                value=median,
            )
        },
        ratios={
            "retention": results.Ratio(
                label="with retention / without",
                value=median / statistics.median(kept),
                baseline="without_retention",
            )
        },
        goals=goals,
        rows=[
            throughput_row(t, partition=name, run=n + 1)
            for name in (KEPT, RETAINED)
            for n, t in enumerate(runs[name])
        ],
        notes=[],
        status=status,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=".state/retention-bench", help="directory on the disk")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each partition")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    args = parser.parse_args(argv)
    configure("warning")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
