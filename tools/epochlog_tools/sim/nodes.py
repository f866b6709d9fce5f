"""Simulated broker and controller processes around the real broker and controller logic.

`SimBroker` runs a `BrokerCore` (the broker's real partition logs, replica state
machines and checkpoints) on a `CrashFileSystem` that outlives the process, and
plays the broker's network and timer shell: heartbeats, replica fetchers,
group-commit fsync, HW checkpoints, purgatory timeouts. Like the broker's shell it
only does I/O: the core says when each request to a leader goes (the broker's
backoff rule, with timings from `SimConfig`) and when to restart (`Restart`).
`SimController` runs a `ControllerCore` and the controller's real `decide`,
persisting statuses into a `SimPartitionStore` that plays the Kubernetes API (it
outlives controller restarts, checks resourceVersion on every write, and can
delete a Partition and create it again with a new resourceVersion and no status,
while the brokers keep their data).
A broker's disk can be lost (`SimBroker.wipe`): it boots next on an empty one.
A broker answers Kafka's Produce, Fetch, ListOffsets and OffsetForLeaderEpoch
(`handle_kafka_*`) through the Kafka listener's own translation
(`epochlog_broker.kafka.translate`) into the same core calls.

Both record ground truth in the run's `History` for the checker.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import EpochlogError, InvalidRequestError
from epochlog.protocol.heartbeat import BrokerHeartbeat, HeartbeatResponse
from epochlog.resources import (
    ConditionStatus,
    ConditionType,
    PartitionSpec,
    PartitionStatus,
    partition_name,
)
from epochlog_broker.core import (
    BrokerCore,
    DeleteRecordsDone,
    Effect,
    LeaderAnswer,
    ProduceDone,
    ProducerFields,
    ReadAsk,
    Restart,
    SendSession,
    SendToLeader,
)
from epochlog_broker.kafka import translate
from epochlog_broker.kafka.records import KafkaRecordsError
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.partition_log import PartitionLog
from epochlog_broker.log.simfs import CrashFileSystem, ProcessStopped
from epochlog_broker.replication.fetch_backoff import FetchBackoff
from epochlog_broker.replication.fetch_session import SessionFetchAnswer, SessionFetchRequest
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.messages import (
    Acks,
    DivergingEpoch,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)
from epochlog_broker.report_session import DEFAULT_PROGRESS_EVERY
from epochlog_operator.controller import ControllerCore
from epochlog_operator.decide import Decision, PartitionInput
from epochlog_operator.events import EventReason
from epochlog_operator.preferred import RebalanceSettings
from epochlog_tools.checker.history import Deleted, History, Refusal, StatusWrite, UncleanElection
from epochlog_tools.sim import legacy as legacy_mod
from epochlog_tools.sim.world import CONTROLLER, TIMEOUT, Process, World

Reply = Callable[[object], None]


@dataclass
class SimConfig:
    heartbeat_interval_ms: int = 500
    session_timeout_ms: int = 3000
    reconcile_interval_ms: int = 200
    full_reconcile_ms: int = 5000
    """Every Partition is decided this often; in between only those with news or running
    lag clocks (the operator's `full_reconcile_interval_ms`)."""
    status_refresh_ms: int = 2000
    checkpoint_interval_ms: int = 1000
    replica_fetch_idle_ms: int = 25
    """After an answer without data a follower waits this long before it fetches again:
    the simulated leader answers at once, where the broker's holds the fetch."""
    caught_up_window_ms: int = 200
    """A leader reports a follower caught up while its last fetch to the log end is at most
    this old (the broker's `caught_up_window_ms`): several idle fetch rounds."""
    replica_request_timeout_ms: int = 500
    find_divergence_first: bool = False
    """New followers ask the leader where their epoch ends before fetching (the broker's
    `BrokerCore.find_divergence_first`); random runs draw it, so both paths run."""
    report_progress_every: int = DEFAULT_PROGRESS_EVERY
    """Heartbeats between two that carry reports whose offsets alone moved (the broker's
    `BrokerCore.report_progress_every`); random runs draw 1 or the production value."""
    replica_backoff_ms: int = 50
    replica_backoff_max_ms: int = 1000
    flush_delay_ms: tuple[int, int] = (2, 20)
    """Group commit: an fsync follows the first unsynced append this much later."""
    request_timeout_ms: int = 1000
    max_record_bytes: int = 1024 * 1024
    """The largest record a Kafka produce may carry (the broker's --max-record-bytes)."""
    clock_skew_ms: int = 2000
    """Brokers' clocks differ from the controller's by up to this much either way."""
    segment_bytes: int = 16 * 1024
    """Small segments so that runs roll, index and truncate across segment files."""
    retention_check_ms: int = 500
    """How often brokers run retention (the broker's --retention-check-interval-ms)."""
    rebalance: RebalanceSettings | None = None
    """The controller's preferred leader election (None: Kafka's defaults, a check every
    5 minutes, so never within a scenario; random runs check every few seconds)."""

    @property
    def fetch_backoff(self) -> FetchBackoff:
        """The broker's rule for requests to a leader, with the simulator's timings."""
        return FetchBackoff(
            self.replica_backoff_ms, self.replica_backoff_max_ms, self.replica_fetch_idle_ms
        )


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """What a produce request carries on the simulated network (for holds to match)."""

    partition: str
    values: tuple[str, ...]
    acks: Acks


@dataclass(frozen=True, slots=True)
class KafkaProducePart:
    """One partition of a Kafka Produce on the simulated network: its record batch."""

    topic: str
    index: int
    records: bytes


@dataclass(frozen=True, slots=True)
class KafkaFetchPart:
    """One partition of a Kafka Fetch (v12) on the simulated network, in Kafka's fields."""

    topic: str
    index: int
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    partition_max_bytes: int


KAFKA_LIST_OFFSETS_VERSION: Final = 9
"""The ListOffsets version simulated Kafka clients send (the newest this listener takes)."""


@dataclass
class Stored:
    spec: PartitionSpec
    status: PartitionStatus | None = None
    generation: int = 1
    resource_version: int = 1


class Conflict(Exception):
    pass


@dataclass
class SimPartitionStore:
    """The Partition resources, as the Kubernetes API would keep them."""

    items: dict[str, Stored] = field(default_factory=dict)
    _rv: int = 1

    def create(self, spec: PartitionSpec) -> None:
        if spec.name in self.items:
            raise Conflict(f"{spec.name}: already exists")
        self._rv += 1
        self.items[spec.name] = Stored(spec, resource_version=self._rv)

    def delete(self, name: str) -> None:
        """The resource and its status are gone; a later `create` starts without a status."""
        del self.items[name]

    def update(self, spec: PartitionSpec) -> None:
        """A new spec for an existing resource (a new generation); gone: nothing."""
        s = self.items.get(spec.name)
        if s is None:
            return
        self._rv += 1
        s.spec, s.generation, s.resource_version = spec, s.generation + 1, self._rv

    def input(self, name: str) -> PartitionInput:
        s = self.items[name]
        return PartitionInput(s.spec, s.status, s.generation, str(s.resource_version))

    def inputs(self) -> dict[str, PartitionInput]:
        return {n: self.input(n) for n in self.items}

    def write_status(self, name: str, status: PartitionStatus, resource_version: str) -> None:
        s = self.items.get(name)
        if s is None:
            raise Conflict(f"{name}: not found")
        if str(s.resource_version) != resource_version:
            raise Conflict(f"{name}: resourceVersion {resource_version} is stale")
        self._rv += 1
        s.status = status
        s.resource_version = self._rv

    def status(self, name: str) -> PartitionStatus | None:
        """The status of `name`; None while it has none or the resource does not exist."""
        s = self.items.get(name)
        return None if s is None else s.status


# -- broker ----------------------------------------------------------------------------


class SimBroker(Process):
    def __init__(
        self,
        world: World,
        broker_id: int,
        config: SimConfig,
        history: History,
        legacy: frozenset[str],
    ) -> None:
        super().__init__(world, broker_id, f"broker-{broker_id}")
        self.broker_id = broker_id
        self.config = config
        self.history = history
        self.legacy = legacy
        self.fs = CrashFileSystem()
        self.storage_id: str | None = None
        """The storage id of the disk as the broker last opened it; None once it is lost."""
        self.broker_epoch = 0
        self.core: BrokerCore | None = None
        self.skew_ms = world.rng.randint(-config.clock_skew_ms, config.clock_skew_ms)
        self._waiters: dict[int, Reply] = {}
        self._next_request = 0
        self._flush_scheduled = False
        self._decoded: dict[str, tuple[PartitionLog, int, int, list[tuple[int, int, str]]]] = {}
        """Per partition: the log, its rewrites, the offset read up to and the records."""

    @property
    def now(self) -> int:
        """This broker's clock."""
        return self.world.now + self.skew_ms

    # -- lifecycle -------------------------------------------------------------------------

    def boot(self) -> None:
        self.begin()
        self.broker_epoch += 1
        core_class = legacy_mod.LegacyBrokerCore if self.legacy else BrokerCore
        core = core_class(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            fs=self.fs,
            data_dir="/data",
            address=f"sim://broker-{self.broker_id}",
            log_config=LogConfig(segment_bytes=self.config.segment_bytes, max_batch_bytes=8192),
            replica_class=legacy_mod.replica_class(self.legacy),
            make_storage_id=self._new_storage_id,
            fetch_backoff=self.config.fetch_backoff,
            caught_up_window_ms=self.config.caught_up_window_ms,
            find_divergence_first=self.config.find_divergence_first,
            report_progress_every=self.config.report_progress_every,
        )
        if isinstance(core, legacy_mod.LegacyBrokerCore):
            core.legacy = self.legacy
        self.core = core
        self._waiters.clear()
        self._flush_scheduled = False
        core.open()
        self.storage_id = core.storage_id
        self.history.broker_starts.setdefault(self.broker_id, []).append(
            (self.world.now, self.broker_epoch)
        )
        self.after(self.world.rng.randint(0, 50), self._heartbeat)
        self.after(self.config.checkpoint_interval_ms, self._checkpoint)
        self.after(self.config.retention_check_ms, self._retention)
        self.after(50, self._tick)

    def kill(self, *, power_loss: bool = False, torn: bool = False) -> None:
        """SIGKILL; with `power_loss` the disk also loses what was not fsynced."""
        if self.alive:
            self.stop()
            self.history.broker_stops.setdefault(self.broker_id, []).append(self.world.now)
        self.core = None
        if power_loss:
            self.fs.crash(self.world.rng if torn else None)

    def wipe(self) -> None:
        """The disk is lost: the process dies and the next boot finds an empty one."""
        self.kill()
        self.fs = CrashFileSystem()
        self.storage_id = None

    def shutdown(self) -> None:
        """A clean stop: flush, checkpoint, close."""
        if self.core is not None and self.alive:
            self.core.close()
        self.kill()

    def controlled_shutdown(self, timeout_ms: int, then: Callable[[], None]) -> None:
        """SIGTERM as the broker server handles it: ask the controller to move leaderships
        and ISR places, keep serving until it says it is done or `timeout_ms` passes, then
        stop cleanly and call `then`."""
        core = self.core
        if core is None or not self.alive:
            return
        core.begin_controlled_shutdown()
        self.history.controlled_shutdowns.setdefault(self.broker_id, []).append(self.world.now)
        self._send_heartbeat()
        deadline = self.world.now + timeout_ms

        def check() -> None:
            current = self.core
            if current is not core or not self.alive:
                return  # killed or restarted meanwhile: that fault took over
            progress = core.shutdown_progress
            if (progress is not None and progress.partitions_remaining == 0) or (
                self.world.now >= deadline
            ):
                self.shutdown()
                then()
                return
            self.after(self.config.heartbeat_interval_ms // 2, check)

        self.after(self.config.heartbeat_interval_ms // 2, check)

    def _new_storage_id(self) -> str:
        # Drawn from the run's seeded source, so a seed replays the same ids.
        return str(uuid.UUID(int=self.world.rng.getrandbits(128), version=4))

    # -- loops -----------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        self._send_heartbeat()
        self.after(self.config.heartbeat_interval_ms, self._heartbeat)

    def _send_heartbeat(self) -> None:
        core = self.core
        assert core is not None
        hb = core.heartbeat(self.now)
        self.world.call(
            self,
            CONTROLLER,
            lambda dst, reply: _controller(dst).handle_heartbeat(hb, reply),
            lambda result: self._on_heartbeat_response(core, hb.seq, result),
            self.config.heartbeat_interval_ms,
            message=hb,
        )

    def _on_heartbeat_response(self, core: BrokerCore, seq: int, result: object) -> None:
        if core is not self.core:
            return
        if not isinstance(result, HeartbeatResponse):
            core.heartbeat_failed(seq)
            return
        for a in result.assignments:
            self.history.delivered.setdefault(a.name, []).append(
                (self.world.now, a.leader_epoch, a.leader, a.partition_epoch, self.broker_id)
            )
        self.run(core.on_heartbeat_response(result, self.now, seq))
        self._note_leader_starts(core)
        if result.full_report_required and self.core is core and self.alive:
            self._send_heartbeat()  # the controller holds nothing of this broker yet

    def _note_leader_starts(self, core: BrokerCore) -> None:
        """The log each epoch this broker now leads began with (ground truth for the checker:
        what an unclean election kept)."""
        for name, host in core.partitions.items():
            role = host.replica.role
            if (
                not isinstance(role, Leader)
                or (name, role.leader_epoch) in self.history.leader_starts
            ):
                continue
            entries = tuple((e.epoch, e.start_offset) for e in host.log.epochs.entries)
            self.history.leader_starts[name, role.leader_epoch] = (entries, role.epoch_start_offset)

    def _restart(self, reason: str) -> None:
        """The process restarts (a new brokerEpoch) shortly after."""
        self.history.fault(self.world.now, f"broker {self.broker_id} {reason}: restarts")
        self.kill()
        self.world.after(100, self.boot)

    def _checkpoint(self) -> None:
        assert self.core is not None
        self.core.checkpoint_high_watermarks()
        self.after(self.config.checkpoint_interval_ms, self._checkpoint)

    def _retention(self) -> None:
        assert self.core is not None
        self._enforce_retention(self.core)
        self.run(self.core.take_deferred())
        self.after(self.config.retention_check_ms, self._retention)

    def _enforce_retention(self, core: BrokerCore) -> None:
        """A retention pass, each log start it moves noted in the history, also when the
        pass is cut short."""
        before = self._log_starts(core)
        try:
            core.enforce_retention(self.now)
        finally:
            self._note_log_starts(core, before)

    @staticmethod
    def _log_starts(core: BrokerCore) -> dict[str, int]:
        return {name: host.log.log_start_offset for name, host in core.partitions.items()}

    def _note_log_starts(self, core: BrokerCore, before: dict[str, int]) -> None:
        """Ground truth for the checker (`History.log_start_moves`): the log starts that
        retention or a DeleteRecords moved since `before`. The records below were due to
        go, whatever happens to the log afterwards."""
        for name, host in core.partitions.items():
            start = host.log.log_start_offset
            if start > before.get(name, 0):
                self.history.log_start_moves.setdefault(name, []).append((self.world.now, start))

    def crash_in_retention(self, steps: int, *, torn: bool = False) -> bool:
        """Run a retention pass now and lose power at its file operation number `steps`
        (the log start checkpoint, a segment's files, a directory sync; right after the
        pass if it has fewer), unsynced writes torn at random with `torn`. True when the
        crash stopped the pass."""
        core = self.core
        if core is None or not self.alive:
            return False
        stopped = False
        self.fs.stop_after(steps)
        try:
            self._enforce_retention(core)
        except ProcessStopped:
            stopped = True
        finally:
            self.fs.stop_after(None)
        self.kill(power_loss=True, torn=torn)
        return stopped

    def delete_records(self, partition: str, before_offset: int) -> int | None:
        """DeleteRecords at this broker, not waiting for its answer: the leader's new log
        start, or None if it refused. The answer, when it comes, goes into the history
        as a client's would (`Sim.delete_records` waits for it)."""
        core = self.core
        if core is None:
            return None
        refused: list[EpochlogError] = []

        def answered(result: object) -> None:
            if isinstance(result, EpochlogError):
                refused.append(result)
            elif isinstance(result, DeleteRecordsDone) and result.error is None:
                self.history.deletions.append(
                    Deleted(
                        f"broker {self.broker_id}'s caller",
                        partition,
                        result.log_start_offset,
                        result.leader_epoch,
                        self.world.now,
                    )
                )

        self.handle_delete_records(partition, before_offset, None, answered)
        host = core.partitions.get(partition)
        return None if refused or host is None else host.log.log_start_offset

    def handle_delete_records(
        self,
        partition: str,
        before_offset: int,
        leader_epoch: int | None,
        reply: Reply,
        timeout_ms: int | None = None,
    ) -> None:
        """DeleteRecords: `reply` gets the `DeleteRecordsDone` once the low watermark
        reaches the new log start (or it timed out), or the error that refused it."""
        core = self.core
        assert core is not None
        rid = self._next_request
        self._next_request += 1
        self._waiters[rid] = reply
        before = self._log_starts(core)
        try:
            effects = core.delete_records(
                partition,
                before_offset,
                request_id=rid,
                now_ms=self.now,
                timeout_ms=timeout_ms or self.config.request_timeout_ms,
                leader_epoch=leader_epoch,
            )
        except EpochlogError as exc:
            self._waiters.pop(rid, None)
            self.run(core.take_deferred())
            reply(exc)
            return
        finally:
            self._note_log_starts(core, before)
        self.run(effects)

    def _tick(self) -> None:
        assert self.core is not None
        self.run(self.core.tick(self.now))
        self.after(50, self._tick)

    def _schedule_flush(self) -> None:
        if self._flush_scheduled or self.core is None or not self.core.dirty:
            return
        self._flush_scheduled = True
        lo, hi = self.config.flush_delay_ms
        self.after(self.world.rng.randint(lo, hi), self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        assert self.core is not None
        self.run(self.core.flush())

    # -- effects ---------------------------------------------------------------------------

    def run(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, ProduceDone | DeleteRecordsDone):
                reply = self._waiters.pop(e.request_id, None)
                if reply is not None:
                    reply(e)
            elif isinstance(e, Restart):
                self._restart(e.reason)
                return
            elif isinstance(e, SendSession):
                self.after(e.delay_ms, functools.partial(self._send_session, e.leader_id))
            elif isinstance(e.request, FetchRequest):
                core = self.core
                assert core is not None
                self.after(e.delay_ms, functools.partial(self._fetch_due, core, e))
            elif e.delay_ms:
                self.after(e.delay_ms, functools.partial(self._send, e))
            else:
                self._send(e)
        core = self.core
        if core is not None:
            for due in core.session_requests():
                self.after(due.delay_ms, functools.partial(self._send_session, due.leader_id))
        self._schedule_flush()

    def _fetch_due(self, core: BrokerCore, e: SendToLeader) -> None:
        if core is self.core:
            core.fetch_due(e)
            self.run([])

    def _send_session(self, leader_id: int) -> None:
        core = self.core
        assert core is not None
        request = core.session_request(leader_id)
        if request is None:
            return
        self.world.call(
            self,
            leader_id,
            lambda dst, reply: _broker(dst).handle_session_request(request, reply),
            lambda result: self._on_session_answer(core, leader_id, request, result),
            self.config.replica_request_timeout_ms,
            message=request,
        )

    def _on_session_answer(
        self, core: BrokerCore, leader_id: int, request: SessionFetchRequest, result: object
    ) -> None:
        if core is not self.core:
            return
        if result is TIMEOUT:
            failure = f"no answer in {self.config.replica_request_timeout_ms} ms"
            applied = core.on_session_answer(leader_id, request, None, failure)
        else:
            assert isinstance(result, SessionFetchAnswer | EpochlogError), result
            applied = core.on_session_answer(leader_id, request, result)
        self.run(applied.effects)

    def _send(self, e: SendToLeader) -> None:
        core = self.core
        assert core is not None
        request = e.request
        self.world.call(
            self,
            e.leader_id,
            lambda dst, reply: _broker(dst).handle_replica_request(e.partition, request, reply),
            lambda result: self._on_replica_answer(core, e, result),
            self.config.replica_request_timeout_ms,
            message=request,
        )

    def _on_replica_answer(self, core: BrokerCore, e: SendToLeader, result: object) -> None:
        if core is not self.core:
            return
        if result is TIMEOUT:
            failure = f"no answer in {self.config.replica_request_timeout_ms} ms"
            applied = core.on_leader_answer(e, None, failure)
        else:
            assert isinstance(result, LeaderAnswer | EpochlogError), result
            applied = core.on_leader_answer(e, result)
        self.run(applied.effects)

    # -- request handlers ------------------------------------------------------------------

    def handle_replica_request(
        self,
        partition: str,
        request: FetchRequest | OffsetsForLeaderEpochRequest,
        reply: Reply,
    ) -> None:
        core = self.core
        assert core is not None
        assert isinstance(request, OffsetsForLeaderEpochRequest), request
        try:
            reply(core.handle_offsets_for_leader_epoch(partition, request))
        except EpochlogError as exc:
            reply(exc)

    def handle_session_request(self, request: SessionFetchRequest, reply: Reply) -> None:
        core = self.core
        assert core is not None
        try:
            session = core.leader_sessions.receive(request, self.now)
        except EpochlogError as exc:
            reply(exc)
            return
        served = core.serve_session(session, self.now, final=True)
        # Every partition the session holds is fetched by this request, listed or not;
        # the checker counts each one the leader accepted.
        diverged = {n for n, a in served.answer.partitions if isinstance(a, DivergingEpoch)}
        for name, fetch in session.partitions.items():
            host = core.partitions.get(name)
            role = host.replica.role if host is not None else None
            if (
                host is None
                or name in diverged
                or not isinstance(role, Leader)
                or role.leader_epoch != fetch.leader_epoch
                or role.follower_log_end_offset(fetch.replica_id) is None
            ):
                continue
            self.history.fetched(
                name,
                fetch.leader_epoch,
                fetch.replica_id,
                self.world.now,
                fetch.persisted >= host.log.log_end_offset,
            )
        self.run(served.effects)
        reply(served.answer)

    def handle_produce(
        self,
        partition: str,
        values: list[str],
        acks: Acks,
        leader_epoch: int | None,
        reply: Reply,
        producer: ProducerFields | None = None,
    ) -> None:
        records = [Record(v.encode(), timestamp=self.now) for v in values]
        self._produce(partition, records, acks, leader_epoch, reply, producer)

    def _produce(
        self,
        partition: str,
        records: list[Record],
        acks: Acks,
        leader_epoch: int | None,
        reply: Reply,
        producer: ProducerFields | None,
    ) -> None:
        """The core's produce: `reply` gets its `ProduceDone`, or the error it raised."""
        core = self.core
        assert core is not None
        rid = self._next_request
        self._next_request += 1
        self._waiters[rid] = reply
        try:
            effects = core.produce(
                partition,
                records,
                acks=acks,
                timeout_ms=self.config.request_timeout_ms,
                now_ms=self.now,
                request_id=rid,
                leader_epoch=leader_epoch,
                producer=producer,
            )
        except EpochlogError as exc:
            self._waiters.pop(rid, None)
            reply(exc)
            return
        role = core.partitions[partition].replica.role
        assert isinstance(role, Leader)
        writers = self.history.leader_writes.setdefault((partition, role.leader_epoch), {})
        writers.setdefault((self.broker_id, self.broker_epoch), self.world.now)
        self.run(effects)

    def handle_produce_many(
        self,
        batches: Sequence[tuple[str, list[str], int | None, ProducerFields | None]],
        acks: Acks,
        reply: Reply,
    ) -> None:
        """A produce of many partitions (`POST /v1/produce`): each batch (partition, values,
        leaderEpoch, producer) appended and answered on its own as `handle_produce` does;
        one reply once every partition is answered, its `ProduceDone` or error in the
        order asked."""
        results: list[object] = [None] * len(batches)
        left = len(batches)

        def answered(i: int, result: object) -> None:
            nonlocal left
            results[i] = result
            left -= 1
            if left == 0:
                reply(results)

        for i, (partition, values, leader_epoch, producer) in enumerate(batches):
            self.handle_produce(
                partition, values, acks, leader_epoch, functools.partial(answered, i), producer
            )

    def handle_fetch_many(self, asks: Sequence[ReadAsk], max_bytes: int, reply: Reply) -> None:
        """A fetch of many partitions (`POST /v1/fetch`), answered at once: each partition's
        `BatchReadResult` or error, in the order asked."""
        assert self.core is not None
        results, _news = self.core.read_many(asks, max_bytes=max_bytes)
        reply(results)

    def handle_list_offsets_many(
        self, asks: Sequence[tuple[str, int | None]], reply: Reply
    ) -> None:
        """ListOffsets of many partitions (`POST /v1/list-offsets`), latest for each
        (partition, leaderEpoch): (offset, leaderEpoch) or the error, in the order asked."""
        assert self.core is not None
        results: list[object] = []
        for partition, leader_epoch in asks:
            try:
                results.append(
                    self.core.list_offsets(partition, "latest", leader_epoch=leader_epoch)
                )
            except EpochlogError as exc:
                results.append(exc)
        reply(results)

    def handle_read(
        self, partition: str, offset: int, leader_epoch: int | None, reply: Reply
    ) -> None:
        assert self.core is not None
        try:
            reply(self.core.read(partition, offset, max_records=50, leader_epoch=leader_epoch))
        except EpochlogError as exc:
            reply(exc)

    def handle_list_offsets(self, partition: str, leader_epoch: int | None, reply: Reply) -> None:
        assert self.core is not None
        try:
            reply(self.core.list_offsets(partition, "latest", leader_epoch=leader_epoch))
        except EpochlogError as exc:
            reply(exc)

    def handle_epoch_end(
        self, partition: str, epoch: int, leader_epoch: int | None, reply: Reply
    ) -> None:
        """A reader's epoch query (KIP-320): (`EpochEndOffset`, the answering leader epoch)."""
        assert self.core is not None
        try:
            reply(self.core.epoch_end(partition, epoch, leader_epoch=leader_epoch))
        except EpochlogError as exc:
            reply(exc)

    # -- the Kafka protocol ------------------------------------------------------------------

    def handle_kafka_produce(
        self, parts: Sequence[KafkaProducePart], acks: int, reply: Reply
    ) -> None:
        """A Kafka Produce of many partitions, answered as the Kafka listener answers it:
        each partition's record batch through `translate.produce_call` into the core's
        produce (no leader epoch: Kafka's Produce carries none), its outcome through
        `translate.produce_answer`; one reply with every partition's entry (Kafka's
        fields), in the order asked, once all are answered."""
        kind = translate.produce_acks(acks)
        entries: list[dict[str, Any]] = [{} for _ in parts]
        left = len(parts)

        def answered(i: int, entry: dict[str, Any]) -> None:
            nonlocal left
            entries[i] = entry
            left -= 1
            if left == 0:
                reply(entries)

        for i, part in enumerate(parts):
            if kind is None:
                answered(i, translate.produce_refused(part.index, "invalid_required_acks")[0])
                continue
            try:
                call = translate.produce_call(part.records, kind, self.config.max_record_bytes)
            except KafkaRecordsError as exc:
                answered(i, translate.produce_answer(part.index, kind, exc)[0])
                continue
            self._produce(
                partition_name(part.topic, part.index),
                call.records,
                call.acks,
                None,
                functools.partial(self._kafka_produced, part.index, kind, i, answered),
                call.producer,
            )

    @staticmethod
    def _kafka_produced(
        index: int,
        acks: Acks,
        i: int,
        answered: Callable[[int, dict[str, Any]], None],
        result: object,
    ) -> None:
        assert isinstance(result, ProduceDone | EpochlogError), result
        answered(i, translate.produce_answer(index, acks, result)[0])

    def handle_kafka_fetch(
        self, parts: Sequence[KafkaFetchPart], max_bytes: int, reply: Reply
    ) -> None:
        """A Kafka Fetch of many partitions (a consumer's), answered at once as the Kafka
        listener answers it: KIP-595's check of `last_fetched_epoch`
        (`translate.diverging_epoch`), then the core's `read_many`, each result through
        `translate.fetch_answer`; one reply with every partition's entry, in the order
        asked."""
        core = self.core
        assert core is not None
        entries = [translate.fetch_entry(p.index) for p in parts]
        asks: list[tuple[int, ReadAsk]] = []
        for i, part in enumerate(parts):
            ask = translate.read_ask(
                partition_name(part.topic, part.index),
                part.fetch_offset,
                part.partition_max_bytes,
                max_bytes,
                part.current_leader_epoch,
            )
            if part.last_fetched_epoch >= 0:
                try:
                    end, _epoch = core.epoch_end(
                        ask.name, part.last_fetched_epoch, leader_epoch=ask.leader_epoch
                    )
                    log_start = core.partitions[ask.name].log.log_start_offset
                    diverging = translate.diverging_epoch(
                        end, part.last_fetched_epoch, ask.offset, log_start
                    )
                except EpochlogError as exc:
                    translate.error_answer(entries[i], exc)
                    continue
                if diverging is not None:
                    entries[i]["diverging_epoch"] = diverging
                    continue
            asks.append((i, ask))
        if asks:
            results, _news = core.read_many([a for _i, a in asks], max_bytes=max_bytes)
            for (i, _ask), result in zip(asks, results, strict=True):
                translate.fetch_answer(entries[i], result)
        reply(entries)

    def handle_kafka_epoch_end(
        self, topic: str, index: int, epoch: int, current_leader_epoch: int, reply: Reply
    ) -> None:
        """A Kafka OffsetForLeaderEpoch of one partition (a reader's, KIP-320), answered as
        the Kafka listener answers it (`translate.epoch_end_answer`): the entry."""
        core = self.core
        assert core is not None
        entry = translate.epoch_end_entry(index)
        name = partition_name(topic, index)
        try:
            end, _epoch = core.epoch_end(
                name, epoch, leader_epoch=translate.epoch_or_none(current_leader_epoch)
            )
        except EpochlogError as exc:
            translate.error_answer(entry, exc)
        else:
            log_start = core.partitions[name].log.log_start_offset
            translate.epoch_end_answer(entry, end, epoch, log_start)
        reply(entry)

    def handle_kafka_list_offsets(
        self, parts: Sequence[tuple[str, int, int]], timestamp: int, reply: Reply
    ) -> None:
        """A Kafka ListOffsets (the newest version) of many partitions, each (topic, index,
        current leader epoch), for one timestamp (latest, earliest), answered as the Kafka
        listener answers those (`translate.offsets_at`, `translate.offsets_answer`)."""
        core = self.core
        assert core is not None
        assert not translate.wants_timestamp(timestamp), "lookups by time are not simulated"
        at = translate.offsets_at(timestamp, KAFKA_LIST_OFFSETS_VERSION)
        assert at is not None
        entries = []
        for topic, index, current in parts:
            entry = translate.offsets_entry(index)
            entries.append(entry)
            try:
                offset, leader_epoch = core.list_offsets(
                    partition_name(topic, index), at, leader_epoch=translate.epoch_or_none(current)
                )
            except EpochlogError as exc:
                translate.error_answer(entry, exc)
                continue
            translate.offsets_answer(entry, timestamp, offset, leader_epoch, translate.NO_TIMESTAMP)
        reply(entries)

    def batch_bounds(self, partition: str, upto: int) -> list[tuple[int, int]]:
        """(base offset, last offset) of the batches of a live replica's log that start at
        or above its log start and end below `upto` (for faults that aim inside one)."""
        if self.core is None or partition not in self.core.partitions:
            return []
        log = self.core.partitions[partition].log
        out: list[tuple[int, int]] = []
        offset = log.log_start_offset
        while offset < min(upto, log.log_end_offset):
            batches = log.read_batches(offset, 1 << 20, upto)
            if not batches:
                break
            for b in batches:
                h = b.header
                if h.base_offset >= log.log_start_offset and h.last_offset < upto:
                    out.append((h.base_offset, h.last_offset))
                offset = max(offset, h.last_offset + 1)
        return out

    # -- inspection ------------------------------------------------------------------------

    def records_on_disk(self, partition: str) -> set[tuple[int, str]]:
        """(offset, value) of the records this broker's replica of `partition` holds: its
        log if it runs, else what a process starting now would recover from its disk (read
        from a copy: the disk itself is left as it is)."""
        state = self.replica_state(partition)
        if state is not None:
            return {(o, v) for o, _e, v in state[0]}
        if self.alive:
            return set()  # running without the partition: nothing of it
        directory = f"/data/{partition}"
        disk = copy.deepcopy(self.fs)
        disk.stop_after(None)
        if not disk.exists(directory):
            return set()
        config = LogConfig(segment_bytes=self.config.segment_bytes)
        try:
            log = PartitionLog.open(disk, directory, config)
        except EpochlogError:
            return set()
        out: set[tuple[int, str]] = set()
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            batch = log.read_records(offset)
            if not batch:
                break
            out.update((r.offset, (r.value or b"").decode()) for r in batch)
            offset = batch[-1].offset + 1
        return out

    def replica_log_start(self, partition: str) -> int | None:
        """The log start offset of a live replica."""
        if self.core is None or partition not in self.core.partitions:
            return None
        return self.core.partitions[partition].log.log_start_offset

    def replica_state(self, partition: str) -> tuple[list[tuple[int, int, str]], int] | None:
        """(records as (offset, epoch, value), high watermark) of a live replica."""
        if self.core is None or partition not in self.core.partitions:
            return None
        host = self.core.partitions[partition]
        log = host.log
        # The audit reads every log every few simulated milliseconds: what was decoded
        # before is kept while the log has only grown (`PartitionLog.rewrites`).
        cached = self._decoded.get(partition)
        if (
            cached is not None
            and cached[0] is log
            and cached[1] == log.rewrites
            and cached[2] <= log.log_end_offset
            and log.failed is None
        ):
            # Retention may have moved the log start past what was read.
            records, offset = cached[3], max(cached[2], log.log_start_offset)
        else:
            records, offset = [], log.log_start_offset
        while offset < log.log_end_offset:
            batch = log.read_records(offset)
            if not batch:
                break
            for r in batch:
                records.append((r.offset, r.leader_epoch, (r.value or b"").decode()))
            offset = batch[-1].offset + 1
        start = log.log_start_offset
        if records and records[0][0] < start:
            records = [r for r in records if r[0] >= start]
        self._decoded[partition] = (log, log.rewrites, offset, records)
        return list(records), host.replica.high_watermark


def _broker(p: Process) -> SimBroker:
    assert isinstance(p, SimBroker)
    return p


def _controller(p: Process) -> SimController:
    assert isinstance(p, SimController)
    return p


# -- controller ------------------------------------------------------------------------


class SimController(Process):
    def __init__(
        self,
        world: World,
        store: SimPartitionStore,
        config: SimConfig,
        history: History,
        legacy: frozenset[str],
    ) -> None:
        super().__init__(world, CONTROLLER, "controller")
        self.store = store
        self.config = config
        self.history = history
        self.legacy = legacy
        self.core: ControllerCore | None = None
        self._last_write: dict[str, int] = {}
        self._offline: dict[str, tuple[str, str]] = {}
        self._next_full = 0
        self._shape: object = None
        self._decided: dict[str, PartitionInput] = {}
        self._watched: dict[str, int] = {}
        self._refresh_at: dict[str, int] = {}
        self.preferred_elections = 0
        """PreferredLeaderElected decisions written, across controller restarts."""
        self.eligible_elections = 0
        """Leaders elected from the eligible leader replicas (KIP-966)."""
        self.recoveries = 0
        """Leaders elected by unclean recovery."""
        self.silent_passed_over = 0
        """Elections that passed over an ISR member live but silent for over two heartbeat
        intervals (one that had just died)."""

    def boot(self) -> None:
        self.begin()
        self.core = ControllerCore.start(
            self.world.now,
            self.config.session_timeout_ms,
            self.config.rebalance,
            self.config.heartbeat_interval_ms,
        )
        self._last_write = {}
        self._offline = {}
        self._next_full = 0
        self._shape = None
        self._decided = {}
        self._watched = {}
        self._refresh_at = {}
        self.history.controller_starts.append(self.world.now)
        self.after(self.config.reconcile_interval_ms, self._reconcile)

    def kill(self) -> None:
        if self.alive:
            self.history.controller_stops.append(self.world.now)
        self.stop()
        self.core = None

    def handle_heartbeat(self, hb: BrokerHeartbeat, reply: Reply) -> None:
        assert self.core is not None
        self.history.heartbeats_in.setdefault(hb.broker_id, []).append(self.world.now)
        if legacy_mod.RANK_BY_KNOWN_EPOCH in self.legacy:
            hb = legacy_mod.rank_by_known_epoch(hb)
        response, _ = self.core.on_heartbeat(hb, self.world.now, self.store.inputs())
        if legacy_mod.RANK_BY_KNOWN_EPOCH in self.legacy:
            # nor does it remember what it handed out, or the statuses it read
            self.core.handed.clear()
            self.core.recorded.clear()
        if legacy_mod.REFUSE_ONCE in self.legacy:
            self.core.rejected.pop(hb.broker_id, None)  # handed out once, then forgotten
        reply(response)

    def _reconcile(self) -> None:
        core = self.core
        assert core is not None
        now = self.world.now
        inputs = self.store.inputs()
        moves = {m.name for m in core.plan_preferred(now, inputs)}
        for name in self._due(core, now, inputs, moves):
            p = inputs[name]
            decision = core.decide(name, p, now, inputs)
            if legacy_mod.COUNT_LAG in self.legacy:
                decision = legacy_mod.count_lag(decision, name, core.heartbeats)
            if legacy_mod.NO_ELR in self.legacy:
                decision = legacy_mod.no_elr(decision, p.status)
            self._note_refusals(name, decision, p.status)
            status = decision.status
            at = core.next_look_ms(name, p, decision, now, self.config.status_refresh_ms)
            if at is None:
                self._watched.pop(name, None)
            else:
                self._watched[name] = at
            if status is None:
                self._refresh_at.pop(name, None)
                continue
            last = self._last_write.get(name, -(10**15))
            due = now - last >= self.config.status_refresh_ms
            if not (decision.material or due):
                self._refresh_at[name] = last + self.config.status_refresh_ms
                continue
            self._refresh_at.pop(name, None)
            if decision.resource_version is None:
                raise InvalidRequestError(f"{name}: decision without a resourceVersion")
            self.store.write_status(name, status, decision.resource_version)
            self._last_write[name] = now
            self.preferred_elections += sum(
                e.reason is EventReason.PREFERRED_LEADER_ELECTED for e in decision.events
            )
            self.history.status_writes.append(StatusWrite(name, status, now))
            self._note_unclean(name, decision, status)
            self._note_recovery(name, decision, status)
            self._count_election(core, now, p.status, status)
        if legacy_mod.RANK_BY_KNOWN_EPOCH in self.legacy:
            core.recorded.clear()
        self.after(self.config.reconcile_interval_ms, self._reconcile)

    def _due(
        self,
        core: ControllerCore,
        now: int,
        inputs: Mapping[str, PartitionInput],
        moves: set[str],
    ) -> list[str]:
        """The Partitions to decide in this pass, as the operator's reconciler picks them:
        all of them on a full pass (every `full_reconcile_ms`, and whenever the live
        brokers or the grace period change); otherwise those whose reports or resource
        changed, those not quiet whose wake time came (`ControllerCore.wake_ms`: a lag
        clock may pass its limit, or a refresh falls due), those due a refresh and those
        a preferred leader election moves (`moves`)."""
        view = core.liveness.view(now)
        shape = (view.live_brokers(), view.in_grace)
        changed = core.take_changed()
        if now >= self._next_full or shape != self._shape:
            self._next_full = now + self.config.full_reconcile_ms
            self._shape = shape
            due = list(inputs)
        else:
            due = [
                name
                for name, p in inputs.items()
                if name in changed
                or name in moves
                or self._watched.get(name, now + 1) <= now
                or self._decided.get(name) != p
                or self._refresh_at.get(name, now + 1) <= now
            ]
        self._decided = dict(inputs)
        return due

    def _note_unclean(self, name: str, decision: Decision, status: PartitionStatus) -> None:
        """Record an unclean election the status just written made (ground truth for the
        checker: what a replica held past the new leader's log end may be gone)."""
        unclean = any(e.reason is EventReason.UNCLEAN_LEADER_ELECTION for e in decision.events)
        if not unclean or status.leader is None:
            return
        history = status.epoch_history
        start = history[-1].start_offset if history else 0
        self.history.unclean_elections.append(
            UncleanElection(self.world.now, name, status.leader_epoch, status.leader, start)
        )

    def _count_election(
        self,
        core: ControllerCore,
        now: int,
        before: PartitionStatus | None,
        status: PartitionStatus,
    ) -> None:
        if before is None or status.leader is None or status.leader_epoch == before.leader_epoch:
            return
        if status.leader in before.eligible_leader_replicas:
            self.eligible_elections += 1
        view = core.liveness.view(now)
        silent = [m for m in before.isr if view.is_live(m) and not view.recently_heard(m)]
        if any(m != status.leader for m in silent):
            self.silent_passed_over += 1

    def _note_recovery(self, name: str, decision: Decision, status: PartitionStatus) -> None:
        """Record an unclean recovery the status just written made, with the records the
        replicas' disks still held (ground truth for the checker: only what none of them
        holds is lost; a replica that died moments ago still has its disk)."""
        if status.leader is None or not any(
            e.reason is EventReason.UNCLEAN_RECOVERY for e in decision.events
        ):
            return
        self.recoveries += 1
        surviving: set[tuple[int, str]] = set()
        for b in status.replicas:
            broker = self.world.processes.get(b)
            if isinstance(broker, SimBroker):
                surviving |= broker.records_on_disk(name)
        history = status.epoch_history
        start = history[-1].start_offset if history else 0
        self.history.unclean_elections.append(
            UncleanElection(
                self.world.now,
                name,
                status.leader_epoch,
                status.leader,
                start,
                frozenset(surviving),
            )
        )

    def _note_refusals(self, name: str, decision: Decision, before: PartitionStatus | None) -> None:
        """Record refused ISR proposals, and each new reason for leaving `name` leaderless."""
        now = self.world.now
        for r in decision.rejected_proposals:
            self.history.refusals.append(
                Refusal(now, name, "isr-proposal", r.reason, r.replica, r.proposal_id)
            )
        offline = _offline_condition(decision.status or before)
        if offline is None:
            self._offline.pop(name, None)
        elif self._offline.get(name) != offline:
            # A decision repeats every reconcile interval; one line per reason is enough.
            self._offline[name] = offline
            reason, message = offline
            self.history.refusals.append(Refusal(now, name, "offline", f"{reason}: {message}"))


def _offline_condition(status: PartitionStatus | None) -> tuple[str, str] | None:
    """(reason, message) of a status's Offline condition while it holds."""
    if status is None or status.leader is not None:
        return None
    for c in status.conditions:
        if c.type is ConditionType.OFFLINE and c.status is ConditionStatus.TRUE:
            return c.reason, c.message
    return None
