"""One partition's replica on this broker: its current role and the assignments that set it.

`Replica` is the single object the server keeps per hosted partition. It applies
the controller's assignments (leader, leaderEpoch, partitionEpoch, isr,
replicas), ignoring stale ones, and swaps the role: `Leader`, `Follower`, or
`Offline` (no leader known, or this broker is not a replica). It keeps the
high watermark across roles, so the checkpoint the shell writes is defined in
every role and never drops below what this broker already knew (KAFKA-1647).

Protocol with the shell: on every assignment from a heartbeat response, gather
the log's facts (`LogFacts`) and call `apply(...)`; carry out the returned
`Transition.actions` (produce failures of a resigned leader, the new
follower's first truncation and request), then talk to `replica.role`
directly until the next transition. Assignment ordering: a higher leader epoch
always wins; at the same leader epoch only a higher partition epoch changes
anything: an ISR change, or a reassignment changing the replicas (the leader
starts or stops serving followers; a follower left out goes offline).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from epochlog.protocol.errors import NotLeaderOrFollowerError
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.replication.follower import Follower, FollowerAction
from epochlog_broker.replication.leader import Leader, LeaderAction


@dataclass(frozen=True, slots=True)
class Assignment:
    leader: int | None
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    isr_storage_ids: tuple[tuple[int, str], ...] = ()
    """Kept only to be reported back: the controller restores a lost status from it."""
    eligible_leader_replicas: tuple[int, ...] = ()
    """KIP-966's ELR: a leader's low watermark waits for them too (they are electable);
    with their storage ids below, reported back as above."""
    eligible_leader_replica_storage_ids: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 10_000


@dataclass(frozen=True, slots=True)
class LogFacts:
    """What the log says at the moment of a transition."""

    log_end_offset: int
    persisted_log_end_offset: int
    high_watermark: int
    epochs: EpochHistory
    log_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class Offline:
    leader_epoch: int
    reason: str


class TransitionKind(enum.Enum):
    IGNORED = "ignored"
    ISR_UPDATED = "isr-updated"
    BECAME_LEADER = "became-leader"
    BECAME_FOLLOWER = "became-follower"
    WENT_OFFLINE = "went-offline"


@dataclass(frozen=True, slots=True)
class Transition:
    kind: TransitionKind
    actions: tuple[LeaderAction | FollowerAction, ...] = ()


class Replica:
    # The role classes are attributes so that a test bed can substitute variants of the
    # rules (the simulator's legacy behaviours) without any switch in the broker itself.
    leader_class: type[Leader] = Leader
    follower_class: type[Follower] = Follower

    def __init__(
        self,
        *,
        partition: str,
        broker_id: int,
        broker_epoch: int,
        config: PartitionConfig,
        high_watermark: int = 0,
        find_divergence_first: bool = True,
    ) -> None:
        self.partition = partition
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.config = config
        self.find_divergence_first = find_divergence_first
        self.assignment: Assignment | None = None
        self.role: Leader | Follower | Offline = Offline(-1, "no assignment yet")
        self._high_watermark = high_watermark
        self._served_high_watermark = 0

    @property
    def leader_epoch(self) -> int:
        return self.assignment.leader_epoch if self.assignment else -1

    @property
    def high_watermark(self) -> int:
        """The HW to checkpoint, whatever the role: the role's while it has one. A role
        starts from the HW this replica knew and only a truncation lowers it (a follower
        that diverged after an unclean election): records above it are no longer the ones
        that were committed, and a HW kept above them would let this replica, elected
        next, acknowledge records no other ISR member holds (simulator seed 2300203)."""
        if isinstance(self.role, Leader | Follower):
            self._high_watermark = self.role.high_watermark
        return self._high_watermark

    def client_high_watermark(self) -> int:
        """Delegates to the leader's KIP-207 gate and remembers the largest value served."""
        if not isinstance(self.role, Leader):
            raise NotLeaderOrFollowerError(
                f"{self.partition}: not the leader", leaderEpoch=self.leader_epoch
            )
        high_watermark = self.role.client_high_watermark()
        self._served_high_watermark = max(self._served_high_watermark, high_watermark)
        return high_watermark

    def _is_stale(self, a: Assignment) -> bool:
        if self.assignment is None:
            return False
        if a.leader_epoch != self.assignment.leader_epoch:
            return a.leader_epoch < self.assignment.leader_epoch
        return a.partition_epoch <= self.assignment.partition_epoch

    def apply(self, a: Assignment, log: LogFacts, now_ms: int) -> Transition:
        if self._is_stale(a):
            return Transition(TransitionKind.IGNORED)
        fresh = self.assignment is None
        same_epoch = not fresh and a.leader_epoch == self.leader_epoch
        self.assignment = a
        if same_epoch and self.broker_id in a.replicas:
            if isinstance(self.role, Leader):
                return Transition(
                    TransitionKind.ISR_UPDATED,
                    tuple(
                        self.role.on_isr_update(
                            a.isr, a.partition_epoch, a.replicas, a.eligible_leader_replicas
                        )
                    ),
                )
            return Transition(TransitionKind.ISR_UPDATED)
        high_watermark = max(self.high_watermark, log.high_watermark)
        self._high_watermark = high_watermark
        actions: list[LeaderAction | FollowerAction] = []
        if isinstance(self.role, Leader):
            actions.extend(self.role.resign())
        if self.broker_id not in a.replicas or a.leader is None:
            reason = "not a replica" if a.leader is not None else "no leader"
            self.role = Offline(a.leader_epoch, reason)
            return Transition(TransitionKind.WENT_OFFLINE, tuple(actions))
        if a.leader == self.broker_id and fresh and a.leader_epoch <= log.epochs.latest_epoch:
            # This broker wrote batches of that epoch in a previous process, whose unsynced
            # tail may be gone: leading it again could put two records at one offset in one
            # epoch, which no divergence check can see. A restarted leader needs a new epoch.
            self.role = Offline(a.leader_epoch, "leader epoch used by a previous process")
            return Transition(TransitionKind.WENT_OFFLINE, tuple(actions))
        if a.leader == self.broker_id:
            self.role = self.leader_class(
                partition=self.partition,
                broker_id=self.broker_id,
                leader_epoch=a.leader_epoch,
                partition_epoch=a.partition_epoch,
                isr=a.isr,
                replicas=a.replicas,
                min_insync_replicas=self.config.min_insync_replicas,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                log_end_offset=log.log_end_offset,
                persisted_log_end_offset=log.persisted_log_end_offset,
                high_watermark=high_watermark,
                epochs=log.epochs,
                now_ms=now_ms,
                reported_high_watermark=self._served_high_watermark,
                log_start_offset=log.log_start_offset,
                eligible_leader_replicas=a.eligible_leader_replicas,
            )
            return Transition(TransitionKind.BECAME_LEADER, tuple(actions))
        follower = self.follower_class(
            partition=self.partition,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            leader_id=a.leader,
            leader_epoch=a.leader_epoch,
            log_end_offset=log.log_end_offset,
            persisted_log_end_offset=log.persisted_log_end_offset,
            high_watermark=high_watermark,
            epochs=log.epochs,
            find_divergence_first=self.find_divergence_first,
        )
        self.role = follower
        actions.extend(follower.start())
        return Transition(TransitionKind.BECAME_FOLLOWER, tuple(actions))
