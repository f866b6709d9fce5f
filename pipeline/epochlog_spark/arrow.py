"""The source's columns, and stored record batches turned into Arrow record batches.

Columns as Spark's Kafka source has them, plus the leader epoch that wrote each
record: key and value (binary), topic, partition, offset, timestamp,
timestampType, leaderEpoch, and headers (array of key/value structs) when
`includeHeaders` is set. Names follow the wire rule (`leader_epoch` <->
`leaderEpoch`). timestampType is 0 (CreateTime, Kafka's code) for every
record: the time in a record is the one its producer gave, or the leader's
clock when a JSON produce gave none.

`to_arrow` decodes the records of stored batches into packed columns
(`epochlog.protocol.batch.decode_packed`: keys and values back to back, no
object per record), takes those buffers as Arrow arrays as they are, and keeps
the records in [start, end);
the result has exactly the Arrow schema Spark expects for `spark_schema`.
"""

from __future__ import annotations

from array import array
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

from epochlog.protocol.batch import PackedColumn, RecordBatch
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


def _fixed(values: array[int], type_: pa.DataType) -> pa.Array:
    """A fixed-width Arrow array over the bytes of a Python array (no per-item conversion)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _binary(column: PackedColumn) -> pa.Array:
    """An Arrow binary array over a packed column's buffers, as they are."""
    n = len(column.ends)
    offsets = array("i", [0])
    offsets.extend(column.ends)
    validity = None
    if column.nulls:
        bits = bytearray(b"\xff" * ((n + 7) // 8))
        for i in column.nulls:
            bits[i >> 3] &= ~(1 << (i & 7)) & 0xFF
        validity = pa.py_buffer(bits)
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets), pa.py_buffer(column.data)],
        null_count=len(column.nulls),
    )


def _concat(pieces: list[pa.Array], type_: pa.DataType) -> pa.Array:
    if not pieces:
        return pa.array([], type_)
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


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
    keys: list[pa.Array] = []
    values: list[pa.Array] = []
    timestamps: list[pa.Array] = []
    offsets = array("q")
    epochs = array("i")
    headers: list[tuple[tuple[str, bytes], ...]] = []
    with_headers = HEADERS in schema.names
    for batch in batches:
        base = batch.base_offset
        lo = max(start - base, 0)
        hi = min(end, batch.next_offset) - base
        if hi <= lo:
            continue
        cols = batch.packed()
        count = hi - lo
        offsets.extend(range(base + lo, base + hi))
        epochs.extend(array("i", [batch.leader_epoch]) * count)
        keys.append(_binary(cols.keys).slice(lo, count))
        values.append(_binary(cols.values).slice(lo, count))
        timestamps.append(_fixed(cols.timestamps, pa.int64()).slice(lo, count))
        if with_headers:
            headers += cols.headers[lo:hi] if cols.headers is not None else [()] * count
    n = len(offsets)
    ts = _concat(timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    arrays = [
        _concat(keys, pa.binary()),
        _concat(values, pa.binary()),
        pa.repeat(topic, n).cast(pa.string()) if n else pa.array([], pa.string()),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _fixed(offsets, pa.int64()),
        ts.cast(schema.field(TIMESTAMP).type),
        pa.repeat(pa.scalar(CREATE_TIME, pa.int32()), n),
        _fixed(epochs, pa.int32()),
    ]
    if with_headers:
        arrays.append(
            pa.array(
                [[{KEY: k, VALUE: v} for k, v in hs] for hs in headers],
                schema.field(HEADERS).type,
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
