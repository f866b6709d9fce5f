"""The file-system interface the log is written against, and its real implementation.

The interface is deliberately small: positional reads and writes, truncate,
`sync` (fdatasync of one file), and the directory operations whose durability
matters (create, rename, remove, `sync_dir`). Durability rules the log relies on:

- file content and size are durable only after `File.sync()`;
- a create, rename or remove is durable only after `sync_dir()` of its directory.

`OsFileSystem` maps this onto POSIX calls; `simfs.CrashFileSystem` enforces
exactly these rules and nothing more, so code that passes its crash tests is
safe on a real disk with the same guarantees.
"""

from __future__ import annotations

import os
from typing import Protocol


class File(Protocol):
    """An open, read-write file handle."""

    @property
    def path(self) -> str: ...

    def size(self) -> int: ...

    def pread(self, n: int, offset: int) -> bytes: ...

    def pwrite(self, data: bytes | bytearray, offset: int) -> None: ...

    def append(self, data: bytes | bytearray) -> None: ...

    def truncate(self, size: int) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class FileSystem(Protocol):
    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> File: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def mkdir(self, path: str) -> None:
        """Create `path` and missing parents; durable once each parent is `sync_dir`-ed."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace `dst` with `src` (same directory)."""
        ...

    def remove(self, path: str) -> None: ...

    def rmdir(self, path: str) -> None:
        """Remove the empty directory `path`; durable once its parent is `sync_dir`-ed."""
        ...

    def sync_dir(self, path: str) -> None: ...


def read_all(fs: FileSystem, path: str) -> bytes:
    f = fs.open(path)
    try:
        return f.pread(f.size(), 0)
    finally:
        f.close()


class OsFile:
    """A file descriptor with an explicit end position (no O_APPEND: pwrite must be exact)."""

    def __init__(self, path: str, fd: int) -> None:
        self._path = path
        self._fd = fd
        st = os.fstat(fd)
        self._size = st.st_size
        self.device = st.st_dev
        """The filesystem the file is on (`batch_sync` syncs a filesystem at once)."""

    @property
    def path(self) -> str:
        return self._path

    def fileno(self) -> int:
        return self._fd

    def size(self) -> int:
        return self._size

    def pread(self, n: int, offset: int) -> bytes:
        if n <= 0:
            return b""
        chunks = []
        while n > 0:
            chunk = os.pread(self._fd, n, offset)
            if not chunk:
                break
            chunks.append(chunk)
            n -= len(chunk)
            offset += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def pwrite(self, data: bytes | bytearray, offset: int) -> None:
        view = memoryview(data)
        pos = offset
        while view:
            written = os.pwrite(self._fd, view, pos)
            view = view[written:]
            pos += written
        self._size = max(self._size, pos)

    def append(self, data: bytes | bytearray) -> None:
        self.pwrite(data, self._size)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsFileSystem:
    """The real disk."""

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> OsFile:
        flags = os.O_RDWR | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        return OsFile(path, os.open(path, flags, 0o644))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def ensure_dir(fs: FileSystem, path: str) -> None:
    """Create `path` and any missing parents durably (each new entry's parent is synced)."""
    path = path.rstrip("/") or "/"
    if fs.is_dir(path):
        return
    parent = os.path.dirname(path) or "."  # a relative name's parent is the cwd
    ensure_dir(fs, parent)
    fs.mkdir(path)
    fs.sync_dir(parent)
