"""Broker throughput and latency on three real broker processes: RF3, acks=all, fsync on.

Starts the test controller (the real ControllerCore) in this process and three
`epochlog broker` processes on loopback, each with its own data directory
under `--dir`, and measures:

- produce throughput with acks=all for 100 B and 1 KiB records, with JSON
  bodies and with binary batches (`application/vnd.epochlog.batch`), as
  records/s and MiB/s of record values, next to raw `write` + `fdatasync`
  MiB/s on the same disk divided by 3 (every record is fsynced on three
  replicas), measured in the same run before and after the brokers' runs;
- produce latency p50/p99 of acks=all requests sent at a fixed rate of one
  tenth of the peak binary 1 KiB throughput;
- consume throughput from offset 0 to the high watermark, JSON and binary.

Everything shares this machine's cores: the three brokers, the controller and
the load generator. Run with
`.venv/bin/python -m benchmarks.broker_bench [--dir DIR] [--seconds S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import statistics
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.log_bench import raw_write_fdatasync
from epochlog.logs import configure
from epochlog.protocol.batch import Record, encode_batch
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, unframe
from tests.broker.cluster import Cluster
from tests.broker.controller import spec

MiB = 1 << 20
REQUEST_BYTES = 256 * 1024
"""Record values per produce request in the throughput runs."""
BODIES = 8
"""Distinct request bodies per run, so no layer sees the same bytes every time."""


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
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = random.Random(7)
    raw_path = str(root / "raw.bin")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    raws = [raw_write_fdatasync(raw_path, args.raw_mib)]
    print(f"raw write + fdatasync (1 MiB writes): {raws[0]:.1f} MiB/s", flush=True)

    os.environ["EPOCHLOG_LOG_LEVEL"] = "warning"
    results: list[Throughput] = []
    # Latency is measured on a partition of its own, with a fresh log.
    partitions = [spec("bench", 0), spec("latency", 0)]
    async with Cluster(root / "cluster", partitions, heartbeat_interval_ms=500) as c:
        leader = await c.wait_leader("bench-0", timeout_s=30)
        lat_leader = await c.wait_leader("latency-0", timeout_s=30)
        await c.wait_ready(timeout_s=30)

        def full_isr() -> bool:
            return all(
                (status := c.controller.status(p.name)) is not None and len(status.isr) == 3
                for p in partitions
            )

        await c.wait_until(full_isr, 30, "all three replicas in the ISR")
        url = c.brokers[leader].url + "/v1/partitions/bench-0/records"
        http = c.http
        for size in (100, 1024):
            for fmt, make in (("JSON", json_bodies), ("binary", binary_bodies)):
                bodies = make(size, rng)
                label = f"{size:>4} B {fmt}"
                t = await produce_throughput(
                    http, url, label, size, bodies, args.seconds, args.concurrency
                )
                results.append(t)
                print(
                    f"  produce {label:<12} {t.records_per_s:10.0f} records/s "
                    f"{t.mib_per_s:8.1f} MiB/s",
                    flush=True,
                )
        peak = next(t for t in results if t.label.strip() == "1024 B binary")
        # Let the load generator's garbage go and the disk settle first.
        gc.collect()
        await asyncio.sleep(2)
        lat_url = c.brokers[lat_leader].url + "/v1/partitions/latency-0/records"
        latencies, per, req_rate = await produce_latency(
            http, lat_url, peak.records_per_s / 10, 1024, 2 * args.seconds, rng
        )
        reads = [await consume(http, url, binary=False), await consume(http, url, binary=True)]
    raws.append(raw_write_fdatasync(raw_path, args.raw_mib))
    raw = statistics.median(raws)
    third = raw / 3

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
            goal = f"  (goal >= 0.30: {'met' if ratio >= 0.3 else 'NOT met'})"
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
    verdict = "met" if p99 <= 15 else "NOT met"
    print(f"  p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   (goal p99 <= 15 ms: {verdict})")
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
    shutil.rmtree(root, ignore_errors=True)
    # Figures, not a gate: throughput moves with the disk and with what else runs here.
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=".state/broker-bench", help="directory on the disk to use")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each run")
    parser.add_argument(
        "--concurrency", type=int, default=16, help="produce requests of 256 KiB in flight"
    )
    parser.add_argument("--raw-mib", type=int, default=128, help="MiB per raw baseline run")
    args = parser.parse_args(argv)
    configure("warning")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
