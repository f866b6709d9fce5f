"""Stopping asyncio tasks when a cancellation can be lost on its way.

`task.cancel()` is a request: the task sees CancelledError at its next await, and
code between it and the task may turn that into something else. aiohttp's client
does when its own timeout fires at the same moment (aio-libs/aiohttp#5979): the
request raises TimeoutError, the cancellation is gone, and a loop that retries on
timeouts goes on. It happens when a process wakes late, after a pause or a stall
longer than the request's timeout, the moment a restart or a shutdown cancels.

`cancel_and_wait` asks again, every `retry_s`, until each task has ended; a caller
must not hold a lock that the tasks may need meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

RETRY_S = 0.5


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], retry_s: float = RETRY_S) -> None:
    """Cancel `tasks` and return once every one has ended, cancelling again those that
    go on after a cancellation was lost. Their results and exceptions are dropped."""
    every = list(tasks)
    pending = {t for t in every if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=retry_s)
    await asyncio.gather(*every, return_exceptions=True)
