"""Whether files changed since they were last loaded: certificates, keys, policies.

A Secret mounted in a pod is updated in place (a symlink swap), so a file is
compared by its modification time, size and inode. `changed()` only looks;
`loaded()` records the current state once the caller has loaded the files, so
a half-rotated pair (a new certificate before its key) is looked at again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

Stamp = tuple[tuple[int, int, int], ...]


class FileWatch:
    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = tuple(paths)
        self._seen = self._stamp()

    def stamp(self) -> Stamp:
        """The files' state now (what `loaded` records)."""
        return self._stamp()

    def _stamp(self) -> Stamp:
        out = []
        for path in self.paths:
            try:
                st = os.stat(path)
            except OSError:
                out.append((0, 0, 0))
            else:
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def changed(self) -> bool:
        return self._stamp() != self._seen

    def loaded(self, stamp: Stamp | None = None) -> None:
        """Record the files as loaded in state `stamp` (taken before they were read: a
        change while they were read is then seen as one next time), or as they are now."""
        self._seen = self._stamp() if stamp is None else stamp
