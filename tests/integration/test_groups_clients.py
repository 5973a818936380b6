"""The commit-and-resume flow with aiokafka, confluent-kafka (librdkafka 2.16), kafkajs 2.2.4
and ``kcat -G`` (librdkafka 2.0.2), against the real daemon.

Each client, in its own consumer group: consume part of a 3-partition topic and commit
what it processed, leave; the broker restarts (SIGTERM); more records are produced; the
same client rejoins the group and must receive exactly the records it did not commit —
no loss, no re-delivery beyond the last commit. Committed offsets are read back with
kafka-python (OffsetFetch) and compared with the log end offsets at the end.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest

from support.waiting import wait_for

from .clients import create_topic, require_kafkajs, run_js
from .conftest import unique_topic
from .groups_support import FAST_GROUPS, committed_offsets, end_offsets, produce

PARTITIONS = 3
FIRST = 90
FIRST_TAKE = 40
SECOND = 30


def _flow(broker_factory, consume):
    """``consume(bootstrap, topic, group, count)`` -> list of (partition, offset, value bytes)."""
    broker = broker_factory(**FAST_GROUPS).start()
    topic, group = unique_topic("flow"), unique_topic("g")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    truth = produce(broker.bootstrap, topic, FIRST, PARTITIONS)

    first = consume(broker.bootstrap, topic, group, FIRST_TAKE)
    first_keys = {(p, o) for p, o, _ in first}
    assert len(first) == FIRST_TAKE == len(first_keys)
    assert all(truth[(p, o)] == v for p, o, v in first)
    # What was processed in each partition is a prefix from offset 0, and exactly that is committed.
    committed = committed_offsets(broker.bootstrap, group, topic, PARTITIONS)
    for p in range(PARTITIONS):
        offsets = sorted(o for q, o in first_keys if q == p)
        assert offsets == list(range(len(offsets)))
        assert committed[p] == (len(offsets) if offsets else None), (p, committed)

    broker.restart()
    truth.update(produce(broker.bootstrap, topic, SECOND, PARTITIONS, start=FIRST))
    rest = set(truth) - first_keys
    second = consume(broker.bootstrap, topic, group, len(rest))
    second_keys = {(p, o) for p, o, _ in second}
    assert len(second) == len(second_keys), "a record was delivered twice in the second run"
    assert second_keys == rest, (sorted(second_keys - rest)[:5], sorted(rest - second_keys)[:5])
    assert all(truth[(p, o)] == v for p, o, v in second)
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == \
        end_offsets(broker.bootstrap, topic, PARTITIONS)
    return broker


# --- aiokafka 0.14 ----------------------------------------------------------------------------------------

def _aiokafka_consume(bootstrap, topic, group, count):
    from aiokafka import AIOKafkaConsumer

    async def run():
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                             fetch_max_wait_ms=100)
        await c.start()
        got = []
        try:
            async with asyncio.timeout(60):
                while len(got) < count:
                    batch = await c.getmany(timeout_ms=500)
                    for tp, msgs in batch.items():
                        for m in msgs:
                            if len(got) >= count:
                                break
                            got.append((m.partition, m.offset, m.value))
                            await c.commit({tp: m.offset + 1})
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


def test_aiokafka_commit_and_resume(broker_factory):
    _flow(broker_factory, _aiokafka_consume)


# --- confluent-kafka 2.16 ---------------------------------------------------------------------------------------

def _confluent_consume(bootstrap, topic, group, count):
    import time

    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "fetch.wait.max.ms": 100})
    got = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got.append((m.partition(), m.offset(), m.value()))
            c.commit(message=m, asynchronous=False)
    finally:
        c.close()
    return got


def test_confluent_kafka_commit_and_resume(broker_factory):
    _flow(broker_factory, _confluent_consume)


# --- kcat -G (balanced consumer, auto commit on close) -----------------------------------------------------------

def _kcat_consume(bootstrap, topic, group, count):
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-G", group, "-c", str(count), "-f", "%p %o %s\\n", "-q",
         "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
         "-X", "heartbeat.interval.ms=500", "-X", "fetch.wait.max.ms=100", topic],
        capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    got = []
    for line in out.stdout.decode().splitlines():
        if line.strip():
            p, o, v = line.split(" ", 2)
            got.append((int(p), int(o), v.encode()))
    return got


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (Debian package kcat)")
def test_kcat_group_commit_and_resume(broker_factory):
    broker = _flow(broker_factory, _kcat_consume)
    joins = [e for e in broker.log_lines() if e.get("event") == "member_joined"]
    assert joins and all(e["protocols"] for e in joins)


# --- kafkajs 2.2.4 -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafkajs_installed():
    return require_kafkajs()


def _kafkajs_consume(bootstrap, topic, group, count):
    lines = run_js("group_consume.js", bootstrap, topic, group, str(count), timeout_s=90)
    return [(x["partition"], x["offset"], x["value"].encode()) for x in lines if "offset" in x]


def test_kafkajs_commit_and_resume(broker_factory, kafkajs_installed):
    _flow(broker_factory, _kafkajs_consume)


# --- static membership (KIP-345) with librdkafka -------------------------------------------------------------------

def test_confluent_static_member_restart_keeps_assignment_without_rebalance(broker_factory):
    import threading

    from confluent_kafka import Consumer

    broker = broker_factory(**FAST_GROUPS).start()
    topic, group = unique_topic("static"), unique_topic("gs")
    create_topic(broker.bootstrap, topic, partitions=4)

    class Static(threading.Thread):
        def __init__(self, instance):
            super().__init__(daemon=True)
            self.c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                               "group.instance.id": instance, "client.id": instance,
                               "session.timeout.ms": 10000, "heartbeat.interval.ms": 200,
                               "partition.assignment.strategy": "range", "enable.auto.commit": False})
            self.assigned: list[int] = []
            self.assign_calls = 0
            self.stop = threading.Event()

        def run(self):
            def on_assign(consumer, parts):
                self.assigned = sorted(p.partition for p in parts)
                self.assign_calls += 1
            self.c.subscribe([topic], on_assign=on_assign)
            while not self.stop.is_set():
                self.c.poll(0.05)
            self.c.close()  # a static member does not send LeaveGroup

    def group_events(*names):
        return [e["event"] for e in broker.log_lines() if e.get("group") == group and e.get("event") in names]

    a, b = Static("inst-a"), Static("inst-b")
    a.start()
    b.start()
    def settled():  # both members hold their two partitions and the group's last step was to stabilise
        last = group_events("rebalance_prepared", "group_rebalanced", "group_stabilized")[-1:]
        return len(a.assigned) == 2 and len(b.assigned) == 2 and sorted(a.assigned + b.assigned) == [0, 1, 2, 3] \
            and last == ["group_stabilized"]

    wait_for(settled, 60, "two static members with two partitions each in a stable group")

    before, prepared = len(group_events("group_rebalanced")), len(group_events("rebalance_prepared"))
    b_calls, a_parts = b.assign_calls, a.assigned
    a.stop.set()
    a.join(20)
    a2 = Static("inst-a")
    a2.start()
    wait_for(lambda: a2.assigned, 60, "the restarted static member's assignment")
    assert a2.assigned == a_parts
    # a rebalance caused by the rejoin would be prepared (and logged) while its JoinGroup is
    # handled, which is before the member gets its assignment: no waiting needed
    assert len(group_events("rebalance_prepared")) == prepared, "a static restart must not rebalance the group"
    assert len(group_events("group_rebalanced")) == before and b.assign_calls == b_calls
    replaced = [e for e in broker.log_lines() if e.get("event") == "static_member_replaced"]
    assert replaced and replaced[-1]["group_instance_id"] == "inst-a"
    for t in (a2, b):
        t.stop.set()
        t.join(20)
