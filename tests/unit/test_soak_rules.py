"""The soak benchmark's verdicts (``benchmarks/soak_probes.judge``, ``benchmarks/soak_checks.steady_rules``):
pure functions, no daemon."""

from __future__ import annotations

from array import array

from soak_checks import steady_rules
from soak_load import make_value, parse_value, percentile
from soak_probes import Lookup, judge

#            offset: 0    1    2    3    4    5
TS = array("q", [100, 300, 200, 400, 250, 500])


def lookup(target, answer, lso_before=0, lso_after=None, end_before=6):
    return Lookup(0, target, answer, lso_before, lso_before if lso_after is None else lso_after, end_before, 0.0)


def test_judge_first_offset_at_or_after_the_log_start_with_timestamp_at_least_target():
    assert judge(TS, lookup(250, (1, 300))) == "ok"
    assert judge(TS, lookup(250, (3, 400), lso_before=2)) == "ok"       # offset 1 was deleted by retention
    assert judge(TS, lookup(500, (5, 500))) == "ok"                     # equal timestamp counts
    assert judge(TS, lookup(600, None)) == "ok"


def test_judge_wrong_answers():
    assert "earlier offset 1" in judge(TS, lookup(250, (3, 400)))
    assert "below the log start" in judge(TS, lookup(250, (1, 300), lso_before=2))
    assert "has timestamp 300" in judge(TS, lookup(250, (1, 350)))
    assert "below the target" in judge(TS, lookup(450, (3, 400)))
    assert "offset 5 has timestamp 500" in judge(TS, lookup(450, None))


def test_judge_log_start_moving_during_the_lookup():
    # retention moved the log start from 0 to 2 while the lookup ran: either answer may be right
    assert judge(TS, lookup(250, (1, 300), lso_before=0, lso_after=2)) == "ok"
    assert judge(TS, lookup(250, (3, 400), lso_before=0, lso_after=2)) == "ok"


def test_judge_waits_for_acknowledgements():
    pending = array("q", [100, -1, 200, 400])
    assert judge(pending, lookup(350, (3, 400), end_before=4)) is None    # offset 1 not acknowledged yet
    assert judge(pending[:2], lookup(350, (3, 400), end_before=4)) is None
    assert judge(pending, lookup(350, (3, 400), lso_before=2, end_before=4)) == "ok"
    assert judge(pending, lookup(900, None, end_before=4)) is None


def test_values_name_their_send():
    assert parse_value(make_value("ck", 17, 1234)) == ("ck", 17, 1234)
    assert parse_value(b"churn:x:1") is None
    assert percentile([], 99) is None
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5.0], 50) == 5.0


def rows(n=60, rss=lambda i: 50.0, fds=lambda i: 100, seg_files=lambda i: 20, lat=lambda i: [0.002] * 300,
         host=lambda i: [0.001] * 50, runq=lambda i: 1.0):
    out = []
    for i in range(n):
        out.append({"t_s": (i + 1) * 10.0, "steady": True, "rss_mb": rss(i), "fds": fds(i), "threads": 9,
                    "stale_fds": 0, "seg_files": seg_files(i), "seg_fds_per_file": 1.3, "runq_pct": runq(i),
                    "_latency": {k: array("d", lat(i)) for k in ("produce", "fetch", "lookup", "probe")}
                    | {"host": array("d", host(i))}})
    return out


def verdicts(rs, duration=600.0):
    return {name: ok for name, _, _, _, ok in steady_rules(rs, duration, 10.0)}


def test_flat_run_passes():
    assert all(ok is not False for ok in verdicts(rows()).values())


def test_growing_rss_or_fds_fails_and_a_drop_passes():
    assert verdicts(rows(rss=lambda i: 50.0 + i * 0.3))["rss_mb median"] is False
    assert verdicts(rows(rss=lambda i: 80.0 - i))["rss_mb median"] is True
    assert verdicts(rows(fds=lambda i: 100 + i))["fds median"] is False


def test_fds_of_extra_live_segment_files_are_allowed():
    grown = rows(fds=lambda i: 100 + 2 * i, seg_files=lambda i: 20 + 2 * i)
    assert verdicts(rows(fds=lambda i: 100 + 2 * i))["fds median"] is False
    assert verdicts(grown)["fds median"] is True


def test_latency_tail_growth_fails_unless_the_host_explains_it():
    slow = rows(lat=lambda i: [0.002] * 280 + [0.05] * 20 if i >= 45 else [0.002] * 300)
    assert verdicts(slow)["probe ms p99/p98"] is False
    busy_host = rows(lat=lambda i: [0.002] * 280 + [0.05] * 20 if i >= 45 else [0.002] * 300,
                     host=lambda i: [0.001] * 40 + [0.05] * 10 if i >= 45 else [0.001] * 50)
    # Q2's p99 is 2 ms, so the line is 9 ms: 1.5% of Q4 above it passes, 3% fails
    light = rows(lat=lambda i: [0.002] * 197 + [0.05] * 3 if i >= 45 else [0.002] * 200)
    assert verdicts(light)["probe ms p99/p98"] is True
    heavy = rows(lat=lambda i: [0.002] * 194 + [0.05] * 6 if i >= 45 else [0.002] * 200)
    assert verdicts(heavy)["probe ms p99/p98"] is False
    assert verdicts(busy_host)["probe ms p99/p98"] is True


def test_latency_not_judged_in_short_runs():
    short = rows(n=12, lat=lambda i: [0.002] * 5 + [0.5] * 5 if i >= 9 else [0.002] * 10)
    assert verdicts(short, duration=120.0)["probe ms p99/p98"] is None


def test_latency_not_judged_while_the_host_starves_the_daemon():
    starved = rows(lat=lambda i: [0.002] * 194 + [0.5] * 6 if i >= 45 else [0.002] * 200,
                   runq=lambda i: 40.0 if i >= 45 else 1.0)
    assert verdicts(starved)["probe ms p99/p98"] is None
