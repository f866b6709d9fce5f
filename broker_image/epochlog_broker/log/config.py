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

    def __post_init__(self) -> None:
        if self.max_batch_bytes <= 0 or self.index_interval_bytes <= 0:
            raise ValueError("max_batch_bytes and index_interval_bytes must be positive")
        if self.segment_bytes < self.max_batch_bytes:
            raise ValueError("segment_bytes must be at least max_batch_bytes")
