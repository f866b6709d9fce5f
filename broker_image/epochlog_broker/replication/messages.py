"""Values exchanged between replicas, and between the replication core and its shell.

Everything here is an immutable value. The shell turns requests and answers into
HTTP bodies and back; the core never sees bytes. Record batches travel as
`Batch`: the offsets and leader epoch the rules need plus an opaque `payload`
(the stored batch, checked when it was read or unframed) that the shell appends
verbatim.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from epochlog_broker.log.epochs import UNDEFINED

__all__ = [
    "UNDEFINED",
    "Acks",
    "Batch",
    "DivergingEpoch",
    "EpochEndOffset",
    "FetchData",
    "FetchRequest",
    "OffsetsForLeaderEpochRequest",
]


class Acks(enum.StrEnum):
    """When a produce request is answered (`acks=` of the HTTP API)."""

    ALL = "all"
    LEADER = "leader"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    payload: object = None

    def __post_init__(self) -> None:
        if self.base_offset < 0 or self.last_offset < self.base_offset or self.leader_epoch < 0:
            raise ValueError(f"invalid batch {self!r}")

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's fetch.

    `fetch_offset` is where the follower wants data from: its log end, which may
    hold records it has not fsynced yet (fetches are pipelined: the next one goes
    out while the last answer is being written). `persisted_log_end_offset` is
    what it has fsynced, at most `fetch_offset`; only that counts for the high
    watermark, the ISR and the follower's caught-up time, so nothing a follower
    could lose in a crash is ever counted as held (ZOOKEEPER-4646). None means
    the same as `fetch_offset`. `last_fetched_epoch` is the epoch of the record
    just below `fetch_offset` (UNDEFINED for an empty log); the leader uses it to
    detect a diverged log (KIP-320). `leader_epoch` is the follower's view of the
    current leader epoch and `broker_epoch` identifies the follower's process.
    `log_start_offset` is the follower's log start (Kafka's FetchRequest
    LogStartOffset of a replica fetch): the leader's low watermark, which a
    DeleteRecords answer waits for, is the smallest of them. None: not reported (a
    follower of a version before it, during a rolling upgrade).
    """

    replica_id: int
    broker_epoch: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int = UNDEFINED
    persisted_log_end_offset: int | None = None
    log_start_offset: int | None = None

    def __post_init__(self) -> None:
        if self.persisted_log_end_offset is None:
            object.__setattr__(self, "persisted_log_end_offset", self.fetch_offset)

    @property
    def persisted(self) -> int:
        """The follower's persisted log end."""
        p = self.persisted_log_end_offset
        return self.fetch_offset if p is None else p

    @property
    def flushing(self) -> bool:
        """The follower holds records past its persisted end: it has a position to
        report soon, so a leader must not hold this fetch waiting for data."""
        return self.persisted < self.fetch_offset


@dataclass(frozen=True, slots=True)
class FetchData:
    """Answer to a fetch whose log matches the leader's: batches from the fetch offset."""

    leader_epoch: int
    high_watermark: int
    batches: tuple[Batch, ...] = ()
    log_start_offset: int = 0
    """The leader's log start offset: followers move theirs up to it (as far as their
    own high watermark)."""


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """Answer to a fetch from a diverged log: no data, truncate first (KIP-320).

    `epoch` is the largest epoch of the leader not above the follower's last
    fetched epoch, and `end_offset` where that epoch ends in the leader's log
    (both UNDEFINED when the leader knows no such epoch).
    """

    leader_epoch: int
    high_watermark: int
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochRequest:
    """Where does `epoch` end in the leader's log? (KIP-101, KIP-279)."""

    replica_id: int
    leader_epoch: int
    epoch: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Largest epoch <= the requested one and where it ends; UNDEFINED if none."""

    epoch: int
    end_offset: int
