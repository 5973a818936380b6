"""Share-group benchmark (KIP-932): what per-record acquisition and acknowledgement cost, Sundial side
by side with franz-go's kfake, and how exactly acquisition locks run out.

    python benchmarks/share_bench.py --kfake PATH                  # everything, 3 repetitions
    python benchmarks/share_bench.py --part throughput --reps 1    # Sundial alone, one part

Parts (``--part``, default all):

* ``throughput``: ``--records`` records (``--sizes`` 100 B and 1 KiB values) are produced to a
  one-partition topic first; then N confluent-kafka ShareConsumers (``--consumers`` 1, 4, 16;
  one thread each, implicit acknowledgement, so every record is accepted on the next poll) of a
  fresh group with ``share.auto.offset.reset=earliest`` read them. ``rec_s`` is the records
  delivered per second from the first record delivered to the last (at most
  ``group.share.partition.max.record.locks``, 2000, are in flight at once, so 20 000 records take
  many rounds of fetch and acknowledgement) (each record once: the run
  fails if a record is missing or delivered twice), ``cpu_us_rec`` the broker's CPU per record.
  Beside it, ``group1``: the same load read by a consumer group of one member (classic
  protocol, auto commit), so the cost of per-record acknowledgement is visible.
* ``latency``: a producer sends ``--rate`` records/s (100 B, acks=1, linger 0) for
  ``--duration-s`` seconds, open loop, to the partition read by ``--latency-consumers`` share
  consumers; end-to-end latency from the producer's send to the consumer's poll, p50 and p99.
* ``redelivery``: a consumer in explicit mode acquires a record and never acknowledges it;
  a second consumer polls. ``delay_err_ms``: when the second consumer got the record, less
  the first acquisition and the lock duration (``--lock-ms``, broker setting
  ``group.share.record.lock.duration.ms``): how late after its deadline a lock ran out, seen by
  a client: the acquisition is timed when the holder's poll returns, after the broker locked the
  record, so a value may be negative by up to a fetch's return trip; the redelivery is timed when
  the taker's poll returns (it polls every 20 ms and the broker long-polls, so a late timer shows).

Interleaving: for each repetition, each scenario runs on Sundial and kfake back to back (Sundial
first in odd repetitions), each on a fresh broker. The table gives the median and [min-max]
per broker and the ratio of the medians. The brokers run with heartbeats every second
(``group.share.heartbeat.interval.ms=1000``) so that members are assigned quickly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, \
    ResourceType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import cpu_seconds, start_sundial, stop  # noqa: E402
from group_bench import start_kfake  # noqa: E402

TIMEOUT_S = 120


class RunFailed(Exception):
    pass


def broker_configs(lock_ms: int) -> dict:
    return {"group.share.heartbeat.interval.ms": 1000, "group.share.min.heartbeat.interval.ms": 1000,
            "group.share.record.lock.duration.ms": lock_ms, "group.share.min.record.lock.duration.ms": 1000}


def start_broker(kind: str, args, workdir: str):
    configs = broker_configs(args.lock_ms)
    if kind == "kfake":
        return start_kfake(args.kfake, configs, os.path.join(workdir, "kfake.log"))
    launcher = args.launcher.split() if args.launcher else None
    return start_sundial(os.path.join(workdir, f"data-{uuid.uuid4().hex[:6]}"), configs,
                         log_path=os.path.join(workdir, "sundial.log"), launcher=launcher)


def setup(bootstrap: str, group: str, *, reset: str = "earliest") -> str:
    topic = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(60)
    return topic


def produce_all(bootstrap: str, topic: str, count: int, size: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 1000})
    value = b"x" * size
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60) != 0:
        raise RunFailed("produce did not finish")


def _consumer_threads(bootstrap, group, topic, n, on_message, stop_evt, explicit=False):
    def run():
        conf = {"bootstrap.servers": bootstrap, "group.id": group}
        if explicit:
            conf["share.acknowledgement.mode"] = "explicit"
        c = ShareConsumer(conf)
        c.subscribe([topic])
        try:
            while not stop_evt.is_set():
                for m in c.poll(0.2) or []:
                    if m.error() is None:
                        on_message(c, m)
        finally:
            c.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def run_throughput(bootstrap: str, pid, n: int, size: int, records: int) -> dict:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    topic = setup(bootstrap, group)
    produce_all(bootstrap, topic, records, size)
    seen: set[int] = set()
    dupes = [0]
    first = [None]
    last = [None]
    lock = threading.Lock()
    done = threading.Event()

    def on_message(_c, m):
        now = time.monotonic()
        with lock:
            if first[0] is None:
                first[0] = now
            if m.offset() in seen:
                dupes[0] += 1
            seen.add(m.offset())
            last[0] = now
            if len(seen) >= records:
                done.set()

    stop_evt = threading.Event()
    cpu0 = cpu_seconds(pid)
    threads = _consumer_threads(bootstrap, group, topic, n, on_message, stop_evt)
    ok = done.wait(TIMEOUT_S)
    cpu1 = cpu_seconds(pid)
    stop_evt.set()
    for t in threads:
        t.join(30)
    if not ok:
        raise RunFailed(f"{len(seen)} of {records} records delivered")
    if dupes[0]:
        raise RunFailed(f"{dupes[0]} records delivered twice")
    elapsed = max(last[0] - first[0], 1e-6)
    out = {"rec_s": records / elapsed}
    if cpu0 is not None and cpu1 is not None:
        out["cpu_us_rec"] = (cpu1 - cpu0) * 1e6 / records
    return out


def run_group_of_one(bootstrap: str, pid, size: int, records: int) -> dict:
    topic = setup(bootstrap, f"unused-{uuid.uuid4().hex[:6]}")
    produce_all(bootstrap, topic, records, size)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = 0
    first = None
    cpu0 = cpu_seconds(pid)
    end = time.monotonic() + TIMEOUT_S
    try:
        while got < records and time.monotonic() < end:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    first = first or time.monotonic()
                    got += 1
        last = time.monotonic()
    finally:
        c.close()
    cpu1 = cpu_seconds(pid)
    if got < records:
        raise RunFailed(f"{got} of {records} records consumed")
    out = {"rec_s": records / max(last - first, 1e-6)}
    if cpu0 is not None and cpu1 is not None:
        out["cpu_us_rec"] = (cpu1 - cpu0) * 1e6 / records
    return out


def run_latency(bootstrap: str, consumers: int, rate: int, duration_s: float) -> dict:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    topic = setup(bootstrap, group)
    latencies: list[float] = []
    lock = threading.Lock()
    total = int(rate * duration_s)

    def on_message(_c, m):
        sent = struct.unpack(">d", m.value()[:8])[0]
        with lock:
            latencies.append(time.time() - sent)

    stop_evt = threading.Event()
    threads = _consumer_threads(bootstrap, group, topic, consumers, on_message, stop_evt)
    time.sleep(3)     # members join and open their share sessions
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    start = time.monotonic()
    for i in range(total):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        p.produce(topic, value=struct.pack(">d", time.time()) + b"x" * 92, partition=0)
        p.poll(0)
    p.flush(30)
    end = time.monotonic() + 30
    while time.monotonic() < end and len(latencies) < total:
        time.sleep(0.05)
    stop_evt.set()
    for t in threads:
        t.join(30)
    if len(latencies) < total:
        raise RunFailed(f"{len(latencies)} of {total} records delivered")
    q = statistics.quantiles(latencies, n=100)
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def run_redelivery(bootstrap: str, lock_ms: int, samples: int) -> dict:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    topic = setup(bootstrap, group)
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "share.acknowledgement.mode": "explicit"})
    taker = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    taker.subscribe([topic])
    errors = []
    try:
        for _ in range(20):
            holder.poll(0.1)
            taker.poll(0.1)
        for _ in range(samples):
            acquired_at = None
            end = time.monotonic() + TIMEOUT_S
            while acquired_at is None and time.monotonic() < end:
                produce_all(bootstrap, topic, 1, 100)    # until the holder, not the taker, gets one
                taken = False
                while acquired_at is None and not taken and time.monotonic() < end:
                    for m in holder.poll(0.05) or []:
                        if m.error() is None:
                            acquired_at = time.monotonic()
                            held = m
                    for m in taker.poll(0.05) or []:
                        if m.error() is None:
                            taker.acknowledge(m, AcknowledgeType.ACCEPT)
                            taken = True
            if acquired_at is None:
                raise RunFailed("the holder never got a record")
            got_at = None
            while got_at is None and time.monotonic() < end:
                for m in taker.poll(0.02) or []:
                    if m.error() is None:
                        got_at = time.monotonic()
                        taker.acknowledge(m, AcknowledgeType.ACCEPT)
            if got_at is None:
                raise RunFailed("the record was not redelivered")
            errors.append((got_at - acquired_at) * 1000 - lock_ms)
            holder.acknowledge(held, AcknowledgeType.RELEASE)   # lets the holder poll again (refused: gone)
    finally:
        taker.close()
        holder.close()
    return {"delay_err_ms_p50": statistics.median(errors), "delay_err_ms_max": max(errors),
            "delay_err_ms_min": min(errors)}


def summarize(results: dict) -> None:
    brokers = sorted({b for per in results.values() for b in per})
    print()
    print(f"{'scenario':<28} {'metric':<18} " + " ".join(f"{b:>26}" for b in brokers)
          + ("   sundial/kfake" if len(brokers) == 2 else ""))
    for scenario, per in results.items():
        metrics = sorted({m for runs in per.values() for r in runs for m in r})
        for metric in metrics:
            cells = []
            medians = {}
            for b in brokers:
                values = [r[metric] for r in per.get(b, []) if metric in r]
                if not values:
                    cells.append(f"{'-':>26}")
                    continue
                medians[b] = statistics.median(values)
                cells.append(f"{medians[b]:>10.1f} [{min(values):.1f}-{max(values):.1f}]".rjust(26))
            ratio = ""
            if len(medians) == 2 and medians.get("kfake"):
                ratio = f"   {medians['sundial'] / medians['kfake']:.2f}"
            print(f"{scenario:<28} {metric:<18} " + " ".join(cells) + ratio)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kfake", help="path of a kfake binary (see benchmarks/README.md)")
    ap.add_argument("--launcher", help="command replacing 'python -m sundial' to start Sundial")
    ap.add_argument("--part", choices=["all", "throughput", "latency", "redelivery"], default="all")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--consumers", default="1,4,16")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--duration-s", type=float, default=10)
    ap.add_argument("--latency-consumers", type=int, default=4)
    ap.add_argument("--lock-ms", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    kinds = ["sundial"] + (["kfake"] if args.kfake else [])
    consumers = [int(x) for x in args.consumers.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[str, dict[str, list]] = {}
    workdir = tempfile.mkdtemp(prefix="share-bench-")
    print(f"logs in {workdir}")
    for rep in range(args.reps):
        order = kinds if rep % 2 == 0 else list(reversed(kinds))
        for kind in order:
            proc, bootstrap = start_broker(kind, args, workdir)
            pid = proc.pid
            try:
                scenarios = []
                if args.part in ("all", "throughput"):
                    for size in sizes:
                        for n in consumers:
                            scenarios.append((f"share n={n} {size}B",
                                              lambda n=n, size=size: run_throughput(bootstrap, pid, n, size,
                                                                                    args.records)))
                        scenarios.append((f"group1 {size}B",
                                          lambda size=size: run_group_of_one(bootstrap, pid, size, args.records)))
                if args.part in ("all", "latency"):
                    scenarios.append((f"latency n={args.latency_consumers} {args.rate}/s",
                                      lambda: run_latency(bootstrap, args.latency_consumers, args.rate,
                                                          args.duration_s)))
                if args.part in ("all", "redelivery"):
                    scenarios.append((f"redelivery lock={args.lock_ms}ms",
                                      lambda: run_redelivery(bootstrap, args.lock_ms, args.samples)))
                for name, fn in scenarios:
                    try:
                        out = fn()
                    except RunFailed as exc:
                        print(f"rep {rep} {kind} {name}: FAILED {exc}", flush=True)
                        continue
                    print(f"rep {rep} {kind} {name}: " + " ".join(f"{k}={v:.1f}" for k, v in out.items()),
                          flush=True)
                    results.setdefault(name, {}).setdefault(kind, []).append(out)
            finally:
                stop(proc)
    summarize(results)


if __name__ == "__main__":
    main()
