"""What the named real-process scenarios share: Partitions with a fixed replica order, waiting
on the status, the brokers' own accounts (log events, checkpoint files, logs on disk)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from epochlog.protocol.bodies import HostedPartition
from epochlog.resources import PartitionStatus
from epochlog.security.pki import DevPki
from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint
from epochlog_broker.log.fs import OsFileSystem
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.nemesis import Workload, read_partition_dir
from epochlog_tools.devcluster.partitions import (
    NAMESPACE,
    partition_manifest,
    partition_path,
)
from tests import waiting
from tests.e2e.conftest import e2e_settings

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


async def create_partition(
    cluster: LocalCluster,
    name: str,
    replicas: Sequence[int],
    *,
    min_insync_replicas: int = 2,
    unclean_leader_election: bool = False,
) -> PartitionStatus:
    """A Partition whose replica order (preferred leader first) fixes who is elected next;
    returns its status once the first replica leads and serves it."""
    topic, _, index = name.rpartition("-")
    manifest = partition_manifest(
        topic,
        int(index),
        replication_factor=len(replicas),
        min_insync_replicas=min_insync_replicas,
        replica_lag_time_max_ms=cluster.settings.replica_lag_time_max_ms,
        replicas=replicas,
        unclean_leader_election=unclean_leader_election,
    )
    await cluster.apply(manifest)
    status = await cluster.wait_leader(name)
    assert status.leader == replicas[0], status
    await cluster.wait_serving(name, status)
    return status


async def until(
    check: Callable[[], Awaitable[Any]], timeout_s: float, what: str, interval_s: float = 0.05
) -> Any:
    """Until `check` returns something truthy; a note after `timeout_s` (tests/waiting.py)."""
    return await waiting.until(check, what, timeout_s, interval_s)


async def status_of(cluster: LocalCluster, name: str) -> PartitionStatus:
    """The Partition's status (an empty one before the operator first writes it)."""
    return (await cluster.partition(name)).status or PartitionStatus()


async def hosted(w: Workload, broker: int, name: str) -> HostedPartition | None:
    """`broker`'s own account of its replica of `name` (None: not hosted, or no answer)."""
    return (await w.describe(broker) or {}).get(name)


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


async def delete_partition(cluster: LocalCluster, name: str, timeout_s: float = 20) -> None:
    """DELETE the Partition through the API and wait until it is gone (after any finalizer)."""
    path = cluster.api_url + partition_path(name)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        async with http.delete(path) as rsp:
            assert rsp.status in (200, 202), await rsp.text()

        async def deleted() -> bool:
            async with http.get(path) as rsp:
                return rsp.status == 404

        await until(deleted, timeout_s, f"{name} to be deleted")


async def partition_events(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    """The Kubernetes Events posted about the Partition `name`."""
    url = f"{cluster.api_url}/api/v1/namespaces/{NAMESPACE}/events"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
        http.get(url, params={"fieldSelector": f"involvedObject.name={name}"}) as rsp,
    ):
        assert rsp.status == 200, await rsp.text()
        items: list[dict[str, Any]] = (await rsp.json()).get("items", [])
        return items


class StatusPoll:
    """Every distinct status of one Partition seen by polling the API, in order (across a
    delete and re-create: the name is what is polled)."""

    def __init__(self, cluster: LocalCluster, name: str, interval_s: float = 0.05) -> None:
        self.cluster, self.name, self.interval_s = cluster, name, interval_s
        self.seen: list[PartitionStatus] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            status: PartitionStatus | None = None
            with contextlib.suppress(Exception):  # deleted, or a busy API: poll again
                status = (await self.cluster.partition(self.name)).status
            if status is not None and (not self.seen or self.seen[-1] != status):
                self.seen.append(status)
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def epochs_went_back(self) -> list[str]:
        """Each status whose leaderEpoch or partitionEpoch is below one seen before it."""
        out: list[str] = []
        top = {"leader_epoch": 0, "partition_epoch": 0}
        for i, s in enumerate(self.seen):
            for field, highest in top.items():
                value = int(getattr(s, field))
                if value < highest:
                    out.append(f"status #{i}: {field} {value} after {highest}: {s}")
                top[field] = max(highest, value)
        return out


def carol_cluster(tmp_path: Path, topic: str) -> LocalCluster:
    """Three brokers (not started) with an access policy: admin may do everything, the
    user carol (a certificate from the clients CA) may read and write `topic` only."""
    settings = e2e_settings()
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    DevPki(cluster.pki_dir).ensure([1, 2, 3], users=("admin", "carol"))
    policy = {
        "acls": [
            {"principal": "User:admin", "topics": ["*"], "operations": ["all"]},
            {"principal": "User:carol", "topics": [topic], "operations": ["read", "write"]},
        ]
    }
    path = tmp_path / "access.yaml"
    path.write_text(json.dumps(policy))  # JSON is YAML too
    settings.broker_args = ("--access-policy", str(path))
    return cluster


async def kafka_answered(cluster: LocalCluster, broker: int, api_key: int) -> int:
    """How many requests of `api_key` the broker's Kafka listener answered (its metrics)."""
    url = cluster.probe_url(f"broker-{broker}") + "/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as rsp:
        text = await rsp.text()
    found = re.search(
        rf'^epochlog_kafka_requests_total{{api="{api_key}",outcome="answered"}} (\S+)$',
        text,
        re.MULTILINE,
    )
    return 0 if found is None else int(float(found[1]))
