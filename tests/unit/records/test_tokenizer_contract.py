"""The record tokenizer contract: every walk over the records of a v2 batch, C and Python, gives the
same answer and the same refusal on the same bytes.

The walks: the C entry points ``scan_v2``, ``find_v2``, ``index_v2`` (records/_speedups.c) and
``map_put_v2``, ``filter_v2`` (storage/_cleaner_speedups.c), all reading through ``parse_record``
(records/_record.h); the Python tokenizer :func:`records.tokenizer.record_spans` at each depth and
its consumers (the walks' references, ``iter_v2_records``, ``first_record_header``, the cleaner's
references); and the Spark source's decoder (pipeline/records.py ``_decode_v2``), which keeps its own
inlined varints for speed.

Ground truth is a model written here from the format (byte-at-a-time varints, the record read
from a slice of the section): it says what each record holds, or which refusal comes first at a
given depth. The corpus is Hypothesis-generated records (non-minimal varint encodings included)
with at most one defect each: a zero-length record, a cut-off section, a record length too long or
too short, a varint too long or out of range, a negative length, header count or header key size,
a declared count too large or too small, trailing bytes, or a flipped byte.

"The same refusal" is the same message for the C walks and the tokenizer's consumers (each names
one failure of the module doc of records/tokenizer.py); the Spark decoder raises its own
``CorruptBatchError`` and must raise it exactly when the model refuses the section.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sundial.records import tokenizer as T
from sundial.records import walks
from sundial.records.batch import BatchView
from sundial.records.builder import v2_header
from sundial.records.errors import InvalidRecordError
from sundial.records.extensions import extensions_enabled
from sundial.records.v2 import iter_v2_records
from sundial.storage import offset_map

_speedups = _cleaner_speedups = None
if extensions_enabled():
    try:
        from sundial.records import _speedups
        from sundial.storage import _cleaner_speedups
    except ImportError:  # pragma: no cover - depends on the build
        _speedups = _cleaner_speedups = None
try:
    from sundial.pipeline.records import Columns, CorruptBatchError, Window, decode_records
except ImportError:  # pragma: no cover - the Spark extra is not installed
    decode_records = None

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
BASE_OFFSET = 1 << 40          # offsets stay positive whatever the deltas
BASE_TS = 1_700_000_000_000
SLOTS = 4096


def wrap64(x: int) -> int:
    return ((x + (1 << 63)) % (1 << 64)) - (1 << 63)


# ------------------------------------------------------------------------------------------- the model

class Refused(Exception):
    pass


def model_varint(b: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag LEB128 of at most max_bytes bytes, read byte by byte up to the end of ``b``."""
    kind = "varint" if max_bytes == 5 else "varlong"
    u = 0
    for i in range(max_bytes):
        if pos + i >= len(b):
            raise Refused(T.TRUNCATED)
        byte = b[pos + i]
        if i == max_bytes - 1 and byte & 0x80:
            raise Refused(f"{kind} is longer than {max_bytes} bytes")
        u |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if u >> (32 if max_bytes == 5 else 64):
                raise Refused(f"{kind} does not fit in {32 if max_bytes == 5 else 64} bits")
            return (u >> 1) ^ -(u & 1), pos + i + 1
    raise AssertionError("unreachable")


def model_record(b: bytes, pos: int, depth: int):
    """(record, next position): record = (ts_delta, offset_delta, key, value, headers), the fields
    past ``depth`` left as None."""
    if pos >= len(b):
        raise Refused(T.MISSING)
    length, body = model_varint(b, pos, 5)
    if length < 0 or body + length > len(b):
        raise Refused(T.BAD_LENGTH)
    end = body + length

    def within(p):
        if p > end:
            raise Refused(T.OVERRUN)
        return p

    def blob(p):
        n, p = model_varint(b, p, 5)
        within(p)
        if n < 0:
            return None, p
        return b[p:within(p + n)], p + n

    within(body + 1)                                        # attributes
    ts_delta, p = model_varint(b, body + 1, 10)
    within(p)
    offset_delta, p = model_varint(b, p, 5)
    within(p)
    if depth == T.DELTAS:
        return (ts_delta, offset_delta, None, None, None), end
    key, p = blob(p)
    value, p = blob(p)
    if depth == T.KEY_VALUE:
        return (ts_delta, offset_delta, key, value, None), end
    count, p = model_varint(b, p, 5)
    within(p)
    if count < 0:
        raise Refused(T.HEADER_COUNT)
    headers = []
    for _ in range(count):
        n, p = model_varint(b, p, 5)
        within(p)
        if n < 0:
            raise Refused(T.HEADER_KEY)
        hkey = b[p:within(p + n)]
        hvalue, p = blob(p + n)
        headers.append((hkey, hvalue))
    if p != end:
        raise Refused(T.SIZE)
    return (ts_delta, offset_delta, key, value, tuple(headers)), end


def model(section: bytes, count: int, depth: int, to_end: bool):
    """(records read, refusal message or None) for ``count`` records of ``section``."""
    if count < 0:
        return [], T.NEGATIVE_COUNT
    records, pos = [], 0
    try:
        for _ in range(count):
            record, pos = model_record(section, pos, depth)
            records.append(record)
        if to_end and pos != len(section):
            raise Refused(T.TRAILING)
    except Refused as exc:
        return records, str(exc)
    return records, None


# ------------------------------------------------------------------------------------------- the corpus

def zigzag(n: int, pad: int = 0) -> bytes:
    """Zig-zag LEB128 of n, with ``pad`` extra continuation bytes (a longer, still valid encoding)."""
    u = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    for _ in range(pad):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def enc32(n: int, pad: int) -> bytes:
    """A varint (int32) encoding padded to at most 5 bytes."""
    base = zigzag(n)
    return zigzag(n, min(pad, 5 - len(base)))


blobs = st.one_of(st.none(), st.binary(max_size=12), st.binary(min_size=120, max_size=200))
header_keys = st.text(alphabet="abcxyz-é", max_size=4)
records_st = st.lists(
    st.tuples(st.one_of(st.integers(-1000, 1000), st.integers(-(1 << 40), 1 << 40)),  # ts delta
              st.one_of(st.none(), st.integers(-(1 << 31), (1 << 31) - 1)),  # offset delta (None: the index)
              blobs, blobs,
              st.lists(st.tuples(header_keys, blobs), max_size=2),
              st.integers(0, 2)),                                                            # varint padding
    max_size=6)


def encode_fields(index, rec):
    ts_delta, offset_delta, key, value, headers, pad = rec
    if offset_delta is None:
        offset_delta = index

    def blob(x):
        return [enc32(-1, pad)] if x is None else [enc32(len(x), pad), x]

    fields = {"attributes": b"\x00", "ts": zigzag(ts_delta, pad if len(zigzag(ts_delta)) + pad <= 10 else 0),
              "offset": enc32(offset_delta, pad), "key": blob(key), "value": blob(value),
              "hcount": enc32(len(headers), pad), "headers": []}
    for hkey, hvalue in headers:
        kb = hkey.encode()
        fields["headers"] += [enc32(len(kb), pad), kb] + blob(hvalue)
    return fields


def body_of(fields) -> bytes:
    return b"".join([fields["attributes"], fields["ts"], fields["offset"], *fields["key"], *fields["value"],
                     fields["hcount"], *fields["headers"]])


DEFECTS = ("none", "zero_length", "truncate", "longer", "shorter", "too_long_varint", "too_large_varint",
           "negative_length", "negative_header_count", "negative_header_key", "count_plus", "count_minus",
           "trailing", "flip")
VARINT_FIELDS = ("length", "ts", "offset", "key", "value", "hcount")


@st.composite
def sections(draw):
    """(records section, declared count, defect name)."""
    recs = draw(records_st)
    defect = draw(st.sampled_from(DEFECTS))
    encoded = [encode_fields(i, r) for i, r in enumerate(recs)]
    count = len(encoded)
    at = draw(st.integers(0, max(0, count - 1)))
    lengths = {}                              # record index -> declared length override (raw bytes)
    if encoded and defect in ("too_long_varint", "too_large_varint"):
        field = draw(st.sampled_from(VARINT_FIELDS))
        width = 10 if field == "ts" else 5
        if defect == "too_long_varint":       # every byte continues
            bad = b"\x80" * (width - 1) + b"\x81" + draw(st.binary(max_size=2))
        else:                                 # the last byte holds bits past 32/64
            bad = b"\xff" * (width - 1) + (b"\x1f" if width == 5 else b"\x03")
        f = encoded[at]
        if field == "length":
            lengths[at] = bad
        elif field in ("key", "value"):
            f[field] = [bad]
        else:
            f[field] = bad
    elif encoded and defect == "negative_header_count":
        encoded[at]["hcount"] = zigzag(draw(st.integers(-5, -1)))
    elif encoded and defect == "negative_header_key":
        encoded[at]["hcount"] = zigzag(1)
        encoded[at]["headers"] = [zigzag(draw(st.integers(-3, -1))), zigzag(0)]
    parts = []
    for i, f in enumerate(encoded):
        body = body_of(f)
        length = len(body)
        if i == at and defect == "zero_length":
            parts.append(zigzag(0))
            continue
        if i == at and defect == "longer":
            length += draw(st.integers(1, 300))
        elif i == at and defect == "shorter":
            length -= draw(st.integers(1, max(1, length)))
        elif i == at and defect == "negative_length":
            length = draw(st.integers(-300, -1))
        parts.append(lengths.get(i, zigzag(length)) + body)
    if defect == "zero_length" and not encoded:
        parts.append(zigzag(0))
        count = 1
    section = b"".join(parts)
    if defect == "truncate" and section:
        section = section[:draw(st.integers(0, len(section) - 1))]
    elif defect == "count_plus":
        count += draw(st.integers(1, 3))
    elif defect == "count_minus" and count:
        count -= draw(st.integers(1, count))
    elif defect == "trailing":
        section += draw(st.binary(min_size=1, max_size=8))
    elif defect == "flip" and section:
        i = draw(st.integers(0, len(section) - 1))
        section = section[:i] + bytes([section[i] ^ draw(st.integers(1, 255))]) + section[i + 1:]
    return section, count, defect


# ------------------------------------------------------------------------------------------- running the walks

def outcome(fn, *args):
    """("ok", answer) or ("refused", message)."""
    try:
        return "ok", fn(*args)
    except (InvalidRecordError, ValueError) as exc:
        return "refused", str(exc)


def padded(section: bytes) -> tuple[bytes, int, int]:
    """The section between unrelated bytes: a walk reading outside [pos, end) would see them."""
    return b"\x03\x7f" + section + b"\x81\x81", 2, 2 + len(section)


def expected_scan(section, count):
    records, err = model(section, count, T.FULL, True)
    if err:
        return "refused", err
    stamps = [wrap64(BASE_TS + r[0]) for r in records]
    stamps = [t for t in stamps if t != -1]
    nulls = [i for i, r in enumerate(records) if r[2] is None]
    return "ok", (min(stamps) if stamps else None, max(stamps) if stamps else None,
                  all(r[1] == i for i, r in enumerate(records)), nulls[0] if nulls else -1)


def expected_find(section, count, target, min_delta, exact):
    records, err = model(section, count, T.DELTAS, False)
    for ts_delta, offset_delta, *_ in records:
        ts = wrap64(BASE_TS + ts_delta)
        if offset_delta >= min_delta and (ts == target if exact else ts >= target):
            return "ok", (offset_delta, ts)
    return ("refused", err) if err else ("ok", None)


def expected_index(section, count):
    records, err = model(section, count, T.DELTAS, False)
    if err:
        return "refused", err
    offsets, maxima, running = [], [], INT64_MIN
    for ts_delta, offset_delta, *_ in records:
        running = max(running, wrap64(BASE_TS + ts_delta))
        offsets.append(offset_delta)
        maxima.append(running)
    return "ok", (offsets, maxima)


def expected_put(section, count):
    records, err = model(section, count, T.KEY_VALUE, True)
    if err:
        return "refused", err
    keyed = [(r[2], BASE_OFFSET + r[1]) for r in records if r[2] is not None]
    return "ok", (len({k for k, _ in keyed}), keyed[-1][1] if keyed else -1, False, count)


def expected_filter(section, count):
    """Nothing cleaned (every offset is past the map's latest): each record is kept, the batch
    keeps its bytes (it has a delete horizon already)."""
    records, err = model(section, count, T.KEY_VALUE, True)
    if err:
        return "refused", err
    if not records:
        return "ok", (0, 0, 0, -1, b"", 0, -1, False)
    tombstones = sum(r[3] is None for r in records)
    max_ts = max([-1] + [wrap64(BASE_TS + r[0]) for r in records])
    return "ok", (count, 0, tombstones, max(BASE_OFFSET + r[1] for r in records), None, BASE_TS, max_ts, True)


def spans_as_records(b, pos, end, count, depth, to_end):
    out = []
    for _a, _o, _e, ts_delta, offset_delta, ka, kl, va, vl, hdrs in T.record_spans(b, pos, end, count, depth,
                                                                                   to_end=to_end):
        key = value = headers = None
        if depth != T.DELTAS:
            key = None if kl < 0 else bytes(b[ka:ka + kl])
            value = None if vl < 0 else bytes(b[va:va + vl])
        if depth == T.FULL:
            headers = tuple((bytes(b[hk:hk + hl]), None if vl2 < 0 else bytes(b[hv:hv + vl2]))
                            for hk, hl, hv, vl2 in hdrs)
        out.append((ts_delta, offset_delta, key, value, headers))
    return out


def batch_of(section: bytes, count: int) -> bytes:
    header = v2_header(base_offset=BASE_OFFSET, batch_bytes=61 + len(section), partition_leader_epoch=0,
                       attributes=0, last_offset_delta=max(count - 1, 0), base_timestamp=BASE_TS,
                       max_timestamp=BASE_TS, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                       record_count=count, payload=section)
    return header + section


def check_section(section: bytes, count: int) -> None:
    buf, pos, end = padded(section)
    seen = []

    def expect(name, got, want):
        seen.append(name)
        assert got == want, f"{name}: {got!r} != model {want!r} for section {section!r}, count {count}"

    # the Python tokenizer itself, at each depth, with and without the trailing-bytes check
    for depth in (T.DELTAS, T.KEY_VALUE, T.FULL):
        for to_end in (False, True):
            records, err = model(section, count, depth, to_end)
            want = ("refused", err) if err else ("ok", records)
            expect(f"record_spans depth {depth} to_end {to_end}",
                   outcome(spans_as_records, buf, pos, end, count, depth, to_end), want)

    # the structural scan
    want = expected_scan(section, count)
    expect("scan_v2 (Python)", outcome(lambda: tuple(walks._scan_v2_py(buf, pos, end, count, BASE_TS))), want)
    if _speedups is not None:
        expect("scan_v2 (C)", outcome(_speedups.scan_v2, buf, pos, end, count, BASE_TS), want)
        expect("walks._scan_v2", outcome(lambda: tuple(walks._scan_v2(buf, pos, end, count, BASE_TS))), want)

    # the searches: one that reads every record, one that stops at a record
    for target, min_delta, exact in ((INT64_MAX, INT64_MIN, False), (BASE_TS, 1, False), (BASE_TS, INT64_MIN, True)):
        want = expected_find(section, count, target, min_delta, exact)
        args = (buf, pos, end, count, BASE_TS, target, min_delta, exact)
        expect("find_v2 (Python)", outcome(walks._find_v2_py, *args), want)
        if _speedups is not None:
            expect("find_v2 (C)", outcome(_speedups.find_v2, *args), want)

    want = expected_index(section, count)
    expect("index_v2 (Python)", outcome(lambda: tuple(a.tolist() for a in walks._index_v2_py(buf, pos, end, count,
                                                                                            BASE_TS))), want)
    if _speedups is not None:
        expect("index_v2 (C)", outcome(lambda: tuple(list(memoryview(a).cast("q")) for a in _speedups.index_v2(
            buf, pos, end, count, BASE_TS))), want)

    if count >= 1:
        records, err = model(section, 1, T.DELTAS, False)
        want = ("refused", err) if err else ("ok", records[0][:2])
        expect("first_record_header", outcome(walks.first_record_header, buf, pos, end), want)

    # the cleaner's walks: the map put, then the filter over a map that cleans nothing
    want = expected_put(section, count)
    put_args = (SLOTS, 0, SLOTS, buf, pos, end, count, BASE_OFFSET, INT64_MIN)
    expect("map_put_v2 (Python)", outcome(offset_map._put_v2_py, bytearray(24 * SLOTS), *put_args), want)
    if _cleaner_speedups is not None:
        expect("map_put_v2 (C)", outcome(_cleaner_speedups.map_put_v2, bytearray(24 * SLOTS), *put_args), want)
    want = expected_filter(section, count)
    filter_args = (SLOTS, buf, pos, end, count, BASE_OFFSET, BASE_TS, False, BASE_TS, -1, False, True, BASE_TS,
                   BASE_TS)
    expect("filter_v2 (Python)", outcome(offset_map._filter_v2_py, bytearray(24 * SLOTS), *filter_args), want)
    if _cleaner_speedups is not None:
        expect("filter_v2 (C)", outcome(_cleaner_speedups.filter_v2, bytearray(24 * SLOTS), *filter_args), want)

    if not -(1 << 31) <= count < (1 << 31):
        return                           # a batch header holds an int32 count: the walks alone take more
    # the record iterator, over a whole batch
    batch = batch_of(section, count)
    records, err = model(section, count, T.FULL, True)
    if count < 0:                      # the batch-level check before the tokenizer (Kafka's message)
        err = f"found invalid record count {count} in magic v2 batch"
    want = ("refused", err) if err else ("ok", [
        (BASE_OFFSET + r[1], wrap64(BASE_TS + r[0]), r[2], r[3],
         tuple((k.decode("utf-8", "surrogateescape"), v) for k, v in r[4])) for r in records])
    expect("iter_v2_records", outcome(lambda: [(r.offset, r.timestamp, r.key, r.value, r.headers)
                                               for r in iter_v2_records(BatchView(memoryview(batch)))]), want)

    # the Spark source's decoder: its own error class, raised exactly when the model refuses
    if decode_records is not None and count >= 1:
        cols = Columns()
        try:
            decode_records(batch, Window(0, 1 << 62), cols)
            got = ("ok", [(o, t, k, v, tuple(h or ())) for o, t, k, v, h in
                          zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers)])
        except CorruptBatchError:
            got = ("refused", None)
        try:
            want = ("refused", None) if err else ("ok", [
                (BASE_OFFSET + r[1], BASE_TS + r[0], r[2], r[3], tuple((k.decode(), v) for k, v in r[4]))
                for r in records])
        except UnicodeDecodeError:     # header keys are strings to the Spark source: it refuses the batch
            want = ("refused", None)
        expect("pipeline _decode_v2", got, want)


@SETTINGS
@given(sections())
def test_every_walk_agrees_with_the_model(case):
    section, count, _defect = case
    check_section(section, count)


# ------------------------------------------------------------------------------------------- named edges

def _record(body: bytes) -> bytes:
    return zigzag(len(body)) + body


GOOD = _record(b"\x00\x00\x00\x02k\x02v\x00")                    # key "k", value "v", no headers
EDGES = {
    # a zero-length record: its attributes lie past its declared end
    "zero-length record": (zigzag(0), 1, T.OVERRUN),
    "zero-length record after a good one": (GOOD + zigzag(0) + GOOD, 3, T.OVERRUN),
    # the section ends inside the length varint, and inside a record
    "truncated length varint": (b"\x80", 1, T.TRUNCATED),
    "truncated record": (GOOD[:-3], 1, T.BAD_LENGTH),
    "truncated varint in the last byte": (zigzag(3) + b"\x00\x00\x80", 1, T.TRUNCATED),
    # a declared length past the section, and one longer than the record's fields
    "length past the section": (zigzag(len(GOOD) + 5) + GOOD[1:], 1, T.BAD_LENGTH),
    "overlong length": (zigzag(len(GOOD)) + GOOD[1:] + b"\x00", 1, T.SIZE),
    "negative length": (zigzag(-2) + GOOD[1:], 1, T.BAD_LENGTH),
    # varints
    "six-byte length varint": (b"\x80\x80\x80\x80\x80\x00", 1, "varint is longer than 5 bytes"),
    "length varint past 32 bits": (b"\xff\xff\xff\xff\x1f", 1, "varint does not fit in 32 bits"),
    "eleven-byte timestamp delta": (_record(b"\x00" + b"\x80" * 9 + b"\x80\x00" + b"\x00" * 4), 1,
                                    "varlong is longer than 10 bytes"),
    "timestamp delta past 64 bits": (_record(b"\x00" + b"\xff" * 9 + b"\x02" + b"\x00" * 4), 1,
                                     "varlong does not fit in 64 bits"),
    # fields past the declared end
    "key past the record": (_record(b"\x00\x00\x00\x10kv\x00\x00"), 1, T.OVERRUN),
    "key length varint past the record": (zigzag(3) + b"\x00\x00\x00" + b"\x00\x00\x00", 1, T.OVERRUN),
    # headers
    "negative header count": (_record(b"\x00\x00\x00\x01\x01\x01"), 1, T.HEADER_COUNT),
    "null header key": (_record(b"\x00\x00\x00\x01\x01\x02\x01\x00"), 1, T.HEADER_KEY),
    # the count
    "more records declared than held": (GOOD, 2, T.MISSING),
    "bytes after the declared records": (GOOD + GOOD, 1, T.TRAILING),
    "negative count": (GOOD, -1, T.NEGATIVE_COUNT),
}


@pytest.mark.parametrize("name", sorted(EDGES))
def test_each_edge_is_refused_alike_by_every_walk(name):
    section, count, message = EDGES[name]
    assert model(section, count, T.FULL, True)[1] == message
    check_section(section, count)


def test_a_zero_length_record_is_refused_by_the_walks_that_read_only_deltas():
    """The searches read three fields of each record; a zero-length record used to pass them (its
    deltas were read from the next record's bytes) while the scan refused it."""
    section = GOOD + zigzag(0) + GOOD
    for walk in (walks._find_v2_py, *([_speedups.find_v2] if _speedups else [])):
        with pytest.raises((InvalidRecordError, ValueError), match="run past its declared length"):
            walk(section, 0, len(section), 3, BASE_TS, INT64_MAX, INT64_MIN, False)


@pytest.mark.parametrize("count", [(1 << 31) - 1, 1 << 62, (1 << 63) - 1])
def test_a_huge_declared_count_is_refused_at_the_first_bad_record_not_before(count):
    """The C index and filter size their arrays by what the section can hold, so a huge count
    fails where the walk fails, as in Python (a zero-length first record here)."""
    section = zigzag(0) + GOOD * 3
    check_section(section, count)
    assert model(section, count, T.FULL, True)[1] == T.OVERRUN


def test_padded_walk_reads_nothing_outside_its_region():
    section = GOOD * 2
    buf, pos, end = padded(section)
    assert struct.unpack_from("B", buf, end)[0] == 0x81
    check_section(section, 2)


def test_the_corpus_reaches_every_refusal():
    """The generator above makes every failure of the tokenizer (so the property test covers them)."""
    messages = {model(s, c, T.FULL, True)[1] for s, c, _m in EDGES.values()}
    assert {T.MISSING, T.TRUNCATED, T.BAD_LENGTH, T.OVERRUN, T.HEADER_COUNT, T.HEADER_KEY, T.SIZE, T.TRAILING,
            T.NEGATIVE_COUNT} <= messages


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=40), st.integers(-2, 6))
def test_random_bytes_are_answered_or_refused_alike(section, count):
    check_section(section, count)
