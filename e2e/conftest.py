"""Fixtures of the e2e suite: the images, built once per run, containers that are
always removed, with their logs printed when a test fails, and the cluster target of
the chart scenarios (e2e/targets.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.containers import Container, build_images
from e2e.targets import ClusterTarget, EmbeddedTarget, target_from_env

LOG_TAIL_CHARS = 12_000


@pytest.fixture(scope="session")
def images() -> None:
    """Both images, built from this tree (scripts/images.sh: the first run makes the base
    image and every layer; later runs rebuild only what the tree changed)."""
    build_images()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


def _failed(request: pytest.FixtureRequest) -> bool:
    return any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )


@pytest.fixture
def containers(
    request: pytest.FixtureRequest, images: None
) -> Iterator[Callable[[Container], Container]]:
    """`run(container)` starts it; every container started is removed after the test, and
    when the test failed, the end of each one's output is printed."""
    started: list[Container] = []

    def run(container: Container) -> Container:
        started.append(container)
        container.start()
        return container

    yield run
    for container in started:
        container.remove()
    if _failed(request):
        for container in started:
            text = Path(container.log).read_text(errors="replace") if container.log.exists() else ""
            print(f"\n===== {container.name} ({container.image}): {container.log} =====")
            print(text[-LOG_TAIL_CHARS:])


@pytest.fixture
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ClusterTarget]:
    """Where a chart scenario runs: a real cluster when EPOCHLOG_E2E_KUBECONFIG is set (the
    images are the cluster's to have), else the embedded one (the images built here).
    Whatever the scenario made is removed after it; when it failed, the pods' logs are
    printed."""
    chosen = target_from_env(tmp_path / "cluster")
    if isinstance(chosen, EmbeddedTarget):
        request.getfixturevalue("images")
    try:
        yield chosen
    finally:
        try:
            if _failed(request):
                print(chosen.diagnostics())
        finally:
            await chosen.destroy()
