"""The Prometheus endpoint after a real produce/consume run, parsed by prometheus_client's own parser.

The second test covers the groups per type: classic groups (kafka-python) and Kafka 4
consumer-protocol groups (confluent-kafka with ``group.protocol=consumer``, and a raw member that
stops heartbeating and is fenced); the series must equal what the test made happen.

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
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .clients import connect_raw, create_topic, producer, read_frame
from .conftest import free_port, unique_topic
from .groups_support import FAST_GROUPS

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

    samples = wait_for(
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


def _consumer_group_epoch(bootstrap: str, group: str) -> int:
    host, port = bootstrap.rsplit(":", 1)
    sock = connect_raw(host, int(port))
    try:
        sock.sendall(encode_request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, 1, "metrics-test",
                                    {"group_ids": [group], "include_authorized_operations": False}))
        _, resp = decode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, read_frame(sock))
    finally:
        sock.close()
    (g,) = resp.groups
    assert g.error_code == 0, g
    return g.group_epoch


def _raw_join(bootstrap: str, group: str, topic: str) -> str:
    """A consumer-protocol member that joins once and never heartbeats again."""
    host, port = bootstrap.rsplit(":", 1)
    member_id = uuid.uuid4().hex
    sock = connect_raw(host, int(port))
    try:
        sock.sendall(encode_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, 1, "silent-member", {
            "group_id": group, "member_id": member_id, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []}))
        _, resp = decode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, read_frame(sock))
    finally:
        sock.close()
    assert resp.error_code == 0, resp
    return member_id


def test_group_metrics_per_type(broker_factory):
    from confluent_kafka import Consumer

    port = free_port()
    node = broker_factory(**FAST_GROUPS, **{
        "sundial.metrics.listener": f"127.0.0.1:{port}",
        "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
    }).start()
    b = node.bootstrap
    topic = unique_topic("m-types")
    create_topic(b, topic, 2)
    # Before any group: every state of both types at 0, the counters at 0.
    samples = scrape(port)
    for group_type, states in (("classic", ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")),
                               ("consumer", ("Empty", "Assigning", "Reconciling", "Stable", "Dead"))):
        for state in states:
            assert value(samples, "sundial_groups", type=group_type, state=state) == 0, (group_type, state)
        assert value(samples, "sundial_group_rebalances_total", type=group_type) == 0
        assert value(samples, "sundial_group_fenced_members_total", type=group_type) == 0

    # classic: a live kafka-python member (Stable) and an offsets-only group (Empty).
    live = KafkaConsumer(bootstrap_servers=b, group_id=unique_topic("m-classic"), enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=30000, heartbeat_interval_ms=1000)
    # The topic's metadata first, then the subscription: a kafka-python 3.0.12 leader that assigns before its
    # metadata has the topic assigns nothing and can lose the rejoin that should follow.
    wait_for(lambda: live.partitions_for_topic(topic), 90, "the classic member's metadata")
    live.subscribe([topic])
    holder = KafkaConsumer(bootstrap_servers=b, group_id=unique_topic("m-offsets"), enable_auto_commit=False)
    holder.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    holder.close(autocommit=False)
    # consumer: a confluent-kafka member that stays, a silent raw member that is fenced, and a group
    # whose only member leaves (Empty).
    stable, emptied = unique_topic("m-kip848"), unique_topic("m-kip848-left")
    conf = {"bootstrap.servers": b, "group.protocol": "consumer", "auto.offset.reset": "earliest", "log_level": 0}
    member = Consumer({**conf, "group.id": stable})
    member.subscribe([topic])
    leaver = Consumer({**conf, "group.id": emptied})
    leaver.subscribe([topic])
    try:
        wait_for(lambda: live.poll(timeout_ms=100) is not None and live.assignment(), 90, "the classic member")
        wait_for(lambda: member.poll(0.1) is None and member.assignment(), 90, "the consumer-protocol member")
        wait_for(lambda: leaver.poll(0.1) is None and leaver.assignment(), 90, "the second group's member")
        leaver.close()
        leaver = None
        _raw_join(b, stable, topic)

        def settled():
            live.poll(timeout_ms=50)
            member.poll(0.05)
            s = scrape(port)
            fenced = value(s, "sundial_group_fenced_members_total", type="consumer") == 1
            stable_again = value(s, "sundial_groups", type="consumer", state="Stable") == 1
            return s if fenced and stable_again else None

        samples = wait_for(settled, 90, "the silent member to be fenced and the group to settle")
        assert value(samples, "sundial_groups", type="consumer", state="Empty") == 1
        assert total(samples, "sundial_groups", type="consumer") == 2
        assert value(samples, "sundial_groups", type="classic", state="Stable") == 1
        assert value(samples, "sundial_groups", type="classic", state="Empty") == 1
        assert total(samples, "sundial_groups", type="classic") == 2
        # Every consumer group epoch bump is a rebalance: the counter is the sum of the groups' epochs
        # (member joins, the leave, the fencing; no group was deleted).
        epochs = _consumer_group_epoch(b, stable) + _consumer_group_epoch(b, emptied)
        assert value(samples, "sundial_group_rebalances_total", type="consumer") == epochs >= 5
        assert value(samples, "sundial_group_rebalances_total", type="classic") >= 1
        assert value(samples, "sundial_group_fenced_members_total", type="classic") == 0
        assert total(samples, "sundial_requests_total", api="CONSUMER_GROUP_HEARTBEAT") > 0
    finally:
        if leaver is not None:
            leaver.close()
        member.close()
        live.close(autocommit=False)
