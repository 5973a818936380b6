"""The load of the crash loop (``benchmarks/crash_loop.py``): two idempotent producers and a group consumer.

Each worker runs until ``pause()``, then settles (producers flush) and waits for
``resume()``; the :class:`Ledger` records what the daemon acknowledged (partition,
offset, timestamp per value) and the last commit, for the loop's checks.
"""

from __future__ import annotations

import random
import threading
import time

TOPIC = "crash"
GROUP = "crash-g"
PARTITIONS = 2

class Load(threading.Thread):
    """A worker that runs until ``pause()``, then settles (flush) and waits for ``resume()``."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.run_flag = threading.Event()
        self.settled = threading.Event()
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def pause(self) -> None:
        self.settled.clear()
        self.run_flag.clear()

    def resume(self) -> None:
        self.settled.clear()
        self.run_flag.set()

    def wait_settled(self, timeout: float) -> bool:
        return self.settled.wait(timeout)

    def run(self) -> None:
        try:
            self.setup()
            while not self.stop_flag.is_set():
                if not self.run_flag.is_set():
                    self.settle()
                    self.settled.set()
                    # A resume() and the next pause() can both fall inside one nap: pause()
                    # cleared `settled` again, so settle again rather than wait for a run
                    # that already ended (the harness would wait for `settled` forever).
                    while (not self.run_flag.is_set() and not self.stop_flag.is_set()
                           and self.settled.is_set()):
                        time.sleep(0.01)
                    continue
                self.step()
        except BaseException as exc:  # noqa: BLE001 - reported by the harness
            self.error = exc
            self.settled.set()
        finally:
            self.teardown()


class Ledger:
    """What the clients were told: acknowledged records and commits (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[bytes, tuple[int, int, int]] = {}  # value -> (partition, offset, timestamp)
        self.failed: dict[bytes, str] = {}
        self.sent = 0
        self.commit_acked: dict[int, int] = {}
        self.commit_maybe: dict[int, set[int]] = {}

    def ack(self, value: bytes, partition: int, offset: int, ts: int) -> None:
        with self.lock:
            if value in self.acked and self.acked[value] != (partition, offset, ts):
                raise AssertionError(f"{value!r} acknowledged twice: {self.acked[value]} and {(partition, offset)}")
            self.acked[value] = (partition, offset, ts)

    def fail(self, value: bytes, why: str) -> None:
        with self.lock:
            self.failed[value] = why


class ProducerLoad(Load):
    """A producer of ``TOPIC`` at ``rate`` records a second whose acknowledgements go to the ledger.
    Record n is ``PREFIX:n``, keyed ``k<n % 13>``, on partition n % PARTITIONS, with a CreateTime up to
    two minutes in the past."""

    PREFIX = ""

    def __init__(self, bootstrap: str, ledger: Ledger, rng: random.Random, rate: float) -> None:
        super().__init__(f"{self.PREFIX}-producer")
        self.bootstrap, self.ledger, self.rng, self.rate = bootstrap, ledger, rng, rate
        self.seq = 0

    def next_record(self) -> tuple[bytes, bytes, int, int]:
        """(value, key, partition, timestamp ms) of the next record."""
        self.seq += 1
        ts = int(time.time() * 1000) - self.rng.randint(0, 120_000)
        return b"%s:%d" % (self.PREFIX.encode(), self.seq), b"k%d" % (self.seq % 13), self.seq % PARTITIONS, ts


class ConfluentProducer(ProducerLoad):
    PREFIX = "ck"

    def setup(self) -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "message.timeout.ms": 300000, "reconnect.backoff.ms": 50,
                           "reconnect.backoff.max.ms": 500, "log_level": 0})

    def step(self) -> None:
        value, key, part, ts = self.next_record()

        def done(err, msg, value=value, ts=ts):
            if err is None:
                self.ledger.ack(value, msg.partition(), msg.offset(), ts)
            else:
                self.ledger.fail(value, str(err))

        while True:
            try:
                self.p.produce(TOPIC, value=value, key=key, partition=part, timestamp=ts, on_delivery=done)
                break
            except BufferError:  # librdkafka's queue is full: wait for deliveries, unless paused
                if not self.run_flag.is_set():
                    return       # not sent; settle() then reports what stays undelivered
                self.p.poll(0.05)
        self.ledger.sent += 1
        self.p.poll(0)
        time.sleep(1 / self.rate)

    def settle(self) -> None:
        left = self.p.flush(180)
        if left:
            raise AssertionError(f"confluent-kafka could not deliver {left} records within 180 s")

    def teardown(self) -> None:
        p = getattr(self, "p", None)
        if p is not None:
            p.flush(30)


class KafkaPythonProducer(ProducerLoad):
    PREFIX = "kp"

    def setup(self) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                               linger_ms=5, delivery_timeout_ms=300000, request_timeout_ms=10000,
                               reconnect_backoff_ms=50, reconnect_backoff_max_ms=500, retry_backoff_ms=100)

    def step(self) -> None:
        value, key, part, ts = self.next_record()
        fut = self.p.send(TOPIC, value=value, key=key, partition=part, timestamp_ms=ts)
        fut.add_callback(lambda md, value=value, ts=ts: self.ledger.ack(value, md.partition, md.offset, ts))
        fut.add_errback(lambda exc, value=value: self.ledger.fail(value, repr(exc)))
        self.ledger.sent += 1
        time.sleep(1 / self.rate)

    def settle(self) -> None:
        self.p.flush(timeout=180)

    def teardown(self) -> None:
        p = getattr(self, "p", None)
        if p is not None:
            p.close(timeout=10)


class GroupConsumer(Load):
    """kafka-python group member committing after every poll.

    kafka-python 3.0.12 can lose a SyncGroup answer that arrives just after ``poll``
    timed out in ``ensure_active_group``: the broker has the member Stable with its
    partitions, the client keeps an empty assignment forever. When the client has had
    no assignment for ``STUCK_S`` seconds of load, it is closed and recreated (counted in
    ``client_restarts``; the broker's view is printed by the harness).
    """

    STUCK_S = 8.0
    #: Seconds of load (time spent polling while the load runs) without an acknowledged commit
    #: after which the harness reports the consumer stuck: a generous bound, in load time
    #: rather than cycles, so a busy host's slow rejoins after a restart do not trip it.
    NO_COMMIT_LOAD_S = 90.0

    def __init__(self, bootstrap: str, ledger: Ledger) -> None:
        super().__init__("consumer")
        self.bootstrap, self.ledger = bootstrap, ledger
        self.consumed = 0
        self.commits = 0
        self.client_restarts = 0
        self.unassigned_s = 0.0
        self.load_s = 0.0  # time spent in step()
        self.load_s_at_commit = 0.0

    def setup(self) -> None:
        from kafka import KafkaConsumer

        self.c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=GROUP, enable_auto_commit=False,
                               auto_offset_reset="earliest", session_timeout_ms=10000, request_timeout_ms=15000,
                               reconnect_backoff_ms=50, reconnect_backoff_max_ms=500)
        self.c.subscribe([TOPIC])

    def _recreate(self) -> None:
        """A new client; the daemon may be down at this moment (killed by the loop), in which
        case kafka-python's constructor refuses to connect and the next step tries again."""
        from kafka.errors import KafkaConnectionError, NoBrokersAvailable

        self.c = None
        try:
            self.setup()
        except (KafkaConnectionError, NoBrokersAvailable):
            time.sleep(0.1)

    def step(self) -> None:
        from kafka import OffsetAndMetadata

        if self.c is None:
            self._recreate()
            return
        t0 = time.monotonic()
        batches = self.c.poll(timeout_ms=500)
        self.load_s += time.monotonic() - t0
        if not self.c.assignment():
            self.unassigned_s += time.monotonic() - t0
            if self.unassigned_s > self.STUCK_S:
                self.teardown()
                self.client_restarts += 1
                self.unassigned_s = 0.0
                self._recreate()
            return
        self.unassigned_s = 0.0
        if not batches:
            return
        attempt = {tp: recs[-1].offset + 1 for tp, recs in batches.items()}
        self.consumed += sum(len(r) for r in batches.values())
        with self.ledger.lock:
            for tp, off in attempt.items():
                self.ledger.commit_maybe.setdefault(tp.partition, set()).add(off)
        try:
            self.c.commit({tp: OffsetAndMetadata(off, "", -1) for tp, off in attempt.items()})
        except Exception:  # noqa: BLE001 - a commit cut by the kill may or may not have landed
            return
        self.commits += 1
        self.load_s_at_commit = self.load_s
        with self.ledger.lock:
            for tp, off in attempt.items():
                self.ledger.commit_acked[tp.partition] = off
                self.ledger.commit_maybe[tp.partition] = set()

    def settle(self) -> None:
        pass

    def teardown(self) -> None:
        c = getattr(self, "c", None)
        if c is not None:
            try:
                c.close(autocommit=False)
            except Exception:  # noqa: BLE001
                pass
