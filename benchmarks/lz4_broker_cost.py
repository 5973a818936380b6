"""The broker's CPU per lz4 Produce request: two daemons of the same build, started with
different environments (``--env-a``/``--env-b KEY=VALUE``, repeatable), fed the same lz4
Produce requests in interleaved repetitions. Made to decide whether a hand-written C LZ4
decoder earned its place against cramjam (benchmarks/README.md, "lz4 decoding"): one
daemon decoded with the C module, the other with cramjam, selected by a variable.

The broker inflates every lz4 batch it accepts to validate its records (storage/validator.py),
so the decoder is on the Produce path; everything else (the record walk, the CRC, the append,
the answer) is the same code in both daemons. The requests come from produce_cost.py's
replayer (one socket, at most 5 in flight, the broker's CPU from /proc over all its threads).

Scenarios, each with both daemons in every repetition (order alternating):

* ``paced``: ``--rate`` requests/s for ``--seconds``: broker CPU per request and per record;
* ``flood``: as fast as the broker answers (5 in flight), ``--flood-requests`` requests:
  requests/s and records/s (the client is the replayer, which only sends prepared bytes).

Batches (v2, lz4 as Kafka frames it: 64 KiB independent blocks):

* ``same100``: produce_cost.py's default, 9,082 records of one random 100 B value;
* ``json``: Kafka-like records of distinct JSON values (lz4_bench.py's payload), about 1 MiB.

    .venv/bin/python benchmarks/lz4_broker_cost.py --env-b KEY=VALUE [--repeat 5] [--rate 100] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid

from bench_daemon import start_sundial, stop
from bench_peer import Broker, Metric, Results, create_topic, delete_topic, in_turn, print_command, print_table
from produce_cost import record_batch, run

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sundial.records import codecs  # noqa: E402
from sundial.records.builder import SimpleRecord, build_records, encode_v2_record  # noqa: E402


def json_batch(target_bytes: int = 1 << 20) -> tuple[bytes, int]:
    """A v2 lz4 batch of distinct Kafka-like JSON records (about ``target_bytes`` inflated)."""
    import random
    rng = random.Random(7)
    now_ms = int(time.time() * 1000)
    records, total = [], 0
    while total < target_bytes:
        i = len(records)
        value = (b'{"user":"u%05d","event":"%s","ts":%d,"price":%d.%02d}'
                 % (rng.randrange(50_000), rng.choice([b"click", b"view", b"buy"]), now_ms + i,
                    rng.randrange(1000), rng.randrange(100)))
        records.append(SimpleRecord(now_ms, b"key-%d" % rng.randrange(10_000), value))
        total += len(encode_v2_record(i, 0, records[-1].key, value))
    batch = bytes(build_records(2, records, compression=codecs.LZ4).buffer)
    return batch, len(records)


METRICS_PACED = [Metric("cpu_us_per_request", "CPU us/request", lower_is_better=True, digits=0),
                 Metric("cpu_us_per_record", "CPU us/record", lower_is_better=True, digits=3),
                 Metric("broker_cores", "broker cores", lower_is_better=True, digits=3),
                 Metric("p50_ms", "answer p50 ms", lower_is_better=True, digits=3)]
METRICS_FLOOD = [Metric("requests_per_s", "requests/s", digits=1),
                 Metric("records_per_s", "records/s", digits=0),
                 Metric("cpu_us_per_record", "CPU us/record", lower_is_better=True, digits=3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rate", type=float, default=100.0, help="paced requests per second (default 100)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of a paced run (default 10)")
    parser.add_argument("--flood-requests", type=int, default=1500, help="requests of a flood run (default 1500)")
    parser.add_argument("--acks", type=int, default=1)
    parser.add_argument("--only", default="same100,json", help="batches to run (default same100,json)")
    parser.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of daemon a (repeatable)")
    parser.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of daemon b (repeatable)")
    args = parser.parse_args()
    print_command()
    batches = {}
    if "same100" in args.only:
        batches["same100"] = (record_batch(), 9_082)
    if "json" in args.only:
        batches["json"] = json_batch()
    for name, (batch, count) in batches.items():
        inflated = len(codecs.decompress(codecs.LZ4, batch[61:]))
        print(f"batch {name}: {count} records, {len(batch):,} bytes on the wire, {inflated:,} bytes inflated",
              flush=True)
    tmp = tempfile.mkdtemp(prefix="sundial-lz4-cost-", dir=os.getcwd())
    procs = []
    try:
        brokers = []
        for label, pairs in (("a", args.env_a), ("b", args.env_b)):
            env = dict(pair.split("=", 1) for pair in pairs)
            print(f"daemon {label}: {' '.join(pairs) or '(no extra environment)'}", flush=True)
            proc, bootstrap = start_sundial(os.path.join(tmp, label), env=env)
            procs.append(proc)
            brokers.append(Broker(label, bootstrap, proc.pid))
        tag = uuid.uuid4().hex[:6]
        results = Results()
        for rep in range(args.repeat):
            for name, (batch, count) in batches.items():
                for mode in ("paced", "flood"):
                    for broker in in_turn(brokers, rep):
                        topic = f"lz4cost-{name}-{mode}-r{rep}-{broker.name}-{tag}"
                        os.sync()
                        create_topic(broker.bootstrap, topic)
                        if mode == "paced":
                            _, v = run(broker, topic, args.acks, args.rate, args.seconds, batch, name)
                        else:
                            _, v = run(broker, topic, args.acks, 1e6, args.flood_requests / 1e6, batch, name)
                        v["cpu_us_per_record"] = v["cpu_us_per_request"] / count
                        v["records_per_s"] = v["requests_per_s"] * count
                        keep = METRICS_PACED if mode == "paced" else METRICS_FLOOD
                        results.report(rep, broker.name, f"{mode}_{name}", {m.key: v[m.key] for m in keep})
                        delete_topic(broker.bootstrap, topic)
        print_table(results, [b.name for b in brokers],
                    lambda s: METRICS_PACED if s.startswith("paced") else METRICS_FLOOD)
    finally:
        for proc in procs:
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
