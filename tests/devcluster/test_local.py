"""The embedded cluster through its command line: `epochlog dev up/status/restart/down`.

One cluster for the module, started with `epochlog dev up` as a subprocess
(short timings) in a temporary state directory, then looked at with the real
kubectl and `epochlog dev status`, restarted broker by broker with data
written before, and stopped with `epochlog dev down`. The fixture stops every
recorded process whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochlog.client import Client, Producer
from epochlog.resources import DEFAULT_KAFKA_OFFSETS_PARTITIONS, KAFKA_OFFSETS_TOPIC
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from epochlog_tools.harness import ManagedProcess
from tests.devcluster.conftest import kubectl_binary
from tests.waiting import until

TIMINGS = [
    "--heartbeat-interval-ms",
    "100",
    "--session-timeout-ms",
    "1000",
    "--reconcile-interval-ms",
    "200",
    "--status-refresh-interval-ms",
    "300",
    "--grace-period-s",
    "5",
]


def epochlog(*args: str) -> subprocess.CompletedProcess[str]:
    # No time limit (tests/waiting.py); on a hang, run() kills the child as the hang
    # detector ends the test.
    return subprocess.run(
        [sys.executable, "-m", "epochlog_tools.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "EPOCHLOG_DEV_STATE": ""},
    )


def _recorded(p: dict[str, Any]) -> ManagedProcess:
    """A process as state.json records it."""
    return ManagedProcess.adopt(p["pid"], p["argv"], Path(p["log"]))


def _kill_recorded(state_dir: Path) -> None:
    """Last resort when `dev down` did not run or failed: SIGKILL every recorded pid."""
    state = state_dir / "state.json"
    if not state.exists():
        return
    for p in json.loads(state.read_text())["processes"]:
        with contextlib.suppress(ProcessLookupError):
            if _recorded(p).alive:
                os.kill(p["pid"], signal.SIGKILL)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("dev") / "state"
    try:
        up = epochlog("dev", "up", "--state-dir", str(root), *TIMINGS)
        assert up.returncode == 0, up.stdout + up.stderr
        yield root
    finally:
        with contextlib.suppress(Exception):
            epochlog("dev", "down", "--state-dir", str(root))
        _kill_recorded(root)


def _state(state_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((state_dir / "state.json").read_text())
    return state


def test_up_records_every_process(state_dir: Path) -> None:
    state = _state(state_dir)
    procs = {p["name"]: p for p in state["processes"]}
    assert set(procs) == {"apiserver", "operator", "broker-1", "broker-2", "broker-3"}
    for p in procs.values():
        assert _recorded(p).alive, p
        # The API emulator has no TLS (it stands in for Kubernetes); the rest speak TLS
        # and serve their probes on a plain port of their own.
        scheme = "http" if p["role"] == "apiserver" else "https"
        assert p["url"].startswith(f"{scheme}://127.0.0.1:")
        if p["role"] != "apiserver":
            assert p["probe_url"].startswith("http://127.0.0.1:")
        assert Path(p["log"]).exists()
        assert p["argv"][0] == sys.executable
    assert {p["role"] for p in procs.values()} == {"apiserver", "operator", "broker"}
    assert [procs[f"broker-{b}"]["broker_id"] for b in (1, 2, 3)] == [1, 2, 3]
    assert procs["broker-2"]["data_dir"] == str(state_dir / "brokers" / "2")
    assert state["bootstrap"] == [procs[f"broker-{b}"]["url"] for b in (1, 2, 3)]
    assert Path(state["kubeconfig"]).exists()
    assert state["settings"]["session_timeout_ms"] == 1000
    assert len({p["url"] for p in procs.values()}) == 5
    assert state["tls"] is True
    for b in (1, 2, 3):
        argv = procs[f"broker-{b}"]["argv"]
        assert argv[argv.index("--cert") + 1] == str(state_dir / "pki" / f"broker-{b}.crt")


def test_up_again_in_the_same_directory_is_refused(state_dir: Path) -> None:
    again = epochlog("dev", "up", "--state-dir", str(state_dir), *TIMINGS)
    assert again.returncode == 1
    assert "already running" in again.stderr


async def test_kubectl_shows_the_example_partitions_with_leaders(state_dir: Path) -> None:
    kubeconfig = _state(state_dir)["kubeconfig"]
    proc = await asyncio.create_subprocess_exec(
        str(kubectl_binary()),
        "--kubeconfig",
        kubeconfig,
        "--cache-dir",
        str(state_dir / "kubectl-cache"),
        "get",
        "partitions",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(state_dir)},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].split()[:5] == ["NAME", "TOPIC", "PARTITION", "LEADER", "EPOCH"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    # The example topic, and the Partitions Kafka consumer groups keep offsets in.
    offsets = {f"{KAFKA_OFFSETS_TOPIC}-{i}" for i in range(DEFAULT_KAFKA_OFFSETS_PARTITIONS)}
    assert set(rows) == {"orders-0", "orders-1", "orders-2"} | offsets
    for row in rows.values():
        assert row[3] in {"1", "2", "3"}, row  # a leader
        assert int(row[4]) >= 1  # leaderEpoch


async def test_brokers_list_each_partition_with_its_topic_and_index(state_dir: Path) -> None:
    """`GET /v1/partitions` says the topic and index of every replica, from the controller's
    assignment: readers discover a topic's partitions without a naming convention."""
    cluster = LocalCluster.load(state_dir)
    async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:

        async def listed() -> list[tuple[str, str | None, int | None]]:
            rows = []
            for url in cluster.bootstrap:
                listing = await client.metadata.describe(url)
                rows += [(p.name, p.topic, p.partition) for p in listing.partitions]
            return rows if rows and all(topic for _, topic, _ in rows) else []

        rows = await until(listed, "every broker to list its replicas with their topic", 10)
    assert {(topic, index) for _, topic, index in rows} == {("orders", i) for i in range(3)} | {
        (KAFKA_OFFSETS_TOPIC, i) for i in range(DEFAULT_KAFKA_OFFSETS_PARTITIONS)
    }
    assert all(name == f"{topic}-{index}" for name, topic, index in rows)


def test_status_lists_processes_and_partitions(state_dir: Path) -> None:
    status = epochlog("dev", "status", "--state-dir", str(state_dir))
    assert status.returncode == 0, status.stderr
    text = status.stdout
    for name in ("apiserver", "operator", "broker-1", "broker-2", "broker-3"):
        assert name in text
    assert "orders-0" in text
    assert "orders-2" in text
    assert "LEADER" in text
    assert "ISR" in text
    assert "HW" in text

    as_json = epochlog("dev", "status", "--state-dir", str(state_dir), "--json")
    body = json.loads(as_json.stdout)
    assert all(p["alive"] for p in body["processes"])
    parts = {p["name"]: p for p in body["partitions"]}
    offsets = {f"{KAFKA_OFFSETS_TOPIC}-{i}" for i in range(DEFAULT_KAFKA_OFFSETS_PARTITIONS)}
    assert set(parts) == {"orders-0", "orders-1", "orders-2"} | offsets
    assert all(p["leader"] is not None and p["leaderEpoch"] >= 1 for p in parts.values())


async def test_restarted_brokers_keep_their_data(state_dir: Path) -> None:
    cluster = LocalCluster.load(state_dir)
    values = [f"kept-{i}" for i in range(50)]
    async with Client(
        cluster.bootstrap,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
        credentials=cluster.credentials,
    ) as client:
        async with Producer(client, acks="all") as producer:
            futures = [await producer.send("orders-1", v) for v in values]
            acked = [await f for f in futures]
        before = {b: cluster.processes[f"broker-{b}"].pid for b in (1, 2, 3)}
        # Every broker in turn, through the command line: afterwards the records can only
        # have come from the brokers' data directories.
        for b in (1, 2, 3):
            restarted = epochlog(
                "dev", "restart", "broker-" + str(b), "--state-dir", str(state_dir)
            )
            assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        cluster = LocalCluster.load(state_dir)
        for b in (1, 2, 3):
            info = cluster.processes[f"broker-{b}"]
            assert info.pid != before[b]
            assert info.alive
        await cluster.wait_leader("orders-1", timeout=20)
        records = await read_back(client, "orders-1")
    assert [v for _, v in records] == values
    assert [o for o, _ in records] == [m.offset for m in acked]


def test_kill_pause_resume_through_the_command_line(state_dir: Path) -> None:
    paused = epochlog("dev", "pause", "broker-3", "--state-dir", str(state_dir))
    assert paused.returncode == 0, paused.stderr
    status = json.loads(epochlog("dev", "status", "--state-dir", str(state_dir), "--json").stdout)
    assert {p["name"]: p["paused"] for p in status["processes"]}["broker-3"] is True
    resumed = epochlog("dev", "resume", "broker-3", "--state-dir", str(state_dir))
    assert resumed.returncode == 0, resumed.stderr
    unknown = epochlog("dev", "kill", "broker-9", "--state-dir", str(state_dir))
    assert unknown.returncode == 1
    assert "no process 'broker-9'" in unknown.stderr


async def test_a_restarted_operator_still_elects(state_dir: Path) -> None:
    cluster = LocalCluster.load(state_dir)
    await cluster.restart("operator")
    before = await cluster.wait_leader("orders-2")
    assert before.leader is not None
    old, epoch = before.leader, before.leader_epoch
    cluster.kill(f"broker-{old}")
    after = await cluster.wait_leader(
        "orders-2", not_in={old}, min_leader_epoch=epoch + 1, timeout=20
    )
    assert after.leader != old
    await cluster.restart(f"broker-{old}")
    assert LocalCluster.load(state_dir).processes[f"broker-{old}"].alive


def test_down_stops_every_process(state_dir: Path) -> None:
    recorded = [_recorded(p) for p in _state(state_dir)["processes"]]
    down = epochlog("dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert not any(p.alive for p in recorded)
    assert not (state_dir / "state.json").exists()
    assert (state_dir / "brokers" / "1").is_dir()  # the data stays
    none = epochlog("dev", "status", "--state-dir", str(state_dir))
    assert none.returncode == 1
    assert "no cluster" in none.stderr
