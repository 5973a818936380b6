"""The soak benchmark's summary, CSV and plot (used by ``benchmarks/soak.py``)."""

from __future__ import annotations

import collections
import csv
import os

from soak_checks import RULES_TEXT, RUNQ_MAX_PCT, loop_stalls, steady_rules
from soak_load import GROUPS, percentile

#: the CSV columns (one row per sample)
COLUMNS = (["t_s", "epoch", "steady", "rss_mb", "fds", "sockets", "seg_files", "seg_fds", "seg_fds_per_file",
            "stale_fds", "threads", "connections", "cpu_pct", "runq_pct"]
           + [f"{kind}_p{q}_ms" for kind in ("probe", "produce", "fetch", "lookup", "host") for q in (50, 99)]
           + ["sent", "acked", "failed"] + [f"consumed_{g.name}" for g in GROUPS]
           + ["group_lag", "segments", "deleted_retention_ms", "deleted_consumed", "loop_stalls", "loop_stall_max_ms"])


def report(args, ctx, sampler, restarts, stats, probes, final_stop, workdir) -> int:
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


#: System calls the loop thread is seen in while it waits for the GIL or a lock another thread holds.
_LOCK_WAITS = ("running", "futex", "?")


def stall_class(st: dict) -> str:
    """Who caused a stall: the host (the loop thread, or the thread holding the GIL or lock it waited
    for, kept waiting for a CPU, or the loop's virtual CPU stolen by the hypervisor) or the daemon (computing on the loop, another thread computing with
    the GIL, or blocked in a system call)."""
    ms = st["ms"]
    if st["runq_ms"] + st["steal_ms"] >= ms / 2:
        return "waiting for a CPU (host)"
    if st.get("gc_ms", 0) >= ms / 2:
        return f"computing: garbage collection (generation {st.get('gc_gen', -1)})"
    if st["cpu_ms"] >= ms / 2:
        return "computing"
    if st.get("major_faults", 0) > 0 and st["kernel"] == "?":
        return "blocked: page faults read from the disk"
    if st["kernel"].split("/")[0] in _LOCK_WAITS:
        if st["runq_ms"] + st["steal_ms"] + st["holder_runq_ms"] >= ms / 2:
            return "waiting for a CPU (host): the GIL or lock holder"
        if st["holder_cpu_ms"] >= ms / 2:
            return "GIL held by a computing thread"
    return "blocked"


def stall_phase(st: dict, serving: list[list], epoch: int) -> str:
    """``start-up`` (began before daemon ``epoch`` listened), ``shutdown`` (after its SIGTERM) or
    ``serving``; lines without a time count as serving."""
    if not st["at"] or epoch > len(serving):
        return "serving"
    listened, sigterm = serving[epoch - 1]
    if st["at"] < listened:
        return "start-up"
    if sigterm is not None and st["at"] >= sigterm:
        return "shutdown"
    return "serving"


def print_stalls(daemon, run_s: float) -> None:
    stalls = []
    for epoch in range(1, daemon.epoch + 1):
        for st in loop_stalls([daemon.log_path(epoch)]):
            st["phase"] = stall_phase(st, daemon.serving, epoch)
            stalls.append(st)
    if not stalls:
        print("  event-loop stalls >= 50 ms (--loop-watchdog): none")
        return
    total = sum(s["ms"] for s in stalls)
    print(f"  event-loop stalls >= 50 ms (--loop-watchdog): {len(stalls)}, {total / 1000:.1f} s in all "
          f"({100 * total / 1000 / run_s:.2f}% of the run), max {max(s['ms'] for s in stalls):.0f} ms")
    for phase, what in (("serving", "while serving"), ("start-up", "during start-up, before the listeners "
                         "opened (no request waits; the start takes longer)"), ("shutdown", "after a SIGTERM")):
        these = [st for st in stalls if st["phase"] == phase]
        host = [st["ms"] for st in these if stall_class(st).startswith("waiting")]
        own = [st["ms"] for st in these if not stall_class(st).startswith("waiting")]
        print(f"    {what}: {len(these)}; caused by the host {len(host)} (max {max(host, default=0):.0f} ms), "
              f"by the daemon {len(own)} (max {max(own, default=0):.0f} ms)")
    by_class: dict[str, list[float]] = {}
    for st in stalls:
        by_class.setdefault(stall_class(st), []).append(st["ms"])
    print("    by kind: " + "; ".join(f"{k}: {len(v)} ({sum(v) / 1000:.1f} s)" for k, v in sorted(by_class.items())))
    by_cause: dict[tuple, list] = {}
    for st in stalls:
        cls = stall_class(st)
        if cls.startswith("waiting"):
            continue
        holder = st["holder_stack"] if cls.startswith("GIL") else ""
        by_cause.setdefault((st["phase"], cls, st["kernel"], st["stack"], holder), []).append(st)
    def _holders(items: list[dict]) -> str:
        seen = collections.Counter(s["others_in_syscalls"] for s in items if s["others_in_syscalls"] != "-")
        return ", ".join(f"{k} ({n})" for k, n in seen.most_common(2)) or "none seen"

    print("  the daemon's own stalls by cause:" + ("" if by_cause else " none"))
    # those while serving first (requests waited for them), then by total time
    for (phase, cls, kernel, stack, holder), items in sorted(
            by_cause.items(), key=lambda kv: (kv[0][0] != "serving", -sum(s["ms"] for s in kv[1])))[:12]:
        ms = sorted(s["ms"] for s in items)
        names = sorted({s["holder"] for s in items})
        print(f"    {len(items)} x {cls} ({phase}), median {ms[len(ms) // 2]:.0f} ms, max {ms[-1]:.0f} ms, "
              f"in {kernel}: {stack}" + (f"; held by {','.join(names)} in {holder}" if holder else "")
              + f"; other threads in system calls meanwhile: {_holders(items)}")


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


def _error_name(code: int) -> str:
    import kafka.errors

    return kafka.errors.for_code(code).__name__


def _n(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _f(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))
