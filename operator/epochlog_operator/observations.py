"""What the latest broker heartbeats say about one partition, on the controller's clock.

The controller keeps the latest heartbeat of every broker, stamped with the
controller time it arrived (`ReceivedHeartbeat`). `observe` picks out one
partition's reports. A report counts only if it came from the broker's current
process (its brokerEpoch is the one liveness knows); the highest leaderEpoch
and partitionEpoch are taken from every heartbeat, because an epoch a dead
process once held must never be handed out again. For the same reason the
assignment with the highest partitionEpoch that any broker holds (`held`) is
taken from every heartbeat: it is the controller's own last record, kept by the
brokers, from which a lost or outdated status is restored.

Storage ids and storage errors are read from the current processes only: a
storageId names the data directory a process runs on, and a broker that does
not host the partition yet (a wiped disk) still says which directory it has.

Brokers stamp times with their own clock. A broker time is read relative to the
heartbeat's `timeMs` and placed that far before the heartbeat's arrival, so the
controller never compares two clocks; network delay only makes a follower look
caught up a little later than it was, which errs on the side of keeping it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from epochlog.protocol.heartbeat import (
    BrokerHeartbeat,
    HeldAssignment,
    PartitionReport,
    PartitionRole,
)
from epochlog_operator.liveness import LivenessView


@dataclass(frozen=True, slots=True)
class ReceivedHeartbeat:
    """A broker's latest heartbeat and every partition report of its report session.

    An incremental heartbeat carries only the reports that changed; the others are
    unchanged, so every report in `reports` is current as of `heartbeat`."""

    heartbeat: BrokerHeartbeat
    received_ms: int
    reports: Mapping[str, PartitionReport] | None = None
    """Partition name -> report (None: the ones `heartbeat` carries, a full heartbeat)."""

    def __post_init__(self) -> None:
        if self.reports is None:
            object.__setattr__(self, "reports", {p.name: p for p in self.heartbeat.partitions})

    def partition(self, name: str) -> PartitionReport | None:
        assert self.reports is not None
        return self.reports.get(name)

    def all_reports(self) -> Mapping[str, PartitionReport]:
        assert self.reports is not None
        return self.reports

    def to_controller_time(self, broker_time_ms: int) -> int:
        age = max(0, self.heartbeat.time_ms - broker_time_ms)
        return max(0, self.received_ms - age)


@dataclass(frozen=True, slots=True)
class PartitionObservation:
    name: str
    reports: Mapping[int, PartitionReport]
    """Broker id -> its report of this partition, from its current process only."""
    received: Mapping[int, ReceivedHeartbeat]
    max_leader_epoch: int
    max_partition_epoch: int
    held: HeldAssignment | None = None
    """The assignment with the highest partitionEpoch any broker reports holding."""
    storage_ids: Mapping[int, str] = field(default_factory=dict)
    """Broker id -> storageId of its current process (brokers that report one)."""
    heard: frozenset[int] = frozenset()
    """Brokers this controller has a heartbeat of, from any of their processes."""
    handed: HeldAssignment | None = None
    """The newest assignment this controller process handed out for the partition."""

    def storage_error(self, broker_id: int) -> str | None:
        report = self.reports.get(broker_id)
        return None if report is None else report.storage_error

    def storage_errors(self) -> dict[int, str]:
        return {b: r.storage_error for b, r in self.reports.items() if r.storage_error}

    def log_end_offset(self, broker_id: int) -> int | None:
        report = self.reports.get(broker_id)
        return None if report is None else report.log_end_offset

    def leader_report(self, leader: int, leader_epoch: int) -> PartitionReport | None:
        """The leader's report, if it is leading exactly `leader_epoch`."""
        report = self.reports.get(leader)
        if report is None or report.role is not PartitionRole.LEADER:
            return None
        return report if report.leader_epoch == leader_epoch else None

    def caught_up_times(self, leader: int, report: PartitionReport) -> dict[int, int]:
        """Followers' lastCaughtUpTime from the leader's report, on the controller's clock."""
        received = self.received[leader]
        out = {}
        for f in report.followers:
            if f.caught_up:
                # Caught up as of the leader's latest heartbeat, which left the report as
                # it was or carried it.
                out[f.replica] = received.received_ms
            elif f.last_caught_up_time is not None:
                out[f.replica] = received.to_controller_time(f.last_caught_up_time)
        return out


def observe(
    name: str,
    heartbeats: Mapping[int, ReceivedHeartbeat],
    liveness: LivenessView,
    floor: tuple[int, int] = (0, 0),
    handed: HeldAssignment | None = None,
    recorded: HeldAssignment | None = None,
) -> PartitionObservation:
    """`floor`: (leaderEpoch, partitionEpoch) this controller already published for the
    name, counted like a report: a re-created resource goes on above it. `handed`: the
    newest assignment this controller handed out for it, counted as held (brokers
    report it a heartbeat later). `recorded`: the assignment of the newest status with an
    ISR this controller read or wrote for it, counted as held too: the brokers that held
    it may have lost their disks."""
    reports: dict[int, PartitionReport] = {}
    received: dict[int, ReceivedHeartbeat] = {}
    storage_ids: dict[int, str] = {}
    max_leader_epoch, max_partition_epoch = floor
    held: HeldAssignment | None = handed
    if recorded is not None and recorded.isr and (held is None or _newer(recorded, held)):
        held = recorded
    for got in heartbeats.values():
        hb = got.heartbeat
        current = liveness.broker_epoch(hb.broker_id) == hb.broker_epoch
        if current and hb.storage_id is not None:
            storage_ids[hb.broker_id] = hb.storage_id
        report = got.partition(name)
        if report is None:
            continue
        max_leader_epoch = max(max_leader_epoch, report.leader_epoch)
        max_partition_epoch = max(max_partition_epoch, report.partition_epoch)
        a = report.assignment
        if a is not None:
            max_leader_epoch = max(max_leader_epoch, a.leader_epoch)
            max_partition_epoch = max(max_partition_epoch, a.partition_epoch)
            if a.isr and (held is None or _newer(a, held)):
                held = a
        if current:
            reports[hb.broker_id] = report
            received[hb.broker_id] = got
    return PartitionObservation(
        name,
        reports,
        received,
        max_leader_epoch,
        max_partition_epoch,
        held,
        storage_ids,
        frozenset(got.heartbeat.broker_id for got in heartbeats.values()),
        handed,
    )


def _newer(a: HeldAssignment, b: HeldAssignment) -> bool:
    return (a.partition_epoch, a.leader_epoch) > (b.partition_epoch, b.leader_epoch)
