"""Storage settings of one partition log."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 128 * MiB
    """A new segment starts once the active one would grow past this."""
    index_interval_bytes: int = 4096
    """Bytes of batches between two entries of the sparse offset index."""
    max_batch_bytes: int = 8 * MiB
    """Largest encoded batch accepted by append (RECORD_TOO_LARGE above it)."""
    segment_ms: int | None = None
    """A new segment starts once a batch's timestamp is this far past the active
    segment's first batch (Kafka's segment.ms; None: by size only)."""

    def __post_init__(self) -> None:
        if self.max_batch_bytes <= 0 or self.index_interval_bytes <= 0:
            raise ValueError("max_batch_bytes and index_interval_bytes must be positive")
        # A batch larger than a segment gets a segment of its own.
        if not 0 < self.segment_bytes < 1 << 31:
            raise ValueError("segment_bytes must be positive and below 2 GiB")
        if self.segment_ms is not None and self.segment_ms <= 0:
            raise ValueError("segment_ms must be positive")
