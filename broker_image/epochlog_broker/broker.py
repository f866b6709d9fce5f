"""The broker's I/O shell: one `BrokerCore` driven by a real clock, disk and network.

`Broker` owns, for one process: the core (partition logs, replica roles,
checkpoints), the claim on the data directory and the brokerEpoch, and the
loops that feed the core its events, as the simulator's `SimBroker` does on a
simulated world:

- heartbeats to the controller every heartbeatIntervalMs; answers are applied
  to the core (role changes). Of several controller addresses (the operator's
  replicas) they go to the one that answered last; a failure or a
  NOT_CONTROLLER answer sends the next heartbeat to the next address at once
  (`controller_targets`, `controller_client`). When the core answers with `Restart` (the
  controller fenced this brokerEpoch) the core is restarted in place: logs
  closed cleanly, a new brokerEpoch, logs reopened, so the broker rejoins
  without a process restart;
- group commit: one flusher fsyncs, in a worker thread, every log appended to
  since its last round, so the event loop keeps serving while the disk works
  and every append made meanwhile joins the next round;
- replica fetchers (`fetcher`): one fetch session per leader broker covers
  every partition this broker follows there; each `SendSession` effect becomes
  its next HTTP request, sent after the delay the core stamped on it (its
  backoff rule is the simulator's too), and the answer, the leader's error or
  the failure goes back to the core's `on_session_answer`. A partition's
  divergence query (`SendToLeader`) goes on its own;
- produce timeouts (`tick`) and the HW checkpoint on timers;
- storage faults: a replica taken offline by a storage error (disk full, I/O
  error, damaged data) is retried every `RECOVERY_INTERVAL_MS`; the core says
  which ones are due and whether each came back, the attempt itself (repair,
  reopen, probe) runs in a worker thread under the state lock;
- long polls: consumer reads wait for the high watermark to pass their offset,
  and a fetch session request without news waits at the leader until one of
  its partitions is appended to (the core names the sessions to wake).

Every core call runs on the event loop, with two exceptions that run in a
worker thread because they wait for the disk. `sync_logs` (the flusher) runs
under the disk lock, which everything that can truncate or close a log takes
(answers from the controller and from leaders, restart, close), so no log is
cut or closed under an fsync; appends and reads go on meanwhile, as they only
add to the end of the file. The HW checkpoint runs under the state lock,
which the application of the controller's answers (the only thing that adds
partitions or changes roles), restart and close take, so the partitions and
roles it reads stay put while it writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import aiohttp
import structlog
from yarl import URL

from epochlog.client.transport import HostsResolver
from epochlog.protocol.batch import Record
from epochlog.protocol.bodies import HostedPartition, HostedRole, PartitionsListing
from epochlog.protocol.epochs import reported_epoch
from epochlog.protocol.errors import (
    EpochlogError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment, TlsReport
from epochlog.security.expiry import CertificateExpiry
from epochlog.security.tls import TlsSource
from epochlog.tasks import cancel_and_wait
from epochlog_broker.config import BrokerConfig
from epochlog_broker.controller_client import ControllerClient, ControllerUnanswered
from epochlog_broker.controller_targets import ControllerTargets, Failure
from epochlog_broker.core import (
    RECOVERY_INTERVAL_MS,
    BatchReadResult,
    BrokerCore,
    DeleteRecordsDone,
    Effect,
    PreparedBatch,
    ProduceDone,
    ProducerFields,
    ReadAsk,
    ReadResult,
    Restart,
    SendSession,
    SendToLeader,
)
from epochlog_broker.fetcher import Fetchers, Outcome, SessionOutcome
from epochlog_broker.high_watermark_waits import HighWatermarkWaits
from epochlog_broker.identity import DataDirClaim
from epochlog_broker.liveness_thread import KeepaliveHeader, KeepaliveThread
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.metrics import BrokerMetrics, BrokerState
from epochlog_broker.replica_wire import ReplicaClient
from epochlog_broker.replication.fetch_session import SessionFetchAnswer, SessionFetchRequest
from epochlog_broker.replication.follower import Follower
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.messages import (
    Acks,
    EpochEndOffset,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)
from epochlog_broker.replication.throttle import ByteRate

log = structlog.get_logger("epochlog.broker")

_T = TypeVar("_T")

_PARTITION_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{0,252}$")


def now_ms() -> int:
    """The broker's clock: wall-clock ms, as heartbeats and record timestamps use."""
    return int(time.time() * 1000)


class Signal:
    """Wakes every coroutine waiting at the time of `notify()`."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None

    def notify(self) -> None:
        future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result(None)

    def future(self) -> asyncio.Future[None]:
        """Done at the next `notify()` (shared: never cancel it)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        return self._future

    async def wait(self, timeout_s: float) -> bool:
        """False when `timeout_s` passed without a notify."""
        try:
            await asyncio.wait_for(asyncio.shield(self.future()), timeout_s)
        except TimeoutError:
            return False
        return True


@dataclass
class _Partition:
    """The shell's state for one hosted partition, for one run of the core."""

    progress: Signal = field(default_factory=Signal)
    """Leader: the HW moved (consumers' long polls); also role changes."""


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.core: BrokerCore | None = None
        self.high_watermark_waits = HighWatermarkWaits()
        self.metrics = BrokerMetrics(
            lambda: self.core,
            BrokerState(
                core=lambda: self.core,
                high_watermark_waits=self._high_watermark_waits,
                data_dir=config.data_dir,
                certificates=CertificateExpiry(config.tls) if config.tls else None,
            ),
        )
        self.heartbeat_applied = False
        """The controller answered this run of the core at least once."""
        self.restarts = 0
        self.failed: str | None = None
        """Why the broker cannot serve any more (its logs did not reopen); /healthz fails."""
        self._claim = DataDirClaim(os.path.abspath(config.data_dir), config.broker_id)
        self._disk = asyncio.Lock()
        self._state = asyncio.Lock()
        """Taken before `_disk` when both are needed."""
        self._dirty = asyncio.Event()
        # Set when a replica goes offline: the controller hears of it without waiting
        # for the next heartbeat interval, so leadership moves at once.
        self._report_now = asyncio.Event()
        self._faults_reported = 0
        self._waiters: dict[int, asyncio.Future[ProduceDone]] = {}
        self._deletes: dict[int, asyncio.Future[DeleteRecordsDone]] = {}
        """DeleteRecords waiting for the low watermark, by request id (as `_waiters`)."""
        self._next_request = 0
        self._parts: dict[str, _Partition] = {}
        self._sessions_held: dict[int, Signal] = {}
        """Per follower broker: wakes its fetch session request held here for news."""
        self._fetchers: Fetchers | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._flusher_stop = False
        self._stopping = False
        self._draining = False
        """In a controlled shutdown: serving, but not ready (`readiness`)."""
        self._shutdown_answer = Signal()
        """Wakes `controlled_shutdown` when a heartbeat answer was applied."""
        self._session: aiohttp.ClientSession | None = None
        self._controller_ok: bool | None = None
        self.controllers = ControllerTargets(config.controller_urls)
        """Which controller address heartbeats go to (the one that answered last)."""
        self._controller: ControllerClient | None = None
        self._answered_by: str | None = None
        self._keepalive: KeepaliveThread | None = None
        self._fenced_tasks: set[asyncio.Task[None]] = set()
        self.tls = TlsSource(config.tls, owner=f"broker-{config.broker_id}") if config.tls else None
        """This broker's TLS contexts, rebuilt when its files change (`TlsSource`)."""
        self.client_ssl = self.tls.client if self.tls else None
        """TLS with this broker's certificate for requests to peers and the controller."""

    @property
    def peer_session(self) -> aiohttp.ClientSession:
        """The pooled session to peers, with this broker's certificate (open once started)."""
        if self._session is None:
            raise RuntimeError("the broker has not started")
        return self._session

    def peer_addresses(self) -> dict[int, str]:
        """Base URL of every other broker this one knows of: configured, or live by the
        controller's last answer."""
        cfg = self.config
        ids = (set(cfg.peers) | set(cfg.learned_peers)) - {cfg.broker_id}
        return {b: url for b in sorted(ids) if (url := cfg.peer_url(b)) is not None}

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._claim.acquire()
        try:
            await self._open_core()
        except BaseException:
            self._claim.release()
            raise
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=0,
                enable_cleanup_closed=True,
                ssl=self.client_ssl or True,
                # A peer's host connects at the IP the controller reported for it, when it
                # did; TLS still checks the name (BrokerHeartbeat.ip says why).
                resolver=HostsResolver(self.config.peer_ips),
                # Not aiohttp's 10 s cache of what the resolver answered: a peer restarted
                # at a new IP is dialled there at once (Transport says what it cost).
                use_dns_cache=False,
            )
        )
        self._fetchers = Fetchers(
            self.config,
            ReplicaClient(self._session),
            self._apply_leader_answer,
            self._apply_session_answer,
            self._session_crashed,
        )
        loop = asyncio.get_running_loop()
        self._controller = ControllerClient(
            self._session,
            self.controllers,
            timeout_s=self.config.heartbeat_timeout_s,
            connect_timeout_s=self.config.heartbeat_interval_ms / 1000,
            now_ms=now_ms,
        )
        self._keepalive = KeepaliveThread(
            target=lambda: self.controllers.current,
            interval_s=self.config.heartbeat_interval_ms / 1000,
            timeout_s=self.config.heartbeat_timeout_s,
            header=self._keepalive_header,
            now_ms=now_ms,
            on_fenced=lambda epoch: loop.call_soon_threadsafe(self._fenced_by_keepalive, epoch),
            ssl_context=self.client_ssl,
        )
        self._keepalive.start()
        self._loops = [
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._tick_loop(), name="tick"),
            asyncio.create_task(self._checkpoint_loop(), name="checkpoint"),
            asyncio.create_task(self._retention_loop(), name="retention"),
            asyncio.create_task(self._recovery_loop(), name="recovery"),
        ]
        self._flusher = asyncio.create_task(self._flush_loop(), name="flush")

    async def _open_core(self) -> None:
        cfg = self.config
        epoch = self._claim.next_epoch()
        core = BrokerCore(
            broker_id=cfg.broker_id,
            broker_epoch=epoch,
            fs=OsFileSystem(),
            data_dir=self._claim.data_dir,
            address=cfg.address,
            ip=cfg.ip,
            rack=cfg.rack,
            log_config=cfg.log,
            fetch_backoff=cfg.fetch_backoff,
            replica_fetch_max_wait_ms=cfg.replica_fetch_max_wait_ms,
            replica_fetch_max_bytes=cfg.replica_fetch_max_bytes,
            replica_fetch_response_max_bytes=cfg.replica_fetch_response_max_bytes,
            reassignment_throttle=ByteRate(cfg.reassignment_throttle_bytes),
        )
        reports = await asyncio.to_thread(core.open)
        self.core = core
        self._parts.clear()
        self.heartbeat_applied = False
        self.metrics.broker_epoch.set(epoch)
        log.info(
            "broker_started",
            broker=cfg.broker_id,
            brokerEpoch=epoch,
            address=cfg.address,
            partitions=len(reports),
            truncatedPartitions=sum(1 for r in reports if r.truncated),
        )

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Before `shutdown`: ask the controller to move this broker's leaderships to other
        ISR members and take it out of every ISR, and keep serving until it says it is done
        or `timeout_s` passes. True when done (then nothing waits on this broker)."""
        core = self.core
        if core is None or timeout_s <= 0 or self._stopping:
            return False
        self._draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        log.info("controlled_shutdown_started", broker=self.config.broker_id, timeoutS=timeout_s)
        core.begin_controlled_shutdown()
        self._report_now.set()
        while True:
            left = deadline - loop.time()
            if left <= 0:
                break
            await self._shutdown_answer.wait(min(left, self.config.heartbeat_interval_ms / 1000))
            core = self.core
            if core is None:
                return False
            if self._controller_ok is False:
                # Nobody can move anything without the controller: waiting helps nobody.
                log.warning(
                    "controlled_shutdown_abandoned",
                    broker=self.config.broker_id,
                    reason="the controller does not answer",
                )
                return False
            if not core.controlled_shutdown:
                # A restart (a new brokerEpoch) began a new session: ask again.
                core.begin_controlled_shutdown()
                self._report_now.set()
                continue
            progress = core.shutdown_progress
            if progress is not None and progress.partitions_remaining == 0:
                if progress.partitions_without_successor_count:
                    log.warning(
                        "controlled_shutdown_leaves_partitions_offline",
                        broker=self.config.broker_id,
                        partitions=list(progress.partitions_without_successor),
                        count=progress.partitions_without_successor_count,
                        reason="no other live ISR member in good standing to take over",
                    )
                log.info("controlled_shutdown_completed", broker=self.config.broker_id)
                return True
        progress = core.shutdown_progress if core is not None else None
        log.warning(
            "controlled_shutdown_timed_out",
            broker=self.config.broker_id,
            timeoutS=timeout_s,
            partitionsRemaining=None if progress is None else progress.partitions_remaining,
        )
        return False

    async def shutdown(self) -> None:
        """Stop every loop and answer every waiting request; the logs stay open."""
        if self._stopping:
            return
        self._stopping = True
        log.info("broker_stopping", broker=self.config.broker_id)
        if self._keepalive is not None:
            await asyncio.to_thread(self._keepalive.stop)
        # Under the state lock no loop is inside a checkpoint write or a restart, whose
        # worker threads would go on after a cancellation.
        async with self._state:
            tasks = [*self._loops, *self._fenced_tasks]
            for task in tasks:
                task.cancel()
        # Awaited without the lock: a loop whose cancellation was lost on its way (an HTTP
        # client that turned it into a timeout) may need the lock once more before it
        # sees `_stopping` and ends; one that waits on is cancelled again.
        await cancel_and_wait(tasks)
        await self._cancel_fetches()
        self._fail_waiters(
            NotLeaderOrFollowerError(f"broker {self.config.broker_id} is shutting down")
        )
        self._notify_all()
        if self._flusher is not None:
            self._flusher_stop = True
            self._dirty.set()
            await asyncio.gather(self._flusher, return_exceptions=True)

    async def close(self) -> None:
        """After `shutdown` and once no request runs: flush, checkpoint, close the logs."""
        await self.shutdown()
        async with self._state, self._disk:
            core, self.core = self.core, None
            if core is not None:
                try:
                    core.close()
                except EpochlogError as exc:
                    log.error("close_failed", broker=self.config.broker_id, error=str(exc))
        if self._session is not None:
            await self._session.close()
        self._claim.release()
        log.info("broker_stopped", broker=self.config.broker_id)

    async def _restart(self, core: BrokerCore, reason: str) -> None:
        """Close `core` cleanly and open it again with a new brokerEpoch; nothing when the
        core is another one by then (the heartbeat loop and a keepalive both heard that
        `core` was fenced: the second must not restart the new registration)."""
        async with self._state, self._disk:
            if core is not self.core:
                return
            log.warning("broker_restarting", broker=self.config.broker_id, reason=reason)
            self.restarts += 1
            old, self.core = self.core, None
            # Not waited for under these locks: a request whose cancellation was lost
            # waits for the disk lock to apply its outcome, and finds another core there.
            if self._fetchers is not None:
                self._fetchers.cancel()
            self._fail_waiters(
                NotLeaderOrFollowerError(f"broker {self.config.broker_id} is restarting")
            )
            self._notify_all()
            if old is not None:
                try:
                    await asyncio.to_thread(old.close)
                except EpochlogError as exc:
                    log.error("close_failed", broker=self.config.broker_id, error=str(exc))
            try:
                await self._open_core()
            except Exception as exc:
                # Nothing left to serve: report unhealthy so the process is replaced.
                self.failed = f"logs did not reopen after a restart: {exc}"
                log.exception("restart_failed", broker=self.config.broker_id)

    def current_core(self) -> BrokerCore:
        core = self.core
        if core is None or self._stopping:
            what = "shutting down" if self._stopping else "restarting"
            raise NotLeaderOrFollowerError(f"broker {self.config.broker_id} is {what}")
        return core

    # -- effects ---------------------------------------------------------------------------

    def run(self, effects: Sequence[Effect]) -> None:
        for e in effects:
            if isinstance(e, ProduceDone):
                waiter = self._waiters.pop(e.request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(e)
            elif isinstance(e, DeleteRecordsDone):
                deleted = self._deletes.pop(e.request_id, None)
                if deleted is not None and not deleted.done():
                    deleted.set_result(e)
            elif isinstance(e, SendToLeader):
                self._send_to_leader(e)
            elif isinstance(e, SendSession):
                self._send_session(e)
            # A `Restart` comes only from `on_heartbeat_response`, whose caller carries
            # it out (`_apply_heartbeat_response`).
        core = self.core
        if core is None:
            return
        for due in core.session_requests():
            self._send_session(due)
        for replica in core.take_woken_sessions():
            signal = self._sessions_held.get(replica)
            if signal is not None:
                signal.notify()
        if core.dirty:
            self._dirty.set()
        if core.storage_faults != self._faults_reported:
            self._report_now.set()

    def run_deferred(self) -> None:
        """Carry out effects of faults found by core calls that raised."""
        core = self.core
        if core is not None:
            effects = core.take_deferred()
            self.run(effects)

    def _part(self, name: str) -> _Partition:
        part = self._parts.get(name)
        if part is None:
            part = self._parts[name] = _Partition()
        return part

    def _high_watermark_waits(self) -> tuple[float, int]:
        core = self.core
        if core is None:
            return 0.0, 0
        return self.high_watermark_waits.oldest(core.leader_position, time.monotonic())

    def _progress(self, name: str) -> None:
        """Wake the long polls of `name` if its high watermark moved."""
        core = self.core
        if core is not None and core.high_watermark_moved(name):
            self.high_watermark_waits.observe(name, core.leader_position(name), time.monotonic())
            # Parked follower fetches are not woken: a follower learns the HW with
            # the next data or at the end of its wait, which costs no extra round
            # trip per acknowledged request.
            self._part(name).progress.notify()

    def _notify_all(self) -> None:
        for part in self._parts.values():
            part.progress.notify()
        for signal in self._sessions_held.values():
            signal.notify()

    def _fail_waiters(self, error: EpochlogError) -> None:
        waiters, self._waiters = self._waiters, {}
        deletes, self._deletes = self._deletes, {}
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        for deleted in deletes.values():
            if not deleted.done():
                deleted.set_exception(error)

    # -- clients ---------------------------------------------------------------------------

    async def produce(
        self,
        name: str,
        records: list[Record] | PreparedBatch,
        *,
        acks: Acks,
        timeout_ms: int,
        leader_epoch: int | None,
        producer: ProducerFields | None,
    ) -> ProduceDone:
        core = self.current_core()
        request_id = self._next_request
        self._next_request += 1
        waiter: asyncio.Future[ProduceDone] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = waiter
        try:
            effects = core.produce(
                name,
                records,
                acks=acks,
                timeout_ms=timeout_ms,
                now_ms=now_ms(),
                request_id=request_id,
                leader_epoch=leader_epoch,
                producer=producer,
            )
            self.high_watermark_waits.observe(name, core.leader_position(name), time.monotonic())
            self.run(effects)
            done = await _by_deadline(waiter, name, timeout_ms, leader_epoch)
        finally:
            self._waiters.pop(request_id, None)
        if done.error is not None:
            raise done.error
        return done

    async def read(
        self,
        name: str,
        offset: int,
        *,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
        leader_epoch: int | None,
    ) -> ReadResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            result = self.current_core().read(
                name,
                offset,
                max_records=max_records,
                max_bytes=max_bytes,
                leader_epoch=leader_epoch,
            )
            remaining = deadline - loop.time()
            if result.records or remaining <= 0:
                return result
            await self._part(name).progress.wait(remaining)

    async def read_batches(
        self,
        name: str,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int,
        leader_epoch: int | None,
    ) -> BatchReadResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            result = self.current_core().read_batches(
                name, offset, max_bytes=max_bytes, leader_epoch=leader_epoch
            )
            remaining = deadline - loop.time()
            if result.batches or remaining <= 0:
                return result
            await self._part(name).progress.wait(remaining)

    async def read_many(
        self, asks: Sequence[ReadAsk], *, max_bytes: int, max_wait_ms: int
    ) -> list[BatchReadResult | EpochlogError]:
        """A fetch of many partitions (`BrokerCore.read_many`): returns at once when some
        partition has batches or an error, else when one of them has (its high watermark
        moved) or after `max_wait_ms`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            out, news = self.current_core().read_many(asks, max_bytes=max_bytes)
            remaining = deadline - loop.time()
            if news or remaining <= 0:
                return out
            waits = [self._part(ask.name).progress.future() for ask in asks]
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)

    def list_offsets(self, name: str, at: str | int, leader_epoch: int | None) -> tuple[int, int]:
        return self.current_core().list_offsets(name, at, leader_epoch=leader_epoch)

    def epoch_end(
        self, name: str, epoch: int, leader_epoch: int | None
    ) -> tuple[EpochEndOffset, int]:
        """A reader's epoch query: where `epoch` ends in this leader's log (KIP-320), and
        the leader epoch answering."""
        return self.current_core().epoch_end(name, epoch, leader_epoch=leader_epoch)

    def log_start_offset(self, name: str) -> int:
        """The log start offset of a Partition this broker hosts (after `epoch_end`, say)."""
        return self.current_core().partitions[name].log.log_start_offset

    async def delete_records(
        self, name: str, before_offset: int, leader_epoch: int | None, timeout_ms: int
    ) -> tuple[int, int]:
        """DeleteRecords at the leader: (the new log start offset, its leader epoch), once
        the in-sync replicas' log starts reached it (the core's `DeleteRecordsDone`)."""
        request_id = self._next_request
        self._next_request += 1
        waiter: asyncio.Future[DeleteRecordsDone] = asyncio.get_running_loop().create_future()
        self._deletes[request_id] = waiter
        try:
            async with self._disk:
                core = self.current_core()
                try:
                    effects = core.delete_records(
                        name,
                        before_offset,
                        request_id=request_id,
                        now_ms=now_ms(),
                        timeout_ms=timeout_ms,
                        leader_epoch=leader_epoch,
                    )
                finally:
                    self.run_deferred()
                self.run(effects)
            done = await _by_deadline(waiter, name, timeout_ms, leader_epoch)
        finally:
            self._deletes.pop(request_id, None)
        if done.error is not None:
            raise done.error
        return done.log_start_offset, done.leader_epoch

    # -- replication: leader side ----------------------------------------------------------

    async def serve_session_fetch(self, request: SessionFetchRequest) -> SessionFetchAnswer:
        """Answer a follower's fetch session request; one without news waits here up to
        its maxWaitMs for data (a moved high watermark alone does not end the wait)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(request.max_wait_ms, self.config.max_wait_ms) / 1000
        signal = self._sessions_held.setdefault(request.replica_id, Signal())
        core = self.current_core()
        served = core.handle_session_fetch(request, now_ms())
        while True:
            self.run(served.effects)
            for name in served.partitions:
                self._progress(name)
            answer = served.answer
            remaining = deadline - loop.time()
            if not served.hold or remaining <= 0:
                return answer
            woken = await signal.wait(remaining)
            core = self.current_core()
            served = core.resume_session_fetch(
                request.replica_id, answer.session_id, now_ms(), final=not woken
            )

    def check_replica_epoch(self, replica_id: int, broker_epoch: int) -> None:
        """Before a replication request's body is read: refuse broker `replica_id` asking
        with a brokerEpoch older than its fetch session here has."""
        self.current_core().check_replica_epoch(replica_id, broker_epoch)

    def serve_offsets_for_leader_epoch(
        self, name: str, request: OffsetsForLeaderEpochRequest
    ) -> EpochEndOffset:
        return self.current_core().handle_offsets_for_leader_epoch(name, request)

    # -- replication: follower side --------------------------------------------------------

    def _send_to_leader(self, e: SendToLeader) -> None:
        core = self.core
        if core is None or self._stopping or self._fetchers is None:
            return
        if isinstance(e.request, FetchRequest):
            # A fetch in backoff: it joins its session once the wait is over.
            asyncio.get_running_loop().call_later(e.delay_ms / 1000, self._fetch_due, core, e)
            return
        self._fetchers.send(core, e, e.delay_ms / 1000)

    def _fetch_due(self, core: BrokerCore, e: SendToLeader) -> None:
        if core is self.core and not self._stopping:
            core.fetch_due(e)
            self.run([])

    async def _cancel_fetches(self) -> None:
        if self._fetchers is not None:
            await self._fetchers.cancel_all()

    def _send_session(self, e: SendSession) -> None:
        core = self.core
        if core is None or self._stopping or self._fetchers is None:
            return
        self._fetchers.send_session(core, e.leader_id, e.delay_ms / 1000)

    async def _apply_session_answer(
        self, core: BrokerCore, leader_id: int, o: SessionOutcome
    ) -> None:
        async with self._disk:
            if core is not self.core:
                return
            answer = o.answer if o.answer is not None else o.error
            applied = core.on_session_answer(leader_id, o.request, answer, o.failure)
        self.metrics.fetch_sessions.labels(str(leader_id), "follower", applied.result).inc()
        self.run(applied.effects)

    async def _session_crashed(self, core: BrokerCore, leader_id: int, failure: str) -> None:
        async with self._disk:
            if core is not self.core:
                return
            effects = core.on_session_crashed(leader_id, failure)
        self.metrics.fetch_sessions.labels(str(leader_id), "follower", "crashed").inc()
        self.run(effects)

    async def _apply_leader_answer(self, core: BrokerCore, e: SendToLeader, o: Outcome) -> None:
        async with self._disk:
            if core is not self.core:
                return
            answer = o.answer if o.answer is not None else o.error
            applied = core.on_leader_answer(e, answer, o.failure)
        self.metrics.replica_requests.labels(e.partition, applied.result).inc()
        self.run(applied.effects)

    # -- loops -----------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._flusher_stop:
                return
            core = self.core
            if core is None or not core.dirty:
                continue
            try:
                effects, names = await self._group_commit(core)
            except Exception:
                log.exception("flush_crashed", broker=self.config.broker_id)
                continue
            self.run(effects)
            for name in names:
                self._progress(name)

    async def _group_commit(self, core: BrokerCore) -> tuple[list[Effect], list[str]]:
        effects: list[Effect] = []
        async with self._disk:
            if core is not self.core:
                return effects, []
            names = core.begin_flush()
            started = time.perf_counter()
            results = await asyncio.to_thread(core.sync_logs, names)
            self.metrics.fsync_seconds.observe(time.perf_counter() - started)
            self.metrics.fsync_logs.inc(len(names))
            for name, persisted in results:
                if isinstance(persisted, EpochlogError):
                    log.error("flush_failed", partition=name, error=str(persisted))
                    effects += core.on_storage_error(name, persisted)
                    continue
                effects += core.end_flush(name, persisted)
        return effects, names

    async def _tick_loop(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        while not self._stopping:
            await asyncio.sleep(interval)
            core = self.core
            if core is not None and core.next_deadline_ms() is not None:
                self.run(core.tick(now_ms()))

    async def _checkpoint_loop(self) -> None:
        interval = self.config.checkpoint_interval_ms / 1000
        while not self._stopping:
            await asyncio.sleep(interval)
            core = self.core
            if core is None:
                continue
            try:
                async with self._state:
                    if core is self.core:
                        # Off the loop: the write syncs the file and the directory.
                        await asyncio.to_thread(core.checkpoint_high_watermarks)
            except (EpochlogError, OSError, ValueError) as exc:
                log.error("hw_checkpoint_failed", broker=self.config.broker_id, error=str(exc))

    async def _retention_loop(self) -> None:
        interval = self.config.retention_check_interval_ms / 1000
        while not self._stopping:
            await asyncio.sleep(interval)
            core = self.core
            if core is None:
                continue
            try:
                # On the loop, with no group commit running: segments leave the list the
                # readers and the flush walk. Idle, a pass looks at no partition.
                async with self._state, self._disk:
                    if core is self.core:
                        core.enforce_retention(now_ms())
            except (EpochlogError, OSError, ValueError) as exc:
                log.error("retention_failed", broker=self.config.broker_id, error=str(exc))
            self.run_deferred()

    async def _recovery_loop(self) -> None:
        interval = RECOVERY_INTERVAL_MS / 1000
        while not self._stopping:
            await asyncio.sleep(interval)
            self.run_deferred()
            core = self.core
            if core is None or not core.offline_replicas():
                continue
            try:
                await self._recover_once(core)
            except Exception:
                log.exception("recovery_crashed", broker=self.config.broker_id)

    async def _recover_once(self, core: BrokerCore) -> None:
        """Try to bring back the offline replicas that are due (one at a time)."""
        async with self._state:
            if core is not self.core:
                return
            async with self._disk:
                attempts = core.begin_recovery(now_ms())
            for attempt in attempts:
                outcome = await asyncio.to_thread(core.attempt_recovery, attempt)
                async with self._disk:
                    effects = core.end_recovery(attempt, outcome, now_ms())
                self.run(effects)
            if attempts:
                self._notify_all()

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while not self._stopping:
            started = loop.time()
            again = False
            try:
                again = await self._heartbeat_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("heartbeat_crashed", broker=self.config.broker_id)
            if again:
                continue  # the next controller address, at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._report_now.wait(), max(0.0, started + interval - loop.time())
                )

    def _keepalive_header(self) -> KeepaliveHeader | None:
        """Read on the keepalive thread: plain attribute reads of the current core."""
        core = self.core
        if core is None or self._stopping:
            return None
        return KeepaliveHeader(
            broker_id=core.broker_id,
            broker_epoch=core.broker_epoch,
            address=core.address or f"broker-{core.broker_id}",
            storage_id=core.storage_id or None,
            session_id=core.report_session.session_id,
        )

    def _fenced_by_keepalive(self, broker_epoch: int) -> None:
        """A keepalive of `broker_epoch` was answered `fenced`. Only a core of that epoch
        restarts: one the loop has restarted since is a new registration."""
        core = self.core
        if core is not None and core.broker_epoch == broker_epoch and not self._stopping:
            fenced = HeartbeatResponse(fenced=True)
            task = asyncio.create_task(self._apply_heartbeat_response(core, fenced, 0))
            self._fenced_tasks.add(task)
            task.add_done_callback(self._fenced_tasks.discard)

    def _tls_report(self) -> TlsReport | None:
        """What this broker's TLS contexts hold, after a look at the files (four `stat`
        calls): the operator steps a CA replacement on it."""
        if self.tls is None:
            return None
        self.tls.refresh()
        loaded = self.tls.loaded
        return TlsReport(
            cluster_cas=loaded.cluster_cas,
            clients_cas=loaded.clients_cas,
            certificate=loaded.certificate,
        )

    async def _heartbeat_once(self) -> bool:
        """One heartbeat to the current controller address; True when it went unanswered and
        the next address is to be tried at once."""
        core = self.core
        controller = self._controller
        if core is None or controller is None:
            return False
        cfg = self.config
        self._report_now.clear()
        self._faults_reported = core.storage_faults
        await controller.resolve()
        endpoint = self.controllers.current
        heartbeat = core.heartbeat(now_ms(), self._tls_report())
        data = heartbeat.model_dump_json(by_alias=True)
        self.metrics.heartbeat_bytes.inc(len(data))
        if self._keepalive is not None:
            self._keepalive.loop_sent()
        self.metrics.heartbeat_reports.inc(len(heartbeat.partitions))
        try:
            response, size = await controller.send(endpoint, data)
        except ControllerUnanswered as exc:
            core.heartbeat_failed(heartbeat.seq)
            standby = exc.failure is Failure.NOT_CONTROLLER
            self.metrics.heartbeats.labels("not_controller" if standby else "error").inc()
            again = self.controllers.failed(endpoint, exc.failure)
            log.debug(
                "controller_unanswered",
                broker=cfg.broker_id,
                controller=str(endpoint),
                failure=str(exc.failure),
                error=exc.detail,
                next=str(self.controllers.current),
            )
            if not again:
                # A whole round of addresses without an answer.
                self._shutdown_answer.notify()
                if self._controller_ok is not False:
                    log.warning(
                        "controller_unreachable",
                        broker=cfg.broker_id,
                        controller=cfg.controller_url,
                        last=str(endpoint),
                        error=str(exc),
                    )
                self._controller_ok = False
            return again
        self.controllers.answered(endpoint)
        self.metrics.heartbeats.labels("ok").inc()
        if self._controller_ok is not True or self._answered_by != str(endpoint):
            log.info("controller_reachable", broker=cfg.broker_id, controller=str(endpoint))
        self._controller_ok = True
        self._answered_by = str(endpoint)
        self.metrics.heartbeat_response_bytes.inc(size)
        await self._apply_heartbeat_response(core, response, heartbeat.seq)
        if response.full_report_required:
            self._report_now.set()  # the controller holds nothing of this broker yet
        return False

    async def _apply_heartbeat_response(
        self, core: BrokerCore, response: HeartbeatResponse, seq: int
    ) -> None:
        named = response.assignments + response.stop_replicas
        bad = [a.name for a in named if not _PARTITION_NAME.match(a.name)]
        if bad:
            log.error("invalid_partition_names", names=bad)
            response = response.model_copy(
                update={
                    "assignments": tuple(a for a in response.assignments if a.name not in bad),
                    "stop_replicas": tuple(a for a in response.stop_replicas if a.name not in bad),
                }
            )
        async with self._state, self._disk:
            if core is not self.core:
                return
            effects = core.on_heartbeat_response(response, now_ms(), seq)
            self.config.learned_peers.update(
                {b: a for b, a in response.brokers.items() if b != self.config.broker_id}
            )
            self._learn_peer_ips(response)
        restart = next((e for e in effects if isinstance(e, Restart)), None)
        if restart is not None:
            await self._restart(core, restart.reason)
            return
        self.heartbeat_applied = True
        self.run(effects)
        # Parked requests re-check: a role change answers them with an error.
        self._notify_all()
        self._shutdown_answer.notify()

    def _learn_peer_ips(self, response: HeartbeatResponse) -> None:
        ips = {}
        for broker, ip in response.broker_ips.items():
            host = URL(response.brokers.get(broker, "")).host
            if broker != self.config.broker_id and host:
                ips[host] = str(ip)
        if ips != self.config.peer_ips:
            # Replaced in place: the resolver reads this mapping at each connection.
            self.config.peer_ips.clear()
            self.config.peer_ips.update(ips)

    # -- state -----------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, list[str]]:
        """Ready when the controller has answered and, for every partition this broker follows
        that has a leader, the ISR holds this broker as the process it is now (its current
        brokerEpoch): a rolling restart that waits for readiness never takes a second
        replica of a partition out of sync. Not ready during a controlled shutdown."""
        core = self.core
        if core is None or self._stopping:
            return False, ["broker is starting, restarting or stopping"]
        if self._draining:
            return False, ["controlled shutdown: handing over leaderships and ISR places"]
        if not self.heartbeat_applied:
            return False, ["no answer from the controller yet"]
        waiting = [
            f"{name}: offline after a storage error ({reason})"
            for name, reason in core.offline_replicas().items()
        ]
        for name, host in sorted(core.partitions.items()):
            if not isinstance(host.replica.role, Follower):
                continue
            heard = host.heard
            if heard is None or heard.leader is None:
                continue  # no leader that could take it back: nothing to wait for
            in_sync_as = heard.isr_broker_epochs.get(core.broker_id)
            end = host.log.persisted_log_end_offset
            if in_sync_as is not None or core.broker_id not in heard.isr:
                if core.broker_id in heard.isr and in_sync_as == core.broker_epoch:
                    continue
                waiting.append(
                    f"{name}: not back in the ISR {sorted(heard.isr)} of leader {heard.leader} "
                    f"(leaderEpoch {heard.leader_epoch}) yet, at offset {end}"
                )
                continue
            # A controller that sends no brokerEpochs: in sync once at the leader's HW.
            leader_high_watermark = host.leader_high_watermark
            if leader_high_watermark is None:
                waiting.append(f"{name}: no answer from the leader yet")
            elif end < leader_high_watermark:
                waiting.append(
                    f"{name}: at {end}, leader's high watermark is {leader_high_watermark}"
                )
        return not waiting, waiting

    def describe(self) -> PartitionsListing:
        core = self.core
        partitions = []
        if core is not None:
            for name, host in sorted(core.partitions.items()):
                replica, plog, role = host.replica, host.log, host.replica.role
                a = replica.assignment
                heard = host.heard
                entry = HostedPartition(
                    name=name,
                    topic=heard.topic if heard else None,
                    partition=heard.partition if heard else None,
                    role=HostedRole.LEADER
                    if isinstance(role, Leader)
                    else HostedRole.FOLLOWER
                    if isinstance(role, Follower)
                    else HostedRole.OFFLINE,
                    leader=a.leader if a else None,
                    leader_epoch=reported_epoch(replica.leader_epoch),
                    partition_epoch=a.partition_epoch if a else 0,
                    isr=tuple(sorted(a.isr)) if a else (),
                    replicas=tuple(a.replicas) if a else (),
                    high_watermark=replica.high_watermark,
                    log_start_offset=plog.log_start_offset,
                    log_end_offset=plog.log_end_offset,
                    persisted_log_end_offset=plog.persisted_log_end_offset,
                    storage_error=core.storage_error_of(name),
                    follower_state=role.state.value if isinstance(role, Follower) else None,
                )
                partitions.append(entry)
        return PartitionsListing(
            broker_id=self.config.broker_id,
            broker_epoch=core.broker_epoch if core else None,
            address=self.config.address,
            kafka_address=self.config.kafka_address,
            partitions=tuple(partitions),
        )

    def topic_of(self, name: str) -> str:
        """The topic of partition `name` as its assignment names it; for a partition this
        broker has not heard of, the name without its `-<index>` suffix."""
        core = self.core
        host = core.partitions.get(name) if core is not None else None
        heard = host.heard if host is not None else None
        if heard is not None and heard.topic:
            return heard.topic
        topic, sep, index = name.rpartition("-")
        return topic if sep and index.isdigit() and topic else name

    def metric_label(self, name: str) -> str:
        """`name` if hosted: requests for unknown names must not create metric series."""
        core = self.core
        return name if core is not None and name in core.partitions else "_unknown"

    def leader_hint(self, name: str) -> tuple[int | None, int | None]:
        """(leader id, leader epoch) of `name` as this broker last heard, for error bodies."""
        core = self.core
        host = core.partitions.get(name) if core is not None else None
        if host is None or host.replica.assignment is None:
            return None, None
        a = host.replica.assignment
        return a.leader, a.leader_epoch

    def assignments_of(self, topic: str) -> list[PartitionAssignment]:
        """The controller's newest assignment of each partition of `topic` this broker
        hosts, by index: what it knows of those Partitions' specs (retention, segments,
        minInsyncReplicas). Empty when it hosts none of them."""
        core = self.core
        if core is None:
            return []
        heard = [
            host.heard
            for host in core.partitions.values()
            if host.heard is not None and host.heard.topic == topic
        ]
        return sorted(heard, key=lambda a: (a.partition is None, a.partition or 0, a.name))


async def _by_deadline(
    waiter: asyncio.Future[_T], name: str, timeout_ms: int, leader_epoch: int | None
) -> _T:
    """The core's answer to a request it holds (acks=all, DeleteRecords). The core answers
    by the request's deadline; the margin only guards against an answer that got lost."""
    try:
        return await asyncio.wait_for(waiter, timeout_ms / 1000 + 5)
    except TimeoutError:
        raise RequestTimedOutError(
            f"{name}: no answer in {timeout_ms} ms", leader_epoch=leader_epoch
        ) from None
