"""Scenarios on the Helm chart as installed: its own pods, from the built images.

`ChartCluster` renders helm/epochlog with Helm's engine and runs every pod of
it as a podman container with exactly the command, arguments, environment,
mounts and restrictions of the rendered pod templates; Kubernetes' API is the
emulator (see epochlog/devcluster/chart_cluster.py for what stands in for
what). Each scenario installs the chart afresh. Clients run on the host and
reach the pods by their cluster names.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from epochlog.devcluster.chart_cluster import ChartCluster
from epochlog.devcluster.local_workload import SteadyProducer, read_back, verify
from epochlog.devcluster.partitions import partition_manifest
from epochlog.devcluster.rolling import IsrWatch
from epochlog.objects import to_body

REPO: Final = Path(__file__).resolve().parents[1]
CHART: Final = REPO / "helm" / "epochlog"
NAMESPACE: Final = "streams"
BROKERS: Final = "StatefulSet/epochlog-broker"


@pytest.fixture
async def chart(tmp_path: Path, images: None) -> AsyncIterator[ChartCluster]:
    cluster = ChartCluster(tmp_path / "cluster", CHART, namespace=NAMESPACE)
    try:
        await cluster.up()
        yield cluster
    finally:
        await cluster.down()
        _print_logs_on_failure(cluster)


def _print_logs_on_failure(cluster: ChartCluster) -> None:
    for log in sorted((cluster.state_dir / "logs").glob("*.log")):
        print(f"\n===== {log.name} =====\n{log.read_text(errors='replace')[-6000:]}")


async def _partitions(cluster: ChartCluster, topic: str, count: int) -> list[str]:
    for i in range(count):
        await cluster.apply(to_body(partition_manifest(topic, i, namespace=NAMESPACE)))
    names = [f"{topic}-{i}" for i in range(count)]
    for name in names:
        await cluster.wait_leader(name)
    return names


async def test_the_chart_installs_serves_clients_and_passes_its_helm_test(
    chart: ChartCluster,
) -> None:
    names = await _partitions(chart, "orders", 2)
    client = await chart.client()
    try:
        producer = await SteadyProducer(client, names, rate=100).start()
        await producer.wait_each(names)
        await producer.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0
    assert await chart.run_tests() == {"epochlog-test-produce-consume": 0}


async def test_a_leader_pod_killed_under_load_loses_nothing(chart: ChartCluster) -> None:
    (name,) = await _partitions(chart, "kill", 1)
    client = await chart.client()
    try:
        producer = await SteadyProducer(client, [name], rate=100).start()
        await producer.wait_ack(name, min_epoch=1, after=0, timeout=120)
        status = await chart.wait_leader(name)
        assert status.leader is not None
        victim = f"epochlog-broker-{status.leader}"
        await chart.kill_pod(victim)  # deleted with grace period 0
        await chart.wait_leader(
            name, not_in=[status.leader], min_leader_epoch=status.leader_epoch + 1
        )
        await producer.wait_ack(
            name, min_epoch=status.leader_epoch + 1, after=time.monotonic(), timeout=120
        )
        await chart.start_pod(chart.pod_plan(victim))  # the StatefulSet makes it again
        await chart.wait_ready(victim)
        await producer.stop()
        logs = {name: await read_back(client, name)}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]


async def test_a_rolling_restart_under_load_loses_nothing_and_keeps_every_isr(
    chart: ChartCluster,
) -> None:
    names = await _partitions(chart, "roll", 3)
    client = await chart.client()
    watch = await IsrWatch(chart.api_url, ssl=chart.api_ssl()).start()
    try:
        producer = await SteadyProducer(client, names, rate=150).start()
        await producer.wait_each(names)
        await chart.rollout_restart(BROKERS)
        await producer.wait_each(names, after=time.monotonic())
        await producer.stop()
        await watch.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]
    assert not watch.low, watch.low[:5]
    for b in range(3):
        text = (chart.state_dir / "logs" / f"epochlog-broker-{b}.log").read_text()
        assert "controlled_shutdown_completed" in text, f"broker {b} did not hand over"


async def test_elections_go_on_after_the_operator_pod_is_killed(chart: ChartCluster) -> None:
    (name,) = await _partitions(chart, "op", 1)
    first = await chart.wait_leader(name)
    assert first.leader is not None
    await chart.kill_pod("epochlog-operator-0")
    await chart.start_pod(chart.pod_plan("epochlog-operator-0"))
    await chart.wait_ready("epochlog-operator-0")
    await chart.kill_pod(f"epochlog-broker-{first.leader}")
    moved = await chart.wait_leader(
        name, not_in=[first.leader], min_leader_epoch=first.leader_epoch + 1
    )
    assert moved.leader_epoch > first.leader_epoch


async def test_uninstall_leaves_the_data_and_a_new_install_serves_it(
    tmp_path: Path, images: None
) -> None:
    state = tmp_path / "cluster"
    first = ChartCluster(state, CHART, namespace=NAMESPACE)
    try:
        await first.up()
        names = await _partitions(first, "kept", 2)
        client = await first.client()
        try:
            producer = await SteadyProducer(client, names, rate=100).start()
            await producer.wait_each(names)
            await producer.stop()
        finally:
            await client.close()
    finally:
        await first.down()
    assert all((state / "volumes" / f"data-epochlog-broker-{b}").is_dir() for b in range(3))

    # Installed again over the same volumes; the Partitions are applied again (the API
    # emulator kept nothing) and their status comes back from what the brokers hold.
    second = ChartCluster(state, CHART, namespace=NAMESPACE)
    try:
        await second.up()
        await _partitions(second, "kept", 2)
        client = await second.client()
        try:
            logs = {name: await read_back(client, name) for name in names}
        finally:
            await client.close()
    finally:
        await second.down()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0
