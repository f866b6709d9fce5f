"""Secret volumes as the kubelet writes them: atomically, and again when the Secret changes.

The kubelet's AtomicWriter (`pkg/volume/util/atomic_writer.go`) keeps a volume's
files in a timestamped directory `..<time>`, points the symlink `..data` at it,
and makes every top-level entry a symlink through `..data`. An update writes a
new directory and renames a new `..data` symlink over the old one, so that a
reader sees the old files or the new ones, never a mix of both; the old
directory is removed afterwards. A program watching a mounted Secret (the
brokers' and the operator's certificate reloaders) sees here what it sees in a
pod: the same paths, a new inode and modification time after a change.

`write_volume` is the writer; `ChartCluster` calls it when a pod starts and again
on every sync of its Secrets.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from epochlog.security.pki import write_file

DATA: Final = "..data"
"""The symlink to the directory holding the current files."""

Payload = Mapping[str, tuple[bytes, int]]
"""Path relative to the volume -> (content, mode)."""


def write_volume(d: Path, payload: Payload, gid: int) -> bool:
    """Make the volume at `d` hold `payload`, owned by root with group `gid`; False when
    it held it already (nothing written)."""
    d.mkdir(parents=True, exist_ok=True)
    _own(d, gid)
    data = d / DATA
    current = d / os.readlink(data) if data.is_symlink() else None
    if current is not None and read_payload(current) == dict(payload):
        return False
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    fresh = Path(tempfile.mkdtemp(prefix=f"..{stamp}.", dir=d))
    _own(fresh, gid)
    for rel, (content, mode) in payload.items():
        path = fresh / rel
        for parent in reversed(path.relative_to(fresh).parents[:-1]):
            sub = fresh / parent
            if not sub.is_dir():
                sub.mkdir()
                _own(sub, gid)
        write_file(path, content, mode)
        if os.geteuid() == 0:
            os.chown(path, 0, gid)
    tmp = d / f"{DATA}_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(fresh.name)
    os.replace(tmp, data)  # the switch: one rename
    tops = {Path(rel).parts[0] for rel in payload}
    for top in sorted(tops):
        link = d / top
        if link.is_symlink():
            continue
        if link.is_dir():
            shutil.rmtree(link)  # a volume written before this layout
        else:
            link.unlink(missing_ok=True)
        link.symlink_to(f"{DATA}/{top}")
    for entry in d.iterdir():
        if entry.name in (DATA, fresh.name) or entry.name in tops:
            continue
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        elif entry.is_dir():
            shutil.rmtree(entry)
    return True


def read_payload(directory: Path) -> dict[str, tuple[bytes, int]]:
    """What a volume directory holds, as a payload."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = Path(root) / name
            out[str(path.relative_to(directory))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


def _own(path: Path, gid: int) -> None:
    if os.geteuid() == 0:  # as the kubelet; a user's own files stay theirs
        os.chown(path, 0, gid)
    path.chmod(0o750)
