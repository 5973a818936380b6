"""Timestamp search (ListOffsets): §6.2–§6.5 and behaviours 59, 60, 76."""

import os

import pytest
from support.log_helpers import NOW_MS, batch, brute_force_search_segments

from sundial.records import codecs
from sundial.records.builder import SimpleRecord, build_records


def test_empty_log_not_found(new_log):  # 59 (first part)
    log = new_log()
    assert log.fetch_offset_by_timestamp(0) is None
    assert log.max_timestamp_offset() is None


def test_search_includes_leader_epoch(new_log):  # 59
    log = new_log()
    t = NOW_MS
    log.append(batch([t]), now_ms=NOW_MS, leader_epoch=0)
    log.append(batch([t + 1]), now_ms=NOW_MS, leader_epoch=1)
    assert log.fetch_offset_by_timestamp(t) == (t, 0, 0)
    assert log.fetch_offset_by_timestamp(t + 1) == (t + 1, 1, 1)
    assert log.fetch_offset_by_timestamp(-2)[:2] == (-1, 0)
    assert log.fetch_offset_by_timestamp(-4)[:2] == (-1, 0)
    assert log.fetch_offset_by_timestamp(-1)[:2] == (-1, 2)


def test_max_timestamp_first_record_holding_it(new_log):  # 60
    log = new_log()
    t = NOW_MS
    for ts in (t, t + 1, t):
        log.append(batch([ts]), now_ms=NOW_MS)
    assert log.max_timestamp_offset()[:2] == (t + 1, 1)
    assert log.fetch_offset_by_timestamp(-3)[:2] == (t + 1, 1)


def test_max_timestamp_inside_a_batch_and_across_segments(new_log):
    log = new_log(segment_bytes=250)
    log.append(batch([50, 70, 60, 70]), now_ms=NOW_MS)    # record offset 1 holds the max
    log.append(batch([10] * 3), now_ms=NOW_MS)
    log.append(batch([20] * 3), now_ms=NOW_MS)
    assert len(log.segments) > 1
    assert log.max_timestamp_offset()[:2] == (70, 1)
    log.append(batch([70]), now_ms=NOW_MS)  # a tie later: the first segment reaching it wins
    assert log.max_timestamp_offset()[:2] == (70, 1)
    log.append(batch([71]), now_ms=NOW_MS)
    assert log.max_timestamp_offset()[:2] == (71, log.log_end_offset - 1)


def test_search_for_timestamp_records_file(new_log):  # 76
    log = new_log()
    log.append(batch([10]), now_ms=NOW_MS, leader_epoch=0)  # offset 0..4 filler first
    log.truncate_fully_and_start_at(5)
    log.append(batch([10]), now_ms=NOW_MS, leader_epoch=0)
    log.append(batch([11]), now_ms=NOW_MS, leader_epoch=1)
    assert log.fetch_offset_by_timestamp(9) == (10, 5, 0)
    assert log.fetch_offset_by_timestamp(10) == (10, 5, 0)
    assert log.fetch_offset_by_timestamp(11) == (11, 6, 1)
    assert log.fetch_offset_by_timestamp(12) is None


def test_magic0_never_found_and_magic1_has_no_epoch(new_log):  # 76 (magic cases)
    v0 = new_log("v0-0", message_format_version="0.9.0")
    v0.append(batch([NOW_MS], magic=0), now_ms=NOW_MS)
    os.utime(v0.active_segment.log_path, ns=(0, 0))  # mtime fallback = 0: below any target
    assert v0.fetch_offset_by_timestamp(0) is None
    assert v0.fetch_offset_by_timestamp(NOW_MS) is None
    assert v0.max_timestamp_offset() is None
    v1 = new_log("v1-0", message_format_version="0.10.2")
    v1.append(batch([NOW_MS], magic=1), now_ms=NOW_MS, leader_epoch=3)
    assert v1.fetch_offset_by_timestamp(NOW_MS) == (NOW_MS, 0, None)


def test_search_goes_on_where_the_first_candidate_segment_has_no_match(new_log):
    log = new_log(segment_bytes=200)
    log.append(batch([100, 300]), now_ms=NOW_MS)
    log.roll(NOW_MS)
    log.append(batch([200, 400]), now_ms=NOW_MS)
    assert log.fetch_offset_by_timestamp(250) == (300, 1, 0)
    assert log.fetch_offset_by_timestamp(150) == (300, 1, 0)  # first record >= 150 in segment 0
    assert log.fetch_offset_by_timestamp(301) == (400, 3, 0)
    # after DeleteRecords past the match in segment 0, Kafka answers "none"; the first record
    # at or after 250 that is still in the log is offset 3
    log.delete_records(2)
    assert log.fetch_offset_by_timestamp(250) == (400, 3, 0)
    assert log.fetch_offset_by_timestamp(350) == (400, 3, 0)


def test_log_start_offset_filter_inside_a_batch(new_log):
    log = new_log()
    log.append(batch([5, 10, 15, 20]), now_ms=NOW_MS)
    log.delete_records(2)
    assert log.fetch_offset_by_timestamp(0) == (15, 2, 0)
    assert log.fetch_offset_by_timestamp(12) == (15, 2, 0)


def test_non_monotonic_timestamps_first_record_at_or_after(new_log):
    log = new_log(index_interval_bytes=1)
    stamps = [50, 10, 60, 20, 60, 70, 5]
    for ts in stamps:
        log.append(batch([ts]), now_ms=NOW_MS)
    records = list(enumerate(stamps))
    for target in range(0, 80):
        expect = brute_force_search_segments([[(o, t) for o, t in records]], target, 0)
        got = log.fetch_offset_by_timestamp(target)
        assert ((got.offset, got.timestamp_ms) if got else None) == expect, target


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.LZ4, codecs.ZSTD])
def test_compressed_batches(new_log, codec):
    log = new_log()
    log.append(batch([30, 10, 50, 40], compression=codec), now_ms=NOW_MS)
    assert log.fetch_offset_by_timestamp(35) == (50, 2, 0)
    assert log.fetch_offset_by_timestamp(45) == (50, 2, 0)
    assert log.fetch_offset_by_timestamp(5) == (30, 0, 0)
    assert log.max_timestamp_offset()[:2] == (50, 2)


def test_legacy_v1_compressed_wrapper(new_log):
    log = new_log(message_format_version="0.10.2")
    log.append(batch([30, 10, 50, 40], magic=1, compression=codecs.GZIP), now_ms=NOW_MS)
    assert log.fetch_offset_by_timestamp(35) == (50, 2, None)
    assert log.fetch_offset_by_timestamp(20) == (30, 0, None)
    assert log.max_timestamp_offset()[:2] == (50, 2)


def test_segments_without_timestamped_records_are_never_searched(new_log):
    """Kafka picks such a segment by its mtime and then finds nothing; here no segment is a candidate."""
    log = new_log(message_format_version="0.9.0", segment_bytes=120)
    for _ in range(4):
        log.append(batch([-1], magic=0, value_size=40), now_ms=NOW_MS)
    assert len(log.segments) >= 3
    for i, seg in enumerate(log.segments[:-1]):
        seg.set_last_modified_ms(1000 * (i + 1))
    log._search.forget_cache()   # the mtimes were set by hand
    assert list(log._search.candidate_segments(1500)) == []
    assert log.fetch_offset_by_timestamp(1500) is None


def test_search_cache_rebuilt_after_retention_and_truncation(new_log):
    log = new_log(segment_bytes=150, retention_ms=10_000)
    for ts in (100, 200, 300, 400, 500):
        log.append(batch([NOW_MS - 20_000 + ts if ts < 300 else NOW_MS + ts]), now_ms=NOW_MS)
    assert len(log.segments) >= 4
    first = log.fetch_offset_by_timestamp(0)
    assert first.offset == 0
    log.delete_old_segments(NOW_MS)
    assert log.log_start_offset == 2
    assert log.fetch_offset_by_timestamp(0).offset == 2
    log.truncate_to(3)
    assert log.fetch_offset_by_timestamp(NOW_MS + 350) is None
    assert log.fetch_offset_by_timestamp(NOW_MS + 300).offset == 2


def test_log_append_time_topic_search(new_log):
    log = new_log(message_timestamp_type="LogAppendTime")
    log.append(batch([1, 2, 3]), now_ms=NOW_MS)
    log.append(batch([1, 2, 3]), now_ms=NOW_MS + 5)
    assert log.fetch_offset_by_timestamp(NOW_MS + 1) == (NOW_MS + 5, 3, 0)
    assert log.max_timestamp_offset()[:2] == (NOW_MS + 5, 3)


def test_legacy_offsets_before(new_log):  # ListOffsets v0 (§6.5)
    log = new_log(segment_bytes=150)
    for i in range(5):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    bases = [s.base_offset for s in log.segments]
    for i, seg in enumerate(log.segments):
        seg.set_last_modified_ms(10_000 * (i + 1))
    leo = log.log_end_offset
    assert log.legacy_offsets_before(-1, 10, now_ms=10**9) == [leo] + bases[::-1]
    assert log.legacy_offsets_before(-1, 1, now_ms=10**9) == [leo]
    assert log.legacy_offsets_before(-2, 10, now_ms=10**9) == [bases[0]]
    assert log.legacy_offsets_before(15_000, 10, now_ms=10**9) == [bases[0]]
    assert log.legacy_offsets_before(25_000, 10, now_ms=10**9) == [bases[1], bases[0]]
    assert log.legacy_offsets_before(5_000, 10, now_ms=10**9) == []
    log.delete_records(bases[1] + 1)
    assert log.legacy_offsets_before(-2, 10, now_ms=10**9) == [bases[1] + 1]


def test_many_segments_search_uses_prefix_max(new_log):
    log = new_log(segment_bytes=100)
    stamps = [NOW_MS + (i * 37) % 101 for i in range(60)]
    for ts in stamps:
        log.append(batch([ts]), now_ms=NOW_MS)
    assert len(log.segments) == 60
    segments = [[(s.base_offset, stamps[s.base_offset])] for s in log.segments]
    for target in range(NOW_MS - 1, NOW_MS + 103):
        expect = brute_force_search_segments(segments, target, 0)
        got = log.fetch_offset_by_timestamp(target)
        assert ((got.offset, got.timestamp_ms) if got else None) == expect
    cache = log._search.search_cache()
    log.fetch_offset_by_timestamp(NOW_MS)
    assert log._search.search_cache() is cache  # not rebuilt per lookup


def test_build_records_v2_in_test_helper_matches_kafka_python():
    """Guard: the helper's batches are valid Kafka batches (read back by kafka-python)."""
    from kafka.record.memory_records import MemoryRecords

    data = build_records(2, [SimpleRecord(7, b"k", b"v")]).buffer
    recs = list(MemoryRecords(data).next_batch())
    assert recs[0].timestamp == 7 and recs[0].value == b"v"
