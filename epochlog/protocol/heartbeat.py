"""Broker heartbeats to the controller and the controller's answer, as pydantic models.

A broker sends a `BrokerHeartbeat` every `heartbeatIntervalMs`. It says who the
broker is (id, brokerEpoch, address) and, per partition it hosts, what that
replica has: its role and leaderEpoch, the log end offset that is on disk and
its high watermark. A leader adds what it knows of its followers
(`followers`: each one's log end offset and lastCaughtUpTime) and the replicas
it proposes to add to the ISR. The answer, a `HeartbeatResponse`, carries the
broker's current assignments as the controller has persisted them.

Every report also carries the state the broker holds apart from the resource,
so that a controller that lost the Partition status (deleted and re-created, a
restored backup, status wiped) can restore it: the last assignment the broker
was given (`assignment`), and, kept apart from it, what its log says
(`lastEpoch`: the leaderEpoch of the last batch on disk; `logEndOffset`). An
epoch a broker merely heard of in an assignment never ranks its log. The
heartbeat names the broker's data directory (`storageId`, a UUID written when
the directory was formatted): a new storageId under the same broker id is a
replica whose disk was lost. A replica taken offline by a storage error says
so in `storageError`.

Heartbeats are incremental, so that their size and the controller's work
follow changes, not the partition count (as Kafka's incremental fetch
sessions, KIP-227). A broker starts a report session with a full heartbeat
(`full`: every hosted partition); the controller answers with a `sessionId`.
Later heartbeats of the session (`seq` rising by one each) carry only the
reports that differ from what the controller has acknowledged, and `removed`
names partitions the broker no longer hosts. A report left out is unchanged:
the controller holds it as current as of the latest heartbeat. A broker sends
a full heartbeat again when it starts, when the controller answers
`fullReportRequired` (it restarted, or does not know the session), when a
full heartbeat went unanswered, and periodically. `answered` is the `seq` of the
last heartbeat whose answer the broker applied: the controller's answers
likewise carry only the assignments that changed since the ones the broker
applied (all of them in the answer to a full heartbeat).

A leader reports a follower that reads at its log end as `caughtUp` (it last
caught up within the leader's caught-up window of `timeMs`: half the
partition's replicaLagTimeMaxMs, at least a second) rather than by the time of
that fetch, which changes with every fetch of an idle partition and with
every slow fetch under load; the controller takes a caught-up follower as
caught up at the time of the latest heartbeat of its leader. A follower that
trails by more is reported with the time it last caught up, which stays fixed
while it lags: the controller shrinks the ISR between replicaLagTimeMaxMs and
one and a half times it, as Kafka's leader does (it checks every half limit).

Times a broker reports (`timeMs`, `lastCaughtUpTime`) are on the broker's clock.
`timeMs` is the broker's clock when it built the heartbeat, so the controller
can read the other times relative to it and never compare two clocks directly.

A broker told to stop sets `controlledShutdown` in its heartbeats and keeps
serving. The controller moves each leadership it holds to another ISR member in
good standing, takes it out of every ISR, and answers with
`controlledShutdown.partitionsRemaining`: the broker stops once that is 0 (or
its shutdown timeout passes), so that a rolling restart costs no session
timeout of unavailability per broker.

A partition reassigned away from a broker that still hosts it comes back in
`stopReplicas`: the assignment that left the broker out. Only then does a
broker delete a replica's data; a partition merely missing from the answers
(a controller that lost its state, a deleted resource) is kept.

brokerEpoch must be larger on every start of the broker process than on any
earlier start (a persisted counter, or the start time in ms): the controller
takes a smaller one for a late message from a dead process.

Naming and wire conventions are those of `epochlog.protocol.wire`.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import Annotated, Final, Self

from pydantic import Field, IPvAnyAddress, model_validator

from epochlog.protocol.wire import (
    BrokerKey,
    Int64,
    NonNegInt32,
    NonNegInt64,
    PositiveInt32,
    WireModel,
)
from epochlog.resources import (
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    PartitionSpec,
    PartitionStatus,
)

DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 500
MAX_RACK_LENGTH: Final = 253

BrokerId = NonNegInt32
"""A broker id in a heartbeat, as in every broker request: Kafka's int32."""
"""A rack is a zone name: a Kubernetes label value is at most 63 characters, a DNS name 253."""


class PartitionRole(enum.StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"


class FollowerProgress(WireModel):
    """A leader's view of one follower, from the follower's fetches."""

    replica: BrokerId
    log_end_offset: NonNegInt64
    """The offset the follower fetches from: all below it is on the follower's disk."""
    last_caught_up_time: NonNegInt64 | None = None
    """Leader clock when a fetch last read up to the leader's log end; None: not since the
    broker became leader, or `caught_up`."""
    caught_up: bool = Field(default=False, exclude_if=lambda v: not v)
    """Caught up at the heartbeat's `timeMs` (and at every later heartbeat that leaves the
    report out): its last fetch read to the leader's log end within the caught-up window."""


class IsrProposal(WireModel):
    """The leader asks to add `replica`, which caught up while it had `broker_epoch`."""

    replica: BrokerId
    broker_epoch: NonNegInt64
    log_end_offset: NonNegInt64
    proposal_id: NonNegInt64 = 0
    """The leader's number for this proposal; a refusal names it."""


class HeldAssignment(WireModel):
    """The last assignment a broker holds for a partition, as the controller handed it out."""

    leader: BrokerId | None
    leader_epoch: NonNegInt32
    partition_epoch: NonNegInt32
    isr: tuple[BrokerId, ...]
    replicas: tuple[BrokerId, ...]
    isr_storage_ids: dict[BrokerKey, str] = Field(default_factory=dict)
    eligible_leader_replicas: tuple[BrokerId, ...] = Field(default=(), exclude_if=lambda v: not v)
    """KIP-966's ELR as the controller recorded it (see `PartitionStatus`)."""
    eligible_leader_replica_storage_ids: dict[BrokerKey, str] = Field(
        default_factory=dict, exclude_if=lambda v: not v
    )


class PartitionReport(WireModel):
    """One hosted partition as the reporting broker has it."""

    name: Annotated[str, Field(min_length=1)]
    role: PartitionRole
    leader_epoch: NonNegInt32
    """The newest leaderEpoch this replica knows, from its log or an assignment (0: none)."""
    partition_epoch: NonNegInt32 = 0
    log_end_offset: NonNegInt64
    """Log end offset on disk (fsynced); data above it is not counted anywhere."""
    last_epoch: NonNegInt32 = 0
    """leaderEpoch of the last batch below logEndOffset (0: empty log). Ranks logs."""
    high_watermark: NonNegInt64
    assignment: HeldAssignment | None = None
    """The last assignment this broker holds for the partition (None: none since it started
    and none on disk)."""
    storage_error: str | None = None
    """Set while the replica is offline after a storage error (disk full, I/O error, a
    damaged segment): it neither leads nor counts as in sync."""
    epoch_start_offset: NonNegInt64 | None = None
    """Leaders: the log end offset recorded when this broker became leader of leader_epoch."""
    log_start_offset: NonNegInt64 = Field(default=0, exclude_if=lambda v: v == 0)
    """The first offset this replica holds (retention and DeleteRecords move it up)."""
    followers: tuple[FollowerProgress, ...] = ()
    isr_proposals: tuple[IsrProposal, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.role is not PartitionRole.LEADER and (self.followers or self.isr_proposals):
            raise ValueError(f"{self.name}: only a leader reports followers and isrProposals")
        if self.last_epoch > self.leader_epoch:
            raise ValueError(
                f"{self.name}: lastEpoch {self.last_epoch} is above leaderEpoch "
                f"{self.leader_epoch}, the newest epoch the replica knows"
            )
        if self.role is PartitionRole.LEADER:
            # A leader counts only what is on its own disk: its high watermark and the
            # start of its epoch lie within its log. (A follower's may not: it hears the
            # leader's high watermark before its own fsync.)
            if self.high_watermark > self.log_end_offset:
                raise ValueError(
                    f"{self.name}: highWatermark {self.high_watermark} is above the "
                    f"leader's logEndOffset {self.log_end_offset}"
                )
            start = self.epoch_start_offset
            if start is not None and start > self.log_end_offset:
                raise ValueError(
                    f"{self.name}: epochStartOffset {start} is above the leader's "
                    f"logEndOffset {self.log_end_offset}"
                )
        return self

    def follower(self, replica: int) -> FollowerProgress | None:
        for f in self.followers:
            if f.replica == replica:
                return f
        return None


Fingerprint = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A certificate's SHA-256 fingerprint (`epochlog.security.trust.fingerprint`)."""
MAX_TRUSTED_CAS: Final = 8


class TlsReport(WireModel):
    """What a broker's TLS contexts hold now: the CAs it trusts and the certificate it
    serves, by fingerprint. The operator replaces a CA in steps and waits for these
    between them (docs/operating/certificates.md). A few fingerprints, whatever the
    number of partitions."""

    cluster_cas: tuple[Fingerprint, ...] = Field(default=(), max_length=MAX_TRUSTED_CAS)
    clients_cas: tuple[Fingerprint, ...] = Field(default=(), max_length=MAX_TRUSTED_CAS)
    certificate: Fingerprint | None = None


class BrokerHeartbeat(WireModel):
    broker_id: BrokerId
    broker_epoch: NonNegInt64
    address: Annotated[str, Field(min_length=1)]
    ip: IPvAnyAddress | None = Field(default=None, exclude_if=lambda v: v is None)
    """The IP address peers reach this broker at (its pod's, from the downward API), when
    it knows it. Peers connect there, checking the certificate against the advertised
    name: cluster DNS may answer a restarted pod's name with its previous address for as
    long as it caches answers (30 s with kubeadm's CoreDNS), and a follower that cannot
    reach a new leader for that long falls out of the ISR. Older operators ignore it."""
    storage_id: str | None = None
    """The data directory's storage id (a UUID); None from brokers that do not report one."""
    time_ms: NonNegInt64
    full: Annotated[bool, Field(strict=True)] = True
    """`partitions` lists every hosted partition; otherwise only those that changed."""
    session_id: NonNegInt64 = 0
    """The report session an incremental heartbeat continues (0 with a full one)."""
    seq: NonNegInt64 = 0
    """This heartbeat's number within the broker process: rises by one per heartbeat."""
    answered: NonNegInt64 = 0
    """`seq` of the last heartbeat whose answer the broker applied (0: none)."""
    partitions: tuple[PartitionReport, ...] = ()
    removed: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    """Incremental heartbeats: partitions reported before that the broker no longer hosts."""
    liveness_only: Annotated[bool, Field(strict=True)] = False
    """A keepalive from a broker whose event loop is late with its heartbeat: it renews the
    session of this brokerEpoch and nothing else (no report, none re-asserted)."""
    controlled_shutdown: Annotated[bool, Field(strict=True)] = Field(
        default=False, exclude_if=lambda v: not v
    )
    rack: Annotated[str, Field(min_length=1, max_length=MAX_RACK_LENGTH)] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    """The broker's rack (its node's zone; Kafka's broker.rack): replicas of a partition are
    assigned to as many racks as there are. None: it has none."""
    """The broker is stopping (SIGTERM) and asks the controller to move its leaderships to
    other ISR members and take it out of every ISR first (Kafka's controlled shutdown).
    Once sent, it holds for the rest of this brokerEpoch."""
    tls: TlsReport | None = Field(default=None, exclude_if=lambda v: v is None)
    """The broker's trusted CAs and certificate (TLS brokers; not in keepalives). Older
    operators ignore it."""

    @model_validator(mode="after")
    def _one_report_per_partition(self) -> Self:
        counts = Counter(p.name for p in self.partitions)
        counts.update(self.removed)
        repeated = sorted(n for n, c in counts.items() if c > 1)
        if repeated:
            raise ValueError(f"partitions {repeated} are reported more than once")
        if self.full and self.removed:
            raise ValueError("a full heartbeat lists what is hosted; it removes nothing")
        if not self.full and self.session_id == 0:
            raise ValueError("an incremental heartbeat names the session it continues")
        if self.liveness_only and (self.full or self.partitions or self.removed):
            raise ValueError("a keepalive (livenessOnly) carries no reports")
        return self

    def partition(self, name: str) -> PartitionReport | None:
        # The controller looks reports up per partition per decision: a broker hosting
        # hundreds of partitions makes a linear scan quadratic. The index is keyed by
        # the tuple it was built from, because model_copy() carries it over.
        cached = self.__dict__.get("_index")
        if cached is None or cached[0] is not self.partitions:
            cached = (self.partitions, {p.name: p for p in self.partitions})
            self.__dict__["_index"] = cached
        index: dict[str, PartitionReport] = cached[1]
        return index.get(name)


class PartitionAssignment(WireModel):
    """What a broker is told about one partition it holds a replica of."""

    name: str
    leader: BrokerId | None
    leader_epoch: NonNegInt32
    partition_epoch: NonNegInt32
    isr: tuple[BrokerId, ...]
    replicas: tuple[BrokerId, ...]
    isr_storage_ids: dict[BrokerKey, str] = Field(default_factory=dict)
    isr_broker_epochs: dict[BrokerKey, NonNegInt64] = Field(
        default_factory=dict, exclude_if=lambda v: not v
    )
    """The brokerEpoch each ISR member was in sync as: a restarted broker is back in sync
    (ready) only once the ISR names its current brokerEpoch."""
    eligible_leader_replicas: tuple[BrokerId, ...] = Field(default=(), exclude_if=lambda v: not v)
    """KIP-966's ELR, with the storageId each member was in sync on: brokers keep them with
    the rest of the assignment, so that a lost status is restored with them. Left out when
    empty (a partition whose ISR is at minInsyncReplicas); controllers that do not send
    them hand out none, and brokers that do not know them ignore them."""
    eligible_leader_replica_storage_ids: dict[BrokerKey, str] = Field(
        default_factory=dict, exclude_if=lambda v: not v
    )
    min_insync_replicas: PositiveInt32 = DEFAULT_MIN_INSYNC_REPLICAS
    replica_lag_time_max_ms: PositiveInt32 = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    topic: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.topic, so that brokers can say which topic a name belongs to
    (None from controllers that do not send it)."""
    partition: NonNegInt32 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.partition: its index within the topic."""
    retention_ms: Int64 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.retentionMs (-1: unlimited; None: the broker's default)."""
    retention_bytes: Int64 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.retentionBytes (-1: unlimited)."""
    segment_bytes: PositiveInt32 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.segmentBytes (None: the broker's default)."""
    segment_ms: PositiveInt32 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.segmentMs (None: segments roll by size only)."""
    adding_replicas: tuple[BrokerId, ...] = Field(default=(), exclude_if=lambda v: not v)
    """Replicas a reassignment adds: their catch-up fetches are throttled."""
    unclean_leader_election: bool = Field(default=False, exclude_if=lambda v: not v)
    """The Partition's spec.uncleanLeaderElection, which brokers only report (Kafka's
    DescribeConfigs): the controller alone decides elections. Left out when off."""

    @classmethod
    def from_status(
        cls, name: str, status: PartitionStatus, spec: PartitionSpec | None = None
    ) -> PartitionAssignment:
        return cls(
            name=name,
            leader=status.leader,
            leader_epoch=status.leader_epoch,
            partition_epoch=status.partition_epoch,
            isr=status.isr,
            replicas=status.replicas,
            isr_storage_ids=status.isr_storage_ids,
            isr_broker_epochs=status.isr_broker_epochs,
            eligible_leader_replicas=status.eligible_leader_replicas,
            eligible_leader_replica_storage_ids=status.eligible_leader_replica_storage_ids,
            min_insync_replicas=(
                DEFAULT_MIN_INSYNC_REPLICAS if spec is None else spec.min_insync_replicas
            ),
            replica_lag_time_max_ms=(
                DEFAULT_REPLICA_LAG_TIME_MAX_MS if spec is None else spec.replica_lag_time_max_ms
            ),
            topic=None if spec is None else spec.topic,
            partition=None if spec is None else spec.partition,
            retention_ms=None if spec is None else spec.retention_ms,
            retention_bytes=None if spec is None else spec.retention_bytes,
            segment_bytes=None if spec is None else spec.segment_bytes,
            segment_ms=None if spec is None else spec.segment_ms,
            adding_replicas=status.adding_replicas,
            unclean_leader_election=spec is not None and spec.unclean_leader_election,
        )


class ControlledShutdownProgress(WireModel):
    """The controller's answer to a broker in controlled shutdown: what it still waits for."""

    partitions_remaining: NonNegInt64
    """Partitions the broker still leads or is in the ISR of while another live ISR member
    could take its place, or whose new assignment their other ISR members have not applied
    yet: the broker keeps serving until this is 0."""
    partitions_without_successor: tuple[str, ...] = ()
    """Partitions the broker leads with no other live ISR member in good standing: they
    stay led by it and go offline when it stops (at most 100 names)."""
    partitions_without_successor_count: NonNegInt64 = 0


class RejectedIsrProposal(WireModel):
    """The controller refused to add `replica`: the leader stops counting it for the HW."""

    name: str
    leader_epoch: NonNegInt32
    partition_epoch: NonNegInt32
    replica: BrokerId
    reason: str
    proposal_id: NonNegInt64 = 0


class HeartbeatResponse(WireModel):
    fenced: Annotated[bool, Field(strict=True)] = False
    """This brokerEpoch is fenced: the broker must restart with a new brokerEpoch to rejoin."""
    full_report_required: Annotated[bool, Field(strict=True)] = False
    """The controller does not know the session of this incremental heartbeat (it
    restarted, or a newer session replaced it) and took nothing from it: send a full one."""
    session_id: NonNegInt64 = 0
    """The report session the heartbeat was taken into."""
    assignments: tuple[PartitionAssignment, ...] = ()
    """Assignments that changed since the answer the broker last applied (every one in the
    answer to a full heartbeat), and any the broker reports holding an older version of."""
    rejected_isr_proposals: tuple[RejectedIsrProposal, ...] = ()
    brokers: dict[BrokerKey, str] = Field(default_factory=dict)
    """Address of every live broker, as it advertises itself: where to find a leader."""
    broker_ips: dict[BrokerKey, IPvAnyAddress] = Field(
        default_factory=dict, exclude_if=lambda v: not v
    )
    """The IP address of each live broker that reported one (`BrokerHeartbeat.ip`) from
    that address: where to connect to the host of its advertised address."""
    controlled_shutdown: ControlledShutdownProgress | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    """Set in answers to a broker in controlled shutdown."""
    stop_replicas: tuple[PartitionAssignment, ...] = Field(default=(), exclude_if=lambda v: not v)
    """Partitions reassigned away from this broker (Kafka's StopReplica with delete): the
    assignment that left it out of the replicas. The broker stops its replica and deletes
    its data, only when the assignment it holds names it and is older than this one."""
