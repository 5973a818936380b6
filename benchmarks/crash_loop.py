"""Crash loop: kill -9 the daemon at random moments under load, restart it, and prove nothing
acknowledged was lost or duplicated.

    python benchmarks/crash_loop.py                   # 50 cycles (about 6-8 minutes)
    python benchmarks/crash_loop.py --cycles 5 --seed 7 --workdir /tmp/crash

Load, all the time the daemon runs (two partitions, 64 KiB segments, so rolls and index
rebuilds happen often):

* a confluent-kafka producer (acks=all, idempotent) and a kafka-python producer
  (acks=all, idempotent), each sending unique values with explicit, non-monotonic
  CreateTime timestamps;
* a kafka-python group consumer that commits synchronously after every poll.

Each cycle: resume the load; after a random 0.3-3 s (one cycle in ten: 0-0.3 s, while
the restarted daemon is still catching up) send SIGKILL; pause the load; restart;
flush the producers (their retries land on the restarted daemon); then check, with the
load paused:

1. every acknowledged record is present exactly once, at the partition and offset its
   acknowledgement named, with its timestamp; no value appears twice at all;
2. offsets are contiguous from 0 to the log end offset in each partition;
3. offsetsForTimes for 20 random targets per partition equals brute force over what
   was read back;
4. the group's committed offsets are the last acknowledged commit (or a commit that
   was in flight when the daemon died);
5. every ``--verify-every`` cycles and at the end: a clean stop, ``sundial dump-log
   --verify-index-only`` over every partition directory (offsets topic included), then
   a start again.

Prints one line per cycle and a summary; exits 1 on the first failed check. The
integration test ``tests/integration/test_crash_loop.py`` runs a few cycles of the same
harness.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from crash_load import GROUP, PARTITIONS, TOPIC, ConfluentProducer, GroupConsumer, KafkaPythonProducer, \
    Ledger  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """``sundial serve`` as a subprocess (own data dir and port), killable at any moment."""

    def __init__(self, workdir: str, port: int) -> None:
        self.workdir = workdir
        self.data_dir = os.path.join(workdir, "data")
        self.port = port
        self.log_path = os.path.join(workdir, "sundial.log")
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> float:
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": self.data_dir,
                    "log.segment.bytes": "65536", "offsets.topic.segment.bytes": "65536",
                    "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"}
        cmd = [sys.executable, "-m", "sundial", "serve"]
        for k, v in settings.items():
            cmd += ["--override", f"{k}={v}"]
        env = dict(os.environ, SUNDIAL_LOG_FORMAT="json", PYTHONUNBUFFERED="1", SUNDIAL_LOG_LEVEL="info")
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        self.starts += 1
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.tail()}")
            if self.count_events("broker_started") >= self.starts:
                return time.monotonic() - t0
            time.sleep(0.02)
        raise RuntimeError("daemon did not start:\n" + self.tail())

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -9
        return self.proc.returncode if self.proc else 0

    def events(self) -> list[dict]:
        out = []
        try:
            with open(self.log_path, "rb") as fh:
                for line in fh.read().decode("utf-8", "replace").splitlines():
                    if line.startswith("{"):
                        try:
                            out.append(json.loads(line))
                        except ValueError:
                            pass
        except OSError:
            pass
        return out

    def count_events(self, name: str) -> int:
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read().count(f'"event": "{name}"'.encode())
        except OSError:
            return 0

    def tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


# -- checks ------------------------------------------------------------------------------------------------
@dataclass
class CycleResult:
    cycle: int
    killed_after_s: float
    restart_s: float
    records: int
    acked: int
    problems: list = field(default_factory=list)
    index_verified: bool = False
    commits: int = 0

    def line(self) -> str:
        status = "ok" if not self.problems else "FAILED: " + "; ".join(self.problems[:3])
        return (f"cycle {self.cycle:3d}: killed after {self.killed_after_s:5.2f}s, restart {self.restart_s:5.2f}s, "
                f"{self.records:7d} records ({self.acked} acknowledged), {self.commits:5d} commits "
                f"{'indexes verified ' if self.index_verified else ''}{status}")


def read_everything(bootstrap: str) -> dict[int, list[tuple[int, bytes, int]]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_partition_fetch_bytes=1 << 20,
                      request_timeout_ms=30000)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    ends = c.end_offsets(tps)
    out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while any((out[tp.partition][-1][0] + 1 if out[tp.partition] else 0) < ends[tp] for tp in tps):
        if time.monotonic() > deadline:
            raise AssertionError("could not read back to the end offsets within 120 s")
        for tp, recs in c.poll(timeout_ms=300, max_records=100_000).items():
            out[tp.partition].extend((r.offset, r.value, r.timestamp) for r in recs)
    c.close()
    return out


def check(daemon: Daemon, ledger: Ledger, rng: random.Random) -> tuple[int, list[str]]:
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    problems: list[str] = []
    with ledger.lock:
        acked = dict(ledger.acked)
        commit_acked = dict(ledger.commit_acked)
        commit_maybe = {p: set(v) for p, v in ledger.commit_maybe.items()}
    data = read_everything(daemon.bootstrap)
    where: dict[bytes, list[tuple[int, int, int]]] = {}
    total = 0
    for p, recs in data.items():
        total += len(recs)
        offsets = [o for o, _, _ in recs]
        if offsets != list(range(len(offsets))):
            gaps = [o for i, o in enumerate(offsets) if o != i][:5]
            problems.append(f"partition {p}: offsets not contiguous from 0 (first bad: {gaps})")
        for o, v, ts in recs:
            where.setdefault(v, []).append((p, o, ts))
    dups = {v: w for v, w in where.items() if len(w) > 1}
    if dups:
        problems.append(f"{len(dups)} duplicated values, e.g. {next(iter(dups.items()))}")
    lost = [v for v in acked if v not in where]
    if lost:
        problems.append(f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}")
    moved = [(v, acked[v], where[v][0]) for v in acked if v in where and where[v][0] != acked[v]]
    if moved:
        problems.append(f"{len(moved)} acknowledged records at another offset/timestamp, e.g. {moved[:2]}")
    # offsetsForTimes against brute force
    c = KafkaConsumer(bootstrap_servers=daemon.bootstrap, enable_auto_commit=False, request_timeout_ms=30000)
    for p, recs in data.items():
        if not recs:
            continue
        tp = TopicPartition(TOPIC, p)
        lo = min(ts for _, _, ts in recs)
        hi = max(ts for _, _, ts in recs)
        for _ in range(20):
            target = rng.randint(lo - 1000, hi + 1000)
            want = next(((o, ts) for o, _, ts in recs if ts >= target), None)
            ans = c.offsets_for_times({tp: target})[tp]
            got = None if ans is None else (ans.offset, ans.timestamp)
            if got != want:
                problems.append(f"offsets_for_times p{p} target {target}: broker {got}, brute force {want}")
                break
    c.close()
    # committed offsets
    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap, request_timeout_ms=30000)
    try:
        committed = {tp.partition: om.offset for tp, om in admin.list_group_offsets(GROUP)[GROUP].items()
                     if tp.topic == TOPIC and om.offset >= 0}
    finally:
        admin.close()
    for p in range(PARTITIONS):
        allowed = set(commit_maybe.get(p, set()))
        if p in commit_acked:
            allowed.add(commit_acked[p])
        got = committed.get(p)
        if got is None and p not in commit_acked:
            continue
        if got not in allowed:
            problems.append(f"partition {p}: committed offset {got}, acknowledged {commit_acked.get(p)}, "
                            f"in flight {sorted(commit_maybe.get(p, ()))}")
    return total, problems


def describe_group(daemon: Daemon, consumer: "GroupConsumer") -> str:
    """Diagnostics for a stuck consumer: the broker's view of the group and the client's assignment."""
    from kafka import KafkaAdminClient

    try:
        admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap, request_timeout_ms=10000)
        try:
            desc = admin.describe_groups([GROUP])
        finally:
            admin.close()
    except Exception as exc:  # noqa: BLE001
        desc = repr(exc)
    try:
        assignment = sorted(str(tp) for tp in consumer.c.assignment())
    except Exception as exc:  # noqa: BLE001
        assignment = repr(exc)
    return f"broker: {desc}; client assignment: {assignment}"


def verify_indexes(daemon: Daemon) -> list[str]:
    problems = []
    dirs = sorted(d for d in glob.glob(os.path.join(daemon.data_dir, "*-*")) if os.path.isdir(d))
    for d in dirs:
        if not glob.glob(os.path.join(d, "*.log")):
            continue
        out = subprocess.run([sys.executable, "-m", "sundial", "dump-log", "--files", d, "--verify-index-only"],
                             capture_output=True, text=True, cwd=REPO, timeout=300,
                             env=dict(os.environ, PYTHONPATH=REPO))
        if out.returncode != 0:
            problems.append(f"dump-log --verify-index-only {os.path.basename(d)}: exit {out.returncode}: "
                            f"{(out.stderr or out.stdout)[-500:]}")
    return problems


def stack_of(thread) -> str:
    frame = sys._current_frames().get(thread.ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(thread gone)"


# -- the loop ----------------------------------------------------------------------------------------------
def run(cycles: int, *, seed: int, workdir: str, verify_every: int = 5, ck_rate: float = 1500,
        kp_rate: float = 300, out=sys.stdout) -> list[CycleResult]:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    rng = random.Random(seed)
    daemon = Daemon(workdir, free_port())
    os.makedirs(workdir, exist_ok=True)
    daemon.start()
    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, topic_configs={
        "message.timestamp.before.max.ms": str(86_400_000), "index.interval.bytes": "1024"})])
    admin.close()
    ledger = Ledger()
    workers = [ConfluentProducer(daemon.bootstrap, ledger, random.Random(seed + 1), ck_rate),
               KafkaPythonProducer(daemon.bootstrap, ledger, random.Random(seed + 2), kp_rate),
               GroupConsumer(daemon.bootstrap, ledger)]
    for w in workers:
        w.start()
    results: list[CycleResult] = []
    print(f"crash loop: {cycles} cycles, seed {seed}, data in {workdir}", file=out, flush=True)
    try:
        for cycle in range(1, cycles + 1):
            for w in workers:
                w.resume()
            early = rng.random() < 0.1
            delay = rng.uniform(0.0, 0.3) if early else rng.uniform(0.3, 3.0)
            time.sleep(delay)
            daemon.kill()
            for w in workers:
                w.pause()
            restart_s = daemon.start()
            for w in workers:
                if not w.wait_settled(240):
                    raise RuntimeError(f"{w.name} did not settle; {ledger.sent} sent, {len(ledger.acked)} "
                                       f"acknowledged, {len(ledger.failed)} failed; its stack:\n{stack_of(w)}")
                if w.error is not None:
                    raise RuntimeError(f"{w.name} failed: {w.error!r}")
            total, problems = check(daemon, ledger, rng)
            result = CycleResult(cycle, delay, restart_s, total, len(ledger.acked), problems,
                                 commits=workers[2].commits)
            consumer = workers[2]
            if consumer.load_s - consumer.load_s_at_commit > consumer.NO_COMMIT_LOAD_S:
                problems.append(f"the group consumer has made no commit in {consumer.NO_COMMIT_LOAD_S:.0f} s of "
                                f"load ({result.commits} in all; {describe_group(daemon, consumer)})")
            if not problems and (cycle % verify_every == 0 or cycle == cycles):
                code = daemon.stop()
                if code != 0:
                    problems.append(f"clean stop exited {code}")
                problems += verify_indexes(daemon)
                result.index_verified = True
                daemon.start()
            results.append(result)
            print(result.line(), file=out, flush=True)
            if problems:
                break
    finally:
        for w in workers:
            w.stop_flag.set()
            w.run_flag.set()
        for w in workers:
            w.join(30)
        daemon.stop()
    ok = all(not r.problems for r in results)
    n_fail = len(ledger.failed)
    print(f"summary: {len(results)} cycles, {'all checks passed' if ok else 'FAILED'}; "
          f"{ledger.sent} sent, {len(ledger.acked)} acknowledged, {n_fail} given up by clients, "
          f"0 lost and 0 duplicated acknowledged records" if ok else
          f"summary: {len(results)} cycles, FAILED: {results[-1].problems}", file=out, flush=True)
    consumer = workers[2]
    print(f"group consumer: {consumer.consumed} records consumed, {consumer.commits} commits acknowledged, "
          f"{consumer.client_restarts} client restarts (kafka-python lost a SyncGroup answer), "
          f"last committed {dict(sorted(ledger.commit_acked.items()))}", file=out, flush=True)
    restarts = [r.restart_s for r in results]
    if restarts:
        print(f"restart after kill -9: median {sorted(restarts)[len(restarts) // 2]:.2f}s, "
              f"max {max(restarts):.2f}s; recoveries logged: {daemon.count_events('log_recovery_started')}, "
              f"segments truncated: {daemon.count_events('segment_truncated_during_recovery')}", file=out, flush=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="kept afterwards (default: a temporary directory, removed)")
    ap.add_argument("--verify-every", type=int, default=5, help="clean stop + dump-log verification period")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    workdir = args.workdir or tempfile.mkdtemp(prefix="sundial-crash-")
    print("command: python benchmarks/crash_loop.py " + " ".join(sys.argv[1:]) + f"  (seed {seed})", flush=True)
    t0 = time.monotonic()
    try:
        results = run(args.cycles, seed=seed, workdir=workdir, verify_every=args.verify_every)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"elapsed {time.monotonic() - t0:.0f}s")
    return 0 if results and all(not r.problems for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
