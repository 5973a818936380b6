"""Log compaction: cleaning throughput and memory, and the broker's produce latency during a pass.

A partition of KEYS keys written ROUNDS times over (random key order per round,
about 107-byte records in ~16 KiB uncompressed batches, 128 MiB segments) is built with
storage directly. Then:

1. **in-process pass** (a child process, so its peak RSS is the cleaner's alone): one
   :class:`storage.cleaner.Cleaner` with the default dedupe buffer (128 MiB) cleans the log
   until its checkpoint reaches the active segment; prints MB/s of log read (bytes of the
   dirty log / wall time of the pass, map building included: Kafka's "MB of log processed"),
   the map share, records in and out, and peak RSS next to the dedupe buffer size;
2. **the daemon** (``--daemon``, on a copy of the same log): ``sundial serve`` cleans it
   with its cleaner thread while confluent-kafka produces small records (acks=1, one every
   5 ms) to another topic and a consumer fetches them; after 4 s of that traffic the big
   partition is made compacted (AlterConfigs ``cleanup.policy=compact``); prints produce
   latency p50/p99/max before and during the pass, and how many records the consumer
   got during it.

Default size: 128 MiB (128k keys x 10 rounds). ``--full``: 1 GiB, 1M keys x 10 rounds
(the figure of issue 13: >= 100 MB/s, RSS bounded by the dedupe buffer plus a constant).

    python benchmarks/cleaner_bench.py [--full] [--daemon] [--keep DIR]

``--keep DIR`` builds the log into DIR once and reuses it (each run cleans a copy). The machine
load is printed with the figures: on a shared host, CPU seconds tell more than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_daemon import start_sundial  # noqa: E402

TOPIC = "compacted"
SEGMENT_BYTES = 128 * 1024 * 1024
DEDUPE = 128 * 1024 * 1024
MB = 1024 * 1024
DELETE_CONFIG = {"cleanup.policy": "delete", "segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
COMPACT_CONFIG = {**DELETE_CONFIG, "cleanup.policy": "compact"}


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def build(data_dir: str, keys: int, rounds: int, value_bytes: int, batch_records: int, seed: int = 7) -> dict:
    """The compacted partition, written through storage; rolled so everything is cleanable."""
    from sundial.records.builder import v2_header
    from sundial.records.varint import encode_varint
    from sundial.storage import LogManager

    mgr = LogManager([data_dir])
    mgr.startup()
    mgr.create_topic(TOPIC, 1, DELETE_CONFIG)     # made compacted when the measurement starts
    log = mgr.get_log(TOPIC, 0)
    rng = random.Random(seed)
    now = int(time.time() * 1000) - 3_600_000
    t0 = time.monotonic()
    offset = 0
    value = b"v" * value_bytes
    for r in range(rounds):
        order = list(range(keys))
        rng.shuffle(order)
        for start in range(0, keys, batch_records):
            chunk = order[start:start + batch_records]
            parts = []
            for i, k in enumerate(chunk):
                key = b"key-%08d" % k
                body = (b"\x00" + encode_varint(i) + encode_varint(i) + encode_varint(len(key)) + key
                        + encode_varint(len(value)) + value + b"\x00")
                parts.append(encode_varint(len(body)))
                parts.append(body)
            payload = b"".join(parts)
            header = v2_header(base_offset=offset, batch_bytes=61 + len(payload), partition_leader_epoch=0,
                               attributes=0, last_offset_delta=len(chunk) - 1, base_timestamp=now + offset,
                               max_timestamp=now + offset + len(chunk) - 1, producer_id=-1, producer_epoch=-1,
                               base_sequence=-1, record_count=len(chunk), payload=payload)
            log.append_as_follower(header + payload, now_ms=now)
            offset += len(chunk)
    log.roll(now)
    size = log.size_bytes
    mgr.shutdown()
    return {"records": offset, "bytes": size, "build_s": time.monotonic() - t0}


def clean_child(data_dir: str) -> None:
    """Run in a child process: clean the partition until done, print JSON stats."""
    from sundial.storage import LogManager
    from sundial.storage.cleaner import Cleaner
    from sundial.storage.cleaner_manager import LogCleanerManager
    from sundial.storage.offset_map import IMPLEMENTATION, SkimpyOffsetMap

    mgr = LogManager([data_dir])
    mgr.startup()
    mgr.alter_topic_config(TOPIC, COMPACT_CONFIG)
    log = mgr.get_log(TOPIC, 0)
    before = log.size_bytes
    base_rss = rss_mb()
    manager = LogCleanerManager([data_dir])
    cleaner = Cleaner(SkimpyOffsetMap(DEDUPE), io_buffer_bytes=256 * 1024, load_factor=0.9, clock=time.monotonic)
    now = int(time.time() * 1000)
    passes = []
    t0 = time.monotonic()
    cpu0 = time.process_time()
    while True:
        ltc = manager.grab_filthiest_log([(TOPIC, 0, log)], now)
        if ltc is None:
            break
        job = log.cleaning_job(ltc.first_dirty_offset, ltc.first_uncleanable_offset, now)
        try:
            end, stats = cleaner.clean(job, lambda c: log.replace_segments(c, now))
        finally:
            job.close()
        manager.done_cleaning(ltc, end)
        passes.append({"end": end, "bytes_read": stats.bytes_read, "map_bytes": stats.map_bytes_read,
                       "map_s": stats.elapsed_map_s, "s": stats.elapsed_s, "read": stats.messages_read,
                       "kept": stats.messages_written, "utilization": stats.buffer_utilization})
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    after = log.size_bytes
    mgr.shutdown()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    disk_read = 0
    try:
        for line in open("/proc/self/io"):
            if line.startswith("read_bytes:"):
                disk_read = int(line.split()[1])
    except OSError:
        pass
    print(json.dumps({"passes": passes, "wall_s": wall, "cpu_s": cpu, "before": before, "after": after,
                      "peak_rss_mb": peak,
                      "rss_before_map_mb": base_rss, "implementation": IMPLEMENTATION,
                      "disk_read_bytes": disk_read}))


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def daemon_run(data_dir: str) -> dict:
    """The daemon cleans the copied log while a producer and a consumer use another topic."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    log_path = os.path.join(os.path.dirname(data_dir), "sundial-bench.log")
    env = {"SUNDIAL_LOG_FORMAT": "json"}
    proc, bootstrap = start_sundial(data_dir, {"log.cleaner.backoff.ms": "200"}, env=env, log_path=log_path,
                                    log_level="info")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("traffic", 1, 1)]).values():
            f.result(30)
        lat: list[tuple[float, float]] = []
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
        got: list[float] = []
        stop = threading.Event()

        def consume():
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, "fetch.wait.max.ms": 50})
            c.subscribe(["traffic"])
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(time.monotonic())
            c.close()

        t = threading.Thread(target=consume)
        t.start()

        def events():
            out = {}
            try:
                for line in open(log_path, encoding="utf-8", errors="replace"):
                    if line.startswith("{"):
                        e = json.loads(line)
                        if e.get("event") in ("log_cleaning_started", "log_cleaned") and e.get("topic") == TOPIC:
                            out.setdefault(e["event"], (time.monotonic(), e))
            except OSError:
                pass
            return out

        seen: dict = {}
        start_pass = end_pass = switched = None
        deadline = time.monotonic() + 900
        t_begin = time.monotonic()
        while time.monotonic() < deadline:
            if switched is None and got and time.monotonic() > t_begin + 4:
                # traffic flows (the consumer gets it): now make the big partition a compacted one
                res = ConfigResource("topic", TOPIC, incremental_configs=[
                    ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
                for f in admin.incremental_alter_configs([res]).values():
                    f.result(30)
                switched = time.monotonic()
            sent = time.monotonic()
            p.produce("traffic", value=b"x" * 100, on_delivery=lambda err, msg, s=sent: lat.append(
                (s, msg.latency() if err is None else float("nan"))))
            p.poll(0)
            if len(lat) % 20 == 0:
                seen.update({k: v for k, v in events().items() if k not in seen})
                if start_pass is None and "log_cleaning_started" in seen:
                    start_pass = seen["log_cleaning_started"][0]
                if end_pass is None and "log_cleaned" in seen:
                    end_pass = seen["log_cleaned"][0]
                    cleaned = seen["log_cleaned"][1]
            if end_pass is not None and time.monotonic() > end_pass + 5:
                break
            time.sleep(0.005)
        p.flush(30)
        stop.set()
        t.join()
        if end_pass is None:
            raise SystemExit("the daemon did not finish its pass within 900 s")
        before = [l * 1000 for s, l in lat if t_begin + 1 < s < switched]
        during = [l * 1000 for s, l in lat if start_pass <= s <= end_pass]
        fetched = [g for g in got if start_pass <= g <= end_pass]
        return {"pass_s": cleaned.get("duration_s"), "mb_per_s": cleaned.get("mb_per_s"),
                "bytes_read": cleaned.get("bytes_read"),
                "before": (percentile(before, 50), percentile(before, 99), max(before, default=float("nan")),
                           len(before)),
                "during": (percentile(during, 50), percentile(during, 99), max(during, default=float("nan")),
                           len(during)),
                "fetched_during": len(fetched)}
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="1 GiB, 1M keys x 10 rounds (default: 128 MiB, 128k keys)")
    ap.add_argument("--daemon", action="store_true", help="also measure the daemon cleaning under traffic")
    ap.add_argument("--keep", help="build the log here and keep it")
    ap.add_argument("--clean-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.clean_child:
        clean_child(args.clean_child)
        return 0
    keys = 1_000_000 if args.full else 131_072
    rounds, value_bytes, batch_records = 10, 84, 150
    base = args.keep or tempfile.mkdtemp(prefix="cleaner-bench-")
    pristine = os.path.join(base, "pristine")
    data = os.path.join(base, "data")
    print(f"# {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    marker = os.path.join(base, f"built-{keys}-{rounds}-{value_bytes}.json")
    if os.path.exists(marker):
        built = json.load(open(marker))
        print(f"log: reusing {pristine}")
    else:
        shutil.rmtree(pristine, ignore_errors=True)
        built = build(pristine, keys, rounds, value_bytes, batch_records)
        json.dump(built, open(marker, "w"))
    print(f"log: {built['records']:,} records, {built['bytes'] / MB:,.0f} MiB, {keys:,} keys x {rounds} rounds "
          f"(built in {built['build_s']:.1f} s)")
    for d in (data, os.path.join(base, "daemon-data")):
        shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(pristine, data)
    copy = None
    if args.daemon:
        copy = os.path.join(base, "daemon-data")
        shutil.copytree(pristine, copy)
    os.sync()       # the copies' dirty pages would otherwise be written back inside the pass's fsyncs
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--clean-child", data], capture_output=True,
                           text=True, env=dict(os.environ, SUNDIAL_LOG_LEVEL="warning"))
    if child.returncode != 0:
        print(child.stdout[-2000:], child.stderr[-4000:])
        return 1
    r = json.loads(child.stdout.strip().splitlines()[-1])
    dirty = sum(p["map_bytes"] for p in r["passes"])
    map_s = sum(p["map_s"] for p in r["passes"])
    print(f"in-process ({r['implementation']} walks): {len(r['passes'])} pass(es), {r['wall_s']:.2f} s, "
          f"{r['before'] / MB / r['wall_s']:,.0f} MB/s of log read "
          f"({r['cpu_s']:.2f} CPU s: {r['before'] / MB / r['cpu_s']:,.0f} MB per CPU second) "
          f"(map: {map_s:.2f} s = {100 * map_s / r['wall_s']:.0f}%, {dirty / MB / max(map_s, 1e-9):,.0f} MB/s), "
          f"{sum(p['read'] for p in r['passes']):,} records read, {sum(p['kept'] for p in r['passes']):,} kept, "
          f"{r['before'] / MB:,.0f} -> {r['after'] / MB:,.1f} MiB, map use {r['passes'][0]['utilization']:.1%}, "
          f"{r['disk_read_bytes'] / MB:,.0f} MiB read from disk (the rest from the page cache)")
    print(f"peak RSS {r['peak_rss_mb']:.0f} MB = dedupe buffer {DEDUPE / MB:.0f} MB + "
          f"{r['peak_rss_mb'] - DEDUPE / MB:.0f} MB (the process held {r['rss_before_map_mb']:.0f} MB before the map)")
    if args.daemon:
        d = daemon_run(copy)
        b, du = d["before"], d["during"]
        print(f"daemon: pass {d['pass_s']} s, {d['mb_per_s']} MB/s of log read; produce latency acks=1 every 5 ms: "
              f"before p50 {b[0]:.1f} ms p99 {b[1]:.1f} ms max {b[2]:.1f} ms ({b[3]} sends); "
              f"during p50 {du[0]:.1f} ms p99 {du[1]:.1f} ms max {du[2]:.1f} ms ({du[3]} sends); "
              f"{d['fetched_during']} records fetched during the pass")
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
    for d in (data, os.path.join(base, "daemon-data")):
        shutil.rmtree(d, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
