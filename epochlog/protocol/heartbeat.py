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

Times a broker reports (`timeMs`, `lastCaughtUpTime`) are on the broker's clock.
`timeMs` is the broker's clock when it built the heartbeat, so the controller
can read the other times relative to it and never compare two clocks directly.

brokerEpoch must be larger on every start of the broker process than on any
earlier start (a persisted counter, or the start time in ms): the controller
takes a smaller one for a late message from a dead process.

Naming and wire conventions are those of `epochlog.protocol.wire`.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import Annotated, Final, Self

from pydantic import Field, model_validator

from epochlog.protocol.wire import BrokerId, BrokerKey, NonNegativeInt, PositiveInt, WireModel
from epochlog.resources import (
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    PartitionSpec,
    PartitionStatus,
)

DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 500


class PartitionRole(enum.StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"


class FollowerProgress(WireModel):
    """A leader's view of one follower, from the follower's fetches."""

    replica: BrokerId
    log_end_offset: NonNegativeInt
    """The offset the follower fetches from: all below it is on the follower's disk."""
    last_caught_up_time: NonNegativeInt | None = None
    """Leader clock when a fetch last read up to the leader's log end; None: not since the
    broker became leader."""


class IsrProposal(WireModel):
    """The leader asks to add `replica`, which caught up while it had `broker_epoch`."""

    replica: BrokerId
    broker_epoch: NonNegativeInt
    log_end_offset: NonNegativeInt
    proposal_id: NonNegativeInt = 0
    """The leader's number for this proposal; a refusal names it."""


class HeldAssignment(WireModel):
    """The last assignment a broker holds for a partition, as the controller handed it out."""

    leader: BrokerId | None
    leader_epoch: NonNegativeInt
    partition_epoch: NonNegativeInt
    isr: tuple[BrokerId, ...]
    replicas: tuple[BrokerId, ...]
    isr_storage_ids: dict[BrokerKey, str] = Field(default_factory=dict)


class PartitionReport(WireModel):
    """One hosted partition as the reporting broker has it."""

    name: Annotated[str, Field(min_length=1)]
    role: PartitionRole
    leader_epoch: NonNegativeInt
    """The newest leaderEpoch this replica knows, from its log or an assignment (0: none)."""
    partition_epoch: NonNegativeInt = 0
    log_end_offset: NonNegativeInt
    """Log end offset on disk (fsynced); data above it is not counted anywhere."""
    last_epoch: NonNegativeInt = 0
    """leaderEpoch of the last batch below logEndOffset (0: empty log). Ranks logs."""
    high_watermark: NonNegativeInt
    assignment: HeldAssignment | None = None
    """The last assignment this broker holds for the partition (None: none since it started
    and none on disk)."""
    storage_error: str | None = None
    """Set while the replica is offline after a storage error (disk full, I/O error, a
    damaged segment): it neither leads nor counts as in sync."""
    epoch_start_offset: NonNegativeInt | None = None
    """Leaders: the log end offset recorded when this broker became leader of leader_epoch."""
    followers: tuple[FollowerProgress, ...] = ()
    isr_proposals: tuple[IsrProposal, ...] = ()

    @model_validator(mode="after")
    def _leader_only_fields(self) -> Self:
        if self.role is not PartitionRole.LEADER and (self.followers or self.isr_proposals):
            raise ValueError(f"{self.name}: only a leader reports followers and isrProposals")
        return self

    def follower(self, replica: int) -> FollowerProgress | None:
        for f in self.followers:
            if f.replica == replica:
                return f
        return None


class BrokerHeartbeat(WireModel):
    broker_id: BrokerId
    broker_epoch: NonNegativeInt
    address: Annotated[str, Field(min_length=1)]
    storage_id: str | None = None
    """The data directory's storage id (a UUID); None from brokers that do not report one."""
    time_ms: NonNegativeInt
    partitions: tuple[PartitionReport, ...] = ()

    @model_validator(mode="after")
    def _one_report_per_partition(self) -> Self:
        counts = Counter(p.name for p in self.partitions)
        repeated = sorted(n for n, c in counts.items() if c > 1)
        if repeated:
            raise ValueError(f"partitions {repeated} are reported more than once")
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
    leader_epoch: NonNegativeInt
    partition_epoch: NonNegativeInt
    isr: tuple[BrokerId, ...]
    replicas: tuple[BrokerId, ...]
    isr_storage_ids: dict[BrokerKey, str] = Field(default_factory=dict)
    min_insync_replicas: PositiveInt = DEFAULT_MIN_INSYNC_REPLICAS
    replica_lag_time_max_ms: PositiveInt = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    topic: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.topic, so that brokers can say which topic a name belongs to
    (None from controllers that do not send it)."""
    partition: NonNegativeInt | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Partition's spec.partition: its index within the topic."""

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
            min_insync_replicas=(
                DEFAULT_MIN_INSYNC_REPLICAS if spec is None else spec.min_insync_replicas
            ),
            replica_lag_time_max_ms=(
                DEFAULT_REPLICA_LAG_TIME_MAX_MS if spec is None else spec.replica_lag_time_max_ms
            ),
            topic=None if spec is None else spec.topic,
            partition=None if spec is None else spec.partition,
        )


class RejectedIsrProposal(WireModel):
    """The controller refused to add `replica`: the leader stops counting it for the HW."""

    name: str
    leader_epoch: NonNegativeInt
    partition_epoch: NonNegativeInt
    replica: BrokerId
    reason: str
    proposal_id: NonNegativeInt = 0


class HeartbeatResponse(WireModel):
    fenced: Annotated[bool, Field(strict=True)] = False
    """This brokerEpoch is fenced: the broker must restart with a new brokerEpoch to rejoin."""
    assignments: tuple[PartitionAssignment, ...] = ()
    rejected_isr_proposals: tuple[RejectedIsrProposal, ...] = ()
    brokers: dict[BrokerKey, str] = Field(default_factory=dict)
    """Address of every live broker, as it advertises itself: where to find a leader."""
