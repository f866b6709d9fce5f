"""Read-only inspection of a partition directory: verify every batch, dump records.

Unlike `PartitionLog.open`, nothing here writes: `check_partition_dir` scans all
segments end to end (CRC, framing, consecutive offsets, non-decreasing epochs),
compares index and leader-epoch-checkpoint files with what it found, and says
what opening the log would do (cut a torn tail, refuse a damaged middle).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

from epochlog.protocol.errors import StorageError
from epochlog_broker.log.checkpoints import LEADER_EPOCH_CHECKPOINT, read_leader_epochs
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.log.fs import FileSystem, read_all
from epochlog_broker.log.index import IndexFormatError, OffsetIndex
from epochlog_broker.log.segment import (
    INDEX_SUFFIX,
    ScanFailure,
    find_valid_batch_after,
    iter_batches,
    parse_segment_name,
    segment_name,
)


@dataclass
class SegmentCheck:
    name: str
    base_offset: int
    size: int
    batches: int = 0
    records: int = 0
    next_offset: int = 0
    index: str = "ok"
    problem: str | None = None


@dataclass
class CheckResult:
    directory: str
    segments: list[SegmentCheck] = field(default_factory=list)
    epochs: EpochHistory = field(default_factory=EpochHistory)
    epoch_checkpoint: str = "ok"
    problems: list[str] = field(default_factory=list)
    torn_tail: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset if self.segments else 0


def check_partition_dir(
    fs: FileSystem, directory: str, progress: Callable[[SegmentCheck], None] | None = None
) -> CheckResult:
    result = CheckResult(directory)
    if not fs.is_dir(directory):
        raise StorageError(f"{directory} is not a directory")
    bases = sorted(
        b for b in (parse_segment_name(n) for n in fs.listdir(directory)) if b is not None
    )
    history = EpochHistory()
    expected: int | None = None
    for i, base in enumerate(bases):
        f = fs.open(posixpath.join(directory, segment_name(base)))
        try:
            sc = SegmentCheck(segment_name(base), base, f.size(), next_offset=base)
            if expected is not None and base != expected:
                result.problems.append(
                    f"{sc.name}: starts at {base}, previous segment ends at {expected}"
                )
            for item in iter_batches(f, 0, sc.size, base):
                if isinstance(item, ScanFailure):
                    last = i == len(bases) - 1
                    if (
                        last
                        and find_valid_batch_after(f, item.position, sc.size, sc.next_offset)
                        is None
                    ):
                        result.torn_tail = (
                            f"{sc.name}: {sc.size - item.position} bytes after byte "
                            f"{item.position} ({item.reason}) would be cut on open"
                        )
                    else:
                        sc.problem = f"corrupt batch at byte {item.position}: {item.reason}"
                        result.problems.append(f"{sc.name}: {sc.problem}")
                    break
                _, h = item
                sc.batches += 1
                sc.records += h.record_count
                sc.next_offset = h.next_offset
                if h.leader_epoch < history.latest_epoch:
                    result.problems.append(
                        f"{sc.name}: leader epoch goes backwards at {h.base_offset}"
                    )
                elif h.leader_epoch > history.latest_epoch:
                    history.assign(h.leader_epoch, h.base_offset)
            index_path = posixpath.join(directory, segment_name(base, INDEX_SUFFIX))
            if not fs.exists(index_path):
                sc.index = "missing (rebuilt on open)"
            else:
                try:
                    OffsetIndex.decode(read_all(fs, index_path), base, sc.size)
                except IndexFormatError as exc:
                    sc.index = f"invalid: {exc} (rebuilt on open)"
        finally:
            f.close()
        expected = sc.next_offset
        result.segments.append(sc)
        if progress is not None:
            progress(sc)
    result.epochs = history
    try:
        stored = read_leader_epochs(fs, posixpath.join(directory, LEADER_EPOCH_CHECKPOINT))
        if stored is None:
            result.epoch_checkpoint = "missing (rebuilt on open)"
        else:
            stored_history = EpochHistory(stored)
            stored_history.truncate_from_end(result.log_end_offset)
            if stored_history != history:
                result.epoch_checkpoint = (
                    f"differs from the log: {stored_history} (rebuilt on open)"
                )
    except StorageError as exc:
        result.epoch_checkpoint = f"{exc.message} (rebuilt on open)"
    return result
