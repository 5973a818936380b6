"""The output schema (spark-sql-kafka's, column for column) and its Arrow rendering.

    key binary | value binary | topic string | partition int | offset long
    | timestamp timestamp (UTC) | timestampType int | headers array<struct<key string, value binary>>

All columns nullable. ``headers`` exists only with ``includeHeaders=true`` and is null
(not an empty array) for a record without headers; header order is kept and keys may
repeat. ``timestampType`` is Kafka's id: 0 CreateTime, 1 LogAppendTime (-1 none).

Arrow batches handed to Spark must *equal* Spark's own Arrow rendering of the declared
schema (``to_arrow_schema(schema, timezone="UTC")``): ``timestamp[us, tz=UTC]`` and
list children named ``element``. :func:`arrow_schema` builds it without pyspark;
tests/unit/pipeline compares the two.

Rows mode yields tuples in the same order, with a timezone-aware UTC ``datetime``.
"""

from __future__ import annotations

import datetime as _dt

from .records import Columns

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def spark_schema(include_headers: bool):
    """The Spark ``StructType`` (imports pyspark)."""
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

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()),
            StructField("value", BinaryType()),
        ]))))
    return StructType(fields)


_ARROW_SCHEMAS: dict = {}


def arrow_schema(include_headers: bool):
    """The Arrow schema Spark expects for :func:`spark_schema` (imports pyarrow only)."""
    cached = _ARROW_SCHEMAS.get(include_headers)
    if cached is not None:
        return cached
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field(
            "element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))))
    schema = pa.schema(fields)
    _ARROW_SCHEMAS[include_headers] = schema
    return schema


def to_record_batch(cols: Columns, topic: str, partition: int, include_headers: bool):
    """One ``pyarrow.RecordBatch`` from decoded columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema(include_headers)
    n = len(cols)
    ts_ms = pa.array(cols.timestamps, pa.int64())
    arrays = [
        pa.array(cols.keys, pa.binary()),
        pa.array(cols.values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(cols.offsets, pa.int64()),
        # ms -> us; the multiply cannot overflow for any int64 ms a broker accepts
        pc.multiply(ts_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(cols.timestamp_types, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(cols.headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def to_rows(cols: Columns, topic: str, partition: int, include_headers: bool):
    """Tuples in schema order (rows mode)."""
    delta = _dt.timedelta
    epoch = _EPOCH
    if include_headers:
        for key, value, offset, ts, ts_type, headers in zip(cols.keys, cols.values, cols.offsets, cols.timestamps,
                                                           cols.timestamp_types, cols.headers):
            yield (key, value, topic, partition, offset, epoch + delta(milliseconds=ts), ts_type, headers)
    else:
        for key, value, offset, ts, ts_type in zip(cols.keys, cols.values, cols.offsets, cols.timestamps,
                                                   cols.timestamp_types):
            yield (key, value, topic, partition, offset, epoch + delta(milliseconds=ts), ts_type)
