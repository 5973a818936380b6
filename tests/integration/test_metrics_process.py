"""The Prometheus endpoint's process figures and per-partition oldest retained timestamp.

A daemon with ``sundial.metrics.listener`` on a free port; kafka-python produces records
with known timestamps and DeleteRecords moves one log start offset and empties another
partition. The scrape (prometheus_client's own parser) must then
carry the process collectors (memory, CPU, open and maximum fds, start time), the oldest
retained timestamp of each partition (the record at the log start offset, also when an
older CreateTime follows it; -1 for an empty partition), and no ``_created`` series.
"""

from __future__ import annotations

import os
import time

import pytest
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

from support.waiting import wait_for

from .clients import create_topic, producer
from .conftest import free_port, unique_topic
from .test_metrics import scrape, value

pytestmark = pytest.mark.integration


def test_process_collectors_and_oldest_retained_timestamp(broker_factory):
    port = free_port()
    node = broker_factory(**{"sundial.metrics.listener": f"127.0.0.1:{port}"}).start()
    b = node.bootstrap
    topic = unique_topic("oldest")
    create_topic(b, topic, 2)
    now = int(time.time() * 1000)
    stamps = {0: [now - 50_000 + i * 1000 for i in range(10)], 1: [now - 9_000 + i * 10 for i in range(4)]}
    stamps[1][0] = now - 1_000  # out of order: the oldest *retained* record is the first one, not the minimum
    p = producer(b, acks="all", linger_ms=0)
    for part, values in stamps.items():
        for ts in values:
            p.send(topic, value=b"x" * 50, partition=part, timestamp_ms=ts)
            p.flush()
    p.close()

    samples = scrape(port)
    assert value(samples, "sundial_log_oldest_timestamp_ms", topic=topic, partition=0) == stamps[0][0]
    assert value(samples, "sundial_log_oldest_timestamp_ms", topic=topic, partition=1) == stamps[1][0]

    admin = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30_000)
    try:
        admin.delete_records({TopicPartition(topic, 0): 4, TopicPartition(topic, 1): -1})
    finally:
        admin.close()
    samples = wait_for(
        lambda: (lambda s: s if value(s, "sundial_log_oldest_timestamp_ms", topic=topic, partition=0) == stamps[0][4]
                 else None)(scrape(port)), 30, "the oldest timestamp to follow the log start offset")
    assert value(samples, "sundial_log_start_offset", topic=topic, partition=0) == 4
    assert value(samples, "sundial_log_oldest_timestamp_ms", topic=topic, partition=1) == -1  # emptied

    # Process collectors.
    rss = value(samples, "process_resident_memory_bytes")
    assert rss is not None and rss > 10 * 1024 * 1024
    assert value(samples, "process_virtual_memory_bytes") >= rss
    assert value(samples, "process_cpu_seconds_total") > 0
    fds = value(samples, "process_open_fds")
    assert fds is not None and 0 < fds <= value(samples, "process_max_fds")
    started = value(samples, "process_start_time_seconds")
    assert started is not None and abs(started - os.stat(f"/proc/{node.proc.pid}").st_mtime) < 600
    assert "python_info" in samples and samples.get("python_gc_collections_total")
    # No _created series, also for the labelled prometheus_client counters.
    created = [name for name in samples if name.endswith("_created")]
    assert created == [], created
