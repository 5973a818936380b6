"""The segment list's one owner (storage/segments.py): every change moves its version, and each
kind of change invalidates what it must (search caches, batch-index keys, flush jobs, cleaning
passes), including the cleaner's swap."""

from __future__ import annotations

import random

import pytest
from support.cleaner_helpers import append, clean_pass, compact_log, read_all
from support.log_helpers import NOW_MS, batch, topic_config

from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.log import PartitionLog
from sundial.storage.offset_map import SkimpyOffsetMap
from sundial.storage.segments import LogSegments, SegmentFactory


def _segments(tmp_path, bases):
    factory = SegmentFactory(str(tmp_path), random.Random(1))
    return [factory.create(topic_config(), base) for base in bases]


def test_each_kind_of_change_invalidates_what_it_must(tmp_path):
    segs = LogSegments(_segments(tmp_path, [0, 10, 20]))
    assert [s.is_active for s in segs] == [False, False, True]
    v0 = segs.version

    factory = SegmentFactory(str(tmp_path), random.Random(2))
    new = factory.create(topic_config(), 30)
    with pytest.raises(ValueError):
        segs.add(new)                                          # the active one is not retired yet
    segs.active.on_become_inactive()
    segs.add(new)                                              # a roll
    assert not segs.unchanged_since(v0)
    assert segs.bytes_unchanged_since(v0) and segs.not_truncated_since(v0)
    assert [s.is_active for s in segs] == [False, False, False, True]

    v1 = segs.version
    assert [s.base_offset for s in segs.drop_prefix(1)] == [0]  # retention
    assert not segs.unchanged_since(v1)
    assert segs.bytes_unchanged_since(v1) and segs.not_truncated_since(v1)
    assert segs.base_offsets() == [10, 20, 30] and segs.index_for(25) == 1 and segs.index_for(5) == 0

    v2 = segs.version
    cleaned = factory.create(topic_config(), 10)
    old = segs.replace(0, 2, cleaned)                            # the cleaner's swap
    assert [s.base_offset for s in old] == [10, 20] and segs.base_offsets() == [10, 30]
    assert not segs.unchanged_since(v2) and not segs.bytes_unchanged_since(v2)
    assert segs.not_truncated_since(v2)                          # a pass's own later swaps stay allowed
    assert not cleaned.is_active

    v3 = segs.version
    disposed = []
    segs.truncate_to(15, disposed.extend)                        # truncation
    assert [s.base_offset for s in disposed] == [30] and segs.base_offsets() == [10]
    assert segs.active is cleaned and cleaned.is_active
    assert not segs.bytes_unchanged_since(v3) and not segs.not_truncated_since(v3)

    v4 = segs.version
    fresh = factory.create(topic_config(), 40)
    assert segs.reset(fresh)[0] is cleaned                       # truncation below the first segment
    assert segs.base_offsets() == [40] and fresh.is_active
    assert not segs.bytes_unchanged_since(v4) and not segs.not_truncated_since(v4)
    assert segs.version > v4 > v3 > v2 > v1 > v0
    for seg in [*old, *disposed, cleaned, fresh]:
        seg.close_handles()


def test_the_active_segment_is_never_dropped_or_replaced(tmp_path):
    segs = LogSegments(_segments(tmp_path, [0, 10]))
    with pytest.raises(ValueError):
        segs.drop_prefix(2)
    with pytest.raises(ValueError):
        segs.replace(1, 1, _segments(tmp_path, [10])[0])
    with pytest.raises(ValueError):
        LogSegments([])
    for seg in segs:
        seg.close_handles()


def _dirty_compacted_log(tmp_path):
    log = compact_log(tmp_path / "t-0", segment_bytes=300)
    for i in range(12):
        append(log, [(b"k%d" % (i % 3), b"v%d" % i, NOW_MS + i)])
    assert len(log.segments) >= 3
    return log


def test_a_swap_keeps_a_pending_flush_job_and_invalidates_the_search_caches(tmp_path):
    log = _dirty_compacted_log(tmp_path)
    try:
        before = read_all(log)
        assert log.fetch_offset_by_timestamp(NOW_MS).offset == 0
        cache = log._search.search_cache()
        pending = []

        def swap(cleaned):
            job = log.prepare_flush()           # prepared before the swap, run after it
            assert job is not None
            pending.append((job, log.recovery_point))
            return log.replace_segments(cleaned, NOW_MS)

        manager = LogCleanerManager([str(tmp_path)])
        done = clean_pass(log, manager, SkimpyOffsetMap(1 << 16), NOW_MS, swap=swap)
        assert done is not None and pending
        job, point = pending[0]
        job.run()
        log.mark_flushed(job)
        # the swapped-in segment was fsynced before the swap and moved no offset: the job counts
        assert point < job.target_offset and log.recovery_point == job.target_offset
        assert log._search.search_cache() is not cache
        # answers after the swap equal the model: the last value of each key survives
        latest = {r.key: r for r in before}
        assert [r for r in read_all(log) if latest[r.key] == r] == sorted(latest.values())
        for target in (NOW_MS, NOW_MS + 5, NOW_MS + 11):
            expect = min((r.offset, r.timestamp) for r in read_all(log) if r.timestamp >= target)
            found = log.fetch_offset_by_timestamp(target)
            assert (found.offset, found.timestamp_ms) == expect
        log.flush()
        assert log.recovery_point == log.log_end_offset
    finally:
        log.close_handles()


def test_a_flush_job_survives_a_roll_and_retention_but_not_a_truncation(tmp_path):
    log = PartitionLog.create(str(tmp_path / "t-0"), topic_config(segment_bytes=150, retention_ms=10_000),
                              topic="t", partition=0, now_ms=NOW_MS)
    try:
        log.append(batch([NOW_MS - 20_000]), now_ms=NOW_MS)
        job = log.prepare_flush()
        log.append(batch([NOW_MS - 20_000]), now_ms=NOW_MS)
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
        assert len(log.segments) >= 2
        log.delete_old_segments(NOW_MS)
        assert log.log_start_offset > 0
        job.run()
        log.mark_flushed(job)
        assert log.recovery_point == job.target_offset
        job = log.prepare_flush()
        log.truncate_to(log.log_end_offset - 1)
        job.run()
        log.mark_flushed(job)
        assert log.recovery_point < job.target_offset
    finally:
        log.close_handles()
