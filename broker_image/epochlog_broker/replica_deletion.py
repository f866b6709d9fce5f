"""Deleting a replica's directory after the controller reassigned the partition away.

A deletion must never leave something that opens as a shorter log of the same
partition: a crash in the middle would otherwise bring back a truncated replica
that reports an assignment naming it. So a durable marker (`DELETED_MARKER`)
goes into the directory first; every other file is then removed, and the marker
last, and then the empty directory (as Kafka leaves no directory behind for a
replica it deleted: a broker that saw thousands of partitions come and go keeps
no trace of them). A directory holding the marker, or nothing at all, is no
replica: the broker finishes its deletion when it opens its data directory
(`is_deleted` then `delete_files`) and hosts nothing there. A partition
reassigned back later starts a fresh log in a new directory. A directory that
is a mount point (a volume given to one partition) cannot be removed; it stays,
empty, and a replica assigned there again starts afresh in it.

Plain file system calls through `FileSystem`, so the crash-simulating file
system tests the same code.
"""

from __future__ import annotations

import posixpath
from typing import Final

from epochlog_broker.log.checkpoints import atomic_write
from epochlog_broker.log.fs import FileSystem

DELETED_MARKER: Final = ".deleted"


def is_deleted(fs: FileSystem, directory: str) -> bool:
    """A directory that holds no replica: one being deleted, or an empty one."""
    entries = fs.listdir(directory)
    return not entries or DELETED_MARKER in entries


def delete_files(fs: FileSystem, directory: str) -> int:
    """Remove the replica's files, marker first and last, then the directory; the number
    of files removed.

    Subdirectories are left alone (a log keeps none), and so is a directory holding one
    or one that cannot be removed (a volume mounted there)."""
    marker = posixpath.join(directory, DELETED_MARKER)
    if not fs.exists(marker):
        atomic_write(fs, marker, b"")
    removed = 0
    for name in fs.listdir(directory):
        path = posixpath.join(directory, name)
        if name == DELETED_MARKER or fs.is_dir(path):
            continue
        fs.remove(path)
        removed += 1
    fs.sync_dir(directory)
    fs.remove(marker)
    fs.sync_dir(directory)
    if not fs.listdir(directory):
        try:
            fs.rmdir(directory)
        except OSError:
            # A mount point (EBUSY), or a directory this process may not remove: empty, so
            # it holds no replica either way, and it stays.
            return removed
        fs.sync_dir(posixpath.dirname(directory) or ".")
    return removed
