"""Property tests for records/ (views, walks, builder) and storage/validator.py, convert.py (Hypothesis).

Ground truth is computed here by brute force over what was written.
"""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from sundial.config.topic import TopicConfig
from sundial import records as R
from sundial.records import walks as W
from sundial.records.builder import SimpleRecord, build_batch, build_records
from sundial.storage.convert import down_convert
from sundial.storage.errors import InvalidRecordError, InvalidTimestampError
from sundial.storage.validator import validate_records

try:
    from sundial.records import _speedups
except ImportError:  # pragma: no cover
    _speedups = None

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1

timestamps = st.one_of(st.just(-1), st.integers(NOW - 10_000, NOW + 10_000), st.integers(0, 2**45))
blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=5), blobs), max_size=2).map(tuple)


@st.composite
def record_lists(draw, min_size=1, max_size=30, with_headers=True):
    n = draw(st.integers(min_size, max_size))
    return [SimpleRecord(draw(timestamps), draw(blobs), draw(blobs), draw(headers) if with_headers else ())
            for _ in range(n)]


def codec_for(draw, magic):
    return draw(st.sampled_from([0, 1, 2, 3, 4] if magic == 2 else [0, 1, 2, 3]))


def reader_view(record, magic, offset, log_append_time=None):
    ts = -1 if magic == 0 else (log_append_time if log_append_time is not None else record.timestamp)
    return (offset, ts, record.key, record.value, record.headers if magic == 2 else ())


# ---------------------------------------------------------------- builder <-> reader

@SETTINGS
@given(data=st.data(), magic=st.sampled_from([0, 1, 2]), base=st.integers(0, 2**40),
       log_append=st.booleans())
def test_build_then_read_round_trip(data, magic, base, log_append):
    recs = data.draw(record_lists(with_headers=magic == 2))
    codec = codec_for(data.draw, magic)
    lat = NOW if log_append and magic > 0 else None
    built = build_records(magic, recs, base_offset=base, compression=codec,
                          timestamp_type=R.LOG_APPEND_TIME if lat else R.CREATE_TIME,
                          log_append_time_ms=NOW if lat else -1)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in R.iter_records(built.buffer)]
    assert got == [reader_view(r, magic, base + i, lat) for i, r in enumerate(recs)]
    views = list(R.iter_batches(built.buffer))
    assert all(v.crc_valid() for v in views)
    assert views[-1].last_offset == base + len(recs) - 1
    if codec in (0, 1):
        theirs = []
        mr = MemoryRecords(built.buffer)
        while mr.has_next():
            theirs += [(r.offset, r.key, r.value) for r in mr.next_batch()]
        assert theirs == [(o, k, v) for o, _, k, v, _ in got]


# ---------------------------------------------------------------- C walks == Python reference

def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (InvalidRecordError, ValueError):
        return ("error", None)


@pytest.mark.skipif(_speedups is None, reason="C accelerator not built")
@SETTINGS
@given(data=st.data())
def test_c_and_python_walks_agree(data):
    recs = data.draw(record_lists(max_size=20))
    base_ts = data.draw(st.one_of(st.integers(-2**63, 2**63 - 1), timestamps))
    payload = bytearray(build_batch(2, recs)[61:])
    for _ in range(data.draw(st.integers(0, 3))):          # corrupt some bytes
        if payload:
            payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()) and payload:
        del payload[data.draw(st.integers(0, len(payload) - 1)):]
    buf = bytes(data.draw(st.binary(max_size=3))) + bytes(payload) + b"\x00\x01"
    pos, end = len(buf) - len(payload) - 2, len(buf) - 2
    count = data.draw(st.sampled_from([len(recs), len(recs) + 1, max(0, len(recs) - 1)]))

    def c_scan(*a):
        try:
            return R.V2RecordScan(*_speedups.scan_v2(*a))
        except ValueError as exc:
            raise InvalidRecordError(str(exc))

    assert _outcome(W._scan_v2_py, buf, pos, end, count, base_ts) == _outcome(c_scan, buf, pos, end, count, base_ts)
    target = data.draw(st.one_of(timestamps, st.integers(-2**63, 2**63 - 1)))
    min_delta = data.draw(st.integers(-2, 25))
    exact = data.draw(st.booleans())
    args = (buf, pos, end, count, base_ts, target, min_delta, exact)
    assert _outcome(W._find_v2_py, *args) == _outcome(_speedups.find_v2, *args)

    def c_index(*a):
        offsets, maxima = _speedups.index_v2(*a)
        return list(memoryview(offsets).cast("q")), list(memoryview(maxima).cast("q"))

    def py_index(*a):
        offsets, maxima = W._index_v2_py(*a)
        return list(offsets), list(maxima)

    assert _outcome(py_index, buf, pos, end, count, base_ts) == _outcome(c_index, buf, pos, end, count, base_ts)


@pytest.mark.skipif(_speedups is None, reason="C accelerator not built")
@SETTINGS
@given(recs=record_lists(), new_ts=st.integers(-1, 2**50), lat=st.booleans())
def test_crc_patch_equals_a_full_recompute(recs, new_ts, lat):
    data = bytearray(build_batch(2, recs))
    view = next(R.iter_batches(data))
    old_covered = bytes(data[21:61])
    old_crc = view.crc
    view.set_max_timestamp(R.LOG_APPEND_TIME if lat else R.CREATE_TIME, new_ts)
    import crc32c
    patched = old_crc ^ _speedups.crc32c_extend(crc32c.crc32c(bytes(data[21:61])) ^ crc32c.crc32c(old_covered),
                                        len(data) - 61)
    assert patched == view.crc == crc32c.crc32c(bytes(data[21:]))


def test_active_implementation_follows_the_environment():
    expected = "c" if _speedups is not None and os.environ.get("SUNDIAL_NO_EXTENSIONS", "") not in (
        "1", "true", "yes") else "python"
    assert R.IMPLEMENTATION == expected
    code = "import records; print(records.IMPLEMENTATION)"
    forced = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "SUNDIAL_NO_EXTENSIONS": "1"})
    assert forced.stdout.strip() == "python"


# ---------------------------------------------------------------- in-batch search == brute force

@pytest.fixture(params=["active", "python"])
def implementation(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(W, "_find_v2", W._find_v2_py)
        monkeypatch.setattr(W, "_scan_v2", W._scan_v2_py)
        monkeypatch.setattr(W, "_index_v2", W._index_v2_py)
    return request.param


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_search_helpers_equal_brute_force(implementation, data):
    magic = data.draw(st.sampled_from([1, 2]))
    recs = data.draw(record_lists(max_size=40, with_headers=False))
    codec = data.draw(st.sampled_from([0, 1]))
    base = data.draw(st.integers(0, 1000))
    lat = data.draw(st.booleans())
    built = build_records(magic, recs, base_offset=base, compression=codec,
                          timestamp_type=R.LOG_APPEND_TIME if lat else R.CREATE_TIME, log_append_time_ms=NOW)
    views = list(R.iter_batches(built.buffer))
    truth = list(R.iter_records(built.buffer))
    target = data.draw(st.one_of(st.sampled_from([r.timestamp for r in truth]), timestamps))
    min_offset = data.draw(st.integers(base - 2, base + len(recs) + 1))
    found = None
    for view in views:
        found = R.find_first_at_or_after(view, target, min_offset)
        if found is not None:
            break
    expected = next(((r.offset, r.timestamp) for r in truth if r.timestamp >= target and r.offset >= min_offset),
                    None)
    assert found == expected
    max_ts = max(r.timestamp for r in truth)
    first_max = next(r.offset for r in truth if r.timestamp == max_ts)
    holder = next(v for v in views if v.max_timestamp == max_ts) if max_ts >= 0 else None
    if holder is not None:
        assert R.first_record_with_timestamp(holder, max_ts) == first_max
    # the cached per-batch index gives the same answers as the walk
    for view in views:
        index = R.BatchTimestampIndex(view)
        if index.covers(min_offset):
            assert index.lookup(target, min_offset) == R.find_first_at_or_after(view, target, min_offset)
        assert index.lookup(target) == R.find_first_at_or_after(view, target, view.base_offset)


# ---------------------------------------------------------------- validator

@SETTINGS
@given(data=st.data())
def test_validator_accepts_iff_every_timestamp_is_in_bounds(data):
    magic = data.draw(st.sampled_from([0, 1, 2]))
    recs = data.draw(record_lists(max_size=20, with_headers=False))
    recs = [r._replace(key=r.key or b"k") for r in recs]
    codec = codec_for(data.draw, magic)
    target_magic = data.draw(st.sampled_from([0, 1, 2]))
    target_codec = data.draw(st.sampled_from(["producer", "uncompressed", "gzip", "lz4"]))
    before = data.draw(st.one_of(st.just(LONG_MAX), st.integers(0, 20_000)))
    after = data.draw(st.one_of(st.just(LONG_MAX), st.integers(0, 20_000)))
    next_offset = data.draw(st.integers(0, 2**40))
    if codec == 4 and target_magic < 2 and target_codec == "producer":
        target_codec = "gzip"
    config = TopicConfig(message_format_version=f"v{target_magic}", message_timestamp_before_max_ms=before,
                         message_timestamp_after_max_ms=after, compression_type=target_codec)
    # v0/v1 uncompressed sources are one message per record; give them offsets 0..n-1 like a client
    raw = bytes(build_batch(magic, recs, compression=codec))
    snapshot = raw
    stamps = [-1 if magic == 0 else r.timestamp for r in recs]
    in_bounds = all(t == -1 or (NOW - t <= before and t - NOW <= after) for t in stamps)
    if not in_bounds:
        with pytest.raises(InvalidTimestampError):
            validate_records(raw, config=config, next_offset=next_offset, now_ms=NOW)
        assert raw == snapshot
        return
    result = validate_records(raw, config=config, next_offset=next_offset, now_ms=NOW)
    out = list(R.iter_records(result.buffer))
    assert [r.offset for r in out] == list(range(next_offset, next_offset + len(recs)))
    assert [(r.key, r.value) for r in out] == [(r.key, r.value) for r in recs]
    assert (result.first_offset, result.last_offset) == (next_offset, next_offset + len(recs) - 1)
    if magic > 0 and target_magic > 0:
        assert [r.timestamp for r in out] == stamps
        assert result.max_timestamp_ms == max(stamps)
    if target_magic == 0:
        assert (result.max_timestamp_ms, result.shallow_offset_of_max_timestamp) == (-1, -1)
    assert all(v.magic == target_magic and v.crc_valid() for v in R.iter_batches(result.buffer))
    assert sum(len(c) for c in result.chunks) == result.size_bytes


@SETTINGS
@given(data=st.data())
def test_log_append_time_stamps_every_record(data):
    magic = data.draw(st.sampled_from([1, 2]))
    recs = data.draw(record_lists(max_size=20, with_headers=False))
    codec = codec_for(data.draw, magic)
    target_codec = data.draw(st.sampled_from(["producer", "uncompressed", "snappy"]))
    config = TopicConfig(message_format_version=f"v{magic}", message_timestamp_type="LogAppendTime",
                         compression_type=target_codec)
    result = validate_records(build_batch(magic, recs, compression=codec), config=config, next_offset=5, now_ms=NOW)
    assert [r.timestamp for r in R.iter_records(result.buffer)] == [NOW] * len(recs)
    assert result.log_append_time_ms == NOW and result.max_timestamp_ms == NOW


# ---------------------------------------------------------------- down-conversion

@SETTINGS
@given(data=st.data())
def test_down_conversion_round_trip(data):
    recs = data.draw(record_lists(max_size=25))
    recs = [r._replace(timestamp=max(r.timestamp, -1)) for r in recs]
    codec = data.draw(st.sampled_from([0, 1, 2, 3]))
    base = data.draw(st.integers(0, 10_000))
    to_magic = data.draw(st.sampled_from([0, 1]))
    fetch_offset = data.draw(st.integers(base, base + len(recs)))
    source = build_batch(2, recs, base_offset=base, compression=codec)
    out = down_convert(source, to_magic, fetch_offset)
    got = [(r.offset, r.timestamp, r.key, r.value) for r in R.iter_records(out)]
    keep = [(base + i, r) for i, r in enumerate(recs) if codec or base + i >= fetch_offset]
    if not keep:
        assert out == source
        return
    assert got == [(o, -1 if to_magic == 0 else r.timestamp, r.key, r.value) for o, r in keep]
    assert all(v.magic == to_magic and v.compression == codec for v in R.iter_batches(out))


@SETTINGS
@given(data=st.data())
def test_recompression_without_decoding_equals_a_full_rebuild(data):
    """The codec change of a canonical v2 batch keeps its records section; the bytes equal Kafka-style rebuilds."""
    import sundial.storage.validator as V
    recs = data.draw(record_lists(max_size=25))
    recs = [r._replace(timestamp=max(r.timestamp, -1)) for r in recs]
    source = data.draw(st.sampled_from([0, 1, 2, 3, 4]))
    target = data.draw(st.sampled_from(["uncompressed", "gzip", "snappy", "lz4", "zstd"]))
    lat = data.draw(st.booleans())
    config = TopicConfig(message_timestamp_before_max_ms=LONG_MAX, message_timestamp_after_max_ms=LONG_MAX,
                         compression_type=target, message_timestamp_type="LogAppendTime" if lat else "CreateTime")
    raw = build_batch(2, recs, compression=source, producer_id=data.draw(st.sampled_from([-1, 9])),
                      producer_epoch=1, base_sequence=4)
    fast = validate_records(raw, config=config, next_offset=77, now_ms=NOW, leader_epoch=2)
    original = V._v2_recompress
    V._v2_recompress = lambda *a: None
    try:
        slow = validate_records(raw, config=config, next_offset=77, now_ms=NOW, leader_epoch=2)
    finally:
        V._v2_recompress = original
    assert bytes(fast.buffer) == bytes(slow.buffer)
    assert (fast.first_offset, fast.last_offset, fast.max_timestamp_ms, fast.shallow_offset_of_max_timestamp,
            fast.log_append_time_ms, fast.batches) == \
        (slow.first_offset, slow.last_offset, slow.max_timestamp_ms, slow.shallow_offset_of_max_timestamp,
         slow.log_append_time_ms, slow.batches)
