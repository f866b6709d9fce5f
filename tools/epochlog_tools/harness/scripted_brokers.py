"""Scripted brokers: the broker side of the heartbeat protocol, over HTTP, without a log.

A stand-in for a fleet of brokers where real ones would cost too much (a
thousand partitions on ten brokers for the operator benchmark) or could not be
steered precisely enough (the operator's end-to-end tests). Each
`BrokerScript` keeps, per partition it hosts, what a real broker would report:
role, leader and partition epochs, log end offset, high watermark and, as
leader, each follower's log end and lastCaughtUpTime. Replication is modelled,
not performed: a live leader appends `produce_rate` records per step, a live
follower that is not stalled copies its leader's log end (a fetch), and the
leader notes the fetch. Brokers apply the assignments the operator answers with
(never one with an older epoch), start a new epoch's bookkeeping when they
become leader, and, as leader, propose a caught-up follower for the ISR.

The caller drives failures: `kill()` (the process stops: no heartbeats, no
fetches served), `silence()` (heartbeats stop, replication goes on), `stall()`
(one replica stops fetching), `restart()` (a new brokerEpoch, data kept).
Every broker sends its heartbeat to every operator URL and takes the newest
assignment of each partition from the answers; a replica standing by answers
503, which is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    HeartbeatResponse,
    IsrProposal,
    PartitionAssignment,
    PartitionReport,
    PartitionRole,
)
from epochlog_tools.harness.readiness import wait_until

CAUGHT_UP_WINDOW_MS: Final = 1_000
ADDRESS_PORT_BASE: Final = 10_000
"""Broker `id` advertises https://127.0.0.1:<ADDRESS_PORT_BASE + id>."""
"""As the broker's (`epochlog_broker.core.DEFAULT_CAUGHT_UP_WINDOW_MS`): a follower whose
fetch reached the leader's log end this recently is reported caught up, without a time."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ScriptedReplica:
    """One scripted broker's copy of one partition: what it reports, and its ISR proposals."""

    name: str
    role: PartitionRole = PartitionRole.FOLLOWER
    leader_epoch: int = 0
    partition_epoch: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    epoch_start_offset: int | None = None
    leader: int | None = None
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    stalled: bool = False
    """This replica does not fetch (a stuck follower)."""
    follower_ends: dict[int, int] = field(default_factory=dict)
    caught_up: dict[int, int] = field(default_factory=dict)
    """Leader only: follower -> broker time its fetch last reached this log end."""
    proposals: dict[int, int] = field(default_factory=dict)
    """Leader only: replica -> id of the ISR proposal made for it and not yet answered."""
    next_proposal: int = 1

    def report(self, fleet: ScriptedBrokers, now: int, proposing: bool = True) -> PartitionReport:
        if self.role is PartitionRole.FOLLOWER:
            return PartitionReport(
                name=self.name,
                role=self.role,
                leader_epoch=self.leader_epoch,
                partition_epoch=self.partition_epoch,
                log_end_offset=self.log_end_offset,
                high_watermark=self.high_watermark,
            )
        followers = tuple(
            self._follower(r, self.follower_ends[r], now)
            for r in self.replicas
            if r in self.follower_ends
        )
        proposals = tuple(
            IsrProposal(
                replica=r,
                broker_epoch=fleet.brokers[r].epoch,
                log_end_offset=end,
                proposal_id=self._proposal_id(r),
            )
            for r, end in sorted(self.follower_ends.items())
            if proposing and r not in self.isr and self._eligible(r, end, now)
        )
        return PartitionReport(
            name=self.name,
            role=self.role,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
            epoch_start_offset=self.epoch_start_offset,
            followers=followers,
            isr_proposals=proposals,
        )

    def _follower(self, replica: int, end: int, now: int) -> FollowerProgress:
        """As a broker reports it: caught up within the window, else when it last was."""
        t = self.caught_up.get(replica)
        caught_up = t is not None and now - t <= CAUGHT_UP_WINDOW_MS
        return FollowerProgress(
            replica=replica,
            log_end_offset=end,
            last_caught_up_time=None if caught_up else t,
            caught_up=caught_up,
        )

    def _proposal_id(self, replica: int) -> int:
        """The same id while a proposal stands; a new one after it was refused."""
        if replica not in self.proposals:
            self.proposals[replica] = self.next_proposal
            self.next_proposal += 1
        return self.proposals[replica]

    def refused(self, replica: int, proposal_id: int) -> None:
        if self.proposals.get(replica) == proposal_id:
            del self.proposals[replica]

    def _eligible(self, replica: int, end: int, now: int) -> bool:
        since = self.caught_up.get(replica)
        return (
            since is not None
            and now - since < 1000
            and end >= self.high_watermark
            and end >= (self.epoch_start_offset or 0)
        )

    def apply(self, a: PartitionAssignment, me: int) -> None:
        if (a.leader_epoch, a.partition_epoch) < (self.leader_epoch, self.partition_epoch):
            return
        new_epoch = a.leader_epoch > self.leader_epoch
        self.leader_epoch = a.leader_epoch
        self.partition_epoch = a.partition_epoch
        self.leader = a.leader
        self.isr = a.isr
        self.replicas = a.replicas
        for r in a.isr:
            self.proposals.pop(r, None)
        if a.leader == me:
            if new_epoch or self.role is not PartitionRole.LEADER:
                self.role = PartitionRole.LEADER
                self.epoch_start_offset = self.log_end_offset
                self.follower_ends = {}
                self.caught_up = {}
                self.proposals = {}
        else:
            self.role = PartitionRole.FOLLOWER
            self.epoch_start_offset = None

    def update_high_watermark(self) -> None:
        """Leader: the HW is the smallest log end over the ISR (the ISR as recorded)."""
        ends = [self.log_end_offset] + [
            self.follower_ends.get(r, 0) for r in self.isr if r != self.leader
        ]
        self.high_watermark = max(self.high_watermark, min(ends))


class BrokerScript:
    """One scripted broker: its brokerEpoch, its replicas and the faults the caller set."""

    def __init__(self, fleet: ScriptedBrokers, broker_id: int, *, epoch: int = 1) -> None:
        self.fleet = fleet
        self.id = broker_id
        self.epoch = epoch
        self.replicas: dict[str, ScriptedReplica] = {}
        self.running = True
        """The process runs: it serves fetches and replicates."""
        self.heartbeating = True
        self.produce_rate = 10
        self.proposing = True
        """As leader, propose caught-up followers for the ISR."""
        self.responses = 0
        self.fenced_answers = 0

    def replica(self, name: str) -> ScriptedReplica:
        return self.replicas.setdefault(name, ScriptedReplica(name))

    # -- faults -----------------------------------------------------------------------------

    def kill(self) -> None:
        self.running = False
        self.heartbeating = False

    def silence(self) -> None:
        self.heartbeating = False

    def stall(self, name: str, stalled: bool = True) -> None:
        self.replica(name).stalled = stalled

    def restart(self) -> None:
        """A new process: a new brokerEpoch; the log stays, every role starts as follower."""
        self.epoch += 1
        self.running = True
        self.heartbeating = True
        for r in self.replicas.values():
            r.role = PartitionRole.FOLLOWER
            r.epoch_start_offset = None
            r.follower_ends = {}
            r.caught_up = {}

    # -- one step -------------------------------------------------------------------------

    def replicate(self, now: int) -> None:
        if not self.running:
            return
        for r in self.replicas.values():
            if r.role is PartitionRole.LEADER:
                r.log_end_offset += self.produce_rate
            elif r.leader is not None and not r.stalled:
                self._fetch(r, now)
        for r in self.replicas.values():
            if r.role is PartitionRole.LEADER:
                r.update_high_watermark()

    def _fetch(self, r: ScriptedReplica, now: int) -> None:
        leader = self.fleet.brokers.get(r.leader) if r.leader is not None else None
        if leader is None or not leader.running:
            return
        theirs = leader.replicas.get(r.name)
        if theirs is None or theirs.role is not PartitionRole.LEADER:
            return
        if theirs.leader_epoch != r.leader_epoch:
            return
        r.log_end_offset = theirs.log_end_offset
        r.high_watermark = min(theirs.high_watermark, r.log_end_offset)
        theirs.follower_ends[self.id] = r.log_end_offset
        theirs.caught_up[self.id] = now

    def heartbeat(self, now: int) -> BrokerHeartbeat:
        return BrokerHeartbeat(
            broker_id=self.id,
            broker_epoch=self.epoch,
            # Nobody connects to it; a loopback URL is one the test certificates name.
            address=f"https://127.0.0.1:{ADDRESS_PORT_BASE + self.id}",
            time_ms=now,
            partitions=tuple(
                r.report(self.fleet, now, self.proposing) for _, r in sorted(self.replicas.items())
            ),
        )

    def apply(self, answers: list[HeartbeatResponse]) -> None:
        if any(a.fenced for a in answers):
            self.fenced_answers += 1
            self.restart()
            return
        newest: dict[str, PartitionAssignment] = {}
        for answer in answers:
            for a in answer.assignments:
                known = newest.get(a.name)
                if known is None or (a.leader_epoch, a.partition_epoch) > (
                    known.leader_epoch,
                    known.partition_epoch,
                ):
                    newest[a.name] = a
        for a in newest.values():
            self.replica(a.name).apply(a, self.id)
        for answer in answers:
            for refusal in answer.rejected_isr_proposals:
                self.replica(refusal.name).refused(refusal.replica, refusal.proposal_id)
        self.responses += 1


class ScriptedBrokers:
    """The scripted brokers, stepping and heartbeating together every `interval_ms`.

    `tls`: what broker `id` presents to the operator (its certificate's TLS context);
    each broker heartbeats over connections of its own, as real ones do."""

    def __init__(
        self,
        operators: Callable[[], list[str]],
        broker_ids: list[int],
        interval_ms: int = 100,
        *,
        tls: Callable[[int], ssl.SSLContext | bool] | None = None,
        own_thread: bool = False,
    ) -> None:
        self.tls = tls or (lambda _id: True)
        self.own_thread = own_thread
        """Step and heartbeat on an event loop of their own, in a thread: real brokers are
        other processes, and a caller's loop busy with other work (an API emulator
        answering hundreds of writes) would otherwise silence them all at once."""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.operators = operators
        """The heartbeat URLs of the operators running now."""
        self.interval_s = interval_ms / 1000
        self.brokers = {b: BrokerScript(self, b) for b in broker_ids}
        self._task: asyncio.Task[None] | None = None
        self._sessions: dict[int, aiohttp.ClientSession] = {}

    async def __aenter__(self) -> ScriptedBrokers:
        if not self.own_thread:
            self._open_sessions()
            self._task = asyncio.create_task(self._run())
            return self
        started = threading.Event()

        def main() -> None:
            async def run() -> None:
                self._loop = asyncio.get_running_loop()
                self._open_sessions()
                self._task = asyncio.create_task(self._run())
                started.set()
                try:
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._task
                finally:
                    await self._close_sessions()

            asyncio.run(run())

        self._thread = threading.Thread(target=main, name="scripted-brokers", daemon=True)
        self._thread.start()
        await asyncio.to_thread(started.wait)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._thread is not None:
            if self._loop is not None and self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)
            await asyncio.to_thread(self._thread.join)
            self._thread = None
            return
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._close_sessions()

    def _open_sessions(self) -> None:
        for b in self.brokers:
            self._sessions[b] = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=5),
                connector=aiohttp.TCPConnector(ssl=self.tls(b)),
            )

    async def _close_sessions(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    @property
    def all_heard(self) -> bool:
        """Every broker has had an answer from an acting operator."""
        return all(b.responses > 0 for b in self.brokers.values())

    async def heard(self, timeout_s: float | None = None) -> None:
        """Until `all_heard` (NotReadyError after `timeout_s`, when one is given)."""
        await wait_until(
            lambda: self.all_heard,
            "a heartbeat answer to every broker",
            timeout_s=timeout_s,
            interval_s=0.02,
        )

    async def _run(self) -> None:
        while True:
            now = now_ms()
            for b in self.brokers.values():
                b.replicate(now)
            await asyncio.gather(
                *(self._beat(b, now) for b in self.brokers.values() if b.heartbeating)
            )
            await asyncio.sleep(self.interval_s)

    async def _beat(self, broker: BrokerScript, now: int) -> None:
        body = broker.heartbeat(now).model_dump(mode="json", by_alias=True)
        answers = await asyncio.gather(
            *(self._post(broker.id, url, body) for url in self.operators())
        )
        got = [a for a in answers if a is not None]
        if got and broker.heartbeating:
            broker.apply(got)

    async def _post(
        self, broker_id: int, url: str, body: dict[str, Any]
    ) -> HeartbeatResponse | None:
        session = self._sessions[broker_id]
        try:
            async with session.post(url, json=body) as rsp:
                if rsp.status != 200:
                    return None
                return HeartbeatResponse.model_validate(await rsp.json())
        except (aiohttp.ClientError, TimeoutError):
            return None
