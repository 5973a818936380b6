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
import csv
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
from soak_checks import (RULES_TEXT, RUNQ_MAX_PCT, check_restart, final_check, loop_stalls, proc_stats, scrape,
                         steady_rules)
from soak_load import (GROUPS, TOPICS, TPS, AioProducer, ConfluentProducer, KafkaPythonProducer, Latency, Ledger,
                       MembershipController, percentile)
from soak_probes import ChurnWorker, LookupWorker, Prober

WATCHDOG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loop_watchdog")
COLUMNS = (["t_s", "epoch", "steady", "rss_mb", "fds", "sockets", "seg_files", "seg_fds", "seg_fds_per_file",
            "stale_fds", "threads", "connections", "cpu_pct", "runq_pct"]
           + [f"{kind}_p{q}_ms" for kind in ("probe", "produce", "fetch", "lookup", "host") for q in (50, 99)]
           + ["sent", "acked", "failed"] + [f"consumed_{g.name}" for g in GROUPS]
           + ["group_lag", "segments", "deleted_retention_ms", "deleted_consumed", "loop_stalls", "loop_stall_max_ms"])


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
        return time.monotonic() - t0

    def stop(self) -> tuple[int | str, float]:
        with self.lock:
            self.up = False
            proc = self.proc
        t0 = time.monotonic()
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


def _error_name(code: int) -> str:
    import kafka.errors

    return kafka.errors.for_code(code).__name__


def _n(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _f(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))


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


def report(args, ctx: Ctx, sampler: Sampler, restarts, stats, probes, final_stop, workdir) -> int:
    lookups, prober, churn = probes
    led = ctx.ledger
    rows = sampler.rows
    deleted_time, deleted_consumed = rows[-1]["deleted_retention_ms"], rows[-1]["deleted_consumed"]
    if not deleted_time:
        ctx.problem("time retention deleted no segment during the run (the soak did not exercise it)")
    if not deleted_consumed:
        ctx.problem("consumed retention deleted no segment during the run (the soak did not exercise it)")
    if lookups.wrong:
        ctx.problems.extend(f"lookup wrong: {w}" for w in lookups.wrong[:10])
    if not churn.completed:
        ctx.problem("no topic churn cycle completed")
    rules = steady_rules(rows, args.duration_s, args.sample_every_s)
    for col, m2, m4, limit, ok in rules:
        if ok is False:
            ctx.problem(f"{col}: last quarter {_f(m4)} vs second quarter {_f(m2)}, limit {limit}")
    write_csv(args.csv, rows)
    print()
    print("summary")
    table = [
        ("records", f"{led.sent} sent, {stats.get('acknowledged', 0)} acknowledged, {led.failed} given up by clients, "
                    f"{stats.get('present_unacknowledged', 0)} unacknowledged but present"),
        ("lost / duplicated / moved", f"{stats.get('lost', 0)} / {stats.get('duplicated', 0)} / {stats.get('moved', 0)} "
                                      f"({stats.get('present', 0)} acknowledged records checked in "
                                      f"{stats.get('surviving', 0)} surviving)"),
        ("deleted by retention", f"time {stats.get('deleted_time', 0)} records ({deleted_time} segments), consumed "
                                 f"{stats.get('deleted_consumed', 0)} records ({deleted_consumed} segments), "
                                 f"keep {stats.get('deleted_keep', 0)}; {stats.get('deleted_against_rules', 0)} against the rules"),
        ("restarts (SIGTERM)", f"{len(restarts)} + final; exit codes {sorted({str(r['exit']) for r in restarts} | {str(final_stop[0])})}; "
                               f"stop max {max([r['stop_s'] for r in restarts] + [final_stop[1]]):.1f}s; "
                               f"{sum(r['present'] for r in restarts)} records acknowledged before a SIGTERM found after it"),
        ("lookups during the run", f"{lookups.done} done: {lookups.correct} correct, {len(lookups.wrong)} wrong, "
                                   f"{lookups.unverifiable} unverifiable; {lookups.interrupted} cut by restarts, "
                                   f"{len(lookups.steady_errors)} failed otherwise"),
        ("lookups at the end", f"{stats.get('final_lookups', 0)} vs brute force, {stats.get('final_lookups_wrong', 0)} wrong"),
    ]
    for g in GROUPS:
        b = led.groups[g.name]
        table.append((f"group {g.name} ({g.client})",
                      f"{b.distinct} distinct records consumed, {stats.get(g.name + '_redelivered', 0)} redelivered "
                      f"(at least once), {b.joins} joins / {b.leaves} leaves, {b.assignments} assignments, "
                      f"{b.commits} commits ({b.commit_failures} failed), {b.poll_errors} poll errors, "
                      f"{b.client_restarts} client restarts, "
                      f"{stats.get(g.name + '_committed_undelivered', 0)} committed but undelivered, "
                      f"lag at end {stats.get(g.name + '_lag_at_end', 0)}"))
    table.append(("topic churn", f"{churn.completed} cycles, {churn.interrupted} cut by restarts, "
                                 f"{len(churn.steady_errors)} failed otherwise"))
    table.append(("raw Fetch errors", ", ".join(f"{n} x {_error_name(code)}" for code, n in prober.fetch_errors.items())
                  or "none"))
    cpu = [r["cpu_pct"] for r in rows if r["steady"] and r["cpu_pct"] is not None]
    if cpu:
        table.append(("daemon CPU", f"median {sorted(cpu)[len(cpu) // 2]:.1f}% of one core (steady samples)"))
    table.append(("harness CPU", f"{ctx.harness_cpu_pct:.0f}% of one core (this script and its clients, "
                                 f"averaged over the load phase)"))
    width = max(len(k) for k, _ in table)
    for k, v in table:
        print(f"  {k:<{width}}  {v}")
    print()
    print(f"  {'series':<18} {'Q2':>7} {'Q4':>7}  limit")
    for col, m2, m4, limit, ok in rules:
        print(f"  {col:<18} {_n(m2):>7} {_n(m4):>7}  {limit}  {'-' if ok is None else 'ok' if ok else 'FAILED'}")
    host = [[v for r in rows if r["steady"] and lo <= r["t_s"] < hi for v in r["_latency"].get("host", ())]
            for lo, hi in ((args.duration_s / 4, args.duration_s / 2), (3 * args.duration_s / 4, args.duration_s + 1))]
    print(f"  {'host ms p99':<18} {_n(_ms(percentile(host[0], 99))):>7} {_n(_ms(percentile(host[1], 99))):>7}  "
          f"(no rule: how late a 20 ms sleep woke up in the probe process - the host's own scheduling delay)")
    runq = [[r["runq_pct"] for r in rows if r["steady"] and lo <= r["t_s"] < hi and r.get("runq_pct") is not None]
            for lo, hi in ((args.duration_s / 4, args.duration_s / 2), (3 * args.duration_s / 4, args.duration_s + 1))]
    print(f"  {'runq % median':<18} {_n(percentile(runq[0], 50)):>7} {_n(percentile(runq[1], 50)):>7}  "
          f"(no rule: share of the time the daemon's loop thread waited for a CPU; latency counts only from "
          f"samples <= {RUNQ_MAX_PCT:g}%)")
    print(f"  rules: {RULES_TEXT}")
    print("  drift within each daemon lifetime, first -> last steady sample (no rule): " + "; ".join(
        f"daemon {e}: RSS {a['rss_mb']}->{b['rss_mb']} MB, fds {a['fds']}->{b['fds']} in {b['t_s'] - a['t_s']:.0f} s"
        for e, (a, b) in lifetimes(rows).items()))
    if args.loop_watchdog:
        print_stalls(ctx.daemon, rows[-1]["t_s"])
    notes = lookups.steady_errors[:3] + churn.steady_errors[:3]
    if notes:
        print("  client errors while the daemon was up (not failures): " + " | ".join(notes))
    if args.plot:
        plot(args.plot, rows, restarts)
    print(f"time series: {args.csv} ({len(rows)} samples every {args.sample_every_s:g} s)")
    if ctx.problems:
        print(f"FAILED ({len(ctx.problems)} problems; data and daemon logs kept in {workdir}):")
        for p in ctx.problems[:30]:
            print("  - " + p)
        return 1
    print("all checks passed")
    return 0


def lifetimes(rows: list[dict]) -> dict[int, tuple[dict, dict]]:
    """Daemon epoch -> (first, last) steady sample with an RSS, for epochs with two or more."""
    by_epoch: dict[int, list[dict]] = {}
    for r in rows:
        if r["steady"] and r["rss_mb"] is not None:
            by_epoch.setdefault(r["epoch"], []).append(r)
    return {e: (rs[0], rs[-1]) for e, rs in by_epoch.items() if len(rs) >= 2}


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def stall_class(ms: float, cpu_ms: float, runq_ms: float) -> str:
    if runq_ms >= ms / 2:
        return "waiting for a CPU (host)"
    if cpu_ms >= ms / 2:
        return "computing"
    return "blocked"


def print_stalls(daemon: Daemon, run_s: float) -> None:
    stalls = loop_stalls([daemon.log_path(e) for e in range(1, daemon.epoch + 1)])
    if not stalls:
        print("  event-loop stalls >= 50 ms (--loop-watchdog): none")
        return
    total = sum(s[0] for s in stalls)
    by_class: dict[str, list[float]] = {}
    for ms, cpu, runq, _, _ in stalls:
        by_class.setdefault(stall_class(ms, cpu, runq), []).append(ms)
    print(f"  event-loop stalls >= 50 ms (--loop-watchdog): {len(stalls)}, {total / 1000:.1f} s in all "
          f"({100 * total / 1000 / run_s:.2f}% of the run), max {max(s[0] for s in stalls):.0f} ms; "
          + ", ".join(f"{k}: {len(v)} ({sum(v) / 1000:.1f} s)" for k, v in sorted(by_class.items())))
    by_cause: dict[tuple[str, str, str], list] = {}
    for ms, cpu, runq, kernel, stack in stalls:
        by_cause.setdefault((stall_class(ms, cpu, runq), kernel, stack), []).append(ms)
    print("  the daemon's own stalls (not waiting for a CPU) by cause:")
    own = [(k, v) for k, v in by_cause.items() if not k[0].startswith("waiting")]
    for (cls, kernel, stack), items in sorted(own, key=lambda kv: -sum(kv[1]))[:6]:
        items.sort()
        print(f"    {len(items)} x {cls}, median {items[len(items) // 2]:.0f} ms, max {items[-1]:.0f} ms, "
              f"in {kernel}: {stack}")


def write_csv(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})


def plot(path: str, rows: list[dict], restarts: list[dict]) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed (pip install matplotlib); no plot drawn")
        return
    t = [r["t_s"] for r in rows]
    fig, axes = plt.subplots(5, 1, figsize=(11, 14), sharex=True)
    panels = [("daemon RSS (MB)", ["rss_mb"], False), ("daemon fds (all, on segment files, sockets, on deleted files) / threads / connections",
                                                        ["fds", "seg_fds", "sockets", "stale_fds", "threads", "connections"], False),
              ("p99 latency per interval (ms); x: longest event-loop stall (--loop-watchdog)",
               ["produce_p99_ms", "fetch_p99_ms", "lookup_p99_ms", "probe_p99_ms", "host_p99_ms"], True),
              ("daemon: % of one core used, % of the time its loop thread waited for a CPU",
               ["cpu_pct", "runq_pct"], False),
              ("records: acknowledged, and distinct ones consumed by each group (4 of the 7 partitions)",
               ["acked"] + [f"consumed_{g.name}" for g in GROUPS], False)]
    for ax, (title, cols, log) in zip(axes, panels):
        for col in cols:
            ax.plot(t, [r[col] if r[col] is not None else float("nan") for r in rows], label=col, linewidth=1)
        for r in restarts:
            ax.axvline(r["t_s"], color="grey", linestyle=":", linewidth=0.8)
        if log:
            ax.set_yscale("log")
            stalls = [(r["t_s"], r["loop_stall_max_ms"]) for r in rows if r.get("loop_stall_max_ms")]
            if stalls:
                ax.scatter(*zip(*stalls), marker="x", color="black", s=18, label="loop stall max", zorder=3)
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("seconds (dotted: restarts)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


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
