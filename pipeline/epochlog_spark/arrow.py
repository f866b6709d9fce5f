"""The source's columns, and stored record batches turned into Arrow record batches.

Columns as Spark's Kafka source has them, plus the leader epoch that wrote each
record: key and value (binary), topic, partition, offset, timestamp,
timestampType, leaderEpoch, and headers (array of key/value structs) when
`includeHeaders` is set. Names follow the wire rule (`leader_epoch` <->
`leaderEpoch`). timestampType is 0 (CreateTime, Kafka's code) for every
record: the time in a record is the one its producer gave, or the leader's
clock when a JSON produce gave none.

`to_arrow` decodes the records of stored batches column by column
(`epochlog.protocol.batch.decode_columns`) and keeps those in [start, end);
the result has exactly the Arrow schema Spark expects for `spark_schema`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from epochlog.protocol.batch import RecordBatch
from epochlog.protocol.wire import wire_name

CREATE_TIME: Final = 0
"""Kafka's timestampType code for a producer's time."""

KEY: Final = "key"
VALUE: Final = "value"
TOPIC: Final = "topic"
PARTITION: Final = "partition"
OFFSET: Final = "offset"
TIMESTAMP: Final = "timestamp"
TIMESTAMP_TYPE: Final = wire_name("timestamp_type")
LEADER_EPOCH: Final = wire_name("leader_epoch")
HEADERS: Final = "headers"

HEADER_TYPE: Final = ArrayType(
    StructType([StructField(KEY, StringType(), False), StructField(VALUE, BinaryType(), True)]),
    False,
)


def spark_schema(include_headers: bool) -> StructType:
    fields = [
        StructField(KEY, BinaryType(), True),
        StructField(VALUE, BinaryType(), True),
        StructField(TOPIC, StringType(), False),
        StructField(PARTITION, IntegerType(), False),
        StructField(OFFSET, LongType(), False),
        StructField(TIMESTAMP, TimestampType(), False),
        StructField(TIMESTAMP_TYPE, IntegerType(), False),
        StructField(LEADER_EPOCH, IntegerType(), False),
    ]
    if include_headers:
        fields.append(StructField(HEADERS, HEADER_TYPE, False))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks a Python data source's record batches against."""
    return to_arrow_schema(schema, timezone="UTC")


def to_arrow(
    batches: Iterable[RecordBatch],
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    schema: pa.Schema,
) -> pa.RecordBatch:
    """The records of `batches` with offsets in [start, end), as one Arrow record batch."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    timestamps: list[int] = []
    offsets: list[int] = []
    epochs: list[int] = []
    headers: list[tuple[tuple[str, bytes], ...]] = []
    for batch in batches:
        base = batch.base_offset
        lo = max(start - base, 0)
        hi = min(end, batch.next_offset) - base
        if hi <= lo:
            continue
        offsets += range(base + lo, base + hi)
        cols = batch.columns()
        keys += cols.keys[lo:hi]
        values += cols.values[lo:hi]
        timestamps += cols.timestamps[lo:hi]
        epochs += [batch.leader_epoch] * (hi - lo)
        headers += cols.headers[lo:hi]
    n = len(values)
    ts = pa.array(timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(topic, n).cast(pa.string()) if n else pa.array([], pa.string()),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        ts.cast(schema.field(TIMESTAMP).type),
        pa.repeat(pa.scalar(CREATE_TIME, pa.int32()), n),
        pa.array(epochs, pa.int32()),
    ]
    if HEADERS in schema.names:
        arrays.append(
            pa.array(
                [[{KEY: k, VALUE: v} for k, v in hs] for hs in headers],
                schema.field(HEADERS).type,
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
