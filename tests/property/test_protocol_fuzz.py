"""Fuzz target: FrameDecoder + parse_request_header + decode_request.

Whatever the bytes, the only exceptions allowed out of the protocol package are the
documented ones (``ProtocolError`` and its subclasses FrameTooLargeError,
InvalidFrameError, UnsupportedVersionError, UnknownApiKeyError). Inputs:

* random bytes, fed in random chunks;
* valid frames of every supported API and version (kafka-python encodings of
  sparse and every-field-set values) mutated: bytes flipped, truncated, extended,
  spliced with another frame, int16/int32/varint fields overwritten with boundary
  values, the header's key or version replaced, the size prefix left lying or fixed.

CI size: a few hundred Hypothesis examples plus ``SUNDIAL_FUZZ_EXAMPLES`` (default
20,000) RNG-driven mutated frames. Long mode, by hand:

    SUNDIAL_FUZZ_EXAMPLES=1000000 .venv/bin/python -m pytest -s tests/property/test_protocol_fuzz.py

prints how many frames were decoded, refused, and how long it took.
"""

from __future__ import annotations

import os
import random
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sundial.protocol import FrameDecoder, decode_request, parse_request_header
from sundial.protocol.errors import ProtocolError
from support.kp_frames import request_corpus
from support.unit_helpers import feed_in_pieces

FUZZ_FRAMES = int(os.environ.get("SUNDIAL_FUZZ_EXAMPLES", "20000"))
HYPOTHESIS_EXAMPLES = min(max(FUZZ_FRAMES // 50, 300), 20000)
MAX_FRAME_BYTES = 1 << 20

INTERESTING_INT32 = [0, 1, -1, -2, 0x7FFFFFFF, -0x80000000, 0x7FFF, 0x8000, 0xFFFF, 255, 256, 1 << 20]
INTERESTING_INT16 = [0, 1, -1, -2, 0x7FFF, -0x8000, 255]
INTERESTING_VARINT = [b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01",
                      b"\x80\x80\x80\x80\x80\x80"]

CORPUS = request_corpus()


class Tally:
    def __init__(self) -> None:
        self.frames = self.decoded = self.refused = self.streams_refused = 0


def run_target(stream: bytes, chunk_sizes: list[int], tally: Tally | None = None) -> None:
    """Feed ``stream`` in chunks and decode every frame; only ProtocolError may escape."""
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    pos = 0
    i = 0
    while pos < len(stream):
        n = chunk_sizes[i % len(chunk_sizes)] if chunk_sizes else len(stream)
        i += 1
        try:
            frames = decoder.feed(stream[pos:pos + max(1, n)])
        except ProtocolError:  # size prefix refused: the connection would close
            if tally:
                tally.streams_refused += 1
            return
        pos += max(1, n)
        for frame in frames:
            if tally:
                tally.frames += 1
            try:
                header = parse_request_header(frame)
                decode_request(header, frame)
            except ProtocolError:
                if tally:
                    tally.refused += 1
            else:
                if tally:
                    tally.decoded += 1


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        if op == 0 and data:  # flip a byte
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1 and len(data) > 1:  # truncate
            del data[rng.randrange(len(data)):]
        elif op == 2:  # insert junk
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and len(data) >= 12:  # overwrite an int32
            at = rng.randrange(8, len(data) - 3)
            struct.pack_into(">i", data, at, rng.choice(INTERESTING_INT32))
        elif op == 4 and len(data) >= 10:  # overwrite an int16
            at = rng.randrange(8, len(data) - 1)
            struct.pack_into(">h", data, at, rng.choice(INTERESTING_INT16))
        elif op == 5 and len(data) > 8:  # overwrite with a varint
            at = rng.randrange(8, len(data))
            v = rng.choice(INTERESTING_VARINT)
            data[at:at + 1] = v
        elif op == 6 and len(data) >= 4:  # another key and/or version in the header
            struct.pack_into(">hh", data, 0, rng.choice([rng.randrange(-3, 100), struct.unpack_from(">h", data)[0]]),
                             rng.randrange(-2, 20))
        elif op == 7:  # splice with another frame
            other = rng.choice(CORPUS)
            cut = rng.randrange(len(data) + 1)
            data = data[:cut] + other[rng.randrange(len(other) + 1):]
        elif op == 8 and len(data) > 8:  # duplicate a slice
            a = rng.randrange(8, len(data))
            b = min(len(data), a + rng.randint(1, 16))
            data[b:b] = data[a:b]
    return bytes(data)


def frame_stream(rng: random.Random, body: bytes) -> bytes:
    """Size prefix: usually right, sometimes lying (short, long, negative, huge)."""
    r = rng.random()
    if r < 0.85:
        size = len(body)
    elif r < 0.9:
        size = max(0, len(body) - rng.randint(1, 8))
    elif r < 0.95:
        size = len(body) + rng.randint(1, 8)
    else:
        size = rng.choice([-1, -0x80000000, 0x7FFFFFFF, MAX_FRAME_BYTES + 1])
    return struct.pack(">i", size) + body


FUZZ = settings(max_examples=HYPOTHESIS_EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CHUNKS = st.lists(st.integers(1, 64), max_size=4)


@FUZZ
@given(st.binary(max_size=512), CHUNKS)
def test_random_bytes(data, chunks):
    run_target(data, chunks)


@FUZZ
@given(st.sampled_from(CORPUS), st.randoms(use_true_random=False), CHUNKS)
def test_mutated_valid_frames(frame, rng, chunks):
    body = mutate(rng, frame)
    run_target(frame_stream(rng, body), chunks)


@FUZZ
@given(st.sampled_from(CORPUS), st.integers(0, 2**15 - 1), st.integers(-1, 20))
def test_every_frame_under_every_key_and_version(frame, api_key, api_version):
    """A valid body decoded as some other API/version: refused or decoded, never a crash."""
    data = bytearray(frame)
    struct.pack_into(">hh", data, 0, api_key % 100, api_version)
    run_target(struct.pack(">i", len(data)) + bytes(data), [])


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=6), st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_framing_is_independent_of_chunking(bodies, chunks):
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    assert feed_in_pieces(decoder, stream, chunks) == bodies
    assert decoder.buffered_bytes == 0


def test_rng_driven_fuzz_campaign():
    """SUNDIAL_FUZZ_EXAMPLES mutated frames from a seeded RNG (seed printed)."""
    seed = int(os.environ.get("SUNDIAL_FUZZ_SEED", str(random.SystemRandom().randrange(2**32))))
    rng = random.Random(seed)
    tally = Tally()
    started = time.perf_counter()
    streams = 0
    report_every = 100_000
    next_report = report_every
    while tally.frames < FUZZ_FRAMES:
        streams += 1
        if FUZZ_FRAMES >= 2 * report_every and tally.frames >= next_report:
            next_report += report_every
            print(f"\nfuzz progress: {tally.frames:,}/{FUZZ_FRAMES:,} frames, "
                  f"{time.perf_counter() - started:.0f}s", flush=True)
        if rng.random() < 0.05:
            stream = rng.randbytes(rng.randint(0, 256))
        else:
            stream = b"".join(frame_stream(rng, mutate(rng, rng.choice(CORPUS))) for _ in range(rng.randint(1, 3)))
        chunks = [rng.randint(1, 512) for _ in range(rng.randint(0, 3))]
        try:
            run_target(stream, chunks, tally)
        except Exception as exc:  # pragma: no cover - a finding
            pytest.fail(f"seed {seed}, stream {streams}: {type(exc).__name__}: {exc}\n{stream.hex()}")
    elapsed = time.perf_counter() - started
    print(f"\nfuzz: seed={seed} streams={streams} frames={tally.frames} decoded={tally.decoded} "
          f"refused={tally.refused} streams_refused_by_framing={tally.streams_refused} crashes=0 elapsed={elapsed:.1f}s "
          f"({tally.frames / elapsed:,.0f} frames/s)")
