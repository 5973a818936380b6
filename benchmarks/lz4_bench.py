"""lz4 batch decoding: how records/codecs.py decodes against the libraries' own calls.

    .venv/bin/python benchmarks/lz4_bench.py [--repeat 3] [--seconds 1.0]

Decodes the record data of lz4 batches with each decoder in turn, interleaved (every
decoder once per round, the order rotated each round), for --repeat rounds, and prints
per payload and decoder the median throughput of the inflated bytes over the rounds and
the spread (min-max):

* ``codecs``: records.codecs.decompress, what the broker runs: the frame walk sizes the
  output, then cramjam decodes each block of a plain frame (independent blocks, no
  checksums: what Kafka's producers write) straight into it
  (``cramjam.lz4.decompress_block_into``);
* ``cramjam-frame``: cramjam.lz4.decompress_into of the whole frame into the same buffer
  (cramjam inflates into a buffer of its own and copies out; codecs.py uses it for frames
  with linked blocks or checksums);
* ``python-lz4``: lz4.frame.decompress, which returns a new bytes object.

Payloads: Kafka-like v2 record sections (JSON-ish values, compressible), random bytes
(stored blocks), one-byte runs (long overlapping matches), at 16 KiB, 256 KiB and 1 MiB,
written by python-lz4 with Kafka's producer settings (64 KiB independent blocks).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import cramjam
import lz4.frame

from sundial.records import codecs
from sundial.records.builder import encode_v2_record


def kafka_like(size: int) -> bytes:
    rng = random.Random(7)
    out, i = [], 0
    total = 0
    while total < size:
        value = (b'{"user":"u%05d","event":"%s","ts":%d,"price":%d.%02d}'
                 % (rng.randrange(50_000), rng.choice([b"click", b"view", b"buy"]), 1_700_000_000_000 + i,
                    rng.randrange(1000), rng.randrange(100)))
        record = encode_v2_record(i, i, b"key-%d" % rng.randrange(10_000), value)
        out.append(record)
        total += len(record)
        i += 1
    return b"".join(out)[:size]


PAYLOADS = {
    "records": kafka_like,
    "random": lambda n: random.Random(1).randbytes(n),
    "runs": lambda n: b"a" * n,
}
SIZES = (16 << 10, 256 << 10, 1 << 20)


def codecs_decode(frame, out):
    return len(codecs.decompress(codecs.LZ4, frame, scratch=True))


def cramjam_decode(frame, out):
    return cramjam.lz4.decompress_into(frame, out)


def python_lz4_decode(frame, out):
    return len(lz4.frame.decompress(frame))


DECODERS = {"codecs": codecs_decode, "cramjam-frame": cramjam_decode, "python-lz4": python_lz4_decode}


def rate(fn, frame, size, seconds):
    out = bytearray(size)
    assert fn(frame, out) == size
    n = 0
    start = time.perf_counter()
    while True:
        fn(frame, out)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n * size / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(f"# benchmarks/lz4_bench.py --repeat {args.repeat} --seconds {args.seconds}  (pid {os.getpid()})")
    print(f"{'payload':<16} {'decoder':<13} {'MB/s median':>12} {'spread':>17}  {'vs codecs':>9}")
    for name, make in PAYLOADS.items():
        for size in SIZES:
            data = make(size)
            frame = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                       content_checksum=False, store_size=False)
            for fn in DECODERS.values():
                out = bytearray(size)
                n = fn(frame, out)
                assert n == size and (fn in (python_lz4_decode, codecs_decode) or bytes(out) == data)
            assert bytes(codecs.decompress(codecs.LZ4, frame)) == data
            results = {d: [] for d in DECODERS}
            order = list(DECODERS)
            for round_ in range(args.repeat):
                for d in order[round_ % len(order):] + order[:round_ % len(order)]:
                    results[d].append(rate(DECODERS[d], frame, size, args.seconds))
            base = statistics.median(results["codecs"])
            label = f"{name} {size >> 10} KiB"
            for d, rates in results.items():
                median = statistics.median(rates)
                print(f"{label:<16} {d:<13} {median:>12,.0f} {min(rates):>8,.0f}-{max(rates):<8,.0f} "
                      f"{median / base:>9.2f}")


if __name__ == "__main__":
    main()
