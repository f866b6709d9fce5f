"""Checkpoint files: roundtrip, damage detection, atomic replacement, KAFKA-1647."""

from __future__ import annotations

import contextlib
import itertools
import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochlog_broker.log.checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    HighWatermarkCheckpoint,
    read_high_watermarks,
    read_leader_epochs,
    write_high_watermarks,
    write_leader_epochs,
)
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.log.fs import ensure_dir

from .helpers import FaultyFileSystem, file_bytes, write_file

D = "/brokerdata"
LE = f"{D}/leader-epoch-checkpoint"
HW = f"{D}/{REPLICATION_OFFSET_CHECKPOINT}"
ENTRIES = [EpochEntry(0, 0), EpochEntry(3, 1450), EpochEntry(4, 1450), EpochEntry(7, 2000)]


@pytest.fixture
def fs() -> FaultyFileSystem:
    fs = FaultyFileSystem()
    ensure_dir(fs, D)
    return fs


def framed(kind: str, *lines: str, count: int | None = None) -> bytes:
    """A checkpoint file with the given entry lines and a correct CRC line."""
    n = len(lines) if count is None else count
    body = f"epochlog-{kind} v1\n{n}\n".encode() + b"".join(f"{x}\n".encode() for x in lines)
    return body + f"crc32 {zlib.crc32(body):08x}\n".encode()


def test_leader_epochs_roundtrip(fs: FaultyFileSystem) -> None:
    assert read_leader_epochs(fs, LE) is None
    write_leader_epochs(fs, LE, ENTRIES)
    assert read_leader_epochs(fs, LE) == ENTRIES
    write_leader_epochs(fs, LE, [])
    assert read_leader_epochs(fs, LE) == []


def test_high_watermarks_roundtrip(fs: FaultyFileSystem) -> None:
    assert read_high_watermarks(fs, HW) is None
    hws = {"orders-0": 1200, "orders-1": 977, "a.b-c-12": 0}
    write_high_watermarks(fs, HW, hws)
    assert read_high_watermarks(fs, HW) == hws


def test_write_high_watermarks_refuses_bad_names_and_values(fs: FaultyFileSystem) -> None:
    with pytest.raises(ValueError, match="invalid partition name"):
        write_high_watermarks(fs, HW, {"Orders 0": 1})
    with pytest.raises(ValueError, match="negative high watermark"):
        write_high_watermarks(fs, HW, {"orders-0": -1})
    assert not fs.exists(HW)


LE_KIND = "leader-epoch-checkpoint"
GOOD_LE = framed(LE_KIND, "0 0", "3 1450")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\x00\xff garbage \x13", "not ASCII"),
        (b"just some text\nwithout a crc\n", "unexpected header|missing crc32|too short"),
        (GOOD_LE[: len(GOOD_LE) // 2], "does not end with a newline"),
        (GOOD_LE[:-9] + b"00000000\n", "CRC mismatch"),
        (GOOD_LE.replace(b"3 1450", b"3 1451"), "CRC mismatch"),
        (framed("replication-offset-checkpoint", "0 0"), "unexpected header"),
        (framed(LE_KIND, "0 0", "3 1450", count=3), "entry count 3 but 2 entries"),
        (framed(LE_KIND, "0 0", count=0), "entry count 0 but 1 entries"),
        (framed(LE_KIND, "3 100", "2 200"), "out of order"),
        (framed(LE_KIND, "3 100", "4 50"), "out of order"),
        (framed(LE_KIND, "3 100", "3 200"), "out of order"),
        (framed(LE_KIND, "x 0"), "epoch 'x'"),
        (framed(LE_KIND, "1 -5"), "negative start offset"),
        (framed(LE_KIND, "1 2 3"), "expected two fields"),
        (b"", "does not end with a newline"),
    ],
    ids=[
        "binary-garbage",
        "text-garbage",
        "partially-written",
        "wrong-crc",
        "edited-entry",
        "wrong-header",
        "count-too-high",
        "count-too-low",
        "epochs-go-back",
        "offsets-go-back",
        "repeated-epoch",
        "non-numeric",
        "negative",
        "extra-field",
        "empty",
    ],
)
def test_damaged_leader_epoch_checkpoint_raises_checkpoint_error(
    fs: FaultyFileSystem, raw: bytes, reason: str
) -> None:
    write_file(fs, LE, raw)
    with pytest.raises(CheckpointError, match=reason) as err:
        read_leader_epochs(fs, LE)
    assert LE in err.value.message
    assert err.value.details["path"] == LE


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (framed("replication-offset-checkpoint", "Orders_0 5"), "bad name"),
        (framed("replication-offset-checkpoint", "a-0 5", "a-0 6"), "bad name 'a-0'"),
        (framed("replication-offset-checkpoint", "a-0 five"), "high watermark 'five'"),
        (framed(LE_KIND, "0 0"), "unexpected header"),
    ],
    ids=["bad-name", "duplicate", "non-numeric", "wrong-kind"],
)
def test_damaged_replication_offset_checkpoint_raises_checkpoint_error(
    fs: FaultyFileSystem, raw: bytes, reason: str
) -> None:
    write_file(fs, HW, raw)
    with pytest.raises(CheckpointError, match=reason):
        read_high_watermarks(fs, HW)


@given(
    raw=st.binary(max_size=120)
    | st.text(alphabet="0123456789 abc-\ncr", max_size=80).map(str.encode)
)
def test_reading_arbitrary_bytes_returns_entries_or_raises_checkpoint_error(raw: bytes) -> None:
    fs = FaultyFileSystem()
    ensure_dir(fs, D)
    write_file(fs, LE, raw)
    write_file(fs, HW, raw)
    with contextlib.suppress(CheckpointError):
        read_leader_epochs(fs, LE)
    with contextlib.suppress(CheckpointError):
        read_high_watermarks(fs, HW)


@given(lines=st.lists(st.text(alphabet="0123456789 -x", max_size=12), max_size=5))
def test_well_framed_but_meaningless_entries_raise_checkpoint_error(lines: list[str]) -> None:
    fs = FaultyFileSystem()
    ensure_dir(fs, D)
    write_file(fs, LE, framed(LE_KIND, *lines))
    try:
        entries = read_leader_epochs(fs, LE)
    except CheckpointError:
        return
    assert entries is not None
    assert all(
        b.epoch > a.epoch and b.start_offset >= a.start_offset
        for a, b in itertools.pairwise(entries)
    )
    assert all(e.epoch >= 0 and e.start_offset >= 0 for e in entries)


@pytest.mark.parametrize("seed", [None, *range(6)])
@pytest.mark.parametrize("step", range(8))
def test_interrupted_write_leaves_the_old_or_the_new_version(
    fs: FaultyFileSystem, step: int, seed: int | None
) -> None:
    old, new = {"orders-0": 10}, {"orders-0": 20, "orders-1": 5}
    write_high_watermarks(fs, HW, old)
    fs.fail_after(step)
    try:
        write_high_watermarks(fs, HW, new)
        finished = True
    except OSError:
        finished = False
    fs.crash(None if seed is None else random.Random(seed))
    got = read_high_watermarks(fs, HW)
    assert got == new if finished else got in (old, new)


# -- HighWatermarkCheckpoint (KAFKA-1647) ---------------------------------------------


def test_partition_not_updated_keeps_the_hw_it_had_in_the_file(fs: FaultyFileSystem) -> None:
    write_high_watermarks(fs, HW, {"orders-0": 120, "orders-1": 77})
    cp = HighWatermarkCheckpoint.load(fs, D)
    assert cp.load_error is None
    assert cp.get("orders-1") == 77
    # orders-0 is hosted and advances; orders-1 is on disk but its leader is down.
    cp.update("orders-0", 150)
    written = cp.write(["orders-0", "orders-1"])
    assert written == {"orders-0": 150, "orders-1": 77}
    fs.crash()
    assert read_high_watermarks(fs, HW) == {"orders-0": 150, "orders-1": 77}
    again = HighWatermarkCheckpoint.load(fs, D)
    again.write(["orders-0", "orders-1"])
    assert read_high_watermarks(fs, HW) == {"orders-0": 150, "orders-1": 77}


def test_partition_whose_directory_is_gone_leaves_the_file(fs: FaultyFileSystem) -> None:
    write_high_watermarks(fs, HW, {"orders-0": 120, "orders-1": 77})
    cp = HighWatermarkCheckpoint.load(fs, D)
    cp.write(["orders-0"])
    assert read_high_watermarks(fs, HW) == {"orders-0": 120}
    assert cp.get("orders-1") is None


def test_an_unchanged_checkpoint_is_not_written_again(fs: FaultyFileSystem) -> None:
    write_high_watermarks(fs, HW, {"orders-0": 120})
    cp = HighWatermarkCheckpoint.load(fs, D)
    syncs = fs.syncs
    cp.write(["orders-0"])  # holds what the file holds
    cp.update("orders-0", 120)
    cp.write(["orders-0"])
    assert fs.syncs == syncs
    cp.update("orders-0", 121)
    cp.write(["orders-0"])
    assert fs.syncs > syncs
    fs.crash()
    assert read_high_watermarks(fs, HW) == {"orders-0": 121}
    # No file yet: the first write makes one, even of nothing.
    fs.remove(HW)
    fresh = HighWatermarkCheckpoint.load(fs, D)
    fresh.write([])
    assert read_high_watermarks(fs, HW) == {}


def test_new_partition_on_disk_starts_at_zero(fs: FaultyFileSystem) -> None:
    cp = HighWatermarkCheckpoint.load(fs, D)
    assert cp.known == {}
    assert cp.write(["orders-0"]) == {"orders-0": 0}


@pytest.mark.parametrize(
    "raw", [b"\xde\xad\xbe\xef", framed("replication-offset-checkpoint", "a-0 1")[:-3]]
)
def test_damaged_hw_file_is_kept_aside_and_reported(fs: FaultyFileSystem, raw: bytes) -> None:
    write_file(fs, HW, raw)
    cp = HighWatermarkCheckpoint.load(fs, D)
    assert isinstance(cp.load_error, CheckpointError)
    assert HW in cp.load_error.message
    assert cp.known == {}
    assert not fs.exists(HW)
    fs.crash()  # the move aside is durable
    assert file_bytes(fs, HW + ".damaged") == raw
    cp.write(["a-0"])
    assert read_high_watermarks(fs, HW) == {"a-0": 0}
    assert HighWatermarkCheckpoint.load(fs, D).load_error is None
