"""``format("sundial")`` inside Spark (local[2]) against the real daemon.

Ground truth is brute force over what each test produced (explicit, out-of-order
CreateTimes across three partitions; broker-stamped times read back with kafka-python
for the LogAppendTime topic). One SparkSession serves the module; tests skip with the
reason when pyspark or Java is missing.
"""

from __future__ import annotations

import random
import shutil
import time

import pytest
from .clients import consume_all, create_topic, producer
from .conftest import unique_topic
from .spark_support import local_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# an hour ago: old enough to be "the past", young enough for the default 7-day retention
BASE_TS = (int(time.time() * 1000) // 1000 - 3600) * 1000


@pytest.fixture(scope="module")
def spark():
    with local_spark("sundial-tests") as session:
        yield session


def produce_out_of_order(bootstrap: str, topic: str, partitions: int = 3, per_partition: int = 300,
                         seed: int = 11) -> list[tuple]:
    """[(partition, offset, ts, key, value)] with CreateTimes out of order by up to ±300 ms."""
    rnd = random.Random(seed)
    p = producer(bootstrap, linger_ms=20)
    sent = []
    for part in range(partitions):
        for i in range(per_partition):
            ts = BASE_TS + i * 10 + rnd.randint(-300, 300)
            key, value = f"k{part}-{i}".encode(), f"v{i}".encode()
            headers = [("seq", str(i).encode())] if i % 100 == 0 else []
            sent.append((part, ts, key, value, p.send(topic, key=key, value=value, partition=part, timestamp_ms=ts,
                                                      headers=headers)))
    p.flush()
    out = [(part, fut.get(timeout=30).offset, ts, key, value) for part, ts, key, value, fut in sent]
    p.close()
    return sorted(out)


@pytest.fixture
def ooo(broker):
    topic = unique_topic("spark-ooo")
    create_topic(broker.bootstrap, topic, partitions=3)
    return broker.bootstrap, topic, produce_out_of_order(broker.bootstrap, topic)


def reader(spark, bootstrap, topic, **options):
    r = spark.read.format("sundial").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def keys_of(rows):
    return sorted((r["partition"], r["offset"]) for r in rows)


def test_format_is_registered_without_register_call(spark, ooo):
    bootstrap, topic, produced = ooo
    df = reader(spark, bootstrap, topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.collect()
    assert keys_of(rows) == sorted((p, o) for p, o, *_ in produced)
    by_key = {(r["partition"], r["offset"]): r for r in rows}
    for part, off, ts, key, value in produced:
        r = by_key[(part, off)]
        assert (bytes(r["key"]), bytes(r["value"]), r["topic"], r["timestampType"]) == (key, value, topic, 0)
        assert round(r["timestamp"].timestamp() * 1000) == ts
    with_headers = [r for r in rows if r["headers"] is not None]
    assert len(with_headers) == 9 and all(r["headers"][0]["key"] == "seq" for r in with_headers)


@pytest.mark.parametrize("output", ["arrow", "rows"])
def test_create_time_window_matches_brute_force(spark, ooo, output):
    bootstrap, topic, produced = ooo
    a, b = BASE_TS + 800, BASE_TS + 2200
    exact = reader(spark, bootstrap, topic, startingTimestamp=str(a), endingTimestamp=str(b),
                   **{"sundial.exactTimeWindow": "true", "sundial.outputFormat": output}).collect()
    assert keys_of(exact) == sorted((p, o) for p, o, ts, *_ in produced if a <= ts < b)
    assert all(a <= round(r["timestamp"].timestamp() * 1000) < b for r in exact)
    # without the option: Spark's semantics, the offset range [offset(a), offset(b))
    plain = reader(spark, bootstrap, topic, startingTimestamp=str(a), endingTimestamp=str(b),
                   maxRecordsPerPartition="50", **{"sundial.outputFormat": output}).collect()
    expect = []
    for part in range(3):
        recs = [(o, ts) for p, o, ts, *_ in produced if p == part]
        start = min(o for o, ts in recs if ts >= a)
        end = min((o for o, ts in recs if ts >= b), default=len(recs))
        expect.extend((part, o) for o in range(start, end))
    assert keys_of(plain) == sorted(expect)
    assert set(keys_of(plain)) != set(keys_of(exact))          # out-of-order data: the two differ


def test_log_append_time_topic_window(spark, broker):
    topic = unique_topic("spark-lat")
    create_topic(broker.bootstrap, topic, partitions=3, configs={"message.timestamp.type": "LogAppendTime"})
    p = producer(broker.bootstrap)
    for phase in range(4):
        for i in range(60):
            p.send(topic, value=b"%d" % i, partition=i % 3, timestamp_ms=BASE_TS)      # replaced by broker time
        p.flush()
        time.sleep(0.25)
    p.close()
    truth = consume_all(broker.bootstrap, topic, [0, 1, 2], 240)
    times = sorted({r.timestamp for r in truth})
    a, b = times[len(times) // 4], times[3 * len(times) // 4]
    rows = reader(spark, broker.bootstrap, topic, startingTimestamp=str(a), endingTimestamp=str(b)).collect()
    assert keys_of(rows) == sorted((r.partition, r.offset) for r in truth if a <= r.timestamp < b)
    assert {r["timestampType"] for r in rows} == {1}


def test_starting_timestamp_strategy_error_vs_latest(spark, ooo):
    bootstrap, topic, produced = ooo
    late = str(BASE_TS + 10**9)
    with pytest.raises(Exception, match="No offset matched from request of topic-partition"):
        reader(spark, bootstrap, topic, startingTimestamp=late).collect()
    assert reader(spark, bootstrap, topic, startingTimestamp=late,
                  startingOffsetsByTimestampStrategy="latest").count() == 0


def test_ending_timestamp_past_the_end_reads_to_latest(spark, ooo):
    bootstrap, topic, produced = ooo
    a = BASE_TS + 2000
    rows = reader(spark, bootstrap, topic, startingTimestamp=str(a), endingTimestamp=str(BASE_TS + 10**9)).collect()
    expect = []
    for part in range(3):
        recs = [(o, ts) for p, o, ts, *_ in produced if p == part]
        start = min(o for o, ts in recs if ts >= a)
        expect.extend((part, o) for o in range(start, len(recs)))
    assert keys_of(rows) == sorted(expect)


def test_incomplete_partition_map_is_refused(spark, ooo):
    bootstrap, topic, _ = ooo
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        reader(spark, bootstrap, topic, startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{BASE_TS}}}}}').collect()
    with pytest.raises(Exception, match="endingOffsets"):
        reader(spark, bootstrap, topic, endingOffsets=f'{{"{topic}":{{"0":5,"1":5}}}}').collect()


def _stream_once(spark, bootstrap, topic, checkpoint, **options):
    """One Trigger.AvailableNow run; returns the rows of every micro-batch, in order."""
    batches = []

    def collect(df, batch_id):
        batches.append([(r["partition"], r["offset"]) for r in df.collect()])

    r = (spark.readStream.format("sundial").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic))
    for k, v in options.items():
        r = r.option(k, v)
    query = (r.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
        if query.exception():
            raise query.exception()
    finally:
        query.stop()
    return batches


def _produce_plain(bootstrap, topic, per_partition, partitions=3, ts=None):
    p = producer(bootstrap)
    for part in range(partitions):
        for i in range(per_partition):
            p.send(topic, value=b"%d" % i, partition=part, timestamp_ms=ts)
    p.flush()
    p.close()


def test_streaming_available_now_restart_reads_each_record_once(spark, broker, tmp_path):
    topic = unique_topic("spark-stream")
    create_topic(broker.bootstrap, topic, partitions=3)
    _produce_plain(broker.bootstrap, topic, 400)
    checkpoint = tmp_path / "ckpt"
    first = _stream_once(spark, broker.bootstrap, topic, checkpoint, startingOffsets="earliest",
                         maxOffsetsPerTrigger="500")
    assert [len(b) for b in first if b] == [498, 498, 204]   # floor(500/3) per partition, then the rest
    # the checkpoint holds the connector's offset shape: {"topic": {"partition": next offset}}
    import json

    last = sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)[-1]
    assert json.loads(last.read_text().strip().splitlines()[-1]) == {topic: {"0": 400, "1": 400, "2": 400}}
    _produce_plain(broker.bootstrap, topic, 100)
    second = _stream_once(spark, broker.bootstrap, topic, checkpoint, startingOffsets="earliest",
                          maxOffsetsPerTrigger="500")
    seen = [row for batch in first + second for row in batch]
    assert len(seen) == len(set(seen)) == 1500
    assert sorted(seen) == sorted((p, o) for p in range(3) for o in range(500))
    assert sorted(row for batch in second for row in batch) == sorted((p, o) for p in range(3)
                                                                      for o in range(400, 500))


@pytest.mark.timeout(600)
def test_retention_mid_stream_follows_fail_on_data_loss(spark, broker_factory, tmp_path):
    daemon = broker_factory(**{"log.retention.check.interval.ms": "200"}).start()
    topic = unique_topic("spark-ret")
    create_topic(daemon.bootstrap, topic, partitions=1,
                 configs={"retention.ms": "3600000", "segment.bytes": "2048"})
    old = int(time.time() * 1000) - 6 * 3600_000            # expired as soon as its segment is closed
    _produce_plain(daemon.bootstrap, topic, 100, partitions=1, ts=old)
    checkpoint = tmp_path / "ckpt"
    first = _stream_once(spark, daemon.bootstrap, topic, checkpoint, startingOffsets="earliest")
    assert sorted(row for b in first for row in b) == [(0, o) for o in range(100)]
    _produce_plain(daemon.bootstrap, topic, 100, partitions=1, ts=old)          # never read: will expire
    _produce_plain(daemon.bootstrap, topic, 50, partitions=1)                   # recent: kept
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=daemon.bootstrap)
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 60
    log_start = 0
    while time.monotonic() < deadline:
        log_start = c.beginning_offsets([tp])[tp]
        if log_start > 100:
            break
        time.sleep(0.2)
    c.close()
    assert 100 < log_start <= 200, f"retention did not remove the unread records (log start {log_start})"

    copy = tmp_path / "ckpt-copy"
    shutil.copytree(checkpoint, copy)
    with pytest.raises(Exception, match="failOnDataLoss"):
        _stream_once(spark, daemon.bootstrap, topic, checkpoint, startingOffsets="earliest")
    skipped = _stream_once(spark, daemon.bootstrap, topic, copy, startingOffsets="earliest",
                           failOnDataLoss="false")
    assert sorted(row for b in skipped for row in b) == [(0, o) for o in range(log_start, 250)]
