"""Broker CPU per Produce request, without a client in the way.

The 100 B confluent-kafka scenarios of ``broker_bench.py`` are bound by the client: its
Python thread calling ``produce()`` runs at 100% of a core, and the broker shows only
through the CPU it takes from the client on a 2-core host. This script measures that CPU
directly. One raw socket replays the same Produce request at a fixed rate, at most five
in flight (as an idempotent librdkafka producer keeps), and reads the answers; the
broker's CPU (all its threads, from /proc) is divided by the requests answered.

The request is one v2 batch of ``--records`` records (default 9,082, the batch that fills
``batch.size`` = 1 MiB) of one ``--value-bytes`` random value (default 100), compressed
with ``--codec`` (default lz4), for one partition. The producer id is -1 (no idempotence),
so the same batch can be sent again and again. In the 100 B acks=all lz4 run of
``broker_bench.py`` librdkafka closes its batches at ``linger.ms`` with about 4,000
records and sends about 160 requests/s; ``--records 4000 --rate 160`` replays that.

    python benchmarks/produce_cost.py --peer calfkit            # 3 interleaved repetitions
    python benchmarks/produce_cost.py --rate 110 --seconds 10 --acks -1,1
    python benchmarks/produce_cost.py --peer calfkit --records 4000 --rate 160
    python benchmarks/produce_cost.py --records 1 --value-bytes 1024 --codec none --rate 20000 --acks 1

Printed per run and as a table: CPU per request (µs) and the broker's cores, voluntary and
involuntary context switches per request, the rate kept and the answer latency p50/p99.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import struct
import sys
import time
import uuid

from bench_daemon import CLK_TCK
from bench_peer import (Metric, Results, add_broker_arguments, brokers_from_args, create_topic, delete_topic,
                        in_turn, print_command, print_table)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sundial.protocol import encode_request  # noqa: E402  (the repository root is on the path now)
from sundial.protocol.api_keys import ApiKey  # noqa: E402
from sundial.records import codecs  # noqa: E402
from sundial.records.builder import SimpleRecord, build_records  # noqa: E402

RECORDS_PER_BATCH = 9_082
VALUE_BYTES = 100
PRODUCE_VERSION = 7
IN_FLIGHT = 5


def record_batch(records: int = RECORDS_PER_BATCH, value_bytes: int = VALUE_BYTES, codec: str = "lz4") -> bytes:
    now_ms = int(time.time() * 1000)
    value = os.urandom(value_bytes)
    return bytes(build_records(2, [SimpleRecord(now_ms, None, value)] * records,
                               compression=codecs.codec_id(codec)).buffer)


def process_counters(pid: int) -> tuple[int, int, int]:
    """(CPU ticks, voluntary, involuntary context switches) summed over the threads of ``pid``."""
    ticks = vol = inv = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                status = fh.read()
        except OSError:
            continue  # the thread ended between the listing and the read
        ticks += int(fields[11]) + int(fields[12])
        vol += int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        inv += int(status.split("\nnonvoluntary_ctxt_switches:")[1].split()[0])
    return ticks, vol, inv


class Replayer:
    """One connection sending prepared Produce frames and reading their answers in order."""

    def __init__(self, bootstrap: str, topic: str, acks: int, batch: bytes) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.frames = [encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, corr, "produce-cost", {
            "transactional_id": None, "acks": acks, "timeout_ms": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            for corr in range(IN_FLIGHT * 4)]
        self.pending = b""

    def send(self, i: int) -> None:
        self.sock.sendall(self.frames[i % len(self.frames)])

    def receive(self, timeout_s: float | None = None) -> int:
        """Read what has arrived (waiting at most ``timeout_s``; None: until one answer is
        complete) and return how many answers completed."""
        done = 0
        while True:
            while len(self.pending) >= 4:
                (size,) = struct.unpack_from(">i", self.pending)
                if len(self.pending) < 4 + size:
                    break
                self.pending = self.pending[4 + size:]
                done += 1
            if done and timeout_s is None:
                return done
            if timeout_s is not None:
                ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout_s))
                if not ready:
                    return done
                timeout_s = 0.0
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise SystemExit("the broker closed the connection")
            self.pending += chunk

    def close(self) -> None:
        self.sock.close()


def run(broker, topic: str, acks: int, rate: float, seconds: float, batch: bytes, label: str) -> tuple[str, dict]:
    r = Replayer(broker.bootstrap, topic, acks, batch)
    for i in range(20):  # the topic's first segment, the connection and the code paths, untimed
        r.send(i)
        r.receive()
    n = int(rate * seconds)
    sent_at: list[float] = []
    latencies: list[float] = []

    def answered(count: int) -> None:
        now = time.perf_counter()
        for _ in range(count):
            latencies.append(now - sent_at[len(latencies)])

    before = process_counters(broker.pid)
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        while (now := time.perf_counter()) < due:  # read answers while waiting for the next slot
            answered(r.receive(due - now))
        while len(sent_at) - len(latencies) >= IN_FLIGHT:
            answered(r.receive())
        sent_at.append(time.perf_counter())
        r.send(i)
    while len(latencies) < len(sent_at):
        answered(r.receive())
    elapsed = time.perf_counter() - t0
    after = process_counters(broker.pid)
    r.close()
    cpu_s = (after[0] - before[0]) / CLK_TCK
    latencies.sort()
    return f"produce_{label}_acks{'all' if acks == -1 else acks}", {
        "cpu_us_per_request": cpu_s / n * 1e6, "broker_cores": cpu_s / elapsed,
        "voluntary_switches_per_request": (after[1] - before[1]) / n,
        "involuntary_switches_per_request": (after[2] - before[2]) / n,
        "requests_per_s": n / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000, "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


METRICS = [Metric("cpu_us_per_request", "CPU us/request", lower_is_better=True, digits=0),
           Metric("broker_cores", "broker cores", lower_is_better=True, digits=3),
           Metric("voluntary_switches_per_request", "voluntary switches/request", lower_is_better=True, digits=1),
           Metric("involuntary_switches_per_request", "involuntary switches/request", lower_is_better=True,
                  digits=1),
           Metric("requests_per_s", "requests/s", digits=1),
           Metric("p50_ms", "answer p50 ms", lower_is_better=True, digits=3),
           Metric("p99_ms", "answer p99 ms", lower_is_better=True, digits=3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=110.0, help="requests per second (default 110)")
    parser.add_argument("--records", type=int, default=RECORDS_PER_BATCH,
                        help=f"records per batch (default {RECORDS_PER_BATCH})")
    parser.add_argument("--value-bytes", type=int, default=VALUE_BYTES,
                        help=f"bytes of each record's value (default {VALUE_BYTES})")
    parser.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="the batch's compression (default lz4)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run (default 10)")
    parser.add_argument("--acks", default="-1,1", help="comma-separated acks values to run (default -1,1)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions, interleaving the brokers (default 3)")
    add_broker_arguments(parser)
    args = parser.parse_args()
    acks_values = [int(a) for a in args.acks.split(",") if a.strip()]
    print_command()
    batch = record_batch(args.records, args.value_bytes, args.codec)
    label = f"{args.codec}_{args.records}x{args.value_bytes}b"
    print(f"request: one {args.codec} batch of {args.records} x {args.value_bytes} B records, {len(batch)} bytes; "
          f"{args.rate:g} requests/s for {args.seconds:g} s, at most {IN_FLIGHT} in flight", flush=True)
    tag = uuid.uuid4().hex[:6]
    results = Results()
    with brokers_from_args(args) as brokers:
        if any(b.pid is None for b in brokers):
            raise SystemExit("CPU accounting needs the pid of every broker (--broker-pid, --peer-pid)")
        for rep in range(args.repeat):
            for acks in acks_values:
                for broker in in_turn(brokers, rep):
                    topic = f"cost-{acks}-r{rep}-{broker.name}-{tag}"
                    os.sync()  # untimed: earlier runs' dirty pages are not this run's work
                    create_topic(broker.bootstrap, topic)
                    scenario, values = run(broker, topic, acks, args.rate, args.seconds, batch, label)
                    results.report(rep, broker.name, scenario, values)
                    delete_topic(broker.bootstrap, topic)
        print_table(results, [b.name for b in brokers], lambda s: METRICS)


if __name__ == "__main__":
    main()
