"""The soak benchmark's measurements and verdicts (used by ``benchmarks/soak.py``).

* :func:`proc_stats`, :func:`scrape` - the daemon's RSS, fds, sockets, threads from /proc and
  its Prometheus endpoint (connections, per-partition log start/end offsets and segments,
  segments deleted by retention, consumer-group lag).
* :func:`check_restart` - the records acknowledged during a daemon lifetime are all in the
  log, at their offsets, after the SIGTERM that ended it (or below the log start offset).
* :func:`final_check` - with the load stopped, every surviving partition read from its log
  start offset and compared with the ledger (see ``soak.py`` for the rules).
* :func:`steady_rules` - flatness of RSS/fds/threads and steadiness of latency percentiles.
"""

from __future__ import annotations

import os
import random
import statistics
import time
import urllib.request
from collections import Counter

from soak_load import (CONSUMED_RETENTION_MS, GROUPS, KIND, TIME_RETENTION_MS, TPS, Book, make_value,
                       parse_value, percentile)
from soak_probes import read_range

# -- sampling -----------------------------------------------------------------------------------------------


SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def proc_stats(pid: int, data_dir: str) -> dict | None:
    """RSS (MB), threads and open fds of ``pid`` (None when it is gone): all fds, sockets, the
    distinct segment files under ``data_dir`` held open (``seg_files``) and the fds on them
    (``seg_fds``), and fds on files already deleted or renamed ``.deleted`` (``stale_fds``)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            status = dict(line.split(":", 1) for line in fh if ":" in line)
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, KeyError, ValueError):
        return None
    sockets = seg_fds = stale = 0
    seg_files = set()
    prefix = os.path.realpath(data_dir) + os.sep
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            sockets += 1
            continue
        gone = target.endswith(" (deleted)")
        path = target[:-len(" (deleted)")] if gone else target
        if path.endswith(".deleted"):
            gone = True
            path = path[:-len(".deleted")]
        stale += gone
        if path.startswith(prefix) and path.endswith(SEGMENT_SUFFIXES):
            seg_fds += 1
            seg_files.add(path)
    try:
        with open(f"/proc/{pid}/schedstat") as fh:   # the main (event-loop) thread: on-CPU ns, run-queue ns
            on_cpu_ns, runq_ns = (int(x) for x in fh.read().split()[:2])
        return {"rss_mb": int(status["VmRSS"].split()[0]) / 1024, "threads": int(status["Threads"]),
                "fds": len(fds), "sockets": sockets, "seg_files": len(seg_files), "seg_fds": seg_fds,
                "stale_fds": stale, "_runq_ns": runq_ns}
    except (OSError, KeyError, ValueError):
        return None


def scrape(metrics_port: int) -> dict | None:
    """The figures the soak reads from the daemon's Prometheus endpoint, or None."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    out = {"connections": None, "lso": {}, "leo": {}, "segments": {}, "deleted": Counter(), "group_lag": 0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            tp = (s.labels.get("topic"), int(s.labels["partition"])) if "partition" in s.labels else None
            if s.name == "sundial_connections":
                out["connections"] = int(s.value)
            elif s.name == "sundial_log_start_offset":
                out["lso"][tp] = int(s.value)
            elif s.name == "sundial_log_end_offset":
                out["leo"][tp] = int(s.value)
            elif s.name == "sundial_log_segments":
                out["segments"][tp] = int(s.value)
            elif s.name == "sundial_retention_deleted_segments_total":
                out["deleted"][s.labels["reason"]] += int(s.value)
            elif s.name == "sundial_consumer_group_lag":
                out["group_lag"] += int(s.value)
    return out


# -- restart check ------------------------------------------------------------------------------------------


def check_restart(ctx, epoch: int) -> tuple[int, int, list[str]]:
    """After the daemon of ``epoch`` was stopped and a new one started: every record acknowledged
    during ``epoch`` is present at its offset, unless retention has since deleted it (below the
    log start offset; such records are checked by :func:`final_check`'s retention rules).
    Returns (present, below log start, problems)."""
    acked = ctx.ledger.acked_in_epoch(epoch)
    ranges = {TPS[tpi]: (min(r[0] for r in recs), max(r[0] for r in recs) + 1) for tpi, recs in acked.items()}
    data, starts = read_range(ctx.bootstrap, ranges)
    present = below = 0
    problems = []
    for tpi, recs in acked.items():
        tp = TPS[tpi]
        got = {o: (v, ts) for o, v, ts in data[tp]}
        for off, value, ts in recs:
            if off < starts.get(tp, 0):
                below += 1
            elif got.get(off) == (value, ts):
                present += 1
            else:
                problems.append(f"{tp[0]}-{tp[1]} offset {off}: acknowledged {value[:24]!r}@{ts} before the "
                                f"SIGTERM that ended daemon {epoch}, found {got.get(off)!r:.60} after the restart")
    return present, below, problems[:10] + ([f"... {len(problems) - 10} more"] if len(problems) > 10 else [])


# -- final check --------------------------------------------------------------------------------------------


def first_seen_below(lso_obs: list[tuple[int, int]], offset: int) -> int | None:
    """Wall time (ms) of the first observation whose log start offset was above ``offset``."""
    for t_ms, lso in lso_obs:
        if lso > offset:
            return t_ms
    return None


def final_check(ctx, lso_obs: dict, rng: random.Random) -> tuple[dict, list[str]]:
    """Read every surviving partition and compare with the ledger; see ``soak.py``'s docstring.
    ``lso_obs``: partition index -> [(wall ms, log start offset)] observed during the run."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    problems: list[str] = []
    c = KafkaConsumer(bootstrap_servers=ctx.bootstrap, enable_auto_commit=False, request_timeout_ms=30_000,
                      client_id="soak-final")
    tps = [TopicPartition(t, p) for t, p in TPS]
    ends = c.end_offsets(tps)          # the load has stopped: fixed from now on
    data, after = read_range(ctx.bootstrap, {(tp.topic, tp.partition): (0, ends[tp]) for tp in tps})
    now_ms = int(time.time() * 1000)
    starts = {}                        # first offset read: everything below it was deleted by retention
    for i, tp in enumerate(tps):
        recs = data[(tp.topic, tp.partition)]
        starts[tp] = recs[0][0] if recs else ends[tp]
        lso_after = after.get((tp.topic, tp.partition), ends[tp])
        lso_obs.setdefault(i, []).append((now_ms, lso_after))
        if starts[tp] > lso_after:
            problems.append(f"{tp.topic}-{tp.partition}: the read began at offset {starts[tp]} though the log "
                            f"start offset was {lso_after} after it")
    ledger = ctx.ledger
    stats = Counter()
    seen: dict[tuple[str, int], list] = {}
    at: list[dict[int, tuple[bytes, int]]] = []
    for i, tp in enumerate(tps):
        recs = data[(tp.topic, tp.partition)]
        at.append({o: (v, ts) for o, v, ts in recs})
        stats["surviving"] += len(recs)
        if [o for o, _, _ in recs] != list(range(starts[tp], ends[tp])):
            problems.append(f"{tp.topic}-{tp.partition}: offsets are not contiguous from {starts[tp]} to the "
                            f"end {ends[tp]} ({len(recs)} records read)")
        for o, v, ts in recs:
            parsed = parse_value(v)
            if parsed is None or parsed[0] not in ledger.books or parsed[1] >= len(ledger.books[parsed[0]].state):
                problems.append(f"{tp.topic}-{tp.partition} offset {o}: a value nobody sent: {v[:40]!r}")
                continue
            if parsed[2] != ts:
                problems.append(f"{tp.topic}-{tp.partition} offset {o}: timestamp {ts}, sent with {parsed[2]}")
            seen.setdefault(parsed[:2], []).append((i, o))
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    stats["duplicated"] = len(dups)
    for (name, seq), where in list(dups.items())[:5]:
        problems.append(f"{name}:{seq} appears {len(where)} times: {[(TPS[i], o) for i, o in where]}")
    with ledger.lock:
        books = list(ledger.books.values())
        delivered = {g: dict(b.delivered) for g, b in ledger.groups.items()}
    lost, moved = [], []
    for book in books:
        for seq, state in enumerate(book.state):
            if state != Book.ACKED:
                if (book.name, seq) in seen:
                    stats["present_unacknowledged"] += 1
                continue
            stats["acknowledged"] += 1
            tpi, off, ts = book.tp[seq], book.offset[seq], book.ts[seq]
            topic, p = TPS[tpi]
            if off >= starts[tps[tpi]]:
                got = at[tpi].get(off)
                if got is None:
                    lost.append(f"{book.name}:{seq} at {topic}-{p}/{off}")
                elif got != (make_value(book.name, seq, ts), ts):
                    moved.append(f"{book.name}:{seq} acknowledged at {topic}-{p}/{off}, found {got[0][:24]!r}")
                else:
                    stats["present"] += 1
                continue
            kind = KIND[topic]
            stats[f"deleted_{kind}"] += 1
            t_del = first_seen_below(lso_obs.get(tpi, []), off)
            why = None
            if kind == "keep":
                why = "deleted from a topic without retention"
            elif kind == "time" and t_del is not None and not ts < t_del - TIME_RETENTION_MS:
                why = f"deleted by {t_del}, before retention.ms={TIME_RETENTION_MS} had passed"
            elif kind == "consumed":
                if t_del is not None and not ts < t_del - CONSUMED_RETENTION_MS:
                    why = f"deleted by {t_del}, before retention.commitoffset.ms={CONSUMED_RETENTION_MS} had passed"
                for g in GROUPS:
                    counts = delivered[g.name].get(tpi)
                    if counts is not None and (off >= len(counts) or counts[off] == 0):
                        why = f"deleted by consumed retention but never delivered to group {g.name}"
            if why:
                stats["deleted_against_rules"] += 1
                if stats["deleted_against_rules"] <= 5:
                    problems.append(f"{book.name}:{seq} at {topic}-{p}/{off} (timestamp {ts}) {why}")
    stats["lost"], stats["moved"] = len(lost), len(moved)
    if lost:
        problems.append(f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}")
    if moved:
        problems.append(f"{len(moved)} acknowledged records at another offset or with another value, e.g. {moved[:3]}")
    # consumer groups: committed offsets cover only delivered records; redeliveries are reported
    admin = KafkaAdminClient(bootstrap_servers=ctx.bootstrap, request_timeout_ms=30_000, client_id="soak-final")
    try:
        for g in GROUPS:
            committed = {(tp.topic, tp.partition): om.offset
                         for tp, om in admin.list_group_offsets(g.name)[g.name].items() if om.offset >= 0}
            gstats = Counter()
            for tpi, counts in delivered[g.name].items():
                tp = tps[tpi]
                gstats["redelivered"] += sum(c - 1 for c in counts if c > 1)
                upto = committed.get((tp.topic, tp.partition), 0)
                missing = [o for o in range(starts[tp], upto) if o >= len(counts) or counts[o] == 0]
                gstats["committed_undelivered"] += len(missing)
                if missing:
                    problems.append(f"group {g.name} committed {upto} on {tp.topic}-{tp.partition} but never got "
                                    f"{len(missing)} surviving records below it, e.g. offset {missing[0]}")
                gstats["lag_at_end"] += max(0, ends[tp] - upto)
            stats.update({f"{g.name}_{k}": v for k, v in gstats.items()})
    finally:
        admin.close()
    # offsetsForTimes against brute force over what was read (acknowledged or not); retention still
    # runs, so the answer is computed from the log start offsets read just before and just after
    checked = 0
    for i, tp in enumerate(tps):
        recs = data[(tp.topic, tp.partition)]
        if not recs:
            continue
        lo, hi = min(r[2] for r in recs), max(r[2] for r in recs)
        for _ in range(20):
            target = rng.randint(lo - 1000, hi + 1000)
            lso0 = c.beginning_offsets([tp])[tp]
            ans = c.offsets_for_times({tp: target})[tp]
            lso1 = c.beginning_offsets([tp])[tp]
            wants = {next(((o, ts) for o, _, ts in recs if ts >= target and o >= lso), None) for lso in (lso0, lso1)}
            want = " or ".join(map(str, wants))
            got = None if ans is None else (ans.offset, ans.timestamp)
            checked += 1
            if got not in wants:
                stats["final_lookups_wrong"] += 1
                problems.append(f"offsets_for_times {tp.topic}-{tp.partition} target {target}: broker {got}, "
                                f"brute force over the log {want}")
    stats["final_lookups"] = checked
    c.close()
    return dict(stats), problems


# -- steadiness rules ---------------------------------------------------------------------------------------

FLAT_RULES = [  # (column, relative growth allowed, absolute slack)
    ("rss_mb", 0.10, 0.0),
    ("fds", 0.10, 5.0),         # plus the fds of any extra live segment files, see steady_rules
    ("stale_fds", 0.0, 2.0),
    ("threads", 0.10, 2.0),
]
LATENCY_RULES = [  # (kind, factor, absolute slack in ms)
    ("produce", 2.0, 5.0),
    ("fetch", 2.0, 5.0),
    ("lookup", 2.0, 5.0),
    ("probe", 2.0, 5.0),
]
MIN_LATENCY_SAMPLES = 200
MIN_LATENCY_STEADY_S = 120
RUNQ_MAX_PCT = 25.0
RULES_TEXT = ("steady samples: the daemon was up for the whole interval, which began at least the warm-up "
              "after its (re)start; Q2 = steady samples in [D/4, D/2), Q4 = in [3D/4, D]. "
              "Flat: median(Q4) <= median(Q2) * 1.10 + slack (RSS 0, fds 5, threads 2; fds also + the fds of the "
              "extra live segment files if Q4 holds more), fds on deleted files median(Q4) <= median(Q2) + 2; "
              "a drop passes. "
              "Steady latency: the p98 of all Q4 latencies <= 2 x (the p99 of all Q2 latencies + the growth of the "
              "host's own p99 scheduling delay from Q2 to Q4, if any) + 5 ms, i.e. at most 2% of Q4 above that "
              "line, so the tail may grow neither twice as high nor twice as heavy; only steady samples in which "
              f"the daemon's loop thread waited for a CPU at most {RUNQ_MAX_PCT:g}% of the time count (beyond that "
              "the host, not the daemon, sets the latency), and latency is judged only with "
              f">= {MIN_LATENCY_STEADY_S} s of such samples and >= {MIN_LATENCY_SAMPLES} latencies in each quarter.")


def steady_rules(rows: list[dict], duration_s: float,
                 every_s: float) -> list[tuple[str, float | None, float | None, str, bool | None]]:
    """(series, Q2 figure, Q4 figure, limit text, passed) for every rule; a flatness rule whose quarters
    hold no steady sample fails (it could not be checked), a latency rule with too little data is not
    judged (passed None). Rows carry their interval's raw latencies (seconds) under ``"_latency"``."""
    q2 = [r for r in rows if r["steady"] and duration_s / 4 <= r["t_s"] < duration_s / 2]
    q4 = [r for r in rows if r["steady"] and r["t_s"] >= 3 * duration_s / 4]
    def median(quarter, col):
        values = [r[col] for r in quarter if r.get(col) is not None]
        return statistics.median(values) if values else None

    # more live segments (retention's rhythm) legitimately hold more fds: that much is allowed on top
    per_file = median([r for r in q2 if r.get("seg_files")], "seg_fds_per_file") or 0.0   # Q2's: a leak shows
    extra_files = max(0.0, (median(q4, "seg_files") or 0) - (median(q2, "seg_files") or 0))
    out = []
    for col, rel, slack in FLAT_RULES:
        extra = per_file * extra_files if col == "fds" else 0.0
        text = f"<= Q2 x {1 + rel:.2f} + {slack:g}" + (f" + {extra:.1f} for {extra_files:g} more segment files"
                                                        if extra else "")
        out.append(_rule(col + " median", median(q2, col), median(q4, col),
                         lambda m2, rel=rel, slack=slack, extra=extra: m2 * (1 + rel) + slack + extra, text))

    def pooled(quarter, kind, q):
        return percentile([v * 1000 for r in quarter for v in r.get("_latency", {}).get(kind, ())], q)

    q2 = [r for r in q2 if r.get("runq_pct") is not None and r["runq_pct"] <= RUNQ_MAX_PCT]
    q4 = [r for r in q4 if r.get("runq_pct") is not None and r["runq_pct"] <= RUNQ_MAX_PCT]
    host2, host4 = pooled(q2, "host", 99), pooled(q4, "host", 99)
    host_growth = max(0.0, (host4 or 0.0) - (host2 or 0.0))
    for kind, factor, slack in LATENCY_RULES:
        n2 = sum(len(r.get("_latency", {}).get(kind, ())) for r in q2)
        n4 = sum(len(r.get("_latency", {}).get(kind, ())) for r in q4)
        name = f"{kind} ms p99/p98"
        p2, p4 = pooled(q2, kind, 99), pooled(q4, kind, 98)
        if min(len(q2), len(q4)) * every_s < MIN_LATENCY_STEADY_S or min(n2, n4) < MIN_LATENCY_SAMPLES:
            out.append((name, p2, p4, f"not judged: {len(q2) * every_s:.0f} s / {n2} latencies and "
                                      f"{len(q4) * every_s:.0f} s / {n4} latencies with the host quiet enough",
                        None))
            continue
        out.append(_rule(name, p2, p4, lambda m2, f=factor, s=slack: (m2 + host_growth) * f + s,
                         f"Q4 p98 <= (Q2 p99 + host growth {host_growth:.1f}) x {factor:g} + {slack:g} ms"))
    return out


def _rule(name, m2, m4, limit, text):
    if m2 is None or m4 is None:
        return (name, None, None, text + " (no steady samples)", False)
    return (name, m2, m4, f"{text} = {limit(m2):.1f}", m4 <= limit(m2))


def loop_stalls(log_paths: list[str]) -> list[dict]:
    """Every LOOP_STALL line (``--loop-watchdog``) as a dict: ``ms``, the loop thread's ``cpu_ms`` and
    ``runq_ms``, ``kernel``, ``stack``, and the busiest other thread's ``holder``, ``holder_cpu_ms``,
    ``holder_runq_ms`` and ``holder_stack``, the garbage collector's ``gc_ms`` and ``gc_gen`` (absent in
lines of older watchdogs: ``-``, 0 and -1)."""
    out = []
    for path in log_paths:
        try:
            with open(path, errors="replace") as fh:
                for line in fh:
                    if line.startswith("LOOP_STALL "):
                        head, _, stacks = line.rstrip("\n").partition(" stack=")
                        stack, _, holder_stack = stacks.partition(" holder_stack=")
                        kv = dict(x.split("=", 1) for x in head.split()[1:])
                        out.append({"ms": float(kv["ms"]), "at": float(kv.get("at", 0)), "cpu_ms": float(kv["cpu_ms"]),
                                    "runq_ms": float(kv.get("runq_ms", 0)), "kernel": kv.get("kernel", "?"),
                                    "steal_ms": float(kv.get("steal_ms", 0)),
                                    "major_faults": int(kv.get("major_faults", 0)),
                                    "gc_ms": float(kv.get("gc_ms", 0)), "gc_gen": int(kv.get("gc_gen", -1)),
                                    "stack": stack, "holder": kv.get("holder", "-"),
                                    "holder_cpu_ms": float(kv.get("holder_cpu_ms", 0)),
                                    "holder_runq_ms": float(kv.get("holder_runq_ms", 0)),
                                    "holder_kernel": kv.get("holder_kernel", "?"),
                                    "others_in_syscalls": kv.get("others_in_syscalls", "-"),
                                    "holder_stack": holder_stack or "-"})
        except OSError:
            pass
    return out
