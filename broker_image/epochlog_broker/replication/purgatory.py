"""Produce requests waiting for their records to be acknowledged, ordered by last offset.

Pure bookkeeping for `Leader`: a request leaves when an offset bound (the
leader's persisted log end for acks=leader, the high watermark for acks=all)
passes its last offset, when its deadline passes, or when leadership ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Waiting:
    request_id: int
    last_offset: int
    deadline_ms: int


@dataclass(slots=True)
class Purgatory:
    """Requests waiting for an offset bound to pass their last offset, oldest first."""

    waiting: list[Waiting] = field(default_factory=list)

    def add(self, w: Waiting) -> None:
        # Appends arrive in offset order, so appending keeps the list sorted.
        i = len(self.waiting)
        while i > 0 and self.waiting[i - 1].last_offset > w.last_offset:
            i -= 1
        self.waiting.insert(i, w)

    def pop_below(self, bound: int) -> list[Waiting]:
        n = 0
        while n < len(self.waiting) and self.waiting[n].last_offset < bound:
            n += 1
        done, self.waiting = self.waiting[:n], self.waiting[n:]
        return done

    def pop_expired(self, now_ms: int) -> list[Waiting]:
        expired = [w for w in self.waiting if w.deadline_ms <= now_ms]
        self.waiting = [w for w in self.waiting if w.deadline_ms > now_ms]
        return expired

    def pop_all(self) -> list[Waiting]:
        done, self.waiting = self.waiting, []
        return done
