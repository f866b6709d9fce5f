"""What the named real-process scenarios share: Partitions with a fixed replica order, waiting
on the status, the brokers' own accounts (log events, checkpoint files, logs on disk)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from epochlog.devcluster.local import LocalCluster, partition_manifest
from epochlog.devcluster.nemesis import read_partition_dir
from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint
from epochlog_broker.log.fs import OsFileSystem

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


async def create_partition(
    cluster: LocalCluster, name: str, replicas: Sequence[int], *, min_insync_replicas: int = 2
) -> dict[str, Any]:
    """A Partition whose replica order (preferred leader first) fixes who is elected next;
    returns its status once the first replica leads and serves it."""
    topic, _, index = name.rpartition("-")
    manifest = partition_manifest(
        topic,
        int(index),
        min_insync_replicas=min_insync_replicas,
        replica_lag_time_max_ms=cluster.settings.replica_lag_time_max_ms,
    )
    manifest["spec"]["replicas"] = list(replicas)
    await cluster.apply(manifest)
    status = await cluster.wait_leader(name)
    assert status["leader"] == replicas[0], status
    await cluster.wait_serving(name, status)
    return status


async def until(
    check: Callable[[], Awaitable[Any]], timeout_s: float, what: str, interval_s: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)


async def status_of(cluster: LocalCluster, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (await cluster.partition(name)).get("status") or {}
    return status


def log_size(cluster: LocalCluster, process: str) -> int:
    path = Path(cluster.processes[process].log)
    return path.stat().st_size if path.exists() else 0


def events(
    cluster: LocalCluster, process: str, event: str, *, since: int = 0, partition: str | None = None
) -> list[dict[str, str]]:
    """The process's log lines for `event` (key=value lines), from byte `since` on."""
    with open(cluster.processes[process].log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    out = []
    for line in text.splitlines():
        fields = {k: v.strip('"') for k, v in _PAIR.findall(line)}
        if fields.get("event") != event:
            continue
        if partition is not None and fields.get("partition") != partition:
            continue
        out.append(fields)
    return out


def data_dir(cluster: LocalCluster, broker: int) -> Path:
    d = cluster.processes[f"broker-{broker}"].data_dir
    assert d is not None
    return Path(d)


def checkpointed_hw(cluster: LocalCluster, broker: int, name: str) -> int | None:
    """The HW of `name` in the broker's replication-offset-checkpoint file."""
    return HighWatermarkCheckpoint.load(OsFileSystem(), str(data_dir(cluster, broker))).get(name)


def disk_log(cluster: LocalCluster, broker: int, name: str) -> list[tuple[int, int, str]]:
    """(offset, leaderEpoch, value) of the broker's copy of `name`, read from disk."""
    directory = data_dir(cluster, broker) / name
    return read_partition_dir(OsFileSystem(), str(directory)) if directory.is_dir() else []


async def gone(cluster: LocalCluster, process: str, timeout_s: float = 10) -> None:
    async def dead() -> bool:
        return not cluster.processes[process].alive

    await until(dead, timeout_s, f"{process} to exit")
