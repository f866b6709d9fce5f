"""Log append and read throughput against raw write+fdatasync on the same disk, and
append throughput with retention deleting segments at the same time next to without.

1 KiB records in ~1 MiB batches, one flush (fdatasync) per batch. Runs of the
raw baseline and of the log alternate, and the median of each is reported, so
that disk noise hits both alike. The retention pair appends to 8 MiB segments,
one with retention keeping 32 MiB (a pass after every batch: the log start moves,
the checkpoint is written, whole segments are deleted), one keeping everything.
Besides printing them, it writes its figures, with each round's time per batch of
both sides, to `build/bench/log_bench.json` (`benchmarks.results`).
Run with `make bench` or `python -m benchmarks.log_bench [--dir DIR] [--mib N]
[--rounds R]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks import results
from epochlog.logs import configure
from epochlog_broker.log import LogConfig, OsFileSystem, PartitionLog, Record
from epochlog_broker.log.checkpoints import LogStartCheckpoint
from epochlog_broker.log.retention import RetentionLimits, decide_retention

RECORD = 1024
PER_BATCH = 1024  # 1 MiB of values per batch


def _fresh_data(batches: int) -> list[bytes]:
    # Distinct random bytes for every write: virtual disks that deduplicate or
    # compress blocks would otherwise flatter whichever side repeats itself.
    return [os.urandom(RECORD * PER_BATCH) for _ in range(batches)]


@dataclass(frozen=True)
class Timed:
    """One run: MiB/s of record values, and the seconds each batch took."""

    mib_per_s: float
    batch_s: list[float]


def raw_write_fdatasync(path: str, batches: int) -> float:
    """MiB/s of `batches` writes of 1 MiB, each followed by fdatasync."""
    return raw_write_fdatasync_timed(path, batches).mib_per_s


def raw_write_fdatasync_timed(path: str, batches: int) -> Timed:
    data = _fresh_data(batches)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    times: list[float] = []
    try:
        start = time.perf_counter()
        for buf in data:
            began = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            times.append(time.perf_counter() - began)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return Timed(batches * RECORD * PER_BATCH / elapsed / (1 << 20), times)


def log_append(directory: str, batches: int) -> tuple[Timed, float]:
    """Returns (MiB/s of record values with each batch's seconds, MiB/s of bytes written to
    disk)."""
    shutil.rmtree(directory, ignore_errors=True)
    plog = PartitionLog.open(OsFileSystem(), directory, LogConfig())
    batch_records = [
        [
            Record(buf[i * RECORD : (i + 1) * RECORD], key=b"key-%d" % (i % 100))
            for i in range(PER_BATCH)
        ]
        for buf in _fresh_data(batches)
    ]
    times: list[float] = []
    start = time.perf_counter()
    for records in batch_records:
        began = time.perf_counter()
        plog.append_records(records, leader_epoch=1, timestamp=1_700_000_000_000)
        plog.flush()
        times.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    on_disk = sum(s.size for s in plog.segments)
    plog.close()
    values = batches * PER_BATCH * RECORD
    return Timed(values / elapsed / (1 << 20), times), on_disk / elapsed / (1 << 20)


RETENTION_SEGMENT = 8 << 20
RETENTION_KEPT = 32 << 20


def log_append_with_retention(directory: str, batches: int, *, retention: bool) -> float:
    """MiB/s of record values appended to 8 MiB segments; with `retention`, a retention
    pass (decision, checkpoint, deletion) after every flush keeps about 32 MiB."""
    shutil.rmtree(directory, ignore_errors=True)
    fs = OsFileSystem()
    plog = PartitionLog.open(fs, directory, LogConfig(segment_bytes=RETENTION_SEGMENT))
    checkpoint = LogStartCheckpoint.load(fs, directory)
    limits = RetentionLimits(retention_ms=-1, retention_bytes=RETENTION_KEPT)
    batch_records = [
        [Record(buf[i * RECORD : (i + 1) * RECORD]) for i in range(PER_BATCH)]
        for buf in _fresh_data(batches)
    ]
    deleted = 0
    start = time.perf_counter()
    for records in batch_records:
        plog.append_records(records, leader_epoch=1, timestamp=1_700_000_000_000)
        end = plog.flush()
        if retention and len(plog.segments) > 1:
            decision = decide_retention(
                plog.segment_facts(),
                log_start_offset=plog.log_start_offset,
                high_watermark=end,
                limits=limits,
                now_ms=1_700_000_000_000,
            )
            if decision.segments and plog.advance_log_start(decision.log_start_offset):
                checkpoint.write({"bench-0": plog.log_start_offset})
                deleted += plog.delete_segments_below_start()
    elapsed = time.perf_counter() - start
    plog.close()
    assert not retention or deleted > 0, "retention deleted nothing: make the run longer"
    return batches * PER_BATCH * RECORD / elapsed / (1 << 20)


def log_read(directory: str) -> tuple[float, float]:
    """Sequential reads of the whole log: (records MiB/s decoded, batches MiB/s raw)."""
    plog = PartitionLog.open(OsFileSystem(), directory, LogConfig())
    end = plog.log_end_offset
    start = time.perf_counter()
    offset = 0
    total = 0
    while offset < end:
        recs = plog.read_records(offset, max_bytes=1 << 20)
        total += sum(len(r.value or b"") for r in recs)
        offset = recs[-1].offset + 1
    rec_rate = total / (time.perf_counter() - start) / (1 << 20)
    start = time.perf_counter()
    offset = 0
    raw = 0
    while offset < end:
        batches = plog.read_batches(offset, max_bytes=4 << 20)
        raw += sum(b.size for b in batches)
        offset = batches[-1].next_offset
    raw_rate = raw / (time.perf_counter() - start) / (1 << 20)
    plog.close()
    return rec_rate, raw_rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=".state/bench", help="a directory on the disk to measure")
    parser.add_argument("--mib", type=int, default=128, help="MiB written per run")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    configure("warning")
    stamp = results.Stamp.now()
    os.makedirs(args.dir, exist_ok=True)
    raw_path = os.path.join(args.dir, "raw.bin")
    log_dir = os.path.join(args.dir, "bench-0")
    raws: list[float] = []
    logs: list[float] = []
    disk: list[float] = []
    rounds: list[results.LogRound] = []
    print(f"log append bench: {args.mib} MiB per run, {args.rounds} rounds, dir {args.dir}")
    for rnd in range(args.rounds):
        raw = raw_write_fdatasync_timed(raw_path, args.mib)
        log, d = log_append(log_dir, args.mib)
        raws.append(raw.mib_per_s)
        logs.append(log.mib_per_s)
        disk.append(d)
        rounds.append(
            results.LogRound(
                round=rnd + 1,
                raw_mib_s=raw.mib_per_s,
                log_mib_s=log.mib_per_s,
                disk_mib_s=d,
                raw_batch_ms=[round(1000 * t, 3) for t in raw.batch_s],
                log_batch_ms=[round(1000 * t, 3) for t in log.batch_s],
            )
        )
        print(
            f"  round {rnd + 1}: raw {raws[-1]:7.1f} MiB/s   log {logs[-1]:7.1f} MiB/s", flush=True
        )
    reads, raw_reads = log_read(log_dir)
    kept: list[float] = []
    retained: list[float] = []
    for _ in range(args.rounds):
        kept.append(log_append_with_retention(log_dir, args.mib, retention=False))
        retained.append(log_append_with_retention(log_dir, args.mib, retention=True))
    raw_m, log_m, disk_m = statistics.median(raws), statistics.median(logs), statistics.median(disk)
    ratio = log_m / raw_m
    print()
    print("1 KiB records, 1024 per batch, fdatasync per batch (medians):")
    print(f"  raw os.write + os.fdatasync   {raw_m:8.1f} MiB/s")
    print(f"  log append + flush            {log_m:8.1f} MiB/s of record values")
    print(f"                                {disk_m:8.1f} MiB/s written to disk (with framing)")
    verdict = "met" if ratio >= 0.7 else "NOT met"
    print(f"  ratio log / raw               {ratio:8.2f}   (goal >= 0.70: {verdict})")
    print(f"  read records (decoded)        {reads:8.1f} MiB/s")
    print(f"  read batches (raw, replicas)  {raw_reads:8.1f} MiB/s")
    kept_m, retained_m = statistics.median(kept), statistics.median(retained)
    print("8 MiB segments, produce with retention deleting segments at the same time:")
    print(f"  without retention             {kept_m:8.1f} MiB/s of record values")
    print(f"  retention keeping 32 MiB      {retained_m:8.1f} MiB/s ({retained_m / kept_m:.2f}x)")
    shutil.rmtree(args.dir, ignore_errors=True)
    measured = Measured(raws, log_m, disk_m, reads, raw_reads, kept, retained)
    results.write(as_result(stamp, args, rounds, measured))
    # Figures, not a gate: the ratio moves with how fast this disk syncs today.
    return 0


@dataclass(frozen=True)
class Measured:
    """The figures `main` prints, for `result`."""

    raws: list[float]
    log: float
    disk: float
    reads: float
    raw_reads: float
    kept: list[float]
    retained: list[float]


def as_result(
    stamp: results.Stamp,
    args: argparse.Namespace,
    rounds: list[results.LogRound],
    m: Measured,
) -> results.Result[results.LogRound]:
    """The JSON of one run (`benchmarks.results`)."""
    raw = statistics.median(m.raws)
    kept, retained = statistics.median(m.kept), statistics.median(m.retained)
    ratio = m.log / raw
    return results.Result[results.LogRound](
        benchmark="log_bench",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(args, leave_out=("dir",)),
        baselines={
            "raw": results.Baseline(
                label="raw os.write + os.fdatasync, 1 MiB per call",
                unit="MiB/s",
                value=raw,
                runs=m.raws,
            ),
            "without_retention": results.Baseline(
                label="log append + flush to 8 MiB segments, no retention",
                unit="MiB/s",
                value=kept,
                runs=m.kept,
            ),
        },
        figures={
            "log": results.Figure(
                label="log append + flush, record values", unit="MiB/s", value=m.log
            ),
            "disk": results.Figure(
                label="log append + flush, bytes written to disk", unit="MiB/s", value=m.disk
            ),
            "read_records": results.Figure(
                label="read records (decoded)", unit="MiB/s", value=m.reads
            ),
            "read_batches": results.Figure(
                label="read batches (raw, as replicas do)", unit="MiB/s", value=m.raw_reads
            ),
            "with_retention": results.Figure(
                label="log append + flush, retention keeping 32 MiB", unit="MiB/s", value=retained
            ),
        },
        ratios={
            "log_over_raw": results.Ratio(
                label="log append / raw write+fdatasync", value=ratio, baseline="raw"
            ),
            "retention": results.Ratio(
                label="with retention / without",
                value=retained / kept,
                baseline="without_retention",
            ),
        },
        goals=[results.Goal.judge("log append / raw write+fdatasync", ratio, at_least=0.7)],
        rows=rounds,
        notes=[],
        status=0,
    )


if __name__ == "__main__":
    sys.exit(main())
