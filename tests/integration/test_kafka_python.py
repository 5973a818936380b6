"""kafka-python 3.0.12 against the real daemon: round trips, timestamps, offsets_for_times."""

from __future__ import annotations

import os
import random
import time

import pytest
from kafka import TopicPartition
from kafka.errors import InvalidTimestampError, KafkaError

from .clients import consume_all, consumer, create_topic, first_offset_at_or_after, producer
from .conftest import unique_topic

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_round_trip_keys_values_headers_nulls(broker, codec, acks):
    topic = unique_topic("rt")
    create_topic(broker.bootstrap, topic, partitions=2)
    p = producer(broker.bootstrap, acks=acks, compression_type=codec, enable_idempotence=(acks == "all"))
    sent = []
    base_ts = int(time.time() * 1000) - 60_000
    for i in range(200):
        key = None if i % 7 == 0 and i % 11 != 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else (f"v{i}-" * (i % 13)).encode()
        headers = [("h", f"{i}".encode()), ("dup", b"1"), ("dup", b"")] if i % 3 == 0 else []
        ts = base_ts + random.randint(-5000, 5000)
        part = i % 2
        fut = p.send(topic, value=value, key=key, headers=headers, partition=part, timestamp_ms=ts)
        sent.append((part, key, value, headers, ts, fut))
    p.flush()
    p.close()
    if acks != 0:
        for part, *_rest, fut in sent:
            md = fut.get(timeout=30)
            assert md.partition == part and md.offset >= 0
    got = consume_all(broker.bootstrap, topic, [0, 1], len(sent))
    assert len(got) == len(sent)
    by_part = {0: [], 1: []}
    for r in got:
        by_part[r.partition].append(r)
    for part in (0, 1):
        offsets = [r.offset for r in by_part[part]]
        assert offsets == list(range(len(offsets))), "offsets are contiguous from 0"
        expected = [s for s in sent if s[0] == part]
        for rec, (_p, key, value, headers, ts, _f) in zip(by_part[part], expected):
            assert rec.key == key and rec.value == value
            assert [(k, v) for k, v in rec.headers] == headers
            assert rec.timestamp == ts and rec.timestamp_type == 0  # CreateTime kept


def test_log_append_time_topic_stamps_broker_time(broker):
    topic = unique_topic("lat")
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    p = producer(broker.bootstrap, acks=1)
    before = int(time.time() * 1000)
    mds = [p.send(topic, value=b"x", timestamp_ms=1_000).get(timeout=30) for _ in range(5)]
    after = int(time.time() * 1000)
    p.close()
    for md in mds:
        assert before <= md.timestamp <= after, "produce response carries log_append_time"
    got = consume_all(broker.bootstrap, topic, [0], 5)
    for rec, md in zip(got, mds):
        assert rec.timestamp_type == 1
        assert rec.timestamp == md.timestamp


@pytest.mark.parametrize("configs", [
    {"message.timestamp.difference.max.ms": "60000"},
    {"max.message.time.difference.ms": "60000"},
    {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"},
])
@pytest.mark.parametrize("offset_ms", [-2 * 3600_000, 2 * 3600_000])
def test_out_of_bound_create_time_is_rejected_and_leaves_no_trace(broker, configs, offset_ms):
    topic = unique_topic("bound")
    create_topic(broker.bootstrap, topic, configs=configs)
    p = producer(broker.bootstrap, acks=1, retries=0, linger_ms=0)
    now = int(time.time() * 1000)
    fut = p.send(topic, value=b"bad", timestamp_ms=now + offset_ms)
    with pytest.raises(KafkaError) as info:
        fut.get(timeout=30)
    assert isinstance(info.value, InvalidTimestampError) or "InvalidTimestamp" in type(info.value).__name__
    ok = p.send(topic, value=b"good", timestamp_ms=now).get(timeout=30)
    p.close()
    assert ok.offset == 0, "the rejected batch consumed no offset"
    c = consumer(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    assert c.end_offsets([tp])[tp] == 1
    c.close()
    got = consume_all(broker.bootstrap, topic, [0], 1)
    assert [r.value for r in got] == [b"good"]
    if broker.data_dir:
        log_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(broker.data_dir)
                        for f in fs if f.endswith(".log") and os.path.basename(dp).startswith(topic))
        assert 0 < log_bytes < 200, "only the accepted record is on disk"


def _produce_nonmonotonic(bootstrap, topic, partitions, n, base_ms, batch_size=16384):
    p = producer(bootstrap, acks=1, batch_size=batch_size, linger_ms=20)
    futs = []
    rng = random.Random(42)
    for i in range(n):
        part = i % partitions
        # non-monotonic: a rising trend with jitter, duplicates and runs
        ts = base_ms + i * 1000 + rng.choice([0, 0, -30_000, 45_000, rng.randint(-90_000, 90_000)])
        futs.append((part, ts, p.send(topic, value=os.urandom(64), partition=part, timestamp_ms=ts)))
    p.flush()
    p.close()
    produced = {part: [] for part in range(partitions)}
    for part, ts, fut in futs:
        md = fut.get(timeout=30)
        produced[part].append((md.offset, ts))
    return produced


def test_offsets_for_times_equals_brute_force_over_many_segments(broker):
    topic = unique_topic("oft")
    create_topic(broker.bootstrap, topic, partitions=3,
                 configs={"segment.bytes": "2048", "index.interval.bytes": "256"})
    empty_topic = unique_topic("oft-empty")
    create_topic(broker.bootstrap, empty_topic, partitions=1)
    base = int(time.time() * 1000) - 3 * 86_400_000
    produced = _produce_nonmonotonic(broker.bootstrap, topic, 2, 1500, base, batch_size=600)
    if broker.data_dir:
        segs = [f for f in os.listdir(os.path.join(broker.data_dir, f"{topic}-0")) if f.endswith(".log")]
        assert len(segs) >= 20
    c = consumer(broker.bootstrap)
    all_ts = sorted({ts for recs in produced.values() for _, ts in recs})
    targets = [base - 10**9, all_ts[0], all_ts[-1], all_ts[-1] + 1, 0]
    targets += random.Random(7).sample(all_ts, 60)
    targets += [t + 1 for t in random.Random(8).sample(all_ts, 30)]
    for target in targets:
        query = {TopicPartition(topic, p): target for p in range(3)}
        query[TopicPartition(empty_topic, 0)] = target
        answer = c.offsets_for_times(query)
        for p in range(3):
            expected = first_offset_at_or_after(produced.get(p, []), target)
            got = answer[TopicPartition(topic, p)]
            if expected is None:
                assert got is None, (p, target, got)
            else:
                assert got is not None and (got.offset, got.timestamp) == expected, (p, target, got, expected)
        assert answer[TopicPartition(empty_topic, 0)] is None
    # before the first record: the first offset of the partition
    first = c.offsets_for_times({TopicPartition(topic, 0): 0})[TopicPartition(topic, 0)]
    assert first.offset == 0
    c.close()


def test_beginning_and_end_offsets_after_multi_record_batches(broker):
    topic = unique_topic("ends")
    create_topic(broker.bootstrap, topic, partitions=2)
    p = producer(broker.bootstrap, acks=1, linger_ms=50, batch_size=1 << 20)
    for i in range(1000):
        p.send(topic, value=b"v", partition=i % 2)
    p.flush()
    p.close()
    c = consumer(broker.bootstrap)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert c.end_offsets(tps) == {tps[0]: 500, tps[1]: 500}
    assert c.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
    c.close()


def test_restart_after_sigkill_keeps_acknowledged_records(broker_factory):
    b = broker_factory().start()
    topic = unique_topic("kill")
    create_topic(b.bootstrap, topic, partitions=2, configs={"segment.bytes": "4096"})
    base = int(time.time() * 1000) - 86_400_000
    produced = _produce_nonmonotonic(b.bootstrap, topic, 2, 400, base, batch_size=1024)
    p = producer(b.bootstrap, acks="all", enable_idempotence=True)
    acked = [p.send(topic, value=f"a{i}".encode(), partition=i % 2, timestamp_ms=base + 10**6 + i).get(timeout=30)
             for i in range(50)]
    p.close()
    for md in acked:
        produced[md.partition].append((md.offset, md.timestamp))
    c = consumer(b.bootstrap)
    targets = sorted({ts for recs in produced.values() for _, ts in recs})[::13]
    before = [c.offsets_for_times({TopicPartition(topic, p): t for p in range(2)}) for t in targets]
    c.close()
    b.kill()
    b.start()
    got = consume_all(b.bootstrap, topic, [0, 1], sum(len(v) for v in produced.values()))
    assert len(got) == sum(len(v) for v in produced.values())
    c = consumer(b.bootstrap)
    after = [c.offsets_for_times({TopicPartition(topic, p): t for p in range(2)}) for t in targets]
    c.close()
    assert before == after
    for answer, target in zip(after, targets):
        for p in range(2):
            expected = first_offset_at_or_after(produced[p], target)
            got_p = answer[TopicPartition(topic, p)]
            assert (None if got_p is None else (got_p.offset, got_p.timestamp)) == expected

