"""Syncing many logs in one pass of the group commit.

A group commit fsyncs every log appended to since the last one. Done as one
`fdatasync` per log from a worker thread, each call gives the interpreter back
and has to win it again from the event loop; on a busy broker every switch
waits out the interpreter's switch interval (5 ms), so 200 logs took a second
to sync where the disk needed 20 ms. `sync_files` syncs a whole batch in one
call per filesystem instead: Linux's `syncfs(2)` makes every file of the
filesystem durable (data and metadata, then a device cache flush), and is
called through ctypes, which releases the interpreter for the whole call.

`syncfs` reports writeback errors only since Linux 5.8, and it reports them for
the filesystem, not per file. It is used only on such kernels, and when it
fails every file of that filesystem is synced on its own with `fdatasync`,
which reports the error of the file that has one (its own error cursor is not
consumed by `syncfs`). Files not backed by a descriptor (the simulator's) and
lone files are synced one by one as before.

The cost: `syncfs` also writes back whatever else is dirty on the same
filesystem. A data directory on its own volume (a PersistentVolume per broker)
pays nothing for it; one on a busy shared disk may see longer group commits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
from collections.abc import Callable, Sequence

from epochlog_broker.log.fs import File, FileSystem, OsFile

_MIN_KERNEL = (5, 8)
"""syncfs(2) reports writeback errors since this Linux release."""


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    if platform.system() != "Linux":
        return None
    try:
        release = tuple(int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return None
    if release < _MIN_KERNEL:
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    fn = getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


def syncfs_available() -> bool:
    """Whether batches are synced with one syncfs per filesystem here."""
    return _syncfs() is not None


def sync_one(f: File) -> OSError | None:
    """fdatasync one file; its error, if any."""
    try:
        f.sync()
    except OSError as exc:
        return exc
    return None


def sync_files(files: Sequence[File]) -> list[OSError | None]:
    """Make every file in `files` durable; the error of each, in order (None: synced)."""
    out: list[OSError | None] = [None] * len(files)
    by_device: dict[int, list[int]] = {}
    singles: list[int] = []
    fn = _syncfs()
    for i, f in enumerate(files):
        if fn is not None and isinstance(f, OsFile):
            by_device.setdefault(f.device, []).append(i)
        else:
            singles.append(i)
    for members in by_device.values():
        if len(members) == 1:
            singles += members
            continue
        first = files[members[0]]
        assert fn is not None
        assert isinstance(first, OsFile)
        if fn(first.fileno()) == 0:
            continue
        # Which file failed is only known file by file.
        singles += members
    for i in singles:
        out[i] = sync_one(files[i])
    return out


def sync_dirs(fs: FileSystem, dirs: Sequence[str], probe: File | None) -> list[OSError | None]:
    """Make the entries of `dirs` durable (creates, renames): one syncfs of the filesystem
    the open file `probe` is on (it commits every directory's entries too) where that is
    how batches are synced; if that fails, or where it is not, each directory in the
    order given (a parent after the directories it names), which finds the one whose
    sync failed. The error of each, in order."""
    out: list[OSError | None] = [None] * len(dirs)
    if not dirs:
        return out
    fn = _syncfs()
    if fn is not None and isinstance(probe, OsFile) and fn(probe.fileno()) == 0:
        return out
    for i, directory in enumerate(dirs):
        try:
            fs.sync_dir(directory)
        except OSError as exc:
            out[i] = exc
    return out
