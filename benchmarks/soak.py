"""Soak: one daemon under hours of mixed, bounded client load, restarted every few minutes;
afterwards nothing acknowledged may be lost or duplicated, every timestamp lookup must have
been right, and RSS, open files and latency must stay flat.

    python benchmarks/soak.py                                  # 60 minutes, a restart every 10
    python benchmarks/soak.py --duration-s 120 --restart-every-s 45
    python benchmarks/soak.py --duration-s 300 --plot /tmp/soak.png --csv /tmp/soak.csv

The daemon runs as a subprocess on a free loopback port with its own data directory (a
temporary one unless ``--workdir``), retention checked every 5 s. Load, all of it at a
fixed rate (``--rate`` records/s in total, default 200) so it never saturates the host:

* producers: confluent-kafka (acks=all, idempotent; half the rate), kafka-python with its
  defaults and aiokafka with its defaults (a quarter each), round-robin over 7 partitions
  of three topics: ``soak-time`` (retention.ms 30 s, 64 KiB / 10 s segments),
  ``soak-consumed`` (consumed-log retention: ``log.retention.commitoffset.enable`` with
  ``retention.commitoffset.ms`` 15 s, 64 KiB / 10 s segments) and ``soak-keep`` (nothing
  deleted). CreateTime is now minus up to 5 s, so timestamps are not monotonic;
* two consumer groups on ``soak-consumed`` and ``soak-keep``, committing synchronously at
  most once a second: ``soak-g1`` (kafka-python, 2-3 members, round-robin assignor) and
  ``soak-g2`` (confluent-kafka, 1-2 members); every ``--rebalance-every-s`` one group gains
  or loses a member;
* offsetsForTimes at random targets about every ``--lookup-every-s`` (see ``soak_probes``);
* topic churn every ``--churn-every-s``: create, produce, read back, lookup, delete (two
  names reused, so a topic is re-created under a name just deleted);
* a probe process (outside this one, so that the harness's threads do not add to what it
  measures) timing, every 0.2 s, an ApiVersions, a Fetch (max_wait_ms 0) and a
  ListOffsets by timestamp round trip on a raw connection;
* every ``--restart-every-s``: SIGTERM, wait for the exit (code 0 expected), start again
  on the same data directory and port.

Segments of ``soak-time`` and ``soak-consumed`` roll every 10 s (or 64 KiB) and their files
are removed 5 s after retention deletes them (``log.segment.delete.delay.ms``), so the whole
delete path runs many times a minute. No group reads ``soak-time``: a group's commits would
let consumed retention delete its segments before time retention could.

Every ``--sample-every-s`` it records (CSV, ``--csv``): the daemon's RSS, open fds, socket
fds, threads (/proc), connections (the daemon's ``sundial_connections`` gauge; its
Prometheus endpoint is on), CPU, consumer-group lag, segments and retention deletions; the
share of the interval the daemon's loop thread waited for a CPU (``runq_pct``); the
p50/p99 over the interval of produce latency (confluent-kafka's own produce()-to-report
time, ``Message.latency()``), of the probe's Fetch, ListOffsets and ApiVersions round
trips - the ApiVersions one stands in for event-loop lag, which the daemon does not export -
and of how late a 20 ms sleep wakes up in the probe process (the host's own scheduling
delay, for context); records sent, acknowledged, consumed by each group.
``--loop-watchdog`` also loads ``benchmarks/loop_watchdog`` into the daemon (through its
``PYTHONPATH``; nothing in the broker changes), which logs every event-loop stall of
50 ms or more with the stack that caused it; they are counted per sample and summarised.

Checks (exit status 1 if any fails):

1. after each restart: every record acknowledged during the daemon lifetime that the
   SIGTERM ended is in the log at its offset (or below the log start offset);
2. at the end, load stopped, every surviving partition read from its log start offset:
   offsets contiguous; every record a known send with its CreateTime; no send twice; every
   acknowledged record present at its offset unless below the log start offset, where it
   must have been deleted legitimately: ``soak-time`` records older than retention.ms when
   the log start was first seen past them, ``soak-consumed`` records older than
   retention.commitoffset.ms and delivered to both groups, ``soak-keep`` never;
3. each group's committed offsets cover only records it was given (redelivery after a
   rebalance or restart, at least once, is counted and reported, not an error);
4. every offsetsForTimes answer during the run equals the first offset at or after the log
   start offset whose timestamp >= the target (see ``soak_probes.judge``), and 20 per
   partition at the end equal brute force over the log;
5. topic churn: a re-created topic holds exactly what was written to it, from offset 0;
6. every SIGTERM ends with exit code 0; no load thread died; retention really deleted
   segments for both reasons;
7. flat and steady (``soak_checks.RULES_TEXT``, printed with the table). A sample is
   steady when the daemon was up for its whole interval and the interval began at least
   ``--warmup-s`` after the daemon's (re)start; Q2 is the steady samples in [D/4, D/2), Q4
   those in [3D/4, D] for a run of D seconds (the first quarter is warm-up).
   RSS, fds, threads: median(Q4) <= median(Q2) x 1.10 + slack (0 MB, 5 fds, 2 threads),
   fds also + the fds of the extra live segment files when Q4 holds more (each segment
   keeps its files open, and how many segments are live follows retention's rhythm); fds
   on deleted files (a closed segment's leaked descriptor): median(Q4) <= median(Q2) + 2;
   a drop passes. Latency (produce, fetch, lookup, ApiVersions): the p98 of all of Q4's
   latencies <= 2 x (the p99 of all of Q2's + the growth, if any, of the host's own p99
   scheduling delay from Q2 to Q4) + 5 ms, i.e. at most 2% of Q4 above that line - the
   tail may grow neither twice as high nor twice as heavy, and what a busier host explains
   is not blamed on the daemon. Pooled quarters, not medians of per-interval p99s: a rare
   stall makes an interval's p99 jump between two modes. Only samples in which the
   daemon's loop thread waited for a CPU (run-queue delay, /proc/<pid>/schedstat) at most
   25% of the time count: beyond that the host, not the daemon, sets the latency. Judged
   only with at least 120 s of such samples and 200 latencies in each quarter (so from runs
   of about 10 minutes, on a host not saturated by other work).
   The drift of RSS and fds within each daemon lifetime is printed too, without a rule.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from array import array

from bench_daemon import cpu_seconds, free_port, start_sundial
from soak_checks import check_restart, final_check, proc_stats, scrape
from soak_load import (TOPICS, TPS, AioProducer, ConfluentProducer, KafkaPythonProducer, Latency, Ledger,
                       MembershipController, percentile)
from soak_probes import ChurnWorker, LookupWorker, Prober
from soak_report import COLUMNS, _f, report

WATCHDOG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loop_watchdog")



class Daemon:
    """The daemon under test: same port, metrics port and data directory across restarts."""

    def __init__(self, workdir: str, env: dict | None = None) -> None:
        self.workdir = workdir
        self.env = env or {}
        self.port, self.metrics_port = free_port(), free_port()
        self.proc = None
        self.epoch = 0
        self.up = False
        self.started_at = 0.0
        self.serving: list[list] = []   # per daemon: [wall time it listened, wall time of its SIGTERM or None]
        self.lock = threading.Lock()

    def start(self) -> float:
        t0 = time.monotonic()
        proc, _ = start_sundial(os.path.join(self.workdir, "data"), {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "sundial.metrics.listener": f"127.0.0.1:{self.metrics_port}",
            "log.retention.check.interval.ms": "5000", "log.initial.task.delay.ms": "5000",
            "log.segment.delete.delay.ms": "5000", "log.retention.commitoffset.enable": "true",
            "group.initial.rebalance.delay.ms": "500", "auto.create.topics.enable": "false"},
            log_path=self.log_path(self.epoch + 1), cwd=self.workdir,
            timeout_s=120, port=self.port, env=self.env)
        with self.lock:
            self.proc, self.epoch, self.up, self.started_at = proc, self.epoch + 1, True, time.monotonic()
            self.serving.append([time.time(), None])   # wall clock: listening since, SIGTERM at
        return time.monotonic() - t0

    def stop(self) -> tuple[int | str, float]:
        with self.lock:
            self.up = False
            proc = self.proc
        t0 = time.monotonic()
        self.serving[-1][1] = time.time()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(120)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            proc.kill()
            code = proc.wait()
            code = f"killed after 120 s (was {code})"
        return code, time.monotonic() - t0

    def log_path(self, epoch: int) -> str:
        return os.path.join(self.workdir, f"sundial-{epoch}.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def state(self) -> tuple[bool, int, int | None, float]:
        with self.lock:
            return self.up, self.epoch, self.proc.pid if self.proc else None, self.started_at


class Ctx:
    """What the workers share."""

    def __init__(self, daemon: Daemon, seed: int) -> None:
        self.daemon = daemon
        self.bootstrap = daemon.bootstrap
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        self.latency = Latency()
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.harness_cpu_pct = 0.0

    def daemon_up(self) -> bool:
        return self.daemon.state()[0]

    def epoch(self) -> int:
        return self.daemon.state()[1]

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)


class Sampler(threading.Thread):
    def __init__(self, ctx: Ctx, every_s: float, warmup_s: float, t0: float, watchdog: bool) -> None:
        super().__init__(name="sampler", daemon=True)
        self.ctx, self.every_s, self.warmup_s, self.t0 = ctx, every_s, warmup_s, t0
        self.watchdog = watchdog
        self.log_pos: dict[int, int] = {}
        self.rows: list[dict] = []
        self.lso_obs: dict[int, list[tuple[int, int]]] = {}
        self.deleted: dict[int, dict] = {}           # epoch -> last retention-deletion counters
        self.stopping = threading.Event()
        self.prev = (t0, 0, None)                    # (time, epoch, cpu seconds)
        self.prev_runq: tuple[int, int] | None = None  # (epoch, run-queue ns of the loop thread)
        self.print_every = max(1, round(60 / every_s))

    def run(self) -> None:
        k = 1
        while not self.stopping.wait(max(0.0, self.t0 + k * self.every_s - time.monotonic())):
            self.sample()
            k += 1

    def sample(self) -> dict:
        now = time.monotonic()
        up, epoch, pid, started = self.ctx.daemon.state()
        t_prev, epoch_prev, cpu_prev = self.prev
        row = {c: None for c in COLUMNS}
        row.update(t_s=round(now - self.t0, 1), epoch=epoch,
                   steady=bool(up and epoch == epoch_prev and t_prev >= started + self.warmup_s))
        cpu = cpu_seconds(pid) if up else None
        if cpu is not None and cpu_prev is not None and epoch == epoch_prev:
            row["cpu_pct"] = round(100 * (cpu - cpu_prev) / (now - t_prev), 1)
        self.prev = (now, epoch, cpu)
        stats = proc_stats(pid, os.path.join(self.ctx.daemon.workdir, "data")) if up and pid else None
        if stats:
            row.update(stats)
            row["rss_mb"] = round(stats["rss_mb"], 1)
            if stats["seg_files"]:
                row["seg_fds_per_file"] = round(stats["seg_fds"] / stats["seg_files"], 3)
            if self.prev_runq and self.prev_runq[0] == epoch:
                row["runq_pct"] = round(100 * (stats["_runq_ns"] - self.prev_runq[1]) / 1e9 / (now - t_prev), 2)
            self.prev_runq = (epoch, stats["_runq_ns"])
        m = scrape(self.ctx.daemon.metrics_port) if up else None
        if m:
            row["connections"], row["group_lag"] = m["connections"], m["group_lag"]
            row["segments"] = sum(n for tp, n in m["segments"].items() if tp in TPS)
            self.deleted[epoch] = m["deleted"]
            wall = int(time.time() * 1000)
            for i, tp in enumerate(TPS):
                if tp in m["lso"]:
                    obs = self.lso_obs.setdefault(i, [])
                    if not obs or obs[-1][1] != m["lso"][tp]:
                        obs.append((wall, m["lso"][tp]))
        row["deleted_retention_ms"] = sum(d.get("retention_ms", 0) for d in self.deleted.values())
        row["deleted_consumed"] = sum(d.get("consumed", 0) for d in self.deleted.values())
        row["_latency"] = {k: array("d", v) for k, v in self.ctx.latency.drain().items()}
        for kind, values in row["_latency"].items():
            for q in (50, 99):
                v = percentile(values, q)
                row[f"{kind}_p{q}_ms"] = None if v is None else round(v * 1000, 2)
        if self.watchdog:
            stalls = self.new_stalls(epoch)
            row["loop_stalls"] = len(stalls)
            row["loop_stall_max_ms"] = max(stalls, default=None)
        sent, acked, failed, consumed = self.ctx.ledger.counts()
        row.update(sent=sent, acked=acked, failed=failed, **{f"consumed_{g}": n for g, n in consumed.items()})
        self.rows.append(row)
        if len(self.rows) % self.print_every == 0:
            print(f"  t={row['t_s']:6.0f}s daemon {epoch} {'steady' if row['steady'] else 'warm-up'}: "
                  f"rss {_f(row['rss_mb'])} MB, fds {_f(row['fds'])}, threads {_f(row['threads'])}, "
                  f"connections {_f(row['connections'])}, cpu {_f(row['cpu_pct'])}%; p99 ms produce "
                  f"{_f(row['produce_p99_ms'])} fetch {_f(row['fetch_p99_ms'])} lookup {_f(row['lookup_p99_ms'])} "
                  f"probe {_f(row['probe_p99_ms'])}; acked {acked}, consumed "
                  f"{'/'.join(str(n) for n in consumed.values())}, group lag {_f(row['group_lag'])}", flush=True)
        return row

    def new_stalls(self, epoch: int) -> list[float]:
        """Durations (ms) of the LOOP_STALL lines the daemon logs wrote since the last sample."""
        out = []
        for e in range(1, epoch + 1):
            try:
                with open(self.ctx.daemon.log_path(e), "rb") as fh:
                    fh.seek(self.log_pos.get(e, 0))
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            self.log_pos[e] = self.log_pos.get(e, 0) + end
            for line in data[:end].splitlines():
                if line.startswith(b"LOOP_STALL ms="):
                    out.append(float(line.split()[1][3:]))
        return out


def create_topics(bootstrap: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="soak-setup")
    try:
        admin.create_topics([NewTopic(t.name, t.partitions, 1, topic_configs=t.configs) for t in TOPICS])
    finally:
        admin.close()


def run(args, seed: int, workdir: str) -> int:
    env = dict(kv.split("=", 1) for kv in args.daemon_env)
    if args.loop_watchdog:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (WATCHDOG_DIR, env.get("PYTHONPATH", os.environ.get(
            "PYTHONPATH", ""))) if p)
    daemon = Daemon(workdir, env)
    try:
        return soak(args, seed, workdir, daemon)
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


def soak(args, seed: int, workdir: str, daemon: Daemon) -> int:
    daemon.start()
    create_topics(daemon.bootstrap)
    ctx = Ctx(daemon, seed)
    t0 = time.monotonic()
    run_start_ms = int(time.time() * 1000)
    producers = [ConfluentProducer("ck", ctx, args.rate * 0.5, 0), KafkaPythonProducer("kp", ctx, args.rate * 0.25, 2),
                 AioProducer("aio", ctx, args.rate * 0.25, 4)]
    membership = MembershipController(ctx, args.rebalance_every_s)
    probes = [LookupWorker(ctx, args.lookup_every_s, run_start_ms), Prober(ctx), ChurnWorker(ctx, args.churn_every_s)]
    for w in producers:
        w.start()
    membership.start_all()
    membership.start()
    for w in probes:
        w.start()
    sampler = Sampler(ctx, args.sample_every_s, args.warmup_s, t0, args.loop_watchdog)
    sampler.start()
    restarts: list[dict] = []
    end = t0 + args.duration_s
    next_restart = t0 + args.restart_every_s
    print(f"daemon on {daemon.bootstrap}, metrics on 127.0.0.1:{daemon.metrics_port}, data in {workdir}", flush=True)
    while time.monotonic() < end:
        time.sleep(max(0.0, min(0.5, end - time.monotonic())))
        dead = [w for w in producers + probes + [membership] if not w.is_alive() and w.error]
        if dead:
            ctx.problem(f"load thread {dead[0].name} died: {dead[0].error}")
            break
        if time.monotonic() >= next_restart and time.monotonic() < end - 2 * args.sample_every_s:
            ended = daemon.epoch
            code, stop_s = daemon.stop()
            with ctx.ledger.lock:
                ctx.ledger.epoch += 1
            start_s = daemon.start()
            present, below, problems = check_restart(ctx, ended)
            t = round(time.monotonic() - t0, 1)
            restarts.append({"t_s": t, "exit": code, "stop_s": stop_s, "start_s": start_s, "present": present,
                             "below_log_start": below})
            print(f"  t={t:6.0f}s restart {len(restarts)}: SIGTERM -> exit {code} in {stop_s:.1f}s, started in "
                  f"{start_s:.1f}s; records acknowledged by daemon {ended}: {present} present, {below} below the "
                  f"log start offset{', PROBLEMS: ' + '; '.join(problems) if problems else ''}", flush=True)
            if code != 0:
                ctx.problem(f"restart {len(restarts)}: SIGTERM ended the daemon with exit code {code}")
            for p in problems:
                ctx.problem(f"restart {len(restarts)}: {p}")
            next_restart += args.restart_every_s
    ctx.harness_cpu_pct = 100 * (cpu_seconds(os.getpid()) or 0.0) / (time.monotonic() - t0)
    sampler.stopping.set()
    sampler.join(30)
    if not sampler.rows or sampler.rows[-1]["t_s"] < args.duration_s - 1:
        sampler.sample()
    print("load stopped; settling and reading every partition back", flush=True)
    for group in (probes + [membership], producers):
        for w in group:
            w.stop()
        for w in group:
            w.join(180)
    membership.stop_all()
    probes[0].verify(final=True)
    for w in producers + probes + [membership]:
        if w.error:
            ctx.problem(f"load thread {w.name} failed: {w.error}")
        if getattr(w, "unflushed", 0):
            ctx.problem(f"{w.name}: {w.unflushed} records still undelivered after a 120 s flush")
    ctx.problems.extend(f"ledger: {e}" for e in ctx.ledger.errors)
    stats, problems = final_check(ctx, sampler.lso_obs, random.Random(seed))
    ctx.problems.extend(problems)
    code, stop_s = daemon.stop()
    if code != 0:
        ctx.problem(f"the final SIGTERM ended the daemon with exit code {code}")
    return report(args, ctx, sampler, restarts, stats, probes, (code, stop_s), workdir)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=3600)
    ap.add_argument("--restart-every-s", type=float, default=600)
    ap.add_argument("--sample-every-s", type=float, default=10)
    ap.add_argument("--warmup-s", type=float, default=10, help="samples starting sooner after a (re)start are not steady")
    ap.add_argument("--rate", type=float, default=200, help="records/s produced in total")
    ap.add_argument("--rebalance-every-s", type=float, default=30)
    ap.add_argument("--lookup-every-s", type=float, default=1.0)
    ap.add_argument("--churn-every-s", type=float, default=20)
    ap.add_argument("--csv", default=None, help="time series (default: sundial-soak-<time>.csv in the temp dir)")
    ap.add_argument("--plot", default=None, metavar="PATH.png", help="draw the time series (needs matplotlib)")
    ap.add_argument("--workdir", default=None, help="kept afterwards (default: a temporary directory, removed "
                                                    "unless a check fails)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--loop-watchdog", action="store_true",
                    help="load benchmarks/loop_watchdog into the daemon: event-loop stalls >= 50 ms with the "
                         "stack that caused them, counted per sample and summarised")
    ap.add_argument("--daemon-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of the daemon, for diagnosis (e.g. PYTHONASYNCIODEBUG=1)")
    args = ap.parse_args()
    for name in ("kafka", "aiokafka"):   # the clients log every refused connection while the daemon restarts
        logging.getLogger(name).setLevel(logging.CRITICAL)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    args.csv = args.csv or os.path.join(tempfile.gettempdir(), time.strftime("sundial-soak-%Y%m%d-%H%M%S.csv"))
    workdir = args.workdir or tempfile.mkdtemp(prefix="sundial-soak-")
    os.makedirs(workdir, exist_ok=True)
    print("command: python benchmarks/soak.py " + " ".join(sys.argv[1:]) + f"  (seed {seed})", flush=True)
    t0 = time.monotonic()
    code = 1
    try:
        code = run(args, seed, workdir)
    finally:
        print(f"elapsed {time.monotonic() - t0:.0f}s", flush=True)
        if not args.workdir and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
