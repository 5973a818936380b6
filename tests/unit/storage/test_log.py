"""PartitionLog: append pipeline, rolling, reads, truncation, flushing (behaviours 54–62, 69 of §12.5)."""

import os

import pytest
from support.log_helpers import NOW_MS, batch, topic_config

from sundial.storage import files
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage.errors import (
    InvalidProducerEpochError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from sundial.storage.log import PartitionLog
from sundial.records import iter_batches, iter_records

HOUR = 3_600_000


@pytest.fixture
def new_log(tmp_path):
    logs = []

    def factory(now_ms=NOW_MS, name="t-0", mapped_indexes=None, **cfg):
        log = PartitionLog.create(str(tmp_path / name), topic_config(**cfg), topic="t", partition=0, now_ms=now_ms,
                                  mapped_indexes=mapped_indexes)
        logs.append(log)
        return log

    yield factory
    for log in logs:
        if not log.closed:
            log.close_handles()


def read_all(log, start=None):
    """Every (offset, timestamp) readable from ``start`` (default: log start) to the end."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        if not info.slices:
            break
        data = b"".join(s.read() for s in info.slices)
        for r in iter_records(data):
            if r.offset >= offset:
                out.append((r.offset, r.timestamp))
        offset = out[-1][0] + 1
    return out


# -- rolling -------------------------------------------------------------------------------------------

def test_time_based_roll_during_append(new_log):  # 54
    now = NOW_MS
    log = new_log(now_ms=now, segment_ms=HOUR)
    no_ts = batch([-1])
    now += HOUR + 1
    log.append(no_ts, now_ms=now)
    assert len(log.segments) == 1, "no roll into an empty segment"
    log.append(no_ts, now_ms=now)
    assert len(log.segments) == 2, "wall clock expired"
    for n in (3, 4):
        now += HOUR + 1
        log.append(no_ts, now_ms=now)
        assert len(log.segments) == n
    ts = now + HOUR + 1
    log.append(batch([ts]), now_ms=now)
    assert len(log.segments) == 4, "first batch had no timestamp: wall clock decides"
    now += HOUR + 1
    log.append(batch([ts]), now_ms=now)
    assert len(log.segments) == 5
    now += HOUR + 1
    log.append(batch([ts]), now_ms=now)
    assert len(log.segments) == 5, "first batch has a timestamp: wall clock does not roll"
    log.append(batch([now]), now_ms=now)   # ts - first >= segment.ms + 1
    assert len(log.segments) == 6
    now += HOUR + 1
    assert log.append(b"", now_ms=now).record_count == 0
    assert len(log.segments) == 6, "an empty append never rolls"


def test_time_based_roll_jitter(new_log):  # 55
    max_jitter = 20 * 60
    log = new_log(segment_ms=60 * 60, segment_jitter_ms=max_jitter)
    now = NOW_MS
    log.append(batch([-1]), now_ms=now)
    now += 60 * 60 - max_jitter
    seg = log.active_segment
    log.append(batch([-1]), now_ms=now)
    assert len(log.segments) == 1
    now += max_jitter - seg.roll_jitter_ms + 1
    log.append(batch([-1]), now_ms=now)
    assert len(log.segments) == 2


def test_size_based_roll(new_log):  # 56
    size = len(batch([NOW_MS]))
    log = new_log(segment_bytes=10 * (size - 1))
    for _ in range(11):
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
    assert len(log.segments) == 2


def test_message_set_and_message_size_checks(new_log):  # 57
    big = batch([NOW_MS], value_size=3000)
    log = new_log(segment_bytes=2000)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(big, now_ms=NOW_MS)
    log2 = new_log(name="t-1", max_message_bytes=1000)
    with pytest.raises(RecordTooLargeError):
        log2.append(big, now_ms=NOW_MS)
    assert log.log_end_offset == 0 and log2.log_end_offset == 0


def test_build_time_index_when_not_assigning_offsets(new_log):  # 58
    log = new_log(index_interval_bytes=1)
    for i in range(100):
        log.append_as_follower(build_records(2, [SimpleRecord(NOW_MS + i, None, b"v")], base_offset=i).buffer,
                               now_ms=NOW_MS)
    ti = log.active_segment.time_index
    assert ti.entries == 99
    assert ti.last_entry().timestamp_ms == NOW_MS + 99


def test_roll_offsets_overflow_and_snapshot(new_log, tmp_path):
    log = new_log(segment_bytes=300)
    for i in range(10):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 1 and bases == sorted(bases)
    names = files.parse_segment_file_name
    snaps = [n for n in os.listdir(log.dir) if names(n) and names(n).suffix == ".snapshot"]
    assert sorted(int(n[:20]) for n in snaps) == bases[1:]
    # a rolled segment's indexes are trimmed
    first = log.segments[0]
    assert os.path.getsize(first.offset_index.path) == first.offset_index.entries * 8
    assert os.path.getsize(first.time_index.path) == first.time_index.entries * 12


# -- append / read -----------------------------------------------------------------------------------

def test_append_assigns_offsets_and_reports(new_log):
    log = new_log()
    r1 = log.append(batch([NOW_MS, NOW_MS + 1, NOW_MS + 2]), now_ms=NOW_MS)
    r2 = log.append(batch([NOW_MS + 3]), now_ms=NOW_MS)
    assert (r1.first_offset, r1.last_offset, r1.record_count) == (0, 2, 3)
    assert (r2.first_offset, r2.last_offset) == (3, 3)
    assert r1.log_append_time_ms == -1 and not r1.duplicate
    assert log.log_end_offset == log.high_watermark == 4
    assert read_all(log) == [(0, NOW_MS), (1, NOW_MS + 1), (2, NOW_MS + 2), (3, NOW_MS + 3)]


def test_log_append_time_is_stamped(new_log):
    log = new_log(message_timestamp_type="LogAppendTime")
    r = log.append(batch([5, 6]), now_ms=NOW_MS)
    assert r.log_append_time_ms == NOW_MS
    assert read_all(log) == [(0, NOW_MS), (1, NOW_MS)]
    assert log.fetch_offset_by_timestamp(NOW_MS)[:2] == (NOW_MS, 0)


def test_append_with_no_timestamp_accepted(new_log):  # 69
    log = new_log()
    log.append(batch([-1]), now_ms=NOW_MS)
    assert read_all(log) == [(0, -1)]
    assert log.active_segment.max_timestamp_so_far == -1


def test_create_time_out_of_bounds_rejected_without_consuming_offsets(new_log):
    log = new_log(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000)
    with pytest.raises(InvalidTimestampError):
        log.append(batch([NOW_MS - 1001]), now_ms=NOW_MS)
    assert log.log_end_offset == 0
    log.append(batch([NOW_MS - 1000]), now_ms=NOW_MS)
    assert log.log_end_offset == 1


def test_read_out_of_range_and_at_end(new_log):
    log = new_log()
    log.append(batch([NOW_MS] * 5), now_ms=NOW_MS)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 1000)
    info = log.read(5, 1000)
    assert info.slices == [] and info.high_watermark == 5
    log.delete_records(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1000)
    info = log.read(3, 1000)
    assert info.log_start_offset == 3 and info.slices[0].size > 0


def test_read_returns_slice_from_start_of_batch_and_min_one_message(new_log):
    log = new_log()
    data = batch([NOW_MS] * 10, value_size=100)
    log.append(data, now_ms=NOW_MS)
    info = log.read(7, 10, min_one_message=True)
    stored = info.slices[0].read()
    assert len(stored) == len(data) and not info.first_entry_incomplete
    assert list(iter_records(stored)) == list(iter_records(data))
    info = log.read(7, 10, min_one_message=False)
    assert info.slices[0].size == 10 and info.first_entry_incomplete
    fd = info.slices[0].dup_fd()
    try:
        assert os.pread(fd, 10, 0) == stored[:10]
    finally:
        os.close(fd)


def test_read_crosses_to_next_segment(new_log):
    log = new_log(segment_bytes=200)
    for i in range(6):
        log.append(batch([NOW_MS + i], value_size=50), now_ms=NOW_MS)
    assert len(log.segments) > 2
    assert [o for o, _ in read_all(log)] == list(range(6))
    for offset in range(6):
        info = log.read(offset, 1 << 20)
        first = next(iter_batches(info.slices[0].read()))
        assert first.base_offset <= offset <= first.last_offset


def test_record_timestamp_at(new_log):
    log = new_log()
    log.append(batch([NOW_MS + 5, NOW_MS + 1, -1]), now_ms=NOW_MS)
    assert log.record_timestamp_at(0) == NOW_MS + 5
    assert log.record_timestamp_at(1) == NOW_MS + 1
    assert log.record_timestamp_at(2) is None
    assert log.record_timestamp_at(3) is None
    log2 = new_log(name="t-1", message_format_version="0.10.2")
    log2.append(batch([NOW_MS + 9], magic=1), now_ms=NOW_MS)
    assert log2.record_timestamp_at(0) == NOW_MS + 9


def test_segments_info_and_summary(new_log):
    log = new_log(segment_bytes=200)
    for i in range(5):
        log.append(batch([NOW_MS + i], value_size=50), now_ms=NOW_MS)
    info = log.segments_info()
    assert [s.base_offset for s in info] == [s.base_offset for s in log.segments]
    assert info[-1].is_active and not info[0].is_active
    assert info[0].largest_timestamp_source == "records"
    assert info[0].last_offset == info[1].base_offset - 1
    assert sum(s.size_bytes for s in info) == log.size_bytes
    summary = log.summary()
    assert summary["log_end_offset"] == 5 and summary["max_timestamp_ms"] == NOW_MS + 4


# -- truncation ----------------------------------------------------------------------------------------

def test_truncate_to(new_log):  # 61
    log = new_log()
    for i in range(10):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    size = log.size_bytes
    assert log.truncate_to(10) is False and log.truncate_to(20) is False
    assert log.log_end_offset == 10 and log.size_bytes == size
    assert log.truncate_to(5)
    assert log.log_end_offset == 5 and log.size_bytes < size
    assert [o for o, _ in read_all(log)] == [0, 1, 2, 3, 4]
    assert log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.truncate_fully_and_start_at(42)
    assert log.log_end_offset == 42 and log.log_start_offset == 42 and log.size_bytes == 0
    r = log.append(batch([NOW_MS]), now_ms=NOW_MS)
    assert r.first_offset == 42


def test_index_resizing_at_truncation(new_log):  # 62
    size = len(batch([NOW_MS]))
    index_bytes = 10 * 8  # offset index of 10 slots
    log = new_log(index_interval_bytes=size - 1, segment_index_bytes=index_bytes)
    for i in range(10):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    assert len(log.segments) == 2  # time index (6 slots) filled up first
    first = log.segments[0]
    assert first.offset_index.max_entries == first.offset_index.entries
    assert first.time_index.max_entries == first.time_index.entries
    log.truncate_to(0)
    assert len(log.segments) == 1
    seg = log.active_segment
    assert seg.offset_index.max_entries == index_bytes // 8
    assert seg.time_index.max_entries == index_bytes // 12
    for i in range(5):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    assert len(log.segments) == 1


def test_truncate_reloads_max_timestamp_and_search(new_log):
    log = new_log(index_interval_bytes=1)
    for ts in (10, 90, 30, 40):
        log.append(batch([NOW_MS + ts]), now_ms=NOW_MS)
    log.truncate_to(1)
    assert log.active_segment.max_timestamp_so_far == NOW_MS + 10
    assert log.fetch_offset_by_timestamp(NOW_MS + 11) is None
    assert log.max_timestamp_offset()[:2] == (NOW_MS + 10, 0)


def test_truncate_below_first_segment_starts_fresh(new_log):
    log = new_log(segment_bytes=200)
    for i in range(6):
        log.append(batch([NOW_MS + i], value_size=50), now_ms=NOW_MS)
    log.delete_old_segments(NOW_MS + 10**12)  # everything expired: log starts later
    start = log.log_start_offset
    assert start > 0
    log.truncate_to(start - 1)
    assert log.log_end_offset == start - 1 and len(log.segments) == 1


# -- idempotence ---------------------------------------------------------------------------------------

def test_idempotent_retry_returns_original_offsets(new_log):
    log = new_log()
    b0 = batch([NOW_MS, NOW_MS], producer_id=7, producer_epoch=0, base_sequence=0)
    b1 = batch([NOW_MS], producer_id=7, producer_epoch=0, base_sequence=2)
    r0 = log.append(b0, now_ms=NOW_MS)
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    r1 = log.append(b1, now_ms=NOW_MS)
    again = log.append(b0, now_ms=NOW_MS)
    assert again.duplicate and (again.first_offset, again.last_offset) == (r0.first_offset, r0.last_offset)
    assert log.log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch([NOW_MS], producer_id=7, producer_epoch=0, base_sequence=5), now_ms=NOW_MS)
    log.append(batch([NOW_MS], producer_id=9, producer_epoch=3, base_sequence=0), now_ms=NOW_MS)
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch([NOW_MS], producer_id=9, producer_epoch=2, base_sequence=1), now_ms=NOW_MS)
    assert r1.first_offset == 3


def test_producer_state_survives_restart(tmp_path):
    cfg = topic_config(segment_bytes=400)
    d = str(tmp_path / "t-0")
    log = PartitionLog.create(d, cfg, topic="t", partition=0)
    batches = [batch([NOW_MS], producer_id=5, producer_epoch=1, base_sequence=i) for i in range(8)]
    offsets = [log.append(b, now_ms=NOW_MS).first_offset for b in batches]
    log.close()
    again = PartitionLog.open(d, cfg, topic="t", partition=0, clean=True)
    dup = again.append(batches[-1], now_ms=NOW_MS)
    assert dup.duplicate and dup.first_offset == offsets[-1]
    with pytest.raises(OutOfOrderSequenceError):
        again.append(batch([NOW_MS], producer_id=5, producer_epoch=1, base_sequence=10), now_ms=NOW_MS)
    assert again.append(batch([NOW_MS], producer_id=5, producer_epoch=1, base_sequence=8), now_ms=NOW_MS).first_offset == 8
    again.close_handles()
    # unclean from the recovery point 0: snapshots above it are dropped (they may describe lost
    # data) and the state is rebuilt by scanning the log, which keeps each producer's last five
    # batches
    crashed = PartitionLog.open(d, cfg, topic="t", partition=0, clean=False, recovery_point=0)
    for i in (7, 8, 5):
        b = batch([NOW_MS], producer_id=5, producer_epoch=1, base_sequence=i)
        assert crashed.append(b, now_ms=NOW_MS).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        crashed.append(batches[2], now_ms=NOW_MS)
    crashed.close_handles()


# -- flushing ------------------------------------------------------------------------------------------

def test_prepare_run_mark_flushed(new_log):
    log = new_log(segment_bytes=300)
    assert log.prepare_flush() is None or log.recovery_point == 0
    for i in range(8):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    assert log.recovery_point == 0
    job = log.prepare_flush()
    assert job is not None and job.target_offset == 8
    log.append(batch([NOW_MS]), now_ms=NOW_MS)   # appended after the job was prepared
    job.run()
    log.mark_flushed(job)
    assert log.recovery_point == 8
    assert all(s.indexes_durable for s in log.segments[:-1])
    job2 = log.prepare_flush(up_to_offset=5)
    assert job2 is None
    log.flush()
    assert log.recovery_point == 9 == log.log_end_offset


def test_flush_job_from_another_thread(new_log):
    import threading

    log = new_log()
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    job = log.prepare_flush()
    t = threading.Thread(target=job.run)
    t.start()
    t.join()
    log.mark_flushed(job)
    assert log.recovery_point == 1


def test_mark_flushed_ignored_after_truncation(new_log):
    log = new_log()
    for i in range(5):
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
    job = log.prepare_flush()
    log.truncate_to(2)
    for i in range(5):
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
    job.run()
    log.mark_flushed(job)
    assert log.recovery_point <= 2


def test_maybe_flush_due_policies(new_log):
    log = new_log(flush_messages=3)
    assert log.maybe_flush_due(NOW_MS) is None
    log.append(batch([NOW_MS, NOW_MS]), now_ms=NOW_MS)
    assert log.maybe_flush_due(NOW_MS) is None
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    job = log.maybe_flush_due(NOW_MS)
    assert job is not None
    job.run()
    log.mark_flushed(job)
    assert log.recovery_point == 3
    timed = new_log(name="t-1", flush_ms=1000)
    timed.maybe_flush_due(NOW_MS)
    timed.append(batch([NOW_MS]), now_ms=NOW_MS)
    assert timed.maybe_flush_due(NOW_MS + 999) is None
    job = timed.maybe_flush_due(NOW_MS + 1000)
    assert job is not None
    job.discard()
    rolled = new_log(name="t-2", segment_bytes=200)
    for i in range(4):
        rolled.append(batch([NOW_MS], value_size=60), now_ms=NOW_MS)
    job = rolled.maybe_flush_due(NOW_MS)   # flush-on-roll: up to the active segment's base
    assert job is not None and job.target_offset == rolled.active_segment.base_offset
    job.run()
    rolled.mark_flushed(job)
    assert rolled.maybe_flush_due(NOW_MS) is None


def test_update_config_applies_to_open_log(new_log):
    log = new_log()
    log.update_config(topic_config(message_timestamp_type="LogAppendTime"))
    assert log.append(batch([5]), now_ms=NOW_MS).log_append_time_ms == NOW_MS


def test_close_then_calls_fail_and_reopen_works(new_log, tmp_path):
    log = new_log()
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    log.close()
    with pytest.raises(Exception):
        log.read(0, 100)
    again = PartitionLog.open(log.dir, log.config, topic="t", partition=0)
    assert again.log_end_offset == 1 and again.recovery_point == 1
    again.close()


def test_index_mapping_lru_keeps_answers_right(new_log):
    """With only 4 mappings allowed, lookups over many segments and appends to the active
    segment keep unmapping and remapping indexes (including the active one) transparently."""
    from support.log_helpers import brute_force_search_segments

    from sundial.storage.index import MappedIndexes

    mapped = MappedIndexes(4)
    log = new_log(segment_bytes=400, index_interval_bytes=1, mapped_indexes=mapped)
    stamps = []
    for i in range(60):
        ts = NOW_MS + (i * 31) % 97
        stamps.append(ts)
        log.append(batch([ts]), now_ms=NOW_MS)
        if i % 7 == 0:   # lookups in old segments evict the active segment's mappings
            log.fetch_offset_by_timestamp(NOW_MS)
    assert len(mapped) <= 4
    segments = [[(o, stamps[o]) for o in range(s.base_offset, s.next_offset)] for s in log.segments]
    for target in range(NOW_MS - 1, NOW_MS + 99):
        got = log.fetch_offset_by_timestamp(target)
        assert ((got.offset, got.timestamp_ms) if got else None) == \
            brute_force_search_segments(segments, target, 0)
    active = log.active_segment
    assert active.offset_index.entries == len(
        [1 for o in range(active.base_offset + 1, active.next_offset)])
    log.close()
    again = PartitionLog.open(log.dir, log.config, topic="t", partition=0, clean=False, recovery_point=0,
                              mapped_indexes=mapped)
    assert [tuple(again.segments[-1].offset_index.entry(i)) for i in range(again.segments[-1].offset_index.entries)]
    assert len(mapped) <= 4
    again.close_handles()


def test_flush_job_marks_only_the_indexes_it_synced(new_log):
    log = new_log(segment_bytes=250)
    log.append(batch([NOW_MS], value_size=60), now_ms=NOW_MS)
    job = log.prepare_flush()          # the segment is active: its indexes are not in the job
    for _ in range(3):
        log.append(batch([NOW_MS], value_size=60), now_ms=NOW_MS)
    assert len(log.segments) > 1       # rolled after the job was prepared
    job.run()
    log.mark_flushed(job)
    assert log.recovery_point == 1
    assert not log.segments[0].indexes_durable
    log.flush()
    assert log.segments[0].indexes_durable and log.recovery_point == log.log_end_offset


def test_shutdown_checkpoint_has_final_recovery_points(tmp_path):
    from sundial.storage.log_manager import LogManager

    mgr = LogManager([str(tmp_path)], {"log.message.timestamp.after.max.ms": 2**63 - 1})
    mgr.startup()
    mgr.create_topic("t", 1)
    log = mgr.get_log("t", 0)
    for _ in range(3):
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
    mgr.shutdown()
    assert open(tmp_path / "recovery-point-offset-checkpoint").read() == "0\n1\nt 0 3\n"
