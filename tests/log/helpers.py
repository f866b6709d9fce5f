"""Shared pieces of the log tests: record factories, reading a whole log back, the
epoch history a list of batches implies, and a crash-simulating file system with
more places to inject I/O errors."""

from __future__ import annotations

import copy
import errno
import posixpath
import random
from collections.abc import Callable, Sequence

from epochlog_broker.log import (
    CrashFileSystem,
    EpochEntry,
    LogConfig,
    LogRecord,
    PartitionLog,
    Record,
    RecordBatch,
)
from epochlog_broker.log.segment import INDEX_SUFFIX, segment_name
from epochlog_broker.log.simfs import SimFile

PDIR = "/data/orders-0"
TS = 1_700_000_000_000
# Small enough that a handful of appends rolls a segment and adds index entries.
SMALL = LogConfig(segment_bytes=1200, max_batch_bytes=600, index_interval_bytes=150)


class FaultyFileSystem(CrashFileSystem):
    """A `CrashFileSystem` whose directory operations can fail as well, and which can
    fail the n-th mutating call of any kind, to stop an operation at any step.

    `fail_next` accepts "create", "rename", "remove", "rmdir" and "sync_dir" besides the
    base class's "write", "truncate" and "sync". A failing call has no effect.
    """

    def __init__(self) -> None:
        super().__init__()
        self.countdown: int | None = None
        self.targets: dict[tuple[str, str], int] = {}
        self.condition: Callable[[str, str], bool] | None = None

    def fail_after(self, calls: int) -> None:
        """Let `calls` mutating calls through, then fail the next one."""
        self.countdown = calls

    def fail_on(self, op: str, path: str, *, skip: int = 0) -> None:
        """Fail the call of `op` on `path` that comes after `skip` such calls."""
        self.targets[(op, posixpath.normpath(path))] = skip

    def fail_when(self, condition: Callable[[str, str], bool]) -> None:
        """Fail the first call for which `condition(op, path)` holds."""
        self.condition = condition

    def check_fault(self, op: str, path: str) -> None:
        if self.condition is not None and self.condition(op, posixpath.normpath(path)):
            self.condition = None
            raise OSError(errno.EIO, f"injected I/O error on {op}", path)
        if self.countdown is not None:
            if self.countdown == 0:
                self.countdown = None
                raise OSError(errno.EIO, f"injected I/O error on {op}", path)
            self.countdown -= 1
        target = (op, posixpath.normpath(path))
        if target in self.targets:
            if self.targets[target] == 0:
                del self.targets[target]
                raise OSError(errno.EIO, f"injected I/O error on {op}", path)
            self.targets[target] -= 1
        super().check_fault(op, path)

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> SimFile:
        if create and not self.exists(path):
            self.check_fault("create", path)
        return super().open(path, create=create, truncate=truncate)

    def rename(self, src: str, dst: str) -> None:
        self.check_fault("rename", src)
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self.check_fault("remove", path)
        super().remove(path)

    def rmdir(self, path: str) -> None:
        self.check_fault("rmdir", path)
        super().rmdir(path)

    def sync_dir(self, path: str) -> None:
        self.check_fault("sync_dir", path)
        super().sync_dir(path)

    def crash(self, rng: random.Random | None = None) -> None:
        self.countdown = None
        self.targets.clear()
        self.condition = None
        super().crash(rng)


def records(n: int, prefix: str = "v", size: int = 0) -> list[Record]:
    """`n` distinct records, each value padded to at least `size` bytes."""
    return [
        Record(f"{prefix}{i}".encode().ljust(size, b"."), key=f"k{i % 3}".encode())
        for i in range(n)
    ]


def read_all(plog: PartitionLog) -> list[LogRecord]:
    return plog.read_records(plog.log_start_offset, max_bytes=1 << 40)


def read_all_batches(plog: PartitionLog) -> list[RecordBatch]:
    return plog.read_batches(plog.log_start_offset, max_bytes=1 << 40)


def values(plog: PartitionLog) -> list[bytes | None]:
    return [r.value for r in read_all(plog)]


def epoch_starts(batches: Sequence[RecordBatch]) -> list[EpochEntry]:
    """The epoch history the batches imply: each epoch starts at its first batch."""
    out: list[EpochEntry] = []
    for b in batches:
        if not out or b.leader_epoch != out[-1].epoch:
            assert not out or b.leader_epoch > out[-1].epoch, "leader epochs go backwards"
            out.append(EpochEntry(b.leader_epoch, b.base_offset))
    return out


def seg_path(base_offset: int, directory: str = PDIR) -> str:
    return posixpath.join(directory, segment_name(base_offset))


def index_path(base_offset: int, directory: str = PDIR) -> str:
    return posixpath.join(directory, segment_name(base_offset, INDEX_SUFFIX))


def file_bytes(fs: CrashFileSystem, path: str) -> bytes:
    f = fs.open(path)
    try:
        return f.pread(f.size(), 0)
    finally:
        f.close()


def write_file(fs: CrashFileSystem, path: str, data: bytes | bytearray) -> None:
    """Replace a file's content durably (as if written by someone else before a restart)."""
    f = fs.open(path, create=True, truncate=True)
    try:
        f.append(data)
        f.sync()
    finally:
        f.close()
    fs.sync_dir(posixpath.dirname(path))


def fill_segments(plog: PartitionLog, segments: int, *, epoch: int = 1) -> None:
    """Append single-record batches until the log has `segments` segments."""
    i = 0
    while len(plog.segments) < segments:
        plog.append_records(
            [Record(f"fill-{i}".encode().ljust(90, b"."))], leader_epoch=epoch, timestamp=TS
        )
        i += 1


def snapshot(fs: CrashFileSystem, directory: str = PDIR) -> dict[str, bytes]:
    """Name -> content of every file in `directory`."""
    return {n: file_bytes(fs, posixpath.join(directory, n)) for n in fs.listdir(directory)}


def durable_snapshot(fs: CrashFileSystem, directory: str = PDIR) -> dict[str, bytes]:
    """`snapshot` of the directory as a power loss right now would leave it."""
    clone = copy.deepcopy(fs)
    clone.crash()
    return snapshot(clone, directory) if clone.is_dir(directory) else {}
