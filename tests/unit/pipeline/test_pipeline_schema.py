"""Output schema, Arrow equality with Spark's own conversion, rows, and pickling (pyspark, no JVM)."""

import datetime as dt
import pickle

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'sundial-broker[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'sundial-broker[spark]')")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from sundial.pipeline.offsets import TopicPartition  # noqa: E402
from sundial.pipeline.options import parse_options  # noqa: E402
from sundial.pipeline.reader import ReadConfig  # noqa: E402
from sundial.pipeline.records import Columns  # noqa: E402
from sundial.pipeline.resolve import OffsetRange  # noqa: E402
from sundial.pipeline.schema import arrow_schema, spark_schema, to_record_batch, to_rows  # noqa: E402


def sample_columns() -> Columns:
    cols = Columns()
    for i, (key, headers) in enumerate([(b"k0", [("a", b"1"), ("a", None)]), (None, None), (b"", [])]):
        cols.keys.append(key)
        cols.values.append(b"value-%d" % i if i != 1 else None)
        cols.offsets.append(100 + i)
        cols.timestamps.append(1_700_000_000_123 + i)
        cols.timestamp_types.append(i % 2)
        cols.headers.append(headers)
    return cols


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_schema_equals_sparks_conversion(include_headers):
    expected = to_arrow_schema(spark_schema(include_headers), timezone="UTC")
    assert arrow_schema(include_headers).equals(expected)
    batch = to_record_batch(sample_columns(), "orders", 3, include_headers)
    assert batch.schema.equals(expected)


def test_spark_schema_matches_the_kafka_connector():
    schema = spark_schema(True)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields] == [
        ("key", "binary", True), ("value", "binary", True), ("topic", "string", True), ("partition", "int", True),
        ("offset", "bigint", True), ("timestamp", "timestamp", True), ("timestampType", "int", True),
        ("headers", "array<struct<key:string,value:binary>>", True)]
    assert [f.name for f in spark_schema(False).fields][-1] == "timestampType"


def test_record_batch_values():
    batch = to_record_batch(sample_columns(), "orders", 3, True)
    data = batch.to_pydict()
    assert data["key"] == [b"k0", None, b""]
    assert data["value"] == [b"value-0", None, b"value-2"]
    assert data["topic"] == ["orders"] * 3 and data["partition"] == [3] * 3
    assert data["offset"] == [100, 101, 102] and data["timestampType"] == [0, 1, 0]
    assert data["timestamp"][0] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
    assert data["headers"] == [[{"key": "a", "value": b"1"}, {"key": "a", "value": None}], None, []]


def test_rows_match_the_batch():
    cols = sample_columns()
    rows = list(to_rows(cols, "orders", 3, True))
    batch = to_record_batch(cols, "orders", 3, True).to_pylist()
    for row, expect in zip(rows, batch):
        assert row[:7] == (expect["key"], expect["value"], "orders", 3, expect["offset"], expect["timestamp"],
                           expect["timestampType"])
        assert row[5].tzinfo is not None
    assert rows[0][7] == [("a", b"1"), ("a", None)] and rows[1][7] is None
    assert len(next(to_rows(cols, "orders", 3, False))) == 7


def test_partitions_and_readers_pickle():
    from sundial.pipeline.source import SundialBatchReader, SundialDataSource, SundialInputPartition, SundialStreamReader

    opts = parse_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t",
                          "startingTimestamp": "5", "endingTimestamp": "10", "sundial.exactTimeWindow": "true"},
                         streaming=False)
    part = SundialInputPartition(ReadConfig.from_options(opts), OffsetRange(TopicPartition("t", 2), 5, 90, 5, 10))
    back = pickle.loads(pickle.dumps(part))
    assert back.range == part.range and back.config == part.config
    assert back.config.bootstrap_servers == "127.0.0.1:9092"
    assert pickle.loads(pickle.dumps(SundialBatchReader(opts))).opts == opts

    stream_opts = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True)
    reader = SundialStreamReader(stream_opts)
    reader._planner = object()                        # a live planner must never be pickled
    assert pickle.loads(pickle.dumps(reader))._planner is None

    from pyspark import cloudpickle

    source = SundialDataSource({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    assert cloudpickle.loads(cloudpickle.dumps(source)).name() == "sundial"


def test_auto_registration_shim():
    import pyspark_sundial
    from pyspark.sql.datasource import DataSource

    assert issubclass(pyspark_sundial.DefaultSource, DataSource)
    assert pyspark_sundial.DefaultSource.name() == "sundial"


def test_read_of_the_empty_placeholder_partition_yields_nothing():
    from pyspark.sql.datasource import InputPartition

    from sundial.pipeline.source import read_partition

    assert list(read_partition(InputPartition(None))) == []
