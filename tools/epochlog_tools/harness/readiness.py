"""Waiting for started processes by condition: until a health endpoint answers, or any check
holds, while the processes it depends on still run.

A wait ends in one of three ways: the condition holds; a watched process exits
(`ProcessExitedError`, with the end of its log); or a deadline passes, but only
when the caller gave one (`NotReadyError`). There is no deadline of our own: on
a slow, busy machine a process takes as long as it takes, and the one that
cannot start exits and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable

import aiohttp

from epochlog_tools.harness.process import ManagedProcess

Check = Callable[[], bool | Awaitable[bool]]

PROBE_TIMEOUT_S = 2.0
"""One health request; a process that is paused or still importing does not answer it."""


class ProcessExitedError(Exception):
    """A process exited while something waited for it; the message ends with its log."""

    def __init__(self, process: ManagedProcess, what: str) -> None:
        code = "" if process.returncode is None else f" (exit code {process.returncode})"
        super().__init__(
            f"{process.label} exited{code} while waiting for {what}; the end of "
            f"{process.log}:\n{process.log_tail()}"
        )
        self.process = process


class NotReadyError(TimeoutError):
    """The caller's deadline passed before the condition held."""


async def wait_until(
    check: Check,
    what: str,
    *,
    watching: Iterable[ManagedProcess] = (),
    timeout_s: float | None = None,
    interval_s: float = 0.05,
) -> None:
    """Until `check()` (plain or async) is true. `what` names the condition in errors."""
    watched = list(watching)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        for process in watched:
            if not process.alive:
                raise ProcessExitedError(process, what)
        if deadline is not None and time.monotonic() > deadline:
            tails = "".join(f"\nthe end of {p.log}:\n{p.log_tail()}" for p in watched)
            raise NotReadyError(f"timed out after {timeout_s:g} s waiting for {what}{tails}")
        await asyncio.sleep(interval_s)


async def answers(http: aiohttp.ClientSession, url: str) -> bool:
    """GET `url` answers 200 now."""
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        async with http.get(url) as rsp:
            return rsp.status == 200
    return False


async def wait_healthy(
    process: ManagedProcess,
    url: str,
    *,
    timeout_s: float | None = None,
    interval_s: float = 0.1,
) -> None:
    """Until GET `url` (the process's /healthz, /readyz, ...) answers 200."""
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await wait_until(
            lambda: answers(http, url),
            f"{url} to answer 200",
            watching=[process],
            timeout_s=timeout_s,
            interval_s=interval_s,
        )
