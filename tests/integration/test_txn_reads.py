"""read_committed against the real daemon, with real consumers, over a partition that holds
transactions written below the coordinator: the daemon is stopped, committed, aborted and
open transactions (with their COMMIT/ABORT markers) are appended to the partition's files
through storage, and the daemon is started again on them.

The expected answers are computed here from the script: what read_committed and
read_uncommitted consumers (kafka-python, confluent-kafka) return, the end offsets under
both isolation levels (the last stable offset vs the high watermark) and offsetsForTimes
by brute force, "none" at or past the last fetchable offset.
"""

from __future__ import annotations

import os
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from sundial.config.topic import TopicConfig
from sundial.records.builder import SimpleRecord
from sundial.storage.log import PartitionLog

from support.log_helpers import ProducerSequences

from .clients import create_topic
from .conftest import free_port, unique_topic
from .test_metrics import scrape, value


def _write_transactions(partition_dir: str, now_ms: int):
    """The script, appended to the stopped daemon's partition; returns the model."""
    log = PartitionLog.open(partition_dir, TopicConfig(), topic="t", partition=0)
    sequences = ProducerSequences()
    records = []      # (offset, timestamp, value, state) state: plain / commit / abort / open
    txns: dict[int, list[int]] = {}
    markers: list[tuple[int, int]] = []

    def data(pid, n, ts):
        recs = [SimpleRecord(ts + i, b"k", b"%d-%d" % (pid, ts + i)) for i in range(n)]
        r = log.append(sequences.batch(recs, pid), now_ms=now_ms)
        for i in range(n):
            records.append([r.first_offset + i, ts + i, recs[i].value, "plain" if pid < 0 else "open"])
            if pid >= 0:
                txns.setdefault(pid, []).append(len(records) - 1)

    def end(pid, commit, ts):
        r = log.append_txn_marker(producer_id=pid, producer_epoch=0, coordinator_epoch=0, control_type=int(commit),
                                  timestamp_ms=ts, now_ms=now_ms)
        markers.append((r.first_offset, ts))
        for i in txns.pop(pid, []):
            records[i][3] = "commit" if commit else "abort"

    t = now_ms - 60_000
    data(-1, 2, t)
    data(1001, 3, t + 10)
    data(1002, 2, t + 20)
    end(1001, False, t + 30)
    data(-1, 1, t + 40)
    end(1002, True, t + 50)
    data(1003, 2, t + 60)
    data(1001, 2, t + 70)
    end(1001, True, t + 80)
    data(-1, 2, t + 90)
    data(1004, 1, t + 100)          # stays open: the last stable offset is held here
    end(1003, False, t + 110)
    data(-1, 1, t + 120)
    lso, hwm = log.last_stable_offset, log.high_watermark
    log.close()
    return records, markers, lso, hwm


@pytest.fixture
def txn_partition(broker_factory):
    port = free_port()
    daemon = broker_factory(**{"sundial.metrics.listener": f"127.0.0.1:{port}"})
    daemon.metrics_port = port
    daemon.start()
    topic = unique_topic("txn")
    create_topic(daemon.bootstrap, topic)
    daemon.stop()
    pdir = os.path.join(daemon.data_dir, f"{topic}-0")
    records, markers, lso, hwm = _write_transactions(pdir, int(time.time() * 1000))
    daemon.start()
    return daemon, topic, records, markers, lso, hwm


def _kafka_python_values(bootstrap, topic, isolation, expected_count):
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < expected_count and time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=500).values():
            got.extend((m.offset, m.value) for m in msgs)
    end = c.end_offsets([tp])[tp]
    c.close()
    return got, end


def test_read_committed_consumers_and_list_offsets(txn_partition):
    daemon, topic, records, markers, lso, hwm = txn_partition
    assert lso < hwm
    committed = [(o, v) for o, _, v, s in records if o < lso and s in ("plain", "commit")]
    everything = [(o, v) for o, _, v, _ in records]
    got, end = _kafka_python_values(daemon.bootstrap, topic, "read_committed", len(committed))
    assert got == committed and end == lso
    got, end = _kafka_python_values(daemon.bootstrap, topic, "read_uncommitted", len(everything))
    assert got == everything and end == hwm

    # offsetsForTimes: brute force over every record, markers included (one segment, so
    # the first record at or after the target), "none" at or past the last fetchable offset
    tp = TopicPartition(topic, 0)
    every = sorted([(o, t) for o, t, _, _ in records] + markers)
    for isolation, limit in (("read_committed", lso), ("read_uncommitted", hwm)):
        c = KafkaConsumer(bootstrap_servers=daemon.bootstrap, isolation_level=isolation)
        for _, ts in every:
            for target in (ts - 1, ts, ts + 1):
                want = next(((o, t) for o, t in every if t >= target), None)
                got = c.offsets_for_times({tp: target})[tp]
                if want is None or want[0] >= limit:
                    assert got is None, (isolation, target)
                else:
                    assert (got.offset, got.timestamp) == want, (isolation, target)
        c.close()


def test_confluent_kafka_read_committed(txn_partition):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    daemon, topic, records, _, lso, hwm = txn_partition
    committed = [(o, v) for o, _, v, s in records if o < lso and s in ("plain", "commit")]
    c = confluent_kafka.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": unique_topic("g"),
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(committed) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.value()))
    low, high = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=30)
    c.close()
    assert got == committed
    assert (low, high) == (0, lso)


def test_transaction_gauges(txn_partition):
    daemon, topic, records, markers, lso, hwm = txn_partition
    _kafka_python_values(daemon.bootstrap, topic, "read_committed", 1)     # opens the partition
    samples = scrape(daemon.metrics_port)
    assert value(samples, "sundial_log_open_transactions", topic=topic, partition=0) == 1
    assert value(samples, "sundial_log_last_stable_offset", topic=topic, partition=0) == lso
    assert value(samples, "sundial_log_last_stable_offset_lag", topic=topic, partition=0) == hwm - lso
    assert value(samples, "sundial_log_oldest_open_transaction_ms", topic=topic, partition=0) >= 0
