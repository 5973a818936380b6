"""The sink's input columns: validation against the DataFrame's schema, and rows -> records.

spark-sql-kafka's input columns, matched by exact (lower-case) name; other columns are
ignored, so the reader's output (``offset``, ``timestampType``, ...) can be written back
unchanged:

    key        binary or string, optional (null -> null key)
    value      binary or string, required (null -> a tombstone)
    headers    array<struct<key: string, value: binary>>, optional (null -> no headers)
    topic      string, required unless the ``topic`` option is set (the option wins)
    partition  int, optional (null -> the producer's partitioner)

plus Sundial's own, which spark-sql-kafka does not have (its records are stamped when
they are sent):

    timestamp  timestamp, or long (epoch ms), optional: the record's CreateTime
               (null -> the time it is sent). A topic with
               ``message.timestamp.type=LogAppendTime`` replaces it with the broker's
               time, as Kafka does.

A string key or value is written as its UTF-8 bytes. Timestamps are whole milliseconds:
Spark's microseconds are floored to ms. A CreateTime must be > 0 ms (the producer client
reads 0 as "now", and Kafka refuses negative times); a row that breaks that, a null
topic without the ``topic`` option, or a header with a null key fails the task with a
:class:`pipeline.errors.SinkError` naming the row.

Pure Python; :func:`arrow_columns` imports pyarrow, :func:`input_layout` reads Spark
types through their ``simpleString()`` so that it needs no JVM.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

from .errors import OptionError, SinkError

HEADERS_TYPE = "array<struct<key:string,value:binary>>"

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class InputLayout:
    """Where each sink column sits in the input rows (None: absent)."""

    value: int
    key: int | None = None
    topic: int | None = None
    partition: int | None = None
    headers: int | None = None
    timestamp: int | None = None
    timestamp_is_long: bool = False     # a long of epoch ms instead of a Spark timestamp
    fixed_topic: str | None = None      # the ``topic`` option


@dataclass
class SinkColumns:
    """One chunk of rows, column-wise, ready for the producer."""

    values: list
    keys: list
    topics: list | None                 # None: every row goes to ``topic``
    topic: str | None
    partitions: list                    # -1 where the row names none
    timestamps: list                    # epoch ms; 0 where the row names none
    headers: list | None                # None: no headers column

    def __len__(self) -> int:
        return len(self.values)


def _field_types(schema) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in schema.fields}


def input_layout(schema, topic_option: str | None) -> InputLayout:
    """Check the DataFrame's columns the way spark-sql-kafka does; raise :class:`OptionError`."""
    names = [f.name for f in schema.fields]
    types = _field_types(schema)
    index = {name: i for i, name in enumerate(names)}

    def check(name: str, allowed: Sequence[str], what: str) -> int | None:
        if name not in types:
            return None
        if types[name] not in allowed:
            raise OptionError(name, f"the '{name}' column must be {what}; it is {types[name]}")
        return index[name]

    if "value" not in types:
        raise OptionError("value", (
            f"the sink needs a 'value' column (binary or string); the DataFrame has {names}"))
    value = check("value", ("binary", "string"), "binary or string")
    key = check("key", ("binary", "string"), "binary or string")
    topic = check("topic", ("string",), "a string")
    if topic is None and topic_option is None:
        raise OptionError("topic", (
            "no topic: set the 'topic' option, or write a 'topic' column (string) naming each row's topic"))
    partition = check("partition", ("int",), "an int (cast it with .cast('int'))")
    headers = check("headers", (HEADERS_TYPE,), HEADERS_TYPE)
    timestamp = check("timestamp", ("timestamp", "bigint"),
                      "a timestamp, or a long of epoch milliseconds (a timestamp_ntz has no time zone: "
                      "convert it with to_utc_timestamp)")
    return InputLayout(
        value=value, key=key, topic=None if topic_option is not None else topic, partition=partition,
        headers=headers, timestamp=timestamp,
        timestamp_is_long=timestamp is not None and types["timestamp"] == "bigint",
        fixed_topic=topic_option,
    )


# --- errors that name the row ------------------------------------------------------------

@dataclass(frozen=True)
class RowPosition:
    """Where a row sits: its index among the rows one Spark task writes."""

    spark_partition: int
    attempt: int = 0

    def describe(self, row: int) -> str:
        which = f"row {row}" if row >= 0 else "a row"
        return f"{which} of Spark partition {self.spark_partition} (task attempt {self.attempt})"


def _format_ms(ms: int) -> str:
    try:
        return (_EPOCH + _dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:
        return "out of range"


def bad_timestamp(position: RowPosition, row: int, ms: int) -> SinkError:
    reason = ("the producer client reads a CreateTime of 0 as 'now'" if ms == 0
              else "Kafka refuses negative timestamps")
    return SinkError(f"{position.describe(row)}: timestamp {ms} ms ({_format_ms(ms)}) cannot be written: {reason}")


def _check_row_values(position: RowPosition, first_row: int, cols: SinkColumns) -> None:
    if cols.topics is not None:
        for i, topic in enumerate(cols.topics):
            if topic is None:
                raise SinkError(f"{position.describe(first_row + i)}: the 'topic' column is null; set the "
                                f"'topic' option or give every row a topic")
    if cols.headers is not None:
        for i, headers in enumerate(cols.headers):
            if headers and any(k is None for k, _ in headers):
                raise SinkError(f"{position.describe(first_row + i)}: a header has a null key; Kafka header "
                                f"keys are strings")


# --- Arrow batches -------------------------------------------------------------------------

def arrow_columns(batch, layout: InputLayout, position: RowPosition, first_row: int) -> SinkColumns:
    """One ``pyarrow.RecordBatch`` of input rows as :class:`SinkColumns`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    values = batch.column(layout.value).to_pylist()
    keys = batch.column(layout.key).to_pylist() if layout.key is not None else [None] * n
    topics = batch.column(layout.topic).to_pylist() if layout.topic is not None else None
    if layout.partition is not None:
        partitions = pc.fill_null(batch.column(layout.partition), -1).to_pylist()
    else:
        partitions = [-1] * n
    if layout.timestamp is not None:
        column = batch.column(layout.timestamp)
        if layout.timestamp_is_long:
            ms = column.cast(pa.int64())
        else:
            micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            # floor to ms: Arrow's integer division truncates, and only values <= 0 differ
            ms = pc.divide(pc.subtract(micros, pc.if_else(pc.less(micros, 0), 999, 0)), 1000)
        bad = pc.and_kleene(pc.is_valid(ms), pc.less_equal(ms, 0))
        if pc.any(bad).as_py():
            row = pc.index(bad, True).as_py()
            raise bad_timestamp(position, first_row + row, ms[row].as_py())
        timestamps = pc.fill_null(ms, 0).to_pylist()
    else:
        timestamps = [0] * n
    headers = None
    if layout.headers is not None:
        headers = [None if hs is None else [(h["key"], h["value"]) for h in hs]
                   for hs in batch.column(layout.headers).to_pylist()]
    cols = SinkColumns(values, keys, topics, layout.fixed_topic, partitions, timestamps, headers)
    _check_row_values(position, first_row, cols)
    return cols


# --- Row objects ------------------------------------------------------------------------------

def _bytes(value):
    return bytes(value) if isinstance(value, bytearray) else value


def datetime_ms(value: _dt.datetime) -> int:
    """Epoch ms of a Spark row timestamp, floored (naive values are local time, as pyspark makes them)."""
    if value.tzinfo is not None:
        seconds = calendar.timegm(value.utctimetuple())
    else:
        seconds = int(time.mktime(value.timetuple()))
    return seconds * 1000 + value.microsecond // 1000


def row_columns(rows: Iterable, layout: InputLayout, position: RowPosition, first_row: int) -> SinkColumns:
    """A chunk of pyspark ``Row`` objects (tuples in schema order) as :class:`SinkColumns`."""
    values: list = []
    keys: list = []
    topics: list | None = [] if layout.topic is not None else None
    partitions: list = []
    timestamps: list = []
    headers: list | None = [] if layout.headers is not None else None
    v, k, t, p, h, ts = layout.value, layout.key, layout.topic, layout.partition, layout.headers, layout.timestamp
    for i, row in enumerate(rows):
        values.append(_bytes(row[v]))
        keys.append(_bytes(row[k]) if k is not None else None)
        if topics is not None:
            topics.append(row[t])
        part = row[p] if p is not None else None
        partitions.append(-1 if part is None else part)
        stamp = row[ts] if ts is not None else None
        if stamp is None:
            ms = 0
        else:
            ms = stamp if layout.timestamp_is_long else datetime_ms(stamp)
            if ms <= 0:
                raise bad_timestamp(position, first_row + i, ms)
        timestamps.append(ms)
        if headers is not None:
            hs = row[h]
            headers.append(None if hs is None else [(x[0], _bytes(x[1])) for x in hs])
    cols = SinkColumns(values, keys, topics, layout.fixed_topic, partitions, timestamps, headers)
    _check_row_values(position, first_row, cols)
    return cols
