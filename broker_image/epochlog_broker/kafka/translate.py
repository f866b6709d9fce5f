"""Kafka's partition entries to and from the broker core's calls: the part of the Kafka
listener between a Kafka message and the core, with no I/O.

The listener (`handlers.KafkaHandlers`) and the simulator's broker (`SimBroker`)
both answer Kafka's Produce, Fetch, ListOffsets and
OffsetForLeaderEpoch through these functions, so the translation the simulator's
checker judges is the one that serves real clients. Each function is told one
partition's part of a request, or what the core answered for it, and answers the
core's arguments or the Kafka partition entry (a dict in kio's field names, which
`wire.build` turns into the response of any version):

- Produce: `produce_acks` (the request's acks), `produce_call` (a partition's record
  batch as the core's produce takes it: records, idempotent-producer fields, acks),
  `produce_answer` (the core's `ProduceDone` or the error raised: error code and
  base offset), `produce_refused` (a partition the listener refuses before the core).
- Fetch: `fetch_entry` (a partition's answer before the core is asked), `read_ask`
  (the core's `ReadAsk`), `diverging_epoch` (KIP-595's check, from the core's
  `epoch_end` and the log start; OFFSET_OUT_OF_RANGE below the log start, as Kafka's),
  `fetch_answer` (a core read result: records as Kafka batches, high watermark, log
  start, or the error), `has_news` (answer without waiting).
- ListOffsets: `offsets_entry`, `offsets_at` (a timestamp as the core's
  `list_offsets` takes it), `wants_timestamp`, `offsets_answer`.
- OffsetForLeaderEpoch: `epoch_end_entry`, `epoch_end_answer`; both it and Fetch answer
  an epoch older than the log's epoch history as Kafka does (`kafka_epoch_end`).
- Any of them: `error_answer` (the core's error as Kafka's code), `epoch_or_none`.

The shell does what needs the network, the clock or the access policy: authorization,
waiting for an acknowledgement or for new data, metrics, the cluster view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from epochlog.protocol.batch import Record, decode_records
from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.errors import EpochlogError, OffsetOutOfRangeError
from epochlog_broker.core import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    BatchReadResult,
    ProduceDone,
    ProducerFields,
    ReadAsk,
)
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.errors import kafka_error, result_label
from epochlog_broker.kafka.records import KafkaRecordsError, decode_produced, encode_batch
from epochlog_broker.replication.messages import Acks, EpochEndOffset

NO_TIMESTAMP: Final = -1
UNKNOWN_OFFSET: Final = -1
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP_AT: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4
LATEST_TIERED_TIMESTAMP: Final = -5
SPECIAL_TIMESTAMPS: Final[dict[int, tuple[str, int]]] = {
    LATEST_TIMESTAMP: (LATEST, 1),
    EARLIEST_TIMESTAMP: (EARLIEST, 1),
    MAX_TIMESTAMP_AT: (MAX_TIMESTAMP, 7),
    # Without tiered storage the local log is the whole log.
    EARLIEST_LOCAL_TIMESTAMP: (EARLIEST, 8),
    LATEST_TIERED_TIMESTAMP: (LATEST, 9),
}
"""ListOffsets' special timestamps: what the core is asked, and the version each came
with (KIP-734, KIP-405, KIP-1005). In an older version, or not here (-6, Kafka's
earliest-pending-upload of v11), one is answered UNSUPPORTED_VERSION, as Kafka does."""

_ACKS: Final[dict[int, Acks]] = {-1: Acks.ALL, 1: Acks.LEADER, 0: Acks.NONE}


def epoch_or_none(epoch: int) -> int | None:
    """A leader epoch a Kafka request carries, as the core takes it (-1: unchecked)."""
    return None if epoch < 0 else epoch


# -- Produce ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceCall:
    """What the core's produce is given for one partition of a Kafka Produce."""

    records: list[Record]
    producer: ProducerFields | None
    acks: Acks
    payload_bytes: int


def produce_acks(acks: int) -> Acks | None:
    """A Produce's acks (-1 all, 1 leader, 0 none); None for any other value."""
    return _ACKS.get(acks)


def produce_call(data: bytes | None, acks: Acks, max_record_bytes: int) -> ProduceCall:
    """A partition's produce data as the core's produce takes it; `KafkaRecordsError` for
    a record batch epochlog does not take."""
    batch = decode_produced(data, max_record_bytes)
    return ProduceCall(batch.records, batch.producer, acks, batch.payload_bytes)


def _produce_entry(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": wire.error("none"),
        "base_offset": UNKNOWN_OFFSET,
        "log_append_time": None,
        "log_start_offset": UNKNOWN_OFFSET,
        "record_errors": [],
        "error_message": None,
    }


def produce_refused(
    index: int, error: str, message: str | None = None
) -> tuple[dict[str, Any], str]:
    """A partition's answer refused before the core saw it (Kafka error `error`), and the
    metrics' `result`."""
    entry = _produce_entry(index)
    entry["error_code"] = wire.error(error)
    entry["error_message"] = message
    return entry, result_label(error)


def produce_answer(
    index: int, acks: Acks, outcome: ProduceDone | EpochlogError | KafkaRecordsError
) -> tuple[dict[str, Any], str]:
    """A partition's answer from what the core did with its batch: acknowledged (its base
    offset; none with acks 0) or the error, and the metrics' `result`."""
    entry = _produce_entry(index)
    error = outcome.error if isinstance(outcome, ProduceDone) else outcome
    if error is not None:
        entry["error_code"] = kafka_error(error)
        entry["error_message"] = str(error)[:500]
        if isinstance(error, KafkaRecordsError):
            return entry, result_label(error.error)
        return entry, str(error.code)
    assert isinstance(outcome, ProduceDone)
    if acks is not Acks.NONE:
        entry["base_offset"] = outcome.base_offset
    return entry, "ok"


# -- Fetch -----------------------------------------------------------------------------------


def fetch_entry(index: int) -> dict[str, Any]:
    """A partition's Fetch answer before the core is asked: no records, no error."""
    return {
        "partition_index": index,
        "error_code": wire.error("none"),
        "high_watermark": UNKNOWN_OFFSET,
        "last_stable_offset": UNKNOWN_OFFSET,
        "log_start_offset": UNKNOWN_OFFSET,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        # Empty, not null: librdkafka refuses a null record set.
        "records": b"",
    }


def read_ask(
    name: str, fetch_offset: int, partition_max_bytes: int, max_bytes: int, current_epoch: int
) -> ReadAsk:
    """A Fetch partition as the core's `read_many` takes it: at most the request's
    `max_bytes`, at the leader epoch the reader knows (-1: unchecked)."""
    part_bytes = max(1, min(partition_max_bytes, max_bytes))
    return ReadAsk(name, fetch_offset, part_bytes, epoch_or_none(current_epoch))


def kafka_epoch_end(end: EpochEndOffset, asked: int, log_start: int) -> EpochEndOffset:
    """Where epoch `asked` ends, as Kafka answers it, from the core's `epoch_end`.

    For an epoch older than every epoch of this log's history the core answers
    (UNDEFINED, where the history begins); Kafka's leader answers (the epoch asked, that
    offset), no lower than the log start (`LeaderEpochFileCache.endOffsetFor`, whose
    history is cut at the log start). A reader positioned past it read records this
    log does not vouch for (its history began over, after an unclean recovery): with
    Kafka's answer its client sees the truncation, where UNDEFINED would make it reset
    its position by policy and say nothing."""
    if end.epoch == NO_EPOCH and end.end_offset != UNKNOWN_OFFSET:
        return EpochEndOffset(asked, max(end.end_offset, log_start))
    return end


def diverging_epoch(
    end: EpochEndOffset, last_fetched: int, offset: int, log_start: int
) -> dict[str, int] | None:
    """KIP-595's check at the leader, as Kafka's `Partition.fetchRecords` makes it, from
    where the reader's last fetched epoch ends in this log (the core's `epoch_end`) and
    the log start: None when it ends at or past the offset fetched from, else the Fetch
    answer's `diverging_epoch` (the reader truncates there).

    `OffsetOutOfRangeError` for an offset below the log start, whatever the epochs say
    (retention went past the reader, which resets its position), and where this log
    cannot tell where the epoch ends at all."""
    if offset < log_start:
        raise OffsetOutOfRangeError(f"offset {offset} is below the log start offset {log_start}")
    end = kafka_epoch_end(end, last_fetched, log_start)
    if end.epoch == NO_EPOCH or end.end_offset == UNKNOWN_OFFSET:
        raise OffsetOutOfRangeError(
            f"where leader epoch {last_fetched} ends in this log is unknown"
        )
    if end.epoch == last_fetched and end.end_offset >= offset:
        return None
    return {"epoch": end.epoch, "end_offset": end.end_offset}


def error_answer(entry: dict[str, Any], error: BaseException) -> None:
    """A partition's entry (Fetch, ListOffsets, OffsetForLeaderEpoch) answered with the
    core's error."""
    entry["error_code"] = kafka_error(error)


def fetch_answer(entry: dict[str, Any], result: BatchReadResult | EpochlogError) -> None:
    """A partition's Fetch answer from the core's read: each stored batch as a Kafka batch
    with the epoch that appended it, the high watermark and log start; or the error."""
    if isinstance(result, EpochlogError):
        error_answer(entry, result)
        return
    entry["high_watermark"] = result.high_watermark
    entry["last_stable_offset"] = result.high_watermark
    entry["log_start_offset"] = result.log_start_offset
    entry["records"] = b"".join(
        encode_batch(b.header, decode_records(b.raw, b.header)) for b in result.batches
    )


def has_news(entry: dict[str, Any]) -> bool:
    """A partition's Fetch answer that must go at once (an error or a divergence), as
    Kafka answers without waiting for data then."""
    return entry["error_code"] != wire.error("none") or "diverging_epoch" in entry


# -- ListOffsets -----------------------------------------------------------------------------


def offsets_entry(index: int) -> dict[str, Any]:
    """A partition's ListOffsets answer before the core is asked: no offset."""
    return {
        "partition_index": index,
        "error_code": wire.error("none"),
        "timestamp": NO_TIMESTAMP,
        "offset": UNKNOWN_OFFSET,
        "leader_epoch": NO_EPOCH,
    }


def offsets_at(timestamp: int, version: int) -> str | int | None:
    """What the core's `list_offsets` is asked for a ListOffsets timestamp; None when the
    request's version does not know that special timestamp (UNSUPPORTED_VERSION)."""
    if timestamp >= 0:
        return timestamp
    special = SPECIAL_TIMESTAMPS.get(timestamp)
    if special is None or version < special[1]:
        return None
    return special[0]


def wants_timestamp(timestamp: int) -> bool:
    """Whether the answer carries the found record's timestamp (a lookup by time or
    max-timestamp): the shell reads it at the offset the core answered."""
    return timestamp >= 0 or timestamp == MAX_TIMESTAMP_AT


def offsets_answer(
    entry: dict[str, Any], timestamp: int, offset: int, leader_epoch: int, stamp: int
) -> None:
    """A partition's ListOffsets answer from the core's (offset, leader epoch) and, for a
    lookup by time, the found record's timestamp `stamp` (-1: the lookup found no record
    at or after the time, and the high watermark the core answers is no offset, as Kafka
    answers). The latest tiered offset, without tiered storage, is none either."""
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return
    if wants_timestamp(timestamp):
        if stamp == NO_TIMESTAMP:
            return
        entry["timestamp"] = stamp
    entry["offset"] = offset
    entry["leader_epoch"] = leader_epoch


# -- OffsetForLeaderEpoch --------------------------------------------------------------------


def epoch_end_entry(index: int) -> dict[str, Any]:
    """A partition's OffsetForLeaderEpoch answer before the core is asked."""
    return {
        "partition": index,
        "error_code": wire.error("none"),
        "leader_epoch": NO_EPOCH,
        "end_offset": UNKNOWN_OFFSET,
    }


def epoch_end_answer(
    entry: dict[str, Any], end: EpochEndOffset, asked: int, log_start: int
) -> None:
    """A reader's epoch query answered from the core's `epoch_end` (KIP-320): the largest
    epoch at or below the one `asked` and where it ends in the leader's log (as Kafka
    answers an epoch older than the log's history: `kafka_epoch_end`). The core's error
    is `error_answer`'s."""
    end = kafka_epoch_end(end, asked, log_start)
    entry["leader_epoch"] = end.epoch
    entry["end_offset"] = end.end_offset
