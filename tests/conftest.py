"""Shared test configuration: hypothesis profiles and how tests share xdist workers.

`make test` uses the "ci" profile; `make soak` sets HYPOTHESIS_PROFILE=soak to run
the same properties with many more examples. Tests that need a specific number
of examples scale it with `examples(n)`. Neither profile has a per-example
deadline: hypothesis' default (200 ms) fails examples on a loaded machine.

`make test` spreads the tests over pytest-xdist workers; the tests that share a
module- or package-scoped fixture run on one worker, one after the other
(tests/sharing.py).

`real_apiserver`: a real kube-apiserver (tests/kube_apiserver.py) for the tests that
exercise the Kubernetes API, when `EPOCHLOG_TEST_APISERVER=real` (`make e2e`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

SOAK_FACTOR = 50

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    parent=settings.get_profile("ci"),
    max_examples=100 * SOAK_FACTOR,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(n: int) -> int:
    """`n` examples in CI, SOAK_FACTOR times more under the soak profile."""
    return n * SOAK_FACTOR if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else n


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `-n` with the default `--dist load`: tests/sharing.py."""
    if config.getoption("dist") != "load":
        return None
    from tests.sharing import SharedFixtureScheduling

    return SharedFixtureScheduling(config, log)


REAL_APISERVER = os.environ.get("EPOCHLOG_TEST_APISERVER") == "real"


@pytest.fixture(scope="session")
def real_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real kube-apiserver with the CRDs of crds/, started once per session (and xdist
    worker); tests call its `reset()` first."""
    from epochlog_tools.harness.kube_apiserver import KubeApiServer, bin_dir

    found = bin_dir()
    if found is None:
        raise RuntimeError("EPOCHLOG_TEST_APISERVER=real needs EPOCHLOG_KUBE_BIN")
    crds = Path(__file__).resolve().parents[1] / "crds"
    server = KubeApiServer(found, tmp_path_factory.mktemp("kube-apiserver"), crds)
    # Started in a loop and thread of their own (a test's loop may be running already):
    # it keeps no connection, only its processes.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, server.__aenter__()).result()
        try:
            yield server
        finally:
            thread.submit(asyncio.run, server.__aexit__(None, None, None)).result()
