"""The soak benchmark's ground truth and client load (used by ``benchmarks/soak.py``).

* :class:`Ledger` - what the clients were told: for every record sent, its producer,
  sequence number and CreateTime; for every acknowledged one its partition and offset
  (and in which daemon lifetime, "epoch", the acknowledgement arrived); per partition the
  timestamp at each acknowledged offset (for checking timestamp lookups); per consumer
  group how many times each offset was delivered.
* :class:`Latency` - per-kind latency samples, drained by the sampler once per interval.
* Workers (one thread each): producers (confluent-kafka acks=all idempotent, kafka-python
  with its defaults, aiokafka with its defaults), group members (kafka-python in one
  group, confluent-kafka in another) and the controller that makes them join and leave.

Record values are ``b"<producer>:<seq>:<timestamp>:"`` plus padding, so a value read
back from the log names the send it came from.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import traceback
from array import array
from collections import Counter
from dataclasses import dataclass

JITTER_MS = 5_000              # CreateTime = now - uniform(0, JITTER_MS): not monotonic within a partition
VALUE_BYTES = 120


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    kind: str                  # "time" (time retention), "consumed" (consumed retention), "keep" (none)
    configs: dict


TIME_RETENTION_MS = 30_000
CONSUMED_RETENTION_MS = 15_000
TOPICS = [
    TopicSpec("soak-time", 3, "time", {"retention.ms": str(TIME_RETENTION_MS), "segment.bytes": "65536",
                                       "segment.ms": "10000", "index.interval.bytes": "1024"}),
    TopicSpec("soak-consumed", 2, "consumed", {"retention.ms": str(86_400_000),
                                               "retention.commitoffset.ms": str(CONSUMED_RETENTION_MS),
                                               "segment.bytes": "65536", "segment.ms": "10000"}),
    # one segment per partition for the whole run: its open files must not grow
    TopicSpec("soak-keep", 2, "keep", {"retention.ms": "-1", "retention.commitoffset.ms": str(10 * 365 * 86_400_000)}),
]
TPS = [(t.name, p) for t in TOPICS for p in range(t.partitions)]
KIND = {t.name: t.kind for t in TOPICS}


@dataclass(frozen=True)
class GroupSpec:
    name: str
    client: str                # "kafka-python" or "confluent-kafka"
    topics: tuple
    members: tuple             # (min, max) live members; the controller alternates between them


# No group consumes soak-time: a group's commits would make consumed retention (whose age defaults
# to retention.ms) delete its segments before time retention could.
GROUPS = [GroupSpec("soak-g1", "kafka-python", ("soak-consumed", "soak-keep"), (2, 3)),
          GroupSpec("soak-g2", "confluent-kafka", ("soak-consumed", "soak-keep"), (1, 2))]
COMMIT_EVERY_S = 1.0


def make_value(producer: str, seq: int, ts: int) -> bytes:
    head = b"%s:%d:%d:" % (producer.encode(), seq, ts)
    return head + b"x" * max(0, VALUE_BYTES - len(head))


def parse_value(value: bytes) -> tuple[str, int, int] | None:
    try:
        name, seq, ts, _ = value.split(b":", 3)
        return name.decode(), int(seq), int(ts)
    except (ValueError, AttributeError):
        return None


class Book:
    """One producer's sends, indexed by sequence number."""

    IN_FLIGHT, ACKED, FAILED = 0, 1, 2

    def __init__(self, name: str) -> None:
        self.name = name
        self.tp = array("h")
        self.offset = array("q")
        self.ts = array("q")
        self.state = bytearray()
        self.ack_epoch = array("h")
        self.fail_reasons: Counter = Counter()


class GroupBook:
    """How often each offset of each subscribed partition was delivered to one group."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.delivered = {i: bytearray() for i, (t, _) in enumerate(TPS) if t in spec.topics}
        self.distinct = 0
        self.total = 0
        self.joins = 0
        self.leaves = 0
        self.assignments = 0
        self.commits = 0
        self.commit_failures = 0
        self.poll_errors = 0
        self.client_restarts = 0


class Ledger:
    """Thread-safe ground truth (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tp_index = {tp: i for i, tp in enumerate(TPS)}
        self.books: dict[str, Book] = {}
        self.ts_at = [array("q") for _ in TPS]           # per partition: CreateTime at offset, -1 unknown
        self.max_acked = [-1] * len(TPS)
        self.groups = {g.name: GroupBook(g) for g in GROUPS}
        self.epoch = 1
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.errors: list[str] = []

    def book(self, name: str) -> Book:
        with self.lock:
            return self.books.setdefault(name, Book(name))

    def new_send(self, book: Book, tp: tuple[str, int], ts: int) -> int:
        with self.lock:
            seq = len(book.state)
            book.tp.append(self.tp_index[tp])
            book.offset.append(-1)
            book.ts.append(ts)
            book.state.append(Book.IN_FLIGHT)
            book.ack_epoch.append(0)
            self.sent += 1
            return seq

    def ack(self, book: Book, seq: int, partition: int, offset: int) -> None:
        with self.lock:
            tpi = book.tp[seq]
            if TPS[tpi][1] != partition:
                self.errors.append(f"{book.name}:{seq} sent to {TPS[tpi]} acknowledged on partition {partition}")
                return
            if book.state[seq] == Book.ACKED:
                if book.offset[seq] != offset:
                    self.errors.append(f"{book.name}:{seq} acknowledged twice: offsets {book.offset[seq]} and "
                                       f"{offset}")
                return
            if book.state[seq] == Book.FAILED:
                self.failed -= 1
            book.state[seq] = Book.ACKED
            book.offset[seq] = offset
            book.ack_epoch[seq] = self.epoch
            self.acked += 1
            ts_at = self.ts_at[tpi]
            if len(ts_at) <= offset:
                ts_at.extend([-1] * (offset + 1 - len(ts_at)))
            if ts_at[offset] not in (-1, book.ts[seq]):
                self.errors.append(f"{TPS[tpi]} offset {offset} acknowledged to two sends "
                                   f"(second: {book.name}:{seq})")
            ts_at[offset] = book.ts[seq]
            if offset > self.max_acked[tpi]:
                self.max_acked[tpi] = offset

    def fail(self, book: Book, seq: int, reason: str) -> None:
        with self.lock:
            if book.state[seq] == Book.IN_FLIGHT:
                book.state[seq] = Book.FAILED
                self.failed += 1
                book.fail_reasons[reason[:80]] += 1

    def deliver(self, group: str, tp: tuple[str, int], offsets: list[int]) -> None:
        with self.lock:
            g = self.groups[group]
            counts = g.delivered[self.tp_index[tp]]
            top = max(offsets)
            if len(counts) <= top:
                counts.extend(bytes(top + 1 - len(counts)))
            for o in offsets:
                c = counts[o]
                if c == 0:
                    g.distinct += 1
                if c < 255:
                    counts[o] = c + 1
            g.total += len(offsets)

    def acked_in_epoch(self, epoch: int) -> dict[int, list[tuple[int, bytes, int]]]:
        """Partition index -> [(offset, value, ts)] of the records acknowledged during ``epoch``."""
        out: dict[int, list] = {}
        with self.lock:
            for book in self.books.values():
                for seq, e in enumerate(book.ack_epoch):
                    if e == epoch:
                        ts = book.ts[seq]
                        out.setdefault(book.tp[seq], []).append(
                            (book.offset[seq], make_value(book.name, seq, ts), ts))
        return out

    def counts(self) -> tuple[int, int, int, dict[str, int]]:
        with self.lock:
            return self.sent, self.acked, self.failed, {n: g.distinct for n, g in self.groups.items()}


class Latency:
    """Latency samples per kind (seconds), drained once per sample interval."""

    KINDS = ("produce", "fetch", "lookup", "probe", "host")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.samples: dict[str, list[float]] = {k: [] for k in self.KINDS}

    def record(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.samples[kind].append(seconds)

    def drain(self) -> dict[str, list[float]]:
        with self.lock:
            out, self.samples = self.samples, {k: [] for k in self.KINDS}
        return out


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


# -- workers ------------------------------------------------------------------------------------------------
class Worker(threading.Thread):
    """A load thread: ``body()`` runs until ``stop()``; an exception is kept for the report."""

    def __init__(self, name: str, ctx) -> None:
        super().__init__(name=name, daemon=True)
        self.ctx = ctx
        self.stopping = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.body()
        except BaseException:  # noqa: BLE001 - reported by the harness
            self.error = traceback.format_exc(limit=8)

    def stop(self) -> None:
        self.stopping.set()


class Pacer:
    """A fixed rate that does not burst to catch up after a stall (a restart)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next = time.monotonic()

    def delay(self) -> float:
        now = time.monotonic()
        if self.next < now - 1.0:
            self.next = now
        d = self.next - now
        self.next += self.interval
        return max(0.0, d)


class ProducerBase(Worker):
    """Sends unique values round-robin over every partition of the long-lived topics."""

    def __init__(self, name: str, ctx, rate: float, start: int) -> None:
        super().__init__(name, ctx)
        self.rate = rate
        self.k = start
        self.book = ctx.ledger.book(name)
        self.unflushed = 0

    def next_send(self) -> tuple[str, int, int, int, bytes]:
        self.k += 1
        topic, partition = TPS[self.k % len(TPS)]
        ts = int(time.time() * 1000) - self.ctx.rng.randint(0, JITTER_MS)
        seq = self.ctx.ledger.new_send(self.book, (topic, partition), ts)
        return topic, partition, ts, seq, make_value(self.name, seq, ts)

    def acked(self, seq: int, partition: int, offset: int) -> None:
        self.ctx.ledger.ack(self.book, seq, partition, offset)


class ConfluentProducer(ProducerBase):
    def body(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.ctx.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 300_000, "reconnect.backoff.ms": 100,
                      "reconnect.backoff.max.ms": 1000, "client.id": self.name, "log_level": 0,
                      "error_cb": lambda err: None})
        pacer = Pacer(self.rate)
        while not self.stopping.is_set():
            p.poll(pacer.delay())
            topic, partition, ts, seq, value = self.next_send()

            def done(err, msg, seq=seq):
                if err is None:
                    # librdkafka's own produce()-to-report time: not delayed by this process's other threads
                    self.ctx.latency.record("produce", msg.latency())
                    self.acked(seq, msg.partition(), msg.offset())
                else:
                    self.ctx.ledger.fail(self.book, seq, str(err))

            while True:
                try:
                    p.produce(topic, value=value, partition=partition, timestamp=ts, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.1)
        self.unflushed = p.flush(120)


class KafkaPythonProducer(ProducerBase):
    def body(self) -> None:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=self.ctx.bootstrap, client_id=self.name)  # the defaults
        pacer = Pacer(self.rate)
        while not self.stopping.is_set():
            self.stopping.wait(pacer.delay())
            topic, partition, ts, seq, value = self.next_send()
            try:
                fut = p.send(topic, value=value, partition=partition, timestamp_ms=ts)
            except Exception as exc:  # noqa: BLE001 - e.g. metadata not available while the daemon restarts
                self.ctx.ledger.fail(self.book, seq, repr(exc))
                continue
            fut.add_callback(lambda md, seq=seq: self.acked(seq, md.partition, md.offset))
            fut.add_errback(lambda exc, seq=seq: self.ctx.ledger.fail(self.book, seq, repr(exc)))
        try:
            p.flush(timeout=120)
        finally:
            p.close(timeout=10)


class AioProducer(ProducerBase):
    def body(self) -> None:
        asyncio.run(self.main())

    async def main(self) -> None:
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=self.ctx.bootstrap, client_id=self.name)  # the defaults
        await p.start()
        pacer = Pacer(self.rate)
        try:
            while not self.stopping.is_set():
                await asyncio.sleep(pacer.delay())
                topic, partition, ts, seq, value = self.next_send()
                try:
                    fut = await p.send(topic, value=value, partition=partition, timestamp_ms=ts)
                except Exception as exc:  # noqa: BLE001
                    self.ctx.ledger.fail(self.book, seq, repr(exc))
                    continue

                def done(f, seq=seq):
                    if f.cancelled() or f.exception() is not None:
                        self.ctx.ledger.fail(self.book, seq, repr(None if f.cancelled() else f.exception()))
                    else:
                        md = f.result()
                        self.acked(seq, md.partition, md.offset)

                fut.add_done_callback(done)
            await asyncio.wait_for(p.flush(), 120)
        finally:
            await asyncio.wait_for(p.stop(), 60)


class GroupMember(Worker):
    """A member of the group ``spec``: what it is given goes to the ledger, and is committed
    synchronously (``commit``, one per client) at most every ``COMMIT_EVERY_S`` and once more when
    the member stops."""

    def __init__(self, name: str, ctx, spec: GroupSpec) -> None:
        super().__init__(name, ctx)
        self.spec = spec
        self.gbook = ctx.ledger.groups[spec.name]
        self.pending: dict = {}  # the client's partition key: the next offset to commit
        self.last_commit = time.monotonic()

    def commit(self, c, pending: dict) -> None:
        """Commit ``pending`` through the client ``c`` and clear it; count the outcome."""
        raise NotImplementedError

    def delivered(self, key, ledger_tp: tuple[str, int], offsets: list[int]) -> None:
        self.ctx.ledger.deliver(self.spec.name, ledger_tp, offsets)
        self.pending[key] = offsets[-1] + 1

    def commit_if_due(self, c) -> None:
        if self.pending and time.monotonic() - self.last_commit >= COMMIT_EVERY_S:
            self.commit(c, self.pending)
            self.last_commit = time.monotonic()

    def commit_rest(self, c) -> None:
        if self.pending:
            self.commit(c, self.pending)


class KafkaPythonMember(GroupMember):
    """A kafka-python group member committing synchronously at most every ``COMMIT_EVERY_S``.

    kafka-python 3.0.12 can lose a SyncGroup answer that arrives just after ``poll`` timed
    out (see ``benchmarks/crash_loop.py``) and then keeps an empty assignment forever;
    after ``STUCK_S`` seconds without an assignment while the daemon is up the client is
    recreated (counted in ``client_restarts``). Errors from ``poll`` (the daemon restarting)
    are counted and the loop goes on, as an application would.
    """

    STUCK_S = 30.0

    def make(self):
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        gbook = self.gbook

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                gbook.assignments += 1

        # round robin: the range assignor would leave a third member of two 2-partition topics idle
        c = KafkaConsumer(bootstrap_servers=self.ctx.bootstrap, group_id=self.spec.name, client_id=self.name,
                          enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10_000,
                          request_timeout_ms=15_000, reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000,
                          partition_assignment_strategy=[RoundRobinPartitionAssignor])
        c.subscribe(list(self.spec.topics), listener=Listener())
        return c

    def commit(self, c, pending: dict) -> None:
        from kafka import OffsetAndMetadata

        try:
            c.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in pending.items()})
            self.gbook.commits += 1
        except Exception:  # noqa: BLE001 - rebalance or restart: redelivered to the next owner
            self.gbook.commit_failures += 1
        pending.clear()

    def body(self) -> None:
        c = self.make()
        unassigned_s = 0.0
        self.last_commit = time.monotonic()
        try:
            while not self.stopping.is_set():
                t0 = time.monotonic()
                try:
                    batches = c.poll(timeout_ms=500, max_records=500)
                except Exception:  # noqa: BLE001 - connection refused while the daemon restarts
                    self.gbook.poll_errors += 1
                    self.stopping.wait(0.5)
                    continue
                if not c.assignment():
                    unassigned_s += time.monotonic() - t0 if self.ctx.daemon_up() else 0.0
                    if unassigned_s > self.STUCK_S:
                        c.close(autocommit=False)
                        self.gbook.client_restarts += 1
                        unassigned_s = 0.0
                        self.pending.clear()
                        c = self.make()
                    continue
                unassigned_s = 0.0
                for tp, recs in batches.items():
                    if recs:
                        self.delivered(tp, (tp.topic, tp.partition), [r.offset for r in recs])
                self.commit_if_due(c)
            self.commit_rest(c)
        finally:
            c.close(autocommit=False)


class ConfluentMember(GroupMember):
    """A confluent-kafka group member committing synchronously at most every ``COMMIT_EVERY_S``."""

    def commit(self, c, pending: dict) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()], asynchronous=False)
            self.gbook.commits += 1
        except KafkaException:
            self.gbook.commit_failures += 1
        pending.clear()

    def body(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.ctx.bootstrap, "group.id": self.spec.name, "client.id": self.name,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
                      "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000, "log_level": 0,
                      "error_cb": lambda err: None})

        def on_assign(consumer, partitions):
            self.gbook.assignments += 1

        c.subscribe(list(self.spec.topics), on_assign=on_assign)
        self.last_commit = time.monotonic()
        try:
            while not self.stopping.is_set():
                msgs = c.consume(num_messages=500, timeout=0.5)
                by_tp: dict[tuple[str, int], list[int]] = {}
                for m in msgs:
                    if m.error() is None:
                        by_tp.setdefault((m.topic(), m.partition()), []).append(m.offset())
                    else:
                        self.gbook.poll_errors += 1
                for tp, offsets in by_tp.items():
                    self.delivered(tp, tp, offsets)
                self.commit_if_due(c)
            self.commit_rest(c)
        finally:
            c.close()


class MembershipController(Worker):
    """Keeps each group between its (min, max) members; every ``period_s`` one group gains or
    loses a member (alternating), so rebalances happen all the time."""

    def __init__(self, ctx, period_s: float) -> None:
        super().__init__("membership", ctx)
        self.period_s = period_s
        self.members: dict[str, list[Worker]] = {g.name: [] for g in GROUPS}
        self.serial = 0
        self.lock = threading.Lock()

    def add_member(self, spec: GroupSpec) -> None:
        self.serial += 1
        cls = KafkaPythonMember if spec.client == "kafka-python" else ConfluentMember
        m = cls(f"{spec.name}-m{self.serial}", self.ctx, spec)
        m.start()
        with self.lock:
            self.members[spec.name].append(m)
        self.ctx.ledger.groups[spec.name].joins += 1

    def remove_member(self, spec: GroupSpec) -> None:
        with self.lock:
            m = self.members[spec.name].pop(0)
        m.stop()
        m.join(60)
        self.ctx.ledger.groups[spec.name].leaves += 1
        if m.error:
            self.ctx.problem(f"group member {m.name} failed: {m.error}")

    def start_all(self) -> None:
        for spec in GROUPS:
            for _ in range(spec.members[0]):
                self.add_member(spec)

    def body(self) -> None:
        step = 0
        while not self.stopping.wait(self.period_s):
            spec = GROUPS[step % len(GROUPS)]
            if len(self.members[spec.name]) < spec.members[1]:
                self.add_member(spec)
            else:
                self.remove_member(spec)
            step += 1

    def stop_all(self) -> None:
        with self.lock:
            members = [m for ms in self.members.values() for m in ms]
        for m in members:
            m.stop()
        for m in members:
            m.join(60)
            if m.error:
                self.ctx.problem(f"group member {m.name} failed: {m.error}")

    def errors(self) -> list[str]:
        with self.lock:
            return [f"{m.name}: {m.error}" for ms in self.members.values() for m in ms if m.error]
