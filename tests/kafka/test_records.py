"""Kafka's record batch to and from epochlog's, judged by kafka-python's own batch code
(a codec nobody here wrote): what a Kafka producer sends is appended as it was meant,
what a consumer gets back parses and checks out in a Kafka client, and what epochlog's
log cannot hold is refused with Kafka's error code, not approximated."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
from collections.abc import Sequence

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from epochlog.protocol.batch import Record, RecordBatch, decode_records, encode_batch
from epochlog_broker.core import ProducerFields
from epochlog_broker.kafka.records import KafkaRecordsError, decode_produced, inflate
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


def _with_codec_bits(data: bytes, compression: int) -> bytes:
    """`data` with `compression` in its attributes and its CRC made again, so that only
    the codec named is wrong."""
    out = bytearray(data)
    struct.pack_into(">h", out, 21, compression)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize("compression", [SNAPPY, LZ4, ZSTD])
def test_a_batch_of_every_codec_kafka_python_writes_is_inflated(compression: int) -> None:
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]] = [
        (b"k%d" % i, b"value %d " % i * 20, [("h", b"%d" % i)], 1_700_000_000_000 + i)
        for i in range(300)
    ]
    data = _built(records, compression=compression, producer=(9, 0, 0))
    assert len(data) < sum(len(v or b"") for _, v, _, _ in records) / 4  # compressed
    batch = decode_produced(data, LIMIT)
    assert [(r.key, r.value, r.headers) for r in batch.records] == [
        (k, v, tuple(h)) for k, v, h, _ in records
    ]
    assert batch.producer == ProducerFields(9, 0, 0)


def test_snappy_raw_as_librdkafka_writes_it_and_in_xerial_frames_as_java_does_is_inflated() -> None:
    # Kafka's Java producer and kafka-python frame snappy blocks as xerial's
    # SnappyOutputStream does; librdkafka sends one raw snappy block. Same records, both.
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]] = [
        (None, b"r%d" % i, [], 1 + i) for i in range(2000)
    ]
    framed = _built(records, compression=SNAPPY)
    assert framed[61:69] == b"\x82SNAPPY\x00"
    plain = _built(records)
    raw = plain[:61] + bytes(cramjam.snappy.compress_raw(plain[61:]))
    raw = raw[:8] + struct.pack(">i", len(raw) - 12) + raw[12:]
    for data in (framed, _with_codec_bits(raw, SNAPPY)):
        assert [r.value for r in decode_produced(data, LIMIT).records] == [
            b"r%d" % i for i in range(2000)
        ]
    # Many xerial blocks (kafka-python's codec, with small blocks), each checked.
    many = plain[:61] + snappy_encode(plain[61:], xerial_compatible=True, xerial_blocksize=512)
    many = many[:8] + struct.pack(">i", len(many) - 12) + many[12:]
    assert len(decode_produced(_with_codec_bits(many, SNAPPY), LIMIT).records) == 2000


@pytest.mark.parametrize("compression", [5, 6, 7])
def test_a_codec_kafka_does_not_have_is_refused_as_unsupported(compression: int) -> None:
    with pytest.raises(KafkaRecordsError) as caught:
        decode_produced(_with_codec_bits(_built([(None, b"x", [], 1)]), compression), LIMIT)
    assert caught.value.error == "unsupported_compression_type"


BOMB = 64 * 1024 * 1024
"""Bytes of zeros a small compressed stream inflates to."""


def _bomb(compression: int) -> bytes:
    zeros = bytes(BOMB)
    if compression == GZIP:
        return gzip.compress(zeros, compresslevel=1)
    if compression == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(zeros))
    if compression == LZ4:
        return bytes(lz4.frame.compress(zeros))
    return bytes(zstandard.ZstdCompressor(level=1).compress(zeros))


@pytest.mark.parametrize("compression", [GZIP, SNAPPY, LZ4, ZSTD])
def test_a_compressed_bomb_is_refused_before_it_inflates_past_the_limit(compression: int) -> None:
    data = _bomb(compression)
    assert len(data) < BOMB / 16  # snappy's best ratio is about 1:21
    limit = 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(KafkaRecordsError) as caught:
            inflate(compression, memoryview(data), limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.error == "message_too_large"
    # What was held while inflating: the limit and its copies, not the 64 MiB.
    assert peak < 8 * limit, peak


@pytest.mark.parametrize("compression", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_data_cut_short_or_damaged_is_refused_as_corrupt(compression: int) -> None:
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]] = [
        (None, b"payload %d" % i, [], i) for i in range(200)
    ]
    data = _built(records, compression=compression)
    head, body = data[:61], data[61:]
    # The batch's CRC made again over the damage: a client that compressed garbage.
    for bad in (body[: len(body) // 2], body[:8] + bytes(len(body) - 8), bytes(len(body))):
        damaged = head[:8] + struct.pack(">i", len(head) + len(bad) - 12) + head[12:] + bad
        with pytest.raises(KafkaRecordsError) as caught:
            decode_produced(_with_codec_bits(damaged, compression), LIMIT)
        assert caught.value.error == "corrupt_message", bad[:16]


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
@given(_records, st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]))
def test_any_batch_a_kafka_client_builds_survives_the_round_trip(records, compression) -> None:
    produced = decode_produced(_built(records, compression=compression), LIMIT)
    raw = bytes(encode_batch(produced.records, base_offset=7, leader_epoch=3, timestamp=0))
    stored = RecordBatch.from_bytes(raw)
    seen = DefaultRecordBatch(kafka_batch(stored.header, decode_records(stored.raw, stored.header)))
    assert seen.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in seen]
    want = [(7 + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(records)]
    assert got == want
