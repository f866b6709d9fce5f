"""`PartitionLog`: one replica's log of one partition, on any `FileSystem`.

It owns the segments of the partition directory, the leader epoch history
(persisted as `leader-epoch-checkpoint`) and recovery on open. Durability is
explicit: `append_*` returns the new log end, `flush()` fsyncs and only then
advances `persisted_log_end_offset`. Nothing above this layer may treat data as
on disk before that.

Invariants kept across crashes:
- the epoch checkpoint always covers every batch on disk (a new epoch is
  checkpointed before its first batch is written; entries past the log end are
  dropped on recovery);
- only the last segment can hold unsynced bytes (a segment is fsynced before
  the next one is created), so only it can have a torn tail;
- recovery leaves everything it keeps durable, directory entries included, so
  nothing built on it afterwards can be undone by a power loss;
- a torn tail is cut back to the last valid batch and reported; bytes that fail
  their checks while valid batches follow them are damage to data that was
  already on disk, and opening fails with CorruptRecordError naming the file
  and position instead of dropping them.

The log start offset (`log_start_offset`) is the first offset readers may ask for.
It is the first segment's base offset, or higher once retention or DeleteRecords
moved it (`advance_log_start`); the owner of the log persists it in the broker's
`log-start-offset-checkpoint` before segments below it are removed
(`delete_segments_below_start`) and hands it back to `open`, which removes segments
a crash left below it. Only a prefix of segments is ever removed, never the active
one, so a crash in the middle of a deletion leaves a contiguous log.
"""

from __future__ import annotations

import bisect
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import structlog

from epochlog.protocol.batch import (
    HEADER,
    BatchFormatError,
    BatchHeader,
    LogRecord,
    Record,
    RecordBatch,
    encode_batch,
)
from epochlog.protocol.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from epochlog_broker.log.batch_sync import sync_one
from epochlog_broker.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    TMP_SUFFIX,
    CheckpointError,
    atomic_write,
    read_leader_epochs,
    render_leader_epochs,
    write_leader_epochs,
)
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.epochs import EpochHistory
from epochlog_broker.log.fs import File, FileSystem, ensure_dir
from epochlog_broker.log.retention import SegmentFacts
from epochlog_broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    REDO_SUFFIX,
    TIME_INDEX_SUFFIX,
    ScanFailure,
    Segment,
    find_valid_batch_after,
    iter_batches,
    parse_segment_name,
    segment_name,
)

CLEAN_SHUTDOWN = ".clean-shutdown"
log = structlog.get_logger("epochlog.log")


@dataclass
class RecoveryReport:
    """What opening the log found and did."""

    partition: str
    clean_shutdown: bool = False
    segments: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    truncated_bytes: int = 0
    truncated_batches: int = 0
    truncated_reason: str | None = None
    indexes_rebuilt: list[str] = field(default_factory=list)
    epoch_checkpoint: str = "ok"
    epoch_entries_dropped: int = 0
    redo_applied: bool = False
    temp_files_removed: list[str] = field(default_factory=list)
    segments_below_start_removed: int = 0
    """Segments a crash in the middle of a deletion left below the log start."""

    @property
    def truncated(self) -> bool:
        return self.truncated_bytes > 0


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_end_offset: int
    leader_epoch: int


class PartitionLog:
    def __init__(self, fs: FileSystem, directory: str, config: LogConfig, name: str) -> None:
        self.fs = fs
        self.directory = directory
        self.config = config
        self.name = name
        self.segments: list[Segment] = []
        self.epochs = EpochHistory()
        self.log_end_offset = 0
        self.persisted_log_end_offset = 0
        self._log_start_offset = 0
        self.recovery = RecoveryReport(partition=name)
        self._failed: str | None = None
        self._closed = False
        self._epochs_version = 0
        """Versions of the leader-epoch-checkpoint written to temporary files so far."""
        self._epochs_pending = 0
        """The newest version not installed yet (0: none)."""
        self._epochs_installed = 0
        self.rewrites = 0
        """Times records this log held above its start were dropped (a truncation, or
        starting over): while it is unchanged, a copy of offsets below the log end is still
        what the log holds there."""

    # -- open / recovery --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        directory: str,
        config: LogConfig | None = None,
        *,
        name: str | None = None,
        log_start_offset: int | None = None,
    ) -> PartitionLog:
        """Open and recover the log; `log_start_offset` is the start its owner last
        checkpointed (None: the first segment's base offset)."""
        plog = cls(fs, directory, config or LogConfig(), name or posixpath.basename(directory))
        try:
            plog._recover(log_start_offset)
        except OSError as exc:
            plog._close_segments()
            raise StorageError(
                f"I/O error opening log {plog.name}: {exc.strerror or exc}", partition=plog.name
            ) from exc
        except BaseException:
            plog._close_segments()
            raise
        return plog

    @classmethod
    def create(
        cls,
        fs: FileSystem,
        directory: str,
        config: LogConfig | None = None,
        *,
        name: str | None = None,
        log_start_offset: int | None = None,
    ) -> PartitionLog:
        """A new, empty log in `directory`, which does not exist yet, with none of the
        directory syncs that make it durable: the caller syncs `directory`, then its parent,
        before it appends to the log or tells anyone of it. A broker handed many new
        partitions at once creates them all and syncs their directories together, rather
        than paying `open`'s seven syncs for each.

        Until those syncs a crash may keep any part of it: the directory without its
        segment, or nothing. `open` recovers each of these as the same empty log: nothing
        was in it to lose."""
        plog = cls(fs, directory, config or LogConfig(), name or posixpath.basename(directory))
        start = log_start_offset or 0
        try:
            if fs.exists(directory):
                raise FileExistsError(17, "the log's directory exists", directory)
            fs.mkdir(directory)
            path = posixpath.join(directory, segment_name(start))
            seg = Segment(fs, directory, start, fs.open(path, create=True, truncate=True))
            seg.next_offset = start
            plog.segments.append(seg)
        except OSError as exc:
            plog._close_segments()
            raise StorageError(
                f"I/O error creating log {plog.name}: {exc.strerror or exc}", partition=plog.name
            ) from exc
        plog.log_end_offset = plog.persisted_log_end_offset = start
        plog._log_start_offset = start
        report = plog.recovery
        report.epoch_checkpoint = "new"
        report.segments = 1
        report.log_start_offset = report.log_end_offset = start
        return plog

    @classmethod
    def unavailable(
        cls, fs: FileSystem, directory: str, config: LogConfig, *, name: str, reason: str
    ) -> PartitionLog:
        """A stand-in for a log that did not open: empty, and every use raises StorageError.

        It lets the broker keep hosting the replica (and report why it is offline)
        until the log can be opened again.
        """
        plog = cls(fs, directory, config, name)
        plog._failed = reason
        plog._closed = True
        return plog

    @property
    def failed(self) -> str | None:
        """Why the log refuses every use after a storage error (None: it does not)."""
        return self._failed

    def mark_failed(self, reason: str) -> None:
        """Refuse every further use: the data under the log is not trusted any more."""
        if self._failed is None:
            self._failed = reason
            log.error("log_offline", partition=self.name, error=reason)

    def release(self) -> None:
        """Close the files without marking the shutdown clean (a log given up after an error)."""
        if not self._closed:
            self.mark_failed("released")
            self._close_segments()
            self._closed = True

    def _close_segments(self) -> None:
        for seg in self.segments:
            seg.close()

    def _recover(self, start_hint: int | None) -> None:
        fs, d, report = self.fs, self.directory, self.recovery
        ensure_dir(fs, d)
        names = fs.listdir(d)
        for n in names:
            if n.endswith(TMP_SUFFIX):
                fs.remove(posixpath.join(d, n))
                report.temp_files_removed.append(n)
        report.clean_shutdown = CLEAN_SHUTDOWN in names
        if report.clean_shutdown:
            # Must be gone durably before any new write, or a later crash would be
            # mistaken for a clean shutdown and the torn tail trusted.
            fs.remove(posixpath.join(d, CLEAN_SHUTDOWN))
        # Always, not only after the removals above: a process that crashed between a
        # create, rename or remove and the directory sync after it (a roll, a
        # truncation, a checkpoint, this directory's own creation) left that change
        # only in the page cache, where a power loss can still undo it: a segment
        # holding later fsynced appends could vanish, a removed one come back.
        fs.sync_dir(d)
        fs.sync_dir(posixpath.dirname(d.rstrip("/") or "/") or ".")

        bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
        if start_hint is not None:
            bases = self._drop_below(bases, start_hint)
        for base in bases:
            seg = Segment(fs, d, base, fs.open(posixpath.join(d, segment_name(base))))
            if seg.apply_redo():
                report.redo_applied = True
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(self._create_segment(start_hint or 0))

        for i, seg in enumerate(self.segments):
            last = i == len(self.segments) - 1
            self._recover_segment(seg, last=last, trust_index=report.clean_shutdown or not last)
            if not last and seg.next_offset != self.segments[i + 1].base_offset:
                raise seg.corrupt(
                    seg.size,
                    f"segment ends at offset {seg.next_offset} but the next segment "
                    f"starts at {self.segments[i + 1].base_offset}",
                )
        # Data that survived a process crash may still sit only in the page cache.
        self.active.file.sync()
        self.log_end_offset = self.active.next_offset
        self.persisted_log_end_offset = self.log_end_offset
        self._log_start_offset = self.segments[0].base_offset
        if start_hint is not None and start_hint > self.log_end_offset:
            # The log was to start past its end (a follower starting over at the
            # leader's log start, or an unsynced tail lost below a start taken from
            # the leader): everything here is below the start.
            self._start_over(start_hint)
        elif start_hint is not None:
            self._log_start_offset = max(self._log_start_offset, start_hint)
        self._recover_epochs()
        report.segments = len(self.segments)
        report.log_start_offset = self.log_start_offset
        report.log_end_offset = self.log_end_offset
        log.info(
            "log_recovered",
            partition=self.name,
            logStartOffset=self.log_start_offset,
            logEndOffset=self.log_end_offset,
            cleanShutdown=report.clean_shutdown,
            truncatedBytes=report.truncated_bytes,
            truncatedBatches=report.truncated_batches,
            indexesRebuilt=len(report.indexes_rebuilt),
            epochCheckpoint=report.epoch_checkpoint,
        )

    def _drop_below(self, bases: list[int], start: int) -> list[int]:
        """Remove the segments wholly below `start` that a crash in the middle of a
        deletion left behind; the bases kept."""
        n = 0
        while n + 1 < len(bases) and bases[n + 1] <= start:
            n += 1
        for base in bases[:n]:
            self._remove_segment_files(base)
        if n:
            self.fs.sync_dir(self.directory)
            self.recovery.segments_below_start_removed = n
        return bases[n:]

    def _remove_segment_files(self, base: int) -> None:
        # The log file last: a crash leaves a segment without its index (rebuilt), never
        # an index without its segment.
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, REDO_SUFFIX, LOG_SUFFIX):
            path = posixpath.join(self.directory, segment_name(base, suffix))
            if self.fs.exists(path):
                self.fs.remove(path)

    def _recover_segment(self, seg: Segment, *, last: bool, trust_index: bool) -> None:
        interval = self.config.index_interval_bytes
        start_pos, start_offset = 0, seg.base_offset
        loaded = seg.load_index() if trust_index else None
        index = None
        if loaded is not None:
            # An index without entries (a segment smaller than one index interval) is
            # valid too: scanning then starts at the segment's first batch.
            index, seg.time_index = loaded
            start_offset, start_pos = index.last()
            seg.index = index
            # Every batch before the last entry is at most its timestamp; the scan of the
            # rest below adds theirs.
            seg.max_timestamp = seg.time_index.last_timestamp()
        elif trust_index and seg.size > 0:
            self.recovery.indexes_rebuilt.append(segment_name(seg.base_offset, INDEX_SUFFIX))
        failure: ScanFailure | None = None
        for item in iter_batches(seg.file, start_pos, seg.size, start_offset):
            if isinstance(item, ScanFailure):
                failure = item
                break
            seg.note_scanned(item[0], item[1], interval)
        if failure is None:
            if index is None and seg.size > 0 and not last:
                seg.write_index()
            return
        if index is not None and len(index) > 0 and failure.position == start_pos:
            # The cached index points at something that is not a batch start: rebuild.
            seg.reset_indexes()
            seg.max_timestamp = seg.first_timestamp = -1
            self.recovery.indexes_rebuilt.append(segment_name(seg.base_offset, INDEX_SUFFIX))
            self._recover_segment(seg, last=last, trust_index=False)
            return
        offset = seg.next_offset
        if not last or find_valid_batch_after(seg.file, failure.position, seg.size, offset):
            raise seg.corrupt(failure.position, failure.reason, offset)
        # A torn tail: only unsynced bytes of the last segment can be here.
        dropped = seg.size - failure.position
        batches = sum(1 for _ in _frames(seg, failure.position)) or 1
        seg.drop_cache()
        seg.file.truncate(failure.position)
        seg.file.sync()
        seg.size = failure.position
        self.recovery.truncated_bytes += dropped
        self.recovery.truncated_batches += batches
        self.recovery.truncated_reason = failure.reason
        log.warning(
            "log_tail_truncated",
            partition=self.name,
            segment=segment_name(seg.base_offset),
            position=failure.position,
            logEndOffset=offset,
            droppedBytes=dropped,
            droppedBatches=batches,
            reason=failure.reason,
        )

    def _recover_epochs(self) -> None:
        path = posixpath.join(self.directory, LEADER_EPOCH_CHECKPOINT)
        report = self.recovery
        try:
            entries = read_leader_epochs(self.fs, path)
            if entries is None:
                report.epoch_checkpoint = "missing"
            else:
                self.epochs = EpochHistory(entries)
        except CheckpointError as exc:
            report.epoch_checkpoint = f"damaged ({exc.message})"
            entries = None
        before = len(self.epochs)
        self.epochs.truncate_from_end(self.log_end_offset)
        report.epoch_entries_dropped = before - len(self.epochs)
        if entries is None or not self._epochs_cover_log():
            if entries is not None:
                report.epoch_checkpoint = "inconsistent with the log"
            self.epochs = self._scan_epochs()
            report.epoch_checkpoint += ", rebuilt from the log"
        if entries is None or report.epoch_entries_dropped or "rebuilt" in report.epoch_checkpoint:
            self._write_epochs()

    def _epochs_cover_log(self) -> bool:
        """Check the history against the batches of the last segment (the only ones a
        crash can leave out of step with the checkpoint)."""
        expected = self.active.base_offset
        for item in iter_batches(self.active.file, 0, self.active.size, expected):
            if isinstance(item, ScanFailure):
                # After a clean shutdown recovery trusts the index and checks only the
                # segment's tail; damage before it surfaces here.
                raise self.active.corrupt(item.position, item.reason, expected)
            h = item[1]
            expected = h.next_offset
            if self.epochs.epoch_for_offset(h.base_offset) != h.leader_epoch:
                return False
        return not (self.log_end_offset > self.log_start_offset and not len(self.epochs))

    def _scan_epochs(self) -> EpochHistory:
        history = EpochHistory()
        for seg in self.segments:
            for item in iter_batches(seg.file, 0, seg.size, seg.base_offset):
                if isinstance(item, ScanFailure):
                    raise seg.corrupt(item.position, item.reason)
                h = item[1]
                if h.leader_epoch > history.latest_epoch:
                    history.assign(h.leader_epoch, h.base_offset)
                elif h.leader_epoch < history.latest_epoch:
                    raise seg.corrupt(item[0], "leader epoch goes backwards", h.base_offset)
        return history

    @property
    def epochs_path(self) -> str:
        return posixpath.join(self.directory, LEADER_EPOCH_CHECKPOINT)

    def _write_epochs(self, *, durable: bool = True) -> None:
        """Replace the checkpoint with the history now, atomically and durably; without
        `durable`, write it to a temporary file of its own, installed by `sync_epochs`
        (or `install_epochs`) with the log's next sync."""
        if durable:
            write_leader_epochs(self.fs, self.epochs_path, self.epochs.entries)
            self._drop_pending_epochs(self._epochs_version)
            self._epochs_pending = 0
            return
        self._epochs_version += 1
        version = self._epochs_version
        f = self.fs.open(self._pending_path(version), create=True, truncate=True)
        try:
            f.append(render_leader_epochs(self.epochs.entries))
        finally:
            f.close()
        self._epochs_pending = version

    def _pending_path(self, version: int) -> str:
        return f"{self.epochs_path}.{version}{TMP_SUFFIX}"

    def _drop_pending_epochs(self, upto: int) -> None:
        """Remove the temporary files of versions up to `upto` never installed."""
        for version in range(self._epochs_installed + 1, upto + 1):
            path = self._pending_path(version)
            if self.fs.exists(path):
                self.fs.remove(path)
        self._epochs_installed = max(self._epochs_installed, upto)

    @property
    def epochs_unsynced(self) -> bool:
        """The history names an epoch the checkpoint on disk does not: its batches may be
        written, but the log's end does not count as persisted past them yet."""
        return self._epochs_pending != 0

    def open_epochs_for_sync(self) -> tuple[File, int] | None:
        """The temporary file of the newest checkpoint not installed, opened to be synced
        with the log's data, and its version; None when there is none. Read after the
        sync's target: a batch below the target had its epoch written before it. Safe in a
        worker thread while appends go on (each version has a file of its own)."""
        version = self._epochs_pending
        if not version:
            return None
        return self.fs.open(self._pending_path(version)), version

    def install_epochs(self, version: int) -> None:
        """Rename the synced temporary file of `version` over the checkpoint (as
        `atomic_write` does: its data is durable first); the caller syncs the directory
        before the log's end counts as persisted past the epoch."""
        self.fs.rename(self._pending_path(version), self.epochs_path)
        self._drop_pending_epochs(version - 1)
        self._epochs_installed = max(self._epochs_installed, version)
        if self._epochs_pending == version:  # not when a newer one was written meanwhile
            self._epochs_pending = 0

    def sync_epochs(self) -> None:
        """Install the newest checkpoint durably (temporary file synced, renamed, the
        directory synced): before the log's end counts as persisted past a batch of a new
        epoch, and before a roll takes such a batch out of the last segment, the one
        recovery checks the checkpoint against."""
        opened = self.open_epochs_for_sync()
        if opened is None:
            return
        f, version = opened
        try:
            f.sync()
        finally:
            f.close()
        self.install_epochs(version)
        self.fs.sync_dir(self.directory)

    def _create_segment(self, base_offset: int) -> Segment:
        path = posixpath.join(self.directory, segment_name(base_offset))
        seg = Segment(
            self.fs, self.directory, base_offset, self.fs.open(path, create=True, truncate=True)
        )
        seg.next_offset = base_offset
        self.fs.sync_dir(self.directory)
        return seg

    # -- state ------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    def segment_facts(self) -> list[SegmentFacts]:
        """What retention looks at, oldest segment first."""
        return [
            SegmentFacts(s.base_offset, s.next_offset, s.size, s.max_timestamp)
            for s in self.segments
        ]

    @property
    def size_bytes(self) -> int:
        """Bytes of all segments."""
        return sum(s.size for s in self.segments)

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def _check_usable(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.name} is closed", partition=self.name)
        if self._failed is not None:
            raise StorageError(
                f"log {self.name} is offline after an I/O error: {self._failed}",
                partition=self.name,
            )

    def _fail(self, exc: OSError) -> StorageError:
        where = f" ({exc.filename})" if exc.filename else ""
        self._failed = f"{exc.strerror or exc}{where}"
        log.error("log_io_error", partition=self.name, error=self._failed)
        return StorageError(f"I/O error on log {self.name}: {self._failed}", partition=self.name)

    # -- appends ----------------------------------------------------------------------

    def append_records(
        self,
        records: Sequence[Record],
        *,
        leader_epoch: int,
        timestamp: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
    ) -> AppendResult:
        """Append records as one batch at the log end (the leader's path)."""
        self._check_usable()
        if not records:
            raise InvalidRequestError("no records to append", partition=self.name)
        if not 0 <= leader_epoch < 1 << 31:
            # The header is not re-checked on this path: a batch the log's own checks
            # reject would be written, then cut as a torn tail on the next open.
            raise InvalidRequestError(f"invalid leader epoch {leader_epoch}", partition=self.name)
        raw = encode_batch(
            records,
            base_offset=self.log_end_offset,
            leader_epoch=leader_epoch,
            timestamp=timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        return self._append(BatchHeader._make(HEADER.unpack_from(raw)), raw)

    def append_batch(self, raw: bytes | bytearray) -> AppendResult:
        """Append a batch exactly as another replica stored it (the follower's path)."""
        self._check_usable()
        try:
            batch = RecordBatch.from_bytes(raw)
        except BatchFormatError as exc:
            raise InvalidRequestError(f"invalid batch: {exc}", partition=self.name) from exc
        return self.append_checked(batch)

    def append_checked(self, batch: RecordBatch) -> AppendResult:
        """`append_batch` of a batch whose framing and CRC were checked when it was built
        (`RecordBatch.from_bytes`, or a producer's batch checked and then stamped), so
        that a batch's CRC is computed once per replica, not once per layer."""
        self._check_usable()
        h = batch.header
        if h.base_offset != self.log_end_offset:
            raise InvalidRequestError(
                f"batch starts at offset {h.base_offset}, log end is {self.log_end_offset}",
                partition=self.name,
            )
        return self._append(h, batch.raw)

    def _append(self, h: BatchHeader, raw: bytes | bytearray) -> AppendResult:
        if len(raw) > self.config.max_batch_bytes:
            raise RecordTooLargeError(
                f"batch of {len(raw)} bytes exceeds max_batch_bytes {self.config.max_batch_bytes}",
                partition=self.name,
            )
        if h.leader_epoch < self.epochs.latest_epoch:
            raise FencedLeaderEpochError(
                f"batch epoch {h.leader_epoch} is older than the log's epoch "
                f"{self.epochs.latest_epoch}",
                partition=self.name,
                leaderEpoch=self.epochs.latest_epoch,
            )
        try:
            if h.leader_epoch > self.epochs.latest_epoch:
                # The new checkpoint is written to a temporary file of its own before the
                # first batch, and synced and renamed in with the log (`sync_epochs`), not
                # here: a failover's new leader and followers start an epoch on hundreds of
                # partitions at once, and two syncs each on the event loop held their first
                # writes back for seconds. Until then the log is the truth: recovery checks
                # the checkpoint against the batches of the last segment (a roll installs it
                # first) and rebuilds an older one from the batches (Kafka, since
                # KAFKA-15046, does not sync it on appends either).
                self.epochs.assign(h.leader_epoch, h.base_offset)
                self._write_epochs(durable=False)
            if self._should_roll(h, len(raw)):
                self._roll()
            self.active.append(raw, h, self.config.index_interval_bytes)
        except OSError as exc:
            raise self._fail(exc) from exc
        self.log_end_offset = h.next_offset
        return AppendResult(h.base_offset, h.last_offset, self.log_end_offset, h.leader_epoch)

    def _should_roll(self, h: BatchHeader, size: int) -> bool:
        active, config = self.active, self.config
        if active.size == 0:
            return False
        if active.size + size > config.segment_bytes:
            return True
        # By the batches' own timestamps, not a clock: every replica rolls at the same
        # offsets, and a replayed log rolls as it did.
        return (
            config.segment_ms is not None
            and active.first_timestamp >= 0
            and h.max_timestamp - active.first_timestamp >= config.segment_ms
        )

    def _roll(self) -> None:
        old = self.active
        old.file.sync()
        self.sync_epochs()
        self.persisted_log_end_offset = old.next_offset
        old.write_index()
        old.drop_cache()
        self.segments.append(self._create_segment(old.next_offset))
        log.info(
            "segment_rolled",
            partition=self.name,
            segment=segment_name(old.next_offset),
            logEndOffset=old.next_offset,
        )

    def flush(self) -> int:
        """fsync the log; returns the persisted log end offset."""
        target = self.sync_target()
        if target is not None:
            error = sync_one(self.active.file)
            if error is None:
                try:
                    self.sync_epochs()
                except OSError as exc:
                    error = exc
            self.synced(target, error)
        return self.persisted_log_end_offset

    def sync_target(self) -> int | None:
        """Step 1 of a sync done by the caller (`batch_sync`, many logs at once): the log
        end a sync of `active.file` from now on makes durable; None if nothing is
        unsynced. Only the active segment can hold unsynced data."""
        self._check_usable()
        if self.persisted_log_end_offset < self.log_end_offset:
            return self.log_end_offset
        return None

    def synced(self, target: int, error: OSError | None) -> int:
        """Step 2: the caller's sync of `active.file` ended (`error`: it failed)."""
        if error is not None:
            raise self._fail(error) from error
        self.persisted_log_end_offset = max(self.persisted_log_end_offset, target)
        return self.persisted_log_end_offset

    # -- reads ------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]",
                partition=self.name,
                logStartOffset=self.log_start_offset,
                logEndOffset=self.log_end_offset,
            )

    def read_batches(
        self, offset: int, max_bytes: int = 1 << 20, upper_bound: int | None = None
    ) -> list[RecordBatch]:
        """Whole batches holding offsets from `offset`, starting below `upper_bound`."""
        self._check_usable()
        self._check_offset(offset)
        limit = (
            self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        )
        if offset >= limit:
            return []
        i = max(0, bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1)
        out: list[RecordBatch] = []
        total = 0
        for seg in self.segments[i:]:
            if seg.base_offset >= limit or (out and total >= max_bytes):
                break
            batches = seg.read(offset, max_bytes - total if out else max_bytes, limit)
            if out and batches and total + batches[0].size > max_bytes:
                break
            out.extend(batches)
            total += sum(b.size for b in batches)
        return out

    def read_records(
        self,
        offset: int,
        *,
        max_records: int | None = None,
        max_bytes: int = 1 << 20,
        upper_bound: int | None = None,
    ) -> list[LogRecord]:
        """Records from `offset` up to (not including) `upper_bound`, e.g. the HW."""
        limit = (
            self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        )
        out: list[LogRecord] = []
        for batch in self.read_batches(offset, max_bytes, limit):
            try:
                records = batch.records()
            except BatchFormatError as exc:
                raise CorruptRecordError(
                    f"batch at offset {batch.base_offset} of {self.name} does not decode: {exc}",
                    partition=self.name,
                    offset=batch.base_offset,
                ) from exc
            for r in records:
                if r.offset < offset:
                    continue
                if r.offset >= limit or (max_records is not None and len(out) >= max_records):
                    return out
                out.append(r)
        return out

    def batch_headers(self) -> Iterator[BatchHeader]:
        """Headers of every batch, in offset order (CRC-checked, records not decoded)."""
        self._check_usable()
        for seg in list(self.segments):
            for item in iter_batches(seg.file, 0, seg.size, seg.base_offset):
                if isinstance(item, ScanFailure):
                    raise seg.corrupt(item.position, item.reason)
                yield item[1]

    def offset_for_timestamp(self, timestamp: int, upper_bound: int | None = None) -> int | None:
        """ListOffsets by time: the first offset from the log start (below `upper_bound`,
        e.g. the HW) of a record stamped at or after `timestamp`; None if there is none.

        Segments whose largest timestamp is below it are skipped, then the segment's time
        index narrows the scan to one index interval."""
        self._check_usable()
        limit = (
            self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        )
        for seg in list(self.segments):
            if seg.base_offset >= limit:
                break
            if seg.max_timestamp < timestamp or seg.next_offset <= self._log_start_offset:
                continue
            found = seg.offset_for_timestamp(timestamp, self._log_start_offset, limit)
            if found is not None:
                return found
        return None

    def max_timestamp(self, upper_bound: int | None = None) -> int | None:
        """The largest timestamp of a record from the log start to below `upper_bound`
        (e.g. the HW); None if there is none. With `offset_for_timestamp` of it, the
        first record stamped with it: Kafka's ListOffsets max-timestamp (KIP-734).

        A segment wholly in that range answers with its largest timestamp; the ones the
        log start or the bound cut are scanned (`Segment.max_timestamp_between`)."""
        self._check_usable()
        limit = (
            self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        )
        start = self._log_start_offset
        best: int | None = None
        for seg in list(self.segments):
            if seg.base_offset >= limit:
                break
            if seg.next_offset <= max(start, seg.base_offset):
                continue  # below the log start, or empty
            if seg.base_offset >= start and seg.next_offset <= limit:
                stamp: int | None = seg.max_timestamp
            else:
                stamp = seg.max_timestamp_between(start, limit)
            if stamp is not None:
                best = stamp if best is None else max(best, stamp)
        return best

    # -- log start ------------------------------------------------------------------

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start up to `offset` (at most the log end); True if it moved.

        Only in memory: the owner checkpoints the new start before it removes the
        segments below it (`delete_segments_below_start`)."""
        self._check_usable()
        offset = min(offset, self.log_end_offset)
        if offset <= self._log_start_offset:
            return False
        previous, self._log_start_offset = self._log_start_offset, offset
        log.info(
            "log_start_moved",
            partition=self.name,
            logStartOffset=offset,
            previousLogStartOffset=previous,
        )
        return True

    def delete_segments_below_start(self) -> int:
        """Remove the closed segments wholly below the log start, oldest first; how many
        went. Durable when this returns."""
        self._check_usable()
        n = 0
        try:
            while len(self.segments) > 1 and self.segments[1].base_offset <= self._log_start_offset:
                seg = self.segments.pop(0)
                seg.close()
                self._remove_segment_files(seg.base_offset)
                n += 1
            if n:
                self.fs.sync_dir(self.directory)
        except OSError as exc:
            raise self._fail(exc) from exc
        if n:
            log.info(
                "segments_deleted",
                partition=self.name,
                segments=n,
                logStartOffset=self._log_start_offset,
            )
        return n

    def reset_to(self, offset: int) -> None:
        """Drop the whole log and start it empty at `offset` (a follower whose log ends
        below the leader's log start, as Kafka's truncateFullyAndStartAt). The owner
        checkpoints `offset` as the log start first; durable when this returns."""
        self._check_usable()
        try:
            while self.segments:
                seg = self.segments.pop(0)
                seg.close()
                self._remove_segment_files(seg.base_offset)
            self.fs.sync_dir(self.directory)
            self._start_over(offset)
        except OSError as exc:
            raise self._fail(exc) from exc

    def _start_over(self, offset: int) -> None:
        self.rewrites += 1
        for seg in self.segments:
            seg.close()
            self._remove_segment_files(seg.base_offset)
        self.segments = [self._create_segment(offset)]
        self.log_end_offset = self.persisted_log_end_offset = offset
        self._log_start_offset = offset
        # None of the epochs of the dropped batches describe this log any more.
        self.epochs = EpochHistory()
        self._write_epochs()
        log.warning("log_started_over", partition=self.name, logStartOffset=offset)

    # -- truncation -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Drop every record at or after `offset`; durable when this returns. Below the log
        start, the log starts over, empty, at `offset` (as Kafka's truncateTo)."""
        self._check_usable()
        if offset >= self.log_end_offset:
            return False
        if offset < self.log_start_offset:
            old_start = self.log_start_offset
            self.reset_to(offset)
            log.warning(
                "log_truncated_below_start",
                partition=self.name,
                logEndOffset=offset,
                previousLogStartOffset=old_start,
            )
            return True
        old_end = self.log_end_offset
        self.rewrites += 1
        try:
            removed = False
            while len(self.segments) > 1 and self.active.base_offset >= offset:
                seg = self.segments.pop()
                seg.close()
                self.fs.remove(seg.log_path)
                for path in (seg.index_path, seg.time_index_path):
                    if self.fs.exists(path):
                        self.fs.remove(path)
                removed = True
            if removed:
                self.fs.sync_dir(self.directory)
            self.active.truncate_to(offset)
            if self.epochs.truncate_from_end(offset):
                self._write_epochs()
        except OSError as exc:
            raise self._fail(exc) from exc
        self.log_end_offset = offset
        self.persisted_log_end_offset = min(self.persisted_log_end_offset, offset)
        log.info(
            "log_truncated",
            partition=self.name,
            logEndOffset=offset,
            previousLogEndOffset=old_end,
            leaderEpoch=self.epochs.latest_epoch,
        )
        return True

    def close(self) -> None:
        """Flush, write the active index and mark the shutdown clean.

        The files are released even when this fails (StorageError); the shutdown is
        then not marked clean.
        """
        if self._closed:
            return
        try:
            if self._failed is None:
                self.flush()
                try:
                    self.sync_epochs()
                    self.active.write_index()
                    atomic_write(self.fs, posixpath.join(self.directory, CLEAN_SHUTDOWN), b"")
                except OSError as exc:
                    raise self._fail(exc) from exc
        finally:
            self._close_segments()
            self._closed = True


def _frames(seg: Segment, position: int) -> list[int]:
    """Positions of the batch frames a torn tail still outlines by their length fields."""
    out = []
    pos = position
    while pos + 4 <= seg.size:
        out.append(pos)
        size = int.from_bytes(seg.file.pread(4, pos), "big") + 4
        if size < 8:
            break
        pos += size
    return out


__all__ = ["LOG_SUFFIX", "AppendResult", "PartitionLog", "RecoveryReport"]
