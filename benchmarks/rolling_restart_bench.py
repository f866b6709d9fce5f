"""A rolling restart of every broker under acks=all load: the longest wait for an acknowledgement.

Starts the embedded cluster (`epochlog_tools.devcluster.local`: API emulator, the
real operator, three brokers as real processes) with the dev default timings
(heartbeat 500 ms, session timeout 3 s), creates Partitions with
replicationFactor 3 and minInsyncReplicas 2, and writes to all of them with
the real idempotent producer (acks=all). Then it restarts the brokers one by
one as a StatefulSet roll does (`epochlog_tools.devcluster.rolling`: SIGTERM, start
again, next once /readyz answers), while `IsrWatch` follows every status the
API server publishes.

It does so twice in the same run: with controlled shutdown (the default: a
stopping broker hands its leaderships and ISR places over first) and without
(`--controlled-shutdown-timeout-ms 0`: the broker stops at once, and the
operator notices after the session timeout). The figure is the longest gap
between two consecutive acknowledgements on one partition during the roll
(goal: under 1 s with controlled shutdown), next to the same figure without
it. At the end every partition is read back: no acknowledged record may be
missing or doubled. Statuses with an ISR below minInsyncReplicas are counted.

Exit status 1 only when an acknowledged record was lost or doubled. The figures are
also written to `build/bench/rolling_restart_bench.json` (`benchmarks.results`; the
baseline: the roll without controlled shutdown).

Run with `make bench` or `python -m benchmarks.rolling_restart_bench [--partitions N]
[--rate R]`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import results
from epochlog.client import Client
from epochlog.logs import configure
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.local_workload import SteadyProducer, WorkloadAck, read_back, verify
from epochlog_tools.devcluster.partitions import partition_manifest
from epochlog_tools.devcluster.rolling import IsrWatch, RollStep, rolling_restart

TOPIC = "roll"


@dataclass(frozen=True)
class RollResult:
    mode: str
    steps: list[RollStep]
    gaps: dict[str, float]
    """Per partition: the longest time between two acknowledgements during the roll."""
    below_min_isr: int
    statuses_seen: int
    acknowledged: int
    lost: int
    doubled: int


def longest_gaps(acks: list[WorkloadAck], start: float, end: float) -> dict[str, float]:
    by_partition: dict[str, list[float]] = {}
    for a in acks:
        by_partition.setdefault(a.partition, []).append(a.at)
    out = {}
    for name, times in by_partition.items():
        inside = sorted(t for t in times if start <= t <= end)
        # The roll's edges count: a partition silent from the start of the roll on waits too.
        before = [t for t in times if t < start]
        after = [t for t in times if t > end]
        points = ([max(before)] if before else []) + inside + ([min(after)] if after else [])
        out[name] = max((b - a for a, b in itertools.pairwise(points)), default=0.0)
    return out


async def run(mode: str, args: argparse.Namespace) -> RollResult:
    settings = DevSettings()
    if mode == "immediate":
        settings.controlled_shutdown_timeout_ms = 0
    root = Path(tempfile.mkdtemp(prefix="epochlog-roll-bench-"))
    cluster = LocalCluster(root, brokers=3, settings=settings)
    names = [f"{TOPIC}-{i}" for i in range(args.partitions)]
    try:
        await cluster.up(example_partitions=False)
        for i in range(args.partitions):
            await cluster.apply(
                partition_manifest(
                    TOPIC, i, replica_lag_time_max_ms=settings.replica_lag_time_max_ms
                )
            )
        for name in names:
            await cluster.wait_serving(name, await cluster.wait_leader(name))
        client = Client(
            cluster.bootstrap,
            request_timeout_ms=5000,
            retry_backoff_ms=20,
            retry_backoff_max_ms=200,
            credentials=cluster.credentials,
        )
        producer = await SteadyProducer(client, names, rate=args.rate, prefix=mode).start()
        watch = await IsrWatch(cluster.api_url).start()
        try:
            await asyncio.sleep(args.steady_s)
            start = time.monotonic()
            steps = await rolling_restart(
                cluster, [1, 2, 3], say=lambda line: print(f"  [{mode}] {line}", flush=True)
            )
            end = time.monotonic()
            await asyncio.sleep(args.steady_s)
            await producer.stop()
            await watch.stop()
            logs = {name: await read_back(client, name) for name in names}
        finally:
            await client.close()
    finally:
        await cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    verdict = verify(producer.acks, logs)
    return RollResult(
        mode=mode,
        steps=steps,
        gaps=longest_gaps(producer.acks, start, end),
        below_min_isr=len(watch.low),
        statuses_seen=watch.seen,
        acknowledged=verdict.acknowledged,
        lost=len(verdict.missing),
        doubled=len(verdict.duplicated),
    )


def report(r: RollResult) -> None:
    gaps = sorted(r.gaps.values())
    steps = ", ".join(f"b{s.broker} {s.restarted_s:.1f}+{s.ready_s:.1f} s" for s in r.steps)
    print(
        f"{r.mode:>10}: longest gap between acks per partition: max {gaps[-1]:.2f} s, median "
        f"{statistics.median(gaps):.2f} s; steps (SIGTERM->healthy + ->ready): {steps}"
    )
    print(
        f"{'':>10}  statuses with ISR below minInsyncReplicas: {r.below_min_isr} of "
        f"{r.statuses_seen}; acknowledged {r.acknowledged}, lost {r.lost}, doubled {r.doubled}"
    )


async def bench(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    print(
        f"rolling restart of 3 brokers under load: {args.partitions} partitions (RF 3, "
        f"minInsyncReplicas 2), {args.rate:.0f} records/s acks=all, dev default timings "
        f"(heartbeat {DevSettings().heartbeat_interval_ms} ms, session timeout "
        f"{DevSettings().session_timeout_ms} ms)",
        flush=True,
    )
    rolls = [await run(mode, args) for mode in ("controlled", "immediate")]
    print()
    for r in rolls:
        report(r)
    controlled, immediate = rolls
    worst_c, worst_i = max(controlled.gaps.values()), max(immediate.gaps.values())
    print(
        f"\nlongest gap with / without controlled shutdown: {worst_c:.2f} s / {worst_i:.2f} s "
        f"(ratio {worst_c / worst_i:.2f}); goal under 1 s: "
        f"{'met' if worst_c < 1.0 else 'NOT met'}"
    )
    status = 1 if any(r.lost or r.doubled for r in rolls) else 0
    write_json(stamp, args, controlled, immediate, status)
    return status


def write_json(
    stamp: results.Stamp,
    args: argparse.Namespace,
    controlled: RollResult,
    immediate: RollResult,
    status: int,
) -> None:
    """The JSON of one run (`benchmarks.results`): the roll without controlled shutdown is
    the baseline."""
    worst_c, worst_i = max(controlled.gaps.values()), max(immediate.gaps.values())
    results.write(
        results.Result[results.Row](
            benchmark="rolling_restart_bench",
            date=stamp.date,
            machine=stamp.machine,
            parameters=results.parameters(args),
            baselines={
                "immediate": results.Baseline(
                    label="longest gap between acks on a partition, without controlled shutdown",
                    unit="s",
                    value=worst_i,
                    runs=[worst_i],
                )
            },
            figures={
                "controlled": results.Figure(
                    label="longest gap between acks on a partition, with controlled shutdown",
                    unit="s",
                    value=worst_c,
                )
            },
            ratios={
                "controlled_over_immediate": results.Ratio(
                    label="longest gap with / without controlled shutdown",
                    value=worst_c / worst_i,
                    baseline="immediate",
                )
            },
            goals=[
                results.Goal.judge("longest gap with controlled shutdown, s", worst_c, at_most=1.0),
                results.Goal.judge(
                    "acknowledged records lost or doubled",
                    sum(r.lost + r.doubled for r in (controlled, immediate)),
                    at_most=0,
                ),
            ],
            rows=[
                {
                    "mode": r.mode,
                    "longest_gap_s": max(r.gaps.values()),
                    "median_gap_s": statistics.median(r.gaps.values()),
                    "steps": [asdict(step) for step in r.steps],
                    "below_min_isr": r.below_min_isr,
                    "statuses_seen": r.statuses_seen,
                    "acknowledged": r.acknowledged,
                    "lost": r.lost,
                    "doubled": r.doubled,
                }
                for r in (controlled, immediate)
            ],
            notes=[],
            status=status,
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=300.0, help="records/s over all")
    parser.add_argument(
        "--steady-s", type=float, default=3.0, help="writes before and after the roll"
    )
    args = parser.parse_args()
    configure("warning")
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
