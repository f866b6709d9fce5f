"""What one Partition status write costs the Kubernetes API emulator, next to an empty request.

`make demo` users with many Partitions run the operator on the emulator, which
answers every status write the operator makes. The bench starts the emulator
in this process (`epochlog_tools.kubeapi.apiserver.ApiServer`, the repo's CRDs),
creates `--partitions` Partitions, keeps a watch open on them (as the operator
and kubectl do), and then times, one request at a time over one keep-alive
connection:

- baseline: `GET /version`, the cheapest request the emulator serves (HTTP,
  routing, JSON), measured in the same run;
- status write: the operator's `PUT .../partitions/{name}/status` with a full
  status (leader, epochs, ISR, log end offsets, conditions), each write a new
  high watermark so that every one is a change the watch delivers.

It prints the mean and p99 of each, the ratio of the two, and the CPU time of
this process per write (client and emulator share it: the ratio is the figure
to compare across machines). `--profile` adds the emulator's top functions by
cumulative time over the writes (cProfile).

Run with `python -m benchmarks.emulator_bench [--partitions 100] [--writes 2000]
[--profile]`.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from epochlog.objects import API_VERSION
from epochlog.resources import (
    Condition,
    ConditionStatus,
    ConditionType,
    EpochHistoryEntry,
    PartitionSpec,
    PartitionStatus,
)
from epochlog_tools.kubeapi.apiserver import ApiServer

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "default"
PLURAL_PATH = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/partitions"


def partition(i: int) -> dict[str, Any]:
    spec = PartitionSpec(
        topic="bench",
        partition=i,
        replicas=(1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3),
        replication_factor=3,
        min_insync_replicas=2,
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "Partition",
        "metadata": {"name": f"bench-{i}", "namespace": NAMESPACE},
        "spec": spec.model_dump(mode="json", exclude_none=True),
    }


def status(i: int, hw: int) -> dict[str, Any]:
    """A full status as the operator writes it, with high watermark `hw`."""
    replicas = (1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3)
    when = "2026-01-01T00:00:00.000Z"
    elected_ms = 1_767_225_600_000  # the same instant, in ms since the Unix epoch
    model = PartitionStatus(
        leader=replicas[0],
        leader_epoch=3,
        partition_epoch=7,
        isr=replicas,
        isr_broker_epochs=dict.fromkeys(replicas, 4),
        replicas=replicas,
        high_watermark=hw,
        high_watermark_time=when,
        log_end_offsets=dict.fromkeys(replicas, hw),
        lag_ms=dict.fromkeys(replicas[1:], 0),
        epoch_history=(
            EpochHistoryEntry(epoch=1, leader=replicas[1], start_offset=0, time=elected_ms),
            EpochHistoryEntry(epoch=3, leader=replicas[0], start_offset=10, time=elected_ms),
        ),
        conditions=(
            Condition(
                type=ConditionType.READY,
                status=ConditionStatus.TRUE,
                reason="Led",
                message=f"leader {replicas[0]}",
                last_transition_time=when,
                observed_generation=1,
            ),
        ),
        observed_generation=1,
    )
    return model.model_dump(mode="json", exclude_defaults=True)


async def _watch(session: aiohttp.ClientSession, url: str, seen: list[int]) -> None:
    async with session.get(url + PLURAL_PATH, params={"watch": "true"}) as rsp:
        async for _line in rsp.content:
            seen[0] += 1


def _quantiles(samples: list[float]) -> tuple[float, float]:
    return statistics.fmean(samples), statistics.quantiles(samples, n=100)[98]


async def run(partitions: int, writes: int, profile: bool) -> None:
    async with ApiServer(crds=ROOT / "crds") as api, aiohttp.ClientSession() as session:
        url = api.url
        for i in range(partitions):
            async with session.post(url + PLURAL_PATH, json=partition(i)) as rsp:
                assert rsp.status == 201, await rsp.text()
        seen = [0]
        watcher = asyncio.create_task(_watch(session, url, seen))
        versions: dict[int, str] = {}
        for i in range(partitions):
            async with session.get(f"{url}{PLURAL_PATH}/bench-{i}") as rsp:
                versions[i] = (await rsp.json())["metadata"]["resourceVersion"]

        baseline: list[float] = []
        for _ in range(writes):
            began = time.perf_counter()
            async with session.get(url + "/version") as rsp:
                await rsp.read()
            baseline.append(time.perf_counter() - began)

        profiler = cProfile.Profile() if profile else None
        timings: list[float] = []
        cpu_began = time.process_time()
        if profiler is not None:
            profiler.enable()
        for n in range(writes):
            i = n % partitions
            body = {
                **partition(i),
                "metadata": {
                    "name": f"bench-{i}",
                    "namespace": NAMESPACE,
                    "resourceVersion": versions[i],
                },
                "status": status(i, n),
            }
            began = time.perf_counter()
            async with session.put(
                f"{url}{PLURAL_PATH}/bench-{i}/status",
                data=json.dumps(body),
                headers={"Content-Type": "application/json"},
            ) as rsp:
                answer = await rsp.json()
            timings.append(time.perf_counter() - began)
            assert rsp.status == 200, answer
            versions[i] = answer["metadata"]["resourceVersion"]
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - cpu_began
        watcher.cancel()

    base_mean, base_p99 = _quantiles(baseline)
    mean, p99 = _quantiles(timings)
    print(f"emulator, {partitions} Partitions, one watch, {writes} requests each")
    print(f"  baseline GET /version:  mean {base_mean * 1000:.2f} ms  p99 {base_p99 * 1000:.2f} ms")
    print(f"  status write (PUT):     mean {mean * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms")
    print(f"  ratio to the baseline:  {mean / base_mean:.1f}x")
    print(f"  CPU per write (client and emulator): {cpu / writes * 1000:.2f} ms")
    print(f"  watch events seen: {seen[0]}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    asyncio.run(run(args.partitions, args.writes, args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
