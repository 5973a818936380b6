"""Two-level consumed-log retention (seed 004, issue 4 item 3) against the real daemon.

Settings: a retention pass every 500 ms, tiny segments (one record per batch, a few
records per segment), ``retention.commitoffset.ms`` = 1 min and ``retention.ms`` = 2 h.
Records carry CreateTime timestamps in the past, so "old enough" is decided by the
test, not by waiting. Every case asserts on ListOffsets earliest (kafka-python
``beginning_offsets``) and on the segment files in the data directory. "Nothing was
deleted" is asserted only after retention passes were seen to run
(``clients.wait_for_retention_passes``: a probe topic's expired segment is deleted by
each pass), never after a sleep.

(a) two groups, one lagging: segments stay until the slow group commits past them,
    then go within one check interval;
(b) no group: nothing is deleted before ``retention.ms``;
(c) a live subscribed group that has not committed holds everything;
(d) forced retention still deletes unconsumed segments after ``retention.ms``;
(e) configuration errors (INVALID_CONFIG, a broker that refuses to start);
(f) what the operator reads: a hold is logged once while it lasts (and once when it
    ends), and the empty segment left by consuming everything raises no false
    ``retention_held_by_future_timestamp`` warning.
"""

from __future__ import annotations

import os
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import InvalidConfigurationError
from kafka.structs import OffsetAndMetadata

from support.waiting import wait_for

from .clients import admin, create_topic, producer, wait_for_retention_passes
from .conftest import SundialProcess, free_port, unique_topic
from .groups_support import FAST_GROUPS

CHECK_INTERVAL_MS = 500
COMMITOFFSET_MS = 60_000
RETENTION_MS = 2 * 3600_000
MINUTE = 60_000

BROKER = {
    **FAST_GROUPS,
    "log.retention.commitoffset.enable": "true",
    "log.retention.check.interval.ms": str(CHECK_INTERVAL_MS),
    "log.initial.task.delay.ms": "0",
    "log.segment.delete.delay.ms": "0",
}
TOPIC_CONFIGS = {
    "segment.bytes": "1024",
    "retention.ms": str(RETENTION_MS),
    "retention.commitoffset.ms": str(COMMITOFFSET_MS),
}


def _produce_with_ages(bootstrap, topic, ages_ms):
    """One record per batch, timestamp now - age; returns the offsets."""
    p = producer(bootstrap, acks=1, linger_ms=0)
    now = int(time.time() * 1000)
    offsets = []
    for i, age in enumerate(ages_ms):
        fut = p.send(topic, value=(f"r{i}-" + "x" * 90).encode(), partition=0, timestamp_ms=now - age)
        p.flush()
        offsets.append(fut.get(timeout=30).offset)
    p.close()
    return offsets


def _segment_bases(data_dir, topic) -> list[int]:
    d = os.path.join(data_dir, f"{topic}-0")
    return sorted(int(name[:-4]) for name in os.listdir(d) if name.endswith(".log"))


def _wait_segment_bases(data_dir, topic, expected: list[int]) -> None:
    """Wait for the partition's segment files to be ``expected``: the log start offset moves
    first, and the files of the segments it passed are renamed afterwards, off the loop."""
    wait_for(lambda: _segment_bases(data_dir, topic) == expected, 60,
             f"the segment files of {topic} to be {expected}")


def _earliest(bootstrap, topic) -> int:
    c = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        return c.beginning_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        c.close()


def _commit(bootstrap, group, topic, offset):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        c.close()


def _alter(broker, topic, configs) -> str | None:
    """AlterConfigs on a topic; the error text or None (kafka-python returns errors, it does not raise)."""
    client = admin(broker.bootstrap)
    try:
        result = client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)])
    finally:
        client.close()
    error = result.get("topic", {}).get(topic) if isinstance(result, dict) else None
    return None if error in (None, "", "OK") else str(error)


def _deleted(broker, topic) -> list[dict]:
    return [e for e in broker.log_lines() if e.get("event") == "segment_deleted" and e.get("topic") == topic]


def _segment_of(bases, offset) -> int:
    """Base offset of the segment holding ``offset``."""
    return max(b for b in bases if b <= offset)


def _passes(broker, count: int = 3, tick=None) -> None:
    """Wait until ``count`` retention passes have run from now on (``tick()`` is called while waiting)."""
    wait_for_retention_passes(broker, count, probe_configs=TOPIC_CONFIGS, tick=tick)


@pytest.fixture
def retention_broker(broker_factory):
    return broker_factory(**BROKER).start()


def _topic(broker, ages, **configs):
    topic = unique_topic("cr")
    create_topic(broker.bootstrap, topic, configs={**TOPIC_CONFIGS, **configs})
    offsets = _produce_with_ages(broker.bootstrap, topic, ages)
    bases = _segment_bases(broker.data_dir, topic)
    assert len(bases) >= 8, bases
    assert offsets == list(range(len(ages)))
    return topic, bases


def test_a_two_groups_one_lagging(retention_broker):
    broker = retention_broker
    topic, bases = _topic(broker, [30 * MINUTE] * 80)
    # The slow group commits first: a retention pass between the two commits must not see
    # "fast" alone (it would rightly delete everything below 80).
    _commit(broker.bootstrap, "slow", topic, 3)
    _commit(broker.bootstrap, "fast", topic, 80)
    _passes(broker)
    # The slow group holds every segment from the one that holds its offset on.
    hold = _segment_of(bases, 3)
    assert _earliest(broker.bootstrap, topic) == hold
    _wait_segment_bases(broker.data_dir, topic, [b for b in bases if b >= hold])
    held = [e for e in broker.log_lines() if e.get("event") == "consumed_retention_held" and e.get("topic") == topic]
    assert held and held[-1].get("group") == "slow" and held[-1].get("committed_offset") == 3

    # The slow group commits past more segments: they go within one check interval.
    target = bases[len(bases) // 2] + 1
    expected = _segment_of(bases, target)
    _commit(broker.bootstrap, "slow", topic, target)
    wait_for(lambda: _earliest(broker.bootstrap, topic) == expected, 60, "the slow group's segments to go",
             interval_s=0.02)
    # The first retention pass that saw the commit deleted them: no pass ever held a segment
    # below ``expected`` once the group had committed ``target``.
    stale_holds = [e for e in broker.log_lines() if e.get("event") == "consumed_retention_held"
                   and e.get("topic") == topic and e.get("committed_offset") == target
                   and e.get("base_offset") < expected]
    assert stale_holds == []
    _wait_segment_bases(broker.data_dir, topic, [b for b in bases if b >= expected])
    _passes(broker, 2)
    assert _earliest(broker.bootstrap, topic) == expected  # nothing more: the slow group holds the rest
    deleted = _deleted(broker, topic)
    assert [e["base_offset"] for e in deleted] == [b for b in bases if b < expected]
    assert {e["reason"] for e in deleted} == {"consumed"}


def test_b_no_group_deletes_nothing_before_retention_ms(retention_broker):
    broker = retention_broker
    topic, bases = _topic(broker, [30 * MINUTE] * 60)
    _passes(broker)
    assert _earliest(broker.bootstrap, topic) == 0
    assert _segment_bases(broker.data_dir, topic) == bases
    # Once the records are older than retention.ms, forced retention deletes them as usual.
    assert _alter(broker, topic, {**TOPIC_CONFIGS, "retention.ms": str(20 * MINUTE)}) is None
    # Every segment is deletable, so the log rolls first and keeps one empty segment at the end.
    wait_for(lambda: _earliest(broker.bootstrap, topic) == 60, 60, "forced retention")
    _wait_segment_bases(broker.data_dir, topic, [60])


def _assert_held_by(broker, topic: str, bases, group: str, done_group: str, tick) -> None:
    """``done_group`` commits the end of ``topic`` (it has consumed everything) while ``group``'s member
    stays (``tick`` polls it) and never commits: retention passes delete nothing and log that ``group``
    holds the log at offset 0."""
    _commit(broker.bootstrap, done_group, topic, 60)
    _passes(broker, tick=tick)
    assert _earliest(broker.bootstrap, topic) == 0
    assert _segment_bases(broker.data_dir, topic) == bases
    held = [e for e in broker.log_lines()
            if e.get("event") == "consumed_retention_held" and e.get("topic") == topic]
    assert held and held[-1].get("group") == group and held[-1].get("committed_offset") == 0


def test_c_subscribed_group_without_commit_holds_everything(retention_broker):
    broker = retention_broker
    topic, bases = _topic(broker, [30 * MINUTE] * 60)
    member = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="subscribed-no-commit",
                           enable_auto_commit=False, auto_offset_reset="latest", session_timeout_ms=30000,
                           heartbeat_interval_ms=1000)
    try:
        wait_for(lambda: member.poll(timeout_ms=1000) is not None and member.assignment(), 60, "an assignment")
        _assert_held_by(broker, topic, bases, "subscribed-no-commit", "done",
                        tick=lambda: member.poll(timeout_ms=100))
    finally:
        member.close()  # LeaveGroup: the group is empty and never committed, so it no longer counts
    wait_for(lambda: _earliest(broker.bootstrap, topic) == 60, 60, "consumed retention after the leave")
    _wait_segment_bases(broker.data_dir, topic, [60])  # fully consumed: rolled, one empty segment left


def test_c2_a_consumer_protocol_group_without_commit_holds_everything(broker_factory):
    """The same as (c) with a Kafka 4 consumer group (KIP-848, confluent-kafka ``group.protocol=consumer``)."""
    from confluent_kafka import Consumer

    broker = broker_factory(**BROKER, **{"group.consumer.heartbeat.interval.ms": "500",
                                         "group.consumer.min.heartbeat.interval.ms": "500"}).start()
    topic, bases = _topic(broker, [30 * MINUTE] * 60)
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kip848-no-commit",
                       "group.protocol": "consumer", "enable.auto.commit": False, "auto.offset.reset": "latest"})
    try:
        member.subscribe([topic])
        wait_for(lambda: member.poll(0.5) is None and bool(member.assignment()), 60, "an assignment")
        _assert_held_by(broker, topic, bases, "kip848-no-commit", "done-848", tick=lambda: member.poll(0.1))
    finally:
        member.close()  # a leave heartbeat (epoch -1): the group is empty and never committed
    wait_for(lambda: _earliest(broker.bootstrap, topic) == 60, 60, "consumed retention after the leave")


def test_d_forced_retention_deletes_unconsumed_segments(retention_broker):
    broker = retention_broker
    ages = [3 * 60 * MINUTE] * 40 + [30 * MINUTE] * 40  # the first half is older than retention.ms
    # Created with a long retention so nothing goes while the records are written, then set to 2 h.
    topic, bases = _topic(broker, ages, **{"retention.ms": str(10 * RETENTION_MS)})
    _commit(broker.bootstrap, "stuck", topic, 0)  # has consumed nothing
    _passes(broker, 2)
    assert _earliest(broker.bootstrap, topic) == 0 and _segment_bases(broker.data_dir, topic) == bases
    assert _alter(broker, topic, TOPIC_CONFIGS) is None
    expected = _segment_of(bases, 40)
    wait_for(lambda: _earliest(broker.bootstrap, topic) == expected, 60, "forced retention")
    _wait_segment_bases(broker.data_dir, topic, [b for b in bases if b >= expected])
    _passes(broker)
    assert _earliest(broker.bootstrap, topic) == expected  # the young half stays: "stuck" has not consumed it
    deleted = _deleted(broker, topic)
    assert [e["base_offset"] for e in deleted] == [b for b in bases if b < expected]
    assert {e["reason"] for e in deleted} == {"retention_ms"}


def test_e_config_validation(retention_broker, tmp_path):
    broker = retention_broker
    client = admin(broker.bootstrap)
    topic = unique_topic("cfg")
    try:
        for bad in ({"retention.ms": "60000", "retention.commitoffset.ms": "120000"},
                    {"retention.commitoffset.ms": "-5"},
                    {"retention.commitoffset.minutes": "abc"}):
            with pytest.raises(InvalidConfigurationError):
                client.create_topics([NewTopic(topic, 1, 1, topic_configs=bad)])
        assert not os.path.exists(os.path.join(broker.data_dir, f"{topic}-0"))
        client.create_topics([NewTopic(topic, 1, 1, topic_configs=TOPIC_CONFIGS)])
        _produce_with_ages(broker.bootstrap, topic, [30 * MINUTE] * 20)
        bases = _segment_bases(broker.data_dir, topic)
    finally:
        client.close()
    # Lowering retention.ms below the explicit consumed retention is refused too (and changes nothing).
    error = _alter(broker, topic, {**TOPIC_CONFIGS, "retention.ms": "30000"})
    assert error is not None and "Error 40" in error and "retention.commitoffset.ms" in error
    _passes(broker, 2)
    assert _earliest(broker.bootstrap, topic) == 0 and _segment_bases(broker.data_dir, topic) == bases
    # A broker whose consumed retention is longer than its forced retention does not start.
    port = free_port()
    bad = SundialProcess(tmp_path / "bad", {"log.retention.ms": "60000", "log.retention.commitoffset.ms": "120000"},
                         port=port)
    with pytest.raises(RuntimeError, match="exited"):
        bad.start(timeout_s=60)  # it exits at once; the deadline only bounds a hang
    assert "commitoffset" in bad.log_text()


def _holds_counted(metrics_port: int, topic: str) -> float:
    """sundial_consumed_retention_holds_total for the topic: one per retention pass that held it."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "sundial_consumed_retention_holds_total" and s.labels.get("topic") == topic)


def test_f_holds_are_logged_on_change_and_a_full_roll_raises_no_false_warning(broker_factory):
    metrics_port = free_port()
    broker = broker_factory(**BROKER, **{"sundial.metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    topic, bases = _topic(broker, [30 * MINUTE] * 60)
    _commit(broker.bootstrap, "slow", topic, 3)
    wait_for(lambda: _holds_counted(metrics_port, topic) >= 5, 60, "five retention passes that held the topic")

    def events(name):
        return [e for e in broker.log_lines() if e.get("event") == name and e.get("topic") == topic]

    held = events("consumed_retention_held")
    assert len(held) == 1, held                      # five passes held it, one line says so
    assert held[0]["group"] == "slow" and held[0]["base_offset"] == _segment_of(bases, 3)
    # Everything consumed: every segment goes, the log rolls and keeps one empty segment.
    _commit(broker.bootstrap, "slow", topic, 60)
    wait_for(lambda: _earliest(broker.bootstrap, topic) == 60, 60, "consumed retention of everything")
    _wait_segment_bases(broker.data_dir, topic, [60])
    assert events("retention_held_by_future_timestamp") == []   # the fresh empty segment holds nothing
    assert len(events("consumed_retention_released")) == 1
    assert len(events("consumed_retention_held")) == 1
