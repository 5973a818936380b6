"""Writes the seed inputs of tests/fuzz/corpus/TARGET/seed-* (layouts: tests/fuzz/differential.py).

    .venv/bin/python tests/fuzz/make_seeds.py

Deterministic: valid record regions of a few shapes (keys, null keys and values,
headers, timestamps around -1 and the int64 limits, offsets out of order) and varint
runs. Regression inputs of findings are named regression-* and are kept by hand, not
written here.
"""

from __future__ import annotations

import os
import struct

from sundial.records.builder import encode_v2_record
from sundial.records.varint import encode_varint

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
I64_MAX = (1 << 63) - 1


def regions():
    """(name, count, base_ts, region)."""
    rec = encode_v2_record
    yield "plain", 3, 1_700_000_000_000, b"".join(rec(i, i * 5, b"k%d" % i, b"v" * i) for i in range(3))
    yield "nulls", 4, 1_700_000_000_000, b"".join(
        [rec(0, 0, None, b"x"), rec(1, 1, b"a", None), rec(2, -3, b"", b""), rec(3, 9, b"a", b"y")])
    yield "headers", 2, 5, rec(0, 0, b"key", b"value", [("h", b"1"), ("x", None)]) + rec(1, 1, b"k", b"", [("", b"")])
    yield "no-timestamp", 2, -1, rec(0, 0, b"a", b"1") + rec(1, 0, b"b", b"2")
    yield "wrap", 2, I64_MAX - 1, rec(0, 0, b"a", b"1") + rec(1, 5, b"a", b"2")
    yield "unordered", 3, 0, rec(2, 7, b"c", b"3") + rec(0, 1, b"a", b"1") + rec(1, 4, b"c", b"2")
    yield "dupkeys", 6, 100, b"".join(rec(i, i, b"k%d" % (i % 2), b"v%d" % i if i != 4 else None) for i in range(6))
    yield "big-varints", 2, 0, rec(0, -(1 << 40), b"k" * 200, b"v" * 300) + rec(1, 1 << 40, None, None)
    yield "empty", 0, 0, b""


def walk_input(count, base_ts, region, *, target=0, min_delta=0, flags=0, tail=b""):
    return struct.pack("<BqqbB", count, base_ts, target, min_delta, flags | (len(tail) << 4)) + region + tail


def cleaner_input(count, base_ts, region, *, slots=16, max_entries=16, base_offset=100, start_offset=0,
                  latest_offset=1000, flags=0, tail=b""):
    head = struct.pack("<BBB", slots - 1, max_entries, count)
    later = [min(base_ts + d, I64_MAX) for d in (50, 1000, 2000)]
    head += struct.pack("<7q", base_offset, start_offset, base_ts, later[0], latest_offset, later[1], later[2])
    return head + bytes([flags | (len(tail) << 4)]) + region + tail


def main() -> None:
    files = {}
    for name, count, base_ts, region in regions():
        files[("scan_v2", name)] = walk_input(count, base_ts, region, tail=b"\x02\x00")
        files[("find_v2", name)] = walk_input(count, base_ts, region, target=min(base_ts + 3, I64_MAX), min_delta=1, flags=0)
        files[("find_v2", name + "-exact")] = walk_input(count, base_ts, region, target=base_ts, flags=1)
        files[("index_v2", name)] = walk_input(count, base_ts, region, tail=b"\x7f")
        files[("cleaner_put", name)] = cleaner_input(count, base_ts, region, max_entries=4, tail=b"\x02")
        files[("cleaner_filter", name)] = cleaner_input(count, base_ts, region, latest_offset=103, flags=2)
        files[("cleaner_filter", name + "-horizon")] = cleaner_input(count, base_ts, region, flags=5)
    varints = [0, 1, -1, 63, -64, 64, 8191, -8192, (1 << 31) - 1, -(1 << 31)]
    varlongs = varints + [I64_MAX, -(1 << 63), 1 << 40]
    files[("varint", "ints")] = b"\x00" + b"".join(encode_varint(v) for v in varints)
    files[("varint", "longs")] = b"\x01" + b"".join(encode_varint(v) for v in varlongs)
    files[("varint", "too-long")] = b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\xff\xff\xff\xff\x10"
    files[("varint", "long-limit")] = b"\x01" + b"\xff" * 9 + b"\x01" + b"\xff" * 9 + b"\x02"
    files[("varint", "truncated")] = b"\x00\x80"
    for (target, name), data in files.items():
        os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
        with open(os.path.join(CORPUS, target, f"seed-{name}"), "wb") as f:
            f.write(data)
    print(f"{len(files)} seeds written")


if __name__ == "__main__":
    main()
