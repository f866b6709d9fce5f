"""Log tests run with the log's info events switched off: property tests open, roll
and truncate logs thousands of times. Warnings and errors are still captured."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _log_events_at_warning_and_above() -> Iterator[None]:
    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    yield
    structlog.configure(**previous)
