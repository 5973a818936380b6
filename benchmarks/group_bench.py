"""Consumer-group benchmark: time to stable for rebalances of 10 consumers, and OffsetCommit rate.

    python benchmarks/group_bench.py                         # starts its own Sundial daemon
    python benchmarks/group_bench.py --bootstrap 127.0.0.1:9092
    python benchmarks/group_bench.py --quick                 # fewer rounds

Rebalances (confluent-kafka / librdkafka consumers, eager "range" protocol, one thread each,
``heartbeat.interval.ms=100`` so the client's heartbeat period does not dominate):

* ``form_10``: ten consumers start at once on a 20-partition topic; time until every one
  has its assignment. Includes ``group.initial.rebalance.delay.ms`` (printed; the daemon
  this script starts uses Kafka's default, 3000 ms, unless ``--initial-delay-ms`` is given).
* ``leave_1_of_10``: one of ten stable members closes (LeaveGroup); time until the nine
  others hold their new assignments.
* ``join_11th``: an eleventh consumer joins a stable group of ten; time until all eleven
  hold assignments.

OffsetCommit rate (raw protocol client on asyncio, OffsetCommit v8 of a simple group,
each answered only after the commit record is fsynced):

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
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from sundial.protocol.api_keys import ApiKey  # noqa: E402
from sundial.protocol.codec import decode_response, encode_request  # noqa: E402

from bench_daemon import cpu_seconds, start_sundial  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


# --- rebalances ------------------------------------------------------------------------------------

class Member(threading.Thread):
    """A librdkafka consumer polling in its own thread; records when it got its last assignment."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 100, "partition.assignment.strategy": "range",
            "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 100,
        })
        self.topic = topic
        self.assignment: list[int] = []
        self.assigned_at = 0.0
        self.generation_events = 0
        self.stop_flag = threading.Event()
        self.closed_at = 0.0

    def _on_assign(self, consumer, partitions) -> None:
        self.assignment = sorted(p.partition for p in partitions)
        self.assigned_at = time.monotonic()
        self.generation_events += 1

    def _on_revoke(self, consumer, partitions) -> None:
        self.assignment = []

    def run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        while not self.stop_flag.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()
        self.closed_at = time.monotonic()

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(30)


def wait_assigned(members, partitions: int, timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        parts = [p for m in members for p in m.assignment]
        if all(m.assignment for m in members) and sorted(parts) == list(range(partitions)):
            return max(m.assigned_at for m in members)
        time.sleep(0.005)
    raise SystemExit("group did not stabilise")


def bench_rebalances(bootstrap: str, rounds: int) -> dict[str, list[float]]:
    partitions = 20
    out: dict[str, list[float]] = {"form_10": [], "leave_1_of_10": [], "join_11th": []}
    for r in range(rounds):
        topic, group = f"gb-{uuid.uuid4().hex[:8]}", f"gb-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions)
        members = [Member(bootstrap, topic, group, f"m{i}") for i in range(10)]
        t0 = time.monotonic()
        for m in members:
            m.start()
        out["form_10"].append(wait_assigned(members, partitions) - t0)
        time.sleep(0.3)
        before = {id(m): m.generation_events for m in members}
        leaver = members.pop()
        t0 = time.monotonic()
        leaver.stop_flag.set()
        done = wait_after(members, before, partitions)
        out["leave_1_of_10"].append(done - t0)
        leaver.join(30)
        time.sleep(0.3)
        before = {id(m): m.generation_events for m in members}
        newcomer = Member(bootstrap, topic, group, "m-new")
        t0 = time.monotonic()
        newcomer.start()
        members.append(newcomer)
        before[id(newcomer)] = 0
        out["join_11th"].append(wait_after(members, before, partitions) - t0)
        for m in members:
            m.stop_flag.set()
        for m in members:
            m.join(30)
        print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k}={v[-1] * 1000:.0f} ms" for k, v in out.items()),
              flush=True)
    return out


def wait_after(members, before, partitions: int, timeout_s: float = 60.0) -> float:
    """Time at which every member got a new assignment and together they cover every partition."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fresh = all(m.generation_events > before[id(m)] and m.assignment for m in members)
        parts = sorted(p for m in members for p in m.assignment)
        if fresh and parts == list(range(partitions)):
            return max(m.assigned_at for m in members)
        time.sleep(0.005)
    raise SystemExit("rebalance did not complete")


# --- OffsetCommit rate -------------------------------------------------------------------------------

_SIZE = struct.Struct(">i")


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", help="an already running broker (default: start a Sundial daemon)")
    ap.add_argument("--initial-delay-ms", type=int, default=3000,
                    help="group.initial.rebalance.delay.ms of the daemon this script starts (Kafka's default)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each OffsetCommit scenario")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--broker-pid", type=int, help="pid of the --bootstrap broker, for its CPU time")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds = 2, 2.0
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]))
    proc = None
    tmp = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        tmp = tempfile.mkdtemp(prefix="sundial-group-bench-")
        proc, bootstrap = start_sundial(os.path.join(tmp, "data"), {
            "group.initial.rebalance.delay.ms": args.initial_delay_ms, "group.min.session.timeout.ms": 1000})
        print(f"started sundial at {bootstrap} (group.initial.rebalance.delay.ms={args.initial_delay_ms}, "
              f"data dir on {tmp})")
    try:
        print("rebalances (confluent-kafka consumers, heartbeat.interval.ms=100, range):")
        reb = bench_rebalances(bootstrap, args.rounds)
        print("commits:")
        commits = asyncio.run(bench_commits(bootstrap, args.seconds, args.connections,
                                            proc.pid if proc is not None else args.broker_pid))
        coord_rate = asyncio.run(bench_coordinator_only(min(args.seconds, 2.0)))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    print()
    print(f"{'scenario':<22} {'median':>10} {'min':>10} {'max':>10}")
    for name, values in reb.items():
        print(f"{name:<22} {statistics.median(values) * 1000:>8.0f}ms {min(values) * 1000:>8.0f}ms "
              f"{max(values) * 1000:>8.0f}ms")
    print()
    print(f"{'scenario':<22} {'rate/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'broker CPU/request':>19}")
    for name, (rate, p50, p99, cpu_us) in commits.items():
        unit = "partitions" if name.endswith("100p") else "commits"
        cpu = f"{cpu_us:.0f} us" if cpu_us is not None else "n/a"
        print(f"{name:<22} {rate:>10.0f} {p50:>8.2f} {p99:>8.2f} {cpu:>19}   ({unit}/s, answered after fsync)")
    print(f"{'coordinator_only':<22} {coord_rate:>10.0f}          (commits/s, in-process, no I/O)")


if __name__ == "__main__":
    main()
