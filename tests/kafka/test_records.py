"""Kafka's record batch to and from epochlog's, judged by kafka-python's own batch code
(a codec nobody here wrote): what a Kafka producer sends is appended as it was meant,
what a consumer gets back parses and checks out in a Kafka client, and what epochlog's
log cannot hold is refused with Kafka's error code, not approximated."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from epochlog.protocol.batch import Record, RecordBatch, decode_records, encode_batch
from epochlog_broker.core import ProducerFields
from epochlog_broker.kafka.records import KafkaRecordsError, decode_produced
from epochlog_broker.kafka.records import encode_batch as kafka_batch

LIMIT = 1 << 20
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


def _built(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]], int]],
    *,
    compression: int = NONE,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=LIMIT,
    )
    for i, (key, value, headers, ts) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def test_a_kafka_producers_batch_becomes_the_records_and_producer_it_carries() -> None:
    data = _built(
        [
            (b"k", b"v0", [("h", b"x"), ("h", b"")], 1_700_000_000_123),
            (None, b"", [], 1_700_000_000_150),
        ],
        producer=(123, 4, 70),
    )
    batch = decode_produced(data, LIMIT)
    assert batch.records == [
        Record(b"v0", b"k", (("h", b"x"), ("h", b"")), 1_700_000_000_123),
        Record(b"", None, (), 1_700_000_000_150),
    ]
    assert batch.producer == ProducerFields(123, 4, 70)
    assert batch.payload_bytes == 3


def test_a_gzip_batch_is_inflated_and_its_records_stored_uncompressed() -> None:
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]] = [
        (None, b"g%d" % i, [], 1_700_000_000_000 + i) for i in range(50)
    ]
    batch = decode_produced(_built(records, compression=GZIP), LIMIT)
    assert [r.value for r in batch.records] == [b"g%d" % i for i in range(50)]
    assert batch.producer is None


@pytest.mark.parametrize("compression", [SNAPPY, LZ4, ZSTD])
def test_other_compression_is_refused_as_unsupported(compression: int) -> None:
    data = bytearray(_built([(None, b"x", [], 1)]))
    # The codec's bits in the attributes, as a client using that codec sets them; the CRC
    # is made again so that only the codec is wrong.
    struct.pack_into(">h", data, 21, compression)
    from crc32c import crc32c

    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(bytes(data), LIMIT)
    assert caught.value.error == "unsupported_compression_type"


def test_a_flipped_bit_fails_the_crc() -> None:
    data = bytearray(_built([(b"k", b"value", [], 1)]))
    data[-2] ^= 0x01
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(bytes(data), LIMIT)
    assert caught.value.error == "corrupt_message"


def test_transactional_batches_are_refused() -> None:
    data = _built([(None, b"x", [], 1)], producer=(5, 0, 0), transactional=True)
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(data, LIMIT)
    assert caught.value.error == "invalid_record"


def test_two_batches_in_one_partitions_data_are_refused() -> None:
    one = _built([(None, b"x", [], 1)])
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(one + one, LIMIT)
    assert caught.value.error == "invalid_record"


@pytest.mark.parametrize("cut", [1, 30, 61, 70])
def test_a_truncated_batch_is_corrupt(cut: int) -> None:
    data = _built([(b"key", b"value", [("h", b"v")], 1)])
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(data[:cut], LIMIT)
    assert caught.value.error in ("corrupt_message", "invalid_record")


def test_a_record_over_the_limit_is_too_large() -> None:
    data = _built([(None, b"x" * 101, [], 1)])
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(data, 100)
    assert caught.value.error == "message_too_large"


def test_no_data_is_refused() -> None:
    for data in (None, b""):
        with pytest.raises(KafkaRecordsError):
            decode_produced(data, LIMIT)


def test_a_stored_batch_reads_back_in_a_kafka_client_with_its_offsets_epoch_and_producer() -> None:
    records = [
        Record(b"v0", b"k", (("h", b"x"),), 1_700_000_000_123),
        Record(None, None, (), 1_700_000_000_100),
    ]
    raw = bytes(
        encode_batch(
            records,
            base_offset=42,
            leader_epoch=5,
            timestamp=0,
            producer_id=123,
            producer_epoch=1,
            base_sequence=7,
        )
    )
    stored = RecordBatch.from_bytes(raw)
    seen = DefaultRecordBatch(kafka_batch(stored.header, decode_records(stored.raw, stored.header)))
    assert seen.validate_crc()
    assert (seen.base_offset, seen.leader_epoch) == (42, 5)
    assert (seen.producer_id, seen.producer_epoch, seen.base_sequence) == (123, 1, 7)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in seen]
    assert got == [
        (42, 1_700_000_000_123, b"k", b"v0", [("h", b"x")]),
        (43, 1_700_000_000_100, None, None, []),
    ]


_records = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=200)),
        st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=20)), max_size=3),
        st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(_records, st.sampled_from([NONE, GZIP]))
def test_any_batch_a_kafka_client_builds_survives_the_round_trip(records, compression) -> None:
    produced = decode_produced(_built(records, compression=compression), LIMIT)
    raw = bytes(encode_batch(produced.records, base_offset=7, leader_epoch=3, timestamp=0))
    stored = RecordBatch.from_bytes(raw)
    seen = DefaultRecordBatch(kafka_batch(stored.header, decode_records(stored.raw, stored.header)))
    assert seen.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in seen]
    want = [(7 + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(records)]
    assert got == want
