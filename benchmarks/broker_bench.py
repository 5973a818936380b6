"""End-to-end broker benchmark with real clients, optionally side by side with a peer broker.

    python benchmarks/broker_bench.py                      # starts its own Sundial daemon
    python benchmarks/broker_bench.py --bootstrap 127.0.0.1:9092
    python benchmarks/broker_bench.py --peer-bootstrap 127.0.0.1:49092 [--peer-pid PID]
    python benchmarks/broker_bench.py --quick              # smaller counts, ~1 minute

Scenarios (each prints one line, then a table with Sundial/peer ratios):

* ``ck_produce_1k_<acks>_<codec>``: confluent-kafka producer, 1 KiB records, acks 1 and
  all, codecs none and lz4 (linger 5 ms, batches up to 1 MiB): records/s and MB/s.
* ``ck_consume_1k``: confluent-kafka consumer reading the acks=1/none topic back: MB/s.
* ``kp_produce_100b`` / ``kp_consume_100b``: kafka-python 3, 100-byte records.
* ``oft_kafka_python``: ``offsets_for_times`` latency (p50/p99) over 2,000 random targets
  on a partition of 10^6 records (10^5 with ``--quick``) with non-monotonic timestamps.

When the benchmark started the daemon itself (or ``--broker-pid``/``--peer-pid`` is
given) it also reports the broker's CPU time per record from ``/proc``, so a ratio of
1.0 is not misread when the client is the bottleneck. The machine's own limits are in
``perf-anchors`` style notes of the README, not re-measured here.
"""

from __future__ import annotations

import argparse
import array
import gc
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench_daemon import cpu_seconds, start_sundial


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout_s: float = 60.0) -> None:
    """Create ``name`` and wait until the broker's metadata shows every partition with a leader
    (a peer broker may propagate a new topic after answering CreateTopics)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1)])[name]
    fut.result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions \
                and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {name} has no leader for every partition after {timeout_s:.0f} s")
        time.sleep(0.05)


class Run:
    def __init__(self, name: str, bootstrap: str, pid: int | None) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.pid = pid
        self.results: dict[str, dict] = {}

    def record(self, scenario: str, **values) -> None:
        self.results[scenario] = values
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        print(f"[{self.name}] {scenario}: {shown}", flush=True)


def ck_produce(run: Run, topic: str, n: int, size: int, acks: str, codec: str) -> None:
    create_topic(run.bootstrap, topic)
    payload = os.urandom(size)
    p = Producer({"bootstrap.servers": run.bootstrap, "acks": acks, "compression.type": codec,
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": acks == "all"})
    cpu0 = cpu_seconds(run.pid)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    remaining = p.flush(120)
    dt = time.perf_counter() - t0
    cpu1 = cpu_seconds(run.pid)
    assert remaining == 0, f"{remaining} records not delivered"
    extra = {}
    if cpu0 is not None and cpu1 is not None:
        extra["broker_cpu_us_per_msg"] = (cpu1 - cpu0) / n * 1e6
        extra["broker_cores"] = (cpu1 - cpu0) / dt
    run.record(f"ck_produce_{size}b_acks{acks}_{codec}", msgs_per_s=n / dt, mb_per_s=n * size / dt / 1e6,
               **extra)


def ck_consume(run: Run, topic: str, n: int, size: int) -> None:
    c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                  "max.partition.fetch.bytes": 10 << 20, "queued.max.messages.kbytes": 1 << 20})
    c.assign([CkTopicPartition(topic, 0, 0)])
    got = 0
    first = None
    cpu0 = cpu_seconds(run.pid)
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(10000, timeout=1.0)
        if msgs and first is None:
            first = time.perf_counter()
        got += sum(1 for m in msgs if m.error() is None)
    last = time.perf_counter()
    cpu1 = cpu_seconds(run.pid)
    c.close()
    dt = max(last - (first or last), 1e-9)
    extra = {}
    if cpu0 is not None and cpu1 is not None:
        extra["broker_cpu_us_per_msg"] = (cpu1 - cpu0) / max(got, 1) * 1e6
    run.record(f"ck_consume_{size}b", msgs_per_s=got / dt, mb_per_s=got * size / dt / 1e6, records=got, **extra)


def kp_produce_consume(run: Run, topic: str, n: int, size: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(run.bootstrap, topic)
    payload = os.urandom(size)
    p = KafkaProducer(bootstrap_servers=run.bootstrap, acks=1, linger_ms=5, batch_size=1 << 18)
    t0 = time.perf_counter()
    for _ in range(n):
        p.send(topic, payload, partition=0)
    p.flush()
    dt = time.perf_counter() - t0
    p.close()
    run.record(f"kp_produce_{size}b", msgs_per_s=n / dt, mb_per_s=n * size / dt / 1e6)
    c = KafkaConsumer(bootstrap_servers=run.bootstrap, enable_auto_commit=False, fetch_max_bytes=50 << 20,
                      max_partition_fetch_bytes=10 << 20)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = 0
    got += sum(len(v) for v in c.poll(timeout_ms=0).values())  # connect before timing
    first = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        batch = c.poll(timeout_ms=500, max_records=50000)
        got += sum(len(v) for v in batch.values())
    dt = max(time.perf_counter() - first, 1e-9)
    c.close()
    run.record(f"kp_consume_{size}b", msgs_per_s=got / dt, mb_per_s=got * size / dt / 1e6, records=got)


def oft(run: Run, topic: str, n: int, targets: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    create_topic(run.bootstrap, topic)
    base = int(time.time() * 1000) - 86_400_000  # inside the default 7-day retention
    rng = random.Random(1)
    stamps = [base + i * 10 + rng.randint(-500, 500) for i in range(n)]
    p = Producer({"bootstrap.servers": run.bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 2_000_000})
    payload = b"x" * 100
    for i, ts in enumerate(stamps):
        while True:
            try:
                p.produce(topic, payload, partition=0, timestamp=ts)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(300) == 0
    c = KafkaConsumer(bootstrap_servers=run.bootstrap)
    tp = TopicPartition(topic, 0)
    c.offsets_for_times({tp: base})  # warm up metadata and the connection
    lat = []
    wrong = 0
    order = sorted(range(n), key=lambda i: (stamps[i], i))
    suffix_min = [0] * n  # brute force: lowest offset with ts >= target, via sorted timestamps
    best = n
    for k in range(n - 1, -1, -1):
        best = min(best, order[k])
        suffix_min[k] = best
    sorted_ts = array.array("q", (stamps[i] for i in order))
    suffix_min = array.array("q", suffix_min)
    del order, stamps
    # The ground truth lives in flat int64 arrays and the collector starts clean, so the
    # client's garbage collections do not walk millions of list slots inside the timed calls.
    gc.collect()
    # Let the kernel write back what was just produced, so the timed lookups measure the
    # lookup and not the page-cache flush of the data set the scenario itself wrote.
    os.sync()
    import bisect

    last_ts = sorted_ts[-1] if n else base
    for _ in range(targets):
        target = rng.randint(base - 1000, last_ts + 1000)
        t0 = time.perf_counter()
        ans = c.offsets_for_times({tp: target})[tp]
        lat.append(time.perf_counter() - t0)
        k = bisect.bisect_left(sorted_ts, target)
        expected = suffix_min[k] if k < n else None
        if (ans.offset if ans else None) != expected:
            wrong += 1
    floor = []  # the same client call for the latest offset: the client's and the wire's share
    for _ in range(targets):
        t0 = time.perf_counter()
        c.end_offsets([tp])
        floor.append(time.perf_counter() - t0)
    c.close()
    lat.sort()
    floor.sort()
    run.record("oft_kafka_python", records=n, targets=targets, p50_ms=lat[len(lat) // 2] * 1000,
               p99_ms=lat[int(len(lat) * 0.99)] * 1000, mean_ms=statistics.fmean(lat) * 1000, wrong=wrong,
               latest_p50_ms=floor[len(floor) // 2] * 1000, latest_p99_ms=floor[int(len(floor) * 0.99)] * 1000)


def run_all(run: Run, quick: bool, only: set[str]) -> None:
    n1k = 20_000 if quick else 100_000
    tag = uuid.uuid4().hex[:6]
    if not only or "ck" in only:
        for acks in ("1", "all"):
            for codec in ("none", "lz4"):
                topic = f"bench-ck-{acks}-{codec}-{tag}"
                ck_produce(run, topic, n1k, 1024, acks, codec)
                if acks == "1" and codec == "none":
                    ck_consume(run, topic, n1k, 1024)
    if not only or "kp" in only:
        kp_produce_consume(run, f"bench-kp-{tag}", 20_000 if quick else 100_000, 100)
    if not only or "oft" in only:
        oft(run, f"bench-oft-{tag}", 100_000 if quick else 1_000_000, 500 if quick else 2000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a running Sundial (default: start one)")
    parser.add_argument("--broker-pid", type=int, help="pid of that daemon, for CPU accounting")
    parser.add_argument("--data-dir", help="data dir of the daemon this script starts (default: a temp dir)")
    parser.add_argument("--peer-bootstrap", help="a second Kafka-compatible broker to compare with")
    parser.add_argument("--peer-pid", type=int, help="pid of the peer broker, for CPU accounting")
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--only", default="", help="comma-separated subset of: ck, kp, oft")
    args = parser.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), flush=True)
    proc = None
    tmp = None
    try:
        if args.bootstrap:
            sundial = Run("sundial", args.bootstrap, args.broker_pid)
        else:
            tmp = args.data_dir or tempfile.mkdtemp(prefix="sundial-bench-", dir=os.getcwd())
            proc, bootstrap = start_sundial(tmp)
            sundial = Run("sundial", bootstrap, proc.pid)
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        run_all(sundial, args.quick, only)
        peer = None
        if args.peer_bootstrap:
            peer = Run("peer", args.peer_bootstrap, args.peer_pid)
            run_all(peer, args.quick, only)
        print("\nscenario".ljust(34), "sundial".rjust(14), "peer".rjust(14), "ratio".rjust(8))
        for scenario, values in sundial.results.items():
            key = "p99_ms" if scenario.startswith("oft") else "mb_per_s"
            s = values.get(key)
            p = peer.results.get(scenario, {}).get(key) if peer else None
            ratio = (p / s if key == "p99_ms" else s / p) if (s and p) else None
            print(scenario.ljust(33), f"{s:14.2f}", f"{p:14.2f}" if p else " " * 14,
                  f"{ratio:8.2f}" if ratio else "", f"({key})")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if tmp and not args.data_dir:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
