"""One broker's partitions, roles and disk, driven by events: the broker minus its network.

`BrokerCore` owns, for one broker process: the partition logs under its data
directory, one `Replica` per hosted partition, the replication-offset-checkpoint
and the translation between the replication state machines' actions and the
logs. It does disk I/O through a `FileSystem` (the real one in the server, the
crash-simulating one in the simulator) but no network and no clock: the shell
passes `now_ms` in and carries out the `Effect`s that come back, and it decides
when to fsync (`flush`) and when to write the HW checkpoint. The aiohttp server
and the simulator drive this same class, so the simulator runs the broker's
real logic on a simulated disk.

Protocol with the shell:
- `open()` once, then a heartbeat (`heartbeat()`) every heartbeat interval;
  hand the controller's answer to `on_heartbeat_response`.
- Produce, consumer reads and ListOffsets: `produce`, `read`, `list_offsets`.
  They raise typed errors; a produce is answered later by a `ProduceDone`.
- Replication: `SendToLeader` effects go to the leader's `handle_fetch` /
  `handle_offsets_for_leader_epoch`; their answers (or failures) come back
  through `on_fetch_response`, `on_epoch_end_offset` and `on_request_failed`,
  tagged with the session of the role that sent them (answers to a role that
  has since been replaced are dropped).
- `flush()` when `dirty` is set (group commit: one fsync covers every append
  since the last); nothing counts as persisted, for acks or for the fetch
  offset a follower reports, before it. `tick()` at `next_deadline_ms()`.
  A shell that fsyncs off its event loop runs the same flush in three steps:
  `begin_flush()`, `sync_log(name)` for each log (in a worker thread, while
  nothing truncates or closes that log), `end_flush(name, persisted)`.
- `checkpoint_high_watermarks()` periodically and in `close()`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from epochlog.errors import (
    EpochlogError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
)
from epochlog.heartbeat import (
    BrokerHeartbeat,
    FollowerProgress,
    HeartbeatResponse,
    IsrProposal,
    PartitionAssignment,
    PartitionReport,
    PartitionRole,
)
from epochlog_broker.log.batch import LogRecord, Record, RecordBatch
from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.fs import FileSystem, ensure_dir
from epochlog_broker.log.partition_log import PartitionLog, RecoveryReport
from epochlog_broker.replication.follower import (
    Append,
    Follower,
    FollowerAction,
    FollowerState,
    SendFetch,
    SendOffsetsForLeaderEpoch,
    Truncate,
)
from epochlog_broker.replication.leader import (
    Leader,
    LeaderAction,
    ProduceCompleted,
    ProduceFailed,
    ProposeIsr,
    ReadRange,
)
from epochlog_broker.replication.messages import (
    Acks,
    Batch,
    DivergingEpoch,
    EpochEndOffset,
    FetchData,
    FetchRequest,
    OffsetsForLeaderEpochRequest,
)
from epochlog_broker.replication.producers import NO_PRODUCER, ProducerStates
from epochlog_broker.replication.replica import (
    Assignment,
    LogFacts,
    PartitionConfig,
    Replica,
    TransitionKind,
)

log = structlog.get_logger("epochlog.broker")

EARLIEST = "earliest"
LATEST = "latest"


# -- effects -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendToLeader:
    """Send `request` to broker `leader_id`; report the answer with the same `session`."""

    partition: str
    leader_id: int
    session: int
    request: FetchRequest | OffsetsForLeaderEpochRequest


@dataclass(frozen=True, slots=True)
class ProduceDone:
    """A produce request is answered: acknowledged (`error` None) or failed."""

    request_id: int
    partition: str
    base_offset: int
    last_offset: int
    leader_epoch: int
    error: EpochlogError | None = None


Effect = SendToLeader | ProduceDone


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[LogRecord]
    high_watermark: int
    log_start_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BatchReadResult:
    """Stored batches for a reader; the first may start below the offset asked for."""

    batches: list[RecordBatch]
    high_watermark: int
    log_start_offset: int
    leader_epoch: int


class PreparedBatch(Protocol):
    """Records a client encoded as one batch; offsets and epoch are set at append time."""

    @property
    def record_count(self) -> int: ...

    def stamp(self, base_offset: int, leader_epoch: int) -> RecordBatch:
        """The batch with `base_offset` and `leader_epoch` set (CRC updated)."""
        ...


@dataclass(slots=True)
class _Pending:
    partition: str
    base_offset: int
    last_offset: int
    leader_epoch: int


@dataclass(slots=True)
class Hosted:
    """One partition on this broker: its log, its replica state, its role session."""

    log: PartitionLog
    replica: Replica
    session: int = 0
    dirty: bool = False
    recovery: RecoveryReport | None = None
    producers: ProducerStates = field(default_factory=ProducerStates)

    def rebuild_producers(self) -> None:
        self.producers = ProducerStates.rebuild(
            (
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.record_count,
                h.base_offset,
                h.leader_epoch,
            )
            for h in self.log.batch_headers()
        )


@dataclass(frozen=True, slots=True)
class ProducerFields:
    """An idempotent producer's identity and the sequence of a batch's first record."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass
class BrokerCore:
    broker_id: int
    broker_epoch: int
    fs: FileSystem
    data_dir: str
    address: str = ""
    log_config: LogConfig = field(default_factory=LogConfig)
    partitions: dict[str, Hosted] = field(default_factory=dict)
    fenced: bool = False

    # A test bed substitutes variants of the replica rules through this attribute.
    replica_class: type[Replica] = field(default=Replica, repr=False)

    def __post_init__(self) -> None:
        self._pending: dict[int, _Pending] = {}
        self._hw_checkpoint: HighWatermarkCheckpoint | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> list[RecoveryReport]:
        """Recover every partition log on disk and load the HW checkpoint."""
        ensure_dir(self.fs, self.data_dir)
        self._hw_checkpoint = HighWatermarkCheckpoint.load(self.fs, self.data_dir)
        if self._hw_checkpoint.load_error is not None:
            log.warning(
                "hw_checkpoint_damaged",
                broker=self.broker_id,
                error=str(self._hw_checkpoint.load_error),
            )
        reports = []
        for name in sorted(self.fs.listdir(self.data_dir)):
            if self.fs.is_dir(posixpath.join(self.data_dir, name)):
                reports.append(self._host(name).log.recovery)
        return reports

    def close(self) -> None:
        """Flush, checkpoint and close every log (a clean shutdown)."""
        self.flush()
        self.checkpoint_high_watermarks()
        for host in self.partitions.values():
            host.log.close()

    @property
    def hw_checkpoint(self) -> HighWatermarkCheckpoint:
        if self._hw_checkpoint is None:
            raise RuntimeError("BrokerCore.open() was not called")
        return self._hw_checkpoint

    def _host(self, name: str) -> Hosted:
        host = self.partitions.get(name)
        if host is not None:
            return host
        directory = posixpath.join(self.data_dir, name)
        plog = PartitionLog.open(self.fs, directory, self.log_config, name=name)
        replica = self.replica_class(
            partition=name,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            config=PartitionConfig(),
            high_watermark=self.hw_checkpoint.get(name) or 0,
        )
        host = Hosted(plog, replica, recovery=plog.recovery)
        host.rebuild_producers()
        self.partitions[name] = host
        log.info(
            "partition_opened",
            partition=name,
            logEndOffset=plog.log_end_offset,
            highWatermark=replica.high_watermark,
            leaderEpoch=plog.latest_epoch,
            truncatedBytes=plog.recovery.truncated_bytes,
        )
        return host

    def _get(self, name: str) -> Hosted:
        host = self.partitions.get(name)
        if host is None:
            raise UnknownPartitionError(f"broker {self.broker_id} hosts no partition {name}")
        return host

    # -- controller ------------------------------------------------------------------------

    def heartbeat(self, now_ms: int) -> BrokerHeartbeat:
        return BrokerHeartbeat(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            address=self.address or f"broker-{self.broker_id}",
            time_ms=now_ms,
            partitions=tuple(self._report(n, h) for n, h in sorted(self.partitions.items())),
        )

    def _report(self, name: str, host: Hosted) -> PartitionReport:
        replica, plog = host.replica, host.log
        role = replica.role
        if isinstance(role, Leader):
            hb = role.heartbeat()
            proposals: tuple[IsrProposal, ...] = ()
            pending = role.pending_proposal
            if pending is not None:
                proposals = tuple(
                    IsrProposal(
                        replica=r,
                        broker_epoch=be,
                        log_end_offset=role.follower_log_end_offset(r) or 0,
                        proposal_id=pending.proposal_id,
                    )
                    for r, be in pending.broker_epochs
                )
            return PartitionReport(
                name=name,
                role=PartitionRole.LEADER,
                leader_epoch=hb.leader_epoch,
                partition_epoch=hb.partition_epoch,
                log_end_offset=hb.persisted_log_end_offset,
                high_watermark=hb.high_watermark,
                epoch_start_offset=role.epoch_start_offset,
                followers=tuple(
                    FollowerProgress(
                        replica=f.broker_id,
                        log_end_offset=f.log_end_offset,
                        last_caught_up_time=f.last_caught_up_time_ms,
                    )
                    for f in hb.followers
                    if f.log_end_offset is not None
                ),
                isr_proposals=proposals,
            )
        assignment = replica.assignment
        return PartitionReport(
            name=name,
            role=PartitionRole.FOLLOWER,
            leader_epoch=max(0, replica.leader_epoch, plog.latest_epoch),
            partition_epoch=assignment.partition_epoch if assignment else 0,
            log_end_offset=plog.persisted_log_end_offset,
            high_watermark=replica.high_watermark,
        )

    def on_heartbeat_response(self, response: HeartbeatResponse, now_ms: int) -> list[Effect]:
        if response.fenced:
            if not self.fenced:
                log.warning("broker_fenced", broker=self.broker_id, brokerEpoch=self.broker_epoch)
            self.fenced = True
            return []
        effects: list[Effect] = []
        for pa in response.assignments:
            if pa.name in self.partitions or self.broker_id in pa.replicas:
                effects += self._apply(pa, now_ms)
        for rej in response.rejected_isr_proposals:
            host = self.partitions.get(rej.name)
            role = host.replica.role if host else None
            if (
                host is not None
                and isinstance(role, Leader)
                and role.leader_epoch == rej.leader_epoch
                and role.partition_epoch == rej.partition_epoch
                and role.pending_proposal is not None
                and role.pending_proposal.proposal_id == rej.proposal_id
                and rej.replica in role.pending_proposal.isr - role.isr
            ):
                log.info(
                    "isr_proposal_rejected",
                    partition=rej.name,
                    leaderEpoch=rej.leader_epoch,
                    replica=rej.replica,
                    reason=rej.reason,
                )
                effects += self._leader_effects(role.on_isr_proposal_rejected(rej.proposal_id))
        return effects

    def _apply(self, pa: PartitionAssignment, now_ms: int) -> list[Effect]:
        host = self._host(pa.name)
        replica, plog = host.replica, host.log
        replica.config = PartitionConfig(pa.min_insync_replicas, pa.replica_lag_time_max_ms)
        facts = LogFacts(
            plog.log_end_offset,
            plog.persisted_log_end_offset,
            self.hw_checkpoint.get(pa.name) or 0,
            plog.epochs,
        )
        assignment = Assignment(
            pa.leader, pa.leader_epoch, pa.partition_epoch, frozenset(pa.isr), pa.replicas
        )
        t = replica.apply(assignment, facts, now_ms)
        if t.kind is TransitionKind.IGNORED:
            return []
        if t.kind is not TransitionKind.ISR_UPDATED:
            host.session += 1
            log.info(
                t.kind.value.replace("-", "_"),
                partition=pa.name,
                leaderEpoch=pa.leader_epoch,
                partitionEpoch=pa.partition_epoch,
                leader=pa.leader,
                logEndOffset=plog.log_end_offset,
                highWatermark=replica.high_watermark,
            )
        leader_actions = [a for a in t.actions if isinstance(a, LeaderAction)]
        follower_actions = [a for a in t.actions if not isinstance(a, LeaderAction)]
        return self._leader_effects(leader_actions) + self._follower_effects(host, follower_actions)

    # -- produce ---------------------------------------------------------------------------

    def produce(
        self,
        name: str,
        records: Sequence[Record] | PreparedBatch,
        *,
        acks: Acks,
        timeout_ms: int,
        now_ms: int,
        request_id: int,
        leader_epoch: int | None = None,
        producer: ProducerFields | None = None,
    ) -> list[Effect]:
        """Append `records` as leader; the answer comes as a `ProduceDone` effect.

        With `producer`, a batch already in the log (a retry) is not appended again:
        the request waits for, and is answered with, the offsets of the first copy.
        """
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        epoch = role.begin_produce(acks)
        p = producer or ProducerFields(NO_PRODUCER, -1, -1)
        count = len(records) if isinstance(records, Sequence) else records.record_count
        written = host.producers.check(p.producer_id, p.producer_epoch, p.base_sequence, count)
        if written is not None:
            log.info(
                "duplicate_batch",
                partition=name,
                producerId=p.producer_id,
                baseSequence=p.base_sequence,
                baseOffset=written.base_offset,
            )
            self._pending[request_id] = _Pending(
                name, written.base_offset, written.last_offset, epoch
            )
            return self._leader_effects(
                role.on_appended(
                    request_id=request_id,
                    last_offset=written.last_offset,
                    log_end_offset=host.log.log_end_offset,
                    acks=acks,
                    now_ms=now_ms,
                    timeout_ms=timeout_ms,
                )
            )
        if isinstance(records, Sequence):
            result = host.log.append_records(
                records,
                leader_epoch=epoch,
                timestamp=now_ms,
                producer_id=p.producer_id,
                producer_epoch=p.producer_epoch,
                base_sequence=p.base_sequence,
            )
        else:
            # The caller checked that the batch's producer fields are `producer`'s.
            result = host.log.append_checked(records.stamp(host.log.log_end_offset, epoch))
        host.producers.record(
            p.producer_id,
            p.producer_epoch,
            p.base_sequence,
            count,
            result.base_offset,
            epoch,
        )
        self._pending[request_id] = _Pending(name, result.base_offset, result.last_offset, epoch)
        effects = self._leader_effects(
            role.on_appended(
                request_id=request_id,
                last_offset=result.last_offset,
                log_end_offset=result.log_end_offset,
                acks=acks,
                now_ms=now_ms,
                timeout_ms=timeout_ms,
            )
        )
        return effects + self._after_append(host)

    def _leader(self, host: Hosted, client_epoch: int | None) -> Leader:
        replica = host.replica
        role = replica.role
        assignment = replica.assignment
        if not isinstance(role, Leader):
            if client_epoch is not None and client_epoch > replica.leader_epoch:
                # The controller's assignment for that epoch has not reached us yet.
                raise UnknownLeaderEpochError(
                    f"{replica.partition}: leader epoch {client_epoch} is not known yet on "
                    f"broker {self.broker_id} (knows {replica.leader_epoch})",
                    leaderEpoch=replica.leader_epoch,
                )
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {replica.partition}",
                leader=assignment.leader if assignment else None,
                leaderEpoch=replica.leader_epoch,
            )
        if client_epoch is not None and client_epoch < role.leader_epoch:
            raise FencedLeaderEpochError(
                f"{replica.partition}: leader epoch {client_epoch} is older than "
                f"{role.leader_epoch}",
                leader=self.broker_id,
                leaderEpoch=role.leader_epoch,
            )
        if client_epoch is not None and client_epoch > role.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{replica.partition}: leader epoch {client_epoch} is newer than "
                f"{role.leader_epoch} on broker {self.broker_id}",
                leader=self.broker_id,
                leaderEpoch=role.leader_epoch,
            )
        return role

    def _after_append(self, host: Hosted) -> list[Effect]:
        """Appended data waits for the next `flush` before anything counts it."""
        host.dirty = True
        return []

    def _leader_effects(self, actions: Sequence[LeaderAction]) -> list[Effect]:
        out: list[Effect] = []
        for a in actions:
            if isinstance(a, ProposeIsr):
                continue  # reported in the next heartbeat
            p = self._pending.pop(a.request_id, None)
            if p is None:
                continue
            error = a.error if isinstance(a, ProduceFailed) else None
            assert isinstance(a, ProduceCompleted | ProduceFailed)
            out.append(
                ProduceDone(
                    a.request_id, p.partition, p.base_offset, p.last_offset, p.leader_epoch, error
                )
            )
        return out

    # -- fsync -----------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return any(h.dirty for h in self.partitions.values())

    def flush(self) -> list[Effect]:
        """fsync every log appended to since the last flush and report the persisted ends."""
        effects: list[Effect] = []
        for host in self.partitions.values():
            if host.dirty:
                host.dirty = False
                effects += self._report_persisted(host, host.log.flush())
        return effects

    def begin_flush(self) -> list[str]:
        """Step 1 of a flush off the event loop: the logs to sync, marked clean from now."""
        names = [name for name, host in self.partitions.items() if host.dirty]
        for name in names:
            self.partitions[name].dirty = False
        return names

    def sync_log(self, name: str) -> int:
        """Step 2, safe in a worker thread while appends go on: fsync one log.

        Returns its persisted log end. The caller keeps truncation and close of
        this log from running meanwhile.
        """
        return self._get(name).log.flush()

    def end_flush(self, name: str, persisted: int) -> list[Effect]:
        """Step 3, back on the event loop: report what `sync_log` made durable."""
        host = self.partitions.get(name)
        return [] if host is None else self._report_persisted(host, persisted)

    def _report_persisted(self, host: Hosted, persisted: int) -> list[Effect]:
        role = host.replica.role
        if isinstance(role, Leader):
            return self._leader_effects(role.on_flushed(persisted))
        if isinstance(role, Follower) and role.state is FollowerState.APPENDING:
            return self._follower_effects(host, role.on_flushed(persisted))
        return []

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            d
            for h in self.partitions.values()
            if isinstance(h.replica.role, Leader)
            and (d := h.replica.role.next_deadline_ms()) is not None
        ]
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for host in self.partitions.values():
            if isinstance(host.replica.role, Leader):
                effects += self._leader_effects(host.replica.role.tick(now_ms))
        return effects

    def checkpoint_high_watermarks(self) -> dict[str, int]:
        cp = self.hw_checkpoint
        for name, host in self.partitions.items():
            cp.update(name, host.replica.high_watermark)
        return cp.write(self._checkpointed_partitions())

    def _checkpointed_partitions(self) -> list[str]:
        # Every partition on disk keeps its line, whatever its role (KAFKA-1647).
        return sorted(self.partitions)

    # -- replication: leader side ----------------------------------------------------------

    def handle_fetch(
        self, name: str, request: FetchRequest, now_ms: int, max_bytes: int = 1 << 20
    ) -> tuple[FetchData | DivergingEpoch, list[Effect]]:
        host = self._get(name)
        role = self._leader(host, request.leader_epoch)
        decision = role.on_fetch(request, now_ms)
        effects = self._leader_effects(decision.actions)
        answer = decision.answer
        if isinstance(answer, DivergingEpoch):
            return answer, effects
        assert isinstance(answer, ReadRange)
        batches = host.log.read_batches(answer.start_offset, max_bytes, answer.end_offset)
        return (
            FetchData(
                answer.leader_epoch,
                answer.high_watermark,
                tuple(Batch(b.base_offset, b.last_offset, b.leader_epoch, b) for b in batches),
            ),
            effects,
        )

    def handle_offsets_for_leader_epoch(
        self, name: str, request: OffsetsForLeaderEpochRequest
    ) -> EpochEndOffset:
        host = self._get(name)
        return self._leader(host, request.leader_epoch).offsets_for_leader_epoch(request)

    # -- replication: follower side --------------------------------------------------------

    def _follower_for(self, name: str, session: int) -> tuple[Hosted, Follower] | None:
        host = self.partitions.get(name)
        if host is None or host.session != session:
            return None
        role = host.replica.role
        return (host, role) if isinstance(role, Follower) else None

    def on_fetch_response(
        self, name: str, session: int, answer: FetchData | DivergingEpoch
    ) -> list[Effect]:
        found = self._follower_for(name, session)
        if found is None or found[1].state is not FollowerState.FETCHING:
            return []
        host, follower = found
        return self._follower_effects(host, follower.on_fetch_response(answer))

    def on_epoch_end_offset(self, name: str, session: int, answer: EpochEndOffset) -> list[Effect]:
        found = self._follower_for(name, session)
        if found is None or found[1].state is not FollowerState.FINDING_DIVERGENCE:
            return []
        host, follower = found
        return self._follower_effects(host, follower.on_epoch_end_offset(answer))

    def on_request_failed(
        self, name: str, session: int, error: EpochlogError | None
    ) -> list[Effect]:
        found = self._follower_for(name, session)
        if found is None or found[1].state not in (
            FollowerState.FETCHING,
            FollowerState.FINDING_DIVERGENCE,
        ):
            return []
        host, follower = found
        return self._follower_effects(host, follower.on_error(error))

    def _follower_effects(self, host: Hosted, actions: Sequence[FollowerAction]) -> list[Effect]:
        out: list[Effect] = []
        for a in actions:
            if isinstance(a, Truncate):
                if host.log.truncate_to(a.offset):
                    host.rebuild_producers()
            elif isinstance(a, Append):
                for b in a.batches:
                    # Batches come as the leader's log read them or as the replica wire
                    # unframed them: checked once there, not again here.
                    if not isinstance(b.payload, RecordBatch):
                        raise InvalidRequestError(f"{host.log.name}: batch without bytes")
                    host.log.append_checked(b.payload)
                    h = b.payload.header
                    host.producers.record(
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.record_count,
                        h.base_offset,
                        h.leader_epoch,
                    )
                out += self._after_append(host)
            elif isinstance(a, SendFetch | SendOffsetsForLeaderEpoch):
                out.append(SendToLeader(host.log.name, a.leader_id, host.session, a.request))
        return out

    # -- clients ---------------------------------------------------------------------------

    def read(
        self,
        name: str,
        offset: int,
        *,
        max_records: int | None = None,
        max_bytes: int = 1 << 20,
        leader_epoch: int | None = None,
    ) -> ReadResult:
        """Records from `offset` below the high watermark (consumers read from the leader)."""
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        hw = host.replica.client_high_watermark()
        plog = host.log
        if not plog.log_start_offset <= offset <= plog.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{name}: offset {offset} is outside [{plog.log_start_offset}, "
                f"{plog.log_end_offset}]",
                logStartOffset=plog.log_start_offset,
                highWatermark=hw,
                leaderEpoch=role.leader_epoch,
            )
        records = (
            plog.read_records(offset, max_records=max_records, max_bytes=max_bytes, upper_bound=hw)
            if offset < hw
            else []
        )
        return ReadResult(records, hw, plog.log_start_offset, role.leader_epoch)

    def read_batches(
        self,
        name: str,
        offset: int,
        *,
        max_bytes: int = 1 << 20,
        leader_epoch: int | None = None,
    ) -> BatchReadResult:
        """`read` as stored batches, for readers that decode batches themselves."""
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        hw = host.replica.client_high_watermark()
        plog = host.log
        if not plog.log_start_offset <= offset <= plog.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{name}: offset {offset} is outside [{plog.log_start_offset}, "
                f"{plog.log_end_offset}]",
                logStartOffset=plog.log_start_offset,
                highWatermark=hw,
                leaderEpoch=role.leader_epoch,
            )
        batches = plog.read_batches(offset, max_bytes, hw) if offset < hw else []
        return BatchReadResult(batches, hw, plog.log_start_offset, role.leader_epoch)

    def list_offsets(
        self, name: str, at: str | int, *, leader_epoch: int | None = None
    ) -> tuple[int, int]:
        """ListOffsets: (offset, leaderEpoch) for earliest, latest or a timestamp in ms."""
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        hw = host.replica.client_high_watermark()
        if at == EARLIEST:
            return host.log.log_start_offset, role.leader_epoch
        if at == LATEST:
            return hw, role.leader_epoch
        if not isinstance(at, int) or at < 0:
            raise InvalidRequestError(f"{name}: at must be earliest, latest or a time in ms")
        offset = host.log.log_start_offset
        while offset < hw:
            records = host.log.read_records(offset, upper_bound=hw)
            for r in records:
                if r.timestamp >= at:
                    return r.offset, role.leader_epoch
            if not records:
                break
            offset = records[-1].offset + 1
        return hw, role.leader_epoch
