"""The `epochlog` data source for Spark: `spark.readStream.format("epochlog")` and
`spark.read.format("epochlog")`.

A Python data source (`pyspark.sql.datasource`, Spark 4.x). `register(spark)`
makes the format name known to a session.

Streaming (`EpochlogStreamReader`):
- `initialOffset` discovers the partitions and resolves the starting options
  (startingTimestamp > startingOffsetsByTimestamp > startingOffsets, as Kafka's
  source; default latest).
- `latestOffset(start, limit)` asks where every partition stands and plans the
  end of the next micro-batch with `offsets.next_end`: never behind `start`,
  new partitions from offset 0, `maxRecordsPerTrigger` through Spark's
  read-limit API (`ReadMaxRows`), Trigger.AvailableNow bounded by the offsets
  seen when it was prepared. A log truncated under the query fails the query
  with a message naming partition and offsets (`failOnDataLoss`), or is
  logged, and the query goes on from where it stood.
- KIP-320: each end it plans is kept in the checkpoint with the leader epoch of
  the record below it (`epochs_below`), and each planning first validates the
  positions against the leaders' epochs (`BrokerView.validate`). A log that was
  truncated under the query and grew past its position again (an unclean
  election) fails the query naming the partition, the offsets and the epochs
  (failOnDataLoss=true), or is logged and the query goes on from the
  divergence offset, reading what the log holds there now (false).
- `partitions(start, end)` plans the ranges (`offsets.plan_ranges`); each is
  one Spark task reading one range over one connection
  (`reader.read_range`), in Arrow record batches.
- The checkpoint's offsets are JSON per partition, as Kafka's source writes
  them: `{"orders": {"0": 120, "1": 98}}`, the next offset to read.

Batch (`EpochlogBatchReader`): startingOffsets (default earliest) to
endingOffsets (default latest), resolved when the query is planned.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import structlog
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.session import SparkSession
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from epochlog.client.reading import Validated
from epochlog_spark.arrow import arrow_schema, spark_schema
from epochlog_spark.brokers import BrokerView
from epochlog_spark.offsets import (
    Key,
    OffsetRange,
    Offsets,
    Truncation,
    epochs_from_json,
    group_ranges,
    next_end,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
)
from epochlog_spark.options import Mode, Position, SourceOptions, option_name, parse_options
from epochlog_spark.reader import DATA_LOSS_ADVICE, ReadSettings, read_ranges

log = structlog.get_logger("epochlog.spark")

FORMAT = "epochlog"


class RangePartition(InputPartition):
    """One Spark task's work: offset ranges, read together (`offsets.group_ranges`)."""

    def __init__(self, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


class EpochlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self, mode: Mode) -> SourceOptions:
        return parse_options(dict(self.options), mode)

    def schema(self) -> StructType:
        # Checked here so that a bad option fails `load()`, before any query runs.
        parse_options(dict(self.options), None)
        return spark_schema(_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return EpochlogBatchReader(self._options("batch"), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return EpochlogStreamReader(self._options("stream"), schema)


def _include_headers(options: Any) -> bool:
    return str(options.get(option_name("include_headers"), "false")).lower() == "true"


class _Ranges:
    """Reading planned ranges: shared by the batch and the stream reader."""

    options: SourceOptions
    schema: StructType

    def _read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_ranges(
            ReadSettings.of(self.options), partition.ranges, arrow_schema(self.schema)
        )

    def _partitions(
        self,
        start: Offsets,
        end: Offsets,
        names: dict[Key, str],
        start_epochs: Offsets | None = None,
    ) -> list[RangePartition]:
        unnamed = sorted(set(end) - set(names))
        if unnamed:
            raise RuntimeError(
                "no broker lists partition(s) "
                + ", ".join(f"{t}/{i}" for t, i in unnamed)
                + " of this batch; they cannot be read now"
            )
        ranges = plan_ranges(start, end, names, self.options.min_partitions, start_epochs)
        groups = group_ranges(ranges, self.options.max_ranges_per_task, self.options.min_partitions)
        return [RangePartition(g) for g in groups]


def _starting_offsets(view: BrokerView, options: SourceOptions, mode: Mode) -> Offsets:
    keys = view.discover()
    default: Position = "latest" if mode == "stream" else "earliest"
    if options.starting_timestamp is not None:
        return view.by_time(options.starting_timestamp, keys)
    if options.starting_offsets_by_timestamp is not None:
        return view.by_time(options.starting_offsets_by_timestamp, keys)
    return view.resolve(option_name("starting_offsets"), options.starting(mode), keys, default)


class EpochlogBatchReader(_Ranges, DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        view = BrokerView(self.options)
        try:
            start = _starting_offsets(view, self.options, "batch")
            end = view.resolve(
                option_name("ending_offsets"), self.options.ending(), view.names, "latest"
            )
            for k in sorted(start):
                if start[k] > end[k]:
                    raise ValueError(
                        f"{view.names[k]}: the starting offset {start[k]} is past the ending "
                        f"offset {end[k]}"
                    )
            return self._partitions(start, end, dict(view.names))
        finally:
            view.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)


class EpochlogStreamReader(_Ranges, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._view: BrokerView | None = None
        self._available_now: Offsets | None = None
        self._latest: Offsets = {}
        self._reported: set[tuple[Key, int]] = set()

    def __getstate__(self) -> dict[str, Any]:
        # Tasks get a copy of the reader: the planner's client stays here.
        state = self.__dict__.copy()
        state["_view"] = None
        return state

    @property
    def view(self) -> BrokerView:
        if self._view is None:
            self._view = BrokerView(self.options)
        return self._view

    def initialOffset(self) -> dict[str, Any]:
        start = _starting_offsets(self.view, self.options, "stream")
        log.info("query_start", offsets=offsets_to_json(start))
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self.view.latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        position = offsets_from_json(start)
        epochs = epochs_from_json(start)
        self._latest = self.view.latest()
        diverged = self._validate(position, epochs)
        end, truncated = next_end(
            position,
            self._latest,
            limit=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            cap=self._available_now,
        )
        for t in truncated:
            self._truncated(t)
        # A diverged partition ends this batch at its divergence offset (its range is
        # empty: it lies below the start), and the next batch reads on from there.
        end.update(diverged)
        moved = {
            k: e for k, e in end.items() if e != position.get(k) or k not in epochs or k in diverged
        }
        kept = {k: epochs[k] for k in end if k in epochs and k not in moved}
        return offsets_to_json(end, kept | self.view.epochs_below(moved))

    def _validate(self, position: Offsets, epochs: Offsets) -> Offsets:
        """Validate every position whose leader epoch below is known (KIP-320): a diverged
        one fails the query, or (failOnDataLoss=false) is reported; returns the divergence
        offset of each reported one."""
        marks = {k: (position[k], e) for k, e in epochs.items() if position.get(k, 0) > 0}
        diverged: Offsets = {}
        for key, v in (self.view.validate(marks) if marks else {}).items():
            if v.divergence_offset is not None:
                self._diverged(key, position[key], v)
                diverged[key] = v.divergence_offset
        return diverged

    def _diverged(self, key: Key, position: int, v: Validated) -> None:
        name = self.view.names.get(key, f"{key[0]}/{key[1]}")
        error = v.truncation(name, position)
        goes_on = (
            f"the query stops (failOnDataLoss) at offset {position}"
            if self.options.fail_on_data_loss
            else f"the query goes on from offset {error.divergence_offset}"
        )
        message = (
            f"{error} (the query's position {position} follows a record of leaderEpoch "
            f"{error.epoch}; an unclean leader election, or the Partition was deleted and "
            f"created again). Records the query read at {error.divergence_offset}.."
            f"{position - 1} are not in the log, and {goes_on}. {DATA_LOSS_ADVICE}"
        )
        if self.options.fail_on_data_loss:
            raise DataLossDetected(message)
        log.warning(
            "data_loss",
            partition=name,
            position=position,
            divergenceOffset=error.divergence_offset,
            leaderEpoch=error.leader_epoch,
            reason="truncated",
            detail=message,
        )

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest) if self._latest else None

    def _truncated(self, t: Truncation) -> None:
        name = self.view.names.get(t.key, f"{t.key[0]}/{t.key[1]}")
        message = (
            f"{name}: the latest offset went back from {t.position} to {t.latest}: the log "
            "was truncated under the query (an unclean leader election, or the Partition "
            f"was deleted and created again). Records the query read at {t.latest}.."
            f"{t.position - 1} are no longer in the log, and records written there from "
            "now on will not be read; the query goes on from offset "
            f"{t.position}. {DATA_LOSS_ADVICE}"
        )
        if self.options.fail_on_data_loss:
            raise DataLossDetected(message)
        if (t.key, t.latest) not in self._reported:
            self._reported.add((t.key, t.latest))
            log.warning(
                "data_loss",
                partition=name,
                position=t.position,
                latest=t.latest,
                reason="truncated",
            )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = offsets_from_json(start), offsets_from_json(end)
        missing = set(last) - set(self.view.names)
        if missing:
            self.view.discover()
        return self._partitions(first, last, dict(self.view.names), epochs_from_json(start))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("committed", offsets=end)

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


class DataLossDetected(RuntimeError):
    """The log of a partition was truncated under a query with failOnDataLoss."""


def register(spark: SparkSession) -> None:
    """Make `format("epochlog")` known to `spark`."""
    spark.dataSource.register(EpochlogDataSource)
