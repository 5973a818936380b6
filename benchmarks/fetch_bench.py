"""Fetch path: sendfile (zero copy) against the pread + write fallback, same data, same client.

    python benchmarks/fetch_bench.py [--mb 512] [--record-bytes 1024] [--loop uvloop|asyncio]

Starts a daemon twice on one data directory (``SUNDIAL_SENDFILE=1``, then ``=0``),
produces ``--mb`` MiB once, then reads the partition from the beginning with a
confluent-kafka consumer in another process. Prints consume MB/s, the broker's CPU
seconds per GB sent (from ``/proc``), and the share of fetch bytes the broker sent
with ``os.sendfile`` (from its Prometheus endpoint).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench_daemon import cpu_seconds, free_port, start_sundial
from bench_peer import produce_waiting


def start(data_dir: str, sendfile: bool, loop: str) -> tuple[subprocess.Popen, str, int]:
    mport = free_port()
    proc, bootstrap = start_sundial(data_dir, {"sundial.metrics.listener": f"127.0.0.1:{mport}"},
                                    env={"SUNDIAL_SENDFILE": "1" if sendfile else "0", "SUNDIAL_EVENT_LOOP": loop})
    return proc, bootstrap, mport


def metric(mport: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def consume(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fb-{time.time_ns()}", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "queued.max.messages.kbytes": 1 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    got, t0 = 0, time.perf_counter()
    deadline = time.monotonic() + 600  # a hang guard: records that never come end the run with a message
    while got < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"consumed {got} of {n} records of {topic} in 600 s")
        got += sum(1 for m in c.consume(20000, timeout=1.0) if m.error() is None)
    dt = time.perf_counter() - t0
    c.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    args = ap.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), flush=True)
    data = tempfile.mkdtemp(prefix="sundial-bench-", dir=os.getcwd())
    n = args.mb * 1024 * 1024 // args.record_bytes
    try:
        proc, bootstrap, _ = start(data, True, args.loop)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("fetch", 1, 1)])["fetch"].result(30)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                      "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
        payload = os.urandom(args.record_bytes)
        for _ in range(n):
            produce_waiting(p, "fetch", payload, partition=0)
        assert p.flush(300) == 0
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        size = args.mb * 1024 * 1024
        for sendfile in (True, False):
            proc, bootstrap, mport = start(data, sendfile, args.loop)
            consume(bootstrap, "fetch", min(n, 2000))  # warm the page cache and the connection
            before_cpu = cpu_seconds(proc.pid)
            before_sf, before_out = metric(mport, "sundial_sendfile_bytes_total"), metric(mport, "sundial_bytes_out_total")
            dt = consume(bootstrap, "fetch", n)
            cpu = cpu_seconds(proc.pid) - before_cpu
            sf = metric(mport, "sundial_sendfile_bytes_total") - before_sf
            out = metric(mport, "sundial_bytes_out_total") - before_out
            print(f"sendfile={'on ' if sendfile else 'off'} loop={args.loop}: consume {size / dt / 1e6:7.1f} MB/s, "
                  f"broker {cpu / (size / 1e9):5.2f} CPU-s/GB, sendfile share {sf / max(out, 1) * 100:5.1f}% "
                  f"of {out / 1e6:.0f} MB", flush=True)
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
