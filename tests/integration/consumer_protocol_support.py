"""Shared pieces of the consumer-protocol (KIP-848) integration tests: confluent-kafka members in
threads that record every callback and every delivery, a producer that keeps producing during
membership changes, the raw wire, and the checks the tests make against ground truth.

Ground truth is what the test produced (the producer's acknowledged offsets) and the order in
which the members' rebalance callbacks ran: the members live in this process and record their
callbacks on one :class:`Timeline`, so "assigned to B only after A revoked it" is a fact about
the recorded order. A revocation is recorded when the application's callback has finished (the
client tells the broker only after that), an assignment when the callback starts.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import Counter

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from . import conftest
from .clients import RawConnection
from .groups_support import merged

#: Broker settings that keep consumer-protocol tests fast: members heartbeat every 300 ms (Kafka's
#: default is 5 s, and a reassignment takes a heartbeat or two), sessions may be as short as 1 s;
#: a classic group (beside them in some tests) forms without Kafka's 3 s initial delay.
FAST_CONSUMER_GROUPS = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "30000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}

TIMEOUT_S = 60      # generous: a busy two-core host answers late, and waits end on conditions

TP = tuple[str, int]            # (topic, partition)
RECORD = tuple[str, int, int]   # (topic, partition, offset)


# -- topics and records ----------------------------------------------------------------------------
def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()], request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(TIMEOUT_S)


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(topics, request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)


def produce(bootstrap: str, partitions: dict[str, int], per_partition: int, tag: str = "") -> dict[RECORD, bytes]:
    """``per_partition`` records into every partition of every topic; {(topic, partition, offset): value}."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, request_timeout_ms=20000)
    try:
        futures = []
        for topic, count in partitions.items():
            for partition in range(count):
                for i in range(per_partition):
                    value = f"{tag}{topic}/{partition}/{i}".encode()
                    futures.append((value, p.send(topic, value=value, partition=partition)))
        p.flush()
        return {(md.topic, md.partition, md.offset): value for value, md in
                ((value, fut.get(timeout=TIMEOUT_S)) for value, fut in futures)}
    finally:
        p.close()


class ProducerThread(threading.Thread):
    """Keeps producing small batches into every partition until stopped (no pacing guarantees:
    the batches only make sure records arrive while the group changes). ``truth`` holds every
    acknowledged record."""

    def __init__(self, bootstrap: str, partitions: dict[str, int], batch_per_partition: int = 2) -> None:
        super().__init__(name="producer", daemon=True)
        self.partitions = dict(partitions)
        self.batch = batch_per_partition
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                      request_timeout_ms=20000)
        self.truth: dict[RECORD, bytes] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.batches = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stopping.is_set():
                futures = []
                for topic, count in self.partitions.items():
                    for partition in range(count):
                        for _ in range(self.batch):
                            value = f"bg-{n}".encode()
                            n += 1
                            futures.append((value, self.producer.send(topic, value=value, partition=partition)))
                self.producer.flush()
                acked = {}
                for value, fut in futures:
                    md = fut.get(timeout=TIMEOUT_S)
                    acked[(md.topic, md.partition, md.offset)] = value
                with self.lock:
                    self.truth.update(acked)
                    self.batches += 1
                self.stopping.wait(0.05)   # pacing only
        except BaseException as exc:  # pragma: no cover - surfaced by stop()
            self.error = exc
            traceback.print_exc()
        finally:
            self.producer.close()

    def produced(self) -> dict[RECORD, bytes]:
        with self.lock:
            return dict(self.truth)

    def wait_batches(self, more: int) -> None:
        """Return once ``more`` further batches were acknowledged."""
        start = self.batches
        wait_for(lambda: self.batches >= start + more or self.error is not None, TIMEOUT_S,
                 f"{more} more produced batches")
        assert self.error is None, f"the producer failed: {self.error!r}"

    def stop(self) -> dict[RECORD, bytes]:
        self.stopping.set()
        self.join(TIMEOUT_S)
        assert not self.is_alive(), "the producer did not stop"
        assert self.error is None, f"the producer failed: {self.error!r}"
        return self.produced()


# -- members and their callbacks ----------------------------------------------------------------------
class Timeline:
    """Every member's rebalance callbacks in the order they ran: (when, member, kind, partitions).

    ``when`` is ``time.monotonic_ns()``: one clock for every process of the machine, so events a
    member in a child process recorded (:meth:`add`) merge into the same order.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[int, str, str, frozenset[TP]]] = []

    def record(self, member: str, kind: str, partitions) -> None:
        with self.lock:
            self.events.append((time.monotonic_ns(), member, kind, frozenset(partitions)))

    def add(self, when_ns: int, member: str, kind: str, partitions) -> None:
        with self.lock:
            self.events.append((when_ns, member, kind, frozenset(partitions)))

    def snapshot(self) -> list[tuple[int, str, str, frozenset[TP]]]:
        with self.lock:
            return sorted(self.events, key=lambda e: e[0])


def exclusive_ownership_violations(events) -> list[str]:
    """Partitions handed to a member while another still owned them, by the callback timeline.

    A member that reports a partition *lost* was fenced: the broker may give the partition to
    another member before the fenced one learns it (Kafka's semantics), so an overlap with an
    ownership that ended in ``lost`` is not a violation. Every other overlap is.
    """
    owner: dict[TP, str] = {}
    overlaps: list[tuple[TP, str, str]] = []      # (partition, previous owner, new owner)
    lost: set[tuple[TP, str]] = set()
    problems = []
    for when, member, kind, parts in events:
        for tp in sorted(parts):
            if kind == "assign":
                if tp in owner and owner[tp] != member:
                    overlaps.append((tp, owner[tp], member))
                elif owner.get(tp) == member:
                    problems.append(f"at {when}: {tp} assigned to {member} twice")
                owner[tp] = member
            else:  # revoke / lost
                if kind == "lost":
                    lost.add((tp, member))
                if owner.get(tp) == member:
                    del owner[tp]
                elif (tp, member) not in {(t, old) for t, old, _ in overlaps}:
                    problems.append(f"at {when}: {member} gave up {tp}, which it did not own")
    problems += [f"{tp} assigned to {new} while {old} still owned it" for tp, old, new in overlaps
                 if (tp, old) not in lost]
    return problems


class Member(threading.Thread):
    """A confluent-kafka consumer of the consumer protocol (``group.protocol=consumer``) in a
    thread: it polls, records every delivery, commits what each poll delivered (explicit
    offsets, synchronously; a refused commit is tried again after the next poll while the
    partition is still owned), and records its callbacks on the shared timeline.

    ``deliveries`` counts every (topic, partition, offset) handed to the application;
    ``committed`` counts the deliveries a successful commit covered; ``owned`` is the
    assignment as the callbacks left it. An error the client calls fatal ends the member
    (``stop()`` asserts there was none).
    """

    def __init__(self, bootstrap: str, group: str, name: str, timeline: Timeline, *, topics=(),
                 pattern: str | None = None, assignor: str | None = "uniform", **config) -> None:
        super().__init__(name=name, daemon=True)
        settings = {
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 2000,
        }
        if assignor is not None:
            settings["group.remote.assignor"] = assignor
        settings.update(config)
        self.consumer = Consumer(settings)
        self.timeline = timeline
        self.lock = threading.Lock()
        self.owned: set[TP] = set()
        self.deliveries: Counter = Counter()
        self.committed: Counter = Counter()
        self.values: dict[RECORD, bytes] = {}
        self.outside_assignment: list[RECORD] = []
        self.commit_errors: Counter = Counter()
        self.errors: Counter = Counter()
        self.stopping = threading.Event()
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self.member_id: str | None = None
        #: When set (and not yet released), the revoke callback waits on it: a slow application.
        self.revoke_gate: threading.Event | None = None
        self.revoking = threading.Event()
        subscription = [pattern] if pattern is not None else list(topics)
        self.consumer.subscribe(subscription, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    # callbacks run in this member's thread, inside consume() or close()
    def _on_assign(self, consumer, partitions) -> None:
        parts = {(tp.topic, tp.partition) for tp in partitions}
        self.timeline.record(self.name, "assign", parts)
        with self.lock:
            self.owned |= parts

    def _on_revoke(self, consumer, partitions) -> None:
        parts = {(tp.topic, tp.partition) for tp in partitions}
        gate = self.revoke_gate
        if gate is not None and parts:
            self.revoking.set()
            gate.wait(TIMEOUT_S)
        with self.lock:
            self.owned -= parts
        self.timeline.record(self.name, "revoke", parts)

    def _on_lost(self, consumer, partitions) -> None:
        parts = {(tp.topic, tp.partition) for tp in partitions}
        with self.lock:
            self.owned -= parts
        self.timeline.record(self.name, "lost", parts)

    def owned_now(self) -> frozenset[TP]:
        with self.lock:
            return frozenset(self.owned)

    def _commit_pending(self, pending: dict[TP, int], pending_taken: list[RECORD]) -> None:
        """Commits what was delivered and is not committed yet, for the partitions still owned. A
        refused commit (a stale member epoch while the assignment moves, say) stays pending and is
        tried again after the next poll; a partition no longer owned is dropped (its new owner
        commits it)."""
        owned = self.owned_now()
        for tp in [tp for tp in pending if tp not in owned]:
            del pending[tp]
        pending_taken[:] = [key for key in pending_taken if key[:2] in pending]
        if not pending:
            return
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            self.commit_errors[exc.args[0].name()] += 1
        else:
            with self.lock:
                self.committed.update(pending_taken)
            pending.clear()
            pending_taken.clear()

    def run(self) -> None:
        pending: dict[TP, int] = {}
        pending_taken: list[RECORD] = []
        try:
            while not self.stopping.is_set():
                messages = self.consumer.consume(500, 0.2)
                if self.member_id is None:
                    self.member_id = self.consumer.memberid()
                upto: dict[TP, int] = {}
                taken = []
                for m in messages:
                    if m.error() is not None:
                        if m.error().fatal():
                            raise KafkaException(m.error())
                        self.errors[m.error().name()] += 1
                        continue
                    key = (m.topic(), m.partition(), m.offset())
                    with self.lock:
                        if key[:2] not in self.owned:
                            self.outside_assignment.append(key)
                        self.deliveries[key] += 1
                        self.values[key] = m.value()
                    taken.append(key)
                    upto[key[:2]] = max(upto.get(key[:2], -1), m.offset() + 1)
                for tp, offset in upto.items():
                    pending[tp] = max(pending.get(tp, -1), offset)
                pending_taken.extend(taken)
                if pending:
                    self._commit_pending(pending, pending_taken)
            self.consumer.close()   # leaves the group (revoke callbacks run here)
        except BaseException as exc:  # pragma: no cover - surfaced by stop()
            self.error = exc
            print(f"{self.name} stopped by an exception:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        finally:
            self.closed.set()

    def stop(self) -> None:
        self.stopping.set()
        self.join(TIMEOUT_S)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} failed: {self.error!r}"


def assert_no_loss(truth: dict[RECORD, bytes], members, extra_deliveries=(), extra_committed=()) -> Counter:
    """Every produced record was delivered with its value, nothing else was, and no record was
    delivered again after a successful commit covered it; returns the merged deliveries."""
    deliveries = merged([*(m.deliveries for m in members), *extra_deliveries])
    missing = set(truth) - set(deliveries)
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:5]}"
    unknown = set(deliveries) - set(truth)
    assert not unknown, f"delivered records that were never produced: {sorted(unknown)[:5]}"
    values = {}
    for m in members:
        values.update(m.values)
    assert all(values[k] == v for k, v in truth.items() if k in values)
    committed = merged([*(m.committed for m in members), *extra_committed])
    twice = sorted(k for k, n in committed.items() if n > 1)
    assert not twice, f"records delivered again after a commit covered them: {twice[:5]}"
    for m in members:
        assert not m.outside_assignment, f"{m.name} got records of partitions it did not own: " \
                                         f"{m.outside_assignment[:5]}"
    return deliveries


# -- the group as the broker describes it ---------------------------------------------------------------
def rd_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def describe(admin: AdminClient, group: str):
    """AdminClient.describe_consumer_groups of one group (ConsumerGroupDescribe for this type)."""
    [future] = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()
    return future.result(TIMEOUT_S)


def assignment_of(member_description) -> frozenset[TP]:
    return frozenset((tp.topic, tp.partition) for tp in member_description.assignment.topic_partitions)


def target_of(member_description) -> frozenset[TP]:
    return frozenset((tp.topic, tp.partition) for tp in member_description.target_assignment.topic_partitions)


def settled(admin: AdminClient, group: str, members, all_partitions: set[TP]) -> dict[str, frozenset[TP]] | None:
    """The group is Stable with exactly ``members``, each holding its target, the targets cover
    ``all_partitions``, and every client's callbacks agree with the broker; {name: partitions}."""
    try:
        desc = describe(admin, group)
    except KafkaException:
        return None
    if desc.state != ConsumerGroupState.STABLE:
        return None
    by_id = {m.member_id: m for m in desc.members}
    if len(by_id) != len(members) or any(m.member_id not in by_id for m in members):
        return None
    out = {}
    for m in members:
        d = by_id[m.member_id]
        if assignment_of(d) != target_of(d) or m.owned_now() != assignment_of(d):
            return None
        out[m.name] = assignment_of(d)
    if set().union(*out.values()) != all_partitions or sum(len(p) for p in out.values()) != len(all_partitions):
        return None
    return out


def wait_settled(admin: AdminClient, group: str, members, all_partitions: set[TP], what: str):
    wait_for(lambda: all(m.member_id for m in members), TIMEOUT_S, f"member ids ({what})")
    for m in members:
        assert m.error is None, f"{m.name} failed: {m.error!r}"
    return wait_for(lambda: settled(admin, group, members, all_partitions), TIMEOUT_S, what, interval_s=0.2)


def wait_delivered(members, truth, what: str, extra=lambda: set()) -> None:
    def done():
        for m in members:
            assert m.error is None, f"{m.name} failed: {m.error!r}"
        got = set(extra())
        for m in members:
            with m.lock:
                got.update(m.deliveries)
        return got >= set(truth)
    wait_for(done, TIMEOUT_S, what, interval_s=0.1)


def committed_offsets(bootstrap: str, group: str, partitions: set[TP]) -> dict[TP, int]:
    """The group's committed offsets (OffsetFetch through confluent-kafka's admin); -1 for none."""
    admin = rd_admin(bootstrap)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in sorted(partitions)])
    [future] = admin.list_consumer_group_offsets([request], request_timeout=TIMEOUT_S).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(TIMEOUT_S).topic_partitions}


def end_offsets(truth: dict[RECORD, bytes], partitions: set[TP]) -> dict[TP, int]:
    """Log end offsets computed from what the test produced (every record of these partitions)."""
    ends = {tp: 0 for tp in partitions}
    for t, p, o in truth:
        ends[(t, p)] = max(ends[(t, p)], o + 1)
    return ends


def all_partitions(partitions: dict[str, int]) -> set[TP]:
    return {(t, p) for t, n in partitions.items() for p in range(n)}


# -- the raw wire ---------------------------------------------------------------------------------
class Raw(RawConnection):
    """One connection that sends requests with Sundial's own encoder and decodes the answers."""

    def heartbeat(self, group: str, member_id: str, epoch: int, topics=None, owned=None, assignor=None):
        return self.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 30000 if epoch == 0 else -1,
            "subscribed_topic_names": topics, "subscribed_topic_regex": None, "server_assignor": assignor,
            "topic_partitions": owned})

    def describe_group(self, group: str):
        (described,) = self.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
                                {"group_ids": [group], "include_authorized_operations": False}).groups
        return described


def raw(broker) -> Raw:
    return Raw(broker.host, broker.port)


# -- the daemon --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fast_broker(tmp_path_factory):
    """One daemon per test module with :data:`FAST_CONSUMER_GROUPS` (tests use unique topics and groups)."""
    # started where the suite starts its daemons (a subprocess here, a container in the compose suite)
    unavailable = getattr(conftest, "DAEMONS_UNAVAILABLE",
                          "needs a daemon started by the test" if conftest.EXTERNAL_BOOTSTRAP else None)
    if unavailable:
        pytest.skip(unavailable)
    proc = conftest.SundialProcess(tmp_path_factory.mktemp("consumer-protocol"), FAST_CONSUMER_GROUPS)
    proc.start()
    yield proc
    assert proc.running, f"the daemon died during the module:\n{proc.log_text()[-3000:]}"
    code = proc.stop()
    assert code == 0, f"sundial exited with {code} on SIGTERM:\n{proc.log_text()[-3000:]}"
