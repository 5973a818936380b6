"""Hypothesis: for random keyed logs with overwrites, tombstones and keyless records, in random
batches, codecs and segment sizes, and with an offset map small enough to need several passes,
the cleaned log equals a brute-force model — the last record of each key below the end of the
cleanable range (offset, timestamp, value and headers kept), tombstones until their delete horizon
has passed, everything at or above the range untouched — and stays Kafka's format.

The C walks of the cleaner (storage/_cleaner_speedups.c) write exactly the bytes of the Python
reference (storage/offset_map.py).
"""

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from support.cleaner_helpers import (
    append,
    batches_on_disk,
    clean_until_done,
    compact_log,
    model_after_clean,
    read_all,
)
from support.log_helpers import NOW_MS

from sundial.records import codecs
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.framing import iter_batches
from sundial.storage import offset_map
from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.offset_map import SkimpyOffsetMap

DAY = 86_400_000

record = st.tuples(
    st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"", b"long-key-" * 3])),
    st.one_of(st.none(), st.binary(max_size=12)),
    st.integers(min_value=-1, max_value=10_000),
    st.lists(st.tuples(st.sampled_from(["h", "x"]), st.one_of(st.none(), st.binary(max_size=3))), max_size=2),
)
batch = st.tuples(st.lists(record, min_size=1, max_size=6), st.sampled_from([0, 0, 1, 3, 4]), st.booleans())
log_spec = st.fixed_dictionaries({
    "batches": st.lists(batch, min_size=1, max_size=25),
    "more": st.lists(batch, min_size=1, max_size=8),
    "segment_bytes": st.integers(min_value=200, max_value=3000),
    "map_slots": st.sampled_from([3, 5, 9, 64, 4096]),
    "roll_every": st.integers(min_value=1, max_value=6),
})


def write(log, batches, roll_every, now_ms):
    out = []
    for i, (records, codec, roll) in enumerate(batches):
        if roll or (i and i % roll_every == 0):
            log.roll(now_ms)
        out += append(log, [(k, v, NOW_MS + ts, h) for k, v, ts, h in records], codec=codec)
    return out


def check_lookups(log):
    """offsetsForTimes on the cleaned log equals brute force over a full read: the first surviving
    record at or after T, whatever empty segments or empty batches cleaning left before it."""
    survivors = [(r.offset, r.timestamp) for r in read_all(log)]
    stamps = sorted({t for _, t in survivors if t >= 0} | {seg.largest_timestamp_ms() for seg in log.segments})
    targets = {0, NOW_MS - DAY}
    for t in stamps:
        targets.update((t - 1, t, t + 1))
    if any(seg.size_bytes == 0 for seg in log.segments[:-1]):
        event("an empty cleaned segment before the active one")
    for target in sorted(t for t in targets if t >= 0):
        expect = next(((o, t) for o, t in survivors if t >= target), None)
        got = log.fetch_offset_by_timestamp(target)
        assert ((got.offset, got.timestamp_ms) if got else None) == expect, target


def check_format(log):
    """Every batch has a valid CRC, offsets increase, every index passes the load-time checks."""
    last = -1
    for _, view in batches_on_disk(log):
        assert view.crc_valid()
        assert view.base_offset > last
        last = view.last_offset
    for seg in log.segments:
        assert seg.check_indexes() == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=log_spec)
def test_cleaned_log_equals_the_brute_force_model(spec):
    tmp = tempfile.mkdtemp()
    log = compact_log(os.path.join(tmp, "t-0"), segment_bytes=spec["segment_bytes"], index_interval_bytes=50,
                      delete_retention_ms=DAY)
    try:
        m = SkimpyOffsetMap(24 * spec["map_slots"])
        mgr = LogCleanerManager([tmp])
        records = write(log, spec["batches"], spec["roll_every"], NOW_MS)
        log.roll(NOW_MS)
        lso, leo = log.log_start_offset, log.log_end_offset
        clean_until_done(log, mgr, m, NOW_MS, load_factor=0.9 if spec["map_slots"] > 3 else 1.0)
        end1 = log.active_segment.base_offset
        assert read_all(log) == model_after_clean(records, end1)
        assert (log.log_start_offset, log.log_end_offset) == (lso, leo)
        check_format(log)
        check_lookups(log)
        # more data, a day later: tombstones cleaned the first time are past their horizon now
        records += write(log, spec["more"], spec["roll_every"], NOW_MS + DAY)
        log.roll(NOW_MS + DAY)
        clean_until_done(log, mgr, m, NOW_MS + DAY, load_factor=0.9 if spec["map_slots"] > 3 else 1.0)
        end2 = log.active_segment.base_offset
        assert read_all(log) == model_after_clean(records, end2, tombstones_expired_below=end1)
        check_format(log)
        check_lookups(log)
    finally:
        log.close_handles()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.skipif(offset_map.IMPLEMENTATION != "c", reason="the C accelerator is not built")
@settings(max_examples=200, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=30), codec=st.sampled_from([0, 1]),
       latest=st.integers(min_value=-1, max_value=40), now=st.integers(min_value=0, max_value=3),
       horizon=st.one_of(st.none(), st.integers(min_value=0, max_value=3)),
       log_append=st.booleans(), slots=st.sampled_from([1, 7, 64]))
def test_c_walks_write_the_bytes_of_the_python_reference(records, codec, latest, now, horizon, log_append, slots):
    simple = [SimpleRecord(ts, k, v, tuple(h)) for k, v, ts, h in records]
    buf = build_records(2, simple, base_offset=5, compression=codec).buffer
    view = next(iter_batches(buf))
    payload = view.records_payload()
    maps = {impl: SkimpyOffsetMap(24 * slots, implementation=impl) for impl in ("c", "python")}
    results = {}
    for impl, m in maps.items():
        put = m.put_v2(payload, 0, len(payload), view.record_count, 5, 7, max_entries=max(slots - 1, 1))
        m.update_latest_offset(latest)
        out = m.filter_v2(payload, 0, len(payload), view.record_count, base_offset=5,
                          base_timestamp=view.base_timestamp, log_append_time=log_append,
                          max_timestamp=view.max_timestamp, retain_deletes=horizon is None or now < horizon,
                          horizon=horizon, new_horizon=now + 100)
        results[impl] = (put, bytes(m.buffer), m.entries, out, [m.get(k) for k, *_ in records if k is not None])
    assert results["c"] == results["python"]
    assert maps["c"].implementation == "c"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70))
def test_key_hash_matches_the_reference(data):
    assert offset_map.key_hash(data) == offset_map._hash_py(data)
