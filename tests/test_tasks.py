"""`cancel_and_wait`: tasks end even when a cancellation is lost on its way."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import pytest
from aiohttp import web

from epochlog.tasks import cancel_and_wait
from epochlog_tools.harness import free_ports

pytestmark = pytest.mark.asyncio


async def test_a_task_that_swallows_a_cancellation_is_cancelled_again() -> None:
    cancellations = 0

    async def retries_on_timeouts() -> None:
        # A loop that survives a lost cancellation, as one retrying aiohttp timeouts does.
        nonlocal cancellations
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations == 1:
                    continue
                raise

    task = asyncio.create_task(retries_on_timeouts())
    await asyncio.sleep(0)
    await cancel_and_wait([task], retry_s=0.01)
    assert task.cancelled()
    assert cancellations == 2


async def test_aiohttp_loses_a_cancellation_that_meets_its_timeout() -> None:
    """Why the helper exists (aio-libs/aiohttp#5979): a request whose timeout has passed
    when its task is cancelled, as when a paused process wakes, raises TimeoutError and
    the cancellation is gone. Should aiohttp fix it, this test says so."""
    (port,) = free_ports(1)
    done = asyncio.Event()

    async def never_answers(request: web.Request) -> web.Response:
        await done.wait()
        return web.Response()

    app = web.Application()
    app.router.add_post("/", never_answers)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    outcome: list[str] = []
    try:
        async with aiohttp.ClientSession() as http:

            async def request() -> None:
                try:
                    async with http.post(
                        f"http://127.0.0.1:{port}/",
                        json={},
                        timeout=aiohttp.ClientTimeout(total=0.2),
                    ) as rsp:
                        await rsp.read()
                except TimeoutError:
                    outcome.append("TimeoutError")

            task = asyncio.create_task(request())
            started = asyncio.get_running_loop().time()
            # The request is sent and waits for its answer.
            while asyncio.get_running_loop().time() - started < 0.1:
                await asyncio.sleep(0.01)
            # The process wakes late: its timeout fires in the same pass as the cancel.
            time.sleep(0.3)
            asyncio.get_running_loop().call_soon(task.cancel)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert outcome == ["TimeoutError"], "the cancellation reached the task"
            assert not task.cancelled()
    finally:
        done.set()
        await runner.cleanup()
