"""Consumer-group benchmark: a membership change under load, classic vs consumer protocol,
Sundial side by side with franz-go's kfake; and the OffsetCommit rate.

    python benchmarks/group_bench.py --kfake PATH                 # 2, 10, 50 members; 3 repetitions (50: 1)
    python benchmarks/group_bench.py --kfake PATH --members 2,10 --reps 5
    python benchmarks/group_bench.py                               # Sundial alone
    python benchmarks/group_bench.py --kfake PATH --part heartbeat # ConsumerGroupHeartbeat latency
    python benchmarks/group_bench.py --part commits                # OffsetCommit rate (Sundial alone)

Membership change (``--part membership``, the default). Every run starts a fresh broker
(Sundial; kfake too when ``--kfake PATH`` is given) and creates one topic of ``--partitions``
(100) partitions; an open-loop producer (a process of its own) sends ``--rate`` records/s
(100 B, acks=1, linger 5 ms) spread evenly over the partitions: record i is due at
start + i/rate on partition i mod partitions, whatever the broker answers. N confluent-kafka
consumers (``--members-per-process`` of them per process, one thread each, auto commit,
``auto.offset.reset=latest``) form a group and consume; then, each after ``--baseline-ms``
of stable consumption plus a random part of one heartbeat interval (the members heartbeat in
step, having got their assignments together, so a fixed delay would always meet them at the
same point of their interval):

* ``join``: one more consumer joins the stable group of N;
* ``leave``: one of the first N closes (LeaveGroup, or a heartbeat with epoch -1).

For each change, from the moment the joiner subscribes or the leaver starts ``close()``:

* ``assigned_ms``: until every member holds its final assignment (the last assign or revoke
  callback of any member; final = the group covers every partition exactly once, every member
  has one, and no callback for ``--settle-ms``);
* ``consuming_ms``: until every member has also consumed a record from each of its final
  partitions after its last callback;
* ``unmoved_kept_pct``: records consumed from the partitions that kept their owner, during
  ``consuming_ms``, as a share of the records the producer sent to those partitions then;
* ``unmoved_unowned_ms``: the longest time one of those partitions was revoked from its
  owner before being handed back (eager range revokes everything; cooperative-sticky and
  the consumer protocol revoke only what moves: 0);
* ``unmoved_pause_ms``: the longest gap between two records consumed from one unmoved
  partition, from the last one before the change to ``consuming_ms`` (a partition receives a
  record every partitions/rate s, 100 ms at the defaults, so about 150-200 ms is the floor);
* ``cpu_pct``: the broker's CPU (utime + stime from /proc/PID/stat, all threads) during
  ``consuming_ms``, in % of one core.

The per-run lines also give ``rebalance_ms`` (first to last callback), the unmoved records
consumed and sent, and ``moved`` (partitions whose owner changed). And per run, ``form``:
N consumers started at once until the group is stable (group.initial.rebalance.delay.ms=0 on
Sundial: kfake has no such delay), and ``steady``: the broker's CPU over ``--baseline-ms``
of stable consumption before the join, in % of a core and in microseconds per record
produced (each is produced once and fetched once).

Protocols (``--protocols``): ``range`` = classic, eager range assignor; ``coop`` = classic,
cooperative-sticky; ``consumer`` = group.protocol=consumer (KIP-848), the broker's default
server-side assignor (uniform) unless ``--remote-assignor``. The heartbeat interval is the
same everywhere (``--heartbeat-ms``, 500): heartbeat.interval.ms of the classic clients,
group.consumer.heartbeat.interval.ms of both brokers (Sundial's min lowered to it); the
session timeout too (``--session-ms``, 45000, both protocols' default).

Interleaving: for each N, for each repetition, for each protocol (order rotated per
repetition), Sundial and kfake back to back (Sundial first in odd repetitions). The table
gives per broker the median and [min-max] over the repetitions, sundial/kfake (the ratio of
the medians) and that ratio per repetition. ``--trace`` writes every change's callbacks per
member next to the broker logs. A run that fails (a group that does not settle within
``--timeout-s``) is printed and left out; the others go on.

ConsumerGroupHeartbeat latency (``--part heartbeat``; Sundial and kfake interleaved,
``--reps`` repetitions): ``--hb-members`` raw consumer-protocol members (v1, client-made
member ids) join a 100-partition topic's group one every ``--hb-join-gap-ms`` and heartbeat
every 100 ms with no data traffic, reporting at once what they were given; each answer is
timed on the client and classed ``join`` (epoch 0), ``changed`` (epoch or assignment
changed) or ``steady``.

OffsetCommit rate (``--part commits``; raw protocol client on asyncio, OffsetCommit v8 of a
simple group, each answered only after the commit record is fsynced):

* ``commit_1conn``: one connection, one request in flight: commits/s and p50/p99 latency.
* ``commit_<N>conn``: N connections in parallel (fsyncs are shared by the group-commit
  flusher): commits/s.
* ``commit_100p``: one connection, 100 partitions per request: partitions/s.
* ``coordinator_only``: the coordinator in-process over an in-memory log (no network,
  no fsync): commits/s of the Python code path alone.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import multiprocessing
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, Producer  # noqa: E402

from sundial.protocol.api_keys import ApiKey  # noqa: E402
from sundial.protocol.codec import decode_response, encode_request  # noqa: E402

from bench_daemon import cpu_seconds, free_port, start_sundial, stop  # noqa: E402
from bench_peer import Metric, Results, create_topic, in_turn, print_load, print_table  # noqa: E402

PROTOCOLS = ("range", "coop", "consumer")
_SIZE = struct.Struct(">i")  # a frame's size prefix


# --- settings -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    partitions: int
    rate: int
    heartbeat_ms: int
    session_ms: int
    settle_s: float
    baseline_s: float
    timeout_s: float
    members_per_process: int
    remote_assignor: str | None
    kfake: str | None
    log_dir: str
    trace: bool = False
    data_root: str | None = None

    def consumer_config(self, bootstrap: str, group: str, protocol: str, name: str) -> dict:
        conf = {
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "auto.offset.reset": "latest", "fetch.wait.max.ms": 100,
            "log_level": 3,  # errors only: the members are killed at the end of a run
        }
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
            if self.remote_assignor:
                conf["group.remote.assignor"] = self.remote_assignor
        else:
            conf.update({"group.protocol": "classic", "session.timeout.ms": self.session_ms,
                         "heartbeat.interval.ms": self.heartbeat_ms,
                         "partition.assignment.strategy": "range" if protocol == "range" else "cooperative-sticky"})
        return conf

    def sundial_overrides(self) -> dict:
        return {
            "group.initial.rebalance.delay.ms": 0,
            "group.consumer.heartbeat.interval.ms": self.heartbeat_ms,
            "group.consumer.min.heartbeat.interval.ms": min(self.heartbeat_ms, 5000),
            "group.consumer.max.heartbeat.interval.ms": max(self.heartbeat_ms, 15000),
            "group.consumer.session.timeout.ms": self.session_ms,
            "group.consumer.min.session.timeout.ms": min(self.session_ms, 45000),
            "group.consumer.max.session.timeout.ms": max(self.session_ms, 60000),
            "group.min.session.timeout.ms": min(self.session_ms, 6000),
        }

    def kfake_configs(self) -> dict:
        return {"group.consumer.heartbeat.interval.ms": self.heartbeat_ms,
                "group.consumer.session.timeout.ms": self.session_ms}


# --- brokers --------------------------------------------------------------------------------------

def start_kfake(path: str, configs: dict, log_path: str, timeout_s: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Start kfake (franz-go's in-memory fake cluster, one broker) on a free loopback port."""
    port = free_port()
    cmd = [path, "-port", str(port), "-log-level", "warn"]
    for key, value in configs.items():
        cmd += ["-c", f"{key}={value}"]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"kfake exited with {proc.returncode}; see {log_path}") from None
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"kfake did not start within {timeout_s:.0f} s")


def start_broker(s: Settings, broker: str, log_name: str) -> tuple[subprocess.Popen, str, str]:
    """Start ``broker`` ("sundial" or "kfake") for one run, on a new data directory under ``s.data_root``
    and with its log ``log_name`` in ``s.log_dir``: (process, bootstrap, the data directory to remove)."""
    data_dir = tempfile.mkdtemp(prefix="sundial-group-bench-", dir=s.data_root)
    log_path = os.path.join(s.log_dir, log_name)
    if broker == "sundial":
        proc, bootstrap = start_sundial(data_dir, s.sundial_overrides(), log_path=log_path)
    else:
        proc, bootstrap = start_kfake(s.kfake, s.kfake_configs(), log_path)
    return proc, bootstrap, data_dir


class CpuSampler(threading.Thread):
    """The broker's CPU seconds every 50 ms, so that any window's CPU can be read afterwards."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True, name="cpu-sampler")
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            cpu = cpu_seconds(self.pid)
            if cpu is not None:
                self.samples.append((time.monotonic(), cpu))
            self.stop_flag.wait(0.05)

    def at(self, t: float) -> float | None:
        """CPU seconds at ``t``, interpolated between the samples around it."""
        samples = self.samples
        i = bisect.bisect_left(samples, (t, -1.0))
        if i == 0 or i == len(samples):
            return None
        (t0, c0), (t1, c1) = samples[i - 1], samples[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

    def between(self, a: float, b: float) -> float | None:
        ca, cb = self.at(a), self.at(b)
        return cb - ca if ca is not None and cb is not None else None


# --- the members' processes -----------------------------------------------------------------------

class _MemberThread(threading.Thread):
    """One consumer polling in its own thread; sends its callbacks and what it consumed to the
    orchestrator (times from time.monotonic(), the same clock in every process)."""

    def __init__(self, cid: int, conf: dict, topic: str, events) -> None:
        super().__init__(daemon=True, name=f"member-{cid}")
        self.cid, self.conf, self.topic, self.events = cid, conf, topic, events
        self.stop_flag = threading.Event()

    def _callback(self, kind: str):
        def on_event(consumer, partitions) -> None:
            self.events.put((kind, self.cid, time.monotonic(), tuple(p.partition for p in partitions)))
        return on_event

    def run(self) -> None:
        try:
            consumer = Consumer(self.conf)
            self.events.put(("subscribing", self.cid, time.monotonic(), ()))
            consumer.subscribe([self.topic], on_assign=self._callback("assign"),
                               on_revoke=self._callback("revoke"), on_lost=self._callback("lost"))
            pending: list[tuple[float, tuple]] = []
            flushed = time.monotonic()
            while not self.stop_flag.is_set():
                msgs = consumer.consume(1000, 0.05)
                now = time.monotonic()
                if msgs:
                    counts: dict[int, int] = {}
                    for m in msgs:
                        if m.error():
                            self.events.put(("error", self.cid, now, str(m.error())))
                            continue
                        counts[m.partition()] = counts.get(m.partition(), 0) + 1
                    if counts:
                        pending.append((now, tuple(counts.items())))
                if pending and now - flushed >= 0.05:
                    self.events.put(("consumed", self.cid, now, tuple(pending)))
                    pending, flushed = [], now
            if pending:
                self.events.put(("consumed", self.cid, time.monotonic(), tuple(pending)))
            self.events.put(("closing", self.cid, time.monotonic(), ()))
            consumer.close()
            self.events.put(("closed", self.cid, time.monotonic(), ()))
        except Exception as exc:  # noqa: BLE001 - reported to the orchestrator, which fails the run
            self.events.put(("error", self.cid, time.monotonic(), f"{type(exc).__name__}: {exc}"))


def member_process(worker: int, commands, events) -> None:
    """Entry point of a members' process: ("start", cid, conf, topic), ("close", cid), ("exit",)."""
    members: dict[int, _MemberThread] = {}
    events.put(("ready", -1, time.monotonic(), worker))
    while True:
        cmd = commands.get()
        if cmd[0] == "start":
            _, cid, conf, topic = cmd
            members[cid] = _MemberThread(cid, conf, topic, events)
            members[cid].start()
        elif cmd[0] == "close":
            members[cmd[1]].stop_flag.set()
        else:
            return


def producer_process(bootstrap: str, topic: str, partitions: int, rate: int, stop_evt, events) -> None:
    """Open loop: record i is due at start + i/rate on partition i mod partitions; never waits
    for the broker (BufferError: counted as refused, the schedule goes on)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "log_level": 3})
    value = b"x" * 100
    delivered, failed, refused = [0], [0], 0

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered[0] += 1
        else:
            failed[0] += 1

    start = time.monotonic() + 0.05
    events.put(("producer_start", -1, start, ()))
    i, max_late = 0, 0.0
    while not stop_evt.is_set():
        now = time.monotonic()
        due = int((now - start) * rate) + 1 if now >= start else 0
        if due > i:
            max_late = max(max_late, now - (start + i / rate))
        while i < due:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
            except BufferError:
                refused += 1
            i += 1
        producer.poll(0)
        time.sleep(max(0.001, start + i / rate - time.monotonic()))
    producer.flush(15)
    events.put(("producer_done", -1, time.monotonic(),
                {"sent": i, "delivered": delivered[0], "failed": failed[0], "refused": refused,
                 "max_late_ms": max_late * 1000}))


# --- the orchestrator's view of the group ---------------------------------------------------------

@dataclass
class MemberView:
    """One member as the orchestrator sees it (times from time.monotonic())."""

    assigned: set[int] = field(default_factory=set)
    callbacks: list[tuple[float, str, tuple]] = field(default_factory=list)  # (time, kind, partitions)
    consumed: dict[int, list[tuple[float, int]]] = field(default_factory=dict)  # partition -> [(t, n)]
    subscribed_at: float | None = None
    closing_at: float | None = None

    @property
    def changes(self) -> list[float]:
        """Times of its assign, revoke and lost callbacks."""
        return [t for t, _, _ in self.callbacks]


class GroupView:
    """What the members report, drained from their queue by a thread of its own."""

    def __init__(self, events) -> None:
        self.events = events
        self.lock = threading.Lock()
        self.members: dict[int, MemberView] = {}
        self.errors: list[str] = []
        self.ready: set[int] = set()
        self.producer_start: float | None = None
        self.producer_done: dict | None = None
        self.thread = threading.Thread(target=self._drain, daemon=True, name="group-view")
        self.thread.start()

    def _drain(self) -> None:
        while True:
            ev = self.events.get()
            if ev is None:
                return
            kind, cid, t, data = ev
            with self.lock:
                if kind == "ready":
                    self.ready.add(data)
                    continue
                if kind == "producer_start":
                    self.producer_start = t
                    continue
                if kind == "producer_done":
                    self.producer_done = data
                    continue
                m = self.members.setdefault(cid, MemberView())
                if kind in ("assign", "revoke", "lost"):
                    if kind == "assign":
                        m.assigned |= set(data)
                    else:
                        m.assigned -= set(data)
                    m.callbacks.append((t, kind, data))
                elif kind == "consumed":
                    for when, counts in data:
                        for p, n in counts:
                            m.consumed.setdefault(p, []).append((when, n))
                elif kind == "subscribing":
                    m.subscribed_at = t
                elif kind == "closing":
                    m.closing_at = t
                elif kind == "error":
                    self.errors.append(f"member {cid}: {data}")

    def close(self) -> None:
        self.events.put(None)
        self.thread.join(10)

    def wait(self, condition, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if condition():
                    return True
            time.sleep(0.02)
        return False

    def complete(self, cids: list[int], partitions: int) -> bool:
        """Every member has a partition and together they hold each exactly once (call locked)."""
        sets = [self.members.get(c, MemberView()).assigned for c in cids]
        return all(sets) and sum(map(len, sets)) == partitions and len(set().union(*sets)) == partitions

    def wait_stable(self, cids: list[int], partitions: int, since: float, settle_s: float,
                    timeout_s: float) -> bool:
        """Wait until the assignment is complete and no member's callback ran for ``settle_s``."""
        def stable() -> bool:
            last = max([since] + [t for c in cids for t in self.members.get(c, MemberView()).changes[-1:]])
            return self.complete(cids, partitions) and time.monotonic() - last >= settle_s
        return self.wait(stable, timeout_s)

    def consuming(self, cids: list[int]) -> bool:
        """Each member consumed from each of its partitions since its last callback (call locked)."""
        for c in cids:
            m = self.members[c]
            last = m.changes[-1] if m.changes else 0.0
            for p in m.assigned:
                times = m.consumed.get(p)
                if not times or times[-1][0] < last:
                    return False
        return True

    def snapshot(self) -> dict[int, set[int]]:
        with self.lock:
            return {c: set(m.assigned) for c, m in self.members.items()}

    def describe(self, cids: list[int]) -> str:
        with self.lock:
            return ", ".join(f"m{c}:{len(self.members.get(c, MemberView()).assigned)}" for c in cids)


def first_consumed(m: MemberView, p: int, after: float) -> float | None:
    times = m.consumed.get(p, [])
    i = bisect.bisect_left(times, (after, -1))
    return times[i][0] if i < len(times) else None


def unowned_s(m: MemberView, p: int, t0: float, end: float) -> float:
    """How long in [t0, end] partition ``p`` was revoked from ``m`` (which owned it before and after)."""
    total, revoked_at = 0.0, None
    for t, kind, parts in m.callbacks:
        if t < t0 or p not in parts:
            continue
        if kind == "assign" and revoked_at is not None:
            total += t - revoked_at
            revoked_at = None
        elif kind != "assign" and revoked_at is None:
            revoked_at = t
    return total + (end - revoked_at if revoked_at is not None else 0.0)


def produced_to(partitions: set[int], a: float, b: float, start: float, rate: int, total: int) -> int:
    """Records the schedule put on ``partitions`` with due times in [a, b)."""
    lo = max(0, int((a - start) * rate + 0.999999))
    hi = max(lo, int((b - start) * rate + 0.999999))
    return sum(1 for i in range(lo, hi) if i % total in partitions)


def change_metrics(view: GroupView, before: dict[int, set[int]], cids: list[int], t0: float,
                   cpu: CpuSampler, s: Settings) -> dict:
    """The figures of one membership change that began at ``t0`` (see the module docstring)."""
    with view.lock:
        members = {c: view.members[c] for c in cids}
        last_change = {c: max([t0] + [t for t in m.changes if t >= t0]) for c, m in members.items()}
        assigned_at = max(last_change.values())
        firsts, missing = [], 0
        for c, m in members.items():
            for p in m.assigned:
                t = first_consumed(m, p, max(t0, last_change[c]))
                if t is None:
                    missing += 1
                else:
                    firsts.append(t)
        consuming_at = max(firsts) if firsts and not missing else None
        unmoved = [(c, p) for c, m in members.items() for p in before.get(c, ()) if p in m.assigned]
        end = consuming_at or assigned_at
        # the rebalance proper: from the first callback any member got after t0 to the last one
        first_cb = min([t for m in members.values() for t in m.changes if t >= t0], default=assigned_at)
        got = sent = None
        if unmoved and view.producer_start is not None:
            got = sum(n for c, p in unmoved for t, n in members[c].consumed.get(p, []) if t0 <= t <= end)
            sent = produced_to({p for _, p in unmoved}, t0, end, view.producer_start, s.rate, s.partitions)
        unowned = max((unowned_s(members[c], p, t0, end) for c, p in unmoved), default=None)
        pause = 0.0
        for c, p in unmoved:
            times = [t for t, _ in members[c].consumed.get(p, [])]
            i = bisect.bisect_left(times, t0)
            marks = ([times[i - 1]] if i else [t0]) + [t for t in times[i:] if t <= end] + [end]
            pause = max(pause, max(b - a for a, b in zip(marks, marks[1:])))
    busy = cpu.between(t0, end)
    return {
        "assigned_ms": (assigned_at - t0) * 1000,
        "consuming_ms": (consuming_at - t0) * 1000 if consuming_at else None,
        "not_consuming": missing,
        "moved": s.partitions - len(unmoved),
        "rebalance_ms": (assigned_at - first_cb) * 1000,
        "unmoved_got": got,
        "unmoved_sent": sent,
        "unmoved_kept_pct": 100.0 * got / sent if sent and sent >= 5 else None,
        "unmoved_pause_ms": pause * 1000 if unmoved else None,
        "unmoved_unowned_ms": unowned * 1000 if unowned is not None else None,
        "cpu_pct": 100 * busy / (end - t0) if busy is not None and end > t0 else None,
    }


def write_trace(view: GroupView, before: dict[int, set[int]], cids: list[int], t0: float, path: str) -> None:
    """Each member's callbacks after ``t0`` and, per member, when its unmoved partitions last
    delivered before the change and first after (ms from t0): to read what a figure hides."""
    with view.lock, open(path, "w") as fh:
        for c in cids:
            m = view.members[c]
            cbs = " ".join(f"{kind}({len(parts)})@{(t - t0) * 1000:.0f}" for t, kind, parts in m.callbacks if t >= t0)
            kept = [p for p in before.get(c, ()) if p in m.assigned]
            lasts = [max((t for t, _ in m.consumed.get(p, []) if t < t0), default=None) for p in kept]
            nexts = [first_consumed(m, p, t0) for p in kept]
            last = max((x for x in lasts if x is not None), default=None)
            nxt = max((x for x in nexts if x is not None), default=None)
            fmt = (lambda x: f"{(x - t0) * 1000:.0f}" if x is not None else "-")
            fh.write(f"m{c}: held {len(before.get(c, ()))} now {len(m.assigned)} kept {len(kept)}; {cbs or '-'}; "
                     f"unmoved: latest last-before {fmt(last)} latest first-after {fmt(nxt)}\n")


# --- one run --------------------------------------------------------------------------------------

class RunFailed(Exception):
    pass


def run_once(broker: str, protocol: str, n: int, tag: str, s: Settings, ctx, rng: random.Random) -> dict[str, dict]:
    """Fresh broker, topic, producer and N members; form, steady, join, leave. Returns the
    figures per phase ({"form": {...}, "steady": {...}, "join": {...}, "leave": {...}}); a phase
    that failed is missing (and the failure printed)."""
    proc, bootstrap, data_dir = start_broker(s, broker, f"{tag}-{broker}.log")
    cpu = CpuSampler(proc.pid)
    cpu.start()
    events = ctx.Queue()
    view = GroupView(events)
    workers: list = []
    producer = None
    stop_producer = ctx.Event()
    out: dict[str, dict] = {}
    try:
        topic, group = "group-bench", f"gb-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, s.partitions)
        producer = ctx.Process(target=producer_process, daemon=True,
                               args=(bootstrap, topic, s.partitions, s.rate, stop_producer, events))
        producer.start()
        n_workers = -(-(n + 1) // s.members_per_process)
        for w in range(n_workers):
            commands = ctx.Queue()
            p = ctx.Process(target=member_process, args=(w, commands, events), daemon=True)
            p.start()
            workers.append((p, commands))
        if not view.wait(lambda: len(view.ready) == n_workers and view.producer_start is not None, 60):
            raise RunFailed("member processes or producer did not start")

        def start_member(cid: int) -> None:
            workers[cid % n_workers][1].put(("start", cid, s.consumer_config(bootstrap, group, protocol, f"m{cid}"),
                                             topic))

        cids = list(range(n))
        t_form = time.monotonic()
        for c in cids:
            start_member(c)
        if not view.wait_stable(cids, s.partitions, t_form, s.settle_s, s.timeout_s):
            raise RunFailed(f"the group of {n} did not form: {view.describe(cids)}")
        with view.lock:
            formed_at = max(t for c in cids for t in view.members[c].changes[-1:])
        out["form"] = {"assigned_ms": (formed_at - t_form) * 1000}
        if not view.wait(lambda: view.consuming(cids), 30):
            raise RunFailed("members not consuming every partition after forming")

        t_b0 = time.monotonic()
        time.sleep(s.baseline_s)
        t_b1 = time.monotonic()
        busy = cpu.between(t_b0, t_b1 - 0.06)
        sent = s.rate * (t_b1 - 0.06 - t_b0)
        out["steady"] = {"cpu_pct": 100 * busy / (t_b1 - 0.06 - t_b0) if busy is not None else None,
                         "cpu_us_per_record": busy / sent * 1e6 if busy is not None else None}
        # the members heartbeat in step since they got their assignments together: start the
        # change at a random point of their heartbeat interval
        time.sleep(rng.uniform(0, s.heartbeat_ms / 1000))

        # join: one more member
        before = view.snapshot()
        newcomer = n
        start_member(newcomer)
        if not view.wait(lambda: view.members.get(newcomer, MemberView()).subscribed_at is not None, 30):
            raise RunFailed("the joining member did not subscribe")
        t0 = view.members[newcomer].subscribed_at
        cids = cids + [newcomer]
        if not view.wait_stable(cids, s.partitions, t0, s.settle_s, s.timeout_s):
            raise RunFailed(f"join: the group of {n + 1} did not settle: {view.describe(cids)}")
        view.wait(lambda: view.consuming(cids), 10)
        time.sleep(0.2)  # the members send what they consumed every 50 ms
        out["join"] = change_metrics(view, before, cids, t0, cpu, s)
        if s.trace:
            write_trace(view, before, cids, t0, os.path.join(s.log_dir, f"{tag}-{broker}-join.txt"))

        time.sleep(s.baseline_s + rng.uniform(0, s.heartbeat_ms / 1000))
        # leave: one of the first n closes
        leaver = n // 2
        before = view.snapshot()
        workers[leaver % n_workers][1].put(("close", leaver))
        if not view.wait(lambda: view.members[leaver].closing_at is not None, 30):
            raise RunFailed("the leaving member did not start closing")
        t0 = view.members[leaver].closing_at
        cids = [c for c in cids if c != leaver]
        if not view.wait_stable(cids, s.partitions, t0, s.settle_s, s.timeout_s):
            raise RunFailed(f"leave: the group of {n} did not settle: {view.describe(cids)}")
        view.wait(lambda: view.consuming(cids), 10)
        time.sleep(0.2)
        out["leave"] = change_metrics(view, before, cids, t0, cpu, s)
        if s.trace:
            write_trace(view, before, cids, t0, os.path.join(s.log_dir, f"{tag}-{broker}-leave.txt"))
    except RunFailed as exc:
        print(f"  RUN FAILED ({tag} {broker} {protocol} n={n}): {exc}; broker log {log_path}", flush=True)
    finally:
        stop_producer.set()
        if producer is not None:
            producer.join(20)
            if producer.is_alive():
                producer.kill()
        for p, _ in workers:
            p.kill()
        for p, _ in workers:
            p.join(10)
        cpu.stop_flag.set()
        stop(proc, 30)
        view.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    if view.errors:
        print(f"  member errors ({len(view.errors)}), first: {view.errors[:3]}", flush=True)
    done = view.producer_done or {}
    if done and (done["failed"] or done["refused"] or done["max_late_ms"] > 200):
        print(f"  producer: {done}", flush=True)
    return out


# --- the membership part ---------------------------------------------------------------------------

METRICS = {
    "form": [Metric("assigned_ms", "group formed, ms", True, 0)],
    "steady": [Metric("cpu_pct", "broker CPU % of a core", True, 1),
               Metric("cpu_us_per_record", "broker CPU us/record", True, 1)],
    "change": [Metric("assigned_ms", "all assigned, ms", True, 0),
               Metric("consuming_ms", "all consuming, ms", True, 0),
               Metric("rebalance_ms", "first to last callback, ms", True, 0),
               Metric("unmoved_kept_pct", "unmoved consumed % of sent", False, 0),
               Metric("unmoved_unowned_ms", "unmoved revoked for, ms", True, 0),
               Metric("unmoved_pause_ms", "unmoved max pause, ms", True, 0),
               Metric("moved", "partitions moved", True, 0, ratio=False),
               Metric("cpu_pct", "broker CPU % of a core", True, 1)],
}


def metrics_for(scenario: str) -> list[Metric]:
    phase = scenario.rsplit(" ", 1)[1]
    return METRICS.get(phase, METRICS["change"])


def bench_membership(args, s: Settings) -> None:
    brokers = ["sundial", "kfake"] if s.kfake else ["sundial"]
    ctx = multiprocessing.get_context("spawn")
    results = Results()
    rng = random.Random(args.seed)
    reps_at = {int(k): int(v) for k, v in (x.split("=") for x in args.reps_at)}
    for n in args.members:
        for rep in range(reps_at.get(n, args.reps)):
            k = rep % len(args.protocols)
            for protocol in args.protocols[k:] + args.protocols[:k]:
                for broker in in_turn(brokers, rep):
                    tag = f"n{n}-{protocol}-r{rep + 1}"
                    phases = run_once(broker, protocol, n, tag, s, ctx, rng)
                    for phase in ("form", "steady", "join", "leave"):
                        if phase in phases:
                            results.report(rep, broker, f"n{n} {protocol} {phase}", phases[phase])
                        else:  # keeps the repetitions of both brokers paired
                            results.add(f"n{n} {protocol} {phase}", broker, {})
            print_load()
    print_table(results, brokers, metrics_for)


def table_from(path: str) -> None:
    """Print the table again from the per-run lines of an earlier run's output."""
    results = Results()
    brokers: list[str] = []
    with open(path) as fh:
        for line in fh:
            m = _RUN_LINE.match(line)
            if not m:
                continue
            rep, broker, scenario, pairs = m.groups()
            if broker not in brokers:
                brokers.append(broker)
            values = {}
            for pair in pairs.split():
                key, _, value = pair.partition("=")
                values[key] = None if value == "None" else float(value)
            runs = results.runs.setdefault((scenario, broker), [])
            while len(runs) < int(rep) - 1:  # a failed run left no line: keep the repetitions paired
                runs.append({})
            runs.append(values)
    print_table(results, sorted(brokers, key=lambda b: b != "sundial"), metrics_for)


_RUN_LINE = re.compile(r"^\[rep (\d+)\] \[(\w+)\] (.+?): (.*)$")


# --- ConsumerGroupHeartbeat latency ---------------------------------------------------------------

class _RawMember:
    """A consumer-protocol member speaking ConsumerGroupHeartbeat v1 on its own connection; it
    takes whatever it is assigned and gives up whatever it loses at once."""

    def __init__(self, group: str, topic: str) -> None:
        self.group, self.topic = group, topic
        self.member_id = uuid.uuid4().hex[:22]  # KIP-1082: the client makes up its member id
        self.epoch = 0
        self.owned: list[int] = []
        self.topic_id = None
        self.latencies: list[tuple[str, float]] = []  # (kind, seconds)

    async def run(self, host: str, port: int, interval_s: float, stop_at: list[float]) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        corr = 0
        try:
            while not stop_at or time.monotonic() < stop_at[0]:
                corr += 1
                owned = [{"topic_id": self.topic_id, "partitions": sorted(self.owned)}] if self.owned else []
                frame = encode_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, corr, "group-bench", {
                    "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                    "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 300_000,
                    "subscribed_topic_names": [self.topic], "subscribed_topic_regex": None,
                    "server_assignor": None, "topic_partitions": owned})
                t0 = time.perf_counter()
                writer.write(frame)
                body = await reader.readexactly(_SIZE.unpack(await reader.readexactly(4))[0])
                took = time.perf_counter() - t0
                _, resp = decode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body, has_size_prefix=False)
                if resp.error_code:
                    raise RunFailed(f"ConsumerGroupHeartbeat error {resp.error_code}: {resp.error_message}")
                kind = "join" if self.epoch == 0 else "steady"
                if resp.member_epoch != self.epoch:
                    kind = kind if kind == "join" else "changed"
                self.epoch = resp.member_epoch
                if resp.assignment is not None:
                    parts = sorted(p for tp in resp.assignment.topic_partitions for p in tp.partitions)
                    if resp.assignment.topic_partitions:
                        self.topic_id = resp.assignment.topic_partitions[0].topic_id
                    if parts != sorted(self.owned) and kind == "steady":
                        kind = "changed"
                    self.owned = parts
                self.latencies.append((kind, took))
                await asyncio.sleep(interval_s)
        finally:
            writer.close()


async def _heartbeat_round(bootstrap: str, members: int, join_gap_s: float, tail_s: float) -> dict[str, list[float]]:
    host, port = bootstrap.rsplit(":", 1)
    topic, group = "group-bench-hb", f"gh-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 100)
    stop_at: list[float] = []
    raw = [_RawMember(group, topic) for _ in range(members)]
    tasks = []
    for m in raw:
        tasks.append(asyncio.create_task(m.run(host, int(port), 0.1, stop_at)))
        await asyncio.sleep(join_gap_s)
    stop_at.append(time.monotonic() + tail_s)
    await asyncio.gather(*tasks)
    out: dict[str, list[float]] = {"join": [], "changed": [], "steady": []}
    for m in raw:
        for kind, took in m.latencies:
            out[kind].append(took * 1000)
    return out


def bench_heartbeats(args, s: Settings) -> None:
    """``--part heartbeat``: ConsumerGroupHeartbeat latency, client side, with no data traffic.
    Raw members join a 100-partition topic's group one every ``--hb-join-gap-ms`` and heartbeat
    every 100 ms, reporting at once what they were given; each answer is timed and classed
    ``join`` (epoch 0), ``changed`` (the member's epoch or assignment changed) or ``steady``."""
    brokers = ["sundial", "kfake"] if s.kfake else ["sundial"]
    results = Results()
    for rep in range(args.reps):
        for broker in in_turn(brokers, rep):
            proc, bootstrap, data_dir = start_broker(s, broker, f"heartbeat-r{rep + 1}-{broker}.log")
            try:
                lat = asyncio.run(_heartbeat_round(bootstrap, args.hb_members, args.hb_join_gap_ms / 1000, 3.0))
            finally:
                stop(proc, 30)
                shutil.rmtree(data_dir, ignore_errors=True)
            for kind, values in lat.items():
                values.sort()
                if values:
                    results.report(rep, broker, f"heartbeat {kind}", {
                        "n": len(values), "p50_ms": values[len(values) // 2],
                        "p99_ms": values[min(len(values) - 1, int(len(values) * 0.99))], "max_ms": values[-1]})
    print_table(results, brokers, lambda scenario: [Metric("p50_ms", "p50, ms", True, 2),
                                                    Metric("p99_ms", "p99, ms", True, 2),
                                                    Metric("n", "heartbeats", False, 0, ratio=False)])


# --- OffsetCommit rate -------------------------------------------------------------------------------

async def _commit_loop(host: str, port: int, group: str, topic: str, partitions: int, seconds: float,
                       latencies: list[float]) -> int:
    """Send the same OffsetCommit back to back (one in flight); each one is a new durable commit.

    The frame is encoded once and the first answer is decoded and checked; later answers
    must be byte-identical to it, so the client spends almost no CPU per request.
    """
    reader, writer = await asyncio.open_connection(host, port)
    frame = encode_request(ApiKey.OFFSET_COMMIT, 8, 1, "group-bench", {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": 1000 + p, "committed_metadata": ""}
            for p in range(partitions)]}]})
    expected = None
    done = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            writer.write(frame)
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            body = await reader.readexactly(size)
            latencies.append(time.perf_counter() - t0)
            if expected is None:
                _, resp = decode_response(ApiKey.OFFSET_COMMIT, 8, body, has_size_prefix=False)
                errors = {p.error_code for t in resp.topics for p in t.partitions}
                if errors != {0}:
                    raise SystemExit(f"OffsetCommit failed: {errors}")
                expected = body
            elif body != expected:
                raise SystemExit("OffsetCommit answer changed (an error?)")
            done += 1
    finally:
        writer.close()
    return done


async def bench_commits(bootstrap: str, seconds: float, connections: int, pid: int | None) -> dict[str, tuple]:
    host, port = bootstrap.rsplit(":", 1)
    port = int(port)
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 100)
    results = {}

    async def scenario(name, conns, partitions, per_request):
        lat: list[float] = []
        cpu0 = cpu_seconds(pid)
        counts = await asyncio.gather(*[_commit_loop(host, port, f"{name}-{i}", topic, partitions, seconds, lat)
                                        for i in range(conns)])
        cpu1 = cpu_seconds(pid)
        lat.sort()
        n = sum(counts)
        cpu_us = (cpu1 - cpu0) / n * 1e6 if cpu0 is not None and cpu1 is not None and n else None
        results[name] = (n * per_request / seconds, lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000,
                         cpu_us)

    await scenario("commit_1conn", 1, 1, 1)
    await scenario(f"commit_{connections}conn", connections, 1, 1)
    await scenario("commit_100p", 1, 100, 100)
    return results


async def bench_coordinator_only(seconds: float) -> float:
    from sundial.broker.groups.coordinator import CommitRequest, GroupCoordinator
    from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
    from sundial.config import BrokerConfig

    coord = GroupCoordinator(BrokerConfig({}), None, store=OffsetStore(MemoryOffsetsLog(), snapshot_min_records=10**9),
                             run_timers=False, topic_partitions=lambda t: 1)
    await coord.start()
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(100):
            n += 1
            await coord.commit_offsets(group_id="g", member_id="", group_instance_id=None, generation_id=-1,
                                       offsets=[CommitRequest("t", 0, n)])
    return n / seconds


def run_commits(args) -> None:
    proc = None
    tmp = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        tmp = tempfile.mkdtemp(prefix="sundial-group-bench-")
        proc, bootstrap = start_sundial(os.path.join(tmp, "data"))
        print(f"started sundial at {bootstrap} (data dir on {tmp})")
    try:
        commits = asyncio.run(bench_commits(bootstrap, args.seconds, args.connections,
                                            proc.pid if proc is not None else args.broker_pid))
        coord_rate = asyncio.run(bench_coordinator_only(min(args.seconds, 2.0)))
    finally:
        stop(proc)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'scenario':<22} {'rate/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'broker CPU/request':>19}")
    for name, (rate, p50, p99, cpu_us) in commits.items():
        unit = "partitions" if name.endswith("100p") else "commits"
        cpu = f"{cpu_us:.0f} us" if cpu_us is not None else "n/a"
        print(f"{name:<22} {rate:>10.0f} {p50:>8.2f} {p99:>8.2f} {cpu:>19}   ({unit}/s, answered after fsync)")
    print(f"{'coordinator_only':<22} {coord_rate:>10.0f}          (commits/s, in-process, no I/O)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["membership", "heartbeat", "commits", "all"], default="membership",
                    help="membership change (default), ConsumerGroupHeartbeat latency, OffsetCommit rate, or all")
    g = ap.add_argument_group("membership change")
    g.add_argument("--kfake", help="path of a kfake binary (franz-go's pkg/kfake; see benchmarks/README.md): "
                                   "run every scenario on it too, interleaved with Sundial")
    g.add_argument("--members", type=lambda v: [int(x) for x in v.split(",")], default=[2, 10, 50],
                   help="group sizes N before the join (default 2,10,50)")
    g.add_argument("--protocols", type=lambda v: v.split(","), default=list(PROTOCOLS),
                   help="of range (classic eager), coop (classic cooperative-sticky), consumer (KIP-848)")
    g.add_argument("--reps", type=int, default=3, help="repetitions per N (default 3)")
    g.add_argument("--reps-at", action="append", default=["50=1"], metavar="N=R",
                   help="repetitions for one group size (default 50=1)")
    g.add_argument("--partitions", type=int, default=100)
    g.add_argument("--rate", type=int, default=1000, help="records/s of the open-loop producer (default 1000)")
    g.add_argument("--heartbeat-ms", type=int, default=500,
                   help="classic heartbeat.interval.ms and both brokers' group.consumer.heartbeat.interval.ms")
    g.add_argument("--session-ms", type=int, default=45000,
                   help="classic session.timeout.ms and both brokers' group.consumer.session.timeout.ms")
    g.add_argument("--settle-ms", type=int, help="no callback for this long = stable (default max(2000, 4 x heartbeat))")
    g.add_argument("--baseline-ms", type=int, default=3000, help="steady consumption before each change")
    g.add_argument("--timeout-s", type=float, default=120.0, help="a change that takes longer fails the run")
    g.add_argument("--members-per-process", type=int, default=10)
    g.add_argument("--seed", type=int, default=1, help="of the random start of each change within a heartbeat")
    g.add_argument("--remote-assignor", help="group.remote.assignor of the consumer-protocol members")
    g.add_argument("--log-dir", help="broker logs (default: a temp dir, printed)")
    g.add_argument("--table-from", metavar="FILE", help="print the table again from an earlier run's output "
                                                         "and exit")
    g.add_argument("--data-root", help="where Sundial's data directories go (default: the system temp dir); "
                                       "a tmpfs makes its fsyncs free")
    g.add_argument("--trace", action="store_true",
                   help="write each change's callbacks per member into the log dir (<run>-<broker>-join.txt, ...)")
    h = ap.add_argument_group("ConsumerGroupHeartbeat latency (--part heartbeat; also uses --kfake, --reps)")
    h.add_argument("--hb-members", type=int, default=20, help="raw members joining the group (default 20)")
    h.add_argument("--hb-join-gap-ms", type=int, default=1000, help="between two joins (default 1000)")
    c = ap.add_argument_group("OffsetCommit rate")
    c.add_argument("--bootstrap", help="an already running Sundial for --part commits (default: start one)")
    c.add_argument("--broker-pid", type=int, help="pid of the --bootstrap broker, for its CPU time")
    c.add_argument("--seconds", type=float, default=5.0, help="duration of each OffsetCommit scenario")
    c.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()
    if args.table_from:
        table_from(args.table_from)
        return
    unknown = set(args.protocols) - set(PROTOCOLS)
    if unknown:
        ap.error(f"unknown protocols {sorted(unknown)}")
    if args.kfake and not os.access(args.kfake, os.X_OK):
        ap.error(f"--kfake {args.kfake}: not an executable file")
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), flush=True)
    print_load()
    s = Settings(partitions=args.partitions, rate=args.rate, heartbeat_ms=args.heartbeat_ms,
                 session_ms=args.session_ms,
                 settle_s=(args.settle_ms or max(2000, 4 * args.heartbeat_ms)) / 1000,
                 baseline_s=args.baseline_ms / 1000, timeout_s=args.timeout_s,
                 members_per_process=args.members_per_process, remote_assignor=args.remote_assignor,
                 kfake=args.kfake, log_dir=args.log_dir or tempfile.mkdtemp(prefix="group-bench-logs-"),
                 trace=args.trace, data_root=args.data_root)
    os.makedirs(s.log_dir, exist_ok=True)
    if args.part in ("membership", "all"):
        print(f"membership change: {s.partitions} partitions, {s.rate} records/s open loop, heartbeat "
              f"{s.heartbeat_ms} ms, session {s.session_ms} ms, settle {s.settle_s:.1f} s; Sundial with "
              f"group.initial.rebalance.delay.ms=0; broker logs in {s.log_dir}", flush=True)
        bench_membership(args, s)
    if args.part in ("heartbeat", "all"):
        print(f"ConsumerGroupHeartbeat latency: {args.hb_members} raw members, one joining every "
              f"{args.hb_join_gap_ms} ms, each heartbeating every 100 ms; broker logs in {s.log_dir}", flush=True)
        bench_heartbeats(args, s)
    if args.part in ("commits", "all"):
        run_commits(args)


if __name__ == "__main__":
    main()
