"""The data source's driver and executor paths against the real daemon, without a JVM.

Planning (:func:`pipeline.resolve.plan_batch` over :class:`pipeline.client.KafkaOffsetClient`)
and task reads (:func:`pipeline.reader.read_range`, both fetchers) are checked against
brute force over what each test produced. The Spark tier (test_spark_e2e.py) runs the
same code inside Spark; these tests pin down the wire behaviour in seconds.
"""

from __future__ import annotations

import random
import time

import pytest
from .clients import admin, consume_all, create_topic, producer
from .conftest import unique_topic

from sundial.pipeline.client import KafkaOffsetClient
from sundial.pipeline.errors import DataLossError
from sundial.pipeline.offsets import TopicPartition
from sundial.pipeline.options import parse_options
from sundial.pipeline.reader import ReadConfig, read_range
from sundial.pipeline.resolve import OffsetRange, plan_batch

# an hour ago: old enough to be "the past", young enough for the default 7-day retention
BASE_TS = (int(time.time() * 1000) // 1000 - 3600) * 1000


def produce_out_of_order(bootstrap: str, topic: str, partitions: int, per_partition: int, *, seed: int = 7,
                         compression: str | None = None) -> dict[TopicPartition, list[tuple]]:
    """Records with explicit, shuffled CreateTimes; returns {tp: [(offset, ts, key, value, headers)]}."""
    rnd = random.Random(seed)
    p = producer(bootstrap, compression_type=compression, batch_size=16384, linger_ms=20)
    futures = []
    for part in range(partitions):
        for i in range(per_partition):
            ts = BASE_TS + i * 10 + rnd.randint(-300, 300)          # disorder of up to 30 positions
            key = None if i % 17 == 0 else f"k{part}-{i}".encode()
            value = f"v{part}-{i}".encode() * (1 + i % 3)
            headers = [("h", str(i).encode()), ("h", b"")] if i % 50 == 0 else []
            futures.append((part, ts, key, value, headers,
                            p.send(topic, key=key, value=value, partition=part, timestamp_ms=ts, headers=headers)))
    p.flush()
    out: dict[TopicPartition, list[tuple]] = {}
    for part, ts, key, value, headers, fut in futures:
        md = fut.get(timeout=30)
        out.setdefault(TopicPartition(topic, part), []).append((md.offset, ts, key, value, headers or None))
    p.close()
    for recs in out.values():
        recs.sort()
    return out


def opts(bootstrap: str, topic: str, **extra):
    return parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **extra}, streaming=False)


def read_all(opts_, ranges) -> list[tuple]:
    config = ReadConfig.from_options(opts_)
    got = []
    for r in ranges:
        for cols in read_range(config, r):
            got.extend((r.tp, o, t, k, v, h) for o, t, k, v, h in
                       zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers))
    return got


@pytest.fixture
def out_of_order_topic(broker):
    topic = unique_topic("ooo")
    create_topic(broker.bootstrap, topic, partitions=3)
    produced = produce_out_of_order(broker.bootstrap, topic, 3, 400)
    return broker.bootstrap, topic, produced


@pytest.mark.parametrize("fetcher", ["wire", "consumer"])
def test_full_read_equals_what_was_produced(out_of_order_topic, fetcher):
    bootstrap, topic, produced = out_of_order_topic
    o = opts(bootstrap, topic, includeHeaders="true", maxRecordsPerPartition="150", **{"sundial.fetcher": fetcher})
    client = KafkaOffsetClient(o)
    try:
        ranges = plan_batch(o, client)
    finally:
        client.close()
    assert len(ranges) == 9                                    # 400 per partition, at most 150 per task
    got = sorted(read_all(o, ranges))
    expect = sorted((tp, off, ts, k, v, h) for tp, recs in produced.items() for off, ts, k, v, h in recs)
    assert got == expect


@pytest.mark.parametrize("exact", [False, True])
def test_time_window_against_brute_force(out_of_order_topic, exact):
    bootstrap, topic, produced = out_of_order_topic
    a, b = BASE_TS + 1000, BASE_TS + 2500
    extra = {"startingTimestamp": str(a), "endingTimestamp": str(b)}
    if exact:
        extra["sundial.exactTimeWindow"] = "true"
    o = opts(bootstrap, topic, **extra)
    client = KafkaOffsetClient(o)
    try:
        ranges = plan_batch(o, client)
    finally:
        client.close()
    got = sorted((tp, off) for tp, off, *_ in read_all(o, ranges))
    if exact:
        expect = sorted((tp, off) for tp, recs in produced.items() for off, ts, *_ in recs if a <= ts < b)
    else:
        expect = []
        for tp, recs in produced.items():
            start = next(off for off, ts, *_ in recs if ts >= a)
            end = next((off for off, ts, *_ in recs if ts >= b), len(recs))
            expect.extend((tp, off) for off in range(start, end))
        expect.sort()
        # the plain offset range is not a timestamp filter on out-of-order data
        exact_set = {(tp, off) for tp, recs in produced.items() for off, ts, *_ in recs if a <= ts < b}
        assert set(expect) != exact_set
    assert got == expect


def test_compressed_batches_read_the_same(broker):
    topic = unique_topic("gz")
    create_topic(broker.bootstrap, topic, partitions=1)
    produced = produce_out_of_order(broker.bootstrap, topic, 1, 300, compression="gzip")
    o = opts(broker.bootstrap, topic, includeHeaders="true")
    got = read_all(o, [OffsetRange(TopicPartition(topic, 0), 0, 300)])
    assert [(off, ts, k, v, h) for _, off, ts, k, v, h in got] == produced[TopicPartition(topic, 0)]


def test_log_append_time_topic_uses_broker_time(broker):
    topic = unique_topic("lat")
    create_topic(broker.bootstrap, topic, partitions=2, configs={"message.timestamp.type": "LogAppendTime"})
    p = producer(broker.bootstrap)
    for phase in range(3):
        for i in range(50):
            p.send(topic, value=b"%d-%d" % (phase, i), partition=i % 2, timestamp_ms=1000)   # ignored by the broker
        p.flush()
        time.sleep(0.3)
    p.close()
    truth = consume_all(broker.bootstrap, topic, [0, 1], 150)
    assert len(truth) == 150 and all(r.timestamp_type == 1 for r in truth)
    times = sorted({r.timestamp for r in truth})
    a, b = times[len(times) // 3], times[2 * len(times) // 3]
    o = opts(broker.bootstrap, topic, startingTimestamp=str(a), endingTimestamp=str(b),
             **{"sundial.exactTimeWindow": "true"})
    client = KafkaOffsetClient(o)
    try:
        ranges = plan_batch(o, client)
    finally:
        client.close()
    got = sorted((tp.partition, off, ts) for tp, off, ts, *_ in read_all(o, ranges))
    assert got == sorted((r.partition, r.offset, r.timestamp) for r in truth if a <= r.timestamp < b)


def test_deleted_records_are_data_loss_in_a_task(broker):
    topic = unique_topic("del")
    create_topic(broker.bootstrap, topic, partitions=1)
    p = producer(broker.bootstrap)
    for i in range(100):
        p.send(topic, value=b"%d" % i, partition=0)
    p.flush()
    p.close()
    tp = TopicPartition(topic, 0)
    from kafka import TopicPartition as KTP

    client = admin(broker.bootstrap)
    try:
        client.delete_records({KTP(topic, 0): 60})
    finally:
        client.close()
    planned = OffsetRange(tp, 10, 100)                 # planned before the deletion
    with pytest.raises(DataLossError, match="log start offset is now 60"):
        read_all(opts(broker.bootstrap, topic), [planned])
    got = read_all(opts(broker.bootstrap, topic, failOnDataLoss="false"), [planned])
    assert [off for _, off, *_ in got] == list(range(60, 100))
    got = read_all(opts(broker.bootstrap, topic, failOnDataLoss="false", **{"sundial.fetcher": "consumer"}),
                   [planned])
    assert [off for _, off, *_ in got] == list(range(60, 100))
