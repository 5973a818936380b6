"""The Prometheus endpoint after a real produce/consume run, parsed by prometheus_client's own parser.

One daemon with ``sundial.metrics.listener`` on a free loopback port, fast retention
passes and consumed retention on. The run: kafka-python produces and a group consumes
and commits, offsetsForTimes looks up a time, old records meet time retention, and a
group holds segments under consumed retention. Every counter the issue lists must then
be non-zero with the right labels, and the scrape-time gauges must equal what the test
knows (log end offsets, largest timestamps, group lag in offsets and time).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from .clients import create_topic, producer
from .conftest import free_port, unique_topic
from .groups_support import FAST_GROUPS, wait_until

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, list]:
    """{sample name: [(labels, value), ...]} from the endpoint, through the Prometheus parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: dict, name: str, **labels) -> float | None:
    for got, v in samples.get(name, []):
        if all(got.get(k) == str(want) for k, want in labels.items()):
            return v
    return None


def total(samples: dict, name: str, **labels) -> float:
    return sum(v for got, v in samples.get(name, []) if all(got.get(k) == str(w) for k, w in labels.items()))


def test_metrics_after_a_produce_consume_run(broker_factory):
    port = free_port()
    node = broker_factory(**FAST_GROUPS, **{
        "sundial.metrics.listener": f"127.0.0.1:{port}",
        "log.retention.commitoffset.enable": "true",
        "log.retention.check.interval.ms": "300",
        "log.initial.task.delay.ms": "0",
        "log.segment.delete.delay.ms": "0",
    }).start()
    b = node.bootstrap
    data, old, held = unique_topic("m-data"), unique_topic("m-old"), unique_topic("m-held")
    create_topic(b, data, 2)
    create_topic(b, old, 1, {"segment.bytes": "1024", "retention.ms": "60000"})
    create_topic(b, held, 1, {"segment.bytes": "1024", "retention.ms": "7200000",
                              "retention.commitoffset.ms": "60000"})
    now = int(time.time() * 1000)
    p = producer(b, acks=1, linger_ms=0)
    timestamps = {0: [], 1: []}
    for i in range(40):
        ts = now - 100_000 + i * 1000
        p.send(data, key=f"k{i}".encode(), value=b"x" * 100, partition=i % 2, timestamp_ms=ts)
        timestamps[i % 2].append(ts)
    for i in range(12):                                   # an hour old: time retention deletes them
        p.send(old, value=(f"old{i}-" + "y" * 300).encode(), partition=0, timestamp_ms=now - 3_600_000 + i)
        p.flush()
    for i in range(12):                                   # 10 min old: consumed retention decides
        p.send(held, value=(f"held{i}-" + "z" * 300).encode(), partition=0, timestamp_ms=now - 600_000 + i)
        p.flush()
    p.flush()
    p.close()

    group = unique_topic("m-group")
    c = KafkaConsumer(data, bootstrap_servers=b, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    got = 0
    deadline = time.monotonic() + 30
    while got < 40 and time.monotonic() < deadline:
        got += sum(len(v) for v in c.poll(timeout_ms=300).values())
    assert got == 40
    c.commit({TopicPartition(data, 0): OffsetAndMetadata(15, "", -1),
              TopicPartition(data, 1): OffsetAndMetadata(20, "", -1)})
    lookup = c.offsets_for_times({TopicPartition(data, 0): now - 80_000})
    assert lookup[TopicPartition(data, 0)] is not None
    # A group that committed past the first records of `held` only: the rest is held.
    h = KafkaConsumer(bootstrap_servers=b, group_id="holder", enable_auto_commit=False)
    h.commit({TopicPartition(held, 0): OffsetAndMetadata(3, "", -1)})
    h.close(autocommit=False)

    live = scrape(port)
    assert value(live, "sundial_connections") >= 1        # the consumer is still connected
    c.close(autocommit=False)

    samples = wait_until(
        lambda: (lambda s: s if total(s, "sundial_retention_deleted_segments_total", topic=old) > 0
                 and total(s, "sundial_consumed_retention_holds_total", topic=held) > 0 else None)(scrape(port)),
        60, "a retention deletion and a consumed-retention hold")

    # Requests and latency per API and version.
    for api in ("PRODUCE", "FETCH", "LIST_OFFSETS", "METADATA", "JOIN_GROUP", "SYNC_GROUP", "OFFSET_COMMIT",
                "API_VERSIONS", "FIND_COORDINATOR"):
        assert total(samples, "sundial_requests_total", api=api) > 0, api
        versions = {labels["version"] for labels, v in samples["sundial_requests_total"] if labels["api"] == api}
        assert versions and all(v.isdigit() for v in versions), (api, versions)
        assert total(samples, "sundial_request_latency_seconds_count", api=api) > 0, api
    produce_version = next(labels["version"] for labels, v in samples["sundial_requests_total"]
                           if labels["api"] == "PRODUCE")
    assert value(samples, "sundial_request_latency_seconds_bucket", api="PRODUCE", version=produce_version,
                 le="+Inf") == value(samples, "sundial_requests_total", api="PRODUCE", version=produce_version)
    # Bytes and records in (per topic), bytes out, sendfile, time-index lookups.
    assert value(samples, "sundial_records_in_total", topic=data) == 40
    assert value(samples, "sundial_bytes_in_total", topic=data) > 40 * 100
    assert value(samples, "sundial_bytes_out_total") > 40 * 100
    assert value(samples, "sundial_time_index_lookups_total") >= 1
    assert "sundial_sendfile_bytes_total" in samples
    # Per-partition gauges read at scrape time.
    for part in (0, 1):
        assert value(samples, "sundial_log_end_offset", topic=data, partition=part) == 20
        assert value(samples, "sundial_log_start_offset", topic=data, partition=part) == 0
        assert value(samples, "sundial_log_segments", topic=data, partition=part) == 1
        assert value(samples, "sundial_log_max_timestamp_ms", topic=data, partition=part) == max(timestamps[part])
        assert value(samples, "sundial_log_size_bytes", topic=data, partition=part) > 20 * 100
    # Retention: deletions by reason, consumed-retention holds by group.
    reasons = {labels["reason"] for labels, v in samples["sundial_retention_deleted_segments_total"]
               if labels["topic"] == old and v > 0}
    assert reasons == {"retention_ms"}
    assert value(samples, "sundial_log_start_offset", topic=old, partition=0) > 0
    assert total(samples, "sundial_consumed_retention_holds_total", topic=held, partition=0, group="holder") > 0
    # Consumer-group lag in offsets and in time.
    assert value(samples, "sundial_consumer_group_committed_offset", group=group, topic=data, partition=0) == 15
    assert value(samples, "sundial_consumer_group_lag", group=group, topic=data, partition=0) == 5
    assert value(samples, "sundial_consumer_group_lag", group=group, topic=data, partition=1) == 0
    assert value(samples, "sundial_consumer_group_lag_ms", group=group, topic=data, partition=1) == 0
    oldest_unconsumed = timestamps[0][15]
    lag_ms = value(samples, "sundial_consumer_group_lag_ms", group=group, topic=data, partition=0)
    assert now - oldest_unconsumed <= lag_ms <= int(time.time() * 1000) - oldest_unconsumed + 1

    # The same endpoint through curl, as an operator would look at it.
    if shutil.which("curl"):
        text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True,
                              timeout=30).stdout
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"sundial_requests", "sundial_bytes_in", "sundial_consumer_group_lag"} <= names
