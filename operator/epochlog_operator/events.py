"""Kubernetes Events the decisions ask to post on a Partition (what `kubectl describe` shows)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(enum.StrEnum):
    LEADER_ELECTED = "LeaderElected"
    ISR_SHRUNK = "IsrShrunk"
    ISR_EXPANDED = "IsrExpanded"
    BROKER_FENCED = "BrokerFenced"
    PARTITION_OFFLINE = "PartitionOffline"
    UNCLEAN_LEADER_ELECTION = "UncleanLeaderElection"
    UNCLEAN_RECOVERY = "UncleanRecovery"
    """No ISR member nor eligible leader replica can come back with its data: the most
    up-to-date replica was elected although uncleanLeaderElection is off (KIP-966's unclean
    recovery); the message names the offsets that may be lost."""
    REPLICA_OFFLINE = "ReplicaOffline"
    STATUS_RESTORED = "StatusRestored"
    NAME_CONFLICT = "NameConflict"
    PREFERRED_LEADER_ELECTED = "PreferredLeaderElected"
    """Leadership moved back to the preferred replica (`preferred`): a clean election."""
    REASSIGNMENT_STARTED = "ReassignmentStarted"
    REASSIGNMENT_COMPLETED = "ReassignmentCompleted"


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    reason: EventReason
    message: str

    @classmethod
    def normal(cls, reason: EventReason, message: str) -> Event:
        return cls(EventType.NORMAL, reason, message)

    @classmethod
    def warning(cls, reason: EventReason, message: str) -> Event:
        return cls(EventType.WARNING, reason, message)
