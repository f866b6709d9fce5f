"""Crash safety of the log, as a property: any sequence of appends, flushes,
truncations and checkpoint writes, cut by a power loss or a process crash at any
point (also in the middle of an operation), reopens to a valid log holding a prefix
of what was written, including everything that was durable."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from epochlog.protocol.errors import FencedLeaderEpochError, StorageError
from epochlog_broker.log import LogConfig, LogRecord, PartitionLog, Record
from epochlog_broker.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    HighWatermarkCheckpoint,
    read_high_watermarks,
    read_leader_epochs,
    write_high_watermarks,
    write_leader_epochs,
)
from epochlog_broker.log.epochs import EpochEntry
from epochlog_broker.log.fs import ensure_dir
from epochlog_broker.log.inspect import check_partition_dir
from tests.conftest import examples

from .helpers import (
    FaultyFileSystem,
    durable_snapshot,
    epoch_starts,
    read_all,
    read_all_batches,
    snapshot,
)

DATA = "/data"
PDIR = f"{DATA}/orders-0"
HW_FILE = f"{DATA}/{REPLICATION_OFFSET_CHECKPOINT}"
SPARE_DIR = f"{DATA}/spare"
SPARE_EPOCHS = f"{SPARE_DIR}/{LEADER_EPOCH_CHECKPOINT}"
# A batch of the records drawn below is at most ~650 bytes: segments hold 1-8 batches.
CONFIG = LogConfig(segment_bytes=1000, max_batch_bytes=700, index_interval_bytes=150)
PARTITIONS = ["orders-0", "orders-1", "payments-3", "x.y-2"]

Spec = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None]
ascii_text = st.text(alphabet="abcdefgh", max_size=4)
record_specs = st.tuples(
    st.none() | st.binary(max_size=8),  # key
    st.none() | st.binary(max_size=64),  # value
    st.lists(st.tuples(ascii_text, st.binary(max_size=8)), max_size=2),  # headers
    st.none() | st.integers(0, 2**42),  # timestamp
)
batches = st.lists(record_specs, min_size=1, max_size=4)
bursts = st.lists(st.tuples(batches, st.sampled_from([0, 0, 0, 1, 2])), min_size=1, max_size=4)
epoch_lists = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 50)), max_size=4).map(
    lambda steps: [
        EpochEntry(sum(e for e, _ in steps[: i + 1]), sum(o for _, o in steps[: i + 1]))
        for i in range(len(steps))
    ]
)
hw_maps = st.dictionaries(st.sampled_from(PARTITIONS), st.integers(0, 10**6), max_size=4)
seeds = st.none() | st.integers(0, 2**32 - 1)
restarts = st.sampled_from(["power", "process"])
# How many file system calls an interrupted operation gets to make before one fails.
afters = st.integers(0, 4) | st.integers(0, 12) | st.integers(0, 30)


@dataclass
class Outcome:
    """What a restart may find: `candidate[:n]` for `low <= n <= len(candidate)`."""

    candidate: list[LogRecord]
    low: int


class CrashingLog(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs = FaultyFileSystem()
        ensure_dir(self.fs, SPARE_DIR)
        self.log = PartitionLog.open(self.fs, PDIR, CONFIG)
        self.history: list[LogRecord] = []  # the logical log: appends minus truncations
        self.durable = 0  # records that must survive a power loss
        self.epoch = 0
        self.serial = 0
        self.pending: list[LogRecord] = []  # the records of an append in progress
        # Contents the two checkpoint files may be found with after a crash.
        self.hw_versions: list[dict[str, int] | None] = [None]
        self.spare_versions: list[list[EpochEntry] | None] = [None]

    # -- model helpers ----------------------------------------------------------------

    def _persisted(self) -> int:
        """What the log promises is on disk: flushed by us, or by a segment roll."""
        return max(self.durable, self.log.persisted_log_end_offset)

    def _records(self, specs: list[Spec]) -> list[Record]:
        out = []
        for key, value, headers, ts in specs:
            self.serial += 1  # a unique header: no two records are ever equal
            tagged = (*headers, ("n", str(self.serial).encode()))
            out.append(Record(value, key, tuple(tagged), ts))
        return out

    def _expected(self, recs: list[Record], epoch: int, ts: int) -> list[LogRecord]:
        base = len(self.history)
        return [
            LogRecord(
                base + i,
                ts if r.timestamp is None else r.timestamp,
                r.key,
                r.value,
                r.headers,
                epoch,
            )
            for i, r in enumerate(recs)
        ]

    # -- operations -------------------------------------------------------------------

    def _append(self, specs: list[Spec], bump: int, ts: int) -> None:
        recs = self._records(specs)
        epoch = self.epoch + bump
        self.epoch = epoch  # even if the append fails: epochs never go back
        self.pending = self._expected(recs, epoch, ts)
        result = self.log.append_records(recs, leader_epoch=epoch, timestamp=ts)
        assert result.base_offset == len(self.history)
        assert result.log_end_offset == len(self.history) + len(recs)
        self.history = self.history + self.pending
        self.pending = []

    @rule(burst=bursts, ts=st.integers(0, 2**42))
    def append(self, burst: list[tuple[list[Spec], int]], ts: int) -> None:
        for specs, bump in burst:
            self._append(specs, bump, ts)

    @rule()
    def append_with_stale_epoch(self) -> None:
        if self.log.latest_epoch <= 0:
            return
        try:
            self.log.append_records(
                [Record(b"zombie")], leader_epoch=self.log.latest_epoch - 1, timestamp=0
            )
        except FencedLeaderEpochError:
            return
        raise AssertionError("a stale epoch was accepted")

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == len(self.history)
        self.durable = len(self.history)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(0, len(self.history)), label="truncate_to")
        assert self.log.truncate_to(k) == (k < len(self.history))
        self.durable = min(self._persisted(), k)
        self.history = self.history[:k]

    @rule(hws=hw_maps, via_owner=st.booleans())
    def write_hw_checkpoint(self, hws: dict[str, int], via_owner: bool) -> None:
        self.hw_versions = [self._write_hws(hws, via_owner)]

    @rule(entries=epoch_lists)
    def write_spare_epochs(self, entries: list[EpochEntry]) -> None:
        write_leader_epochs(self.fs, SPARE_EPOCHS, entries)
        self.spare_versions = [entries]

    def _write_hws(self, hws: dict[str, int], via_owner: bool) -> dict[str, int]:
        """Write `hws` directly, or through the owner for the partitions in `hws` plus
        orders-0 (on disk, never updated here); returns the expected new content."""
        if not via_owner:
            write_high_watermarks(self.fs, HW_FILE, hws)
            return hws
        on_file = read_high_watermarks(self.fs, HW_FILE) or {}
        on_disk = set(hws) | {"orders-0"}
        # KAFKA-1647: a partition not updated keeps the HW it had in the file.
        expected = {name: hws.get(name, on_file.get(name, 0)) for name in on_disk}
        cp = HighWatermarkCheckpoint.load(self.fs, DATA)
        assert cp.load_error is None
        for name, hw in hws.items():
            cp.update(name, hw)
        assert cp.write(sorted(on_disk)) == expected
        return expected

    # -- crashes ----------------------------------------------------------------------

    @rule(seed=seeds)
    def power_loss(self, seed: int | None) -> None:
        self._restart("power", seed, Outcome(self.history, self._persisted()))

    @rule()
    def process_crash(self) -> None:
        self._restart("process", None, Outcome(self.history, len(self.history)))

    @rule(seed=seeds)
    def clean_shutdown(self, seed: int | None) -> None:
        self.log.close()
        self._restart("power", seed, Outcome(self.history, len(self.history)), clean=True)

    # Three rules, so that interrupted operations make up a good share of the steps.
    @rule(after=afters, how=restarts, seed=seeds, data=st.data())
    def interrupted_append(self, after: int, how: str, seed: int | None, data: st.DataObject):
        self._interrupted("append", after, how, seed, data)

    @rule(after=afters, how=restarts, seed=seeds, data=st.data())
    def interrupted_truncate(self, after: int, how: str, seed: int | None, data: st.DataObject):
        self._interrupted("truncate", after, how, seed, data)

    @rule(
        op=st.sampled_from(["flush", "hw", "spare", "close"]),
        after=afters,
        how=restarts,
        seed=seeds,
        data=st.data(),
    )
    def interrupted_other(
        self, op: str, after: int, how: str, seed: int | None, data: st.DataObject
    ) -> None:
        self._interrupted(op, after, how, seed, data)

    def _interrupted(
        self, op: str, after: int, how: str, seed: int | None, data: st.DataObject
    ) -> None:
        """Fail the file system call after `after` others inside `op`, then restart."""
        before, persisted = self.history, self._persisted()
        full = before  # the most the operation can leave behind
        action: Callable[[], object]
        if op == "append":
            burst = data.draw(bursts, label="burst")

            def action() -> object:
                for specs, bump in burst:
                    self._append(specs, bump, 5)
                return None

        elif op == "truncate":
            k = data.draw(st.integers(0, len(before)), label="truncate_to")

            def action() -> object:
                return self.log.truncate_to(k)

        elif op == "flush":
            action = self.log.flush
        elif op == "close":
            action = self.log.close
        elif op == "hw":
            hws = data.draw(hw_maps, label="hws")
            self.hw_versions = [*self.hw_versions, hws]

            def action() -> object:
                write_high_watermarks(self.fs, HW_FILE, hws)
                return None

        else:
            entries = data.draw(epoch_lists, label="entries")
            self.spare_versions = [*self.spare_versions, entries]

            def action() -> object:
                write_leader_epochs(self.fs, SPARE_EPOCHS, entries)
                return None

        self.fs.fail_after(after)
        try:
            action()
            finished = True
        except (StorageError, OSError):
            finished = False
        self.fs.countdown = None

        # Lower bounds: a power loss keeps what was durable (flushed, or claimed
        # persisted by the log); a process crash keeps everything written.
        power_low = max(persisted, self.log.persisted_log_end_offset)
        process_low = len(before)
        if op == "append":
            # The appends that returned are in the page cache; a failed one may be too.
            full = self.history + ([] if finished else self.pending)
            process_low = len(self.history)
        elif op == "truncate":
            power_low, process_low = min(persisted, k), k
            if finished:
                full = before[:k]
        elif finished:
            if op in ("flush", "close"):
                power_low = len(full)
            elif op == "hw":
                self.hw_versions = [hws]
            elif op == "spare":
                self.spare_versions = [entries]
        self.pending = []
        low = power_low if how == "power" else process_low
        self._restart(how, seed, Outcome(full, low))

    def _restart(self, how: str, seed: int | None, outcome: Outcome, clean: bool = False) -> None:
        if how == "power":
            self.fs.crash(None if seed is None else random.Random(seed))
        self.log = PartitionLog.open(self.fs, PDIR, CONFIG)
        report = self.log.recovery
        # Recovery makes durable everything it keeps, directory entries included:
        # the log is built on it from now on.
        assert durable_snapshot(self.fs) == snapshot(self.fs)
        got = read_all(self.log)
        n = len(got)
        assert outcome.low <= n <= len(outcome.candidate), (outcome.low, n, len(outcome.candidate))
        assert got == outcome.candidate[:n]
        assert self.log.log_end_offset == report.log_end_offset == n
        if clean:
            assert report.clean_shutdown
            assert (report.truncated_bytes, report.indexes_rebuilt) == (0, [])
        # The epoch history is exactly what the batches imply, in memory and on disk.
        entries = epoch_starts(read_all_batches(self.log))
        assert list(self.log.epochs.entries) == entries
        assert read_leader_epochs(self.fs, f"{PDIR}/{LEADER_EPOCH_CHECKPOINT}") == entries
        assert not [name for name in self.fs.listdir(PDIR) if name.endswith(".tmp")]
        # An independent end-to-end scan of the directory finds nothing wrong either.
        check = check_partition_dir(self.fs, PDIR)
        assert (check.problems, check.torn_tail, check.epoch_checkpoint) == ([], None, "ok")
        assert check.log_end_offset == n
        # Checkpoint files: an old or the new version, never torn, never an error.
        hws = read_high_watermarks(self.fs, HW_FILE)
        assert hws in self.hw_versions
        owner = HighWatermarkCheckpoint.load(self.fs, DATA)
        assert owner.load_error is None
        assert owner.known == (hws or {})
        spare = read_leader_epochs(self.fs, SPARE_EPOCHS)
        assert spare in self.spare_versions
        if how == "power":
            self.hw_versions, self.spare_versions = [hws], [spare]
        # Recovery synced what it kept: all of it must survive the next power loss.
        self.history, self.durable = got, n

    # -- checked after every step ------------------------------------------------------

    @invariant()
    def log_reads_back_the_model(self) -> None:
        assert self.log.log_end_offset == len(self.history)
        assert read_all(self.log) == self.history
        assert self.log.persisted_log_end_offset <= self.log.log_end_offset

    def teardown(self) -> None:
        self.log.close()


CrashingLog.TestCase.settings = settings(
    max_examples=examples(200), stateful_step_count=50, deadline=None
)
test_crashing_log = CrashingLog.TestCase
