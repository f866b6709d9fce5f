"""Simulation tests run with the brokers' and controller's info events switched off: a
scenario runs thousands of fetches, heartbeats and role changes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from epochlog.logs import configure


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    previous = structlog.get_config()
    configure("critical")
    yield
    structlog.configure(**previous)
