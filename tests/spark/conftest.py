"""The Spark tests' shared parts: one SparkSession (local mode) and one embedded cluster (API
emulator, the real operator, three real brokers) for the whole package.

The session has Spark's own Kafka source on its class path too (test_kafka_source.py).
Spark's API blocks, the cluster's is asynchronous: the cluster and the producers
live on an event loop in a thread of their own (`Background`), and tests hand it
coroutines. Each test uses topics of its own; brokers a test killed are started
again after it, so every test begins with three live brokers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import structlog
from pyspark.sql import SparkSession

from epochlog_spark.session import SHORT_RUN_JAVA_OPTIONS, local_session
from epochlog_tools.devcluster.local import DevSettings, LocalCluster
from tests.e2e.conftest import print_logs
from tests.e2e.conftest import pytest_runtest_makereport as pytest_runtest_makereport
from tests.interop.jars import SPARK_KAFKA, JarsMissing, jars

T = TypeVar("T")


class Background:
    """An event loop running in a daemon thread; `run` blocks until a coroutine is done."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def kafka_source_jars() -> list[str]:
    """Spark's own Kafka source for test_kafka_source.py (`make interop-jars` fetches it),
    on the session's class path when it is there; that test fails when it is not."""
    try:
        return [str(p) for p in jars(SPARK_KAFKA)]
    except JarsMissing:
        return []


def spark_settings() -> DevSettings:
    settings = DevSettings.for_tests()
    settings.checkpoint_interval_ms = 1000
    settings.replica_lag_time_max_ms = 3000
    return settings


@pytest.fixture(scope="package")
def spark() -> Iterator[SparkSession]:
    # PySpark turns timestamps into naive datetimes in the process's time zone.
    tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    # Spark's Python workers log what the source does; warnings and up are enough here.
    # Only the workers: clusters other tests of this process start log as usual.
    session = local_session(
        "local[2]",
        "epochlog-tests",
        worker_env={"EPOCHLOG_LOG_LEVEL": "warning"},
        java_options=SHORT_RUN_JAVA_OPTIONS,
        jars=kafka_source_jars(),
    )
    yield session
    session.stop()
    if tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = tz
    time.tzset()


@pytest.fixture(scope="package")
def background() -> Iterator[Background]:
    # The clients here retry through every fault: their debug lines would drown the report.
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    bg = Background()
    yield bg
    bg.stop()
    structlog.configure(**saved)


@pytest.fixture(scope="package")
def cluster(
    background: Background, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("spark") / "cluster", settings=spark_settings())
    try:
        background.run(c.up(example_partitions=False))
    except BaseException:
        print_logs(c)
        background.run(c.down())
        raise
    yield c
    background.run(c.down())


@pytest.fixture(autouse=True)
def brokers_back(
    request: pytest.FixtureRequest, background: Background, cluster: LocalCluster
) -> Iterator[None]:
    """Every broker runs before a test, and again after it."""
    yield
    failed = getattr(getattr(request.node, "rep_call", None), "failed", False)
    if failed:
        print_logs(cluster)
    for name, info in cluster.processes.items():
        if info.role == "broker" and not info.alive:
            background.run(cluster.restart(name))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Outputs and checkpoints of a test's queries."""
    return tmp_path
