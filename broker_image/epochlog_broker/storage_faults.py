"""Storage faults of one replica: what took it offline and the rules for its way back.

No I/O and no clock: `BrokerCore` records a `StorageFault` when a log of a hosted
partition fails (an I/O error, a full disk, damaged data found at open or on a
read), and asks these rules when to try to bring it back and whether it may
discard damaged data to do so.

- A full disk or an I/O error is retried with a bounded exponential backoff
  (`retry_delay_ms`): the log is reopened (which recovers it as after a crash)
  and the directory must take a probe write before the replica counts as back.
- Damaged data (a segment that fails its checks where valid batches follow) is
  repaired automatically only when losing it cannot lose acknowledged records
  (`may_repair`): this replica is outside the ISR of its current assignment and
  the ISR without it still has minInsyncReplicas members, who hold every
  committed record. Otherwise it waits for an explicit `epochlog log repair`.
"""

from __future__ import annotations

import enum
import errno
from dataclasses import dataclass

from epochlog.protocol.errors import CorruptRecordError, EpochlogError
from epochlog.protocol.heartbeat import PartitionAssignment

RETRY_BASE_MS = 1_000
RETRY_MAX_MS = 10_000


class FaultKind(enum.Enum):
    DISK_FULL = "disk-full"
    IO_ERROR = "io-error"
    DAMAGED = "damaged"


@dataclass(slots=True)
class StorageFault:
    """Why a hosted replica is offline, and where its recovery stands."""

    kind: FaultKind
    reason: str
    """What failed, naming the file (and position, for damage) where known."""
    attempts: int = 0
    """Failed attempts to bring the replica back so far."""
    due_ms: int | None = None
    """When the next attempt is due (None: scheduled at the next look)."""
    durable_end: int | None = None
    """The log end last confirmed on disk before the fault (None: the log never opened).
    Data above it was never counted anywhere and may not be on disk even if a reopened
    log reads it back (a failed fsync can leave only the page cache holding it)."""

    @classmethod
    def of(cls, error: BaseException) -> StorageFault:
        reason = error.message if isinstance(error, EpochlogError) else str(error)
        return cls(kind_of(error), reason)

    def describe(self) -> str:
        return f"{self.kind.value}: {self.reason}"


def kind_of(error: BaseException) -> FaultKind:
    """Damage for a failed check of data on disk; a full disk or another I/O error by the
    errno of the OSError that caused it."""
    if isinstance(error, CorruptRecordError):
        return FaultKind.DAMAGED
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return FaultKind.DISK_FULL
        cause = cause.__cause__
    return FaultKind.IO_ERROR


def retry_delay_ms(attempts: int, base_ms: int = RETRY_BASE_MS, max_ms: int = RETRY_MAX_MS) -> int:
    """Wait before the next attempt after `attempts` failed ones: doubling, bounded."""
    return min(base_ms << min(attempts, 20), max_ms)


def may_repair(broker_id: int, assignment: PartitionAssignment | None) -> bool:
    """Damaged data of this replica may be discarded and fetched again from the leader.

    Only when the controller has already taken the replica out of the ISR and the ISR
    without it still has minInsyncReplicas members: they hold every committed record.
    """
    if assignment is None or assignment.leader in (None, broker_id):
        return False
    if broker_id in assignment.isr or broker_id not in assignment.replicas:
        return False
    return len(set(assignment.isr)) >= assignment.min_insync_replicas


def wants_attempt(
    fault: StorageFault, broker_id: int, assignment: PartitionAssignment | None, now_ms: int
) -> bool:
    """Whether to try to bring the replica back now (`assignment`: the newest one heard)."""
    if fault.kind is FaultKind.DAMAGED and not may_repair(broker_id, assignment):
        return False
    return fault.due_ms is not None and now_ms >= fault.due_ms
