"""Differential checks of the C accelerators against their pure-Python references.

One target per C entry point that reads untrusted bytes. Each ``check_*`` takes the raw
bytes of one fuzz input, derives the call's arguments from a small header (layouts
below), runs the C function and the Python reference on the same bytes and raises
:class:`Mismatch` when they disagree: one answers and the other refuses, or both answer
differently (a refusal is a ``ValueError`` from C and the reference's own error class;
its message may differ). Anything else either side raises (``MemoryError``,
``struct.error``, ``OverflowError``, ...) propagates: that is a finding too.

The C side reads a copy of the bytes of exactly their length (a ctypes array over C
``malloc`` memory: under AddressSanitizer, one byte read past it is reported) and
the region it is handed ends before a few trailing bytes that only a walk reading past
``end`` would see.

Used by tests/fuzz/fuzz.py (atheris, coverage-guided: ``scripts/fuzz TARGET SECONDS``)
and by tests/unit/test_fuzz_corpus.py, which replays tests/fuzz/corpus/TARGET/* in the
normal suite.

Layouts (little endian; a short input reads as if zero-padded):

* walks (``scan_v2``, ``find_v2``, ``index_v2``): count selector u8, base timestamp i64,
  target i64, min offset delta i8, flags u8 (bit 0: exact; bits 4-7: trailing bytes), then
  the records region and its trailing bytes.
* ``varint``: flags u8 (bit 0: varlongs, else varints), then the bytes to read.
* cleaner (``cleaner_put``, ``cleaner_filter``): slots u8 (1-64), max entries u8 (at most
  the slots), count selector u8, base offset, start offset, base timestamp, max timestamp,
  latest offset, horizon and new horizon (i64 each), flags u8 (bit 0 log append time, bit 1
  retain deletes, bit 2 has a horizon, bits 4-7 trailing bytes), then region + trailing bytes.
"""

from __future__ import annotations

import ctypes
import os
import struct
import weakref

from sundial.records import _speedups as c_walks
from sundial.records import walks
from sundial.records.errors import CorruptRecordError, InvalidRecordError
from sundial.records.varint import read_varint, read_varlong
from sundial.storage import _cleaner_speedups as c_cleaner
from sundial.storage import offset_map


class Mismatch(AssertionError):
    """The C accelerator and the Python reference disagree on one input."""


#: Count selectors from 240 up: counts a real header may carry (negative, huge, past int32).
SPECIAL_COUNTS = (-1, -2, -(1 << 31), (1 << 31) - 1, 1 << 31, (1 << 32) + 1, 1 << 40, 1 << 62,
                  (1 << 63) - 1, -(1 << 63))
PY_REFUSALS = (InvalidRecordError, CorruptRecordError, ValueError)


class Header:
    """Fields read off the front of a fuzz input; past its end, zeros."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk + bytes(n - len(chunk))

    def u8(self) -> int:
        return self.take(1)[0]

    def i8(self) -> int:
        return struct.unpack("<b", self.take(1))[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def i64(self) -> int:
        return struct.unpack("<q", self.take(8))[0]

    def count(self) -> int:
        sel = self.u8()
        return sel if sel < 240 else SPECIAL_COUNTS[(sel - 240) % len(SPECIAL_COUNTS)]

    def rest(self) -> bytes:
        return self.data[self.at:]


_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = (ctypes.c_size_t,)
_libc.free.argtypes = (ctypes.c_void_p,)


def exact(data: bytes):
    """A writable copy of ``data`` in a buffer of exactly its length.

    The buffer comes from the C ``malloc`` (freed with the array), not from Python's
    allocator, so under AddressSanitizer a byte read or written past it is reported
    whatever ``PYTHONMALLOC`` says (see ``OWN_ALLOCATOR_TARGETS``).
    """
    ptr = _libc.malloc(len(data))
    if not ptr:
        raise MemoryError(f"malloc({len(data)}) failed")
    buf = (ctypes.c_ubyte * len(data)).from_address(ptr)
    weakref.finalize(buf, _libc.free, ptr)
    ctypes.memmove(buf, data, len(data))
    return buf


def outcome(fn, *args, refusals):
    """("ok", result) or ("refused", None) when ``fn`` raises one of ``refusals``."""
    try:
        return "ok", fn(*args)
    except refusals:
        return "refused", None


def agree(name: str, c, py, data: bytes) -> None:
    if c != py:
        raise Mismatch(f"{name}: C {c!r} != Python {py!r} for input {data!r}")


# -- record walks (records/_speedups.c vs records/walks.py) ---------------------------------------------
def _walk_args(data: bytes):
    h = Header(data)
    count, base_ts, target, min_delta, flags = h.count(), h.i64(), h.i64(), h.i8(), h.u8()
    body = h.rest()
    tail = min(flags >> 4, len(body))
    return count, base_ts, target, min_delta, bool(flags & 1), body, len(body) - tail


def check_scan_v2(data: bytes) -> None:
    count, base_ts, _t, _m, _e, body, end = _walk_args(data)
    c = outcome(c_walks.scan_v2, exact(body), 0, end, count, base_ts, refusals=ValueError)
    py = outcome(walks._scan_v2_py, body, 0, end, count, base_ts, refusals=PY_REFUSALS)
    agree("scan_v2", c, (py[0], None if py[1] is None else tuple(py[1])), data)


def check_find_v2(data: bytes) -> None:
    count, base_ts, target, min_delta, exact_match, body, end = _walk_args(data)
    c = outcome(c_walks.find_v2, exact(body), 0, end, count, base_ts, target, min_delta, exact_match,
                refusals=ValueError)
    py = outcome(walks._find_v2_py, body, 0, end, count, base_ts, target, min_delta, exact_match,
                 refusals=PY_REFUSALS)
    agree("find_v2", c, py, data)


def check_index_v2(data: bytes) -> None:
    count, base_ts, _t, _m, _e, body, end = _walk_args(data)
    c = outcome(c_walks.index_v2, exact(body), 0, end, count, base_ts, refusals=ValueError)
    py = outcome(walks._index_v2_py, body, 0, end, count, base_ts, refusals=PY_REFUSALS)
    if py[0] == "ok":
        py = ("ok", (py[1][0].tobytes(), py[1][1].tobytes()))
    agree("index_v2", c, py, data)


# -- varints (records/_varint.h vs records/varint.py) ---------------------------------------------------
def _read_all_py(body: bytes, reader) -> list[int]:
    values, pos = [], 0
    try:
        while pos < len(body):
            value, pos = reader(body, pos)
            values.append(value)
    except IndexError:
        raise InvalidRecordError("varint runs past the end") from None
    return values


def check_varint(data: bytes) -> None:
    h = Header(data)
    longs = bool(h.u8() & 1)
    body = h.rest()
    c = outcome(c_walks.read_varints, exact(body), 0, len(body), 10 if longs else 5, refusals=ValueError)
    py = outcome(_read_all_py, body, read_varlong if longs else read_varint, refusals=PY_REFUSALS)
    agree("varint", c, py, data)


# -- the cleaner (storage/_cleaner_speedups.c vs storage/offset_map.py) ---------------------------------
def _cleaner_args(data: bytes) -> dict:
    h = Header(data)
    slots = h.u8() % 64 + 1
    args = {"slots": slots, "max_entries": h.u8() % (slots + 1), "count": h.count(), "base_offset": h.i64(),
            "start_offset": h.i64(), "base_ts": h.i64(), "max_ts": h.i64(), "latest_offset": h.i64(),
            "horizon": h.i64(), "new_horizon": h.i64()}
    flags = h.u8()
    body = h.rest()
    args.update(log_append_time=bool(flags & 1), retain_deletes=bool(flags & 2), has_horizon=bool(flags & 4),
                body=body, end=len(body) - min(flags >> 4, len(body)))
    return args


def check_cleaner_put(data: bytes) -> None:
    a = _cleaner_args(data)
    body, end, slots = a["body"], a["end"], a["slots"]
    agree("hash", c_cleaner.hash(exact(body)), offset_map._hash_py(body), data)
    map_c, map_py = exact(bytes(slots * 24)), bytearray(slots * 24)
    c = outcome(c_cleaner.map_put_v2, map_c, slots, 0, a["max_entries"], exact(body), 0, end, a["count"],
                a["base_offset"], a["start_offset"], refusals=ValueError)
    py = outcome(offset_map._put_v2_py, map_py, slots, 0, a["max_entries"], body, 0, end, a["count"],
                 a["base_offset"], a["start_offset"], refusals=PY_REFUSALS)
    agree("map_put_v2", c, py, data)
    agree("map_put_v2 (the map)", bytes(map_c), bytes(map_py), data)


def check_cleaner_filter(data: bytes) -> None:
    a = _cleaner_args(data)
    body, end, slots = a["body"], a["end"], a["slots"]
    # the map the filter reads: the records' own keys, put by the reference (errors leave what it put)
    prepared = bytearray(slots * 24)
    outcome(offset_map._put_v2_py, prepared, slots, 0, a["max_entries"], body, 0, end, a["count"],
            a["base_offset"], a["start_offset"], refusals=PY_REFUSALS)
    args = (slots, None, 0, end, a["count"], a["base_offset"], a["base_ts"], a["log_append_time"], a["max_ts"],
            a["latest_offset"], a["retain_deletes"], a["has_horizon"], a["horizon"], a["new_horizon"])
    c = outcome(c_cleaner.filter_v2, exact(bytes(prepared)), args[0], exact(body), *args[2:], refusals=ValueError)
    py = outcome(offset_map._filter_v2_py, bytearray(prepared), args[0], body, *args[2:], refusals=PY_REFUSALS)
    agree("filter_v2", c, py, data)


#: Targets whose C reads and writes heap memory only through the buffers ``exact`` makes
#: (``map_put_v2`` and ``hash``: the map, the records, the stack; no Python object it fills
#: in). scripts/fuzz runs them with Python's own small-object allocator: the sanitizer still
#: sees every byte the C touches, and the pure-Python reference, which allocates an object
#: per step of its hash, no longer goes through ASan's allocator (about five times faster).
#: The others keep ``PYTHONMALLOC=malloc``: index_v2 and cleaner_filter write into bytes
#: objects their C creates, and the rest run fast enough as they are.
OWN_ALLOCATOR_TARGETS = frozenset({"cleaner_put"})

TARGETS = {
    "scan_v2": check_scan_v2,
    "find_v2": check_find_v2,
    "index_v2": check_index_v2,
    "varint": check_varint,
    "cleaner_put": check_cleaner_put,
    "cleaner_filter": check_cleaner_filter,
}
