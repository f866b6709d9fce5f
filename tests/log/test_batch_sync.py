"""Group-commit syncs of many logs at once (`batch_sync`): one syncfs per filesystem
where the kernel reports its errors, every file synced and every error attributed to
its own file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.errors import StorageError
from epochlog_broker.log import batch_sync
from epochlog_broker.log.batch_sync import sync_dirs, sync_files, syncfs_available
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.fs import File, OsFile, OsFileSystem
from epochlog_broker.log.partition_log import PartitionLog


class FailingFile:
    """A file whose fdatasync fails as a dying disk's does."""

    path = "failing"

    def sync(self) -> None:
        raise OSError(errno.EIO, "Input/output error")


def files(directory: Path, n: int) -> list[OsFile]:
    fs = OsFileSystem()
    out = []
    for i in range(n):
        f = fs.open(str(directory / f"{i}.log"), create=True)
        f.append(b"x" * 100)
        out.append(f)
    return out


def test_this_machine_syncs_a_filesystem_at_once() -> None:
    # The figures in docs/concepts/performance.md are measured with syncfs; a kernel
    # before 5.8 would fall back to one fdatasync per log.
    assert syncfs_available()


def test_many_files_sync_with_one_call_per_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = files(tmp_path, 3)
    other = files(Path("/dev/shm"), 2) if os.path.isdir("/dev/shm") else []
    assert not other or other[0].device != here[0].device
    calls: list[int] = []
    real = batch_sync._syncfs()
    assert real is not None

    def counting(fd: int) -> int:
        calls.append(os.fstat(fd).st_dev)
        return real(fd)

    monkeypatch.setattr(batch_sync, "_syncfs", lambda: counting)
    assert sync_files([*here, *other]) == [None] * (len(here) + len(other))
    assert sorted(calls) == sorted({f.device for f in [*here, *other]})
    for f in [*here, *other]:
        f.close()


def test_a_failed_syncfs_is_attributed_file_by_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = files(tmp_path, 2)
    gone = files(tmp_path, 1)[0]
    os.close(gone.fileno())  # its descriptor is gone: its own sync fails, the others' do not
    monkeypatch.setattr(batch_sync, "_syncfs", lambda: lambda fd: -1)
    batch: list[File] = [good[0], gone, good[1], FailingFile()]  # type: ignore[list-item]
    errors = sync_files(batch)
    assert errors[0] is None
    assert errors[2] is None
    assert isinstance(errors[1], OSError)
    assert errors[1].errno == errno.EBADF
    assert isinstance(errors[3], OSError)
    assert errors[3].errno == errno.EIO
    for f in good:
        f.close()


def test_a_failed_sync_takes_the_log_offline_and_keeps_its_persisted_end(
    tmp_path: Path,
) -> None:
    fs = OsFileSystem()
    plog = PartitionLog.open(fs, str(tmp_path / "t-0"), LogConfig(), name="t-0")
    plog.append_records([Record(b"a")], leader_epoch=1, timestamp=0)
    target = plog.sync_target()
    assert target == 1
    with pytest.raises(StorageError, match="Input/output error"):
        plog.synced(target, OSError(errno.EIO, "Input/output error"))
    assert plog.persisted_log_end_offset == 0, "nothing a failed sync covered counts"
    with pytest.raises(StorageError, match="offline"):
        plog.sync_target()


def test_directories_sync_with_one_call_on_the_real_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = batch_sync._syncfs()
    assert real is not None

    def counting(fd: int) -> int:
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(batch_sync, "_syncfs", lambda: counting)
    synced: list[str] = []
    fs = OsFileSystem()
    monkeypatch.setattr(fs, "sync_dir", synced.append)
    dirs = [str(tmp_path / f"p{i}") for i in range(4)]
    for d in dirs:
        os.mkdir(d)
    [probe] = files(tmp_path, 1)
    assert sync_dirs(fs, [*dirs, str(tmp_path)], probe) == [None] * 5
    assert len(calls) == 1
    assert synced == [], "syncfs committed the directories' entries"
    probe.close()


def test_a_failed_syncfs_syncs_each_directory_in_order_and_finds_the_one_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_sync, "_syncfs", lambda: lambda fd: -1)
    dirs = [str(tmp_path / f"p{i}") for i in range(3)]
    for d in dirs:
        os.mkdir(d)
    synced: list[str] = []
    fs = OsFileSystem()
    real_sync_dir = fs.sync_dir

    def sync_dir(path: str) -> None:
        synced.append(path)
        if path == dirs[1]:
            raise OSError(errno.EIO, "Input/output error")
        real_sync_dir(path)

    monkeypatch.setattr(fs, "sync_dir", sync_dir)
    [probe] = files(tmp_path, 1)
    errors = sync_dirs(fs, [*dirs, str(tmp_path)], probe)
    assert [e is None for e in errors] == [True, False, True, True]
    assert isinstance(errors[1], OSError)
    assert errors[1].errno == errno.EIO
    assert synced == [*dirs, str(tmp_path)], "each, in order: the parent last"
    probe.close()
