"""A replica's log modelled in memory for the replication tests: one record per batch."""

from __future__ import annotations

from dataclasses import dataclass, field

from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.replication.messages import Batch


@dataclass
class MemLog:
    records: list[tuple[int, str]] = field(default_factory=list)
    persisted: int = 0
    epochs: EpochHistory = field(default_factory=EpochHistory)

    @property
    def end(self) -> int:
        return len(self.records)

    def values(self) -> list[str]:
        return [v for _, v in self.records]

    def append(self, epoch: int, value: str) -> Batch:
        batch = Batch(self.end, self.end, epoch, value)
        self.append_batch(batch)
        return batch

    def append_batch(self, batch: Batch) -> None:
        assert batch.base_offset == self.end, (batch, self.end)
        assert isinstance(batch.payload, str)
        self.epochs.assign(batch.leader_epoch, batch.base_offset)
        self.records.append((batch.leader_epoch, batch.payload))

    def flush(self) -> int:
        self.persisted = self.end
        return self.persisted

    def truncate_to(self, offset: int) -> None:
        del self.records[offset:]
        self.persisted = min(self.persisted, offset)
        self.epochs.truncate_from_end(offset)

    def crash(self) -> None:
        """Power loss: what was not fsynced is gone."""
        self.truncate_to(self.persisted)

    def read(self, start: int, end: int) -> tuple[Batch, ...]:
        return tuple(
            Batch(o, o, self.records[o][0], self.records[o][1])
            for o in range(start, min(end, self.end))
        )
