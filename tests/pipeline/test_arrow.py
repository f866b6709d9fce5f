"""Stored batches as Arrow record batches (`epochlog_spark.arrow`): the columns of Spark's
Kafka source, exactly the offsets of the range, the schema Spark checks against."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from epochlog.protocol.batch import Record, RecordBatch, encode_batch
from epochlog_spark.arrow import arrow_schema, spark_schema, to_arrow


def stored(base: int, records: list[Record], epoch: int = 4) -> RecordBatch:
    return RecordBatch.from_bytes(
        encode_batch(records, base_offset=base, leader_epoch=epoch, timestamp=1_700_000_000_000)
    )


def test_columns_are_those_of_kafkas_source_plus_leader_epoch() -> None:
    assert spark_schema(False).fieldNames() == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "leaderEpoch",
    ]
    assert spark_schema(True).fieldNames()[-1] == "headers"


def test_every_field_of_a_record_arrives() -> None:
    schema = arrow_schema(spark_schema(True))
    batch = stored(
        10,
        [
            Record(b"v1", key=b"k1", headers=(("h", b"x"),), timestamp=1_700_000_000_123),
            Record(None),
        ],
        epoch=7,
    )
    got = to_arrow([batch], topic="orders", partition=3, start=10, end=12, schema=schema)
    assert got.schema == schema
    rows = got.to_pylist()
    assert rows[0] == {
        "key": b"k1",
        "value": b"v1",
        "topic": "orders",
        "partition": 3,
        "offset": 10,
        "timestamp": datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
        "timestampType": 0,
        "leaderEpoch": 7,
        "headers": [{"key": "h", "value": b"x"}],
    }
    assert rows[1]["value"] is None
    assert rows[1]["key"] is None
    assert rows[1]["headers"] == []
    assert rows[1]["timestamp"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)


@given(st.integers(0, 30), st.integers(0, 30))
def test_only_the_range_is_kept(a: int, b: int) -> None:
    start, end = min(a, b), max(a, b)
    batches = [
        stored(base, [Record(f"{o}".encode()) for o in range(base, base + 10)])
        for base in (0, 10, 20)
    ]
    schema = arrow_schema(spark_schema(False))
    got = to_arrow(batches, topic="t", partition=0, start=start, end=end, schema=schema)
    assert got.column("offset").to_pylist() == list(range(start, end))
    assert got.column("value").to_pylist() == [f"{o}".encode() for o in range(start, end)]
    assert got.num_rows == end - start
    assert got.schema == schema


records = st.lists(
    st.builds(
        Record,
        value=st.none() | st.binary(max_size=40),
        key=st.none() | st.binary(max_size=10),
        headers=st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2).map(
            tuple
        ),
        timestamp=st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=20,
)


@given(st.lists(records, min_size=1, max_size=4), st.booleans())
def test_columns_hold_what_the_records_hold(
    groups: list[list[Record]], include_headers: bool
) -> None:
    batches, base = [], 0
    for group in groups:
        batches.append(stored(base, group))
        base += len(group)
    schema = arrow_schema(spark_schema(include_headers))
    got = to_arrow(batches, topic="t", partition=0, start=0, end=base, schema=schema).to_pylist()
    expected = [r for b in batches for r in b.records()]
    assert [row["offset"] for row in got] == [r.offset for r in expected]
    assert [row["key"] for row in got] == [r.key for r in expected]
    assert [row["value"] for row in got] == [r.value for r in expected]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert [(row["timestamp"] - epoch) // timedelta(milliseconds=1) for row in got] == [
        r.timestamp for r in expected
    ]
    if include_headers:
        assert [[(h["key"], h["value"]) for h in row["headers"]] for row in got] == [
            list(r.headers) for r in expected
        ]
