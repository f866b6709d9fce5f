"""Idempotent producers: which batches each producer id has written, to drop retried ones.

A producer that sets a producer id, producer epoch and base sequence on its
batches can retry a batch whose answer it never got: if the batch is already
in the log, `ProducerStates.check` returns where it is instead of letting it
be written twice. Rules (those of Kafka's idempotent producer):

- a producer id not seen before starts at whatever sequence it sends;
- within an epoch, a batch must start at the last batch's last sequence + 1;
  a batch equal to one of the last `KEEP` batches is a duplicate; anything else
  is OUT_OF_ORDER_SEQUENCE (a batch in between was lost);
- a higher producer epoch starts afresh; a lower one is PRODUCER_FENCED.

Every replica keeps this state for every batch it appends (as leader or
follower), so a follower that becomes leader knows the producers already. A
replica rebuilds it from the batch headers of its log when it opens the log
and after a truncation. Pure bookkeeping: no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from epochlog.protocol.errors import OutOfOrderSequenceError, ProducerFencedError

KEEP: Final = 5
NO_PRODUCER: Final = -1


@dataclass(frozen=True, slots=True)
class WrittenBatch:
    base_sequence: int
    record_count: int
    base_offset: int
    leader_epoch: int

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.record_count - 1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[WrittenBatch] = field(default_factory=lambda: deque(maxlen=KEEP))


@dataclass
class ProducerStates:
    producers: dict[int, _Producer] = field(default_factory=dict)

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, record_count: int
    ) -> WrittenBatch | None:
        """The batch already written if this one repeats it; None if it may be appended."""
        if producer_id == NO_PRODUCER:
            return None
        known = self.producers.get(producer_id)
        if known is None or producer_epoch > known.epoch or not known.batches:
            return None
        if producer_epoch < known.epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} is older than {known.epoch}",
                producerEpoch=known.epoch,
            )
        for b in known.batches:
            if b.base_sequence == base_sequence and b.record_count == record_count:
                return b
        expected = known.batches[-1].last_sequence + 1
        if base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} sent sequence {base_sequence}, expected {expected}",
                expectedSequence=expected,
            )
        return None

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        record_count: int,
        base_offset: int,
        leader_epoch: int,
    ) -> None:
        if producer_id == NO_PRODUCER or base_sequence < 0:
            return
        known = self.producers.get(producer_id)
        if known is None or producer_epoch > known.epoch:
            known = self.producers[producer_id] = _Producer(producer_epoch)
        elif producer_epoch < known.epoch:
            return
        known.batches.append(WrittenBatch(base_sequence, record_count, base_offset, leader_epoch))

    @classmethod
    def rebuild(cls, headers: Iterable[tuple[int, int, int, int, int, int]]) -> ProducerStates:
        """From (producerId, producerEpoch, baseSequence, count, baseOffset, leaderEpoch)
        of every batch in log order."""
        states = cls()
        for pid, pepoch, seq, count, base, epoch in headers:
            states.record(pid, pepoch, seq, count, base, epoch)
        return states
