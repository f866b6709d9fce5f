"""Reassignment on the embedded cluster: the time to move a replica holding 1 GiB to a new broker.

Starts the embedded cluster (`epochlog_tools.devcluster.local`: API emulator,
operator, four brokers as real processes) with the dev default timings, fills a
Partition on brokers 1, 2, 3 with `--mib` MiB (acks=all, binary batches of
large records), then sets its replicas to 1, 2, 4: broker 4 copies the whole
log as a follower, joins the ISR, and broker 3 leaves and deletes its copy.
Measured: from the spec change to the status showing the move done (replicas
1, 2, 4, Reassigning False), and, in the same run, a raw copy of the leader's
partition directory (read, write, fdatasync) as the baseline: what the disk
alone takes for the same bytes. No throttle (`--reassignment-throttle-bytes`
0). At the end broker 4's log must end where the leader's does; the exit
status is 1 otherwise. The figures are also written to
`build/bench/reassign_bench.json` (`benchmarks.results`).

Run with `make bench` or `python -m benchmarks.reassign_bench [--mib N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import results
from epochlog.client import Client
from epochlog.client.producer import Producer
from epochlog.logs import configure
from epochlog.resources import ConditionStatus, ConditionType, PartitionStatus
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.partitions import partition_manifest

TOPIC = "reassign"
NAME = f"{TOPIC}-0"
RECORD_BYTES = 256 * 1024
MIB = 1 << 20


def raw_copy(src: Path, dst: Path) -> int:
    """Copy every file of `src` into `dst` and fdatasync each: the bytes copied."""
    dst.mkdir(parents=True, exist_ok=True)
    total = 0
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        with f.open("rb") as r, (dst / f.name).open("wb") as w:
            while chunk := r.read(4 * MIB):
                w.write(chunk)
                total += len(chunk)
            w.flush()
            os.fdatasync(w.fileno())
    return total


def done(s: PartitionStatus | None, replicas: tuple[int, ...]) -> bool:
    if s is None:
        return False
    cond = s.condition(ConditionType.REASSIGNING)
    return (
        s.replicas == replicas
        and set(s.isr) == set(replicas)
        and cond is not None
        and cond.status is ConditionStatus.FALSE
    )


async def fill(cluster: LocalCluster, mib: int) -> int:
    client = Client(cluster.bootstrap, request_timeout_ms=30_000, credentials=cluster.credentials)
    producer = Producer(client, acks="all", linger_ms=5, batch_size=4 * MIB, binary=True)
    value = os.urandom(RECORD_BYTES // 2).hex()
    records = mib * MIB // RECORD_BYTES
    try:
        pending = []
        for i in range(records):
            pending.append(await producer.send(NAME, f"{i:08d}{value[8:]}"))
            if len(pending) >= 64:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        await producer.flush()
    finally:
        await producer.close()
        await client.close()
    return records


async def bench(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    settings = DevSettings()
    root = Path(tempfile.mkdtemp(prefix="epochlog-reassign-bench-"))
    cluster = LocalCluster(root, brokers=4, settings=settings)
    print(f"reassignment benchmark on the embedded cluster (4 brokers): {args.mib} MiB moved")
    try:
        await cluster.up(example_partitions=False)
        await cluster.apply(
            partition_manifest(
                TOPIC,
                0,
                replicas=(1, 2, 3),
                replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            )
        )
        status = await cluster.wait_leader(NAME)
        await cluster.wait_serving(NAME, status)
        started = time.monotonic()
        records = await fill(cluster, args.mib)
        filled = time.monotonic() - started
        print(f"filled: {records} records of {RECORD_BYTES // 1024} KiB in {filled:.1f} s")

        leader = (await cluster.wait_leader(NAME)).leader
        src = root / "cluster-copy-src"
        directory = Path(cluster.processes[f"broker-{leader}"].data_dir or "") / NAME
        started = time.monotonic()
        copied = raw_copy(directory, src)
        raw_s = time.monotonic() - started
        shutil.rmtree(src, ignore_errors=True)

        target = (1, 2, 4)
        started = time.monotonic()
        await cluster.apply(
            partition_manifest(
                TOPIC, 0, replicas=target, replica_lag_time_max_ms=settings.replica_lag_time_max_ms
            )
        )
        while not done((await cluster.partition(NAME)).status, target):
            if time.monotonic() - started > args.timeout_s:
                print(f"FAILED: not moved within {args.timeout_s:.0f} s")
                return 1
            await asyncio.sleep(0.05)
        moved_s = time.monotonic() - started
        final = (await cluster.partition(NAME)).status
        assert final is not None
        ends = {b: final.log_end_offsets.get(b) for b in target}
    finally:
        await cluster.down()
        shutil.rmtree(root, ignore_errors=True)

    mib_copied = copied / MIB
    print(
        f"raw copy of the leader's directory: {mib_copied:.0f} MiB in {raw_s:.2f} s "
        f"({mib_copied / raw_s:.0f} MiB/s)"
    )
    print(
        f"reassignment (spec change -> Reassigning False): {moved_s:.2f} s "
        f"({mib_copied / moved_s:.0f} MiB/s), {moved_s / raw_s:.1f}x the raw copy"
    )
    print(f"log end offsets at the end: {ends}")
    exit_status = 0 if len(set(ends.values())) == 1 else 1
    moved = Moved(records, filled, copied, raw_s, moved_s, ends)
    results.write(as_result(stamp, args, moved, exit_status))
    if exit_status:
        print("FAILED: the new replica does not end where the others do")
        return 1
    return 0


@dataclass(frozen=True)
class Moved:
    """What `bench` measured, for `as_result`."""

    records: int
    filled_s: float
    copied: int
    raw_s: float
    moved_s: float
    ends: dict[int, int | None]


def as_result(
    stamp: results.Stamp, args: argparse.Namespace, m: Moved, status: int
) -> results.Result[results.Row]:
    """The JSON of one run (`benchmarks.results`): the raw copy is the baseline."""
    mib = m.copied / MIB
    return results.Result[results.Row](
        benchmark="reassign_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(args),
        baselines={
            "raw_copy": results.Baseline(
                label="raw copy of the leader's partition directory (read, write, fdatasync)",
                unit="s",
                value=m.raw_s,
                runs=[m.raw_s],
            )
        },
        figures={
            "reassignment": results.Figure(
                label="reassignment, spec change -> Reassigning False", unit="s", value=m.moved_s
            ),
            "copied": results.Figure(label="bytes moved", unit="MiB", value=mib),
            "filled": results.Figure(label="filling the partition", unit="s", value=m.filled_s),
        },
        ratios={
            "reassignment_over_raw_copy": results.Ratio(
                label="reassignment / raw copy, time",
                value=m.moved_s / m.raw_s,
                baseline="raw_copy",
            )
        },
        goals=[
            results.Goal.judge(
                "brokers whose log end offset differs at the end",
                len(set(m.ends.values())) - 1,
                at_most=0,
            )
        ],
        rows=[{"broker": b, "log_end_offset": end} for b, end in m.ends.items()],
        notes=[f"{m.records} records of {RECORD_BYTES // 1024} KiB"],
        status=status,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reassign_bench")
    parser.add_argument("--mib", type=int, default=1024, help="MiB in the partition moved")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--log-level", default="warning", help="of this process's own logs")
    args = parser.parse_args(argv)
    configure(args.log_level)
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
