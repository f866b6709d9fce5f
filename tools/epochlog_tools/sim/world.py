"""The simulated world: one clock, one event queue, one random source, and a network.

Everything in a simulation happens as an event of this queue, in order of
(time, sequence number), so a run is a pure function of its seed. Nothing here
reads the real clock or does real I/O; disks are `CrashFileSystem`s owned by
the broker processes.

Processes (`Process`) have an incarnation: events scheduled by an incarnation
die with it (a killed process runs nothing more), and while a process is
paused its events wait for it to resume, as a SIGSTOPped process would.

The network delivers messages between processes with a random delay (so
messages reorder), may drop or duplicate them, and honours cuts of directed
links (`cut(a, b)` stops a -> b only, so one-way partitions are a pair of
calls or one). A message is lost when its link is cut at sending or at
delivery time, or when its receiver is dead then. Produce requests are never
duplicated (HTTP over TCP does not; a client's retry is a new request), every
other message may be.

A `Hold` takes one message in flight off the network (the next one from its
source to its destination that matches) and keeps it until it is released,
which delivers it then, as a message stuck in a queue or a retransmission
would arrive late. Senders pass what a message carries (`message`) so that a
hold can pick it out.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from epochlog_tools.checker.history import CONTROLLER as CONTROLLER

START_TIME_MS: Final = 1_767_225_600_000
"""Simulated wall clock at the start of every run (2026-01-01T00:00:00Z)."""


class Timeout:
    """The answer a caller gets when no reply arrived in time."""

    def __repr__(self) -> str:
        return "TIMEOUT"


TIMEOUT: Final = Timeout()


@dataclass
class NetworkConfig:
    min_delay_ms: int = 1
    max_delay_ms: int = 8
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0


class Process:
    """A simulated process: owns the events it schedules, can be killed, paused, restarted."""

    def __init__(self, world: World, node_id: int, name: str) -> None:
        self.world = world
        self.node_id = node_id
        self.name = name
        self.incarnation = 0
        self.alive = False
        self.paused_until = 0
        self.deferred: list[_Event] = []
        world.processes[node_id] = self

    def after(self, delay_ms: int, fn: Callable[[], None]) -> None:
        """Run `fn` in `delay_ms` if this incarnation is still alive then."""
        self.world.schedule(self.world.now + max(0, delay_ms), fn, self, self.incarnation)

    def stop(self) -> None:
        self.alive = False
        self.incarnation += 1

    def begin(self) -> None:
        self.incarnation += 1
        self.alive = True
        self.paused_until = 0
        self.deferred.clear()

    def pause(self, duration_ms: int) -> None:
        self.paused_until = max(self.paused_until, self.world.now + duration_ms)
        self.world.schedule(self.paused_until, self._wake)

    def resume(self) -> None:
        """SIGCONT: end a pause now."""
        self.paused_until = min(self.paused_until, self.world.now)
        self._wake()

    def _wake(self) -> None:
        if self.paused_until > self.world.now:
            return
        waiting, self.deferred = self.deferred, []
        for ev in waiting:
            self.world.schedule(self.world.now, ev.fn, ev.owner, ev.incarnation)


@dataclass(slots=True)
class _Event:
    time: int
    seq: int
    fn: Callable[[], None]
    owner: Process | None = None
    incarnation: int = 0


@dataclass(eq=False)
class Hold:
    """One message taken off the network until `World.release`."""

    src: int
    dst: int
    match: Callable[[object], bool] | None = None
    message: object = None
    """What the held message carries (None until one is held, or if the sender gave none)."""
    captured: bool = False
    released: bool = False
    _deliver: Callable[[Process], None] | None = None

    def matches(self, src: int, dst: int, message: object) -> bool:
        if self.captured or self.released or (self.src, self.dst) != (src, dst):
            return False
        return self.match is None or self.match(message)


class World:
    def __init__(self, seed: int, network: NetworkConfig | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = START_TIME_MS
        self.start_ms = START_TIME_MS
        self.net = network or NetworkConfig()
        self.processes: dict[int, Process] = {}
        self.cuts: set[tuple[int, int]] = set()
        self.holds: list[Hold] = []
        self._queue: list[tuple[int, int, _Event]] = []
        self._seq = 0
        self.events_run = 0

    # -- clock and queue -------------------------------------------------------------------

    def schedule(
        self, time: int, fn: Callable[[], None], owner: Process | None = None, incarnation: int = 0
    ) -> None:
        self._seq += 1
        at = max(time, self.now)
        heapq.heappush(self._queue, (at, self._seq, _Event(at, self._seq, fn, owner, incarnation)))

    def after(self, delay_ms: int, fn: Callable[[], None]) -> None:
        self.schedule(self.now + max(0, delay_ms), fn)

    def step(self) -> bool:
        if not self._queue:
            return False
        ev = heapq.heappop(self._queue)[2]
        self.now = max(self.now, ev.time)
        owner = ev.owner
        if owner is not None:
            if not owner.alive or owner.incarnation != ev.incarnation:
                return True
            if owner.paused_until > self.now:
                owner.deferred.append(ev)
                return True
        self.events_run += 1
        ev.fn()
        return True

    def run_until(self, time_ms: int, until: Callable[[], bool] | None = None) -> bool:
        """Run events up to `time_ms`; stop early (returning True) once `until()` holds."""
        while self._queue and self._queue[0][0] <= time_ms:
            self.step()
            if until is not None and until():
                return True
        self.now = max(self.now, time_ms)
        return until is not None and until()

    def run_for(self, duration_ms: int) -> None:
        self.run_until(self.now + duration_ms)

    @property
    def elapsed_ms(self) -> int:
        return self.now - self.start_ms

    # -- network ---------------------------------------------------------------------------

    def cut(self, src: int, dst: int) -> None:
        self.cuts.add((src, dst))

    def heal(self) -> None:
        self.cuts.clear()

    def heal_link(self, src: int, dst: int) -> None:
        self.cuts.discard((src, dst))

    def hold(self, src: int, dst: int, match: Callable[[object], bool] | None = None) -> Hold:
        """Take the next message `src` -> `dst` (for which `match(message)` holds) off the
        network until `release`."""
        h = Hold(src, dst, match)
        self.holds.append(h)
        return h

    def release(self, hold: Hold) -> bool:
        """Deliver a held message now (after the usual delay); a hold that caught nothing
        yet is disarmed. True when a message was let go."""
        hold.released = True
        if hold in self.holds:
            self.holds.remove(hold)
        deliver = hold._deliver
        if not hold.captured or deliver is None:
            return False
        hold._deliver = None
        self.after(self._delay(), lambda: self._arrive(hold.src, hold.dst, deliver))
        return True

    def discard(self, hold: Hold) -> bool:
        """Lose a held message: it is never delivered; a hold that caught nothing yet is
        disarmed. True when a message was lost."""
        hold.released = True
        if hold in self.holds:
            self.holds.remove(hold)
        hold._deliver = None
        return hold.captured

    def _take(
        self, src: int, dst: int, message: object, deliver: Callable[[Process], None]
    ) -> bool:
        """Hand a message to the first hold waiting for it; True when one took it."""
        for h in self.holds:
            if h.matches(src, dst, message):
                h.captured, h.message, h._deliver = True, message, deliver
                return True
        return False

    def link_up(self, src: int, dst: int) -> bool:
        return (src, dst) not in self.cuts

    def _delay(self) -> int:
        return self.rng.randint(self.net.min_delay_ms, self.net.max_delay_ms)

    def send(
        self,
        src: Process,
        dst_id: int,
        deliver: Callable[[Process], None],
        *,
        duplicable: bool = True,
        message: object = None,
    ) -> None:
        """Deliver a message from `src` to process `dst_id`, subject to the network's faults."""
        if not self.link_up(src.node_id, dst_id):
            return
        # Holds are looked at before the random source is, so that a run without holds
        # draws exactly the same numbers as before they existed.
        if self.holds and self._take(src.node_id, dst_id, message, deliver):
            return
        if self.rng.random() < self.net.drop_rate:
            return
        copies = 2 if duplicable and self.rng.random() < self.net.duplicate_rate else 1
        for _ in range(copies):
            self.after(self._delay(), lambda: self._arrive(src.node_id, dst_id, deliver))

    def _arrive(self, src_id: int, dst_id: int, deliver: Callable[[Process], None]) -> None:
        dst = self.processes.get(dst_id)
        if dst is None or not dst.alive or not self.link_up(src_id, dst_id):
            return
        dst.after(0, lambda: deliver(dst))

    def call(
        self,
        src: Process,
        dst_id: int,
        handler: Callable[[Process, Callable[[object], None]], None],
        on_reply: Callable[[object], None],
        timeout_ms: int,
        *,
        duplicable: bool = True,
        message: object = None,
    ) -> None:
        """Request/response: `handler(dst, reply)` runs on the receiver, `on_reply` once on
        the caller with the reply or TIMEOUT. `message` is what the request carries; the
        reply carries its result."""
        done = False

        def finish(result: object) -> None:
            nonlocal done
            if not done:
                done = True
                on_reply(result)

        def serve(dst: Process) -> None:
            incarnation = dst.incarnation

            def reply(result: object) -> None:
                if dst.alive and dst.incarnation == incarnation:
                    self.send(dst, src.node_id, lambda _p: finish(result), message=result)

            handler(dst, reply)

        self.send(src, dst_id, serve, duplicable=duplicable, message=message)
        src.after(timeout_ms, lambda: finish(TIMEOUT))
