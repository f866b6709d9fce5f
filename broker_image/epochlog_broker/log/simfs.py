"""A crash-simulating, in-memory implementation of the `fs.FileSystem` interface.

It keeps, for every file, the content last made durable by `File.sync()` and,
for every directory, the entries last made durable by `sync_dir()`. `crash()`
throws away everything else, as a power loss would:

- writes and truncates not followed by `sync()` of that file are lost;
- creates, renames and removes not followed by `sync_dir()` of their directory
  are undone (a file created and synced but never linked durably vanishes).

With a `random.Random`, `crash(rng)` is harsher and still legal: each file keeps
a random prefix of its unsynced operations, the last write possibly torn in
the middle, and each directory a random prefix of its unsynced entry changes.
Open handles from before a crash are dead. The log code runs unchanged on this
layer; the deterministic simulator drives it too.
"""

from __future__ import annotations

import errno
import posixpath
import random
from dataclasses import dataclass, field

_DIR = -1


class ProcessStopped(BaseException):
    """The simulated process died at this file operation (`CrashFileSystem.stop_after`).

    A BaseException, as a real process's death is nothing the code under test can
    catch: no disk-error handler of the log or the broker takes it for an I/O error."""


_Op = tuple[str, int, bytes]  # ("write", offset, data) | ("truncate", size, b"")
_DirOp = tuple[str, str, str, int]  # ("link"|"unlink"|"rename", name, new_name, inode)


@dataclass
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    pending: list[_Op] = field(default_factory=list)


@dataclass
class _Dir:
    entries: dict[str, int] = field(default_factory=dict)
    durable: dict[str, int] = field(default_factory=dict)
    pending: list[_DirOp] = field(default_factory=list)


def _norm(path: str) -> str:
    return posixpath.normpath(posixpath.join("/", path))


def _apply_write(buf: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buf):
        buf.extend(b"\0" * (offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _apply_dir_op(entries: dict[str, int], op: _DirOp) -> None:
    kind, name, new_name, ino = op
    if kind == "link":
        entries[name] = ino
    elif kind == "unlink":
        entries.pop(name, None)
    elif kind == "rename" and name in entries:
        entries[new_name] = entries.pop(name)


class SimFile:
    def __init__(self, fs: CrashFileSystem, path: str, ino: int) -> None:
        self._fs = fs
        self._path = path
        self._ino = ino
        self._generation = fs.generation
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def _inode(self) -> _Inode:
        if self._closed:
            raise ValueError(f"I/O on closed file {self._path}")
        if self._generation != self._fs.generation:
            raise OSError(f"stale handle for {self._path}: the file system crashed since open")
        return self._fs.inodes[self._ino]

    def size(self) -> int:
        return len(self._inode().data)

    def pread(self, n: int, offset: int) -> bytes:
        data = self._inode().data
        return bytes(data[offset : offset + max(n, 0)])

    def pwrite(self, data: bytes | bytearray, offset: int) -> None:
        inode = self._inode()
        self._fs.check_fault("write", self._path)
        data = bytes(data)
        _apply_write(inode.data, offset, data)
        inode.pending.append(("write", offset, data))

    def append(self, data: bytes | bytearray) -> None:
        self.pwrite(data, len(self._inode().data))

    def truncate(self, size: int) -> None:
        inode = self._inode()
        self._fs.check_fault("truncate", self._path)
        if size < len(inode.data):
            del inode.data[size:]
        else:
            inode.data.extend(b"\0" * (size - len(inode.data)))
        inode.pending.append(("truncate", size, b""))

    def sync(self) -> None:
        inode = self._inode()
        self._fs.check_fault("sync", self._path)
        inode.durable = bytes(inode.data)
        inode.pending.clear()
        self._fs.syncs += 1

    def close(self) -> None:
        self._closed = True


class CrashFileSystem:
    """In-memory file system that loses exactly what was not made durable on `crash()`."""

    def __init__(self) -> None:
        self.inodes: dict[int, _Inode] = {}
        self.dirs: dict[str, _Dir] = {"/": _Dir()}
        self._removed_dirs: dict[str, _Dir] = {}
        """Directories removed while their parent's entry may still come back in a crash."""
        self.generation = 0
        self.syncs = 0
        self._next_ino = 1
        self._faults: dict[str, list[int]] = {}
        self._stop_countdown: int | None = None

    # -- fault injection ------------------------------------------------------------

    def stop_after(self, calls: int | None) -> None:
        """Let `calls` mutating calls (write, truncate, sync, create, rename, remove,
        rmdir, sync_dir) through, then raise `ProcessStopped` on the next one, which has
        no effect: the process dies right there (None disarms). The caller then crashes
        the file system, as a power loss at that point would."""
        self._stop_countdown = calls

    def _step(self) -> None:
        if self._stop_countdown is None:
            return
        if self._stop_countdown == 0:
            self._stop_countdown = None
            raise ProcessStopped()
        self._stop_countdown -= 1

    def fail_next(self, op: str, count: int = 1, *, error: int = errno.EIO) -> None:
        """Make the next `count` calls of `op` ("write", "truncate", "sync") raise `error`
        (EIO by default; ENOSPC for a full disk). A failing call has no effect."""
        self._faults.setdefault(op, []).extend([error] * count)

    def check_fault(self, op: str, path: str) -> None:
        self._step()
        pending = self._faults.get(op)
        if pending:
            code = pending.pop(0)
            what = "no space left" if code == errno.ENOSPC else "I/O error"
            raise OSError(code, f"injected {what} on {op}", path)

    # -- namespace helpers ------------------------------------------------------------

    def _parent(self, path: str) -> tuple[_Dir, str]:
        path = _norm(path)
        parent, name = posixpath.split(path)
        d = self.dirs.get(parent)
        if d is None:
            raise FileNotFoundError(2, "no such directory", parent)
        return d, name

    def _lookup(self, path: str) -> int | None:
        path = _norm(path)
        if path == "/":
            return _DIR
        d, name = self._parent(path)
        return d.entries.get(name)

    # -- FileSystem interface ---------------------------------------------------------

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> SimFile:
        path = _norm(path)
        d, name = self._parent(path)
        ino = d.entries.get(name)
        if ino == _DIR:
            raise IsADirectoryError(21, "is a directory", path)
        if ino is None:
            if not create:
                raise FileNotFoundError(2, "no such file", path)
            self._step()
            ino = self._next_ino
            self._next_ino += 1
            self.inodes[ino] = _Inode()
            d.entries[name] = ino
            d.pending.append(("link", name, "", ino))
        f = SimFile(self, path, ino)
        if truncate:
            f.truncate(0)
        return f

    def exists(self, path: str) -> bool:
        try:
            return self._lookup(path) is not None
        except FileNotFoundError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return self._lookup(path) == _DIR
        except FileNotFoundError:
            return False

    def listdir(self, path: str) -> list[str]:
        d = self.dirs.get(_norm(path))
        if d is None:
            raise FileNotFoundError(2, "no such directory", path)
        return sorted(d.entries)

    def mkdir(self, path: str) -> None:
        path = _norm(path)
        if path in self.dirs:
            return
        parent = posixpath.dirname(path)
        self.mkdir(parent)
        pdir = self.dirs[parent]
        name = posixpath.basename(path)
        if name in pdir.entries:
            raise FileExistsError(17, "file exists", path)
        self.dirs[path] = _Dir()
        self._removed_dirs.pop(path, None)
        pdir.entries[name] = _DIR
        pdir.pending.append(("link", name, "", _DIR))

    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        d, name = self._parent(src)
        d2, new_name = self._parent(dst)
        if d is not d2:
            raise OSError(18, "rename across directories is not supported", src)
        if name not in d.entries:
            raise FileNotFoundError(2, "no such file", src)
        if d.entries[name] == _DIR:
            raise IsADirectoryError(21, "renaming directories is not supported", src)
        self._step()
        d.entries[new_name] = d.entries.pop(name)
        d.pending.append(("rename", name, new_name, 0))

    def remove(self, path: str) -> None:
        d, name = self._parent(path)
        ino = d.entries.get(name)
        if ino is None:
            raise FileNotFoundError(2, "no such file", path)
        if ino == _DIR:
            raise IsADirectoryError(21, "is a directory", path)
        self._step()
        del d.entries[name]
        d.pending.append(("unlink", name, "", 0))

    def rmdir(self, path: str) -> None:
        path = _norm(path)
        d, name = self._parent(path)
        if d.entries.get(name) != _DIR:
            raise NotADirectoryError(20, "not a directory", path)
        if self.dirs[path].entries:
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self._step()
        del d.entries[name]
        d.pending.append(("unlink", name, "", 0))
        self._removed_dirs[path] = self.dirs.pop(path)

    def sync_dir(self, path: str) -> None:
        d = self.dirs.get(_norm(path))
        if d is None:
            raise FileNotFoundError(2, "no such directory", path)
        self._step()
        d.durable = dict(d.entries)
        d.pending.clear()
        self.syncs += 1

    # -- crash ------------------------------------------------------------------------

    def crash(self, rng: random.Random | None = None) -> None:
        """Lose everything not durable; with `rng`, keep a random legal part of it."""
        self.generation += 1
        self._faults.clear()
        self._stop_countdown = None
        for ino, inode in self.inodes.items():
            data = bytearray(inode.durable)
            if rng is not None and inode.pending:
                keep = rng.randint(0, len(inode.pending))
                for i, (kind, arg, payload) in enumerate(inode.pending[:keep]):
                    if kind == "truncate":
                        del data[arg:]
                        data.extend(b"\0" * (arg - len(data)))
                    else:
                        torn = i == keep - 1 and rng.random() < 0.5
                        _apply_write(
                            data, arg, payload[: rng.randint(0, len(payload))] if torn else payload
                        )
            self.inodes[ino] = _Inode(data=data, durable=bytes(data))
        new_dirs: dict[str, _Dir] = {}
        # A removed directory whose unlink was not durable comes back as it was durable.
        for path, d in [*self._removed_dirs.items(), *self.dirs.items()]:
            entries = dict(d.durable)
            if rng is not None and d.pending:
                for op in d.pending[: rng.randint(0, len(d.pending))]:
                    _apply_dir_op(entries, op)
            new_dirs[path] = _Dir(entries=entries, durable=dict(entries))
        # Keep only directories still reachable from the root.
        reachable: dict[str, _Dir] = {}
        stack = ["/"]
        while stack:
            path = stack.pop()
            found = new_dirs.get(path)
            if found is None:
                continue
            reachable[path] = found
            for name, ino in found.entries.items():
                if ino == _DIR:
                    stack.append(posixpath.join(path, name))
        self.dirs = reachable
        self._removed_dirs.clear()
        live = {ino for d in reachable.values() for ino in d.entries.values() if ino != _DIR}
        self.inodes = {ino: inode for ino, inode in self.inodes.items() if ino in live}

    # -- test helpers -----------------------------------------------------------------

    def corrupt(self, path: str, offset: int, data: bytes) -> None:
        """Overwrite bytes in place, durably: media corruption, not a write by the program."""
        ino = self._lookup(path)
        if ino is None or ino == _DIR:
            raise FileNotFoundError(2, "no such file", path)
        inode = self.inodes[ino]
        _apply_write(inode.data, offset, data)
        durable = bytearray(inode.durable)
        _apply_write(durable, offset, data)
        inode.durable = bytes(durable)
