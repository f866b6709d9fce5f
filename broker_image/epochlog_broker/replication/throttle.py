"""The reassignment throttle: bytes per second a leader serves to replicas being added.

Kafka's leader.replication.throttled.rate for reassignments: a replica that a
reassignment adds (`PartitionAssignment.addingReplicas`) copies the whole log
while the partition serves its clients, so its catch-up reads share one byte
budget per broker. A token bucket: `available` says how many bytes the next
read of a throttled partition may take (at least one batch always goes, so the
bucket may run into debt, which later reads pay off), `spend` records what was
read. Reads of followers already in place are never throttled.

Pure: the caller passes the time in ms.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ByteRate:
    bytes_per_s: int
    """0: no throttle."""
    burst_s: float = 1.0
    """How many seconds of the rate an idle bucket holds."""
    _tokens: float = 0.0
    _at_ms: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.bytes_per_s <= 0

    def available(self, now_ms: int) -> int:
        """Bytes a throttled read may take now (<= 0: none until the bucket refills)."""
        if self.unlimited:
            return 1 << 62
        self._refill(now_ms)
        return int(self._tokens)

    def spend(self, n: int, now_ms: int) -> None:
        if self.unlimited:
            return
        self._refill(now_ms)
        self._tokens -= n

    def _refill(self, now_ms: int) -> None:
        cap = self.bytes_per_s * self.burst_s
        if self._at_ms is None:
            self._tokens, self._at_ms = cap, now_ms
            return
        elapsed = max(0, now_ms - self._at_ms)
        self._tokens = min(cap, self._tokens + elapsed * self.bytes_per_s / 1000)
        self._at_ms = max(self._at_ms, now_ms)
