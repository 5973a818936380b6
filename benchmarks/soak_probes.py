"""The soak benchmark's probes (used by ``benchmarks/soak.py``).

* :class:`LookupWorker` - offsetsForTimes (ListOffsets by timestamp) at random targets,
  each checked against the :class:`soak_load.Ledger`: the right answer for target T is
  the first offset at or after the log start offset whose timestamp is >= T, or none.
  The log start offset is read just before and just after the lookup (retention may
  move it in between) and the log end offset just before; an answer is checked once
  every offset it depends on has been acknowledged (at most ``VERIFY_WITHIN_S`` later,
  else it counts as unverifiable).
* :class:`Prober` - one raw Kafka connection (the project's own codec) sending ApiVersions
  v0 every 0.2 s (its round trip stands in for event-loop lag: the daemon does not export
  one) and a Fetch v11 with max_wait_ms=0 at a random in-range offset every second.
* :class:`ChurnWorker` - creates a topic (reusing two names), produces to it, reads it
  back, checks a lookup, deletes it and waits until it is gone.
* :func:`read_range` - reads offset ranges of partitions with a group-less consumer.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from dataclasses import dataclass

from soak_load import TPS, Worker

VERIFY_WITHIN_S = 30.0


def read_range(bootstrap: str, ranges: dict, timeout_s: float = 180.0) -> tuple[dict, dict]:
    """{(topic, partition): (start, end)} -> ({(topic, partition): [(offset, value, timestamp)]} for offsets
    in [start, end), {(topic, partition): log start offset read before}); a start below the log start
    offset reads from the log start (records below it were deleted before the read began)."""
    from kafka import KafkaConsumer, TopicPartition

    out = {k: [] for k in ranges}
    want = {TopicPartition(t, p): (s, e) for (t, p), (s, e) in ranges.items() if e > s}
    if not want:
        return out, {}
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      max_partition_fetch_bytes=1 << 20, request_timeout_ms=30_000, client_id="soak-reader")
    try:
        starts = {(tp.topic, tp.partition): o for tp, o in c.beginning_offsets(list(want)).items()}
        c.assign(list(want))
        for tp, (s, _) in want.items():
            c.seek(tp, s)
        done: set = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(want):
            if time.monotonic() > deadline:
                missing = {f"{tp.topic}-{tp.partition}": (c.position(tp), want[tp][1]) for tp in want if tp not in done}
                raise TimeoutError(f"could not read to the wanted offsets within {timeout_s:.0f} s: {missing}")
            for tp, recs in c.poll(timeout_ms=300, max_records=100_000).items():
                end = want[tp][1]
                out[(tp.topic, tp.partition)].extend((r.offset, r.value, r.timestamp) for r in recs if r.offset < end)
            for tp, (_, end) in want.items():
                if tp not in done and c.position(tp) >= end:
                    done.add(tp)
                    c.pause(tp)
    finally:
        c.close()
    return out, starts


@dataclass
class Lookup:
    tpi: int
    target: int
    answer: tuple[int, int] | None     # (offset, timestamp) or None for "no such record"
    lso_before: int
    lso_after: int
    end_before: int
    deadline: float


def judge(ts_at, lk: Lookup) -> str | None:
    """'ok', a description of a wrong answer, or None while acknowledgements are missing."""
    if lk.answer is None:
        span = ts_at[lk.lso_after:lk.end_before]
        if len(span) < max(0, lk.end_before - lk.lso_after) or (-1 in span):
            return None
        if span and max(span) >= lk.target:
            first = next(i for i, t in enumerate(span) if t >= lk.target) + lk.lso_after
            return f"answered none, but offset {first} has timestamp {ts_at[first]} >= {lk.target}"
        return "ok"
    off, ts = lk.answer
    if off < lk.lso_before:
        return f"answered offset {off}, below the log start offset {lk.lso_before}"
    if off >= len(ts_at) or ts_at[off] == -1:
        return None
    if ts_at[off] != ts:
        return f"answered ({off}, {ts}) but offset {off} has timestamp {ts_at[off]}"
    if ts < lk.target:
        return f"answered ({off}, {ts}) whose timestamp is below the target"
    span = ts_at[lk.lso_after:off]
    if -1 in span:
        return None
    if span and max(span) >= lk.target:
        first = next(i for i, t in enumerate(span) if t >= lk.target) + lk.lso_after
        return f"answered ({off}, {ts}) but the earlier offset {first} has timestamp {ts_at[first]}"
    return "ok"


class LookupWorker(Worker):
    def __init__(self, ctx, period_s: float, run_start_ms: int) -> None:
        super().__init__("lookups", ctx)
        self.period_s = period_s
        self.run_start_ms = run_start_ms
        self.rng = random.Random(ctx.rng.random())
        self.pending: list[Lookup] = []
        self.done = 0
        self.correct = 0
        self.wrong: list[str] = []
        self.unverifiable = 0
        self.interrupted = 0
        self.steady_errors: list[str] = []

    def target(self, tpi: int) -> int:
        now = int(time.time() * 1000)
        r = self.rng.random()
        if r < 0.65:
            return self.rng.randint(now - 45_000, now)
        if r < 0.85:
            return self.rng.randint(self.run_start_ms - 10_000, now)
        if r < 0.93:
            return now + self.rng.randint(1, 10_000)
        with self.ctx.ledger.lock:   # exactly the timestamp of an acknowledged record
            ts_at = self.ctx.ledger.ts_at[tpi]
            if len(ts_at):
                t = ts_at[self.rng.randrange(len(ts_at))]
                if t >= 0:
                    return t
        return now

    def verify(self, final: bool = False) -> None:
        keep = []
        for lk in self.pending:
            with self.ctx.ledger.lock:
                ts_at = self.ctx.ledger.ts_at[lk.tpi]
                top = max(lk.end_before, lk.answer[0] + 1 if lk.answer else 0)
                view = ts_at[:top]
            verdict = judge(view, lk)
            if verdict is None:
                if final or time.monotonic() > lk.deadline:
                    self.unverifiable += 1
                else:
                    keep.append(lk)
            elif verdict == "ok":
                self.correct += 1
            else:
                topic, p = TPS[lk.tpi]
                self.wrong.append(f"{topic}-{p} target {lk.target} (log start {lk.lso_before}..{lk.lso_after}, "
                                  f"end {lk.end_before}): {verdict}")
        self.pending = keep

    def body(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        c = None
        try:
            while not self.stopping.wait(self.period_s * self.rng.uniform(0.5, 1.5)):
                self.verify()
                if not self.ctx.daemon_up():
                    continue
                epoch = self.ctx.epoch()
                tpi = self.rng.randrange(len(TPS))
                tp = TopicPartition(*TPS[tpi])
                target = self.target(tpi)
                try:
                    if c is None:
                        c = KafkaConsumer(bootstrap_servers=self.ctx.bootstrap, enable_auto_commit=False,
                                          request_timeout_ms=15_000, client_id="soak-lookups")
                    lso0 = c.beginning_offsets([tp])[tp]
                    end0 = c.end_offsets([tp])[tp]
                    t0 = time.monotonic()
                    ans = c.offsets_for_times({tp: target})[tp]
                    dt = time.monotonic() - t0
                    lso1 = c.beginning_offsets([tp])[tp]
                except Exception as exc:  # noqa: BLE001
                    if self.ctx.epoch() != epoch or not self.ctx.daemon_up():
                        self.interrupted += 1
                    else:
                        self.steady_errors.append(repr(exc)[:200])
                    continue
                if self.ctx.epoch() != epoch:
                    self.interrupted += 1
                    continue
                self.done += 1
                self.ctx.latency.record("lookup", dt)
                self.pending.append(Lookup(tpi, target, None if ans is None else (ans.offset, ans.timestamp),
                                           lso0, lso1, end0, time.monotonic() + VERIFY_WITHIN_S))
        finally:
            if c is not None:
                c.close()


class Prober(Worker):
    """Raw-socket ApiVersions (lag stand-in) and Fetch (read latency) round trips."""

    def __init__(self, ctx) -> None:
        super().__init__("prober", ctx)
        self.rng = random.Random(ctx.rng.random())
        self.fetch_errors: dict[int, int] = {}
        self.cid = 0

    def call(self, s: socket.socket, api_key: int, version: int, request) -> bytes:
        from protocol import encode_request

        self.cid += 1
        s.sendall(encode_request(api_key, version, self.cid, "soak-probe", request))
        size = struct.unpack(">i", self.recv(s, 4))[0]
        frame = self.recv(s, size)
        if struct.unpack_from(">i", frame)[0] != self.cid:
            raise RuntimeError("response correlation id does not match")
        return frame

    @staticmethod
    def recv(s: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def fetch_request(self) -> dict | None:
        tpi = self.rng.randrange(len(TPS))
        span = self.ctx.offsets.get(TPS[tpi])
        if not span or span[1] <= span[0]:
            return None
        topic, p = TPS[tpi]
        low = span[0] + min(500, (span[1] - span[0]) // 2)    # clear of a log start that retention may move
        return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 65536, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [{"partition": p,
                                                            "fetch_offset": self.rng.randrange(low, span[1]),
                                                            "partition_max_bytes": 65536}]}]}

    def body(self) -> None:
        from protocol.api_keys import ApiKey
        from protocol.codec import decode_response

        host, port = self.ctx.bootstrap.rsplit(":", 1)
        s = None
        n = 0
        while not self.stopping.wait(0.2):
            if not self.ctx.daemon_up():
                if s is not None:
                    s.close()
                    s = None
                continue
            epoch = self.ctx.epoch()
            try:
                if s is None:
                    s = socket.create_connection((host, int(port)), timeout=10)
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t0 = time.monotonic()
                self.call(s, ApiKey.API_VERSIONS, 0, {})
                dt = time.monotonic() - t0
                if self.ctx.epoch() == epoch:
                    self.ctx.latency.record("probe", dt)
                n += 1
                req = self.fetch_request() if n % 5 == 0 else None
                if req is not None:
                    t0 = time.monotonic()
                    frame = self.call(s, ApiKey.FETCH, 11, req)
                    dt = time.monotonic() - t0
                    if self.ctx.epoch() == epoch:
                        self.ctx.latency.record("fetch", dt)
                    _, body = decode_response(ApiKey.FETCH, 11, frame, has_size_prefix=False)
                    err = _fetch_error(body)
                    if err:
                        self.fetch_errors[err] = self.fetch_errors.get(err, 0) + 1
            except (OSError, RuntimeError, ConnectionError):
                if s is not None:
                    s.close()
                s = None
        if s is not None:
            s.close()


def _fetch_error(body) -> int:
    """The first non-zero error code of a decoded Fetch response (kafka-python object or dict)."""
    def get(obj, name):
        return obj[name] if isinstance(obj, dict) else getattr(obj, name)

    if get(body, "error_code"):
        return get(body, "error_code")
    for t in get(body, "responses"):
        for p in get(t, "partitions"):
            if get(p, "error_code"):
                return get(p, "error_code")
    return 0


class ChurnWorker(Worker):
    """Topic churn: create (two alternating names, so names are reused after deletion),
    produce ``RECORDS``, read back exactly those from offset 0, check a lookup, delete."""

    NAMES = ("soak-churn-a", "soak-churn-b")
    RECORDS = 200

    def __init__(self, ctx, period_s: float) -> None:
        super().__init__("churn", ctx)
        self.period_s = period_s
        self.rng = random.Random(ctx.rng.random())
        self.completed = 0
        self.interrupted = 0
        self.steady_errors: list[str] = []

    def body(self) -> None:
        cycle = 0
        while not self.stopping.wait(self.period_s):
            if not self.ctx.daemon_up():
                continue
            name = self.NAMES[cycle % len(self.NAMES)]
            cycle += 1
            epoch = self.ctx.epoch()
            try:
                self.one(name)
                self.completed += 1
            except Exception as exc:  # noqa: BLE001
                if self.ctx.epoch() != epoch or not self.ctx.daemon_up():
                    self.interrupted += 1
                else:
                    self.steady_errors.append(f"{name}: {exc!r}"[:300])
                self.drop(name)

    def admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.ctx.bootstrap, client_id="soak-churn", request_timeout_ms=15_000)

    def drop(self, name: str) -> None:
        try:
            a = self.admin()
            try:
                if name in a.list_topics():
                    a.delete_topics([name])
            finally:
                a.close()
        except Exception:  # noqa: BLE001 - the next cycle tries again
            pass

    def one(self, name: str) -> None:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.admin import NewTopic

        a = self.admin()
        try:
            if name in a.list_topics():       # left over by a cycle a restart interrupted
                a.delete_topics([name])
                self.wait_gone(a, name)
            a.create_topics([NewTopic(name, 2, 1, topic_configs={"segment.bytes": "16384", "retention.ms": "-1"})])
            p = KafkaProducer(bootstrap_servers=self.ctx.bootstrap, acks="all", linger_ms=5, client_id="soak-churn")
            try:
                now = int(time.time() * 1000)
                sends = []
                for i in range(self.RECORDS):
                    value = b"churn:%s:%d" % (name.encode(), i)
                    ts = now - self.rng.randint(0, 10_000)
                    sends.append((value, ts, p.send(name, value=value, partition=i % 2, timestamp_ms=ts)))
                p.flush(30)
                expected: dict[int, dict[int, tuple[bytes, int]]] = {0: {}, 1: {}}
                for value, ts, fut in sends:
                    md = fut.get(timeout=30)
                    expected[md.partition][md.offset] = (value, ts)
            finally:
                p.close(timeout=5)
            data, _ = read_range(self.ctx.bootstrap, {(name, q): (0, len(expected[q])) for q in (0, 1)}, timeout_s=60)
            for q in (0, 1):
                got = {o: (v, ts) for o, v, ts in data[(name, q)]}
                if sorted(expected[q]) != list(range(len(expected[q]))):
                    self.ctx.problem(f"churn {name}-{q}: acknowledged offsets are not 0..{len(expected[q]) - 1} in "
                                     f"a freshly created topic: {sorted(expected[q])[:5]}...")
                if got != expected[q]:
                    bad = sorted(o for o in set(got) | set(expected[q]) if got.get(o) != expected[q].get(o))
                    self.ctx.problem(f"churn {name}-{q}: read back differs from what was acknowledged at offsets "
                                     f"{bad[:5]} (read {got.get(bad[0])}, acknowledged {expected[q].get(bad[0])})")
            c = KafkaConsumer(bootstrap_servers=self.ctx.bootstrap, enable_auto_commit=False,
                              request_timeout_ms=15_000, client_id="soak-churn")
            try:
                for q in (0, 1):
                    recs = sorted((o, ts) for o, (_, ts) in expected[q].items())
                    target = self.rng.randint(now - 11_000, now + 1_000)
                    want = next(((o, ts) for o, ts in recs if ts >= target), None)
                    tp = TopicPartition(name, q)
                    ans = c.offsets_for_times({tp: target})[tp]
                    got = None if ans is None else (ans.offset, ans.timestamp)
                    if got != want:
                        self.ctx.problem(f"churn {name}-{q}: offsets_for_times({target}) = {got}, expected {want}")
            finally:
                c.close()
            a.delete_topics([name])
            self.wait_gone(a, name)
        finally:
            a.close()

    def wait_gone(self, admin, name: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while name in admin.list_topics():
            if time.monotonic() > deadline:
                raise RuntimeError(f"deleted topic {name} still listed after {timeout_s:.0f} s")
            time.sleep(0.2)
