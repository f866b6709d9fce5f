"""Waiting in tests: on a condition, never against the wall clock.

How long a cluster takes to elect a leader, catch up or restart depends on the
machine and on what else runs on it. A test that fails once a wait passes N
seconds fails on a busy machine with nothing wrong, so the test helpers wait
until their condition holds, however long that takes. A wait that never ends is
a bug that pytest-timeout's hang detector (`timeout` in pyproject.toml) ends,
printing every stack. So that such a report also says what was awaited,
`Patience` prints once, when a wait takes longer than its caller expected on an
idle machine, what is still awaited; pytest shows that output with the failure.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.05


class Patience:
    """Notes, once, a wait that goes on past the time its caller expected."""

    def __init__(self, what: str, expected_s: float) -> None:
        self.what = what
        self.expected_s = expected_s
        self.started = time.monotonic()
        self.noted = False

    def due(self) -> bool:
        """True once: the first time it is asked after the expected time has passed."""
        if self.noted or time.monotonic() - self.started <= self.expected_s:
            return False
        self.noted = True
        return True

    def note(self, detail: str = "") -> None:
        print(
            f"still waiting for {self.what} after {self.expected_s:g} s "
            f"(the wait goes on until it holds){detail}",
            file=sys.stderr,
            flush=True,
        )

    def check(self) -> None:
        """Print the note if it is due."""
        if self.due():
            self.note()


async def until(
    check: Callable[[], Awaitable[T]], what: str, expected_s: float, interval_s: float = POLL_S
) -> T:
    """Poll the async `check` until it returns something truthy; return that."""
    patience = Patience(what, expected_s)
    while True:
        got = await check()
        if got:
            return got
        patience.check()
        await asyncio.sleep(interval_s)


async def until_true(
    check: Callable[[], bool], what: str, expected_s: float, interval_s: float = POLL_S
) -> None:
    """Poll the plain `check` until it holds."""
    patience = Patience(what, expected_s)
    while not check():
        patience.check()
        await asyncio.sleep(interval_s)
