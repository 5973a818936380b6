"""Shared pieces of the consumer-group integration tests: a kafka-python group consumer in a
thread that records every delivery and every successful commit, and ground-truth helpers."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import Counter

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from .clients import producer

ASSIGNORS = {
    "range": RangePartitionAssignor,
    "roundrobin": RoundRobinPartitionAssignor,
    "sticky": StickyPartitionAssignor,
}

#: Broker settings that keep group tests fast (Kafka's defaults wait seconds on purpose).
FAST_GROUPS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> dict[tuple[int, int], bytes]:
    """Send ``count`` records round-robin over the partitions; returns {(partition, offset): value}."""
    p = producer(bootstrap, acks=1)
    futures = []
    for i in range(start, start + count):
        value = f"v{i}".encode()
        futures.append((value, p.send(topic, value=value, key=str(i).encode(), partition=i % partitions)))
    p.flush()
    out = {}
    for value, fut in futures:
        md = fut.get(timeout=30)
        out[(md.partition, md.offset)] = value
    p.close()
    return out


class GroupConsumer(threading.Thread):
    """A kafka-python group member that commits synchronously after every non-empty poll.

    ``deliveries`` counts every (partition, offset) handed to the application;
    ``committed`` counts deliveries that a successful commit covered. A retriable error
    out of ``poll()`` is counted in ``poll_retries`` and polled past; any other error ends
    the member with its traceback on stderr and in ``error_trace`` (``stop()`` asserts none).
    """

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, assignor: str = "range", **overrides):
        super().__init__(name=name, daemon=True)
        # Bounds that hold on a busy host (members leave with LeaveGroup, so nothing waits for
        # them to expire): a 30 s session and reconnects at most 1 s apart, because a broker
        # restart there took 15 s and kafka-python's default backoff (up to 30 s) then outlived
        # a 10 s session; Kafka's default max_poll_interval_ms, because the synchronous commit
        # after a poll blocks while the broker restarts and a 15 s bound made the member leave.
        settings = dict(
            bootstrap_servers=bootstrap, group_id=group, client_id=name, enable_auto_commit=False,
            auto_offset_reset="earliest", partition_assignment_strategy=[ASSIGNORS[assignor]],
            session_timeout_ms=30_000, heartbeat_interval_ms=300, max_poll_interval_ms=300_000,
            reconnect_backoff_max_ms=1000, fetch_max_wait_ms=100, request_timeout_ms=20000,
            metadata_max_age_ms=5000)
        settings.update(overrides)
        self.consumer = KafkaConsumer(**settings)
        # Subscribe once the client's metadata holds the topic: a leader that assigns before it
        # knows the partitions rejoins when they arrive, and kafka-python 3.0.12 can lose that
        # rejoin (see run()), leaving a member that stops heartbeating.
        deadline = time.monotonic() + 60
        while not self.consumer.partitions_for_topic(topic):
            assert time.monotonic() < deadline, f"{name}: no metadata for {topic} in 60 s"
            time.sleep(0.1)
        self.consumer.subscribe([topic])
        self.deliveries: Counter = Counter()
        self.committed: Counter = Counter()
        self.values: dict[tuple[int, int], bytes] = {}
        self.assigned: frozenset[int] = frozenset()
        self.commit_failures = 0
        self.poll_retries = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.error_trace = ""

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                # A poll timeout long enough for a whole join round: kafka-python 3.0.12 loses a
                # leader's join when poll() times out during a rejoin caused by new topic metadata
                # (the finished join is never applied and the member stops heartbeating).
                try:
                    batch = self.consumer.poll(timeout_ms=1000)
                except KafkaError as exc:
                    # kafka-python 3.0.12 lets a retriable error out of poll(), e.g. ECONNREFUSED
                    # from a metadata refresh while the broker restarts (a busy host makes that
                    # window long): poll again, as an application would.
                    if not getattr(exc, "retriable", False):
                        raise
                    self.poll_retries += 1
                    continue
                self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
                taken = []
                for tp, msgs in batch.items():
                    for m in msgs:
                        key = (m.partition, m.offset)
                        self.deliveries[key] += 1
                        self.values[key] = m.value
                        taken.append(key)
                if taken:
                    try:
                        self.consumer.commit()
                    except Exception:  # CommitFailedError / RebalanceInProgress: a rebalance raced the commit
                        self.commit_failures += 1
                    else:
                        for key in taken:
                            self.committed[key] += 1
            self.consumer.close()  # sends LeaveGroup
        except BaseException as exc:  # pragma: no cover - surfaced by the test
            self.error = exc
            self.error_trace = traceback.format_exc()
            print(f"{self.name} stopped by an exception:\n{self.error_trace}", file=sys.stderr, flush=True)

    def stop(self, timeout_s: float = 20.0) -> None:
        self.stopping.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} failed: {self.error!r}"


def merged(counters) -> Counter:
    total: Counter = Counter()
    for c in counters:
        total.update(c)
    return total


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      request_timeout_ms=20000)
    try:
        return {p: c.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    return _listed_offsets(bootstrap, topic, partitions, KafkaConsumer.end_offsets)


def beginning_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    return _listed_offsets(bootstrap, topic, partitions, KafkaConsumer.beginning_offsets)


def _listed_offsets(bootstrap: str, topic: str, partitions: int, lookup) -> dict[int, int]:
    """{partition: offset} as ``lookup`` (a KafkaConsumer method over TopicPartitions) answers it."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        found = lookup(c, [TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: off for tp, off in found.items()}
    finally:
        c.close()


def first_delivered(c: KafkaConsumer, partitions: int, timeout_s: float = 30.0) -> dict[int, int]:
    """Poll the subscribed ``c`` until a record of every one of ``partitions`` partitions came (or
    ``timeout_s`` passed): {partition: offset of its first record delivered}. Closes ``c`` without
    committing."""
    first: dict[int, int] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while len(first) < partitions and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=300).items():
                if recs and tp.partition not in first:
                    first[tp.partition] = recs[0].offset
    finally:
        c.close(autocommit=False)
    return first
