"""Benchmark of the append-time validator, the in-batch timestamp search and down-conversion.

Prints one line per case with the median over repetitions (and p99 for searches), next
to the machine's own CRC-32C speed measured in the same run, and the command used.
Cases run with the C accelerator (when built) and with the pure-Python reference.

    python benchmarks/validator_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import crc32c  # noqa: E402

from sundial import records as R  # noqa: E402
from sundial.config.topic import TopicConfig  # noqa: E402
from sundial.records import codecs  # noqa: E402
from sundial.records import walks as W  # noqa: E402
from sundial.records.builder import SimpleRecord, build_batch  # noqa: E402
from sundial.storage import validator as V  # noqa: E402
from sundial.storage.convert import down_convert  # noqa: E402

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1
MIB = 1 << 20


class Implementation:
    """Switch records.walks/storage.validator between the C walks and the Python reference."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.saved = (W._scan_v2, W._find_v2, V.crc32c_extend)

    def __enter__(self):
        if self.name == "python":
            W._scan_v2, W._find_v2, V.crc32c_extend = W._scan_v2_py, W._find_v2_py, None
        return self

    def __exit__(self, *exc):
        W._scan_v2, W._find_v2, V.crc32c_extend = self.saved


def timed(fn, *, min_seconds: float, min_reps: int = 5) -> list[float]:
    samples = []
    start = time.perf_counter()
    while len(samples) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def batch_of(record_bytes: int, batch_bytes: int, *, codec: int = 0, spread_ms: int = 1000, magic: int = 2) -> bytes:
    rng = random.Random(1)
    value = bytes(rng.getrandbits(8) for _ in range(record_bytes - 20)) if codec == 0 else b"v" * (record_bytes - 20)
    n = max(1, batch_bytes // (record_bytes + 10))
    recs = [SimpleRecord(NOW - spread_ms + rng.randrange(2 * spread_ms), b"key-%08d" % i, value) for i in range(n)]
    return build_batch(magic, recs, compression=codec)


def config(**kw) -> TopicConfig:
    base = dict(message_timestamp_before_max_ms=LONG_MAX, message_timestamp_after_max_ms=LONG_MAX,
                max_message_bytes=64 * MIB)
    base.update(kw)
    return TopicConfig(**base)


def report(label: str, samples: list[float], *, nbytes: int, nrecords: int) -> None:
    med = statistics.median(samples)
    print(f"  {label:<58} {med * 1e6:10.1f} us  {nbytes / med / 1e6:9.0f} MB/s  {nrecords / med / 1e6:7.2f} M rec/s")


def bench_validation(quick: bool) -> None:
    secs = 0.3 if quick else 1.0
    unbounded = config()
    bounded = config(message_timestamp_before_max_ms=7 * 86_400_000, message_timestamp_after_max_ms=3_600_000)
    lat = config(message_timestamp_type="LogAppendTime")
    compact_bounded = config(message_timestamp_before_max_ms=86_400_000, message_timestamp_after_max_ms=3_600_000,
                             cleanup_policy=("compact",))
    cases = []
    for batch_bytes, batch_label in ((MIB, "1 MiB"), (16 * 1024, "16 KiB")):
        for record_bytes in (100, 1024):
            data = batch_of(record_bytes, batch_bytes)
            count = next(R.iter_batches(data)).record_count
            tag = f"{batch_label} v2 batch, {record_bytes} B records ({count})"
            cases.append((f"CreateTime unbounded, {tag}", data, unbounded, count))
            cases.append((f"CreateTime bounded, {tag}", data, bounded, count))
            cases.append((f"LogAppendTime, {tag}", data, lat, count))
    data = batch_of(100, MIB)
    count = next(R.iter_batches(data)).record_count
    cases.append((f"compacted + bounded, 1 MiB v2 batch, 100 B records ({count})", data, compact_bounded, count))
    lz4 = batch_of(100, 4 * MIB, codec=codecs.LZ4)
    count = next(R.iter_batches(lz4)).record_count
    cases.append((f"CreateTime unbounded, lz4 v2 batch in place ({count} x 100 B)", lz4, unbounded, count))
    cases.append((f"CreateTime bounded, lz4 v2 batch in place ({count} x 100 B)", lz4, bounded, count))
    cases.append((f"recompress lz4 -> gzip ({count} x 100 B)", lz4, config(compression_type="gzip"), count))
    v1 = batch_of(100, MIB // 4, codec=codecs.GZIP, magic=1)
    count = next(R.iter_batches(v1)).record_count
    cases.append((f"up-convert v1 gzip -> v2 gzip ({count} x 100 B)", v1, bounded, count))

    for impl in ("c", "python") if R.IMPLEMENTATION == "c" else ("python",):
        print(f"validate_records, {impl} walks:")
        with Implementation(impl):
            for label, data, cfg, count in cases:
                if impl == "python" and ("recompress" in label or "up-convert" in label):
                    continue   # no C in these paths: same numbers as above
                samples = timed(lambda: V.validate_records(data, config=cfg, next_offset=1000, now_ms=NOW),
                                min_seconds=secs)
                report(label, samples, nbytes=len(data), nrecords=count)


def bench_search(quick: bool) -> None:
    secs = 0.3 if quick else 1.0
    rng = random.Random(2)
    print("find_first_at_or_after in one batch (target uniform in the batch's time range):")
    for n in (1000, 10000):
        for codec in (0, codecs.LZ4):
            stamps = sorted(NOW + rng.randrange(n * 10) for _ in range(n))
            data = build_batch(2, [SimpleRecord(t, b"k", b"v" * 80) for t in stamps], compression=codec)
            view = next(R.iter_batches(data))
            targets = [rng.randrange(stamps[0], stamps[-1] + 1) for _ in range(400 if quick else 2000)]
            for impl in ("c", "python") if R.IMPLEMENTATION == "c" else ("python",):
                with Implementation(impl):
                    lat = []
                    for t in targets:
                        t0 = time.perf_counter()
                        R.find_first_at_or_after(view, t, 0)
                        lat.append(time.perf_counter() - t0)
                lat.sort()
                p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
                name = f"{n} records, {codecs.CODEC_NAMES[codec]}, {impl}"
                print(f"  {name:<40} p50 {p50 * 1e6:8.1f} us   p99 {p99 * 1e6:8.1f} us")
            t0 = time.perf_counter()
            index = R.BatchTimestampIndex(view)
            build = time.perf_counter() - t0
            lat = []
            for t in targets:
                t0 = time.perf_counter()
                index.lookup(t)
                lat.append(time.perf_counter() - t0)
            lat.sort()
            p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
            name = f"{n} records, {codecs.CODEC_NAMES[codec]}, cached index"
            print(f"  {name:<40} p50 {p50 * 1e6:8.1f} us   p99 {p99 * 1e6:8.1f} us   "
                  f"(built once in {build * 1e6:.0f} us, {index.size_bytes} bytes)")
    _ = secs


def bench_convert(quick: bool) -> None:
    secs = 0.3 if quick else 1.0
    print("down_convert (v2 -> legacy, records after the fetch offset):")
    for codec in (0, codecs.GZIP, codecs.LZ4):
        data = batch_of(100, MIB // 4, codec=codec)
        count = next(R.iter_batches(data)).record_count
        for to_magic in (1, 0):
            samples = timed(lambda: down_convert(data, to_magic, 0), min_seconds=secs)
            report(f"{codecs.CODEC_NAMES[codec]} v2 -> v{to_magic} ({count} x 100 B)", samples, nbytes=len(data),
                   nrecords=count)


def bench_crc(quick: bool) -> None:
    buf = os.urandom(MIB)
    samples = timed(lambda: crc32c.crc32c(buf), min_seconds=0.3 if quick else 1.0, min_reps=50)
    med = statistics.median(samples)
    print(f"machine: crc32c of 1 MiB {med * 1e6:.1f} us ({MIB / med / 1e9:.1f} GB/s); "
          f"python {platform.python_version()}; records walks: {R.IMPLEMENTATION}; cpus {os.cpu_count()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable)] + sys.argv))
    bench_crc(args.quick)
    bench_validation(args.quick)
    bench_search(args.quick)
    bench_convert(args.quick)


if __name__ == "__main__":
    main()
