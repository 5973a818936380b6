"""Filter pushdown (``sundial.filterPushdown``) against the real daemon.

Ground truth: the records of the topic as kafka-python reads them (partition, offset,
CreateTime), filtered in Python. The first test drives the reader the way Spark's
planning worker does (pushFilters, then partitions) without a JVM and checks the offset
ranges it plans; the Spark tests compare random queries with pushdown on, off, and the
brute-force answer, and read the pushed filters from the plan.
"""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest

from .clients import consume_all, create_topic, producer
from .conftest import unique_topic
from .spark_support import local_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
BASE_TS = (int(time.time() * 1000) // 1000) * 1000 - 3_600_000
PER_PARTITION = 300
UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def data(broker):
    """A 3-partition topic with CreateTimes out of order by up to ±400 ms; [(partition, offset, ts)]."""
    topic = unique_topic("pushdown")
    create_topic(broker.bootstrap, topic, partitions=3)
    rnd = random.Random(5)
    p = producer(broker.bootstrap, linger_ms=20)
    for part in range(3):
        for i in range(PER_PARTITION):
            p.send(topic, key=b"k%d" % i, value=b"v" * (i % 4), partition=part,
                   timestamp_ms=BASE_TS + i * 10 + rnd.randint(-400, 400))
    p.flush()
    p.close()
    truth = consume_all(broker.bootstrap, topic, [0, 1, 2], 3 * PER_PARTITION)
    assert len(truth) == 3 * PER_PARTITION
    return broker.bootstrap, topic, sorted((r.partition, r.offset, r.timestamp) for r in truth)


def at(ms: int, micros: int = 0) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC) + dt.timedelta(microseconds=micros)


def test_the_reader_plans_only_the_filtered_offsets(data):
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'sundial-broker[spark]')")
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan

    from sundial.pipeline.source import SundialDataSource, SundialPushdownReader

    bootstrap, topic, truth = data
    lo = BASE_TS + 1000
    source = SundialDataSource({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                "sundial.filterPushdown": "true"})
    reader = source.reader(None)
    assert isinstance(reader, SundialPushdownReader)
    key_filter = EqualTo(("key",), b"k1")
    filters = [IsNotNull(("timestamp",)), GreaterThanOrEqual(("timestamp",), at(lo, 1)), In(("partition",), (0, 2)),
               LessThan(("offset",), 250), key_filter, LessThan(("timestamp",), at(lo + 500))]
    assert list(reader.pushFilters(filters)) == [key_filter]
    planned = {p.range.tp.partition: (p.range.start, p.range.end, p.range.min_timestamp_ms, p.range.max_timestamp_ms)
               for p in reader.partitions()}
    # timestamp >= lo + 1 µs keeps ts_ms >= lo + 1: the start is the first offset at or after it
    for part in (0, 2):
        first = min(off for p, off, ts in truth if p == part and ts >= lo + 1)
        assert planned[part] == (first, 250, lo + 1, lo + 500)
    assert set(planned) == {0, 2}


@pytest.fixture(scope="module")
def spark():
    with local_spark("sundial-pushdown-tests", **{PUSHDOWN_CONF: "true"}) as session:
        yield session


def _literal(ms: int, micros: int) -> str:
    return "TIMESTAMP '" + at(ms, micros).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


def _random_query(rnd: random.Random):
    """(SQL condition, Python predicate over (partition, offset, ts_ms)) with pushable and other parts."""
    parts, preds = [], []
    if rnd.random() < 0.8:
        a_ms = BASE_TS + rnd.randint(-500, PER_PARTITION * 10)
        a_us = rnd.choice([0, 0, 1, 999])
        b_ms = a_ms + rnd.randint(0, 1500)
        b_us = rnd.choice([0, 500])
        kind = rnd.choice(["range", "between", "gt_le"])
        if kind == "range":
            parts.append(f"timestamp >= {_literal(a_ms, a_us)} AND timestamp < {_literal(b_ms, b_us)}")
            preds.append(lambda p, o, t, a=a_ms * 1000 + a_us, b=b_ms * 1000 + b_us: a <= t * 1000 < b)
        elif kind == "between":
            parts.append(f"timestamp BETWEEN {_literal(a_ms, a_us)} AND {_literal(b_ms, b_us)}")
            preds.append(lambda p, o, t, a=a_ms * 1000 + a_us, b=b_ms * 1000 + b_us: a <= t * 1000 <= b)
        else:
            parts.append(f"timestamp > {_literal(a_ms, a_us)} AND timestamp <= {_literal(b_ms, b_us)}")
            preds.append(lambda p, o, t, a=a_ms * 1000 + a_us, b=b_ms * 1000 + b_us: a < t * 1000 <= b)
    if rnd.random() < 0.5:
        chosen = sorted(rnd.sample(range(3), rnd.randint(1, 2)))
        parts.append(f"partition IN ({', '.join(map(str, chosen))})" if len(chosen) > 1 else f"partition = {chosen[0]}")
        preds.append(lambda p, o, t, c=tuple(chosen): p in c)
    if rnd.random() < 0.5:
        lo, hi = rnd.randint(0, 200), rnd.randint(100, 320)
        parts.append(f"offset >= {lo} AND offset < {hi}")
        preds.append(lambda p, o, t, lo=lo, hi=hi: lo <= o < hi)
    if rnd.random() < 0.3:
        parts.append("length(value) > 1")                           # stays with Spark
        preds.append(lambda p, o, t: o % 4 > 1)
    if not parts:
        parts.append("partition = 1")
        preds.append(lambda p, o, t: p == 1)
    return " AND ".join(parts), preds


def _read(spark, bootstrap, topic, condition, pushdown):
    return (spark.read.format("sundial").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("sundial.filterPushdown", "true" if pushdown else "false").load().where(condition))


def _plan(spark, df) -> str:
    return spark._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted")


def test_random_filters_give_the_same_rows_with_pushdown_on_and_off(spark, data):
    bootstrap, topic, truth = data
    rnd = random.Random(2024)
    for _ in range(8):
        condition, preds = _random_query(rnd)
        expect = sorted((p, o) for p, o, t in truth if all(f(p, o, t) for f in preds))
        on = _read(spark, bootstrap, topic, condition, True)
        off = _read(spark, bootstrap, topic, condition, False)
        rows_on = sorted((r["partition"], r["offset"]) for r in on.select("partition", "offset").collect())
        rows_off = sorted((r["partition"], r["offset"]) for r in off.select("partition", "offset").collect())
        assert rows_on == rows_off == expect, condition
        pushed_line = next((line for line in _plan(spark, on).splitlines() if line.startswith("PushedFilters:")),
                           "PushedFilters: (none)")
        for column in ("timestamp", "partition", "offset"):
            if column + " " in condition:
                assert f"({column}," in pushed_line or f"({column})" in pushed_line, (condition, pushed_line)
        assert "value" not in pushed_line, pushed_line
        off_lines = [line for line in _plan(spark, off).splitlines() if line.startswith("PushedFilters:")]
        assert all(line.strip() == "PushedFilters: []" for line in off_lines), off_lines


def test_the_option_without_the_spark_conf_is_refused_by_name(spark, data):
    bootstrap, topic, _ = data
    spark.conf.set(PUSHDOWN_CONF, "false")
    try:
        with pytest.raises(Exception, match=f"DATA_SOURCE_PUSHDOWN_DISABLED.*{PUSHDOWN_CONF}"):
            _read(spark, bootstrap, topic, "partition = 1", True).collect()
        assert _read(spark, bootstrap, topic, "partition = 1", False).count() == PER_PARTITION
    finally:
        spark.conf.set(PUSHDOWN_CONF, "true")
