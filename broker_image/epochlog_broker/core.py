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
  hand the controller's answer to `on_heartbeat_response`. A `Restart` effect
  (the controller fenced this brokerEpoch) asks the shell to close the core and
  open a new one with a new brokerEpoch.
- Produce, consumer reads, ListOffsets and a reader's epoch query: `produce`,
  `read`, `list_offsets`, `epoch_end`. They raise typed errors; a produce is
  answered later by a `ProduceDone`.
- Replication, follower side: fetches go in one fetch session per leader
  broker (`fetch_session`). After every call that returned effects, the shell
  takes `session_requests()`; each `SendSession` is, after its `delay_ms`,
  built with `session_request(leader_id)`, sent to that leader's
  `handle_session_fetch`, and what comes back (the answer, a session-level
  error, nothing) goes to `on_session_answer`. Each partition's entry in an
  answer goes through `on_leader_answer`, which counts that partition's
  failures in a row (the backoff of its next fetch, `FetchBackoff`), keeps the
  leader's high watermark for readiness (`Hosted.leader_high_watermark`) and
  asks again after an answer that does not fit the log. A fetch in backoff
  comes out as a `SendToLeader` the shell hands back to `fetch_due` after its
  delay; a divergence query is a `SendToLeader` sent to the leader's
  `handle_offsets_for_leader_epoch` on its own. Answers to a role that has
  since been replaced are dropped (`on_fetch_response`, `on_epoch_end_offset`
  and `on_request_failed` are the steps it takes, matched by the session token
  of the role that asked).
- Replication, leader side: `handle_session_fetch` answers what has news; an
  answer without partitions may be held by the shell until
  `take_woken_sessions()` names the follower (an append to one of its
  partitions, a role change), then `resume_session_fetch`. A request that
  names its brokerEpoch apart from its body goes to `check_replica_epoch`
  before the shell reads the body.
- Long polls: after a leader's fetch or a flush, `high_watermark_moved(name)`
  says whether to wake the consumers waiting on `name`.
- `flush()` when `dirty` is set (group commit: one fsync covers every append
  since the last); nothing counts as persisted, for acks or for the fetch
  offset a follower reports, before it. `tick()` at `next_deadline_ms()`.
  A shell that fsyncs off its event loop runs the same flush in three steps:
  `begin_flush()`, `sync_logs(names)` (in a worker thread, while nothing
  truncates or closes those logs), `end_flush(name, persisted)` for each.
- `checkpoint_high_watermarks()` periodically and in `close()`.
- Retention: `enforce_retention(now_ms)` every retention check interval (Kafka's
  log.retention.check.interval.ms). It looks only at partitions that may have
  something to delete (`RetentionCandidates`: written to with closed segments, a
  moved log start, new settings, reopened, or an oldest segment whose time has
  come), so an idle pass costs nothing however many partitions there are. It
  moves log starts (`log_retention.decide_retention`), writes the
  `log-start-offset-checkpoint` once, then deletes the segments below the starts.
  `delete_records` (a leader, DeleteRecords) moves a log start up to the HW the same
  way. Leaders carry their log start in fetch answers; followers take it up to their
  own HW, and a follower whose log ends below the leader's log start starts its log
  over there. Followers report their log start in every fetch; a DeleteRecords is
  answered by a `DeleteRecordsDone` once the leader's low watermark (the smallest log
  start of the in-sync replicas) reaches the new start, or with REQUEST_TIMED_OUT at
  its deadline (`tick`), as Kafka's.
- Storage faults stay inside the partition: an I/O error, a full disk or damaged
  data of one log (at open or later) takes only that replica offline
  (`Hosted.fault`; `storage_error_of(name)` for the heartbeat). Its requests
  answer the retriable ReplicaOfflineError (STORAGE_ERROR), a leader resigns
  (its waiting produces fail). After a call that raised, run
  `take_deferred()`'s effects. Every few seconds (`RECOVERY_INTERVAL_MS`) the
  shell tries to bring offline replicas back, in three steps like a flush:
  `begin_recovery(now_ms)` on the event loop, `attempt_recovery(attempt)` in a
  worker thread (repair if allowed, reopen, probe the directory),
  `end_recovery(attempt, outcome, now_ms)` back on the loop; or `recover(now_ms)`
  in one go. A replica back from a fault starts over as a follower of its last
  assignment and never leads again an epoch it led before the fault.
- Reassignment: a partition the controller reassigned away comes back in the
  answer's `stopReplicas`; `on_heartbeat_response` stops its replica and deletes
  its directory's files (`replica_deletion`), only when the assignment this
  broker holds names it and is older. Nothing else deletes a replica.
"""

from __future__ import annotations

import functools
import heapq
import ipaddress
import posixpath
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar, cast

import structlog

from epochlog.protocol.batch import BatchHeader, LogRecord, Record, RecordBatch
from epochlog.protocol.epochs import reported_epoch
from epochlog.protocol.errors import (
    CorruptRecordError,
    EpochlogError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    ReplicaOfflineError,
    StorageError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
)
from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    ControlledShutdownProgress,
    FollowerProgress,
    HeartbeatResponse,
    HeldAssignment,
    IsrProposal,
    PartitionAssignment,
    PartitionReport,
    PartitionRole,
    TlsReport,
)
from epochlog_broker.answer_writes import AnswerWrites
from epochlog_broker.held_assignment import read_held, write_held
from epochlog_broker.log.batch_sync import sync_dirs, sync_files
from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint, LogStartCheckpoint
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.fs import File, FileSystem, ensure_dir
from epochlog_broker.log.partition_log import PartitionLog, RecoveryReport
from epochlog_broker.log.repair import RepairPlan, apply_repair, plan_repair, probe_space
from epochlog_broker.log.retention import RetentionLimits, decide_retention
from epochlog_broker.log.retention_candidates import RetentionCandidates, expiry_ms
from epochlog_broker.log.storage_id import load_or_format, new_storage_id
from epochlog_broker.replica_deletion import delete_files, is_deleted
from epochlog_broker.replication.fetch_backoff import FetchBackoff, LeaderFailures
from epochlog_broker.replication.fetch_session import (
    FollowerSession,
    LeaderSession,
    LeaderSessions,
    PartitionAnswer,
    SessionFetchAnswer,
    SessionFetchRequest,
)
from epochlog_broker.replication.follower import (
    Append,
    Follower,
    FollowerAction,
    FollowerState,
    SendFetch,
    SendOffsetsForLeaderEpoch,
    StartAt,
    Truncate,
)
from epochlog_broker.replication.leader import (
    DeleteRecordsCompleted,
    DeleteRecordsFailed,
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
    Offline,
    PartitionConfig,
    Replica,
    TransitionKind,
)
from epochlog_broker.replication.throttle import ByteRate
from epochlog_broker.report_session import DEFAULT_PROGRESS_EVERY, ReportSession
from epochlog_broker.storage_faults import (
    FaultKind,
    StorageFault,
    kind_of,
    retry_delay_ms,
    wants_attempt,
)

log = structlog.get_logger("epochlog.broker")

EARLIEST = "earliest"
LATEST = "latest"
MAX_TIMESTAMP = "max-timestamp"
"""ListOffsets at the first record stamped with the log's largest timestamp (KIP-734)."""
DEFAULT_CAUGHT_UP_WINDOW_MS = 1_000
"""Twice the broker's default replica fetch wait: an idle follower fetches again sooner."""
RECOVERY_INTERVAL_MS = 500
"""How often the shell calls `begin_recovery` while a replica is offline."""
FACTS_SWEEP_HEARTBEATS = 60
"""Every partition's report is fingerprinted anew at least once in this many heartbeats
(30 s at the default interval), touched or not."""
_DISK_ERRORS = (StorageError, CorruptRecordError, OSError)
_Read = TypeVar("_Read")
"""What a consumer's read returns a list of: records, or stored batches."""


_ReportFacts = tuple[
    PartitionRole,
    int,
    int,
    int,
    int,
    int,
    HeldAssignment | None,
    str | None,
    int | None,
    tuple[tuple[int, int, bool, int | None], ...],
    tuple[tuple[int, int, int, int], ...],
    int,
]
"""role, leaderEpoch, partitionEpoch, logEndOffset, lastEpoch, highWatermark, assignment,
storageError, epochStartOffset, followers (replica, logEndOffset, caughtUp,
lastCaughtUpTime), proposals (replica, brokerEpoch, logEndOffset, proposalId),
logStartOffset."""


def _steady_facts(key: Hashable) -> Hashable:
    """A report's facts without what moves with every write: the log end, the high
    watermark and each follower's log end (`ReportSession.steady`)."""
    role, epoch, pepoch, _end, last, _hw, held, error, start, followers, proposals, first = cast(
        _ReportFacts, key
    )
    return (
        role,
        epoch,
        pepoch,
        last,
        held,
        error,
        start,
        tuple((r, caught_up, t) for r, _o, caught_up, t in followers),
        proposals,
        first,
    )


def _report(name: str, facts: _ReportFacts) -> PartitionReport:
    role, epoch, pepoch, end, last, hw, held, error, start, followers, proposals, first = facts
    return PartitionReport(
        name=name,
        role=role,
        leader_epoch=epoch,
        partition_epoch=pepoch,
        log_end_offset=end,
        last_epoch=last,
        high_watermark=hw,
        assignment=held,
        storage_error=error,
        epoch_start_offset=start,
        log_start_offset=first,
        followers=tuple(
            FollowerProgress(
                replica=r, log_end_offset=o, last_caught_up_time=t, caught_up=caught_up
            )
            for r, o, caught_up, t in followers
        ),
        isr_proposals=tuple(
            IsrProposal(replica=r, broker_epoch=be, log_end_offset=o, proposal_id=pid)
            for r, be, o, pid in proposals
        ),
    )


@functools.lru_cache(maxsize=16_384)
def _held(a: Assignment | None) -> HeldAssignment | None:
    """The on-disk and reported form of an assignment (cached: every heartbeat asks it
    of every partition, and assignments rarely change)."""
    if a is None:
        return None
    return HeldAssignment(
        leader=a.leader,
        leader_epoch=a.leader_epoch,
        partition_epoch=a.partition_epoch,
        isr=tuple(sorted(a.isr)),
        replicas=a.replicas,
        isr_storage_ids=dict(a.isr_storage_ids),
        eligible_leader_replicas=a.eligible_leader_replicas,
        eligible_leader_replica_storage_ids=dict(a.eligible_leader_replica_storage_ids),
    )


# -- effects -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendToLeader:
    """After `delay_ms`, send `request` to broker `leader_id`; hand what comes back to
    `on_leader_answer` with this effect."""

    partition: str
    leader_id: int
    session: int
    request: FetchRequest | OffsetsForLeaderEpochRequest
    delay_ms: int = 0
    """The backoff after failed requests to this leader, or the wait after an answer
    without data (`FetchBackoff`)."""


@dataclass(frozen=True, slots=True)
class SendSession:
    """After `delay_ms`, build the next request of the fetch session with broker
    `leader_id` (`session_request`), send it, and hand what comes back to
    `on_session_answer`."""

    leader_id: int
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class SessionServed:
    """A leader's answer to a fetch session request, with the effects of serving it and
    the partitions it looked at (whose high watermark may have moved)."""

    answer: SessionFetchAnswer
    effects: list[Effect]
    partitions: list[str]
    hold: bool = False
    """The answer has no news and may be held for data (`resume_session_fetch`)."""


@dataclass(frozen=True, slots=True)
class ProduceDone:
    """A produce request is answered: acknowledged (`error` None) or failed."""

    request_id: int
    partition: str
    base_offset: int
    last_offset: int
    leader_epoch: int
    error: EpochlogError | None = None


@dataclass(frozen=True, slots=True)
class Restart:
    """Close the core and open it again with a new brokerEpoch (the controller fenced
    this one: it must rejoin as a new process would)."""

    reason: str


@dataclass(frozen=True, slots=True)
class DeleteRecordsDone:
    """A DeleteRecords request is answered: the low watermark reached `log_start_offset`
    (`error` None), or it failed (REQUEST_TIMED_OUT, the leadership ended). Records
    below the offset are deleted at the leader either way."""

    request_id: int
    partition: str
    log_start_offset: int
    leader_epoch: int
    error: EpochlogError | None = None


Effect = SendToLeader | SendSession | ProduceDone | DeleteRecordsDone | Restart


@dataclass(frozen=True, slots=True)
class _WantedFetch:
    """A partition's next fetch, as its fetch session holds it."""

    sent: SendToLeader
    request: FetchRequest
    session: int


LeaderAnswer = FetchData | DivergingEpoch | EpochEndOffset
"""What a leader answers a `SendToLeader` request with, when it answers without an error."""


@dataclass(frozen=True, slots=True)
class LeaderAnswerApplied:
    """What `on_leader_answer` made of an answer: the effects to carry out, and how the
    request ended for the shell's replica-request metric."""

    effects: list[Effect]
    result: str
    """"ok", the error code of the leader's error or of an answer that could not be
    appended, or "unreachable" (no answer, or one that does not fit the log)."""


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


@dataclass(frozen=True, slots=True)
class ReadAsk:
    """One partition of a fetch of many: from which offset, at most how many bytes, at
    the leader epoch the reader knows (None: unchecked)."""

    name: str
    offset: int
    max_bytes: int
    leader_epoch: int | None


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
    fault: StorageFault | None = None
    """Set while the replica is offline after a storage error."""
    heard: PartitionAssignment | None = None
    """The newest assignment the controller sent for this partition."""
    held: HeldAssignment | None = None
    """The last assignment taken, as on disk (`assignment-checkpoint`): reported even
    before this process has heard from the controller."""
    lead_barrier: int = -1
    """The newest leader epoch this replica led or was to lead when a fault hit it: it
    leads only a newer one (data of that epoch may be gone from its disk)."""
    leader_failures: LeaderFailures = field(default_factory=LeaderFailures)
    """Follower: failed requests in a row to the leader (the backoff of the next one)."""
    leader_high_watermark: int | None = None
    """Follower: the leader's high watermark in its last fetch answer."""
    announced_high_watermark: int = -1
    """The high watermark `high_watermark_moved` last reported."""
    fetching_from: int | None = None
    """Follower: the leader whose fetch session holds this partition."""
    session_high_watermark: int = -1
    """Leader: the high watermark its fetch sessions were last told has moved."""
    retention: RetentionLimits = field(default_factory=RetentionLimits)
    """The partition's retention settings, as the controller last sent them."""
    session_log_start: int = -1
    """Leader: the log start its fetch sessions were last told has moved."""

    def rebuild_producers(self) -> None:
        self.producers = producers_of(self.log)


def producers_of(plog: PartitionLog) -> ProducerStates:
    """Idempotent producers' state, from every batch header of the log (a full scan)."""
    return ProducerStates.rebuild(producer_batch(h) for h in plog.batch_headers())


def producer_batch(h: BatchHeader) -> tuple[int, int, int, int, int, int]:
    """What the producers' state keeps of a written batch: (producerId, producerEpoch,
    baseSequence, count, baseOffset, leaderEpoch), as `ProducerStates.record` takes it."""
    return (
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.record_count,
        h.base_offset,
        h.leader_epoch,
    )


@dataclass(frozen=True, slots=True)
class RecoveryAttempt:
    """One try to bring an offline replica back (`begin_recovery` to `end_recovery`)."""

    partition: str
    fault: StorageFault
    repair: bool
    """Discard damaged data first (allowed by `storage_faults.may_repair`)."""


@dataclass(frozen=True, slots=True)
class Recovered:
    """A recovery attempt that worked: the reopened log and what a repair discarded."""

    log: PartitionLog
    repair: RepairPlan | None
    producers: ProducerStates


def _log_repair(name: str, plan: RepairPlan, how: str) -> None:
    log.warning(
        "replica_repair",
        partition=name,
        how=how,
        segment=plan.segment,
        position=plan.position,
        firstOffset=plan.first_offset,
        logEndOffset=plan.log_end_offset,
        records=plan.records,
        removedSegments=list(plan.removed_segments),
        reason=plan.reason,
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
    ip: str | None = None
    """Reported in heartbeats (`BrokerHeartbeat.ip`)."""
    rack: str | None = None
    log_config: LogConfig = field(default_factory=LogConfig)
    partitions: dict[str, Hosted] = field(default_factory=dict)
    fenced: bool = False

    # A test bed substitutes variants of the replica rules through this attribute.
    replica_class: type[Replica] = field(default=Replica, repr=False)
    # Where a freshly formatted data directory's storage id comes from (the simulator
    # draws it from its seeded random source).
    make_storage_id: Callable[[], str] = field(default=new_storage_id, repr=False)
    storage_id: str = ""

    fetch_backoff: FetchBackoff = field(default_factory=FetchBackoff)
    """When a follower's next request to its leader goes (`BrokerConfig.fetch_backoff`)."""
    find_divergence_first: bool = False
    """A new follower asks its leader where its latest epoch ends (OffsetsForLeaderEpoch,
    one request per partition) before it fetches. False, as Kafka does since 2.7
    (KAFKA-10554): it fetches at once in its fetch session and the leader answers a
    diverging epoch, so a failover that makes this broker follow a thousand partitions
    sends one request per leader broker, not a thousand. Both reach the same truncation
    point (`Follower`); the simulator runs both."""

    caught_up_window_ms: int = DEFAULT_CAUGHT_UP_WINDOW_MS
    """A follower whose last fetch read to the log end at most this long before a
    heartbeat is reported `caughtUp`: longer than the gap between two fetches of an idle
    follower, so that its report does not change with every fetch."""
    report_progress_every: int = DEFAULT_PROGRESS_EVERY
    """Heartbeats between two that carry reports whose offsets alone moved; 1: every
    heartbeat does (`ReportSession.progress_every`)."""
    report_session: ReportSession = field(init=False)
    """Which reports the next heartbeat carries (`report_session`)."""

    controlled_shutdown: bool = False
    """The broker is stopping and asks the controller, in every heartbeat, to move its
    leaderships and ISR places first (`begin_controlled_shutdown`)."""
    shutdown_progress: ControlledShutdownProgress | None = None
    """The controller's latest answer to the controlled shutdown: what it still waits for."""

    default_retention: RetentionLimits = field(default_factory=RetentionLimits)
    """Retention of partitions whose assignment does not say (older controllers)."""

    storage_retry_ms: int = 1_000
    """First wait before bringing back a replica after a storage fault (then doubling)."""
    storage_retry_max_ms: int = 10_000

    replica_fetch_max_wait_ms: int = 0
    """How long a fetch session request without news may wait at the leader (the
    simulator's leaders answer at once: 0)."""
    replica_fetch_max_bytes: int = 1 << 20
    """Bytes of one partition in one fetch answer (at least one batch goes)."""
    replica_fetch_response_max_bytes: int = 10 << 20
    """Bytes of one fetch answer over all its partitions."""
    reassignment_throttle: ByteRate = field(default_factory=lambda: ByteRate(0))
    """Leader side: bytes per second served to replicas a reassignment adds (0: no limit)."""

    def __post_init__(self) -> None:
        self.report_session = ReportSession(
            progress_every=self.report_progress_every, steady=_steady_facts
        )
        self.storage_faults = 0
        """Replicas taken offline so far: the shell reports a new one at once."""
        self._tls_held: TlsReport | None = None
        """The TLS report the controller answered holding in this report session: a
        heartbeat carries `tls` only in a full heartbeat or when it differs, so an idle
        broker's heartbeats stay the same size."""
        self._tls_sent: dict[int, TlsReport] = {}
        """The TLS report each unanswered heartbeat (by seq) carried."""
        self._deferred: list[Effect] = []
        self._pending: dict[int, _Pending] = {}
        self._pending_deletes: dict[int, tuple[str, int]] = {}
        """DeleteRecords waiting for the low watermark: request id -> (partition, epoch)."""
        self._high_watermark_checkpoint: HighWatermarkCheckpoint | None = None
        self._log_start_checkpoint: LogStartCheckpoint | None = None
        self._log_starts_dirty = False
        """A log start moved since the log-start-offset-checkpoint was last written."""
        self._log_starts_taken: set[str] = set()
        """Partitions whose log start moved to a leader's since that checkpoint was written."""
        self._retention = RetentionCandidates()
        """The partitions the next retention pass looks at."""
        self.retention_visits = 0
        """Partitions retention passes have looked at so far."""
        self.throttled_bytes: dict[int, int] = {}
        """Leader side: bytes served under the reassignment throttle, by follower broker."""
        self._dirty_logs: dict[str, None] = {}
        """The logs appended to since the last flush began (in order; a set would make
        the simulator's runs depend on string hashing)."""
        self._log_starts_moved: set[str] = set()
        """Followed partitions whose log start moved since the last fetch request was
        built (`_want_moved_log_starts`)."""
        self._facts: dict[str, _ReportFacts] = {}
        """Each hosted partition's report fingerprint as the last heartbeat took it."""
        self._facts_stale: set[str] = set()
        """Partitions touched since the last heartbeat (`_touch`)."""
        self._facts_due: dict[str, int] = {}
        """Leaders whose report may change with time alone, and from when."""
        self._facts_due_at: list[tuple[int, str]] = []
        """`_facts_due` as a heap (entries it no longer holds are skipped)."""
        self._sweep: list[str] = []
        """Partitions the slice of the next heartbeats fingerprints anew, last first."""
        self.report_fingerprints = 0
        """Partition reports heartbeats have fingerprinted so far."""
        self._faulted: set[str] = set()
        """Partitions a storage fault took offline (some may have recovered since)."""
        self.fetch_sessions: dict[int, FollowerSession[_WantedFetch]] = {}
        """Follower side: the fetch session with each leader broker."""
        self.leader_sessions = LeaderSessions(id_base=self.broker_epoch * 1_000_000)
        """Leader side: the fetch sessions this broker serves."""
        self._answer: AnswerWrites | None = None
        """While a heartbeat answer is applied: the logs it creates and the checkpoints it
        rewrites, made durable together before its effects run (`answer_writes`)."""

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> list[RecoveryReport]:
        """Recover every partition log on disk and load the HW checkpoint.

        Reads the data directory's storage id, or formats it with a new one; a damaged
        id file raises `CheckpointError` naming it.
        """
        ensure_dir(self.fs, self.data_dir)
        self.storage_id, formatted = load_or_format(self.fs, self.data_dir, self.make_storage_id)
        log.info(
            "data_dir_formatted" if formatted else "data_dir_opened",
            broker=self.broker_id,
            storageId=self.storage_id,
        )
        self._high_watermark_checkpoint = HighWatermarkCheckpoint.load(self.fs, self.data_dir)
        if self._high_watermark_checkpoint.load_error is not None:
            log.warning(
                "hw_checkpoint_damaged",
                broker=self.broker_id,
                error=str(self._high_watermark_checkpoint.load_error),
            )
        self._log_start_checkpoint = LogStartCheckpoint.load(self.fs, self.data_dir)
        if self._log_start_checkpoint.load_error is not None:
            log.warning(
                "log_start_checkpoint_damaged",
                broker=self.broker_id,
                error=str(self._log_start_checkpoint.load_error),
            )
        reports = []
        for name in sorted(self.fs.listdir(self.data_dir)):
            directory = posixpath.join(self.data_dir, name)
            if not self.fs.is_dir(directory):
                continue
            if is_deleted(self.fs, directory):
                delete_files(self.fs, directory)  # a deletion a crash interrupted
                continue
            reports.append(self._host(name).log.recovery)
        return reports

    def close(self) -> None:
        """Flush, checkpoint and close every log (a clean shutdown)."""
        self.flush()
        self.checkpoint_high_watermarks()
        self.checkpoint_log_starts()
        for host in self.partitions.values():
            host.log.close()

    @property
    def high_watermark_checkpoint(self) -> HighWatermarkCheckpoint:
        if self._high_watermark_checkpoint is None:
            raise RuntimeError("BrokerCore.open() was not called")
        return self._high_watermark_checkpoint

    def _host(self, name: str) -> Hosted:
        host = self.partitions.get(name)
        if host is not None:
            return host
        replica = self.replica_class(
            partition=name,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            config=PartitionConfig(),
            high_watermark=self.high_watermark_checkpoint.get(name) or 0,
            find_divergence_first=self.find_divergence_first,
        )
        host = self._open_host(name, replica)
        try:
            host.held = read_held(self.fs, posixpath.join(self.data_dir, name))
        except _DISK_ERRORS as exc:
            log.warning("assignment_checkpoint_unreadable", partition=name, error=str(exc))
        self.partitions[name] = host
        if host.fault is not None:
            self._faulted.add(name)
        self._retention.hosted(name)
        return host

    def _open_host(self, name: str, replica: Replica) -> Hosted:
        """The partition's log opened; a log that fails to open is hosted offline. Within a
        heartbeat answer a log without a directory is created, its syncs left to the end
        of the answer."""
        directory = posixpath.join(self.data_dir, name)
        try:
            start = self._start_of(name)
            if self._answer is not None and not self.fs.exists(directory):
                plog = PartitionLog.create(
                    self.fs, directory, self.log_config, name=name, log_start_offset=start
                )
                self._answer.create(name, directory, plog.active.file)
            else:
                plog = PartitionLog.open(
                    self.fs, directory, self.log_config, name=name, log_start_offset=start
                )
        except (StorageError, CorruptRecordError) as exc:
            return self._offline_at_open(name, replica, exc)
        host = Hosted(plog, replica, recovery=plog.recovery)
        try:
            host.rebuild_producers()
        except _DISK_ERRORS as exc:
            # A full scan finds damage that recovery trusted the index to skip.
            plog.release()
            return self._offline_at_open(name, replica, exc)
        log.info(
            "partition_opened",
            partition=name,
            logEndOffset=plog.log_end_offset,
            highWatermark=replica.high_watermark,
            leaderEpoch=plog.latest_epoch,
            truncatedBytes=plog.recovery.truncated_bytes,
        )
        return host

    def _offline_at_open(self, name: str, replica: Replica, exc: BaseException) -> Hosted:
        fault = StorageFault.of(exc)
        directory = posixpath.join(self.data_dir, name)
        plog = PartitionLog.unavailable(
            self.fs, directory, self.log_config, name=name, reason=fault.reason
        )
        replica.role = Offline(replica.leader_epoch, f"storage error: {fault.reason}")
        log.error(
            "replica_offline",
            partition=name,
            broker=self.broker_id,
            highWatermark=replica.high_watermark,
            fault=fault.kind.value,
            error=fault.reason,
            at="open",
        )
        return Hosted(plog, replica, recovery=plog.recovery, fault=fault)

    def _get(self, name: str) -> Hosted:
        """A hosted partition whose replica is usable (ReplicaOfflineError if it is not)."""
        host = self.partitions.get(name)
        if host is None:
            raise UnknownPartitionError(f"broker {self.broker_id} hosts no partition {name}")
        if host.fault is not None:
            raise self._offline_error(host)
        return host

    # -- storage faults --------------------------------------------------------------------

    def storage_error_of(self, name: str) -> str | None:
        """Why `name`'s replica is offline after a storage error (None: it is not)."""
        host = self.partitions.get(name)
        return None if host is None or host.fault is None else host.fault.describe()

    def offline_replicas(self) -> dict[str, str]:
        """Every replica offline after a storage error, with the reason. Looks only at
        replicas a fault hit, so that the shell's recovery loop costs nothing per hosted
        partition."""
        out = {}
        for name in sorted(self._faulted):
            host = self.partitions.get(name)
            if host is not None and host.fault is not None:
                out[name] = host.fault.describe()
        self._faulted.intersection_update(out)
        return out

    def faults_by_kind(self) -> dict[FaultKind, int]:
        """Replicas offline after a storage error now, by the kind of fault (every kind,
        0 for none). Looks only at replicas a fault hit, as `offline_replicas`."""
        out = dict.fromkeys(FaultKind, 0)
        for name in self._faulted:
            host = self.partitions.get(name)
            if host is not None and host.fault is not None:
                out[host.fault.kind] += 1
        return out

    def leader_position(self, name: str) -> tuple[int, int] | None:
        """(highWatermark, logEndOffset) of `name` while this broker leads it, else None."""
        host = self.partitions.get(name)
        if host is None or not isinstance(host.replica.role, Leader):
            return None
        role = host.replica.role
        return role.high_watermark, role.log_end_offset

    def take_deferred(self) -> list[Effect]:
        """Effects of faults found by calls that raised (a resigned leader's produces)."""
        effects, self._deferred = self._deferred, []
        return effects

    def on_storage_error(self, name: str, error: BaseException) -> list[Effect]:
        """A disk operation the shell ran for `name` (an fsync) failed."""
        host = self.partitions.get(name)
        return [] if host is None else self._take_offline(host, error)

    def _offline_error(self, host: Hosted) -> ReplicaOfflineError:
        assert host.fault is not None
        a = host.replica.assignment
        return ReplicaOfflineError(
            f"{host.log.name}: the replica on broker {self.broker_id} is offline after a "
            f"storage error ({host.fault.describe()})",
            partition=host.log.name,
            leader=a.leader if a is not None and a.leader != self.broker_id else None,
            leaderEpoch=host.replica.leader_epoch,
        )

    def _disk_failed(self, host: Hosted, exc: BaseException) -> ReplicaOfflineError:
        """For calls that raise: take the replica offline, keep the effects for later."""
        self._deferred += self._take_offline(host, exc)
        return self._offline_error(host)

    def _take_offline(self, host: Hosted, exc: BaseException) -> list[Effect]:
        """Only this partition's replica goes offline, on this broker; a leader resigns."""
        if host.fault is not None:
            return []
        self._touch(host.log.name)
        fault = StorageFault.of(exc)
        replica = host.replica
        high_watermark = replica.high_watermark
        effects: list[Effect] = []
        if isinstance(replica.role, Leader):
            effects = self._leader_effects(replica.role.resign())
        a = replica.assignment
        if a is not None and a.leader == self.broker_id:
            host.lead_barrier = max(host.lead_barrier, a.leader_epoch)
        replica.role = Offline(replica.leader_epoch, f"storage error: {fault.reason}")
        self._role_changed(host)
        host.dirty = False
        fault.durable_end = host.log.persisted_log_end_offset
        host.fault = fault
        self._faulted.add(host.log.name)
        self.storage_faults += 1
        host.log.mark_failed(fault.reason)
        log.error(
            "replica_offline",
            partition=host.log.name,
            broker=self.broker_id,
            leaderEpoch=replica.leader_epoch,
            logEndOffset=host.log.log_end_offset,
            persistedLogEndOffset=host.log.persisted_log_end_offset,
            highWatermark=high_watermark,
            fault=fault.kind.value,
            error=fault.reason,
        )
        return effects

    def begin_recovery(self, now_ms: int) -> list[RecoveryAttempt]:
        """Step 1 (event loop): the offline replicas to try to bring back now."""
        attempts = []
        for name, host in sorted(self.partitions.items()):
            fault = host.fault
            if fault is None:
                continue
            if fault.due_ms is None:
                fault.due_ms = now_ms + self._retry_delay(fault)
            if wants_attempt(fault, self.broker_id, host.heard, now_ms):
                host.log.release()
                attempts.append(RecoveryAttempt(name, fault, fault.kind is FaultKind.DAMAGED))
        return attempts

    def attempt_recovery(self, attempt: RecoveryAttempt) -> Recovered | EpochlogError:
        """Step 2 (a worker thread is fine): repair if asked, probe, reopen the log.

        Touches only the files of the offline partition, which nothing else uses.
        """
        name = attempt.partition
        directory = posixpath.join(self.data_dir, name)
        plan: RepairPlan | None = None
        try:
            if attempt.repair:
                plan = plan_repair(self.fs, directory)
                if plan is not None:
                    _log_repair(name, plan, "automatic")
                    apply_repair(self.fs, plan)
            probe_space(self.fs, directory)
            start = self._start_of(name)
            plog = PartitionLog.open(
                self.fs, directory, self.log_config, name=name, log_start_offset=start
            )
        except OSError as exc:
            error = StorageError(f"{name}: {exc.strerror or exc} ({exc.filename})")
            error.__cause__ = exc
            return error
        except EpochlogError as exc:
            return exc
        durable_end = attempt.fault.durable_end
        try:
            if durable_end is not None and plan is None:
                # Nothing above the last confirmed fsync is trusted: it is fetched again.
                plog.truncate_to(max(durable_end, plog.log_start_offset))
            producers = producers_of(plog)
        except _DISK_ERRORS as exc:
            plog.release()
            return exc if isinstance(exc, EpochlogError) else StorageError(str(exc))
        return Recovered(plog, plan, producers)

    def end_recovery(
        self, attempt: RecoveryAttempt, outcome: Recovered | EpochlogError, now_ms: int
    ) -> list[Effect]:
        """Step 3 (event loop): the replica is back (and follows its last assignment), or
        the next attempt is scheduled."""
        self._touch(attempt.partition)
        host = self.partitions.get(attempt.partition)
        if host is None or host.fault is not attempt.fault:
            if isinstance(outcome, Recovered):
                outcome.log.release()
            return []
        fault = attempt.fault
        if isinstance(outcome, EpochlogError):
            fault.attempts += 1
            fault.kind = kind_of(outcome)
            fault.reason = outcome.message
            fault.due_ms = now_ms + self._retry_delay(fault)
            log.warning(
                "replica_recovery_failed",
                partition=attempt.partition,
                broker=self.broker_id,
                attempts=fault.attempts,
                retryAtMs=fault.due_ms,
                fault=fault.kind.value,
                error=fault.reason,
            )
            return []
        return self._bring_back(host, outcome, now_ms)

    def recover(self, now_ms: int) -> list[Effect]:
        """The three recovery steps in one call (tests and the simulator)."""
        effects: list[Effect] = []
        for attempt in self.begin_recovery(now_ms):
            effects += self.end_recovery(attempt, self.attempt_recovery(attempt), now_ms)
        return effects

    def _retry_delay(self, fault: StorageFault) -> int:
        return retry_delay_ms(fault.attempts, self.storage_retry_ms, self.storage_retry_max_ms)

    def _bring_back(self, host: Hosted, outcome: Recovered, now_ms: int) -> list[Effect]:
        old = host.replica
        name = outcome.log.name
        fault = host.fault
        assert fault is not None
        # A repair may cut below the HW this replica knew: it learns it again from the leader.
        high_watermark = min(old.high_watermark, outcome.log.log_end_offset)
        host.replica = self.replica_class(
            partition=name,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            config=old.config,
            high_watermark=high_watermark,
            find_divergence_first=self.find_divergence_first,
        )
        self.high_watermark_checkpoint.update(name, high_watermark)
        host.log = outcome.log
        host.recovery = outcome.log.recovery
        host.producers = outcome.producers
        self._role_changed(host)
        host.dirty = False
        host.fault = None
        self._retention.touch(name)
        log.info(
            "replica_recovered",
            partition=name,
            broker=self.broker_id,
            logEndOffset=outcome.log.log_end_offset,
            highWatermark=high_watermark,
            leaderEpoch=outcome.log.latest_epoch,
            attempts=fault.attempts + 1,
            fault=fault.kind.value,
            repairedFromOffset=outcome.repair.first_offset if outcome.repair else None,
        )
        return [] if host.heard is None else self._apply(host.heard, now_ms)

    def _keep_held(self, name: str, host: Hosted, assignment: Assignment) -> None:
        """Write the assignment just taken to disk, so that it outlives this process."""
        self._touch(name)
        held = _held(assignment)
        if held is None or held == host.held:
            return
        directory = posixpath.join(self.data_dir, name)
        try:
            if self._answer is None:
                write_held(self.fs, directory, held)
            elif not self._answer.keep_held(self.fs, name, directory, held):
                return  # written with the answer's other writes (`_commit_answer`)
        except _DISK_ERRORS as exc:
            # A record for a controller that lost its status, not state this broker
            # needs: the log's own storage errors take the replica offline.
            log.warning("assignment_checkpoint_not_written", partition=name, error=str(exc))
            return
        host.held = held

    # -- controller ------------------------------------------------------------------------

    def heartbeat(self, now_ms: int, tls: TlsReport | None = None) -> BrokerHeartbeat:
        """The next heartbeat: every report the controller does not hold as it is now, and
        `tls`, what the broker's TLS contexts hold."""
        # A follower whose fetches fail may have lost its leader: the log end it reports
        # is what an unclean election or recovery would choose by, so it goes at once.
        urgent = {n for s in self.fetch_sessions.values() if s.failures for n in s.wanted}
        facts = self._facts
        if self.report_session.next_full:
            changed: set[str] | None = None
            facts.clear()
            self._facts_due.clear()
            self._facts_stale.clear()
            for n, h in self.partitions.items():
                self._refresh_facts(n, h, now_ms)
        else:
            changed = self._refresh_changed_facts(now_ms, urgent)
        plan = self.report_session.prepare(facts, urgent, changed)
        if plan.full:
            self._tls_held = None
            self._tls_sent.clear()
        carried = tls if tls is not None and tls != self._tls_held else None
        if carried is not None:
            self._tls_sent[plan.seq] = carried
        return BrokerHeartbeat(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            address=self.address or f"broker-{self.broker_id}",
            ip=ipaddress.ip_address(self.ip) if self.ip else None,
            storage_id=self.storage_id or None,
            time_ms=now_ms,
            full=plan.full,
            session_id=plan.session_id,
            seq=plan.seq,
            answered=plan.answered,
            partitions=tuple(_report(n, facts[n]) for n in plan.names),
            removed=plan.removed,
            controlled_shutdown=self.controlled_shutdown,
            rack=self.rack,
            tls=carried,
        )

    def _refresh_changed_facts(self, now_ms: int, urgent: set[str]) -> set[str]:
        """Fingerprint anew the partitions whose report may have changed since the last
        heartbeat: those a call touched (`_facts_stale`), leaders whose followers' state
        moves with time alone (`Leader.report_changes_at`), the urgent ones, and a slice
        of the rest in turn, so that every report is looked at within
        `FACTS_SWEEP_HEARTBEATS` heartbeats whatever a call forgot to mark. The names
        returned are the ones `ReportSession.prepare` looks at: every partition that came
        or went is among them (a call marks it)."""
        hosted = self.partitions
        names = self._facts_stale | urgent
        self._facts_stale = set()
        due = self._facts_due_at
        while due and due[0][0] <= now_ms:
            at, name = heapq.heappop(due)
            if self._facts_due.get(name) == at:
                names.add(name)
        if not self._sweep:
            # Once a round, the partitions that came or went unmarked too.
            names.update(self._facts.keys() ^ hosted.keys())
            self._sweep = sorted(hosted)
        for _ in range(-(-len(hosted) // FACTS_SWEEP_HEARTBEATS)):
            if not self._sweep:
                break
            names.add(self._sweep.pop())
        for n in sorted(names):  # in order: a leader's fetches noted may propose
            host = hosted.get(n)
            if host is not None:
                self._refresh_facts(n, host, now_ms)
            else:
                self._facts.pop(n, None)
                self._facts_due.pop(n, None)
        return names

    def _refresh_facts(self, name: str, host: Hosted, now_ms: int) -> None:
        self._facts[name] = self._report_facts(host, now_ms)
        self.report_fingerprints += 1
        role = host.replica.role
        at = None
        if isinstance(role, Leader):
            window = max(self.caught_up_window_ms, role.replica_lag_time_max_ms // 2)
            at = role.report_changes_at(now_ms, window)
        if at is None:
            self._facts_due.pop(name, None)
            return
        at = max(at, now_ms + 1)  # at the next heartbeat at the earliest
        if self._facts_due.get(name) != at:
            self._facts_due[name] = at
            heapq.heappush(self._facts_due_at, (at, name))

    def _touch(self, name: str) -> None:
        """`name`'s report may have changed: the next heartbeat fingerprints it anew."""
        self._facts_stale.add(name)

    def begin_controlled_shutdown(self) -> None:
        """From the next heartbeat on, ask the controller to move leaderships and ISR places
        off this broker; `shutdown_progress` says when it is done."""
        if not self.controlled_shutdown:
            self.controlled_shutdown = True
            log.info("controlled_shutdown_requested", broker=self.broker_id)

    def reports(self, now_ms: int) -> dict[str, PartitionReport]:
        """Every hosted partition's report as it stands: what a full heartbeat would say."""
        return {n: _report(n, self._report_facts(h, now_ms)) for n, h in self.partitions.items()}

    def heartbeat_failed(self, seq: int) -> None:
        """Heartbeat `seq` went unanswered (timeout, connection error, an error status)."""
        self.report_session.on_failure(seq)
        self._tls_sent.pop(seq, None)

    def _report_facts(self, host: Hosted, now_ms: int) -> _ReportFacts:
        """Everything a partition's report says, as plain values: cheap to compare, so
        that only reports that changed are built and sent."""
        replica, plog = host.replica, host.log
        role = replica.role
        persisted = plog.persisted_log_end_offset
        last_epoch = reported_epoch(plog.epochs.epoch_for_offset(persisted - 1))
        held = _held(replica.assignment) or host.held
        error = None if host.fault is None else host.fault.describe()
        if isinstance(role, Leader):
            self._note_session_fetches(host, role, now_ms)
            proposals: tuple[tuple[int, int, int, int], ...] = ()
            pending = role.pending_proposal
            if pending is not None:
                proposals = tuple(
                    (r, be, role.follower_log_end_offset(r) or 0, pending.proposal_id)
                    for r, be in pending.broker_epochs
                )
            # Half the lag limit, as often as Kafka's leader checks its ISR: a follower
            # that trails by less is reported caught up, so that one fetching slowly
            # under load does not change its report (lastCaughtUpTime) with each fetch.
            # The controller learns its lastCaughtUpTime once it trails by more, which
            # shrinks the ISR between the limit and one and a half times it, as Kafka does.
            window = max(self.caught_up_window_ms, role.replica_lag_time_max_ms // 2)
            return (
                PartitionRole.LEADER,
                role.leader_epoch,
                role.partition_epoch,
                role.persisted_log_end_offset,
                last_epoch,
                role.high_watermark,
                held,
                error,
                role.epoch_start_offset,
                role.reported_followers(now_ms, window),
                proposals,
                plog.log_start_offset,
            )
        assignment = replica.assignment
        return (
            PartitionRole.FOLLOWER,
            reported_epoch(max(replica.leader_epoch, plog.latest_epoch)),
            assignment.partition_epoch if assignment else 0,
            persisted,
            last_epoch,
            replica.high_watermark,
            held,
            error,
            None,
            (),
            (),
            plog.log_start_offset,
        )

    def on_heartbeat_response(
        self, response: HeartbeatResponse, now_ms: int, seq: int | None = None
    ) -> list[Effect]:
        """Apply the controller's answer to heartbeat `seq` (None: the latest sent)."""
        answered = self.report_session.seq if seq is None else seq
        self.report_session.on_answer(answered, response.session_id, response.full_report_required)
        for sent in sorted(s for s in self._tls_sent if s <= answered):
            report = self._tls_sent.pop(sent)
            if sent == answered and not response.full_report_required:
                self._tls_held = report
        if response.fenced:
            if not self.fenced:
                log.warning("broker_fenced", broker=self.broker_id, brokerEpoch=self.broker_epoch)
            self.fenced = True
            return [Restart("fenced by the controller")]
        if self.controlled_shutdown and response.controlled_shutdown is not None:
            self.shutdown_progress = response.controlled_shutdown
        effects: list[Effect] = []
        self._answer = AnswerWrites()
        try:
            for pa in response.assignments:
                if pa.name in self.partitions or self.broker_id in pa.replicas:
                    effects += self._apply(pa, now_ms)
        except BaseException:
            self._answer = None
            raise
        effects += self._commit_answer()
        for pa in response.stop_replicas:
            effects += self._stop_replica(pa, now_ms)
        for rej in response.rejected_isr_proposals:
            self._touch(rej.name)
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

    def _commit_answer(self) -> list[Effect]:
        """Make the logs this answer created and the checkpoints it rewrote durable, all at
        once (`answer_writes`); a new log that did not sync goes offline."""
        answer, self._answer = self._answer, None
        if answer is None or not (answer.created or answer.held):
            return []
        done = answer.commit(self.fs, self.data_dir)
        for name, held in done.held.items():
            if (host := self.partitions.get(name)) is not None:
                host.held = held
        for name, exc in done.not_written.items():
            log.warning("assignment_checkpoint_not_written", partition=name, error=str(exc))
        effects: list[Effect] = []
        for name, exc in sorted(done.offline.items()):
            if (host := self.partitions.get(name)) is not None:
                effects += self._take_offline(host, exc)
        return effects

    def _apply(self, pa: PartitionAssignment, now_ms: int) -> list[Effect]:
        self._touch(pa.name)
        host = self._host(pa.name)
        if not self._may_apply(host, pa):
            return []
        replica, plog = host.replica, host.log
        replica.config = PartitionConfig(pa.min_insync_replicas, pa.replica_lag_time_max_ms)
        self._configure_log(host, pa)
        facts = LogFacts(
            plog.log_end_offset,
            plog.persisted_log_end_offset,
            # Everything below the log start was committed (retention and DeleteRecords
            # stop at a high watermark): a checkpoint behind it understates.
            max(self.high_watermark_checkpoint.get(pa.name) or 0, plog.log_start_offset),
            plog.epochs,
            plog.log_start_offset,
        )
        assignment = Assignment(
            pa.leader,
            pa.leader_epoch,
            pa.partition_epoch,
            frozenset(pa.isr),
            pa.replicas,
            tuple(sorted(pa.isr_storage_ids.items())),
            pa.eligible_leader_replicas,
            tuple(sorted(pa.eligible_leader_replica_storage_ids.items())),
        )
        t = replica.apply(assignment, facts, now_ms)
        if t.kind is TransitionKind.IGNORED:
            return []
        self._keep_held(pa.name, host, assignment)
        if t.kind is not TransitionKind.ISR_UPDATED:
            self._role_changed(host)
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
        effects = self._leader_effects(leader_actions)
        if isinstance(replica.role, Leader):
            self._check_session_high_watermark(host, replica.role)
        return effects + self._follower_effects(host, follower_actions)

    def _stop_replica(self, pa: PartitionAssignment, now_ms: int) -> list[Effect]:
        """`pa` left this broker out of the replicas: stop the replica, delete its data."""
        self._touch(pa.name)
        host = self.partitions.get(pa.name)
        if host is None or self.broker_id in pa.replicas:
            return []
        held = _held(host.replica.assignment) or host.held
        if (
            held is None
            or self.broker_id not in held.replicas
            or (held.leader_epoch, held.partition_epoch) >= (pa.leader_epoch, pa.partition_epoch)
        ):
            # Not a replica this broker knows it was: nothing says the data is not needed.
            log.warning(
                "replica_deletion_refused",
                partition=pa.name,
                partitionEpoch=pa.partition_epoch,
                held=None if held is None else held.partition_epoch,
            )
            return []
        effects = self._apply(pa, now_ms)  # a leader resigns, a follower stops fetching
        self._role_changed(host)
        try:
            host.log.close()
        except _DISK_ERRORS:
            host.log.release()
        del self.partitions[pa.name]
        self._retention.forget(pa.name)
        directory = posixpath.join(self.data_dir, pa.name)
        try:
            # The broker's checkpoints forget it first: a replica added here again later
            # starts afresh, not at this one's high watermark or log start.
            self.checkpoint_high_watermarks()
            self._write_log_starts()
            removed = delete_files(self.fs, directory)
        except _DISK_ERRORS as exc:
            # The marker makes the next start finish it; the replica is gone either way.
            log.warning("replica_deletion_failed", partition=pa.name, error=str(exc))
            return effects
        log.info(
            "replica_deleted",
            partition=pa.name,
            broker=self.broker_id,
            partitionEpoch=pa.partition_epoch,
            replicas=list(pa.replicas),
            files=removed,
        )
        return effects

    def _may_apply(self, host: Hosted, pa: PartitionAssignment) -> bool:
        """Offline replicas only note assignments; none leads an epoch led before a fault."""
        previous = host.heard
        if previous is None or (pa.leader_epoch, pa.partition_epoch) >= (
            previous.leader_epoch,
            previous.partition_epoch,
        ):
            host.heard = pa
        if host.fault is not None:
            return False
        if pa.leader == self.broker_id and pa.leader_epoch <= host.lead_barrier:
            if pa != previous:
                log.warning(
                    "leadership_refused",
                    partition=pa.name,
                    leaderEpoch=pa.leader_epoch,
                    reason="led before a storage fault; waits for a newer epoch",
                )
            return False
        return True

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
        self._note_session_fetches(host, role, now_ms)
        try:
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
        except _DISK_ERRORS as exc:
            effects = self._take_offline(host, exc)
            failed = ProduceDone(request_id, name, -1, -1, epoch, self._offline_error(host))
            return [*effects, failed]
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
        self._dirty_logs[host.log.name] = None
        self._touch(host.log.name)
        if len(host.log.segments) > 1:
            # A roll, or more bytes for retention.bytes: retention may have work.
            self._retention.touch(host.log.name)
        if isinstance(host.replica.role, Leader):
            self.leader_sessions.appended(host.log.name)
        return []

    def _leader_effects(self, actions: Sequence[LeaderAction]) -> list[Effect]:
        out: list[Effect] = []
        for a in actions:
            if isinstance(a, ProposeIsr):
                continue  # reported in the next heartbeat
            if isinstance(a, DeleteRecordsCompleted | DeleteRecordsFailed):
                waiting = self._pending_deletes.pop(a.request_id, None)
                if waiting is not None:
                    error = a.error if isinstance(a, DeleteRecordsFailed) else None
                    name, epoch = waiting
                    out.append(
                        DeleteRecordsDone(a.request_id, name, a.log_start_offset, epoch, error)
                    )
                continue
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
        """Whether a log holds appends not yet fsynced. Asked after every call that
        returned effects; it looks only at the logs appended to since the last flush
        began, so that its cost does not grow with how many partitions are hosted."""
        for name in list(self._dirty_logs):
            host = self.partitions.get(name)
            if host is not None and host.dirty:
                return True
            del self._dirty_logs[name]  # gone, taken offline, or replaced since
        return False

    def _take_dirty(self) -> list[tuple[str, Hosted]]:
        """The logs appended to since the last flush began, marked clean from now."""
        out = []
        for name in self._dirty_logs:
            host = self.partitions.get(name)
            if host is not None and host.dirty:
                host.dirty = False
                out.append((name, host))
        self._dirty_logs.clear()
        return out

    def flush(self) -> list[Effect]:
        """fsync every log appended to since the last flush and report the persisted ends."""
        effects: list[Effect] = []
        for _name, host in self._take_dirty():
            try:
                persisted = host.log.flush()
            except _DISK_ERRORS as exc:
                effects += self._take_offline(host, exc)
                continue
            effects += self._report_persisted(host, persisted)
        return effects

    def begin_flush(self) -> list[str]:
        """Step 1 of a flush off the event loop: the logs to sync, marked clean from now."""
        return [name for name, _host in self._take_dirty()]

    def sync_logs(self, names: Sequence[str]) -> list[tuple[str, int | EpochlogError]]:
        """Step 2, safe in a worker thread while appends go on: fsync the logs, all at
        once (`batch_sync`: one call per filesystem, without giving the interpreter back
        between logs); each log's persisted end or error. The caller keeps truncation
        and close of these logs from running meanwhile."""
        out: list[tuple[str, int | EpochlogError]] = []
        batch: list[tuple[str, PartitionLog, int]] = []
        for name in names:
            try:
                plog = self._get(name).log
                target = plog.sync_target()
            except EpochlogError as exc:
                out.append((name, exc))
                continue
            if target is None:
                out.append((name, plog.persisted_log_end_offset))
            else:
                batch.append((name, plog, target))
        # A log that started an epoch since its last sync has its new leader-epoch-checkpoint
        # installed with it (`PartitionLog.sync_epochs`): the temporary file in the same
        # syncfs as the logs on the real disk, renamed in, the directory synced with a
        # second one.
        epochs: list[tuple[int, File, int]] = []
        failed: dict[int, OSError] = {}
        for i, (_n, plog, _t) in enumerate(batch):
            try:
                opened = plog.open_epochs_for_sync()
            except OSError as exc:
                failed[i] = exc
                continue
            if opened is not None:
                epochs.append((i, *opened))
        try:
            files = [plog.active.file for _n, plog, _t in batch]
            errors = sync_files(files + [f for _i, f, _v in epochs])
            renamed: list[int] = []
            for (i, _f, version), error in zip(epochs, errors[len(batch) :], strict=True):
                if error is None and errors[i] is None:
                    try:
                        batch[i][1].install_epochs(version)
                    except OSError as exc:
                        failed.setdefault(i, exc)
                        continue
                    renamed.append(i)
                elif error is not None:
                    failed.setdefault(i, error)
            dirs = sync_dirs(
                self.fs, [batch[i][1].directory for i in renamed], files[0] if files else None
            )
            for i, error in zip(renamed, dirs, strict=True):
                if error is not None:
                    failed.setdefault(i, error)
        finally:
            for _i, f, _v in epochs:
                f.close()
        for i, (name, plog, target) in enumerate(batch):
            try:
                out.append((name, plog.synced(target, errors[i] or failed.get(i))))
            except EpochlogError as exc:
                out.append((name, exc))
        return out

    def end_flush(self, name: str, persisted: int) -> list[Effect]:
        """Step 3, back on the event loop: report what `sync_logs` made durable."""
        host = self.partitions.get(name)
        if host is None or host.fault is not None:
            return []
        # A sync that finished before a truncation reports an end the log has since
        # given up (it may already hold other, unsynced records there).
        return self._report_persisted(host, min(persisted, host.log.persisted_log_end_offset))

    def _report_persisted(self, host: Hosted, persisted: int) -> list[Effect]:
        self._touch(host.log.name)
        role = host.replica.role
        if isinstance(role, Leader):
            effects = self._leader_effects(role.on_flushed(persisted))
            self._check_session_high_watermark(host, role)
            return effects
        if isinstance(role, Follower):
            return self._follower_effects(host, role.on_flushed(persisted))
        return []

    def _waiting_leaders(self) -> list[Leader]:
        """Leaders with produce or DeleteRecords requests waiting: only they have
        deadlines (an idle broker's timers cost nothing per partition)."""
        names = {p.partition for p in self._pending.values()}
        names.update(name for name, _epoch in self._pending_deletes.values())
        return [
            role
            for name in sorted(names)
            if (host := self.partitions.get(name)) is not None
            and isinstance(role := host.replica.role, Leader)
        ]

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for r in self._waiting_leaders() if (d := r.next_deadline_ms()) is not None]
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for role in self._waiting_leaders():
            effects += self._leader_effects(role.tick(now_ms))
        return effects

    def high_watermark_moved(self, name: str) -> bool:
        """Whether `name`'s high watermark moved since this last answered True: the shell
        wakes the consumers' long polls on `name` then."""
        host = self.partitions.get(name)
        if host is None:
            return False
        high_watermark = host.replica.high_watermark
        if high_watermark == host.announced_high_watermark:
            return False
        host.announced_high_watermark = high_watermark
        return True

    def _lower_high_watermark_first(self, name: str, log_end: int) -> None:
        """Before a follower's log is cut to `log_end` below the HW it has on disk (only
        after an unclean election): the checkpoint comes down first, durably. A crash
        between the two would otherwise bring the old HW back over the records fetched
        next, which are not the ones that were committed. The follower's own HW is
        already down (`Follower._truncate`, `Follower._start_at`)."""
        on_disk = self.high_watermark_checkpoint.on_disk or {}
        if on_disk.get(name, 0) > log_end:
            self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> dict[str, int]:
        cp = self.high_watermark_checkpoint
        for name, host in self.partitions.items():
            cp.update(name, host.replica.high_watermark)
        return cp.write(self._checkpointed_partitions())

    # -- retention and the log start -------------------------------------------------------

    def _start_of(self, name: str) -> int | None:
        cp = self._log_start_checkpoint
        return None if cp is None else cp.get(name)

    def _configure_log(self, host: Hosted, pa: PartitionAssignment) -> None:
        """Take the partition's retention and segment settings from its assignment."""
        default = self.default_retention
        limits = RetentionLimits(
            default.retention_ms if pa.retention_ms is None else pa.retention_ms,
            default.retention_bytes if pa.retention_bytes is None else pa.retention_bytes,
        )
        if limits != host.retention:
            host.retention = limits
            self._retention.touch(pa.name)
        config = replace(
            self.log_config,
            segment_bytes=pa.segment_bytes or self.log_config.segment_bytes,
            segment_ms=pa.segment_ms or self.log_config.segment_ms,
        )
        if config != host.log.config:
            host.log.config = config

    def _write_log_starts(self, override: dict[str, int] | None = None) -> None:
        cp = self._log_start_checkpoint
        if cp is None:
            return
        starts = {}
        for name, host in self.partitions.items():
            start = cp.get(name) if host.fault is not None else host.log.log_start_offset
            if start:
                starts[name] = start
        starts.update(override or {})
        cp.write(starts)
        self._log_starts_dirty = False

    def checkpoint_log_starts(self) -> None:
        """Write the log-start-offset-checkpoint if a log start moved since the last write."""
        if self._log_starts_dirty:
            self._write_log_starts()

    def enforce_retention(self, now_ms: int) -> list[str]:
        """One retention pass: the partitions whose log start moved.

        Only the partitions that may have something to delete are looked at
        (`RetentionCandidates`), and of those only logs with a closed segment. Every
        moved start is checkpointed (one write) before any segment is removed."""
        moved: list[Hosted] = []
        due = self._retention.due(now_ms)
        for i, name in enumerate(due):
            host = self.partitions[name]
            try:
                if self._retention_looks_at(host, now_ms):
                    moved.append(host)
            except BaseException:
                for left in due[i:]:
                    self._retention.touch(left)  # looked at next pass instead
                raise
        if moved:
            self._log_starts_dirty = True
        self.checkpoint_log_starts()
        for host in moved:
            self._delete_below_start(host)
        return [h.log.name for h in moved]

    def _retention_looks_at(self, host: Hosted, now_ms: int) -> bool:
        """Decide retention for one candidate and move its log start; whether it moved.
        What it did not move is scheduled for when it may (`RetentionCandidates`)."""
        self.retention_visits += 1
        plog = host.log
        name = plog.name
        if host.fault is not None or len(plog.segments) < 2:
            return False  # recovery, or an append that rolls, makes it a candidate again
        facts = plog.segment_facts()
        high_watermark = host.replica.high_watermark
        decision = decide_retention(
            facts,
            log_start_offset=plog.log_start_offset,
            high_watermark=high_watermark,
            limits=host.retention,
            now_ms=now_ms,
        )
        if decision.segments:
            if plog.advance_log_start(decision.log_start_offset):
                self._log_starts_moved.add(name)
                self._touch(name)
            self._retention.touch(name)  # what else may go is decided next pass
            return True
        if facts[-2].next_offset > high_watermark:
            self._retention.touch(name)  # a closed segment waits for its high watermark
        else:
            self._retention.wait(name, expiry_ms(facts, host.retention))
        return False

    def _delete_below_start(self, host: Hosted) -> None:
        try:
            host.log.delete_segments_below_start()
        except _DISK_ERRORS as exc:
            self._deferred += self._take_offline(host, exc)
            return
        role = host.replica.role
        if isinstance(role, Leader):
            self._check_session_high_watermark(host, role)

    def delete_records(
        self,
        name: str,
        before_offset: int,
        *,
        request_id: int,
        now_ms: int,
        timeout_ms: int,
        leader_epoch: int | None = None,
    ) -> list[Effect]:
        """DeleteRecords: records below `before_offset` (-1: the high watermark) go from
        the leader's log at once, durably. Bounded by the high watermark
        (OFFSET_OUT_OF_RANGE above it); an offset below the log start changes nothing.

        The answer is a `DeleteRecordsDone` with the log start after it, once the low
        watermark (`Leader.low_watermark`) reaches that start: a new leader elected from
        the ISR then serves nothing below it. Answered before, a failover could bring
        back records the client was told were deleted. After `timeout_ms` it fails with
        REQUEST_TIMED_OUT; the deletion at the leader stands and the followers catch up.
        """
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        high_watermark = role.high_watermark
        target = high_watermark if before_offset == -1 else before_offset
        plog = host.log
        if not 0 <= target <= high_watermark:
            raise OffsetOutOfRangeError(
                f"{name}: cannot delete records before {target}: the high watermark is "
                f"{high_watermark}",
                logStartOffset=plog.log_start_offset,
                highWatermark=high_watermark,
                leaderEpoch=role.leader_epoch,
            )
        self._touch(name)
        try:
            if plog.advance_log_start(target):
                self._retention.touch(name)
                self._write_log_starts()
        except _DISK_ERRORS as exc:
            raise self._disk_failed(host, exc) from exc
        self._delete_below_start(host)
        if host.fault is not None:
            raise self._offline_error(host)
        start = plog.log_start_offset
        log.info("records_deleted", partition=name, logStartOffset=start)
        self._pending_deletes[request_id] = (name, role.leader_epoch)
        return self._leader_effects(
            role.on_records_deleted(
                request_id=request_id,
                log_start_offset=start,
                now_ms=now_ms,
                timeout_ms=timeout_ms,
            )
        )

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
        if answer.start_offset < host.log.log_start_offset:
            self._deferred += effects
            raise self._below_log_start(host, answer)
        try:
            batches = host.log.read_batches(answer.start_offset, max_bytes, answer.end_offset)
        except _DISK_ERRORS as exc:
            self._deferred += effects
            raise self._disk_failed(host, exc) from exc
        return (
            FetchData(
                answer.leader_epoch,
                answer.high_watermark,
                tuple(Batch(b.base_offset, b.last_offset, b.leader_epoch, b) for b in batches),
                host.log.log_start_offset,
            ),
            effects,
        )

    def _below_log_start(self, host: Hosted, answer: ReadRange) -> OffsetOutOfRangeError:
        """A follower fetching below the log start: it starts its log over there."""
        return OffsetOutOfRangeError(
            f"{host.log.name}: fetch offset {answer.start_offset} is below the log start "
            f"{host.log.log_start_offset}",
            logStartOffset=host.log.log_start_offset,
            leaderEpoch=answer.leader_epoch,
        )

    def handle_offsets_for_leader_epoch(
        self, name: str, request: OffsetsForLeaderEpochRequest
    ) -> EpochEndOffset:
        host = self._get(name)
        return self._leader(host, request.leader_epoch).offsets_for_leader_epoch(request)

    # -- fetch sessions: leader side -------------------------------------------------------

    def check_replica_epoch(self, replica_id: int, broker_epoch: int) -> None:
        """Refuse a replication request of broker `replica_id` whose brokerEpoch is older
        than the one its fetch session here has (`LeaderSessions.check_broker_epoch`)."""
        self.leader_sessions.check_broker_epoch(replica_id, broker_epoch)

    def handle_session_fetch(self, request: SessionFetchRequest, now_ms: int) -> SessionServed:
        """Serve a request of a follower's fetch session (raises the session-level
        errors). An answer without partitions is one the shell may hold until
        `take_woken_sessions` names the follower, then `resume_session_fetch`."""
        session = self.leader_sessions.receive(request, now_ms)
        return self.serve_session(session, now_ms, final=request.max_wait_ms == 0)

    def resume_session_fetch(
        self, replica_id: int, session_id: int, now_ms: int, *, final: bool
    ) -> SessionServed:
        """Look again at a held request's session: data came, or its wait is over
        (`final`: then moved high watermarks alone are answered too)."""
        session = self.leader_sessions.current(replica_id, session_id)
        return self.serve_session(session, now_ms, final=final)

    def take_woken_sessions(self) -> set[int]:
        """Followers whose held session request has news since the last call."""
        return self.leader_sessions.take_woken()

    def serve_session(self, s: LeaderSession, now_ms: int, *, final: bool) -> SessionServed:
        """Answer what session `s` has news of: data (bounded per partition and per
        answer, starting after the partition served last), diverged logs, errors (which
        leave the session), and with `final` or any other news, moved high watermarks.
        A session whose follower is still syncing is never held: its answer is final."""
        final = final or not s.may_wait
        entries: list[tuple[str, PartitionAnswer]] = []
        effects: list[Effect] = []
        budget = s.max_bytes
        looked = s.take_pending()
        left: list[str] = []
        for name in looked:
            fetch = s.partitions[name]
            host = self.partitions.get(name)
            try:
                if host is None:
                    raise UnknownPartitionError(f"{name} is not hosted on broker {self.broker_id}")
                role = self._leader(host, fetch.leader_epoch)
                decision = role.on_fetch(fetch, now_ms)
                self._touch(name)
            except EpochlogError as exc:
                entries.append((name, exc))
                self.leader_sessions.forget(s, name)
                continue
            effects += self._leader_effects(decision.actions)
            self._check_session_high_watermark(host, role)
            answer = decision.answer
            if isinstance(answer, DivergingEpoch):
                entries.append((name, answer))
                s.high_watermark_sent[name] = answer.high_watermark
                continue
            start = host.log.log_start_offset
            if answer.start_offset < start:
                entries.append((name, self._below_log_start(host, answer)))
                self.leader_sessions.forget(s, name)
                continue
            if answer.start_offset >= answer.end_offset:
                if answer.high_watermark != s.high_watermark_sent.get(
                    name
                ) or start != s.log_start_sent.get(name, 0):
                    s.high_watermark_moved.add(name)
                continue
            limit = min(s.partition_max_bytes, budget)
            throttled = host.heard is not None and s.replica_id in host.heard.adding_replicas
            if throttled:
                limit = min(limit, self.reassignment_throttle.available(now_ms))
            if limit <= 0:
                left.append(name)
                continue
            try:
                read = host.log.read_batches(answer.start_offset, limit, answer.end_offset)
            except _DISK_ERRORS as exc:
                effects += self._take_offline(host, exc)
                entries.append((name, self._offline_error(host)))
                self.leader_sessions.forget(s, name)
                continue
            size = sum(b.size for b in read)
            budget -= size
            if throttled:
                self.reassignment_throttle.spend(size, now_ms)
                served = self.throttled_bytes.get(s.replica_id, 0)
                self.throttled_bytes[s.replica_id] = served + size
            entries.append(
                (
                    name,
                    FetchData(
                        answer.leader_epoch,
                        answer.high_watermark,
                        tuple(Batch(b.base_offset, b.last_offset, b.leader_epoch, b) for b in read),
                        start,
                    ),
                )
            )
            s.high_watermark_sent[name] = answer.high_watermark
            s.log_start_sent[name] = start
            s.last_served = name
        s.pending.update(left)
        if entries or final:
            entries += self._moved_high_watermarks(s)
        reply = SessionFetchAnswer(s.session_id, tuple(entries))
        return SessionServed(reply, effects, looked, hold=not (entries or final))

    def _moved_high_watermarks(self, s: LeaderSession) -> list[tuple[str, PartitionAnswer]]:
        out: list[tuple[str, PartitionAnswer]] = []
        for name in s.take_high_watermark_moved():
            host = self.partitions.get(name)
            role = host.replica.role if host is not None else None
            fetch = s.partitions[name]
            if not isinstance(role, Leader) or role.leader_epoch != fetch.leader_epoch:
                continue  # its role change is news of its own (`LeaderSessions.changed`)
            start = host.log.log_start_offset if host is not None else 0
            if role.high_watermark != s.high_watermark_sent.get(
                name
            ) or start != s.log_start_sent.get(name, 0):
                s.high_watermark_sent[name] = role.high_watermark
                s.log_start_sent[name] = start
                out.append((name, FetchData(role.leader_epoch, role.high_watermark, (), start)))
        return out

    def _check_session_high_watermark(self, host: Hosted, role: Leader) -> None:
        start = host.log.log_start_offset
        if role.high_watermark != host.session_high_watermark or start != host.session_log_start:
            host.session_high_watermark = role.high_watermark
            host.session_log_start = start
            self.leader_sessions.high_watermark_moved(host.log.name)

    def _note_session_fetches(self, host: Hosted, role: Leader, now_ms: int) -> None:
        """Every request of a session fetches each partition it holds, listed or not.
        A session silent for longer than the caught-up window is not fetching any more:
        its follower may be gone, and must not be proposed for the ISR on its account."""
        for s in self.leader_sessions.watching(host.log.name):
            if now_ms - s.last_request_ms > self.caught_up_window_ms:
                continue
            fetch = s.partitions.get(host.log.name)
            if fetch is not None and fetch.leader_epoch == role.leader_epoch:
                role.on_unchanged_fetch(s.replica_id, s.last_request_ms)

    # -- fetch sessions: follower side -----------------------------------------------------

    def session_requests(self) -> list[SendSession]:
        """The fetch sessions that may send their next request: call after every call
        that returned effects; each `SendSession` goes once its delay is over."""
        out = []
        for s in self.fetch_sessions.values():
            if s.ready():
                s.scheduled = True
                out.append(SendSession(s.leader_id, s.delay_ms))
        return out

    def session_request(self, leader_id: int) -> SessionFetchRequest | None:
        """Build the request a `SendSession` stands for; None when nothing is wanted from
        that leader any more."""
        s = self.fetch_sessions.get(leader_id)
        if s is None:
            return None
        self._want_moved_log_starts()
        return s.build(
            max_wait_ms=self.replica_fetch_max_wait_ms,
            max_bytes=self.replica_fetch_response_max_bytes,
            partition_max_bytes=self.replica_fetch_max_bytes,
        )

    def on_session_answer(
        self,
        leader_id: int,
        sent: SessionFetchRequest,
        answer: SessionFetchAnswer | EpochlogError | None,
        failure: str = "",
    ) -> LeaderAnswerApplied:
        """What came back for `sent`: the leader's answer, its session-level error, or
        nothing (`failure` says why)."""
        s = self.fetch_sessions.get(leader_id)
        if (
            s is None
            or not s.in_flight
            or (s.session_id, s.epoch) != (sent.session_id, sent.session_epoch)
        ):
            return LeaderAnswerApplied([], "stale")
        if not isinstance(answer, SessionFetchAnswer):
            failures = s.on_failure(answer)
            s.delay_ms = self.fetch_backoff.delay_ms(failures)
            event = log.warning if failures == 1 else log.debug
            (event if failures else log.info)(
                "fetch_session_failed" if failures else "fetch_session_reset",
                leader=leader_id,
                sessionId=sent.session_id,
                sessionEpoch=sent.session_epoch,
                error=failure or (str(answer) if answer is not None else "no answer"),
                failures=failures,
            )
            return LeaderAnswerApplied([], str(answer.code) if answer else "unreachable")
        if s.failures and sent.full:
            log.info("fetch_session_opened", leader=leader_id, sessionId=answer.session_id)
        effects: list[Effect] = []
        for w, pa in s.on_answer(answer):
            effects += self.on_leader_answer(w.sent, pa, checkpoint=False).effects
        effects += self._checkpoint_taken_log_starts()
        # Partitions still syncing send their new persisted ends as soon as they have them.
        s.delay_ms = 0 if answer.has_data or s.awaiting_syncs else self.fetch_backoff.idle_fetch_ms
        return LeaderAnswerApplied(effects, "ok")

    def on_session_crashed(self, leader_id: int, failure: str) -> list[Effect]:
        """The shell could not finish a request of the session with `leader_id`: building,
        sending or applying it raised where nothing should (an answer perhaps applied in
        part). The session starts over and every partition fetching from that leader asks
        again after a backoff, as after a lost answer; left as it was, the session would
        stay in flight, or its partitions unwanted, and their replication stopped for good."""
        s = self.fetch_sessions.get(leader_id)
        if s is None:
            return []
        failures = s.on_failure(None)
        s.scheduled = False
        s.delay_ms = self.fetch_backoff.delay_ms(failures)
        log.warning("fetch_session_started_over", leader=leader_id, error=failure)
        effects: list[Effect] = []
        for name, host in sorted(self.partitions.items()):
            if host.fetching_from == leader_id:
                effects += self.on_request_failed(name, host.session, None)
        return effects

    def fetch_due(self, e: SendToLeader) -> None:
        """A fetch that waited out its backoff joins its session."""
        found = self._follower_for(e.partition, e.session)
        if found is not None and found[1].state is FollowerState.FETCHING:
            self._want_fetch(found[0], replace(e, delay_ms=0))

    def _want_fetch(self, host: Hosted, e: SendToLeader) -> None:
        if host.fetching_from is not None and host.fetching_from != e.leader_id:
            self._drop_fetch(host)
        s = self.fetch_sessions.get(e.leader_id)
        if s is None:
            s = self.fetch_sessions[e.leader_id] = FollowerSession(
                e.leader_id, self.broker_id, self.broker_epoch
            )
        assert isinstance(e.request, FetchRequest)
        s.want(host.log.name, self._with_log_start(host, _WantedFetch(e, e.request, e.session)))
        host.fetching_from = e.leader_id

    def _want_moved_log_starts(self) -> None:
        """Fetches wanted before their log start moved (retention, or the leader's start
        taken from the answer that wanted them) ask again with the new start. Only those:
        a request's cost does not grow with the partitions its session holds. A fetch
        wanted later, or in flight now, takes the start it has when wanted."""
        for name in self._log_starts_moved:
            host = self.partitions.get(name)
            if host is None or host.fetching_from is None:
                continue
            s = self.fetch_sessions.get(host.fetching_from)
            w = None if s is None else s.wanted.get(name)
            if s is not None and w is not None:
                moved = self._with_log_start(host, w)
                if moved is not w:
                    s.want(name, moved)
        self._log_starts_moved.clear()

    @staticmethod
    def _with_log_start(host: Hosted, w: _WantedFetch) -> _WantedFetch:
        """`w` reporting the log start as it is now (Kafka's LogStartOffset of a replica
        fetch), which the leader's low watermark counts. The start moves after a fetch is
        wanted (the follower takes the leader's start from the answer that wanted it):
        a changed start lists the partition again in the session, as a moved position."""
        start = host.log.log_start_offset
        if w.request.log_start_offset == start:
            return w
        request = replace(w.request, log_start_offset=start)
        return _WantedFetch(replace(w.sent, request=request), request, w.session)

    def _drop_fetch(self, host: Hosted) -> None:
        if host.fetching_from is not None:
            s = self.fetch_sessions.get(host.fetching_from)
            if s is not None:
                s.drop(host.log.name)
            host.fetching_from = None

    def _role_changed(self, host: Hosted) -> None:
        """The replica's role was replaced: answers to the old one are dropped, its
        fetches leave their session, and sessions holding it here hear of it."""
        host.session += 1
        self._touch(host.log.name)
        self._drop_fetch(host)
        self.leader_sessions.changed(host.log.name)

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

    def on_leader_answer(
        self,
        sent: SendToLeader,
        answer: LeaderAnswer | EpochlogError | None,
        failure: str = "",
        *,
        checkpoint: bool = True,
    ) -> LeaderAnswerApplied:
        """What came back for `sent`: the leader's answer, its typed error, or nothing
        (None: no answer in time, no connection; `failure` says why, for the log).
        A log start taken from the answer is checkpointed before this returns, unless
        `checkpoint` is False: then the caller does it once for a whole session answer
        (`_checkpoint_taken_log_starts`), still before the next fetch goes out."""
        self._touch(sent.partition)
        host = self.partitions.get(sent.partition)
        if host is None:
            return LeaderAnswerApplied([], "stale")  # deleted since: reassigned away
        if answer is None or isinstance(answer, EpochlogError):
            return self._leader_failed(host, sent, answer, failure)
        if host.session == sent.session and host.leader_failures.succeeded():
            log.info("leader_reachable", partition=sent.partition, leader=sent.leader_id)
        try:
            if isinstance(answer, EpochEndOffset):
                effects = self.on_epoch_end_offset(sent.partition, sent.session, answer)
            else:
                effects = self.on_fetch_response(sent.partition, sent.session, answer)
        except InvalidRequestError as exc:
            # The answer does not fit our log (batches not at our log end, another
            # epoch): nothing was applied; ask again.
            return self._leader_failed(host, sent, None, f"unusable answer: {exc.message}")
        except EpochlogError as exc:
            log.error("replica_append_failed", partition=sent.partition, error=str(exc))
            return LeaderAnswerApplied([], str(exc.code))
        if isinstance(answer, FetchData) and host.session == sent.session:
            host.leader_high_watermark = answer.high_watermark
            self._take_leader_log_start(host, answer.log_start_offset)
        if checkpoint:
            effects += self._checkpoint_taken_log_starts()
        return LeaderAnswerApplied(effects, "ok")

    def _take_leader_log_start(self, host: Hosted, leader_log_start: int) -> None:
        """A follower moves its log start up to the leader's, as far as its own high
        watermark (Kafka's log start propagation); the next retention pass deletes the
        segments below it."""
        target = min(leader_log_start, host.replica.high_watermark)
        if host.fault is None and target > host.log.log_start_offset:
            host.log.advance_log_start(target)
            self._retention.touch(host.log.name)
            self._log_starts_taken.add(host.log.name)
            self._log_starts_moved.add(host.log.name)
            self._touch(host.log.name)
            self._log_starts_dirty = True

    def _checkpoint_taken_log_starts(self) -> list[Effect]:
        """Write the log starts taken from leaders' answers before the next fetch reports
        this replica's position: a replica that counts toward a high watermark or joins an
        ISR with a log start held only in memory comes back from a crash with its old one,
        and serves again what the leader deleted (with a deposed leader's tail below it,
        records never committed). One write for a whole session answer; log starts move
        with retention and DeleteRecords, not with every fetch."""
        if not self._log_starts_taken:
            return []
        taken, self._log_starts_taken = self._log_starts_taken, set()
        try:
            self._write_log_starts()
        except _DISK_ERRORS as exc:
            # One checkpoint file holds every partition's start: each one that moved goes
            # offline (retried by recovery) rather than fetch on with its start in memory.
            effects: list[Effect] = []
            for name in sorted(taken):
                host = self.partitions.get(name)
                if host is not None and host.fault is None:
                    effects += self._take_offline(host, exc)
            return effects
        return []

    def _leader_failed(
        self, host: Hosted, sent: SendToLeader, error: EpochlogError | None, failure: str
    ) -> LeaderAnswerApplied:
        failures = host.leader_failures.failed(sent.leader_id, sent.request.leader_epoch)
        # The first failure in a row is worth a warning, unless it is the usual race of
        # a new epoch reaching the follower before the leader.
        expected = isinstance(error, UnknownLeaderEpochError)
        event = log.warning if failures == 1 and not expected else log.debug
        event(
            "replica_request_failed",
            partition=sent.partition,
            leader=sent.leader_id,
            leaderEpoch=sent.request.leader_epoch,
            error=failure or (str(error) if error is not None else "no answer"),
            failures=failures,
        )
        effects = self.on_request_failed(sent.partition, sent.session, error)
        return LeaderAnswerApplied(effects, str(error.code) if error is not None else "unreachable")

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
        self._touch(host.log.name)
        try:
            return self._carry_out(host, actions)
        except _DISK_ERRORS as exc:
            return self._take_offline(host, exc)

    def _carry_out(self, host: Hosted, actions: Sequence[FollowerAction]) -> list[Effect]:
        out: list[Effect] = []
        for a in actions:
            if isinstance(a, Truncate):
                self._retention.touch(host.log.name)
                self._lower_high_watermark_first(host.log.name, a.offset)
                start = host.log.log_start_offset
                if host.log.truncate_to(a.offset):
                    host.rebuild_producers()
                if host.log.log_start_offset != start:
                    self._write_log_starts()
            elif isinstance(a, StartAt):
                self._retention.touch(host.log.name)
                self._lower_high_watermark_first(host.log.name, a.offset)
                # The new start is durable first: a crash in the middle of dropping the
                # segments reopens the log there (`PartitionLog.open`).
                self._write_log_starts({host.log.name: a.offset})
                host.log.reset_to(a.offset)
                host.rebuild_producers()
            elif isinstance(a, Append):
                for b in a.batches:
                    # Batches come as the leader's log read them or as the replica wire
                    # unframed them: checked once there, not again here.
                    if not isinstance(b.payload, RecordBatch):
                        raise InvalidRequestError(f"{host.log.name}: batch without bytes")
                    host.log.append_checked(b.payload)
                    host.producers.record(*producer_batch(b.payload.header))
                out += self._after_append(host)
            elif isinstance(a, SendFetch | SendOffsetsForLeaderEpoch):
                failures = host.leader_failures.towards(a.leader_id, a.request.leader_epoch)
                delay_ms = self.fetch_backoff.delay_ms(failures)
                e = SendToLeader(host.log.name, a.leader_id, host.session, a.request, delay_ms)
                if isinstance(a, SendFetch) and not delay_ms:
                    self._want_fetch(host, e)
                else:
                    # A fetch in backoff joins its session afterwards (`fetch_due`).
                    out.append(e)
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

        def records(plog: PartitionLog, high_watermark: int) -> list[LogRecord]:
            return plog.read_records(
                offset, max_records=max_records, max_bytes=max_bytes, upper_bound=high_watermark
            )

        return ReadResult(*self._consumer_read(name, offset, leader_epoch, max_bytes, records))

    def read_batches(
        self,
        name: str,
        offset: int,
        *,
        max_bytes: int = 1 << 20,
        leader_epoch: int | None = None,
    ) -> BatchReadResult:
        """`read` as stored batches, for readers that decode batches themselves. With
        `max_bytes` 0, no batches: only where the partition stands (a fetch of many
        partitions whose byte limit the partitions before this one used up)."""

        def batches(plog: PartitionLog, high_watermark: int) -> list[RecordBatch]:
            return plog.read_batches(offset, max_bytes, high_watermark)

        return BatchReadResult(*self._consumer_read(name, offset, leader_epoch, max_bytes, batches))

    def _consumer_read(
        self,
        name: str,
        offset: int,
        leader_epoch: int | None,
        max_bytes: int,
        read: Callable[[PartitionLog, int], list[_Read]],
    ) -> tuple[list[_Read], int, int, int]:
        """`read(log, high_watermark)` of the leader's log when there is anything from
        `offset` up to the high watermark and `max_bytes` to read it with, and the high
        watermark, log start offset and leaderEpoch the answer carries.
        OffsetOutOfRangeError, with the log's bounds, when `offset` is outside the log."""
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        high_watermark = host.replica.client_high_watermark()
        plog = host.log
        if not plog.log_start_offset <= offset <= plog.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{name}: offset {offset} is outside [{plog.log_start_offset}, "
                f"{plog.log_end_offset}]",
                logStartOffset=plog.log_start_offset,
                highWatermark=high_watermark,
                leaderEpoch=role.leader_epoch,
            )
        try:
            found = read(plog, high_watermark) if offset < high_watermark and max_bytes > 0 else []
        except _DISK_ERRORS as exc:
            raise self._disk_failed(host, exc) from exc
        return found, high_watermark, plog.log_start_offset, role.leader_epoch

    def read_many(
        self, asks: Sequence[ReadAsk], *, max_bytes: int
    ) -> tuple[list[BatchReadResult | EpochlogError], bool]:
        """A fetch of many partitions: each one's batches or error, in the order asked, and
        whether any has news (batches or an error; a reader with none waits for some).

        At most `max_bytes` in all, but at least one batch of the first partition with
        one (as Kafka's fetch.max.bytes); the partitions after the limit is used up are
        answered with where they stand only."""
        out: list[BatchReadResult | EpochlogError] = []
        left = max_bytes
        news = False
        for ask in asks:
            try:
                result = self.read_batches(
                    ask.name,
                    ask.offset,
                    max_bytes=min(ask.max_bytes, max(left, 0)),
                    leader_epoch=ask.leader_epoch,
                )
            except EpochlogError as exc:
                out.append(exc)
                news = True
                continue
            if result.batches:
                news = True
                left -= sum(len(b.raw) for b in result.batches)
            out.append(result)
        return out, news

    def list_offsets(
        self, name: str, at: str | int, *, leader_epoch: int | None = None
    ) -> tuple[int, int]:
        """ListOffsets: (offset, leaderEpoch) for earliest, latest, a timestamp in ms (the
        first offset below the HW stamped at or after it, found through the segments' time
        indexes) or max-timestamp (the first below the HW stamped with the largest
        timestamp below it); the HW when there is none, as Kafka answers the log end."""
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        high_watermark = host.replica.client_high_watermark()
        if at == EARLIEST:
            return host.log.log_start_offset, role.leader_epoch
        if at == LATEST:
            return high_watermark, role.leader_epoch
        if at != MAX_TIMESTAMP and (not isinstance(at, int) or at < 0):
            raise InvalidRequestError(
                f"{name}: at must be earliest, latest, max-timestamp or a time in ms"
            )
        try:
            stamp = host.log.max_timestamp(high_watermark) if isinstance(at, str) else at
            found = None if stamp is None else host.log.offset_for_timestamp(stamp, high_watermark)
        except _DISK_ERRORS as exc:
            raise self._disk_failed(host, exc) from exc
        return (high_watermark if found is None else found), role.leader_epoch

    def epoch_end(
        self, name: str, epoch: int, *, leader_epoch: int | None = None
    ) -> tuple[EpochEndOffset, int]:
        """A reader's epoch query (KIP-320): the largest epoch at or below `epoch` in the
        leader's log and where it ends (`Leader.epoch_end_for_reader`), and the leader
        epoch answering. Not behind the KIP-207 gate: it is about records already read."""
        host = self._get(name)
        role = self._leader(host, leader_epoch)
        return role.epoch_end_for_reader(epoch), role.leader_epoch
