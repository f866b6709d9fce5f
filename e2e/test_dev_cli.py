"""`epochlog dev up --images`, `epochlog dev up --chart` and `epochlog demo --images`, run
as a user runs them: the command line in a subprocess, kubectl and `epochlog
produce/consume` with the environment `dev up` prints, and nothing left behind by
`dev down`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog_tools.devcluster import podman as pm
from epochlog_tools.devcluster.chart_cluster import ChartCluster
from epochlog_tools.devcluster.local import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
EPOCHLOG = [sys.executable, "-m", "epochlog_tools.cli", "--log-level", "warning"]
COMMAND_TIMEOUT_S = 600


def epochlog(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*EPOCHLOG, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"epochlog {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def exports(out: str) -> dict[str, str]:
    """The `export NAME=VALUE` lines `dev up` and `dev status` print."""
    found = {}
    for line in out.splitlines():
        if line.strip().startswith("export "):
            name, _, value = line.strip().removeprefix("export ").partition("=")
            found[name] = value
    return found


def containers_named(prefix: str) -> list[str]:
    names = pm.podman("ps", "-a", "--format", "{{.Names}}")
    return [n for n in names.splitlines() if n.startswith(prefix)]


def produced_and_consumed(env: dict[str, str], partition: str, values: list[str]) -> list[str]:
    epochlog("produce", "--partition", partition, "-q", *values, env=env)
    out = epochlog("consume", "--partition", partition, "--max", str(len(values)), "-q", env=env)
    return [line for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "cluster"
    yield d
    # Whatever the test did: no process or container of it is left.
    subprocess.run(
        [*EPOCHLOG, "dev", "down", "--state-dir", str(d)], capture_output=True, check=False
    )


def test_dev_up_images_runs_the_brokers_from_the_built_image(images: None, state_dir: Path) -> None:
    env = exports(epochlog("dev", "up", "--images", "--state-dir", str(state_dir)))
    cluster = LocalCluster.load(state_dir)
    brokers = [p for p in cluster.processes.values() if p.role == "broker"]
    assert all(p.container is not None for p in brokers)
    for p in brokers:
        assert p.container is not None
        image = pm.podman("inspect", "--format", "{{.ImageName}}", p.container)
        assert image == pm.BROKER_IMAGE

    records = produced_and_consumed(env, "orders-0", ["a", "b", "c"])
    assert [r.split('"value": ')[1].split(",")[0] for r in records] == ['"a"', '"b"', '"c"']

    # A SIGKILL through `dev kill` reaches the container: another broker takes over.
    before = asyncio.run(cluster.wait_leader("orders-0"))
    leader = before.leader
    assert leader is not None
    epochlog("dev", "kill", f"broker-{leader}", "--state-dir", str(state_dir))
    after = asyncio.run(cluster.wait_leader("orders-0", not_in=(leader,)))
    assert after.leader_epoch > before.leader_epoch
    epochlog("dev", "restart", f"broker-{leader}", "--state-dir", str(state_dir))

    epochlog("dev", "down", "--state-dir", str(state_dir))
    assert not [c for p in brokers if p.container for c in containers_named(p.container)]


def test_demo_runs_on_the_built_broker_image(images: None, tmp_path: Path) -> None:
    out = epochlog("demo", "--images", "--no-spark", "--state-dir", str(tmp_path / "demo"))
    assert "every one survived, none twice" in out, out
    assert not containers_named("epochlog-dev-")


def test_dev_up_chart_runs_the_chart_from_the_command_line(images: None, state_dir: Path) -> None:
    up = epochlog(
        "dev",
        "up",
        "--chart",
        str(ROOT / "helm" / "epochlog"),
        "--set",
        "broker.logLevel=debug",
        "--state-dir",
        str(state_dir),
    )
    env = exports(up)
    assert {"KUBECONFIG", "EPOCHLOG_BOOTSTRAP", "EPOCHLOG_RESOLVE", "EPOCHLOG_CA"} <= env.keys()
    cluster = ChartCluster.load(state_dir)
    assert {n for n in cluster.pods if "broker" in n} == {
        "epochlog-broker-0",
        "epochlog-broker-1",
        "epochlog-broker-2",
    }
    # The --set value reached the rendered container.
    broker = cluster.pods["epochlog-broker-0"].container
    inspected = pm.podman("inspect", "--format", "{{.Config.Env}} {{.Config.Cmd}}", broker)
    assert "debug" in inspected

    kubectl = subprocess.run(
        ["kubectl", "-n", "epochlog", "get", "partitions", "-o", "name"],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
        check=True,
        timeout=60,
    )
    assert "partition.epochlog.dev/orders-0" in kubectl.stdout.splitlines()

    records = produced_and_consumed(env, "orders-1", ["x", "y"])
    assert len(records) == 2

    before = asyncio.run(cluster.wait_leader("orders-1"))
    leader = before.leader
    assert leader is not None
    epochlog("dev", "kill", f"epochlog-broker-{leader}", "--state-dir", str(state_dir))
    after = asyncio.run(cluster.wait_leader("orders-1", not_in=(leader,)))
    assert after.leader_epoch > before.leader_epoch
    status = epochlog("dev", "status", "--state-dir", str(state_dir))
    assert f"epochlog-broker-{leader}" in status
    assert "orders-1" in status

    epochlog("dev", "down", "--state-dir", str(state_dir))
    assert not containers_named(cluster.network)
    assert not pm.podman(
        "network", "ls", "--format", "{{.Name}}", "--filter", f"name={cluster.network}"
    )
    # Uninstalling keeps the brokers' volumes.
    assert any((state_dir / "volumes").iterdir())
