"""Repair of a partition directory whose fsynced data is damaged, and a free-space probe.

`PartitionLog.open` refuses a log with damage before its last valid batch (bytes
that fail their checks with valid batches after them, or in a segment that is
not the last): dropping them silently could lose acknowledged records. A
replica whose data the other replicas hold can instead be repaired: everything
from the first damaged byte on is discarded, and the replica fetches it again
from the leader. Who may repair, and when, is decided above this layer (the
broker core for an automatic repair, `epochlog log repair` for an explicit one).

- `plan_repair` (read-only) says what a repair would discard: the damaged file
  and byte position, the offsets from there to the end of the log as far as
  valid batches show it, the later segments removed.
- `apply_repair` carries a plan out: later segments (with their index and redo
  files) removed, the damaged segment cut at the damage and its indexes removed,
  the leader-epoch-checkpoint and the clean-shutdown marker removed, so that the
  next open scans and rebuilds everything; the directory is synced last. A crash
  half-way leaves a directory that the next open recovers or a new plan repairs.
- `probe_space` writes, syncs and removes a scratch file: a log directory that
  refused a write (disk full, I/O error) is usable again once it passes.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from epochlog_broker.log.checkpoints import LEADER_EPOCH_CHECKPOINT, TMP_SUFFIX
from epochlog_broker.log.fs import File, FileSystem
from epochlog_broker.log.partition_log import CLEAN_SHUTDOWN
from epochlog_broker.log.segment import (
    INDEX_SUFFIX,
    REDO_SUFFIX,
    TIME_INDEX_SUFFIX,
    ScanFailure,
    find_valid_batch_after,
    iter_batches,
    parse_segment_name,
    segment_name,
)

PROBE_FILE = ".storage-probe" + TMP_SUFFIX
PROBE_BYTES = 64 * 1024
"""Room a probe asks for: a directory with less free space would fail the next appends."""


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What repairing one partition directory discards."""

    directory: str
    segment: str
    """File name of the segment cut at the damage."""
    position: int
    """Byte of `segment` from which everything is discarded."""
    reason: str
    first_offset: int
    """The first offset discarded (the log end after the repair)."""
    log_end_offset: int
    """The end of the log as far as valid batches after the damage show it."""
    removed_segments: tuple[str, ...]
    discarded_bytes: int

    @property
    def records(self) -> int:
        """Records discarded (offsets are dense, so this counts the damaged ones too)."""
        return max(0, self.log_end_offset - self.first_offset)

    def describe(self) -> str:
        offsets = (
            f"offsets {self.first_offset}..{self.log_end_offset - 1}"
            if self.records
            else f"no complete record (log end stays {self.first_offset})"
        )
        removed = f", removes {', '.join(self.removed_segments)}" if self.removed_segments else ""
        return (
            f"{posixpath.join(self.directory, self.segment)}: discard from byte "
            f"{self.position} ({self.reason}): {offsets}, {self.records} records, "
            f"{self.discarded_bytes} bytes{removed}"
        )


def _segment_bases(fs: FileSystem, directory: str) -> list[int]:
    names = fs.listdir(directory)
    return sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)


def _scan_end(file: File, position: int, size: int, offset: int) -> int:
    """The next offset after the valid batches from `position` (stops at damage)."""
    for item in iter_batches(file, position, size, offset):
        if isinstance(item, ScanFailure):
            break
        offset = item[1].next_offset
    return offset


def _end_after(fs: FileSystem, directory: str, bases: list[int], first: int) -> int:
    """The highest offset valid batches reach in the segments from `bases[first]` on."""
    end = 0
    for base in bases[first:]:
        f = fs.open(posixpath.join(directory, segment_name(base)))
        try:
            end = max(end, _scan_end(f, 0, f.size(), base))
        finally:
            f.close()
    return end


def _size(fs: FileSystem, directory: str, base: int) -> int:
    f = fs.open(posixpath.join(directory, segment_name(base)))
    try:
        return f.size()
    finally:
        f.close()


def plan_repair(fs: FileSystem, directory: str) -> RepairPlan | None:
    """What a repair would discard; None when no segment is damaged (a torn tail of the
    last segment is not damage: opening the log cuts it)."""
    bases = _segment_bases(fs, directory)
    expected: int | None = None
    for i, base in enumerate(bases):
        if expected is not None and base != expected:
            # Keep the previous segment whole; drop this one and every later one.
            reason = (
                f"{segment_name(base)} starts at {base}, the previous segment ends at {expected}"
            )
            return _plan(fs, directory, bases, i - 1, None, reason, expected, expected)
        f = fs.open(posixpath.join(directory, segment_name(base)))
        try:
            size = f.size()
            offset = base
            for item in iter_batches(f, 0, size, base):
                if isinstance(item, ScanFailure):
                    valid = find_valid_batch_after(f, item.position, size, offset)
                    if i == len(bases) - 1 and valid is None:
                        return None
                    end = offset if valid is None else _scan_end(f, valid, size, offset)
                    return _plan(fs, directory, bases, i, item.position, item.reason, offset, end)
                offset = item[1].next_offset
            expected = offset
        finally:
            f.close()
    return None


def _plan(
    fs: FileSystem,
    directory: str,
    bases: list[int],
    index: int,
    position: int | None,
    reason: str,
    first_offset: int,
    end_in_segment: int,
) -> RepairPlan:
    size = _size(fs, directory, bases[index])
    cut = size if position is None else position
    later = bases[index + 1 :]
    return RepairPlan(
        directory=directory,
        segment=segment_name(bases[index]),
        position=cut,
        reason=reason,
        first_offset=first_offset,
        log_end_offset=max(end_in_segment, _end_after(fs, directory, bases, index + 1)),
        removed_segments=tuple(segment_name(b) for b in later),
        discarded_bytes=size - cut + sum(_size(fs, directory, b) for b in later),
    )


def _remove(fs: FileSystem, path: str) -> None:
    if fs.exists(path):
        fs.remove(path)


def apply_repair(fs: FileSystem, plan: RepairPlan) -> None:
    """Discard what `plan` names; the next `PartitionLog.open` rebuilds the rest."""
    d = plan.directory
    _remove(fs, posixpath.join(d, CLEAN_SHUTDOWN))
    for name in reversed(plan.removed_segments):
        base = parse_segment_name(name)
        assert base is not None
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, REDO_SUFFIX):
            _remove(fs, posixpath.join(d, segment_name(base, suffix)))
        fs.remove(posixpath.join(d, name))
    base = parse_segment_name(plan.segment)
    assert base is not None
    f = fs.open(posixpath.join(d, plan.segment))
    try:
        f.truncate(plan.position)
        f.sync()
    finally:
        f.close()
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, REDO_SUFFIX):
        _remove(fs, posixpath.join(d, segment_name(base, suffix)))
    _remove(fs, posixpath.join(d, LEADER_EPOCH_CHECKPOINT))
    fs.sync_dir(d)


def probe_space(fs: FileSystem, directory: str, size: int = PROBE_BYTES) -> None:
    """Write, sync and remove `size` bytes in `directory`; raises OSError if it cannot."""
    path = posixpath.join(directory, PROBE_FILE)
    f = fs.open(path, create=True, truncate=True)
    try:
        f.pwrite(bytes(size), 0)
        f.sync()
    finally:
        f.close()
        _remove(fs, path)
    fs.sync_dir(directory)
