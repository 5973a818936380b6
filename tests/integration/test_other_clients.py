"""The core flow with aiokafka, confluent-kafka (librdkafka 2.16) and kcat (librdkafka 2.0.2).

Each client: produce records with explicit CreateTime timestamps (kcat cannot set them
and produces with its own clock), read them back, check beginning/end offsets and
offsets-for-times against brute force over what the test produced.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

from .clients import create_topic, first_offset_at_or_after
from .conftest import unique_topic


def _timestamps(n: int, base: int) -> list[int]:
    return [base + ((i * 7919) % n) * 10 for i in range(n)]  # a permutation: non-monotonic


@pytest.mark.asyncio
async def test_aiokafka_core_flow(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = unique_topic("aio")
    create_topic(broker.bootstrap, topic, partitions=2, configs={"segment.bytes": "4096"})
    base = int(time.time() * 1000) - 3_600_000
    stamps = _timestamps(300, base)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                                compression_type="gzip", linger_ms=5)
    await producer.start()
    produced = {0: [], 1: []}
    try:
        for i, ts in enumerate(stamps):
            md = await producer.send_and_wait(topic, value=f"v{i}".encode(), key=f"k{i}".encode(),
                                              partition=i % 2, timestamp_ms=ts,
                                              headers=[("i", str(i).encode())])
            produced[i % 2].append((md.offset, ts))
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(stamps) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for recs in batches.values():
                got.extend(recs)
        assert len(got) == len(stamps)
        for rec in got:
            i = int(rec.value[1:])
            assert rec.key == f"k{i}".encode() and rec.timestamp == stamps[i]
            assert list(rec.headers) == [("i", str(i).encode())]
        assert await consumer.end_offsets(tps) == {tps[0]: 150, tps[1]: 150}
        assert await consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        for target in [base - 1, stamps[5], stamps[77] + 1, max(stamps), max(stamps) + 1]:
            answer = await consumer.offsets_for_times({tp: target for tp in tps})
            for tp in tps:
                expected = first_offset_at_or_after(produced[tp.partition], target)
                got_tp = answer[tp]
                assert (None if got_tp is None else (got_tp.offset, got_tp.timestamp)) == expected
    finally:
        await consumer.stop()


def test_confluent_kafka_core_flow(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = unique_topic("ck")
    create_topic(broker.bootstrap, topic, partitions=2, configs={"segment.bytes": "4096"})
    base = int(time.time() * 1000) - 3_600_000
    stamps = _timestamps(400, base)
    produced = {0: [], 1: []}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            produced[msg.partition()].append((msg.offset(), msg.timestamp()[1]))

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": "lz4", "linger.ms": 5})
    for i, ts in enumerate(stamps):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2, timestamp=ts,
                  headers=[("i", str(i).encode())], on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(stamps) and time.monotonic() < deadline:
            for msg in c.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg)
        assert len(got) == len(stamps)
        for msg in got:
            i = int(msg.value()[1:])
            assert msg.key() == f"k{i}".encode() and msg.timestamp() == (1, stamps[i])
            assert msg.headers() == [("i", str(i).encode())]
        for part in (0, 1):
            assert c.get_watermark_offsets(TopicPartition(topic, part), timeout=30) == (0, 200)
        for target in [base - 1, stamps[3], stamps[99] + 1, max(stamps), max(stamps) + 1]:
            answer = c.offsets_for_times([TopicPartition(topic, 0, target), TopicPartition(topic, 1, target)],
                                         timeout=30)
            for tp in answer:
                expected = first_offset_at_or_after(produced[tp.partition], target)
                assert tp.offset == (-1 if expected is None else expected[0])
    finally:
        c.close()


def _kcat(*args, input_bytes: bytes | None = None, timeout: float = 30.0) -> str:
    out = subprocess.run(["kcat", *args], input=input_bytes, capture_output=True, timeout=timeout)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (Debian package kcat)")
def test_kcat_core_flow(broker):
    topic = unique_topic("kcat")
    create_topic(broker.bootstrap, topic, partitions=1)
    lines = [f"k{i}:v{i}" for i in range(100)]
    before = int(time.time() * 1000)
    _kcat("-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-K:", input_bytes="\n".join(lines).encode())
    after = int(time.time() * 1000)
    out = _kcat("-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", "%o|%T|%k|%s\n")
    rows = [line.split("|") for line in out.strip().splitlines()]
    assert [int(r[0]) for r in rows] == list(range(100))
    assert [f"{r[2]}:{r[3]}" for r in rows] == lines
    stamps = [int(r[1]) for r in rows]
    assert all(before - 1000 <= t <= after + 1000 for t in stamps)
    # offsets by time (kcat -Q): first offset with timestamp >= target
    target = stamps[50]
    q = _kcat("-Q", "-b", broker.bootstrap, "-t", f"{topic}:0:{target}")
    expected = min(i for i, t in enumerate(stamps) if t >= target)
    assert f"offset {expected}" in q.replace("  ", " "), q
    q = _kcat("-Q", "-b", broker.bootstrap, "-t", f"{topic}:0:{after + 10**7}")
    assert "offset -1" in q.replace("  ", " "), q
