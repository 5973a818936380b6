"""The sink's input columns: schema checks, and Arrow batches / Rows -> records (pyspark types, no JVM).

Input is built the way Spark hands it to a Python data source writer: Arrow batches in
Spark's own Arrow rendering of the schema, and Rows made from them by pyspark's own
converters (what ``write_into_data_source`` does for a row writer). Both paths must give
the records a brute-force reading of the rows gives.
"""

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'sundial-broker[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'sundial-broker[spark]')")

from pyspark.sql.conversion import ArrowTableToRowsConversion  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    _create_row,
)

from sundial.pipeline.errors import OptionError, SinkError  # noqa: E402
from sundial.pipeline.sink_columns import RowPosition, arrow_columns, input_layout, row_columns  # noqa: E402

UTC = dt.timezone.utc
HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
POS = RowPosition(3, 1)


def schema_of(**types):
    return StructType([StructField(name, t) for name, t in types.items()])


FULL = schema_of(key=BinaryType(), value=BinaryType(), topic=StringType(), partition=IntegerType(),
                 timestamp=TimestampType(), headers=HEADERS, offset=LongType())


def arrow_batch(schema, rows, tz="America/New_York"):
    """Spark's Arrow rendering (timestamps carry the session time zone)."""
    arrow = to_arrow_schema(schema, timezone=tz)
    columns = list(zip(*rows)) if rows else [[] for _ in schema.fields]
    arrays = []
    for f, values in zip(arrow, columns):
        if pa.types.is_list(f.type):
            values = [None if hs is None else [{"key": k, "value": v} for k, v in hs] for hs in values]
        arrays.append(pa.array(list(values), f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow)


def spark_rows(schema, batch):
    """What pyspark's writer worker hands a DataSourceWriter for that batch."""
    converters = [ArrowTableToRowsConversion._create_converter(f.dataType, binary_as_bytes=False)
                  for f in schema.fields]
    columns = [ArrowTableToRowsConversion._to_pylist(c) for c in batch.columns]
    return [_create_row(schema.fieldNames(), [converters[c](columns[c][r]) for c in range(batch.num_columns)])
            for r in range(batch.num_rows)]


# --- layout -----------------------------------------------------------------------------------

def test_layout_finds_the_columns_and_ignores_others():
    layout = input_layout(FULL, None)
    assert (layout.key, layout.value, layout.topic, layout.partition, layout.timestamp, layout.headers) == \
        (0, 1, 2, 3, 4, 5)
    assert not layout.timestamp_is_long and layout.fixed_topic is None
    # the topic option wins over the column
    assert input_layout(FULL, "out").topic is None and input_layout(FULL, "out").fixed_topic == "out"
    minimal = input_layout(schema_of(value=StringType()), "out")
    assert (minimal.key, minimal.partition, minimal.timestamp, minimal.headers) == (None, None, None, None)
    assert input_layout(schema_of(value=BinaryType(), timestamp=LongType()), "t").timestamp_is_long


@pytest.mark.parametrize("schema, topic, column, text", [
    (schema_of(key=BinaryType()), "t", "value", "needs a 'value' column"),
    (schema_of(value=IntegerType()), "t", "value", "binary or string"),
    (schema_of(value=BinaryType(), key=LongType()), "t", "key", "binary or string"),
    (schema_of(value=BinaryType()), None, "topic", "no topic"),
    (schema_of(value=BinaryType(), topic=BinaryType()), None, "topic", "a string"),
    (schema_of(value=BinaryType(), partition=LongType()), "t", "partition", "cast"),
    (schema_of(value=BinaryType(), timestamp=TimestampNTZType()), "t", "timestamp", "to_utc_timestamp"),
    (schema_of(value=BinaryType(), timestamp=StringType()), "t", "timestamp", "epoch milliseconds"),
    (schema_of(value=BinaryType(), headers=ArrayType(StringType())), "t", "headers", "array<struct"),
])
def test_layout_refusals_name_the_column(schema, topic, column, text):
    with pytest.raises(OptionError, match=text) as info:
        input_layout(schema, topic)
    assert info.value.option == column


# --- Arrow and Row paths against brute force ------------------------------------------------------

_ms = st.integers(1, 4_000_000_000_000)
_row = st.tuples(
    st.one_of(st.none(), st.binary(max_size=8)),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.sampled_from(["a", "b", "c.d"]),
    st.one_of(st.none(), st.integers(0, 9)),
    st.one_of(st.none(), st.builds(lambda ms, us: dt.datetime(1970, 1, 1, tzinfo=UTC)
                                   + dt.timedelta(milliseconds=ms, microseconds=us), _ms, st.integers(0, 999))),
    st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["h", "ü", ""]), st.one_of(st.none(), st.binary(max_size=4))),
                                  max_size=3)),
    st.integers(0, 10),
)


def expected(rows):
    out = []
    for key, value, topic, part, ts, headers, _ in rows:
        ms = 0 if ts is None else (ts - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(milliseconds=1)
        out.append((value, key, topic, -1 if part is None else part, ms,
                    None if headers is None else [tuple(h) for h in headers]))
    return out


def records(cols):
    topics = cols.topics if cols.topics is not None else [cols.topic] * len(cols)
    headers = cols.headers if cols.headers is not None else [None] * len(cols)
    return list(zip(cols.values, cols.keys, topics, cols.partitions, cols.timestamps, headers))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(_row, max_size=20))
def test_property_arrow_and_row_paths_give_the_brute_force_records(rows):
    batch = arrow_batch(FULL, rows)
    layout = input_layout(FULL, None)
    want = expected(rows)
    assert records(arrow_columns(batch, layout, POS, 0)) == want
    assert records(row_columns(spark_rows(FULL, batch), layout, POS, 0)) == want


def test_topic_option_long_timestamps_and_string_values():
    schema = schema_of(value=StringType(), key=StringType(), timestamp=LongType(), topic=StringType())
    rows = [("v1", "k1", 1_700_000_000_123, "ignored"), (None, None, None, None)]
    batch = arrow_batch(schema, rows)
    layout = input_layout(schema, "out")
    for cols in (arrow_columns(batch, layout, POS, 0), row_columns(spark_rows(schema, batch), layout, POS, 0)):
        assert records(cols) == [("v1", "k1", "out", -1, 1_700_000_000_123, None), (None, None, "out", -1, 0, None)]


@pytest.mark.parametrize("bad", [dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=999),
                                 dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)])
def test_timestamps_at_or_before_the_epoch_fail_naming_the_row(bad):
    ok = dt.datetime(2026, 1, 1, tzinfo=UTC)
    schema = schema_of(value=BinaryType(), timestamp=TimestampType())
    batch = arrow_batch(schema, [(b"a", ok), (b"b", None), (b"c", bad)])
    layout = input_layout(schema, "t")
    for make in (lambda: arrow_columns(batch, layout, POS, 100),
                 lambda: row_columns(spark_rows(schema, batch), layout, POS, 100)):
        with pytest.raises(SinkError, match=r"row 102 of Spark partition 3 \(task attempt 1\): timestamp -?\d+ ms"):
            make()


def test_null_topic_and_null_header_key_fail_naming_the_row():
    schema = schema_of(value=BinaryType(), topic=StringType())
    batch = arrow_batch(schema, [(b"a", "t"), (b"b", None)])
    with pytest.raises(SinkError, match="row 1 of Spark partition 3.*'topic' column is null"):
        arrow_columns(batch, input_layout(schema, None), POS, 0)
    schema = schema_of(value=BinaryType(), headers=HEADERS)
    batch = arrow_batch(schema, [(b"a", [("k", b"v")]), (b"b", [(None, b"v")])])
    with pytest.raises(SinkError, match="row 1 of Spark partition 3.*null key"):
        arrow_columns(batch, input_layout(schema, "t"), POS, 0)
