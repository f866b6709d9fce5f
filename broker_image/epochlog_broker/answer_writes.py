"""The disk writes of one heartbeat answer, made durable together.

One answer can hand a broker a thousand partitions: new ones to create, and, for each
partition whose assignment changed, its assignment checkpoint to rewrite. Made durable
one at a time, each costs the disk a journal commit or two (a file's sync, then its
directory's), and the answer's effects (leading, following) wait for all of them: a
second for a thousand partitions on an idle disk, several on one busy with group
commits, which is how long a failover's new leaders took to lead. Here an answer's
writes become durable in the order each needs, once for all of them:

1. every file written (a new log's segment; each checkpoint, written in place in a new
   directory and as a temporary file in an existing one) is synced: one syncfs on the
   real disk;
2. each temporary file that synced is renamed over its checkpoint;
3. the directories (the new ones, those with a rename, then the data directory that
   names the new ones) are synced: one more syncfs.

A crash before the end leaves each checkpoint old or new, never torn, and each new
directory absent, empty or partial, which recovers as the empty log it was. The broker
runs the answer's effects only once `commit` returned. A new log whose files or
directory did not sync goes offline; a checkpoint that did not is logged and left as
it was (a record for the controller, not state the broker needs).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from epochlog.protocol.heartbeat import HeldAssignment
from epochlog_broker.held_assignment import held_path, render_held
from epochlog_broker.log.batch_sync import sync_dirs, sync_files
from epochlog_broker.log.checkpoints import TMP_SUFFIX
from epochlog_broker.log.fs import File, FileSystem


@dataclass
class Committed:
    """What `AnswerWrites.commit` made durable, and what it could not."""

    held: dict[str, HeldAssignment] = field(default_factory=dict)
    """Checkpoints rewritten, by partition."""
    not_written: dict[str, OSError] = field(default_factory=dict)
    """Checkpoints left as they were, by partition, with the error."""
    offline: dict[str, OSError] = field(default_factory=dict)
    """New logs that are not durable, by partition, with the error."""


@dataclass
class _Created:
    directory: str
    files: list[File]
    """The segment first (it stays open in its log), then files written in the directory."""


@dataclass
class AnswerWrites:
    created: dict[str, _Created] = field(default_factory=dict)
    held: dict[str, tuple[str, HeldAssignment]] = field(default_factory=dict)
    """Checkpoints to rewrite in existing directories: partition -> (directory, held)."""

    def create(self, name: str, directory: str, segment: File) -> None:
        """A log created in a new `directory`, none of it synced."""
        self.created[name] = _Created(directory, [segment])

    def keep_held(self, fs: FileSystem, name: str, directory: str, held: HeldAssignment) -> bool:
        """The assignment checkpoint of `name`: written now in a new directory (True), else
        at `commit` (False)."""
        new = self.created.get(name)
        if new is None:
            self.held[name] = (directory, held)
            return False
        f = fs.open(held_path(directory), create=True, truncate=True)
        new.files.append(f)
        f.append(render_held(held))
        return True

    def commit(self, fs: FileSystem, data_dir: str) -> Committed:
        out = Committed()
        tmps: list[tuple[str, str, HeldAssignment, File]] = []
        for name, (directory, held) in self.held.items():
            path = held_path(directory)
            try:
                f = fs.open(path + TMP_SUFFIX, create=True, truncate=True)
            except OSError as exc:
                out.not_written[name] = exc
                continue
            tmps.append((name, path, held, f))
            try:
                f.append(render_held(held))
            except OSError as exc:
                out.not_written[name] = exc
                tmps.pop()
                f.close()
        created = sorted(self.created.items())
        files = [f for _n, c in created for f in c.files] + [t[3] for t in tmps]
        try:
            self._commit(fs, data_dir, created, files, tmps, out)
        finally:
            for _n, c in created:
                for f in c.files[1:]:
                    f.close()
            for *_x, f in tmps:
                f.close()
        return out

    def _commit(
        self,
        fs: FileSystem,
        data_dir: str,
        created: list[tuple[str, _Created]],
        files: list[File],
        tmps: list[tuple[str, str, HeldAssignment, File]],
        out: Committed,
    ) -> None:
        errors = iter(sync_files(files))
        for name, c in created:
            failed = [e for e in (next(errors) for _f in c.files) if e is not None]
            if failed:
                out.offline[name] = failed[0]
        renamed: list[tuple[str, str, HeldAssignment]] = []
        for (name, path, held, _f), error in zip(tmps, errors, strict=True):
            if error is not None:
                out.not_written[name] = error
                continue
            try:
                fs.rename(path + TMP_SUFFIX, path)
            except OSError as exc:
                out.not_written[name] = exc
                continue
            renamed.append((name, path, held))
        new = [(name, c.directory) for name, c in created if name not in out.offline]
        dirs = [d for _n, d in new] + [posixpath.dirname(p) for _n, p, _h in renamed]
        if new:
            dirs.append(data_dir)
        dir_errors = sync_dirs(fs, dirs, files[0] if files else None)
        for (name, _d), error in zip(new, dir_errors, strict=False):
            if error is not None:
                out.offline[name] = error
        for (name, _p, held), error in zip(renamed, dir_errors[len(new) :], strict=False):
            if error is None:
                out.held[name] = held
            else:
                out.not_written[name] = error
        if new and dir_errors[-1] is not None:
            for name, _d in new:
                out.offline.setdefault(name, dir_errors[-1])
