"""Failover on the embedded cluster: from a leader's SIGKILL to the first acks=all write on the
new leader.

Starts the embedded cluster (`epochlog_tools.devcluster.local`: API emulator,
operator, three brokers as real processes) with the dev default timings and
one Partition with replicationFactor 3, then repeats: a steady acks=all
producer (the real client, idempotent) writes to it; the leader is SIGKILLed;
the run measures the time from the kill to the first write acknowledged in a
newer leader epoch, and the time to the election in the Partition's status;
the killed broker is restarted and the next run waits until it is back in the
ISR. At the end every partition is read back: no acknowledged record may be
missing or doubled.

Goal: median failover <= session timeout + 1 s. The figures and whether the
goal was met are printed, and written with every run to
`build/bench/failover_bench.json` (`benchmarks.results`); the exit status is 1
only when an acknowledged record was lost or doubled.

Run with `make bench` or `python -m benchmarks.failover_bench [--runs N] [--rate R]`.
`measure` takes the runs alone (TLS or plaintext), for `benchmarks.side_by_side`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import results
from epochlog.client import Client
from epochlog.logs import configure
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.local_workload import SteadyProducer, Verdict, read_back, verify
from epochlog_tools.devcluster.partitions import partition_manifest

TOPIC = "failover"
NAME = f"{TOPIC}-0"
RETRY_BACKOFF_MS = (20, 200)
"""The client's retry backoff, first and longest."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _wait_in_isr(cluster: LocalCluster, broker: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        status = await cluster.wait_leader(NAME)
        if broker in status.isr and len(status.isr) == 3:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker {broker} did not rejoin the ISR of {NAME}: {status}")
        await asyncio.sleep(0.1)


@dataclass
class FailoverResult:
    """What `measure` found: the times of each run, in seconds, and the read-back's check."""

    settings: DevSettings
    failovers: list[float]
    """Kill to the first write acknowledged in a newer leader epoch."""
    elections: list[float]
    """Kill to the new leader in the Partition's status."""
    verdict: Verdict
    not_acknowledged: int
    runs: list[results.FailoverRun] = field(default_factory=list)
    """Each run: who was killed, who took over, in which epochs, and both times."""


async def measure(
    runs: int,
    rate: float,
    steady_s: float,
    *,
    tls: bool = True,
    say: Callable[[str], None] | None = None,
) -> FailoverResult:
    """The runs on a fresh embedded cluster with the dev default timings (TLS or
    plaintext), as the module docstring says; `say` gets the table of runs (default:
    stdout). Raises `DevClusterError` when the cluster does not start."""
    say = say or functools.partial(print, flush=True)
    settings = DevSettings()
    root = Path(tempfile.mkdtemp(prefix="epochlog-failover-bench-"))
    cluster = LocalCluster(root, brokers=3, settings=settings, tls=tls)
    failovers: list[float] = []
    elections: list[float] = []
    runs_seen: list[results.FailoverRun] = []
    try:
        await cluster.up(example_partitions=False)
        await cluster.apply(
            partition_manifest(TOPIC, 0, replica_lag_time_max_ms=settings.replica_lag_time_max_ms)
        )
        status = await cluster.wait_leader(NAME)
        await cluster.wait_serving(NAME, status)
        client = Client(
            cluster.bootstrap,
            request_timeout_ms=5000,
            retry_backoff_ms=RETRY_BACKOFF_MS[0],
            retry_backoff_max_ms=RETRY_BACKOFF_MS[1],
            credentials=cluster.credentials,
        )
        producer = await SteadyProducer(client, [NAME], rate=rate, prefix="b").start()
        try:
            say(
                f"\n{'run':>3}  {'killed':>6}  {'epoch':>9}  {'new':>3}  {'elected':>8}  "
                f"{'first ack':>9}"
            )
            for run in range(1, runs + 1):
                await asyncio.sleep(steady_s)
                status = await cluster.wait_leader(NAME)
                assert status.leader is not None  # wait_leader returns a led status
                old, epoch = status.leader, status.leader_epoch
                killed_at = time.monotonic()
                cluster.kill(f"broker-{old}")
                new = await cluster.wait_leader(
                    NAME, not_in={old}, min_leader_epoch=epoch + 1, timeout=60
                )
                elected = time.monotonic() - killed_at
                ack = await producer.wait_ack(
                    NAME, min_epoch=epoch + 1, after=killed_at, timeout=60
                )
                failover = ack.at - killed_at
                failovers.append(failover)
                elections.append(elected)
                runs_seen.append(
                    results.FailoverRun(
                        run=run,
                        killed=old,
                        new_leader=new.leader,
                        leader_epoch=epoch,
                        new_leader_epoch=new.leader_epoch,
                        elected_s=elected,
                        first_ack_s=failover,
                    )
                )
                epochs = f"{epoch}->{new.leader_epoch}"
                say(
                    f"{run:>3}  {'b' + str(old):>6}  {epochs:>9}  {'b' + str(new.leader):>3}  "
                    f"{elected:>7.2f}s  {failover:>8.2f}s"
                )
                await cluster.restart(f"broker-{old}")
                await _wait_in_isr(cluster, old)
            await producer.stop()
            logs = {NAME: await read_back(client, NAME)}
        finally:
            await client.close()
    finally:
        await cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    verdict = verify(producer.acks, logs)
    return FailoverResult(settings, failovers, elections, verdict, len(producer.failed), runs_seen)


async def bench(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    settings = DevSettings()
    print("failover benchmark on the embedded cluster (3 brokers, RF3, minInsyncReplicas 2)")
    print(
        "timings (dev defaults): "
        + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(settings).items())
    )
    print(
        f"workload: {args.rate:.0f} records/s with acks=all (idempotent producer, client "
        f"retry backoff {RETRY_BACKOFF_MS[0]}..{RETRY_BACKOFF_MS[1]} ms), leader SIGKILLed after "
        f"{args.steady_s:.1f} s of steady writes, {args.runs} runs"
    )
    result = await measure(args.runs, args.rate, args.steady_s)
    failovers, elections, verdict = result.failovers, result.elections, result.verdict
    session_s = settings.session_timeout_ms / 1000
    goal = session_s + 1
    median = statistics.median(failovers)
    print(
        f"\nkill -> first acks=all write on the new leader: median {median:.2f} s, "
        f"p90 {_percentile(failovers, 0.9):.2f} s, max {max(failovers):.2f} s"
    )
    print(
        f"kill -> new leader in the Partition status:     median "
        f"{statistics.median(elections):.2f} s, p90 {_percentile(elections, 0.9):.2f} s, "
        f"max {max(elections):.2f} s"
    )
    print(
        f"session timeout {session_s:.1f} s; goal: median <= {goal:.1f} s: "
        + ("met" if median <= goal else "NOT met")
    )
    print(
        f"records: {verdict.acknowledged} acknowledged, {verdict.read} read back, "
        f"{len(verdict.missing)} acknowledged but missing, {len(verdict.duplicated)} doubled, "
        f"{result.not_acknowledged} not acknowledged"
    )
    status = 0 if verdict.ok else 1
    results.write(as_result(stamp, args, result, status=status))
    if not verdict.ok:
        print("FAILED: acknowledged records were lost or doubled")
        return 1
    print("no acknowledged record lost")
    return 0


def as_result(
    stamp: results.Stamp, args: argparse.Namespace, measured: FailoverResult, *, status: int
) -> results.Result[results.FailoverRun]:
    """The JSON of one run (`benchmarks.results`). No baseline is measured: the goal is
    set by the session timeout."""
    session_s = measured.settings.session_timeout_ms / 1000
    median = statistics.median(measured.failovers)
    verdict = measured.verdict
    return results.Result[results.FailoverRun](
        benchmark="failover_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(
            args,
            settings=dataclasses.asdict(measured.settings),
            retry_backoff_ms=list(RETRY_BACKOFF_MS),
        ),
        baselines={},
        figures={
            "first_ack_median": results.Figure(
                label="kill -> first acks=all write on the new leader, median",
                unit="s",
                value=median,
            ),
            "first_ack_p90": results.Figure(
                label="kill -> first acks=all write on the new leader, p90",
                unit="s",
                value=_percentile(measured.failovers, 0.9),
            ),
            "elected_median": results.Figure(
                label="kill -> new leader in the Partition status, median",
                unit="s",
                value=statistics.median(measured.elections),
            ),
            "session_timeout": results.Figure(
                label="broker session timeout", unit="s", value=session_s
            ),
        },
        ratios={},
        goals=[
            results.Goal.judge(
                "median kill -> first acks=all write <= session timeout + 1 s",
                median,
                at_most=session_s + 1,
            ),
            results.Goal.judge(
                "acknowledged records lost or doubled",
                len(verdict.missing) + len(verdict.duplicated),
                at_most=0,
            ),
        ],
        rows=measured.runs,
        notes=[
            f"records: {verdict.acknowledged} acknowledged, {verdict.read} read back, "
            f"{len(verdict.missing)} missing, {len(verdict.duplicated)} doubled, "
            f"{measured.not_acknowledged} not acknowledged"
        ],
        status=status,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.failover_bench")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200.0, help="records per second")
    parser.add_argument(
        "--steady-s", type=float, default=2.0, help="seconds of steady writes before each kill"
    )
    parser.add_argument("--log-level", default="warning", help="of this process's own logs")
    args = parser.parse_args(argv)
    configure(args.log_level)
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
