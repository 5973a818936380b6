"""Hypothesis: timestamp search equals a brute-force scan, for random logs and every target.

Random timestamp sequences (non-monotonic, duplicates, -1, runs), batch sizes, codecs,
``index.interval.bytes`` and ``segment.bytes``; then optionally DeleteRecords and a
retention pass. For every interesting target (each timestamp, its neighbours, before the
first and after the last) the log's answer must equal Kafka's rule computed by brute
force: the first segment whose largest timestamp (max record timestamp, else mtime) is
>= T, then the first record in it with timestamp >= T and offset >= log start offset.
"""

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.log_helpers import NOW_MS, batch, topic_config

from sundial.records import codecs
from sundial.storage.log import PartitionLog

BASE = NOW_MS

timestamps = st.one_of(
    st.just(-1),
    st.integers(BASE - 50, BASE + 50),
    st.sampled_from([BASE, BASE + 10, BASE + 20]),
)


@st.composite
def appends(draw):
    n = draw(st.integers(1, 25))
    out = []
    for _ in range(n):
        kind = draw(st.sampled_from(["random", "run", "rising"]))
        size = draw(st.integers(1, 6))
        if kind == "random":
            stamps = draw(st.lists(timestamps, min_size=size, max_size=size))
        elif kind == "run":
            stamps = [draw(timestamps)] * size
        else:
            start = draw(st.integers(BASE - 50, BASE + 40))
            stamps = [start + i for i in range(size)]
        codec = draw(st.sampled_from([codecs.NONE, codecs.NONE, codecs.GZIP]))
        out.append((stamps, codec, draw(st.integers(1, 60))))
    return out


def model_answer(log, records, target):
    """Brute force: the first record in offset order with timestamp >= target at or above the
    log start offset, whatever the segments (Sundial does not stop where Kafka's two-step
    search does: docs/compaction.md, KAFKA-9157)."""
    lso = log.log_start_offset
    for o, t in sorted(records):
        if t >= target and o >= lso:
            return o, t
    return None


def model_max(log, records):
    """Kafka's -3: the first segment with the largest max timestamp (-1 when it has none),
    then the first record in it carrying that timestamp (so an all -1 log answers its
    first record with timestamp -1, as Kafka does; an empty segment answers nothing)."""
    per_segment = []
    for seg in log.segments:
        mine = [(o, t) for o, t in records if seg.base_offset <= o < seg.next_offset]
        per_segment.append((max((t for _, t in mine), default=-1), mine))
    best = max(m for m, _ in per_segment)
    for m, mine in per_segment:
        if m == best:
            return next(((o, t) for o, t in mine if t == best), None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appends=appends(), interval=st.integers(0, 400), segment_bytes=st.integers(500, 2000),
       delete_to=st.floats(0, 1), retention=st.booleans(), log_append_time=st.booleans())
def test_search_equals_brute_force(appends, interval, segment_bytes, delete_to, retention, log_append_time):
    d = tempfile.mkdtemp(prefix="sundial-prop-")
    try:
        cfg = topic_config(index_interval_bytes=interval, segment_bytes=segment_bytes, retention_ms=30,
                           message_timestamp_type="LogAppendTime" if log_append_time else "CreateTime")
        log = PartitionLog.create(os.path.join(d, "p-0"), cfg, topic="p", partition=0, now_ms=BASE)
        records = []
        for i, (stamps, codec, value_size) in enumerate(appends):
            now = BASE + i
            r = log.append(batch(stamps, compression=codec, value_size=value_size), now_ms=now)
            reported = [now] * len(stamps) if log_append_time else stamps
            records.extend(zip(range(r.first_offset, r.last_offset + 1), reported))
        for seg in log.segments:   # fixed, distinct mtimes keep the model deterministic
            seg.set_last_modified_ms(BASE - 1000 + seg.base_offset)
        log._search.forget_cache()   # the mtimes were set by hand
        if delete_to:
            log.delete_records(int(delete_to * log.log_end_offset))
        if retention:
            log.delete_old_segments(BASE + 60)
        survivors = [(o, t) for o, t in records if o >= log.segments[0].base_offset]
        stamps_seen = sorted({t for _, t in records if t >= 0})
        targets = {0, BASE - 10_000, BASE + 10_000}
        for t in stamps_seen:
            targets.update((t - 1, t, t + 1))
        for target in sorted(targets):
            got = log.fetch_offset_by_timestamp(target)
            expect = model_answer(log, survivors, target)
            assert ((got.offset, got.timestamp_ms) if got else None) == expect, (target, log.segments)
        got_max = log.max_timestamp_offset()
        expect_max = model_max(log, survivors)
        if expect_max is None:
            assert got_max is None
        else:
            assert (got_max.offset, got_max.timestamp_ms) == expect_max
        log.close_handles()
    finally:
        shutil.rmtree(d, ignore_errors=True)


@settings(max_examples=30, deadline=None)
@given(stamps=st.lists(st.integers(0, 10_000), min_size=1, max_size=300), interval=st.integers(0, 200))
def test_single_segment_many_small_batches(stamps, interval):
    d = tempfile.mkdtemp(prefix="sundial-prop-")
    try:
        cfg = topic_config(index_interval_bytes=interval)
        log = PartitionLog.create(os.path.join(d, "p-0"), cfg, topic="p", partition=0, now_ms=BASE)
        for i in range(0, len(stamps), 3):
            log.append(batch(stamps[i:i + 3]), now_ms=BASE)
        records = list(enumerate(stamps))
        for target in sorted(set(stamps)) + [-5 + 5, max(stamps) + 1]:
            got = log.fetch_offset_by_timestamp(target)
            expect = next(((o, t) for o, t in records if t >= target), None)
            assert ((got.offset, got.timestamp_ms) if got else None) == expect
        log.close_handles()
    finally:
        shutil.rmtree(d, ignore_errors=True)
