"""How long records have waited on a leader for a high watermark that does not advance.

No I/O and no clock: the shell passes the time in (seconds, monotonic) and the
partition's highWatermark and logEndOffset as this broker leads it.

`HighWatermarkWaits` keeps only the partitions a leader holds records above the
highWatermark of, each with the time the highWatermark last advanced or records
began to wait above it, whichever is later. On an idle broker it is empty, so
what the metrics ask of it costs nothing however many partitions the broker
leads; under load it holds the partitions being written to.

Protocol with the shell:
- `observe(name, position, now_s)` after an append to a partition this broker
  leads and whenever its highWatermark moved; `position` is (highWatermark,
  logEndOffset) while this broker leads it, None otherwise.
- `oldest(position_of, now_s)` at scrape time: each kept partition is observed
  again with `position_of(name)` (which catches a move or a lost leadership the
  shell did not report), and the answer is the longest wait and how many
  partitions wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Position = tuple[int, int]
"""(highWatermark, logEndOffset) of a partition this broker leads."""


@dataclass(frozen=True, slots=True)
class _Wait:
    since_s: float
    high_watermark: int


class HighWatermarkWaits:
    def __init__(self) -> None:
        self._waits: dict[str, _Wait] = {}

    def observe(self, name: str, position: Position | None, now_s: float) -> None:
        if position is None or position[1] <= position[0]:
            self._waits.pop(name, None)
            return
        high_watermark = position[0]
        wait = self._waits.get(name)
        if wait is None or wait.high_watermark != high_watermark:
            self._waits[name] = _Wait(now_s, high_watermark)

    def oldest(
        self, position_of: Callable[[str], Position | None], now_s: float
    ) -> tuple[float, int]:
        """(the longest time records have waited for the highWatermark to advance, in
        seconds, 0 when none wait; the number of partitions where records wait)."""
        kept: dict[str, _Wait] = {}
        for name, wait in self._waits.items():
            position = position_of(name)
            if position is None or position[1] <= position[0]:
                continue
            kept[name] = wait if position[0] == wait.high_watermark else _Wait(now_s, position[0])
        # A new dict: one emptied by removals keeps its size, and going over it would cost
        # as much as at its busiest.
        self._waits = kept
        longest = max((now_s - w.since_s for w in self._waits.values()), default=0.0)
        return max(0.0, longest), len(self._waits)
