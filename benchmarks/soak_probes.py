"""The soak benchmark's probes (used by ``benchmarks/soak.py``).

* :class:`LookupWorker` - offsetsForTimes (ListOffsets by timestamp) at random targets,
  each checked against the :class:`soak_load.Ledger`: the right answer for target T is
  the first offset at or after the log start offset whose timestamp is >= T, or none.
  The log start offset is read just before and just after the lookup (retention may
  move it in between) and the log end offset just before; an answer is checked once
  every offset it depends on has been acknowledged (at most ``VERIFY_WITHIN_S`` later,
  else it counts as unverifiable).
* :class:`Prober` - a child process with one raw Kafka connection (the project's own codec)
  timing ApiVersions, Fetch and ListOffsets round trips (see :func:`probe_main`).
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
    in [start, end), {(topic, partition): log start offset read after the read}); a start below the log
    start offset reads from the log start, so records missing below the second answer were deleted by
    retention, before or during the read."""
    from kafka import KafkaConsumer, TopicPartition

    out = {k: [] for k in ranges}
    want = {TopicPartition(t, p): (s, e) for (t, p), (s, e) in ranges.items() if e > s}
    if not want:
        return out, {}
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      max_partition_fetch_bytes=1 << 20, request_timeout_ms=30_000, client_id="soak-reader")
    try:
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
        starts = {(tp.topic, tp.partition): o for tp, o in c.beginning_offsets(list(want)).items()}
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
                    ans = c.offsets_for_times({tp: target})[tp]
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
                self.pending.append(Lookup(tpi, target, None if ans is None else (ans.offset, ans.timestamp),
                                           lso0, lso1, end0, time.monotonic() + VERIFY_WITHIN_S))
        finally:
            if c is not None:
                c.close()


class RawClient:
    """One blocking Kafka connection speaking the project's own codec."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0

    def call(self, api_key: int, version: int, request) -> tuple[float, object]:
        """(round-trip seconds, decoded response body)."""
        from sundial.protocol import encode_request
        from sundial.protocol.codec import decode_response

        self.cid += 1
        data = encode_request(api_key, version, self.cid, "soak-probe", request)
        t0 = time.monotonic()
        self.s.sendall(data)
        size = struct.unpack(">i", self._recv(4))[0]
        frame = self._recv(size)
        dt = time.monotonic() - t0
        cid, body = decode_response(api_key, version, frame, has_size_prefix=False)
        if cid != self.cid:
            raise ConnectionError(f"correlation id {cid}, expected {self.cid}")
        return dt, body

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the daemon")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.s.close()


def _get(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def _list_offsets(tps, timestamp_of) -> object:
    from sundial.protocol.messages.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

    by_topic: dict[str, list] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(ListOffsetsPartition(p, -1, timestamp_of(t, p), 1))
    return ListOffsetsRequest(-1, 0, tuple(ListOffsetsTopic(t, tuple(ps)) for t, ps in by_topic.items()))


def probe_main(bootstrap: str, tps: list, out, stop) -> None:
    """Body of the probe process (a separate process, so the harness's own threads and GIL do
    not add to what it measures). Every 0.2 s an ApiVersions v0 round trip ("probe": the
    daemon exports no event-loop lag, this stands in for it), a Fetch v11 (max_wait_ms 0,
    64 KiB, random offset in the upper half of a random partition's log) and a ListOffsets
    v1 by timestamp (random target in the last minute); every 5 s the log
    start and end offsets (ListOffsets -2/-1). A thread measures how late a 20 ms sleep wakes
    up ("host": the host's own scheduling delay, for context). Puts a list of (kind, seconds)
    on ``out`` every second, and ("errors", {code: count}) at the end."""
    import threading

    from sundial.protocol.api_keys import ApiKey

    rng = random.Random()
    samples: list = []
    lock = threading.Lock()

    def host_stall() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            time.sleep(0.02)
            with lock:
                samples.append(("host", time.monotonic() - t0 - 0.02))

    threading.Thread(target=host_stall, daemon=True).start()
    errors: dict[int, int] = {}
    spans: dict = {}
    client = None
    n = 0
    last_flush = time.monotonic()
    while not stop.wait(0.2):
        n += 1
        try:
            if client is None:
                client = RawClient(bootstrap)
                n = 0
            dt, _ = client.call(ApiKey.API_VERSIONS, 0, {})
            got = [("probe", dt)]
            if n % 25 == 0 or not spans:
                _, lo = client.call(ApiKey.LIST_OFFSETS, 1, _list_offsets(tps, lambda t, p: -2))
                _, hi = client.call(ApiKey.LIST_OFFSETS, 1, _list_offsets(tps, lambda t, p: -1))
                for a, b in zip(_partitions(lo), _partitions(hi)):
                    spans[a[0]] = (a[1], b[1])
            tp = rng.choice(tps)
            lso, leo = spans.get(tp, (0, 0))
            if leo > lso:
                offset = rng.randrange(lso + (leo - lso) // 2, leo)
                dt, body = client.call(ApiKey.FETCH, 11, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 65536, "isolation_level": 0,
                    "topics": [{"topic": tp[0], "partitions": [{"partition": tp[1], "fetch_offset": offset,
                                                                "partition_max_bytes": 65536}]}]})
                got.append(("fetch", dt))
                err = _get(body, "error_code") or next(
                    (_get(p, "error_code") for t in _get(body, "responses") for p in _get(t, "partitions")
                     if _get(p, "error_code")), 0)
                if err:
                    errors[err] = errors.get(err, 0) + 1
            tp = rng.choice(tps)
            target = int(time.time() * 1000) - rng.randint(0, 60_000)
            dt, _ = client.call(ApiKey.LIST_OFFSETS, 1, _list_offsets([tp], lambda t, p: target))
            got.append(("lookup", dt))
            with lock:
                samples.extend(got)
        except (OSError, ConnectionError, struct.error):
            if client is not None:
                client.close()
            client = None
        if time.monotonic() - last_flush >= 1.0:
            with lock:
                batch, samples[:] = list(samples), []
            out.put(batch)
            last_flush = time.monotonic()
    out.put(("errors", errors))


def _partitions(body):
    """[((topic, partition), offset)] of a decoded ListOffsets v1 response."""
    return [((_get(t, "name"), _get(p, "partition_index")), _get(p, "offset"))
            for t in _get(body, "topics") for p in _get(t, "partitions")]


class Prober(Worker):
    """Runs :func:`probe_main` in a child process and moves its samples into ``ctx.latency``."""

    def __init__(self, ctx) -> None:
        super().__init__("prober", ctx)
        self.fetch_errors: dict[int, int] = {}

    def body(self) -> None:
        import multiprocessing
        import queue

        mp = multiprocessing.get_context("spawn")
        out, stop = mp.Queue(), mp.Event()
        proc = mp.Process(target=probe_main, args=(self.ctx.bootstrap, list(TPS), out, stop), daemon=True,
                          name="soak-probe")
        proc.start()
        try:
            while True:
                if self.stopping.is_set():
                    stop.set()
                try:
                    item = out.get(timeout=0.5)
                except queue.Empty:
                    if not proc.is_alive():
                        raise RuntimeError(f"the probe process exited with {proc.exitcode}")
                    continue
                if isinstance(item, tuple) and item[0] == "errors":
                    self.fetch_errors = item[1]
                    break
                for kind, seconds in item:
                    self.ctx.latency.record(kind, seconds)
        finally:
            stop.set()
            proc.join(10)
            if proc.is_alive():
                proc.kill()


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
