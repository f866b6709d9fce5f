"""Leader epoch history of one replica's log: which epoch started at which offset.

Pure data structure (no I/O). The log keeps it in step with its batches and
persists it as the `leader-epoch-checkpoint`; replication asks it for the end
offset of an epoch to find where two replicas' logs diverge (KIP-101, KIP-279).
An empty history's epoch is `NO_EPOCH`; an offset it does not know is
`UNDEFINED_OFFSET`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.replica import UNDEFINED_OFFSET

UNDEFINED: Final = NO_EPOCH
"""KIP-279's undefined epoch and offset in one name, as replication compares answers with
it: `NO_EPOCH` and `UNDEFINED_OFFSET` are both -1."""
assert UNDEFINED == UNDEFINED_OFFSET


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochHistory:
    """Entries with strictly increasing epochs and non-decreasing start offsets."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for e in entries:
            self.assign(e.epoch, e.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else NO_EPOCH

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochHistory) and self._entries == other._entries

    def __repr__(self) -> str:
        return f"EpochHistory({[(e.epoch, e.start_offset) for e in self._entries]})"

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether anything changed.

        Re-assigning the latest epoch is a no-op. An epoch below the latest is a
        caller bug (epochs only grow). Entries starting at or after `start_offset`
        belong to a history that was truncated away and are dropped first.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        if self._entries and epoch == self._entries[-1].epoch:
            return False
        if self._entries and epoch < self._entries[-1].epoch:
            raise ValueError(f"epoch {epoch} is older than latest epoch {self.latest_epoch}")
        while self._entries and self._entries[-1].start_offset >= start_offset:
            self._entries.pop()
        if self._entries and epoch <= self._entries[-1].epoch:
            raise ValueError(f"epoch {epoch} does not follow epoch {self.latest_epoch}")
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def start_offset_of(self, epoch: int) -> int:
        for e in self._entries:
            if e.epoch == epoch:
                return e.start_offset
        return UNDEFINED_OFFSET

    def epoch_for_offset(self, offset: int) -> int:
        entries = self._entries
        if entries and entries[-1].start_offset <= offset:
            return entries[-1].epoch  # the latest epoch: what a heartbeat's reports ask
        found = NO_EPOCH
        for e in entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, offset where that epoch ends) as in KIP-279.

        For the latest epoch the end is the log end. For an older epoch it is the
        start offset of the next larger epoch. Below the first epoch it is (`epoch`,
        the first epoch's start), as Kafka's LeaderEpochFileCache answers: the entries
        below were removed with the log's head (retention, or a log that started over
        at the leader's log start), and what this log holds begins there, so a
        follower keeps what it has below it instead of truncating to offset 0. For an
        empty history they are NO_EPOCH and UNDEFINED_OFFSET.
        """
        if not self._entries:
            return NO_EPOCH, UNDEFINED_OFFSET
        if epoch < self._entries[0].epoch:
            return epoch, self._entries[0].start_offset
        if epoch >= self._entries[-1].epoch:
            return self._entries[-1].epoch, log_end_offset
        for i, e in enumerate(self._entries):
            if e.epoch > epoch:
                return self._entries[i - 1].epoch, e.start_offset
        raise AssertionError("unreachable")

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries that start at or after `end_offset` (the log was cut there)."""
        before = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        return len(self._entries) != before

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: keep the epoch covering it, clamped."""
        changed = False
        while len(self._entries) > 1 and self._entries[1].start_offset <= start_offset:
            self._entries.pop(0)
            changed = True
        if self._entries and self._entries[0].start_offset < start_offset:
            self._entries[0] = EpochEntry(self._entries[0].epoch, start_offset)
            changed = True
        return changed
