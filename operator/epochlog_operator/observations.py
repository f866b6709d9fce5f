"""What the latest broker heartbeats say about one partition, on the controller's clock.

The controller keeps the latest heartbeat of every broker, stamped with the
controller time it arrived (`ReceivedHeartbeat`). `observe` picks out one
partition's reports. A report counts only if it came from the broker's current
process (its brokerEpoch is the one liveness knows); the highest leaderEpoch
and partitionEpoch are taken from every heartbeat, because an epoch a dead
process once held must never be handed out again.

Brokers stamp times with their own clock. A broker time is read relative to the
heartbeat's `timeMs` and placed that far before the heartbeat's arrival, so the
controller never compares two clocks; network delay only makes a follower look
caught up a little later than it was, which errs on the side of keeping it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from epochlog.heartbeat import BrokerHeartbeat, PartitionReport, PartitionRole
from epochlog_operator.liveness import LivenessView


@dataclass(frozen=True, slots=True)
class ReceivedHeartbeat:
    heartbeat: BrokerHeartbeat
    received_ms: int

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
        return {
            f.replica: received.to_controller_time(f.last_caught_up_time)
            for f in report.followers
            if f.last_caught_up_time is not None
        }


def observe(
    name: str, heartbeats: Mapping[int, ReceivedHeartbeat], liveness: LivenessView
) -> PartitionObservation:
    reports: dict[int, PartitionReport] = {}
    received: dict[int, ReceivedHeartbeat] = {}
    max_leader_epoch = 0
    max_partition_epoch = 0
    for got in heartbeats.values():
        hb = got.heartbeat
        report = hb.partition(name)
        if report is None:
            continue
        max_leader_epoch = max(max_leader_epoch, report.leader_epoch)
        max_partition_epoch = max(max_partition_epoch, report.partition_epoch)
        if liveness.broker_epoch(hb.broker_id) == hb.broker_epoch:
            reports[hb.broker_id] = report
            received[hb.broker_id] = got
    return PartitionObservation(name, reports, received, max_leader_epoch, max_partition_epoch)
