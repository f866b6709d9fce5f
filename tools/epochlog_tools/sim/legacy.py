"""Old behaviours the simulator can bring back, to show that its checker catches them.

Each switch reintroduces one rule that Kafka or ZooKeeper once had and that
lost acknowledged data or moved offsets backwards. They exist only here, as
subclasses of the real state machines and wrappers around the real controller
decision; the broker and the operator have no such switch and cannot be
configured into any of these behaviours.

- `truncate-to-hw`: a replica becoming follower truncates its log to its local
  high watermark and fetches from there (Kafka before KIP-101, KAFKA-1211).
- `ack-before-fsync`: appended data counts as persisted at once, for the
  leader's acks and high watermark and for the fetch offset a follower reports;
  the fsync follows later (ZOOKEEPER-4646).
- `drop-hw-checkpoint`: the HW checkpoint keeps only partitions with an active
  role; the others lose their line (KAFKA-1647). Our followers never truncate
  to the HW, which masks this on its own; combined with `truncate-to-hw`, as in
  the 2014 code, a replica restarts with HW 0 and truncates everything.
- `no-offset-gate`: a new leader answers ListOffsets and reads with its HW at
  once, without waiting until it reaches the log end at election (KIP-207).
- `count-lag`: the controller drops a follower from the ISR as soon as it is
  more than `COUNT_LAG_MAX_MESSAGES` records behind the leader's log end, the
  rule KIP-16 replaced (replica.lag.max.messages).
- `late-maximal-isr`: the leader counts a replica it proposed for the ISR
  towards the high watermark only once it learns the ISR change was recorded
  (the race KIP-497 closed).
- `rank-by-known-epoch`: the controller ranks replicas of a partition whose
  status is lost by the newest epoch each broker knows, including one it only
  heard of in an assignment, then log end, and never restores the status from
  the assignments brokers hold. A stale, longer tail that heard of the newest
  epoch wins, and acknowledged records of that epoch are truncated away.
- `history-start-divergence`: a leader asked where an epoch below its history
  ends answers (that epoch, where the history begins), as Kafka's
  LeaderEpochFileCache does, and the follower truncates there, keeping its own
  records of that epoch below it; a log start a follower takes from its leader
  stays in memory until the next retention pass writes it. A deposed leader's
  never committed tail then comes back as committed data after a crash.
- `refuse-once`: the controller sends a refused ISR proposal's refusal in one
  heartbeat answer only; if that answer is lost, the leader keeps the proposal
  pending (and the replica in its HW quorum) until the partitionEpoch moves.
- `no-elr`: the controller keeps no eligible leader replicas (Kafka before
  KIP-966's ELR): a replica that left the ISR when the ISR fell below
  minInsyncReplicas is never elected, although it holds everything committed,
  so a partition whose last ISR member is gone for good stays Offline while
  such a replica is live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from epochlog.protocol.heartbeat import BrokerHeartbeat, PartitionRole
from epochlog.resources import PartitionStatus
from epochlog_broker.core import BrokerCore, Effect, Hosted
from epochlog_broker.replication.follower import Follower, FollowerAction
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.replica import Replica
from epochlog_operator.decide import Decision
from epochlog_operator.events import Event, EventReason
from epochlog_operator.observations import ReceivedHeartbeat

TRUNCATE_TO_HW: Final = "truncate-to-hw"
ACK_BEFORE_FSYNC: Final = "ack-before-fsync"
DROP_HW_CHECKPOINT: Final = "drop-hw-checkpoint"
NO_OFFSET_GATE: Final = "no-offset-gate"
COUNT_LAG: Final = "count-lag"
LATE_MAXIMAL_ISR: Final = "late-maximal-isr"
RANK_BY_KNOWN_EPOCH: Final = "rank-by-known-epoch"
HISTORY_START_DIVERGENCE: Final = "history-start-divergence"
REFUSE_ONCE: Final = "refuse-once"
NO_ELR: Final = "no-elr"

LEGACY: Final = {
    TRUNCATE_TO_HW: "truncate to the local HW on becoming follower (KAFKA-1211, pre KIP-101)",
    ACK_BEFORE_FSYNC: "count appended data as persisted before fsync (ZOOKEEPER-4646)",
    DROP_HW_CHECKPOINT: "forget the HW of partitions without an active role (KAFKA-1647); "
    "masked alone, shown with truncate-to-hw",
    NO_OFFSET_GATE: "serve ListOffsets without the KIP-207 gate",
    COUNT_LAG: "ISR lag by record count instead of time (pre KIP-16)",
    LATE_MAXIMAL_ISR: "count a proposed replica for the HW only once the ISR change is "
    "recorded (pre KIP-497)",
    RANK_BY_KNOWN_EPOCH: "after a lost status, rank logs by the epoch a broker knows from an "
    "assignment instead of restoring the status from the brokers",
    HISTORY_START_DIVERGENCE: "take a leader's 'my history begins here' for a divergence point "
    "and keep a log start learned from the leader in memory until the next retention pass",
    REFUSE_ONCE: "send a refused ISR proposal's refusal in one heartbeat answer only",
    NO_ELR: "keep no eligible leader replicas (pre KIP-966 ELR): only the ISR may lead",
}

COUNT_LAG_MAX_MESSAGES: Final = 20


def check_names(names: set[str] | frozenset[str]) -> frozenset[str]:
    unknown = sorted(set(names) - set(LEGACY))
    if unknown:
        raise ValueError(f"unknown legacy behaviour(s) {unknown}; known: {sorted(LEGACY)}")
    return frozenset(names)


# -- broker side -----------------------------------------------------------------------


class TruncatingFollower(Follower):
    def start(self) -> list[FollowerAction]:
        actions = self._truncate(min(self.high_watermark, self.persisted_log_end_offset))
        return actions + self._send_fetch()


class UngatedLeader(Leader):
    def client_high_watermark(self) -> int:
        return self.high_watermark


class LateMaximalIsrLeader(Leader):
    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr


class UngatedLateLeader(UngatedLeader, LateMaximalIsrLeader):
    pass


def _epoch_end_at_history_start(self: Leader, epoch: int) -> tuple[int, int]:
    return self.epochs.end_offset_for(epoch, self.log_end_offset)


def replica_class(legacy: frozenset[str]) -> type[Replica]:
    if not legacy & {TRUNCATE_TO_HW, NO_OFFSET_GATE, LATE_MAXIMAL_ISR, HISTORY_START_DIVERGENCE}:
        return Replica
    leader: type[Leader] = Leader
    if NO_OFFSET_GATE in legacy and LATE_MAXIMAL_ISR in legacy:
        leader = UngatedLateLeader
    elif NO_OFFSET_GATE in legacy:
        leader = UngatedLeader
    elif LATE_MAXIMAL_ISR in legacy:
        leader = LateMaximalIsrLeader
    if HISTORY_START_DIVERGENCE in legacy:
        leader = type("HistoryStartLeader", (leader,), {"_epoch_end": _epoch_end_at_history_start})
    follower = TruncatingFollower if TRUNCATE_TO_HW in legacy else Follower
    return type("LegacyReplica", (Replica,), {"leader_class": leader, "follower_class": follower})


class LegacyBrokerCore(BrokerCore):
    """The broker with the disk-related legacy behaviours; see the module docstring."""

    legacy: frozenset[str] = frozenset()

    def _after_append(self, host: Hosted) -> list[Effect]:
        effects = super()._after_append(host)
        if ACK_BEFORE_FSYNC in self.legacy and isinstance(host.replica.role, Leader):
            return effects + self._report_persisted(host, host.log.log_end_offset)
        return effects

    def _carry_out(self, host: Hosted, actions: Sequence[FollowerAction]) -> list[Effect]:
        effects = super()._carry_out(host, actions)
        role = host.replica.role
        if (
            ACK_BEFORE_FSYNC in self.legacy
            and isinstance(role, Follower)
            and role.persisted_log_end_offset < host.log.log_end_offset
        ):
            # After the fetch the append asked for, so the next one carries the claim.
            effects += self._report_persisted(host, host.log.log_end_offset)
        return effects

    def flush(self) -> list[Effect]:
        if ACK_BEFORE_FSYNC not in self.legacy:
            return super().flush()
        for _name, host in self._take_dirty():
            host.log.flush()
        return []

    def _checkpoint_taken_log_starts(self) -> list[Effect]:
        if HISTORY_START_DIVERGENCE in self.legacy:
            return []  # the next retention pass writes them
        return super()._checkpoint_taken_log_starts()

    def _checkpointed_partitions(self) -> list[str]:
        if DROP_HW_CHECKPOINT not in self.legacy:
            return super()._checkpointed_partitions()
        active = [
            n for n, h in self.partitions.items() if isinstance(h.replica.role, Leader | Follower)
        ]
        # Forget, as the 2014 code did, every partition not in an active role.
        for name in list(self.high_watermark_checkpoint.known):
            if name not in active:
                del self.high_watermark_checkpoint.known[name]
        return sorted(active)


# -- controller side -------------------------------------------------------------------


def count_lag(
    decision: Decision,
    name: str,
    heartbeats: dict[int, ReceivedHeartbeat],
) -> Decision:
    """Drop followers more than COUNT_LAG_MAX_MESSAGES behind the leader's reported end."""
    status = decision.status
    if status is None or status.leader is None:
        return decision
    got = heartbeats.get(status.leader)
    report = got.partition(name) if got else None
    if (
        report is None
        or report.role is not PartitionRole.LEADER
        or report.leader_epoch != status.leader_epoch
    ):
        return decision
    behind = [
        f.replica
        for f in report.followers
        if f.replica in status.isr
        and f.replica != status.leader
        and report.log_end_offset - f.log_end_offset > COUNT_LAG_MAX_MESSAGES
    ]
    if not behind:
        return decision
    isr = tuple(m for m in status.isr if m not in behind)
    new_status: PartitionStatus = replace_status(
        status,
        isr=isr,
        isr_broker_epochs={m: e for m, e in status.isr_broker_epochs.items() if m in isr},
        isr_storage_ids={m: e for m, e in status.isr_storage_ids.items() if m in isr},
        partition_epoch=status.partition_epoch + 1,
    )
    event = Event.warning(
        EventReason.ISR_SHRUNK,
        f"ISR {list(isr)} after removing {behind}: more than {COUNT_LAG_MAX_MESSAGES} "
        "records behind",
    )
    return replace(decision, status=new_status, material=True, events=(*decision.events, event))


def replace_status(status: PartitionStatus, **changes: object) -> PartitionStatus:
    return status.model_copy(update=changes)


def no_elr(decision: Decision, written: PartitionStatus | None) -> Decision:
    """The decision as a controller without eligible leader replicas makes it: the status
    it writes names none (nor does the assignment it hands out), so none is ever elected
    and none is restored. `written`: the status the decision was made from."""
    status = decision.status
    if status is None or not (
        status.eligible_leader_replicas or status.last_known_eligible_leader_replicas
    ):
        return decision
    stripped = replace_status(
        status,
        eligible_leader_replicas=(),
        eligible_leader_replica_storage_ids={},
        last_known_eligible_leader_replicas=(),
    )
    if stripped == written:
        return replace(decision, status=None, material=False)
    return replace(decision, status=stripped)


def rank_by_known_epoch(heartbeat: BrokerHeartbeat) -> BrokerHeartbeat:
    """The heartbeat as a controller before storage-state reports read it: no held
    assignment, and each log ranked by the newest epoch its broker knows."""
    reports = tuple(
        r.model_copy(update={"assignment": None, "last_epoch": r.leader_epoch})
        for r in heartbeat.partitions
    )
    return heartbeat.model_copy(update={"partitions": reports})
