"""`epochlog demo --storage`: the storage walkthrough.

Appends on the real disk, a torn write cut on recovery, truncation, and
simulated power losses (`CrashFileSystem`) that keep every fsynced record.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time

from epochlog_broker.log import CrashFileSystem, LogConfig, OsFileSystem, PartitionLog, Record
from epochlog_broker.log.segment import segment_name


def _say(text: str = "") -> None:
    print(text, flush=True)


def _records(n: int, prefix: str) -> list[Record]:
    return [Record(f"{prefix}-{i}".encode(), key=f"k{i % 7}".encode()) for i in range(n)]


def _real_disk(state_dir: str) -> None:
    fs = OsFileSystem()
    pdir = os.path.join(state_dir, "orders-0")
    shutil.rmtree(pdir, ignore_errors=True)
    now = int(time.time() * 1000)
    _say("== 1. A partition log on the real disk")
    plog = PartitionLog.open(fs, pdir)
    for epoch in (0, 0, 1, 1, 3):
        r = plog.append_records(_records(100, f"e{epoch}"), leader_epoch=epoch, timestamp=now)
        plog.flush()
        _say(
            f"   appended offsets {r.base_offset}..{r.last_offset} in leader epoch {epoch}, fsynced"
        )
    _say(f"   log end offset {plog.log_end_offset}, persisted {plog.persisted_log_end_offset}")
    _say(f"   leader-epoch-checkpoint: {[(e.epoch, e.start_offset) for e in plog.epochs.entries]}")
    seg_path = plog.active.log_path
    plog.close()

    _say("\n== 2. The process dies halfway through writing a batch (torn tail)")
    from epochlog.protocol.batch import encode_batch

    half = encode_batch(_records(100, "torn"), base_offset=500, leader_epoch=3, timestamp=now)
    with open(seg_path, "ab") as f:
        f.write(half[: len(half) // 2])
    _say(f"   wrote {len(half) // 2} of {len(half)} bytes of the next batch to {segment_name(0)}")
    plog = PartitionLog.open(fs, pdir)
    rep = plog.recovery
    _say(
        f"   reopened: cut {rep.truncated_bytes} bytes ({rep.truncated_batches} batch, "
        f"{rep.truncated_reason}); log end offset {plog.log_end_offset}"
    )
    last = plog.read_records(plog.log_end_offset - 1)
    _say(f"   last record still there: offset {last[0].offset} = {last[0].value!r}")

    _say("\n== 3. Becoming follower: truncate at the divergence point (inside a batch)")
    plog.truncate_to(250)
    _say(
        f"   log end offset {plog.log_end_offset}; epochs now "
        f"{[(e.epoch, e.start_offset) for e in plog.epochs.entries]}"
    )
    plog.close()
    plog = PartitionLog.open(fs, pdir)
    _say(
        f"   clean shutdown recognised on reopen: {plog.recovery.clean_shutdown}; "
        f"log end offset {plog.log_end_offset}"
    )
    plog.close()


def _power_losses(runs: int = 25, seed: int = 7) -> None:
    _say(f"\n== 4. {runs} power losses on the crash-simulating disk (seed {seed})")
    rng = random.Random(seed)
    acked = lost = truncated_bytes = 0
    cfg = LogConfig(segment_bytes=64 * 1024, max_batch_bytes=64 * 1024, index_interval_bytes=512)
    for run in range(runs):
        fs = CrashFileSystem()
        plog = PartitionLog.open(fs, "/data/orders-0", cfg)
        flushed: list[bytes] = []
        pending: list[bytes] = []
        epoch = 0
        for step in range(rng.randint(5, 40)):
            epoch += rng.random() < 0.1
            values = [f"r{run}-{step}-{i}".encode() for i in range(rng.randint(1, 30))]
            plog.append_records([Record(v) for v in values], leader_epoch=epoch, timestamp=step)
            pending.extend(values)
            if rng.random() < 0.6:
                plog.flush()
                flushed.extend(pending)
                pending.clear()
        for tail in range(rng.randint(1, 3)):
            values = [f"r{run}-tail{tail}-{i}".encode() for i in range(rng.randint(1, 30))]
            plog.append_records([Record(v) for v in values], leader_epoch=epoch, timestamp=0)
            pending.extend(values)
        fs.crash(rng)
        plog = PartitionLog.open(fs, "/data/orders-0", cfg)
        got = [r.value for r in plog.read_records(0, max_bytes=1 << 30)]
        assert got[: len(flushed)] == flushed, "a flushed record was lost"
        assert got == (flushed + pending)[: len(got)], "the log is not a prefix of what was written"
        acked += len(flushed)
        lost += len(flushed) + len(pending) - len(got)
        truncated_bytes += plog.recovery.truncated_bytes
    _say(f"   {acked} fsynced records written across all runs: every one survived")
    _say(f"   {lost} records that were never fsynced were lost, as allowed")
    _say(f"   {truncated_bytes} bytes of torn batches cut on recovery")


def run_demo(state_dir: str | None = None) -> int:
    own = state_dir is None
    base = tempfile.mkdtemp(prefix="epochlog-demo-", dir=".") if own else state_dir
    assert base is not None
    os.makedirs(base, exist_ok=True)
    try:
        _real_disk(base)
        _power_losses()
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)
    _say("\nThe replicated cluster end to end: `epochlog demo` (without --storage).")
    return 0
