"""Checkpoint files: `leader-epoch-checkpoint`, `replication-offset-checkpoint` and its
sibling `log-start-offset-checkpoint`.

All are small text files, written atomically (temp file, fsync, rename, fsync of
the directory) so that after a crash a reader finds the old or the new version,
never a torn one. Each ends with a CRC line, so a damaged file is detected
rather than half-read:

    epochlog-leader-epoch-checkpoint v1        epochlog-replication-offset-checkpoint v1
    2                                          2
    0 0                                        orders-0 1200
    3 1450                                     orders-1 977
    crc32 1a2b3c4d                             crc32 5e6f7a8b

A damaged file raises `CheckpointError` naming the file and what is wrong; the
owners below choose a safe fallback, never one that truncates data.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from epochlog.protocol.errors import StorageError
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.log.fs import FileSystem, read_all

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
TMP_SUFFIX = ".tmp"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")


class CheckpointError(StorageError):
    """A checkpoint file exists but cannot be trusted."""


def atomic_write(fs: FileSystem, path: str, data: bytes) -> None:
    tmp = path + TMP_SUFFIX
    f = fs.open(tmp, create=True, truncate=True)
    try:
        f.append(data)
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, path)
    fs.sync_dir(posixpath.dirname(path) or ".")


def _render(kind: str, lines: list[str]) -> bytes:
    body = f"epochlog-{kind} v1\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    raw = body.encode()
    return raw + f"crc32 {zlib.crc32(raw):08x}\n".encode()


def _parse(kind: str, path: str, raw: bytes) -> list[list[str]]:
    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"damaged checkpoint {path}: {why}", path=path)

    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise bad("not ASCII text") from None
    if not text.endswith("\n"):
        raise bad("file does not end with a newline (partially written?)")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise bad("too short")
    if lines[0] != f"epochlog-{kind} v1":
        raise bad(f"unexpected header {lines[0][:60]!r}")
    crc_line = lines[-1].split(" ")
    body = ("\n".join(lines[:-1]) + "\n").encode()
    if len(crc_line) != 2 or crc_line[0] != "crc32":
        raise bad("missing crc32 line")
    if crc_line[1] != f"{zlib.crc32(body):08x}":
        raise bad("CRC mismatch")
    try:
        count = int(lines[1])
    except ValueError:
        raise bad(f"bad entry count {lines[1][:30]!r}") from None
    entries = lines[2:-1]
    if count != len(entries):
        raise bad(f"entry count {count} but {len(entries)} entries")
    out = []
    for n, line in enumerate(entries, start=3):
        parts = line.split(" ")
        if len(parts) != 2:
            raise bad(f"line {n}: expected two fields")
        out.append(parts)
    return out


def _int(path: str, value: str, what: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise CheckpointError(f"damaged checkpoint {path}: {what} {value!r}", path=path) from None
    if n < 0:
        raise CheckpointError(f"damaged checkpoint {path}: negative {what} {n}", path=path)
    return n


def read_leader_epochs(fs: FileSystem, path: str) -> list[EpochEntry] | None:
    """Entries of a leader-epoch-checkpoint; None when the file does not exist."""
    if not fs.exists(path):
        return None
    entries = [
        EpochEntry(_int(path, e, "epoch"), _int(path, s, "start offset"))
        for e, s in _parse("leader-epoch-checkpoint", path, read_all(fs, path))
    ]
    for a, b in itertools.pairwise(entries):
        if not (b.epoch > a.epoch and b.start_offset >= a.start_offset):
            raise CheckpointError(f"damaged checkpoint {path}: entries out of order", path=path)
    return entries


def write_leader_epochs(fs: FileSystem, path: str, entries: Iterable[EpochEntry]) -> None:
    atomic_write(fs, path, render_leader_epochs(entries))


def render_leader_epochs(entries: Iterable[EpochEntry]) -> bytes:
    """The checkpoint's content (`PartitionLog` writes a new epoch's to a temporary file
    of its own, synced and renamed in with the log)."""
    return _render("leader-epoch-checkpoint", [f"{e.epoch} {e.start_offset}" for e in entries])


def _read_offsets(kind: str, what: str, fs: FileSystem, path: str) -> dict[str, int] | None:
    if not fs.exists(path):
        return None
    out: dict[str, int] = {}
    for name, offset in _parse(kind, path, read_all(fs, path)):
        if not _NAME.match(name) or name in out:
            raise CheckpointError(f"damaged checkpoint {path}: bad name {name!r}", path=path)
        out[name] = _int(path, offset, what)
    return out


def _write_offsets(
    kind: str, what: str, fs: FileSystem, path: str, offsets: Mapping[str, int]
) -> None:
    lines = []
    for name in sorted(offsets):
        if not _NAME.match(name):
            raise ValueError(f"invalid partition name {name!r}")
        if offsets[name] < 0:
            raise ValueError(f"negative {what} for {name}")
        lines.append(f"{name} {offsets[name]}")
    atomic_write(fs, path, _render(kind, lines))


def read_high_watermarks(fs: FileSystem, path: str) -> dict[str, int] | None:
    """Partition name -> HW from a replication-offset-checkpoint; None when absent."""
    return _read_offsets(REPLICATION_OFFSET_CHECKPOINT, "high watermark", fs, path)


def write_high_watermarks(fs: FileSystem, path: str, hws: Mapping[str, int]) -> None:
    _write_offsets(REPLICATION_OFFSET_CHECKPOINT, "high watermark", fs, path, hws)


def read_log_starts(fs: FileSystem, path: str) -> dict[str, int] | None:
    """Partition name -> log start offset from a log-start-offset-checkpoint; None when
    absent."""
    return _read_offsets(LOG_START_OFFSET_CHECKPOINT, "log start offset", fs, path)


def write_log_starts(fs: FileSystem, path: str, starts: Mapping[str, int]) -> None:
    _write_offsets(LOG_START_OFFSET_CHECKPOINT, "log start offset", fs, path, starts)


def _read_or_set_aside(
    fs: FileSystem,
    log_dir: str,
    path: str,
    read: Callable[[FileSystem, str], dict[str, int] | None],
) -> tuple[dict[str, int] | None, CheckpointError | None]:
    """What a broker's offset checkpoint in `log_dir` holds (None: no file), or, when the
    file is damaged, nothing and the error, with the file renamed to `<name>.damaged` so
    that the next write starts a fresh one and the damaged one stays for a look."""
    try:
        return read(fs, path), None
    except CheckpointError as exc:
        fs.rename(path, path + ".damaged")
        fs.sync_dir(log_dir)
        return None, exc


@dataclass
class HighWatermarkCheckpoint:
    """The broker's replication-offset-checkpoint, with the KAFKA-1647 rule built in.

    Every partition directory on disk keeps a line in the file whatever its role
    is doing: a partition that is not (or not yet) hosted in an active role keeps
    the HW it had when the file was last read or written. Only partitions whose
    directory is gone leave the file. A damaged file is kept aside as
    `<name>.damaged`, reported in `load_error`, and every partition starts from
    HW = its log start (an understatement: it hides nothing committed from
    clients behind the KIP-207 gate, and nothing is ever truncated to a HW).
    """

    fs: FileSystem
    path: str
    known: dict[str, int] = field(default_factory=dict)
    load_error: CheckpointError | None = None
    on_disk: dict[str, int] | None = None
    """What the file holds, as last read or written (None: no file, or a damaged one)."""

    @classmethod
    def load(cls, fs: FileSystem, log_dir: str) -> HighWatermarkCheckpoint:
        path = posixpath.join(log_dir, REPLICATION_OFFSET_CHECKPOINT)
        read, error = _read_or_set_aside(fs, log_dir, path, read_high_watermarks)
        on_disk = None if read is None else dict(read)
        return cls(fs, path, known=read or {}, load_error=error, on_disk=on_disk)

    def get(self, name: str) -> int | None:
        return self.known.get(name)

    def update(self, name: str, high_watermark: int) -> None:
        self.known[name] = high_watermark

    def write(self, partitions_on_disk: Iterable[str]) -> dict[str, int]:
        """Persist one line per partition directory on disk; returns what the file holds.

        A file that already holds exactly that is left alone: an idle broker does not
        rewrite and fsync thousands of unchanged lines every checkpoint interval."""
        hws = {name: self.known.get(name, 0) for name in partitions_on_disk}
        if hws != self.on_disk:
            write_high_watermarks(self.fs, self.path, hws)
            self.on_disk = dict(hws)
        self.known = dict(hws)
        return hws


@dataclass
class LogStartCheckpoint:
    """The broker's log-start-offset-checkpoint: where each partition's log starts when
    that is above its first segment's base offset (after DeleteRecords), or while
    segments below it are being deleted.

    Retention and DeleteRecords write it before they remove any segment, so a crash in
    the middle of a deletion reopens the log at the new start (the segments left below
    it are removed then). A missing or damaged file loses nothing: every log then
    starts at its first segment (a damaged file is kept aside as `<name>.damaged`).
    """

    fs: FileSystem
    path: str
    known: dict[str, int] = field(default_factory=dict)
    load_error: CheckpointError | None = None

    @classmethod
    def load(cls, fs: FileSystem, log_dir: str) -> LogStartCheckpoint:
        path = posixpath.join(log_dir, LOG_START_OFFSET_CHECKPOINT)
        read, error = _read_or_set_aside(fs, log_dir, path, read_log_starts)
        return cls(fs, path, known=read or {}, load_error=error)

    def get(self, name: str) -> int | None:
        return self.known.get(name)

    def write(self, starts: Mapping[str, int]) -> None:
        """Persist exactly `starts` (one line per partition directory on disk)."""
        write_log_starts(self.fs, self.path, starts)
        self.known = dict(starts)
