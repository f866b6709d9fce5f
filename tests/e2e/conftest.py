"""Fixtures for fault tests on real processes: an embedded cluster per test, always torn down.

`local_cluster` starts `LocalCluster` (API emulator, the real operator, three
real brokers) in the test's temporary directory with short timings, and stops
every process afterwards, whatever happened. When a test fails, the end of
every process's log is printed, so the failure can be read without rerunning.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from kafka.net.connection import KafkaConnection

from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from tests.e2e.kafka_python_resets import wrapping

LOG_TAIL_CHARS = 12_000


def e2e_settings() -> DevSettings:
    """Failover within about a second; HW checkpoints every second."""
    settings = DevSettings.for_tests()
    settings.checkpoint_interval_ms = 1000
    settings.replica_lag_time_max_ms = 3000
    settings.grace_period_s = 5.0
    return settings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster_settings(**fields): DevSettings fields that differ for this test"
    )


def print_logs(cluster: LocalCluster) -> None:
    for name, info in cluster.processes.items():
        try:
            text = Path(info.log).read_text(errors="replace")
        except OSError:
            text = "(no log)"
        print(f"\n===== {name} (pid {info.pid}): {info.log} =====")
        print(text[-LOG_TAIL_CHARS:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


@pytest.fixture(autouse=True)
def kafka_python_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python clients in the test process survive a broker reset mid-connect
    (tests/e2e/kafka_python_resets.py)."""
    monkeypatch.setattr(
        KafkaConnection, "connection_lost", wrapping(KafkaConnection.connection_lost)
    )


@pytest.fixture
async def local_cluster(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[LocalCluster]:
    settings = e2e_settings()
    marker = request.node.get_closest_marker("cluster_settings")
    for field, value in (marker.kwargs if marker else {}).items():
        setattr(settings, field, value)
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    # The clients here retry through every fault: their debug lines would drown the report.
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        await cluster.up(example_partitions=False)
    except BaseException:
        print_logs(cluster)
        structlog.configure(**saved)
        raise
    try:
        yield cluster
    finally:
        failed = any(
            getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
            for when in ("setup", "call")
        )
        if failed:
            print_logs(cluster)
        # Paused processes are resumed by down() before SIGTERM; anything left is SIGKILLed.
        await cluster.down()
        structlog.configure(**saved)
