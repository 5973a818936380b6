"""Connection limits measured against a fresh daemon: storms, idle closing, slow readers.

    python benchmarks/conn_storm.py                 # all three, about a minute
    python benchmarks/conn_storm.py --storm 2000 --reps 5

* **storm**: N connections opened at once (asyncio client, one process), each sends
  ApiVersions v0 + Metadata v1 and waits for both answers while every other connection
  stays open; serve-all time per repetition, median [min-max], and the daemon's CPU
  time per connection (perf-anchors: Tansu 1.10 s for 1000; a stub with backlog 4096
  0.19 s).
* **idle**: 500 connections left idle with ``connections.max.idle.ms=1000``: when the
  daemon closed them (min / median / max after the last byte).
* **slow readers**: 100 clients with 4 KiB receive buffers each pipeline 30 Fetch
  requests (1 MiB each) of a 16 MB partition and never read. The daemon's RSS before
  and at peak, and the latency of a Metadata request from a well-behaved client
  meanwhile. Without bounded buffering the unread responses would take 3 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sundial.protocol import encode_request  # noqa: E402
from sundial.protocol.api_keys import ApiKey  # noqa: E402

MiB = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, **overrides) -> None:
        self.dir = tempfile.mkdtemp(prefix="sundial-storm-")
        self.port = free_port()
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": os.path.join(self.dir, "data"),
                    **overrides}
        cmd = [sys.executable, "-m", "sundial", "serve"]
        for k, v in settings.items():
            cmd += ["--override", f"{k}={v}"]
        env = dict(os.environ, SUNDIAL_LOG_LEVEL="warning", PYTHONPATH=ROOT)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=self.dir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("daemon did not start")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def wait_fds_at_most(self, limit: int, timeout_s: float = 60.0) -> None:
        """Wait until the daemon holds at most ``limit`` descriptors (the connections of a storm are closed)."""
        deadline = time.monotonic() + timeout_s
        while self.open_fds() > limit:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon still holds {self.open_fds()} fds (baseline {limit})")
            time.sleep(0.05)

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


async def read_frame(reader) -> bytes:
    head = await reader.readexactly(4)
    return await reader.readexactly(struct.unpack(">i", head)[0])


async def storm_once(port: int, n: int) -> tuple[float, int]:
    done = asyncio.Event()
    served = 0

    async def one(i: int):
        nonlocal served
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_request(18, 0, i, "storm", {}) + encode_request(3, 1, i, "storm", {"topics": None}))
        await read_frame(reader)
        await read_frame(reader)
        served += 1
        if served == n:
            done.set()
        await done.wait()
        writer.close()

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.wait_for(done.wait(), 120)
    elapsed = time.perf_counter() - t0
    await asyncio.gather(*tasks)
    return elapsed, served


def bench_storm(n: int, reps: int) -> None:
    d = Daemon()
    try:
        times = []
        baseline_fds = d.open_fds()
        cpu0 = d.cpu_s()
        for _ in range(reps):
            elapsed, served = asyncio.run(storm_once(d.port, n))
            assert served == n
            times.append(elapsed)
            d.wait_fds_at_most(baseline_fds)  # the next storm starts on a daemon that closed this one
        cpu = d.cpu_s() - cpu0
        print(f"storm: {n} concurrent connections (ApiVersions + Metadata each), {reps} reps: serve-all "
              f"median {statistics.median(times):.3f}s [{min(times):.3f}-{max(times):.3f}], daemon CPU "
              f"{cpu / (n * reps) * 1e6:.0f} us per connection", flush=True)
    finally:
        d.stop()


def bench_idle(n: int = 500, idle_ms: int = 1000) -> None:
    d = Daemon(**{"connections.max.idle.ms": str(idle_ms)})
    try:
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", d.port))
            s.sendall(encode_request(18, 0, 1, "idle", {}))
            socks.append(s)
        for s in socks:
            s.recv(65536)
        t0 = time.monotonic()
        closed = {}
        deadline = t0 + 120  # waits for every close; a busy host only makes the numbers worse
        while len(closed) < n and time.monotonic() < deadline:
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        closed[i] = time.monotonic() - t0
                except BlockingIOError:
                    pass
                except OSError:
                    closed[i] = time.monotonic() - t0
            time.sleep(0.01)
        vals = sorted(closed.values())
        print(f"idle: {len(vals)}/{n} connections closed with connections.max.idle.ms={idle_ms}: after "
              f"min {vals[0]:.2f}s, median {statistics.median(vals):.2f}s, max {vals[-1]:.2f}s", flush=True)
        for s in socks:
            s.close()
    finally:
        d.stop()


def bench_slow_readers(clients: int = 100, requests_each: int = 30) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    d = Daemon(**{"connections.max.idle.ms": "60000"})
    try:
        a = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        a.create_topics([NewTopic("slow", 1, 1)])
        a.close()
        p = KafkaProducer(bootstrap_servers=d.bootstrap, acks=1, linger_ms=20, batch_size=MiB,
                          max_request_size=2 * MiB)
        value = os.urandom(100_000)
        for _ in range(160):
            p.send("slow", value=value, partition=0)
        p.flush()
        p.close()
        time.sleep(0.5)
        base = d.rss()
        socks = []
        for i in range(clients):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", d.port))
            s.setblocking(False)
            data = b"".join(encode_request(ApiKey.FETCH, 11, k, "slow", {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": MiB, "isolation_level": 0,
                "topics": [{"topic": "slow", "partitions": [{"partition": 0, "fetch_offset": (i * 7 + k * 11) % 150,
                                                             "partition_max_bytes": MiB}]}]})
                for k in range(requests_each))
            try:
                s.send(data)
            except BlockingIOError:
                pass
            socks.append(s)
        peak = base
        lat = []
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            peak = max(peak, d.rss())
            t0 = time.perf_counter()
            with socket.create_connection(("127.0.0.1", d.port)) as s:
                s.sendall(encode_request(3, 1, 1, "ok", {"topics": None}))
                s.recv(65536)
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.1)
        print(f"slow readers: {clients} clients x {requests_each} unread 1 MiB fetch responses: daemon RSS "
              f"{base / MiB:.0f} MB before, peak +{(peak - base) / MiB:.0f} MB "
              f"({(peak - base) / clients / 1024:.0f} KiB per stuck client); Metadata from another client meanwhile "
              f"p50 {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms", flush=True)
        for s in socks:
            s.close()
    finally:
        d.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--storm", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=["storm", "idle", "slow"], default=None)
    args = ap.parse_args()
    print("command: python benchmarks/conn_storm.py " + " ".join(sys.argv[1:]), flush=True)
    if args.only in (None, "storm"):
        bench_storm(args.storm, args.reps)
    if args.only in (None, "idle"):
        bench_idle()
    if args.only in (None, "slow"):
        bench_slow_readers()
    return 0


if __name__ == "__main__":
    sys.exit(main())
