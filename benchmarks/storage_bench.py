#!/usr/bin/env python3
"""Storage engine benchmark: appends, timestamp search, opening many partitions, recovery.

Prints, next to this machine's own limits measured in the same run (buffered sequential
write MB/s of the data dir's file system and page-cache read MB/s):

* append MB/s and records/s for 1 MiB and 16 KiB batches of 100-byte and 1 KiB records,
  for CreateTime unbounded, CreateTime bounded (per-record range check) and LogAppendTime;
* timestamp-search latency p50/p99 in-process (``PartitionLog.fetch_offset_by_timestamp``)
  over 10^7 records in >= 1,000 segments and over 10^5 records;
* start-up time and RSS of a ``LogManager`` over 10,000 partitions (clean start, lazy),
  plus opening every log and an unclean start (eager recovery) for reference;
* recovery MB/s of a 1 GiB active segment after a crash (file in the page cache).

Targets (issue 2, on the 2-core reference machine) are checked and printed.

Usage::

    python benchmarks/storage_bench.py            # full run (several minutes, ~4 GiB of temp data)
    python benchmarks/storage_bench.py --quick    # under a minute, smaller sizes
    python benchmarks/storage_bench.py --dir /dev/shm   # data on another file system

All data lives in a temporary directory under ``--dir`` (default: the system temp dir)
and is removed at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import structlog  # noqa: E402
from crc32c import crc32c  # noqa: E402

from sundial.config.defs import LONG_MAX  # noqa: E402
from sundial.config.topic import TopicConfig  # noqa: E402
from sundial.records.builder import SimpleRecord, build_records  # noqa: E402
from sundial.storage.log import PartitionLog  # noqa: E402

MiB = 1024 * 1024
KiB = 1024
NOW_MS = 1_700_000_000_000

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def cfg(**kw) -> TopicConfig:
    base = dict(message_timestamp_before_max_ms=LONG_MAX, message_timestamp_after_max_ms=LONG_MAX,
                file_delete_delay_ms=0)
    base.update(kw)
    return dataclasses.replace(TopicConfig(), **base)


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pct(values, p):
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


# ------------------------------------------------------------------------------------------- machine


def machine_limits(base: str, total_bytes: int) -> dict:
    path = os.path.join(base, "disk-probe.bin")
    block = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    for _ in range(total_bytes // MiB):
        os.write(fd, block)
    write_s = time.perf_counter() - t
    os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(MiB)
    t = time.perf_counter()
    while os.readv(fd, [buf]):
        pass
    read_s = time.perf_counter() - t
    os.close(fd)
    os.remove(path)
    return {"write_mb_s": total_bytes / MiB / write_s, "read_mb_s": total_bytes / MiB / read_s,
            "bytes": total_bytes}


# ------------------------------------------------------------------------------------------- append


def template(batch_bytes: int, record_bytes: int, ts: int) -> tuple[bytes, int]:
    value = b"x" * record_bytes
    per_record = len(build_records(2, [SimpleRecord(ts, None, value)] * 2).buffer) - \
        len(build_records(2, [SimpleRecord(ts, None, value)]).buffer)
    n = max(1, (batch_bytes - 61) // per_record)
    data = build_records(2, [SimpleRecord(ts, None, value)] * n).buffer
    while len(data) > batch_bytes and n > 1:
        n -= max(1, (len(data) - batch_bytes) // per_record)
        data = build_records(2, [SimpleRecord(ts, None, value)] * n).buffer
    return data, n


def bench_append(base: str, batch_bytes: int, record_bytes: int, mode: str, total_bytes: int) -> dict:
    if mode == "create_unbounded":
        config = cfg()
    elif mode == "create_bounded":
        config = cfg(message_timestamp_before_max_ms=3_600_000, message_timestamp_after_max_ms=3_600_000)
    else:
        config = cfg(message_timestamp_type="LogAppendTime")
    data, n = template(batch_bytes, record_bytes, NOW_MS)
    d = tempfile.mkdtemp(prefix="append-", dir=base)
    log = PartitionLog.create(os.path.join(d, "a-0"), config, topic="a", partition=0, now_ms=NOW_MS)
    appends = max(1, total_bytes // len(data))
    t = time.perf_counter()
    for _ in range(appends):
        log.append(data, now_ms=NOW_MS)
    secs = time.perf_counter() - t
    written = appends * len(data)
    log.close_handles()
    shutil.rmtree(d)
    return {"batch": batch_bytes, "record": record_bytes, "mode": mode, "mb_s": written / MiB / secs,
            "records_s": appends * n / secs, "appends": appends, "us_per_append": secs / appends * 1e6}


# ------------------------------------------------------------------------------------------- search


def retime(batch: bytes, base_ts: int, max_delta: int) -> bytes:
    """The same v2 batch with its base/max timestamps moved (CRC recomputed)."""
    b = bytearray(batch)
    struct.pack_into(">qq", b, 27, base_ts, base_ts + max_delta)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def build_search_log(base: str, n_records: int, n_segments: int, record_bytes: int = 100,
                     batch_bytes: int = 16 * KiB, seed: int = 1):
    rng = random.Random(seed)
    value = b"x" * record_bytes
    per_batch = None
    # record j of a batch has timestamp base + j + jitter_j: non-monotonic inside a batch
    probe, per_batch = template(batch_bytes, record_bytes, 0)
    deltas = [j + rng.randrange(-20, 21) for j in range(per_batch)]
    deltas[0] = 0
    records = [SimpleRecord(NOW_MS + dj, None, value) for dj in deltas]
    tmpl = build_records(2, records).buffer
    max_delta = max(deltas)
    n_batches = max(1, n_records // per_batch)
    seg_bytes = max(len(tmpl) + 1, (n_batches * len(tmpl)) // n_segments + 1)
    d = tempfile.mkdtemp(prefix="search-", dir=base)
    log = PartitionLog.create(os.path.join(d, "s-0"), cfg(segment_bytes=seg_bytes), topic="s", partition=0,
                              now_ms=NOW_MS)
    t = time.perf_counter()
    for i in range(n_batches):
        log.append(retime(tmpl, NOW_MS + i * per_batch, max_delta), now_ms=NOW_MS)
    build_s = time.perf_counter() - t
    span = (NOW_MS - 50, NOW_MS + n_batches * per_batch + 50)
    return d, log, n_batches * per_batch, span, build_s


def bench_search(base: str, n_records: int, n_segments: int, lookups: int) -> dict:
    d, log, records, (lo, hi), build_s = build_search_log(base, n_records, n_segments)
    rng = random.Random(7)
    search = log.fetch_offset_by_timestamp
    # First touch: one lookup landing in each segment (maps its two index files).
    per_segment = (hi - lo) / max(1, len(log.segments))
    first = []
    for i in range(len(log.segments)):
        target = int(lo + (i + 0.5) * per_segment)
        t = time.perf_counter_ns()
        search(target)
        first.append(time.perf_counter_ns() - t)
    targets = [rng.randrange(lo, hi) for _ in range(lookups)]
    lat = []
    wrong = 0
    for target in targets:
        t = time.perf_counter_ns()
        got = search(target)
        lat.append(time.perf_counter_ns() - t)
        if got is not None and got.timestamp_ms < target:
            wrong += 1
    out = {"records": records, "segments": len(log.segments), "p50_us": pct(lat, 50) / 1000,
           "p99_us": pct(lat, 99) / 1000, "first_p50_us": pct(first, 50) / 1000,
           "first_p99_us": pct(first, 99) / 1000, "lookups": lookups, "build_s": build_s, "wrong": wrong}
    # Re-opening the log after a clean close: every segment's index files are checked.
    config, path = log.config, log.dir
    log.close(flush=False)
    t = time.perf_counter()
    again = PartitionLog.open(path, config, topic="s", partition=0, clean=True)
    out["reopen_s"] = time.perf_counter() - t
    t = time.perf_counter()
    again.fetch_offset_by_timestamp(lo)
    out["reopen_first_search_ms"] = (time.perf_counter() - t) * 1000
    again.close_handles()
    shutil.rmtree(d)
    return out


# ------------------------------------------------------------------------------------------- open


_OPEN_CHILD = r"""
import json, os, sys, time, logging
sys.path.insert(0, {root!r})
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from sundial.storage.log_manager import LogManager
base_rss = rss()
t = time.perf_counter()
mgr = LogManager([{data!r}], {{}})
mgr.startup()
startup_s = time.perf_counter() - t
out = {{"startup_s": startup_s, "rss_mb": rss(), "base_rss_mb": base_rss,
        "partitions": len(mgr.all_partitions()), "open_after_startup": sum(1 for _ in mgr.open_logs())}}
if {open_all}:
    t = time.perf_counter()
    n = 0
    for topic, p in mgr.all_partitions():
        log = mgr.get_log(topic, p)
        n += log.log_end_offset
    mgr.run_retention(1_700_000_000_000)
    out.update(open_all_s=time.perf_counter() - t, rss_all_mb=rss(), records=n)
mgr.close_without_marker()
print(json.dumps(out))
"""


def make_partitions(base: str, count: int) -> str:
    from sundial.storage.log_manager import LogManager

    data = tempfile.mkdtemp(prefix="open-", dir=base)
    mgr = LogManager([data], {"log.message.timestamp.after.max.ms": LONG_MAX})
    mgr.startup()
    per_topic = 1000
    records = build_records(2, [SimpleRecord(NOW_MS, None, b"v" * 100)] * 10).buffer
    for t in range((count + per_topic - 1) // per_topic):
        n = min(per_topic, count - t * per_topic)
        mgr.create_topic(f"bench{t}", n, {"message.timestamp.after.max.ms": str(LONG_MAX)})
        for p in range(n):
            mgr.get_log(f"bench{t}", p).append(records, now_ms=NOW_MS)
    for _t, _p, log in list(mgr.open_logs()):   # close without fsync: set-up, not measured
        log.close(flush=False)
    mgr.checkpoint()
    mgr._logs.clear()
    from sundial.storage.checkpoints import write_clean_shutdown_marker

    write_clean_shutdown_marker(data)
    return data


def run_open_child(data: str, open_all: bool) -> dict:
    code = _OPEN_CHILD.format(root=ROOT, data=data, open_all=open_all)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_open(base: str, count: int) -> dict:
    t = time.perf_counter()
    data = make_partitions(base, count)
    setup_s = time.perf_counter() - t
    clean = run_open_child(data, open_all=False)
    # the child crashed on purpose (no marker): restore a clean state for the second run
    from sundial.storage.checkpoints import write_clean_shutdown_marker

    write_clean_shutdown_marker(data)
    clean_all = run_open_child(data, open_all=True)
    unclean = run_open_child(data, open_all=False)   # no marker now: eager recovery of everything
    shutil.rmtree(data)
    return {"partitions": count, "setup_s": setup_s, "clean": clean, "clean_open_all": clean_all,
            "unclean": unclean}


# ------------------------------------------------------------------------------------------- recovery


def bench_recovery(base: str, total_bytes: int, batch_bytes: int) -> dict:
    data, n = template(batch_bytes, 100, NOW_MS)
    d = tempfile.mkdtemp(prefix="recovery-", dir=base)
    pdir = os.path.join(d, "r-0")
    config = cfg(segment_bytes=2 * total_bytes + MiB)
    log = PartitionLog.create(pdir, config, topic="r", partition=0, now_ms=NOW_MS)
    appends = max(1, total_bytes // len(data))
    for _ in range(appends):
        log.append(data, now_ms=NOW_MS)
    size = log.active_segment.size_bytes
    leo = log.log_end_offset
    log.close_handles()   # crash: no final index entry, no trim, no clean marker
    t = time.perf_counter()
    again = PartitionLog.open(pdir, config, topic="r", partition=0, clean=False, recovery_point=0)
    secs = time.perf_counter() - t
    assert again.log_end_offset == leo, (again.log_end_offset, leo)
    again.close_handles()
    shutil.rmtree(d)
    return {"bytes": size, "batch": batch_bytes, "seconds": secs, "mb_s": size / MiB / secs}


# ------------------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes; finishes in under a minute")
    ap.add_argument("--dir", default=None, help="parent directory for the temporary data")
    ap.add_argument("--only", default="", help="comma list of: machine,append,search,open,recovery")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    want = (lambda name: not only or name in only)
    quick = args.quick
    base = tempfile.mkdtemp(prefix="sundial-storage-bench-", dir=args.dir)
    results: dict = {}
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"python {sys.version.split()[0]}, cpus {os.cpu_count()}, data dir {base}, "
          f"mode {'quick' if quick else 'full'}")
    from sundial import records as _records

    print(f"record walks: {_records.IMPLEMENTATION}")
    try:
        if want("machine"):
            m = machine_limits(base, (256 if quick else 1024) * MiB)
            results["machine"] = m
            print(f"\n== machine limits ({m['bytes'] // MiB} MiB, 1 MiB blocks)")
            print(f"buffered sequential write  {m['write_mb_s']:8.0f} MB/s")
            print(f"page-cache sequential read {m['read_mb_s']:8.0f} MB/s")
        if want("append"):
            print("\n== append (one partition, in-process, validate + producer check + roll + write + index)")
            print(f"{'batch':>7} {'record':>6} {'mode':<17} {'MB/s':>8} {'records/s':>12} {'us/append':>10}")
            rows = []
            for batch_bytes in (MiB, 16 * KiB):
                for record_bytes in (100, KiB):
                    for mode in ("create_unbounded", "create_bounded", "log_append_time"):
                        total = (96 if quick else 1024) * MiB if batch_bytes == MiB else (32 if quick else 512) * MiB
                        r = bench_append(base, batch_bytes, record_bytes, mode, total)
                        rows.append(r)
                        label = "1MiB" if batch_bytes == MiB else "16KiB"
                        print(f"{label:>7} {record_bytes:>6} {mode:<17} {r['mb_s']:8.0f} {r['records_s']:12,.0f} "
                              f"{r['us_per_append']:10.1f}")
            results["append"] = rows
        if want("search"):
            print("\n== timestamp search, in-process (fetch_offset_by_timestamp; random targets)")
            big_records = 10**6 if quick else 10**7
            lookups = 2000 if quick else 5000
            big = bench_search(base, big_records, 1000, lookups)
            small = bench_search(base, 10**5, 10, lookups)
            results["search"] = {"big": big, "small": small}
            for name, r in (("large", big), ("small", small)):
                print(f"{name}: {r['records']:,} records in {r['segments']} segments: p50 {r['p50_us']:.1f} us, "
                      f"p99 {r['p99_us']:.1f} us over {r['lookups']} random targets; first lookup into each "
                      f"segment p50 {r['first_p50_us']:.1f} / p99 {r['first_p99_us']:.1f} us; built in "
                      f"{r['build_s']:.1f} s; wrong answers {r['wrong']}; clean re-open (index checks of every "
                      f"segment) {r['reopen_s'] * 1000:.0f} ms, then first search {r['reopen_first_search_ms']:.1f} ms")
        if want("open"):
            count = 2000 if quick else 10_000
            print(f"\n== opening {count:,} partitions (LogManager.startup in a fresh process)")
            o = bench_open(base, count)
            results["open"] = o
            c, a, u = o["clean"], o["clean_open_all"], o["unclean"]
            print(f"clean start (lazy): {c['startup_s']:.2f} s, RSS {c['rss_mb']:.0f} MB "
                  f"(interpreter + imports {c['base_rss_mb']:.0f} MB), logs open after start-up: "
                  f"{c['open_after_startup']}")
            print(f"clean start + open every log + one retention pass: {a['startup_s'] + a['open_all_s']:.2f} s, "
                  f"RSS {a['rss_all_mb']:.0f} MB")
            print(f"unclean start (recovers every partition): {u['startup_s']:.2f} s, RSS {u['rss_mb']:.0f} MB")
        if want("recovery"):
            total = (128 if quick else 1024) * MiB
            print(f"\n== recovery of a {total // MiB} MiB active segment after a crash (page cache)")
            rec = [bench_recovery(base, total, bb) for bb in (16 * KiB, MiB)]
            results["recovery"] = rec
            for r in rec:
                label = "1MiB" if r["batch"] == MiB else "16KiB"
                print(f"{label} batches: {r['mb_s']:.0f} MB/s ({r['seconds']:.2f} s)")
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print("\n== targets (issue 2)")
    ok = True

    def check(name, value, good, unit=""):
        nonlocal ok
        ok &= good
        print(f"[{'PASS' if good else 'FAIL'}] {name}: {value}{unit}")

    if "machine" in results and "append" in results:
        w = results["machine"]["write_mb_s"]
        worst = min(r["mb_s"] for r in results["append"] if r["batch"] == MiB and r["mode"] == "create_unbounded")
        check("unbounded CreateTime 1 MiB append >= 60% of buffered write (worst record size)",
              f"{worst:.0f} MB/s = {worst / w:.0%}", worst >= 0.6 * w)
    if "append" in results:
        bounded = min(r["records_s"] for r in results["append"] if r["mode"] == "create_bounded"
                      and r["record"] == 100)
        check("bounded CreateTime >= 1M records/s (100-byte records, worst batch size)", f"{bounded:,.0f}",
              bounded >= 1_000_000)
    if "search" in results:
        big, small = results["search"]["big"], results["search"]["small"]
        check("search p99 <= 200 us (large log)", f"{big['p99_us']:.1f}", big["p99_us"] <= 200, " us")
        ratio = big["p99_us"] / max(small["p99_us"], 1e-9)
        check("search p99 within 2x between 1e5 and large log", f"{ratio:.2f}x", ratio <= 2.0)
        check("search: no answer below its target", big["wrong"] + small["wrong"], big["wrong"] + small["wrong"] == 0)
    if "open" in results:
        c = results["open"]["clean"]
        check(f"{results['open']['partitions']:,} partitions open <= 5 s", f"{c['startup_s']:.2f}", c["startup_s"] <= 5,
              " s")
        check("RSS <= 300 MB after start-up", f"{c['rss_mb']:.0f}", c["rss_mb"] <= 300, " MB")
    if "recovery" in results:
        worst = min(r["mb_s"] for r in results["recovery"])
        check("recovery >= 300 MB/s from cache (worst batch size)", f"{worst:.0f}", worst >= 300, " MB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
