"""KIP-320 for readers: whether the records a reader consumed are still the leader's.

Offsets alone cannot tell: after an unclean leader election the new leader's
log may hold other records at the offsets a reader already read, and grow past
the reader's position again. Leader epochs can: every record carries the epoch
of the leader that appended it, and a log holds a record of epoch E at offset O
only if the leader of E appended it there. So a reader remembers the epochs of
what it consumed (`ConsumedEpochs`), and after a leader change asks the leader
where those epochs end in its log (`GET /v1/partitions/{name}/epochs/{epoch}`,
Kafka's OffsetsForLeaderEpoch; the answer is an `EpochEnd`). This module is the
rule that judges the answers, pure: `first_question` says which epoch to ask
about, `judge` what an answer means: the reader's records are the leader's
(`Verdict(None)`), they are not from `divergence_offset` on (`Verdict(offset)`:
Kafka's LogTruncationException's divergent offset), or ask again (`Ask`).

The rule, for the reader's records below a bound (at first its position),
whose last epoch is E, first consumed at offset s:
- The leader holds E, ending at end: the records agree below end (same epoch,
  same offset, same record); from min(end, bound) on they do not.
- The leader holds no E; its largest epoch below is E', ending at end': every
  record the reader consumed in an epoch above E' is not the leader's, nor is
  any at or past end'. The bound drops to min(end', the first offset the reader
  consumed above E') and the question is asked again about the epoch of the
  record below it (at most once per epoch the reader remembers), as a
  follower's divergence search goes on until the logs agree (KIP-279).
- The leader's history begins above E, at offset X (its records below X were
  deleted): the reader's records at or past X are not the leader's; below X
  there is nothing to compare.

`ConsumedEpochs` keeps at most `MAX_EPOCHS` epochs (the newest); records below the
oldest one kept are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

from epochlog.protocol.epochs import NO_EPOCH

UNDEFINED_OFFSET: Final = -1
"""An end offset the leader does not know (KIP-279's UNDEFINED_EPOCH_OFFSET)."""

MAX_EPOCHS: Final = 64
"""Epochs a reader remembers: a leader change adds one."""


class EpochStart(NamedTuple):
    """The first offset a reader consumed in leader epoch `epoch`."""

    epoch: int
    offset: int


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """The leader's answer about an epoch: the largest epoch at or below it that the
    leader's log holds (NO_EPOCH: its history begins above it) and where that epoch ends
    (with NO_EPOCH: where the history begins; UNDEFINED_OFFSET: it has none), and the
    leader epoch that answered."""

    epoch: int
    end_offset: int
    leader_epoch: int


class ConsumedEpochs:
    """The leader epochs of the records a reader consumed, oldest first."""

    def __init__(self, entries: tuple[EpochStart, ...] = ()) -> None:
        self._entries: list[EpochStart] = list(entries)
        self._end = entries[-1].offset + 1 if entries else 0
        """The offset past the last record consumed."""

    @property
    def entries(self) -> tuple[EpochStart, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ConsumedEpochs({self._entries})"

    @property
    def last_epoch(self) -> int:
        """The epoch of the last record consumed (NO_EPOCH: none)."""
        return self._entries[-1].epoch if self._entries else NO_EPOCH

    def consumed(self, epoch: int, offset: int) -> None:
        """The record at `offset`, of leader epoch `epoch`, was handed out (records come in
        offset order). A record of an older epoch than the last one means the log changed
        under the reader without it being told: the history starts again from it."""
        if epoch < 0:
            return
        if offset < self._end:
            self.truncate(offset)
        self._end = offset + 1
        if self._entries and epoch < self._entries[-1].epoch:
            self._entries = [e for e in self._entries if e.epoch < epoch]
        if not self._entries or epoch > self._entries[-1].epoch:
            self._entries.append(EpochStart(epoch, offset))
            del self._entries[:-MAX_EPOCHS]

    def truncate(self, offset: int) -> None:
        """Forget what was consumed at or past `offset` (the reader moved back there)."""
        while self._entries and self._entries[-1].offset >= offset:
            self._entries.pop()
        self._end = min(self._end, offset)

    def clear(self) -> None:
        self._entries.clear()
        self._end = 0

    def epoch_before(self, offset: int) -> EpochStart | None:
        """The epoch of the record the reader consumed just below `offset` (None: none)."""
        for entry in reversed(self._entries):
            if entry.offset < offset:
                return entry
        return None

    def first_above(self, epoch: int) -> EpochStart | None:
        """The first epoch the reader consumed that is newer than `epoch`."""
        return next((e for e in self._entries if e.epoch > epoch), None)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The end of a validation: `divergence_offset` is None when every record the reader
    consumed below its position is the leader's, else the first offset from which they
    are not (the records it read there were truncated under it)."""

    divergence_offset: int | None


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the leader where `epoch` ends; the records at or past `bound` already differ."""

    epoch: int
    bound: int


def first_question(consumed: ConsumedEpochs, position: int) -> Ask | Verdict:
    """What to ask to validate `position`: about the epoch of the record below it."""
    return _ask_below(consumed, position, position)


def _ask_below(consumed: ConsumedEpochs, bound: int, position: int) -> Ask | Verdict:
    entry = consumed.epoch_before(bound)
    if entry is None:
        # Nothing the reader remembers lies below the bound: nothing more to compare.
        return _verdict(bound, position)
    return Ask(entry.epoch, bound)


def _verdict(offset: int, position: int) -> Verdict:
    return Verdict(offset if offset < position else None)


def judge(consumed: ConsumedEpochs, position: int, asked: Ask, answer: EpochEnd) -> Ask | Verdict:
    """What the leader's `answer` to `asked` means for a reader at `position`."""
    entry = consumed.epoch_before(asked.bound)
    if entry is None or entry.epoch != asked.epoch:
        raise ValueError(f"{asked} does not follow from what was consumed: {consumed}")
    bound = asked.bound
    if answer.epoch == asked.epoch:
        return _verdict(min(answer.end_offset, bound), position)
    if answer.epoch == NO_EPOCH or answer.epoch > asked.epoch:
        # The leader's history begins above every epoch at or below the one asked about
        # (or it answered about another epoch): it vouches for none of these records;
        # below where its history begins there is nothing to compare.
        start = answer.end_offset
        first = consumed.entries[0].offset if len(consumed) else bound
        if start == UNDEFINED_OFFSET or answer.epoch > asked.epoch:
            return _verdict(min(max(first, 0), bound), position)
        return _verdict(min(max(start, first), bound), position)
    # The leader holds no `asked.epoch`: the reader's records of every epoch above
    # answer.epoch differ, and so does anything at or past where answer.epoch ends.
    newer = consumed.first_above(answer.epoch)
    assert newer is not None  # the asked epoch itself is newer
    bound = min(bound, answer.end_offset, newer.offset)
    return _ask_below(consumed, bound, position)
