"""A broker whose event loop is blocked keeps its session: the keepalive thread.

The broker runs in this process, in a thread with its own event loop (real
logs on disk, its real HTTP server on loopback), so that the test can block
that loop outright, the limit of a loop saturated by its data path. The
controller is the real `ControllerCore` behind HTTP (tests/broker/controller.py)
with a 1.5 s session timeout. Without the keepalive thread the controller hears
nothing for the whole block and fences a broker that is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from epochlog_broker.broker import Broker
from epochlog_broker.config import BrokerConfig
from epochlog_broker.fetcher import SessionOutcome
from epochlog_broker.replication.fetch_session import SessionFetchRequest
from epochlog_broker.server import build_app
from epochlog_operator.liveness import BrokerState
from epochlog_tools.harness.ports import free_ports
from tests.broker.controller import Controller, spec, wall_ms

SESSION_MS = 1500
NAME = "k-0"
BLOCKED_S = 3 * SESSION_MS / 1000


class BrokerThread:
    """One broker on its own event loop in a thread."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(config)
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="broker-under-test", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> BrokerThread:
        self._thread.start()
        if not self._started.wait(60) or self.error is not None:
            raise RuntimeError(f"the broker did not start: {self.error!r}")
        return self

    def block(self, seconds: float) -> threading.Event:
        """Block the broker's event loop for `seconds`; the event is set when it ends."""
        done = threading.Event()

        def hog() -> None:
            time.sleep(seconds)
            done.set()

        self.loop.call_soon_threadsafe(hog)
        return done

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported by start()
            self.error = exc
            self._started.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        await self.broker.start()
        runner = web.AppRunner(build_app(self.broker), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.config.host, self.config.port).start()
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await self.broker.shutdown()
            await runner.cleanup()
            await self.broker.close()


@contextlib.asynccontextmanager
async def one_broker(tmp_path: Path) -> AsyncIterator[tuple[Controller, BrokerThread]]:
    """The controller (1.5 s session timeout) and broker 1 on its thread, leading `k-0`."""
    async with Controller(
        [spec("k", 0, replicas=(1,), min_insync_replicas=1)], session_timeout_ms=SESSION_MS
    ) as controller:
        (port,) = free_ports(1)
        config = BrokerConfig(
            broker_id=1,
            data_dir=str(tmp_path / "broker-1"),
            controller_url=controller.url,
            port=port,
            heartbeat_interval_ms=100,
        )
        running = await asyncio.to_thread(BrokerThread(config).start)
        try:
            await controller.wait_for(lambda: controller.leader(NAME) == 1, 60, "a leader")
            yield controller, running
        finally:
            await asyncio.to_thread(running.stop)


async def test_a_broker_whose_event_loop_is_blocked_is_not_fenced(tmp_path: Path) -> None:
    async with one_broker(tmp_path) as (controller, running):
        epoch = controller.core.liveness.sessions[1].broker_epoch
        led = controller.status(NAME)
        assert led is not None

        ended = running.block(BLOCKED_S)
        await asyncio.to_thread(ended.wait)
        # The loop sends its next heartbeat with reports: the session goes on.
        seen = controller.heartbeats.get(1, 0)
        await controller.wait_for(
            lambda: controller.heartbeats.get(1, 0) > seen + 2, 60, "heartbeats after"
        )

        session = controller.core.liveness.sessions[1]
        assert session.broker_epoch == epoch
        assert not session.expired, "the controller fenced a live broker"
        assert controller.core.liveness.state(1, wall_ms()) is BrokerState.LIVE
        assert running.broker.restarts == 0
        after = controller.status(NAME)
        assert after is not None
        assert (after.leader, after.leader_epoch) == (led.leader, led.leader_epoch)
        keepalive = running.broker._keepalive
        assert keepalive is not None
        assert keepalive.sent > 0, "no keepalive went out while the loop was blocked"


async def test_a_fenced_answer_to_a_keepalive_of_an_earlier_epoch_restarts_nothing(
    tmp_path: Path,
) -> None:
    """A keepalive's answer comes on its thread and is applied on the loop later. When it
    says `fenced` for the brokerEpoch it was sent with, the core of that epoch restarts,
    once, however many answers say so; a core the loop has restarted since (a newer
    brokerEpoch, registered anew) does not: restarting it would drop a new registration
    for an old one's answer."""
    async with one_broker(tmp_path) as (controller, running):
        broker = running.broker
        core = broker.core
        assert core is not None
        epoch = core.broker_epoch
        # What the keepalive thread hands the loop for an answer to an older epoch.
        running.loop.call_soon_threadsafe(broker._fenced_by_keepalive, epoch - 1)
        # Then two for the current epoch (the heartbeat loop and the keepalive thread
        # both hear it) while a group commit holds the disk, so that both wait for the
        # core's locks: the core restarts once, not a second time on top of the first.
        held: list[asyncio.Task[None]] = []

        async def group_commit() -> None:
            async with broker._disk:
                await asyncio.sleep(0.1)

        def both() -> None:
            held.append(asyncio.ensure_future(group_commit()))
            broker._fenced_by_keepalive(epoch)
            broker._fenced_by_keepalive(epoch)

        running.loop.call_soon_threadsafe(both)
        await controller.wait_for(
            lambda: broker.restarts > 0 and broker.core is not None, 60, "a restart"
        )
        restarted = broker.core
        assert restarted is not None
        assert restarted.broker_epoch > epoch
        await controller.wait_for(
            lambda: controller.core.liveness.sessions[1].broker_epoch == restarted.broker_epoch,
            60,
            "the new brokerEpoch registered",
        )
        # The answer to the old epoch's keepalive arrives late: nothing restarts.
        running.loop.call_soon_threadsafe(broker._fenced_by_keepalive, epoch)
        seen = controller.heartbeats.get(1, 0)
        await controller.wait_for(
            lambda: controller.heartbeats.get(1, 0) > seen + 2, 60, "heartbeats after"
        )
        assert broker.restarts == 1
        assert broker.core is restarted


async def test_a_restart_does_not_wait_for_a_fetch_whose_cancellation_was_lost(
    tmp_path: Path,
) -> None:
    """A restart cancels the fetches in flight. One whose cancellation is lost on its way
    (an HTTP client that turns it into a timeout, as under a paused process) goes on to
    apply its outcome, which takes the disk lock the restart holds: a restart that waited
    for it under that lock waited for good (the broker served with no core). It no longer
    waits; the fetch finds another core under the lock and drops its outcome."""
    async with one_broker(tmp_path) as (controller, running):
        broker = running.broker
        core = broker.core
        fetchers = broker._fetchers
        assert core is not None
        assert fetchers is not None
        epoch = core.broker_epoch
        applied: list[bool] = []
        dropped = SessionFetchRequest(1, epoch, 0, 0, ())

        async def fetch_losing_its_cancellation() -> None:
            # What the HTTP client made of the cancellation: the request goes on.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
            await broker._apply_session_answer(
                core, 2, SessionOutcome(dropped, None, None, "timed out")
            )
            applied.append(True)

        def start_fetch_then_fence() -> None:
            task = asyncio.ensure_future(fetch_losing_its_cancellation())
            fetchers._tasks.add(task)
            task.add_done_callback(fetchers._tasks.discard)
            broker._fenced_by_keepalive(epoch)

        running.loop.call_soon_threadsafe(start_fetch_then_fence)
        await controller.wait_for(
            lambda: broker.core is not None and broker.core is not core,
            60,
            "the core restarted with a fetch in flight",
        )
        restarted = broker.core
        assert restarted is not None
        await controller.wait_for(
            lambda: controller.core.liveness.sessions[1].broker_epoch == restarted.broker_epoch,
            60,
            "the new brokerEpoch registered",
        )
        await controller.wait_for(lambda: bool(applied), 60, "the lost fetch to end")
        assert broker.restarts == 1
        assert broker.failed is None
