"""Broker throughput and latency on three real broker processes: RF3, acks=all, fsync on.

Starts the embedded cluster (`epochlog_tools.devcluster.local`: the Kubernetes API
emulator, the real operator and three `epochlog broker` processes on loopback,
started through `epochlog_tools.harness`) under `--dir`, each broker with its own
data directory, and measures:

- produce throughput with acks=all for 100 B and 1 KiB records, with JSON
  bodies and with binary batches (`application/vnd.epochlog.batch`), as
  records/s and MiB/s of record values, next to raw `write` + `fdatasync`
  MiB/s on the same disk divided by 3 (every record is fsynced on three
  replicas), measured in the same run before and after the brokers' runs;
- produce latency p50/p99 of acks=all requests sent at a fixed rate of one
  tenth of the peak binary 1 KiB throughput;
- consume throughput from offset 0 to the high watermark, JSON and binary;
- all of it twice, on a cluster with TLS (the default: every client request and
  every replica fetch and heartbeat over TLS with client certificates) and on one
  in plaintext, one after the other in the same run, with the TLS/plaintext
  ratio of each figure.

The figures are also written to `build/bench/broker_bench.json` (`benchmarks.results`;
the baseline: raw write+fdatasync / 3).

Everything shares this machine's cores: the three brokers, the operator, the
API emulator and the load generator. Run with
`.venv/bin/python -m benchmarks.broker_bench [--dir DIR] [--seconds S]`.
`benchmarks.side_by_side` runs the same cluster (`bench_cluster`), produce runs
(`produce_runs`) and latency run (`latency_at`) next to Apache Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import random
import shutil
import statistics
import string
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import results
from benchmarks.log_bench import raw_write_fdatasync
from epochlog.logs import configure
from epochlog.objects import PartitionObject
from epochlog.protocol.batch import Record, encode_batch
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, unframe
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from epochlog_tools.devcluster.partitions import partition_manifest
from epochlog_tools.harness import READY_PATH, wait_healthy, wait_until

MiB = 1 << 20
REQUEST_BYTES = 256 * 1024
"""Record values per produce request in the throughput runs."""
CONCURRENCY = 16
"""Produce requests in flight in the throughput runs (`--concurrency`)."""
BODIES = 8
"""Distinct request bodies per run, so no layer sees the same bytes every time."""
BINARY_GOALS = {"100 B": 0.5, "1 KiB": 0.6}
"""Produce throughput goals for binary batches, as ratios to raw write+fdatasync / 3."""
LATENCY_P99_GOAL_MS = 5
"""acks=all p99 at one tenth of the peak."""
REPLICAS = (1, 2, 3)
"""Every partition on every broker, broker 1 its preferred leader."""


@dataclass
class Throughput:
    label: str
    records: int
    value_bytes: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.value_bytes / self.seconds / MiB


def throughput_row(t: Throughput, **more: str | int) -> results.Row:
    """One run in the JSON's terms (`benchmarks.results`)."""
    return {
        **more,
        "label": t.label.strip(),
        "records": t.records,
        "value_bytes": t.value_bytes,
        "seconds": t.seconds,
        "records_s": t.records_per_s,
        "mib_s": t.mib_per_s,
    }


def _values(size: int, count: int, rng: random.Random) -> list[str]:
    letters = string.ascii_letters + string.digits
    return ["".join(rng.choices(letters, k=size)) for _ in range(count)]


def json_bodies(size: int, rng: random.Random) -> list[tuple[bytes, dict[str, str], int]]:
    per = max(1, REQUEST_BYTES // size)
    out = []
    for _ in range(BODIES):
        body = json.dumps({"records": [{"value": v} for v in _values(size, per, rng)]}).encode()
        out.append((body, {"Content-Type": "application/json"}, per))
    return out


def binary_bodies(
    size: int, rng: random.Random, per: int | None = None
) -> list[tuple[bytes, dict[str, str], int]]:
    per = per or max(1, REQUEST_BYTES // size)
    out = []
    for _ in range(BODIES):
        records = [Record(v.encode()) for v in _values(size, per, rng)]
        raw = encode_batch(
            records, base_offset=0, leader_epoch=0, timestamp=int(time.time() * 1000)
        )
        out.append((bytes(raw), {"Content-Type": BATCH_CONTENT_TYPE}, per))
    return out


async def _post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> None:
    async with http.post(url, data=body, headers=headers, params={"acks": "all"}) as resp:
        payload = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"produce failed: HTTP {resp.status} {payload[:300]!r}")


async def produce_throughput(
    http: aiohttp.ClientSession,
    url: str,
    label: str,
    size: int,
    bodies: list[tuple[bytes, dict[str, str], int]],
    seconds: float,
    concurrency: int,
) -> Throughput:
    done = 0
    stop_at = 0.0

    async def worker(n: int) -> None:
        nonlocal done
        i = n
        while time.perf_counter() < stop_at:
            body, headers, count = bodies[i % len(bodies)]
            await _post(http, url, body, headers)
            if time.perf_counter() <= stop_at:
                done += count
            i += 1

    # Warm-up: connections, caches, ISR settled.
    stop_at = time.perf_counter() + 0.5
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    done = 0
    start = time.perf_counter()
    stop_at = start + seconds
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    elapsed = time.perf_counter() - start
    return Throughput(label, done, done * size, elapsed)


async def produce_latency(
    http: aiohttp.ClientSession,
    url: str,
    rate_records: float,
    size: int,
    seconds: float,
    rng: random.Random,
) -> tuple[list[float], int, float]:
    """Open loop: requests go out on a fixed schedule whatever the answers do."""
    per = max(1, round(rate_records / 100))  # about 100 requests per second
    bodies = binary_bodies(size, rng, per)
    interval = per / rate_records
    latencies: list[float] = []

    async def one(body: bytes, headers: dict[str, str]) -> None:
        t0 = time.perf_counter()
        await _post(http, url, body, headers)
        latencies.append(time.perf_counter() - t0)

    tasks = []
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) - start < seconds:
        due = start + n * interval
        if due > now:
            await asyncio.sleep(due - now)
        body, headers, _ = bodies[n % len(bodies)]
        tasks.append(asyncio.create_task(one(body, headers)))
        n += 1
    await asyncio.gather(*tasks)
    return latencies, per, n / seconds


async def consume(http: aiohttp.ClientSession, url: str, binary: bool) -> Throughput:
    offset = 0
    records = 0
    value_bytes = 0
    start = time.perf_counter()
    while True:
        if binary:
            async with http.get(
                url,
                params={"offset": offset, "maxBytes": 4 * MiB},
                headers={"Accept": BATCH_CONTENT_TYPE},
            ) as resp:
                raw = await resp.read()
            header, batches = unframe(raw)
            got = [
                r
                for b in batches
                for r in b.records()
                if offset <= r.offset < header["highWatermark"]
            ]
            if not got:
                break
            records += len(got)
            value_bytes += sum(len(r.value or b"") for r in got)
            offset = got[-1].offset + 1
        else:
            async with http.get(
                url, params={"offset": offset, "maxRecords": 10_000, "maxBytes": 4 * MiB}
            ) as resp:
                answer: dict[str, Any] = await resp.json()
            recs = answer["records"]
            if not recs:
                break
            records += len(recs)
            value_bytes += sum(len(r["value"]) for r in recs)
            offset = recs[-1]["offset"] + 1
    return Throughput(
        "binary" if binary else "JSON", records, value_bytes, time.perf_counter() - start
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def run(args: argparse.Namespace) -> int:
    stamp = results.Stamp.now()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = random.Random(7)
    raw_path = str(root / "raw.bin")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    raws = [raw_write_fdatasync(raw_path, args.raw_mib)]
    print(f"raw write + fdatasync (1 MiB writes): {raws[0]:.1f} MiB/s", flush=True)

    os.environ["EPOCHLOG_LOG_LEVEL"] = "warning"
    runs: dict[str, Run] = {}
    for mode, tls in (("TLS", True), ("plaintext", False)):
        print(f"\n{mode}:", flush=True)
        async with bench_cluster(root / f"cluster-{mode}", tls=tls) as (http, url, lat_url):
            runs[mode] = Run(*await _measure(args, http, url, lat_url, rng))
    raws.append(raw_write_fdatasync(raw_path, args.raw_mib))
    for mode, r in runs.items():
        print(f"\n===== {mode} =====")
        _report(args, raws, r.results, r.latencies, r.per, r.req_rate, r.reads)
    _compare(runs["TLS"], runs["plaintext"])
    results.write(as_result(stamp, args, raws, runs))
    shutil.rmtree(root, ignore_errors=True)
    # Figures, not a gate: throughput moves with the disk and with what else runs here.
    return 0


@contextlib.asynccontextmanager
async def bench_cluster(
    state_dir: Path, *, tls: bool
) -> AsyncIterator[tuple[aiohttp.ClientSession, str, str]]:
    """A fresh embedded cluster in `state_dir` (TLS or plaintext) with the partitions
    `bench-0` and `latency-0` on every broker and in sync: an HTTP session that speaks to
    it, and the record URLs of the two on their leaders. The cluster stops at the end."""
    cluster = LocalCluster(
        state_dir, brokers=3, settings=DevSettings(checkpoint_interval_ms=1000), tls=tls
    )
    try:
        await cluster.up(example_partitions=False)
        url, lat_url = await _partitions(cluster)
        connector = aiohttp.TCPConnector(ssl=cluster.security.client_ssl())
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=60), connector=connector
        ) as http:
            yield http, url, lat_url
    finally:
        await cluster.down()


@dataclass
class Run:
    """The figures of one cluster."""

    results: list[Throughput]
    latencies: list[float]
    per: int
    req_rate: float
    reads: list[Throughput]


def _binary_goal(label: str) -> float | None:
    if "binary" not in label:
        return None
    return BINARY_GOALS["100 B" if label.lstrip().startswith("100") else "1 KiB"]


def as_result(
    stamp: results.Stamp, args: argparse.Namespace, raws: list[float], runs: dict[str, Run]
) -> results.Result[results.Row]:
    """The JSON of one run (`benchmarks.results`): produce over raw write+fdatasync / 3 (the
    baseline), and TLS over plaintext."""
    third = statistics.median(raws) / 3
    ratios: dict[str, results.Ratio] = {}
    goals: list[results.Goal] = []
    figures: dict[str, results.Figure] = {}
    rows: list[results.Row] = []
    for mode, r in runs.items():
        for t in r.results:
            key = f"{mode}_{t.label.strip().replace(' ', '_')}"
            ratio = t.mib_per_s / third
            ratios[key] = results.Ratio(
                label=f"{mode} produce {t.label.strip()} / (raw / 3)",
                value=ratio,
                baseline="raw_third",
            )
            want = _binary_goal(t.label)
            if want is not None:
                goals.append(
                    results.Goal.judge(
                        f"{mode} produce {t.label.strip()} / (raw / 3)", ratio, at_least=want
                    )
                )
            rows.append(throughput_row(t, mode=mode, kind="produce"))
        rows.extend(throughput_row(t, mode=mode, kind="consume") for t in r.reads)
        p50, p99 = (percentile(r.latencies, q) * 1000 for q in (50, 99))
        figures[f"{mode}_latency_p50"] = results.Figure(
            label=f"{mode} produce latency p50 at a tenth of the peak", unit="ms", value=p50
        )
        figures[f"{mode}_latency_p99"] = results.Figure(
            label=f"{mode} produce latency p99 at a tenth of the peak", unit="ms", value=p99
        )
        goals.append(
            results.Goal.judge(f"{mode} latency p99, ms", p99, at_most=LATENCY_P99_GOAL_MS)
        )
    tls, plain = runs["TLS"], runs["plaintext"]
    for a, b in zip(tls.results + tls.reads, plain.results + plain.reads, strict=True):
        kind = "produce" if a in tls.results else "consume"
        ratios[f"tls_over_plaintext_{kind}_{a.label.strip().replace(' ', '_')}"] = results.Ratio(
            label=f"{kind} {a.label.strip()}: TLS / plaintext, records/s",
            value=a.records_per_s / b.records_per_s,
            baseline=None,
        )
    return results.Result[results.Row](
        benchmark="broker_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(args, leave_out=("dir",)),
        baselines={
            "raw_third": results.Baseline(
                label="raw write + fdatasync of 1 MiB blocks on the same disk, / 3",
                unit="MiB/s",
                value=third,
                runs=[x / 3 for x in raws],
            )
        },
        figures=figures,
        ratios=ratios,
        goals=goals,
        rows=rows,
        notes=[],
        status=0,
    )


def _compare(tls: Run, plain: Run) -> None:
    print("\nTLS next to plaintext, same run (ratio TLS / plaintext):")
    for a, b in zip(tls.results + tls.reads, plain.results + plain.reads, strict=True):
        kind = "produce" if a in tls.results else "consume"
        print(
            f"  {kind} {a.label:<13} {a.records_per_s:10.0f} vs {b.records_per_s:10.0f} "
            f"records/s   ratio {a.records_per_s / b.records_per_s:5.2f}"
        )
    for q in (50, 99):
        x, y = percentile(tls.latencies, q) * 1000, percentile(plain.latencies, q) * 1000
        print(f"  latency p{q:<2}          {x:8.2f} vs {y:8.2f} ms        ratio {x / y:5.2f}")


async def _partitions(cluster: LocalCluster) -> tuple[str, str]:
    """bench-0 and latency-0 (latency is measured on a partition of its own, with a fresh
    log); their record URLs on their leaders."""
    urls = await ready_partitions(
        cluster,
        [
            partition_manifest(topic, 0, replica_lag_time_max_ms=10_000, replicas=REPLICAS)
            for topic in ("bench", "latency")
        ],
    )
    return urls["bench-0"], urls["latency-0"]


async def ready_partitions(
    cluster: LocalCluster, manifests: Sequence[PartitionObject]
) -> dict[str, str]:
    """Apply `manifests` (Partitions on `REPLICAS`) and wait until every replica is ready
    and in the ISR; the record URL of each on its leader."""
    leaders: dict[str, int] = {}
    for manifest in manifests:
        name = manifest.metadata.name
        assert name is not None
        await cluster.apply(manifest)
        status = await cluster.wait_leader(name, timeout=cluster.settings.startup_timeout_s)
        await cluster.wait_serving(name, status)
        assert status.leader is not None
        leaders[name] = status.leader
    for b in REPLICAS:
        info = cluster.processes[f"broker-{b}"]
        await wait_healthy(info.process, cluster.probe_url(info.name) + READY_PATH)

    async def full_isr() -> bool:
        statuses = [(await cluster.partition(name)).status for name in leaders]
        return all(s is not None and len(s.isr) == len(REPLICAS) for s in statuses)

    await wait_until(full_isr, "all three replicas in the ISR", interval_s=0.1)
    return {
        name: f"{cluster.broker_url(leader)}/v1/partitions/{name}/records"
        for name, leader in leaders.items()
    }


async def _measure(
    args: argparse.Namespace,
    http: aiohttp.ClientSession,
    url: str,
    lat_url: str,
    rng: random.Random,
) -> tuple[list[Throughput], list[float], int, float, list[Throughput]]:
    """Produce throughput, then latency at a tenth of the peak, then consume throughput."""
    results = await produce_runs(
        http, url, rng, (100, 1024), ("JSON", "binary"), args.seconds, args.concurrency
    )
    peak = next(t for t in results if t.label.strip() == "1024 B binary")
    latencies, per, req_rate = await latency_at(http, lat_url, peak, 2 * args.seconds, rng)
    reads = [await consume(http, url, binary=False), await consume(http, url, binary=True)]
    return results, latencies, per, req_rate, reads


BODY_MAKERS = {"JSON": json_bodies, "binary": binary_bodies}


async def produce_runs(
    http: aiohttp.ClientSession,
    url: str,
    rng: random.Random,
    sizes: Sequence[int],
    formats: Sequence[str],
    seconds: float,
    concurrency: int,
    say: Callable[[str], None] | None = None,
) -> list[Throughput]:
    """One produce throughput run per record size and body format ("JSON", "binary"), in
    that order, each of `seconds` after a warm-up, with `concurrency` requests of
    `REQUEST_BYTES` of values in flight; `say` gets a line per run (default: stdout)."""
    say = say or functools.partial(print, flush=True)
    results: list[Throughput] = []
    for size in sizes:
        for fmt in formats:
            bodies = BODY_MAKERS[fmt](size, rng)
            label = f"{size:>4} B {fmt}"
            t = await produce_throughput(http, url, label, size, bodies, seconds, concurrency)
            results.append(t)
            say(f"  produce {label:<12} {t.records_per_s:10.0f} records/s {t.mib_per_s:8.1f} MiB/s")
    return results


async def latency_at(
    http: aiohttp.ClientSession,
    url: str,
    peak: Throughput,
    seconds: float,
    rng: random.Random,
) -> tuple[list[float], int, float]:
    """acks=all latencies of 1 KiB records sent at a tenth of `peak`'s records/s for
    `seconds` (see `produce_latency`), once the load generator's garbage is collected and
    the disk settled."""
    gc.collect()
    await asyncio.sleep(2)
    return await produce_latency(http, url, peak.records_per_s / 10, 1024, seconds, rng)


def _report(
    args: argparse.Namespace,
    raws: list[float],
    results: list[Throughput],
    latencies: list[float],
    per: int,
    req_rate: float,
    reads: list[Throughput],
) -> None:
    raw = statistics.median(raws)
    third = raw / 3
    peak = next(t for t in results if t.label.strip() == "1024 B binary")

    print()
    print(
        "Broker produce, RF3 acks=all, fsync on every replica (3 brokers on this machine), "
        f"{args.concurrency} requests of {REQUEST_BYTES // 1024} KiB in flight:"
    )
    runs = ", ".join(f"{r:.0f}" for r in raws)
    print(f"  raw write + fdatasync      {raw:8.1f} MiB/s (runs: {runs})")
    print(f"  raw / 3                    {third:8.1f} MiB/s")
    for t in results:
        ratio = t.mib_per_s / third
        goal = ""
        if "binary" in t.label:
            want = BINARY_GOALS["100 B" if t.label.lstrip().startswith("100") else "1 KiB"]
            goal = f"  (goal >= {want:.2f}: {'met' if ratio >= want else 'NOT met'})"
        print(
            f"  {t.label:<13} {t.records_per_s:10.0f} records/s {t.mib_per_s:8.1f} MiB/s"
            f"   ratio {ratio:5.2f}{goal}"
        )
    p50 = percentile(latencies, 50) * 1000
    p99 = percentile(latencies, 99) * 1000
    print()
    print(
        f"Produce latency at one tenth of peak ({peak.records_per_s / 10:.0f} records/s of 1 KiB, "
        f"{per} records per request, {req_rate:.0f} requests/s, {len(latencies)} requests):"
    )
    verdict = "met" if p99 <= LATENCY_P99_GOAL_MS else "NOT met"
    print(
        f"  p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
        f"(goal p99 <= {LATENCY_P99_GOAL_MS} ms: {verdict})"
    )
    print()
    print("Consume from offset 0 to the high watermark (one reader):")
    for t in reads:
        print(
            f"  {t.label:<7} {t.records_per_s:10.0f} records/s {t.mib_per_s:8.1f} MiB/s "
            f"({t.records} records)"
        )
    print(
        f"\nload average at end: {os.getloadavg()[0]:.2f} (the brokers, the load and anything else)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=".state/broker-bench", help="directory on the disk to use")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each run")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help="produce requests of 256 KiB in flight",
    )
    parser.add_argument("--raw-mib", type=int, default=128, help="MiB per raw baseline run")
    args = parser.parse_args(argv)
    configure("warning")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
