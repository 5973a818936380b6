"""``df.write.format("sundial")`` and ``writeStream.format("sundial")`` in Spark local[2] against the real daemon.

Ground truth is independent of the sink: what a test writes is computed in Python from
the row number, and what the topic holds is read back with kafka-python (read_committed
where transactions matter). One SparkSession serves the module.
"""

from __future__ import annotations

import calendar
import json
import os
import time

import pytest

from .clients import consume_all, create_topic, producer
from .conftest import unique_topic
from .spark_support import local_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HOUR_MS = 3_600_000
# an hour ago, on a whole second: old enough to be "the past", young enough for retention
BASE_TS = (int(time.time() * 1000) // 1000) * 1000 - HOUR_MS


@pytest.fixture(scope="module")
def spark():
    with local_spark("sundial-sink-tests") as session:
        yield session


def sink(df, bootstrap, **options):
    w = df.write.format("sundial").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def read_back(bootstrap, topic, partitions, expected, **kw):
    records = consume_all(bootstrap, topic, list(range(partitions)), expected, timeout_s=120, **kw)
    return records


# --- batch -------------------------------------------------------------------------------------

def expected_row(i: int) -> tuple:
    """(key, value, partition, timestamp_ms, headers) of row i, as the DataFrame below builds it."""
    headers = None if i % 3 == 0 else [("seq", str(i).encode())] if i % 3 == 1 else [("a", b"\x01"), ("a", None)]
    return (f"k{i}".encode(), f"v{i}-".encode() + b"x" * (i % 50), i % 4, BASE_TS + (i * 7919) % 1_000_000,
            headers)


def generated(spark, n):
    from pyspark.sql import functions as F

    i = F.col("id")
    pair = lambda k, v: F.struct(F.lit(k).alias("key"), v.alias("value"))  # noqa: E731
    headers = (F.when(i % 3 == 0, F.lit(None))
               .when(i % 3 == 1, F.array(pair("seq", i.cast("string").cast("binary"))))
               .otherwise(F.array(pair("a", F.lit(b"\x01")), pair("a", F.lit(None).cast("binary")))))
    return spark.range(n).select(
        F.concat(F.lit("k"), i.cast("string")).cast("binary").alias("key"),
        F.concat(F.lit("v"), i.cast("string"), F.lit("-"), F.expr("repeat('x', id % 50)")).cast("binary")
        .alias("value"),
        (i % 4).cast("int").alias("partition"),
        F.timestamp_millis(F.lit(BASE_TS) + (i * 7919) % 1_000_000).alias("timestamp"),
        headers.alias("headers"),
        F.lit("not a sink column").alias("comment"))


@pytest.mark.parametrize("input_format, rows", [("arrow", 100_000), ("rows", 5_000)])
def test_batch_write_then_read_back_every_row_once(spark, broker, input_format, rows):
    topic = unique_topic("sink-batch")
    create_topic(broker.bootstrap, topic, partitions=4)
    sink(generated(spark, rows).repartition(3), broker.bootstrap, topic=topic,
         **{"sundial.inputFormat": input_format}).save()
    records = read_back(broker.bootstrap, topic, 4, rows)
    assert len(records) == rows
    got = {}
    for r in records:
        assert r.key not in got, f"{r.key!r} written twice"
        got[r.key] = (r.value, r.partition, r.timestamp, r.timestamp_type, [(k, v) for k, v in r.headers] or None)
    for i in range(rows):
        key, value, partition, ts, headers = expected_row(i)
        assert got[key] == (value, partition, ts, 0, headers), i


def test_log_append_time_topic_keeps_the_broker_time(spark, broker):
    from pyspark.sql import functions as F

    topic = unique_topic("sink-lat")
    create_topic(broker.bootstrap, topic, partitions=2, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    df = spark.range(300).select(F.col("id").cast("string").alias("value"),
                                 F.timestamp_millis(F.lit(BASE_TS - 24 * HOUR_MS)).alias("timestamp"))
    sink(df, broker.bootstrap, topic=topic).save()
    after = int(time.time() * 1000)
    records = read_back(broker.bootstrap, topic, 2, 300)
    assert sorted(int(r.value) for r in records) == list(range(300))
    assert {r.timestamp_type for r in records} == {1}
    assert all(before <= r.timestamp <= after for r in records)


def test_refused_records_fail_the_task_naming_the_row(spark, broker):
    """A bounded topic refuses an old CreateTime: the job fails naming the row and the broker's error."""
    from pyspark.sql import functions as F

    def rows_with_one_old(n, bad, *extra):
        i = F.col("id")
        ts = F.when(i == bad, F.lit(BASE_TS - 48 * HOUR_MS)).otherwise(F.lit(int(time.time() * 1000)) + i)
        return spark.range(n).coalesce(1).select(F.concat(F.lit("k"), i.cast("string")).alias("key"),
                                                 i.cast("string").alias("value"),
                                                 F.timestamp_millis(ts).alias("timestamp"), *extra)

    bounded = {"message.timestamp.before.max.ms": str(HOUR_MS)}
    # exactly-once: the task's transaction is aborted, so nothing of it is visible
    topic = unique_topic("sink-bounded-eos")
    create_topic(broker.bootstrap, topic, partitions=1, configs=bounded)
    with pytest.raises(Exception) as info:
        sink(rows_with_one_old(500, 137), broker.bootstrap, topic=topic, **{"sundial.exactlyOnce": "true"}).save()
    text = str(info.value)
    assert "row 137 of Spark partition 0" in text and "INVALID_TIMESTAMP" in text
    assert "message.timestamp.before.max.ms" in text
    assert "read_committed consumers see none of its records" in text
    assert consume_all(broker.bootstrap, topic, [0], 1, timeout_s=5, isolation_level="read_committed") == []
    # at-least-once, rows naming their partition: the refused record is not stored, the error names it
    topic = unique_topic("sink-bounded")
    create_topic(broker.bootstrap, topic, partitions=1, configs=bounded)
    with pytest.raises(Exception, match=r"row 42 of Spark partition 0 \(task attempt 0\) was refused: "
                                        r"INVALID_TIMESTAMP"):
        sink(rows_with_one_old(100, 42, F.lit(0).alias("partition")), broker.bootstrap, topic=topic).save()
    stored = consume_all(broker.bootstrap, topic, [0], 100, timeout_s=5)
    keys = [r.key for r in stored]
    assert b"k42" not in keys and len(keys) == len(set(keys))


def test_planning_refusals_are_clear(spark, broker):
    from pyspark.sql import functions as F

    df = spark.range(3).select(F.col("id").cast("string").alias("value"))
    with pytest.raises(Exception, match=r"mode\('overwrite'\) is not supported, use mode\('append'\)"):
        df.write.format("sundial").mode("overwrite").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", "t").save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        sink(df.select(F.col("value").alias("payload")), broker.bootstrap, topic="t").save()
    with pytest.raises(Exception, match="no topic: set the 'topic' option"):
        sink(df, broker.bootstrap).save()
    with pytest.raises(Exception, match="Kafka option 'key.serializer' is not supported"):
        sink(df, broker.bootstrap, topic="t", **{"kafka.key.serializer": "x"}).save()


# --- streaming exactly-once across a failure and a restart --------------------------------------

def _source_records(bootstrap, topic, start, count, partitions=3):
    """Produce values f"r{n}" for n in [start, start + count) with CreateTimes; returns {value: ts}."""
    p = producer(bootstrap)
    sent = {}
    for n in range(start, start + count):
        ts = BASE_TS + n * 13
        p.send(topic, key=b"key%d" % (n % 17), value=b"r%d" % n, partition=n % partitions, timestamp_ms=ts)
        sent[b"r%d" % n] = ts
    p.flush()
    p.close()
    return sent


def _fail_once_udf(flag_path, bootstrap, marker_prefix):
    """A pass-through UDF whose task for source partition 2 fails at its last row while ``flag_path``
    exists, once the tasks of the two other source partitions have committed (their exactly-once
    markers are visible: read_committed offsets cannot show it while this task's transaction is open)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    def check(value, partition, last):
        if partition == 2 and last and os.path.exists(flag_path):
            from kafka import KafkaAdminClient

            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                groups = [g["group_id"] for g in admin.list_groups() if g["group_id"].startswith(marker_prefix)]
                if sum(1 for g in groups if admin.list_group_offsets(g).get(g)) >= 2:
                    break
                time.sleep(0.1)
            admin.close()
            raise RuntimeError("deliberate failure of the task for source partition 2")
        return value

    return F.udf(check, BinaryType(), useArrow=False)


def _run_stream(spark, bootstrap, src, out, checkpoint, udf, prefix):
    """One Trigger.AvailableNow run of src -> out with exactly-once; returns the finished query."""
    from pyspark.sql import functions as F

    df = (spark.readStream.format("sundial").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").load())
    last = F.col("offset") == F.lit(199)          # each source partition's last record of the first batch
    query = (df.select("key", udf(F.col("value"), F.col("partition"), last).alias("value"), "timestamp")
             .writeStream.format("sundial").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("sundial.exactlyOnce", "true").option("sundial.transactionalIdPrefix", prefix)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(300)
    except Exception:       # a failed query raises here; the test looks at query.exception()
        pass
    return query


def test_streaming_exactly_once_survives_a_failed_batch_and_a_restart(spark, broker, tmp_path):
    src, out = unique_topic("sink-eos-src"), unique_topic("sink-eos-out")
    create_topic(broker.bootstrap, src, partitions=3)
    create_topic(broker.bootstrap, out, partitions=2)
    sent = _source_records(broker.bootstrap, src, 0, 600)          # 200 per source partition
    flag = tmp_path / "fail-once"
    flag.write_text("fail")
    checkpoint = tmp_path / "ckpt"
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")   # the writer sees rows before the failure
    try:
        prefix = f"{out}-"
        udf = _fail_once_udf(str(flag), broker.bootstrap, prefix)
        first = _run_stream(spark, broker.bootstrap, src, out, checkpoint, udf, prefix)
        assert first.exception() is not None and "deliberate failure" in str(first.exception())
        flag.unlink()
        # the restart re-runs batch 0 from the checkpoint: the two tasks that had committed abort
        second = _run_stream(spark, broker.bootstrap, src, out, checkpoint, udf, prefix)
        assert second.exception() is None
        sent.update(_source_records(broker.bootstrap, src, 600, 300))
        third = _run_stream(spark, broker.bootstrap, src, out, checkpoint, udf, prefix)    # the next batch
        assert third.exception() is None
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    committed = consume_all(broker.bootstrap, out, [0, 1], len(sent), timeout_s=120, isolation_level="read_committed")
    values = [r.value for r in committed]
    assert len(values) == len(set(values)) == len(sent), "read_committed sees every input row exactly once"
    assert {r.value: r.timestamp for r in committed} == sent, "each output record keeps its input's CreateTime"
    everything = consume_all(broker.bootstrap, out, [0, 1], 10 * len(sent), timeout_s=10,
                             isolation_level="read_uncommitted")
    # the failed attempt and the aborted re-run of the two tasks that had committed are visible uncommitted
    assert len(everything) >= len(sent) + 400


# --- the example ----------------------------------------------------------------------------------

def test_example_aggregates_a_window_into_another_topic(spark, broker):
    from sundial.pipeline.examples.aggregate_window import run

    src, out = unique_topic("agg-src"), unique_topic("agg-out")
    create_topic(broker.bootstrap, src, partitions=2)
    create_topic(broker.bootstrap, out, partitions=2)
    p = producer(broker.bootstrap)
    truth = []
    for n in range(400):
        ts = BASE_TS + n * 1_500 + (n % 7) * 3                     # 10 minutes of events
        key, value = b"user%d" % (n % 5), b"x" * (n % 11)
        p.send(src, key=key, value=value, partition=n % 2, timestamp_ms=ts)
        truth.append((key, value, ts))
    p.flush()
    p.close()
    start, end = BASE_TS + 60_000, BASE_TS + 420_000
    written = run(spark, broker.bootstrap, src, out, start, end, bucket_s=60)
    expect: dict = {}
    for key, value, ts in truth:
        if start <= ts < end:
            bucket = ts // 60_000 * 60_000
            records, size, last = expect.get((key, bucket), (0, 0, 0))
            expect[(key, bucket)] = (records + 1, size + len(value), max(last, ts))
    assert written == len(expect)
    got = consume_all(broker.bootstrap, out, [0, 1], len(expect), timeout_s=60, isolation_level="read_committed")
    seen = {}
    for r in got:
        doc = json.loads(r.value)
        bucket = calendar.timegm(time.strptime(doc["bucket_start"], "%Y-%m-%dT%H:%M:%SZ")) * 1000
        assert doc["key"].encode() == r.key
        seen[(r.key, bucket)] = (doc["records"], doc["value_bytes"], r.timestamp)
    assert seen == expect, "one record per key and minute, stamped with its latest event time"
