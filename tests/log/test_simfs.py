"""CrashFileSystem: exactly what is durable survives `crash()`, and nothing else."""

from __future__ import annotations

import random

import pytest

from epochlog_broker.log.fs import ensure_dir
from epochlog_broker.log.simfs import CrashFileSystem

from .helpers import file_bytes


@pytest.fixture
def fs() -> CrashFileSystem:
    fs = CrashFileSystem()
    ensure_dir(fs, "/d")
    return fs


def durable_file(fs: CrashFileSystem, path: str, data: bytes) -> None:
    f = fs.open(path, create=True)
    f.append(data)
    f.sync()
    f.close()
    fs.sync_dir("/d")


def test_unsynced_write_is_lost(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abc")
    f = fs.open("/d/f")
    f.append(b"def")
    assert file_bytes(fs, "/d/f") == b"abcdef"
    fs.crash()
    assert file_bytes(fs, "/d/f") == b"abc"


def test_synced_write_is_kept(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abc")
    f = fs.open("/d/f")
    f.pwrite(b"X", 1)
    f.sync()
    fs.crash()
    assert file_bytes(fs, "/d/f") == b"aXc"


def test_unsynced_truncate_is_lost(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abcdef")
    fs.open("/d/f").truncate(2)
    fs.crash()
    assert file_bytes(fs, "/d/f") == b"abcdef"


def test_create_without_dir_sync_is_lost_even_if_the_file_was_synced(fs: CrashFileSystem) -> None:
    f = fs.open("/d/new", create=True)
    f.append(b"data")
    f.sync()
    fs.crash()
    assert not fs.exists("/d/new")


def test_rename_without_dir_sync_is_reverted(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/a", b"old")
    durable_file(fs, "/d/a.tmp", b"new")
    fs.rename("/d/a.tmp", "/d/a")
    assert file_bytes(fs, "/d/a") == b"new"
    fs.crash()
    assert file_bytes(fs, "/d/a") == b"old"
    assert file_bytes(fs, "/d/a.tmp") == b"new"


def test_rename_with_dir_sync_is_kept(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/a", b"old")
    durable_file(fs, "/d/a.tmp", b"new")
    fs.rename("/d/a.tmp", "/d/a")
    fs.sync_dir("/d")
    fs.crash()
    assert file_bytes(fs, "/d/a") == b"new"
    assert not fs.exists("/d/a.tmp")


def test_remove_without_dir_sync_is_reverted(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/a", b"keep")
    fs.remove("/d/a")
    assert not fs.exists("/d/a")
    fs.crash()
    assert file_bytes(fs, "/d/a") == b"keep"


def test_rmdir_refuses_a_directory_that_is_not_empty(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/a", b"keep")
    with pytest.raises(OSError, match="not empty"):
        fs.rmdir("/d")
    with pytest.raises(NotADirectoryError):
        fs.rmdir("/d/a")
    assert fs.listdir("/d") == ["a"]


def test_rmdir_without_parent_sync_is_reverted_with_the_durable_entries(
    fs: CrashFileSystem,
) -> None:
    durable_file(fs, "/d/a", b"keep")
    fs.remove("/d/a")  # not made durable: the directory comes back holding it
    fs.rmdir("/d")
    assert not fs.exists("/d")
    fs.crash()
    assert file_bytes(fs, "/d/a") == b"keep"


def test_rmdir_with_parent_sync_is_kept(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/a", b"gone")
    fs.remove("/d/a")
    fs.sync_dir("/d")
    fs.rmdir("/d")
    fs.sync_dir("/")
    fs.crash()
    assert not fs.exists("/d")
    ensure_dir(fs, "/d")
    assert fs.listdir("/d") == []


def test_directory_without_parent_sync_is_lost() -> None:
    fs = CrashFileSystem()
    fs.mkdir("/x/y")
    fs.crash()
    assert not fs.exists("/x")
    ensure_dir(fs, "/x/y")
    fs.crash()
    assert fs.is_dir("/x/y")


def test_handles_from_before_a_crash_are_stale(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abc")
    f = fs.open("/d/f")
    fs.crash()
    with pytest.raises(OSError, match="stale handle"):
        f.pread(3, 0)
    with pytest.raises(OSError, match="stale handle"):
        f.append(b"x")
    assert file_bytes(fs, "/d/f") == b"abc"


def test_closed_handle_refuses_io(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abc")
    f = fs.open("/d/f")
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.size()


def test_fail_next_raises_eio_once_and_changes_nothing(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abc")
    f = fs.open("/d/f")
    fs.fail_next("write")
    with pytest.raises(OSError, match="injected") as err:
        f.append(b"def")
    assert err.value.errno == 5
    assert file_bytes(fs, "/d/f") == b"abc"
    f.append(b"def")
    assert file_bytes(fs, "/d/f") == b"abcdef"
    fs.fail_next("sync", 2)
    for _ in range(2):
        with pytest.raises(OSError, match="injected"):
            f.sync()
    f.sync()
    fs.crash()
    assert file_bytes(fs, "/d/f") == b"abcdef"


def test_crash_clears_pending_faults(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abc")
    fs.fail_next("write")
    fs.crash()
    fs.open("/d/f").append(b"x")


def test_corrupt_changes_durable_content(fs: CrashFileSystem) -> None:
    durable_file(fs, "/d/f", b"abcdef")
    fs.corrupt("/d/f", 2, b"ZZ")
    assert file_bytes(fs, "/d/f") == b"abZZef"
    fs.crash()
    assert file_bytes(fs, "/d/f") == b"abZZef"


@pytest.mark.parametrize("seed", range(40))
def test_random_crash_keeps_a_prefix_of_appends_with_a_possibly_torn_last_write(
    fs: CrashFileSystem, seed: int
) -> None:
    durable_file(fs, "/d/f", b"base|")
    f = fs.open("/d/f")
    writes = [bytes([65 + i]) * (i + 3) for i in range(6)]
    for w in writes:
        f.append(w)
    full = b"base|" + b"".join(writes)
    fs.crash(random.Random(seed))
    got = file_bytes(fs, "/d/f")
    assert full.startswith(got)
    assert got.startswith(b"base|")
    kept = got[5:]
    # Whole writes, then at most one partial one.
    whole = 0
    pos = 0
    while whole < len(writes) and kept[pos:].startswith(writes[whole]):
        pos += len(writes[whole])
        whole += 1
    assert len(kept) - pos < (len(writes[whole]) if whole < len(writes) else 1)


@pytest.mark.parametrize("seed", range(20))
def test_random_crash_keeps_a_prefix_of_directory_changes(fs: CrashFileSystem, seed: int) -> None:
    durable_file(fs, "/d/a", b"1")
    steps = []
    fs.open("/d/b", create=True).sync()
    steps.append({"a", "b"})
    fs.rename("/d/b", "/d/c")
    steps.append({"a", "c"})
    fs.remove("/d/a")
    steps.append({"c"})
    fs.crash(random.Random(seed))
    assert set(fs.listdir("/d")) in [{"a"}, *steps]
