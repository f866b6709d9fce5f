"""Which partitions the next retention pass looks at: those that may have something to delete.

A pass decided every hosted partition, so the cost of an idle broker's passes grew
with its partition count. `RetentionCandidates` keeps only the partitions whose
decision (`retention.decide_retention`) may have become something since it was
last nothing. The shell tells it:

- `hosted(name)` when a partition is hosted (it is a candidate at once), and
  `forget(name)` when it no longer is;
- `touch(name)` after anything that may free segments: an append to a log with a
  closed segment (a roll, or more bytes for `retention.bytes`), a moved log start,
  new retention settings, a log truncated, started over or reopened;
- after a pass decided nothing for a partition, `wait(name, until_ms)` with when its
  oldest closed segment's time runs out (`expiry_ms`), or `touch(name)` again while
  a closed segment is above its high watermark (its high watermark may rise at any
  time, and only a rise can make that segment go);

and `due(now_ms)` answers a pass's candidates, in the order the partitions were
hosted (the order of the full pass), and takes them out.

Why nothing is missed: between two looks at an untouched partition, its segments,
log start and limits are those of the look that decided nothing, with every closed
segment below the high watermark then. A high watermark lower since only leaves
fewer segments to decide on, and the decision never deletes more from fewer; so
only time can change it, at `expiry_ms`. A look too many is harmless (the same
pure decision); a look missed is not: when in doubt, touch.

Bounded: one wait per partition is in force; superseded ones leave the heap when
they come up, or all at once when they outnumber the ones in force.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Final

from epochlog_broker.log.retention import RetentionLimits, SegmentFacts

_SLACK: Final = 64
"""Superseded waits kept beyond twice the ones in force before the heap is rebuilt."""


def expiry_ms(segments: Sequence[SegmentFacts], limits: RetentionLimits) -> int | None:
    """When time retention may first delete from a log whose closed segments are all below
    its high watermark: the first moment past its oldest closed segment's largest
    timestamp plus `retention_ms` (None: never by time)."""
    if limits.retention_ms < 0 or len(segments) < 2:
        return None
    return segments[0].max_timestamp + limits.retention_ms + 1


class RetentionCandidates:
    def __init__(self) -> None:
        self._order: dict[str, int] = {}
        """Hosted partitions and when each was hosted: a pass looks in this order."""
        self._next = 0
        self._touched: set[str] = set()
        self._waits: dict[str, int] = {}
        """The wait in force for each partition that has one."""
        self._heap: list[tuple[int, str]] = []

    def hosted(self, name: str) -> None:
        self._order[name] = self._next
        self._next += 1
        self._touched.add(name)
        self._waits.pop(name, None)

    def forget(self, name: str) -> None:
        self._order.pop(name, None)
        self._touched.discard(name)
        self._waits.pop(name, None)

    def touch(self, name: str) -> None:
        if name in self._order:
            self._touched.add(name)

    def wait(self, name: str, until_ms: int | None) -> None:
        """`name` had nothing to delete: a candidate again at `until_ms` (None: only when
        touched)."""
        if until_ms is None:
            self._waits.pop(name, None)
            return
        if self._waits.get(name) == until_ms or name not in self._order:
            return
        self._waits[name] = until_ms
        heapq.heappush(self._heap, (until_ms, name))
        if len(self._heap) > 2 * len(self._waits) + _SLACK:
            self._heap = [(at, n) for n, at in self._waits.items()]
            heapq.heapify(self._heap)

    def due(self, now_ms: int) -> list[str]:
        """The candidates of a pass at `now_ms`, taken out, in hosting order."""
        out, self._touched = self._touched, set()
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            at, name = heapq.heappop(heap)
            if self._waits.get(name) == at:
                del self._waits[name]
                out.add(name)
        return sorted(out, key=self._order.__getitem__)
