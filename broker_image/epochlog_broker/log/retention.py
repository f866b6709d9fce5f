"""Which closed segments retention deletes: a pure decision, as Kafka's log cleaner
deletion policy (`retention.ms`, `retention.bytes`, the log start offset breach).

Told: the segments of one log, oldest first (base offset, next offset, bytes, largest
timestamp), the log start offset, the replica's high watermark, the limits and the
time; answers how many segments from the oldest go and the log start offset after
them. The shell moves the log start, checkpoints it, then removes the files.

What it guarantees, whatever it is told:
- only a prefix of the segments goes, and never the last (active) one;
- never a segment holding an offset at or above the high watermark: retention never
  deletes what is not committed (Kafka's `highWatermark >= nextSegment.baseOffset`);
- the log start offset only moves up, and never past the high watermark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

UNLIMITED = -1
"""A retention limit that never deletes (Kafka's -1)."""


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What retention looks at in one segment."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int
    """The largest record timestamp in the segment (-1: no record)."""


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    """A partition's retention settings (`spec.retentionMs`, `spec.retentionBytes`)."""

    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = UNLIMITED


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """`segments` oldest segments go; the log then starts at `log_start_offset`."""

    segments: int
    log_start_offset: int
    reason: str
    """"time", "size", "log-start" (below a moved log start) or "" (nothing to do)."""


def _time_prefix(segments: Sequence[SegmentFacts], limits: RetentionLimits, now_ms: int) -> int:
    if limits.retention_ms < 0:
        return 0
    n = 0
    for seg in segments:
        if now_ms - seg.max_timestamp <= limits.retention_ms:
            break
        n += 1
    return n


def _size_prefix(segments: Sequence[SegmentFacts], total: int, limits: RetentionLimits) -> int:
    if limits.retention_bytes < 0:
        return 0
    excess = total - limits.retention_bytes
    n = 0
    for seg in segments:
        if excess - seg.size_bytes < 0:
            break
        excess -= seg.size_bytes
        n += 1
    return n


def _start_prefix(segments: Sequence[SegmentFacts], log_start_offset: int) -> int:
    n = 0
    for seg in segments:
        if seg.next_offset > log_start_offset:
            break
        n += 1
    return n


def decide_retention(
    segments: Sequence[SegmentFacts],
    *,
    log_start_offset: int,
    high_watermark: int,
    limits: RetentionLimits,
    now_ms: int,
) -> RetentionDecision:
    """The segments retention deletes now (see the module docstring)."""
    # Closed segments wholly below the high watermark are the only candidates.
    closed = [s for s in segments[:-1]]
    candidates = 0
    for seg in closed:
        if seg.next_offset > high_watermark:
            break
        candidates += 1
    eligible = closed[:candidates]
    total = sum(s.size_bytes for s in segments)
    by_reason = (
        ("time", _time_prefix(eligible, limits, now_ms)),
        ("size", _size_prefix(eligible, total, limits)),
        ("log-start", _start_prefix(eligible, log_start_offset)),
    )
    reason, n = max(by_reason, key=lambda item: item[1])
    if n == 0:
        return RetentionDecision(0, log_start_offset, "")
    return RetentionDecision(n, max(log_start_offset, segments[n].base_offset), reason)


__all__ = [
    "UNLIMITED",
    "RetentionDecision",
    "RetentionLimits",
    "SegmentFacts",
    "decide_retention",
]
