"""The Kafka listener's translation (`kafka/translate.py`) between Kafka's partition
entries and the core's calls, which the listener and the simulator's broker share: pure,
judged with kafka-python's own batch code where bytes are involved."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from epochlog.protocol.batch import Record, RecordBatch, encode_batch
from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from epochlog_broker.core import BatchReadResult, ProduceDone, ProducerFields
from epochlog_broker.kafka import translate, wire
from epochlog_broker.kafka.records import KafkaRecordsError
from epochlog_broker.replication.messages import Acks, EpochEndOffset

LIMIT = 1 << 20


def _kafka_batch(values: list[bytes], producer: tuple[int, int, int]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=LIMIT,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def _stored(values: list[bytes], base_offset: int, leader_epoch: int) -> RecordBatch:
    raw = encode_batch(
        [Record(v, timestamp=2_000) for v in values],
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        timestamp=2_000,
    )
    return RecordBatch.from_bytes(raw)


def test_a_produce_entry_becomes_the_core_call_its_batch_and_acks_say() -> None:
    assert translate.produce_acks(-1) is Acks.ALL
    assert translate.produce_acks(1) is Acks.LEADER
    assert translate.produce_acks(0) is Acks.NONE
    assert translate.produce_acks(2) is None
    call = translate.produce_call(_kafka_batch([b"a", b"b"], (77, 3, 10)), Acks.ALL, LIMIT)
    assert [r.value for r in call.records] == [b"a", b"b"]
    assert [r.timestamp for r in call.records] == [1_000, 1_001]
    assert call.producer == ProducerFields(77, 3, 10)
    assert call.acks is Acks.ALL
    assert call.payload_bytes == 2
    with pytest.raises(KafkaRecordsError):
        translate.produce_call(b"", Acks.ALL, LIMIT)


def test_the_cores_produce_outcome_becomes_the_kafka_partition_response() -> None:
    done = ProduceDone(
        request_id=1, partition="t-0", base_offset=40, last_offset=41, leader_epoch=3
    )
    entry, result = translate.produce_answer(0, Acks.ALL, done)
    assert (entry["index"], entry["error_code"], entry["base_offset"]) == (
        0,
        wire.error("none"),
        40,
    )
    assert entry["log_start_offset"] == -1
    assert result == "ok"
    # acks 0: no offset to tell.
    entry, _ = translate.produce_answer(0, Acks.NONE, done)
    assert entry["base_offset"] == -1
    timed_out = ProduceDone(1, "t-0", 40, 41, 3, RequestTimedOutError("t-0: not yet"))
    entry, result = translate.produce_answer(2, Acks.ALL, timed_out)
    assert (entry["error_code"], entry["base_offset"]) == (wire.error("request_timed_out"), -1)
    assert result == "REQUEST_TIMED_OUT"
    entry, _ = translate.produce_answer(2, Acks.ALL, NotLeaderOrFollowerError("t-0"))
    assert entry["error_code"] == wire.error("not_leader_or_follower")
    bad = KafkaRecordsError("unsupported_compression_type", "snappy")
    entry, result = translate.produce_answer(2, Acks.ALL, bad)
    assert entry["error_code"] == wire.error("unsupported_compression_type")
    assert result == "UNSUPPORTED_COMPRESSION_TYPE"
    entry, result = translate.produce_refused(5, "topic_authorization_failed")
    assert (entry["index"], entry["error_code"]) == (5, wire.error("topic_authorization_failed"))


def test_a_core_read_becomes_kafka_batches_a_kafka_client_decodes_with_their_epochs() -> None:
    entry = translate.fetch_entry(1)
    result = BatchReadResult(
        batches=[_stored([b"x", b"y"], 10, 2), _stored([b"z"], 12, 4)],
        high_watermark=13,
        log_start_offset=5,
        leader_epoch=4,
    )
    translate.fetch_answer(entry, result)
    assert (entry["high_watermark"], entry["last_stable_offset"]) == (13, 13)
    assert entry["log_start_offset"] == 5
    decoded = []
    batches = MemoryRecords(entry["records"])
    while (batch := batches.next_batch()) is not None:
        assert batch.validate_crc()
        decoded += [(r.offset, r.value, batch.leader_epoch) for r in batch]
    assert decoded == [(10, b"x", 2), (11, b"y", 2), (12, b"z", 4)]
    assert not translate.has_news(entry)
    fenced = translate.fetch_entry(1)
    translate.fetch_answer(fenced, FencedLeaderEpochError("t-1"))
    assert fenced["error_code"] == wire.error("fenced_leader_epoch")
    assert fenced["records"] == b""
    assert translate.has_news(fenced)


def test_a_fetch_ask_is_bounded_and_carries_the_readers_epoch() -> None:
    ask = translate.read_ask("t-0", 7, 1 << 30, 4096, 3)
    assert (ask.name, ask.offset, ask.max_bytes, ask.leader_epoch) == ("t-0", 7, 4096, 3)
    assert translate.read_ask("t-0", 7, 100, 4096, -1).leader_epoch is None


@pytest.mark.parametrize(
    ("end", "diverging"),
    [
        (EpochEndOffset(3, 50), None),  # the epoch ends past the position
        (EpochEndOffset(3, 40), {"epoch": 3, "end_offset": 40}),  # ends below it
        (EpochEndOffset(2, 30), {"epoch": 2, "end_offset": 30}),  # the leader holds no 3
    ],
)
def test_diverging_epoch_when_the_last_fetched_epoch_ends_below_the_position(
    end: EpochEndOffset, diverging: dict[str, int] | None
) -> None:
    assert translate.diverging_epoch(end, 3, 45, 0) == diverging


def test_an_epoch_older_than_the_leaders_history_ends_where_that_history_begins() -> None:
    """Found by the simulator (seed 9600064): every replica of t-0 lost its disk, and the
    Partition started over at offset 0 in leaderEpoch 5 (an unclean recovery). A Kafka
    consumer had read offsets up to 8 in epoch 4. The core answers (UNDEFINED, 0) for
    epoch 4, older than the history [e5@0]; the listener turned that into
    OFFSET_OUT_OF_RANGE, and the consumer reset its position and never reported the
    truncation. Kafka answers (4, 0) (`LeaderEpochFileCache.endOffsetFor`), so its client
    truncates to 0 and says so."""
    started_over = EpochEndOffset(-1, 0)
    assert translate.diverging_epoch(started_over, 4, 8, 0) == {"epoch": 4, "end_offset": 0}
    epoch = translate.epoch_end_entry(0)
    translate.epoch_end_answer(epoch, started_over, 4, 0)
    assert (epoch["leader_epoch"], epoch["end_offset"]) == (4, 0)
    # Where the history begins at or past the position, nothing read is in question.
    assert translate.diverging_epoch(EpochEndOffset(-1, 8), 4, 8, 0) is None
    # Never below the log start: Kafka's epoch history is cut there.
    cut = translate.epoch_end_entry(0)
    translate.epoch_end_answer(cut, EpochEndOffset(-1, 3), 4, 6)
    assert (cut["leader_epoch"], cut["end_offset"]) == (4, 6)
    assert translate.diverging_epoch(EpochEndOffset(-1, 3), 4, 8, 6) == {
        "epoch": 4,
        "end_offset": 6,
    }


def test_a_fetch_below_the_log_start_is_out_of_range_whatever_the_epochs_say() -> None:
    """Found by the simulator (seed 9500157): retention moved t-0's log start to 185 past
    a Kafka consumer's position 150, whose records were all of epoch 1, which the
    leader's epoch history no longer held. The Fetch answered divergingEpoch (-1, 185)
    again and again; the consumer found nothing truncated below its position and asked
    again, for good. Kafka answers OFFSET_OUT_OF_RANGE for a fetch below the log start
    before it looks at epochs (`Partition.fetchRecords`), and the consumer resets its
    position; also where this log cannot tell where the epoch ends at all."""
    with pytest.raises(OffsetOutOfRangeError):
        translate.diverging_epoch(EpochEndOffset(-1, 185), 1, 150, 185)
    with pytest.raises(OffsetOutOfRangeError):
        translate.diverging_epoch(EpochEndOffset(1, 200), 1, 150, 185)
    with pytest.raises(OffsetOutOfRangeError):
        translate.diverging_epoch(EpochEndOffset(-1, -1), 3, 45, 0)


def test_list_offsets_and_epoch_queries_are_answered_as_kafka_answers_them() -> None:
    assert translate.offsets_at(-1, 1) == "latest"
    assert translate.offsets_at(-2, 1) == "earliest"
    assert translate.offsets_at(-3, 6) is None  # max-timestamp came with v7
    assert translate.offsets_at(-3, 7) == "max-timestamp"
    assert translate.offsets_at(-6, 11) is None
    assert translate.offsets_at(1_234, 1) == 1_234
    entry = translate.offsets_entry(0)
    translate.offsets_answer(entry, -1, 30, 4, translate.NO_TIMESTAMP)
    assert (entry["offset"], entry["leader_epoch"], entry["timestamp"]) == (30, 4, -1)
    by_time = translate.offsets_entry(0)
    translate.offsets_answer(by_time, 1_234, 30, 4, translate.NO_TIMESTAMP)
    assert by_time["offset"] == -1  # no record at or after the time
    tiered = translate.offsets_entry(0)
    translate.offsets_answer(tiered, -5, 30, 4, translate.NO_TIMESTAMP)
    assert tiered["offset"] == -1
    epoch = translate.epoch_end_entry(2)
    translate.epoch_end_answer(epoch, EpochEndOffset(3, 41), 3, 0)
    assert (epoch["partition"], epoch["leader_epoch"], epoch["end_offset"]) == (2, 3, 41)
    refused = translate.epoch_end_entry(2)
    translate.error_answer(refused, FencedLeaderEpochError("t-2"))
    assert refused["error_code"] == wire.error("fenced_leader_epoch")
    assert refused["end_offset"] == -1
