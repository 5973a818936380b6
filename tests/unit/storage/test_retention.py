"""Retention: behaviours 63–68 (§7) and the two-level consumed retention of seed 004."""

import os

import pytest
from support.log_helpers import NOW_MS, batch

from sundial.storage import retention
from sundial.storage.retention import SegmentFacts, deletable_prefix

DAY = 86_400_000


@pytest.fixture
def new_log(new_log):
    """The storage tests' ``new_log``, keeping everything (``retention_ms`` -1) unless a test sets it."""

    def factory(name="t-0", **cfg):
        cfg.setdefault("retention_ms", -1)
        return new_log(name, **cfg)

    return factory


def fill(log, timestamps, per_segment):
    """One single-record batch per timestamp, rolling every ``per_segment`` records."""
    for i, ts in enumerate(timestamps):
        if i and i % per_segment == 0:
            log.roll(NOW_MS)
        log.append(batch([ts], keys=[b"k%d" % i]), now_ms=NOW_MS)


def test_async_delete(new_log):  # 63
    log = new_log(file_delete_delay_ms=1000, retention_ms=DAY)
    fill(log, [NOW_MS - 2 * DAY] * 6, 2)
    before = [s.log_path for s in log.segments]
    outcome = log.delete_old_segments(NOW_MS)
    assert [d.reason for d in outcome.deleted] == ["retention_ms"] * 3
    assert outcome.rolled and len(log.segments) == 1 and log.active_segment.size_bytes == 0
    for path in before:
        assert not os.path.exists(path)
        assert os.path.exists(path + ".deleted")
    assert log.delete_expired_files(NOW_MS + 999) == 0
    assert log.delete_expired_files(NOW_MS + 1001) > 0
    for path in before:
        assert not os.path.exists(path + ".deleted")


def test_cannot_delete_at_or_above_high_watermark():  # 64 (pure rule: the HW is a parameter)
    segs = [SegmentFacts(0, 5, 100, 0, "records"), SegmentFacts(5, 10, 100, 0, "records"),
            SegmentFacts(10, 15, 100, 0, "records")]
    always = lambda i, s: True  # noqa: E731
    assert deletable_prefix(segs, 0, always) == 0
    assert deletable_prefix(segs, 7, always) == 1
    assert deletable_prefix(segs, 10, always) == 2
    assert deletable_prefix(segs, 15, always) == 3


def test_delete_everything_leaves_one_empty_segment(new_log):  # 64 (HW = LEO)
    log = new_log(retention_ms=DAY)
    fill(log, [NOW_MS - 2 * DAY] * 100, 10)
    log.delete_old_segments(NOW_MS)
    assert len(log.segments) == 1 and log.active_segment.size_bytes == 0
    assert log.log_start_offset == 100 == log.log_end_offset


def test_size_based_retention(new_log):  # 65
    size = len(batch([NOW_MS], keys=[b"k0"]))
    log = new_log(retention_bytes=10 * size)
    fill(log, [NOW_MS] * 15, 5)
    out = log.delete_old_segments(NOW_MS)
    assert len(log.segments) == 2 and [d.reason for d in out.deleted] == ["retention_bytes"]
    log2 = new_log("t-1", retention_bytes=15 * size)
    fill(log2, [NOW_MS] * 15, 5)
    log2.delete_old_segments(NOW_MS)
    assert len(log2.segments) == 3


def test_time_based_retention_and_cleanup_policy(new_log):  # 66
    log = new_log(retention_ms=10_000)
    fill(log, [10] * 15, 5)
    log.delete_old_segments(NOW_MS)
    assert len(log.segments) == 1 and log.active_segment.size_bytes == 0
    fresh = new_log("t-1", retention_ms=10**12)
    fill(fresh, [NOW_MS] * 15, 5)
    fresh.delete_old_segments(NOW_MS)
    assert len(fresh.segments) == 3
    compact = new_log("t-2", retention_ms=10_000, cleanup_policy=("compact",))
    fill(compact, [10] * 15, 5)
    compact.delete_old_segments(NOW_MS)
    assert len(compact.segments) == 3
    both = new_log("t-3", retention_ms=10_000, cleanup_policy=("compact", "delete"))
    fill(both, [10] * 15, 5)
    both.delete_old_segments(NOW_MS)
    assert len(both.segments) == 1


def test_log_start_offset_breach(new_log):  # 67
    log = new_log()
    fill(log, [NOW_MS] * 15, 5)
    log.delete_records(1)
    assert not log.delete_old_segments(NOW_MS).deleted
    assert len(log.segments) == 3
    log.delete_records(6)
    out = log.delete_old_segments(NOW_MS)
    assert [d.reason for d in out.deleted] == ["log_start_offset"]
    assert len(log.segments) == 2 and log.log_start_offset == 6
    log.delete_records(15)
    log.delete_old_segments(NOW_MS)
    assert len(log.segments) == 1 and log.log_start_offset == 15


def test_deletable_segments_filter():  # 68
    segs = [SegmentFacts(i, i + 1, 50, 0, "records") for i in range(10)] + [SegmentFacts(10, 10, 0, 0, "records")]
    assert deletable_prefix(segs, 10, lambda i, s: True) == 10  # the empty active one stays
    segs[-1] = SegmentFacts(10, 11, 50, 0, "records")
    assert deletable_prefix(segs, 11, lambda i, s: True) == 11


def test_log_start_offset_advanced_and_segment_files_renamed(new_log):
    log = new_log(retention_ms=DAY, file_delete_delay_ms=60_000)
    fill(log, [NOW_MS - 2 * DAY] * 4 + [NOW_MS] * 2, 2)
    out = log.delete_old_segments(NOW_MS)
    assert [(d.base_offset, d.last_offset) for d in out.deleted] == [(0, 1), (2, 3)]
    assert log.log_start_offset == 4 and out.log_start_offset == 4
    assert sorted(os.path.basename(p) for p in log.pending_delete_paths()) == sorted(
        [f"{0:020d}.log.deleted", f"{0:020d}.index.deleted", f"{0:020d}.timeindex.deleted",
         f"{2:020d}.log.deleted", f"{2:020d}.index.deleted", f"{2:020d}.timeindex.deleted",
         f"{2:020d}.snapshot.deleted"])   # the roll at offset 2 left a producer snapshot: it goes too


def test_only_a_contiguous_prefix_is_deleted(new_log):
    log = new_log(retention_ms=DAY)
    fill(log, [NOW_MS - 2 * DAY, NOW_MS, NOW_MS - 2 * DAY], 1)
    log.delete_old_segments(NOW_MS)
    assert [s.base_offset for s in log.segments] == [1, 2]


def test_future_timestamp_holds_time_retention_and_is_reported(new_log):  # KAFKA-6482
    log = new_log(retention_ms=DAY)
    fill(log, [NOW_MS + 10 * DAY, NOW_MS - 3 * DAY, NOW_MS - 3 * DAY], 1)
    out = log.delete_old_segments(NOW_MS)
    assert not out.deleted
    assert [h.reason for h in out.held] == ["future_timestamp"]
    hold = out.held[0]
    assert hold.base_offset == 0 and hold.largest_timestamp_ms == NOW_MS + 10 * DAY
    assert "2 later expired" in hold.detail


def test_mtime_fallback_for_time_retention(new_log):
    log = new_log(retention_ms=DAY, message_format_version="0.9.0")
    fill(log, [-1] * 3, 1)
    for seg in log.segments:
        seg.set_last_modified_ms(NOW_MS - 2 * DAY)
    out = log.delete_old_segments(NOW_MS)
    assert len(out.deleted) == 3  # all expired by mtime: rolled first


# -- two-level consumed retention (seed 004) -----------------------------------------------------------

def consumed_log(new_log, name="t-0", **cfg):
    cfg.setdefault("consumed_retention_enabled", True)
    cfg.setdefault("retention_commitoffset_ms", DAY)
    cfg.setdefault("retention_ms", 7 * DAY)
    log = new_log(name, **cfg)
    fill(log, [NOW_MS - 2 * DAY] * 6 + [NOW_MS] * 2, 2)   # segments 0-1, 2-3, 4-5 old; 6-7 new
    return log


def test_consumed_segments_go_early(new_log):
    log = consumed_log(new_log)
    out = log.delete_old_segments(NOW_MS, consumed_upto=4)
    assert [(d.base_offset, d.reason) for d in out.deleted] == [(0, "consumed"), (2, "consumed")]
    assert [(h.base_offset, h.reason) for h in out.held] == [(4, "not_consumed")]
    assert log.log_start_offset == 4


def test_consumed_unknown_skips_consumed_retention(new_log):
    log = consumed_log(new_log)
    out = log.delete_old_segments(NOW_MS, consumed_upto=None)
    assert not out.deleted and not out.held


def test_consumed_retention_needs_age(new_log):
    log = consumed_log(new_log, retention_commitoffset_ms=3 * DAY)
    out = log.delete_old_segments(NOW_MS, consumed_upto=8)
    assert not out.deleted and not out.held   # consumed but not old enough: no hold either


def test_forced_retention_still_applies(new_log):
    log = consumed_log(new_log, retention_ms=DAY + 1)
    out = log.delete_old_segments(NOW_MS, consumed_upto=0)
    assert [d.reason for d in out.deleted] == ["retention_ms"] * 3
    assert [h.reason for h in out.held] == ["not_consumed"]


def test_consumed_retention_disabled_by_config(new_log):
    log = consumed_log(new_log, consumed_retention_enabled=False)
    out = log.delete_old_segments(NOW_MS, consumed_upto=8)
    assert not out.deleted


def test_consumed_everything_rolls_first(new_log):
    log = new_log(consumed_retention_enabled=True, retention_commitoffset_ms=DAY, retention_ms=7 * DAY)
    fill(log, [NOW_MS - 2 * DAY] * 4, 2)
    out = log.delete_old_segments(NOW_MS, consumed_upto=4)
    assert out.rolled and len(out.deleted) == 2
    assert len(log.segments) == 1 and log.log_start_offset == 4


def test_consumed_rule_unit():
    segs = [SegmentFacts(0, 5, 10, 0, "records"), SegmentFacts(5, 10, 10, 0, "records"),
            SegmentFacts(10, 12, 10, 0, "records")]
    d = retention.consumed_rule(segs, 12, consumed_upto=9, retention_commitoffset_ms=10, now_ms=100)
    assert d.count == 1 and d.hold.reason == "not_consumed" and d.hold.base_offset == 5
    d = retention.consumed_rule(segs, 12, consumed_upto=10, retention_commitoffset_ms=10, now_ms=100)
    assert d.count == 2
    d = retention.consumed_rule(segs, 12, consumed_upto=-1, retention_commitoffset_ms=10, now_ms=100)
    assert d.count == 0 and d.hold is None


# -- holds an operator sees: only real ones, logged when they change -------------------------------

def test_consumed_everything_roll_is_not_a_future_timestamp_hold(new_log):
    # The roll creates an empty segment whose time is its mtime: the real clock, ahead of the
    # pass's NOW_MS. It can never be deleted, so it holds nothing back.
    log = new_log(consumed_retention_enabled=True, retention_commitoffset_ms=DAY, retention_ms=7 * DAY)
    fill(log, [NOW_MS - 2 * DAY] * 4, 2)
    out = log.delete_old_segments(NOW_MS, consumed_upto=4)
    assert out.rolled and len(out.deleted) == 2
    assert log.segments[-1].largest_timestamp_ms() > NOW_MS   # the situation of the false warning
    assert out.held == []
    assert log.delete_old_segments(NOW_MS, consumed_upto=4).held == []


def test_time_rule_holds_only_segments_it_could_otherwise_delete():
    future = 1_000
    rule = retention.time_rule
    # an empty last segment in the "future" (a fresh roll): no hold
    assert rule([SegmentFacts(10, 10, 0, future, "mtime")], 10, retention_ms=5, now_ms=100).hold is None
    # the active segment of a log without record timestamps: its mtime moves with every append
    assert rule([SegmentFacts(0, 3, 10, future, "mtime")], 3, retention_ms=5, now_ms=100).hold is None
    # above the high watermark: not deletable whatever its time
    assert rule([SegmentFacts(0, 3, 10, future, "records"), SegmentFacts(3, 5, 10, 0, "records")], 2,
                retention_ms=5, now_ms=100).hold is None
    # a real record timestamp in the future holds an older segment behind it
    d = rule([SegmentFacts(0, 3, 10, future, "records"), SegmentFacts(3, 5, 10, 0, "records")], 5,
             retention_ms=5, now_ms=100)
    assert d.count == 0 and d.hold.reason == "future_timestamp" and "1 later expired" in d.hold.detail
    # so does a closed segment whose mtime is in the future (a skewed clock)
    d = rule([SegmentFacts(0, 3, 10, future, "mtime"), SegmentFacts(3, 5, 10, 0, "records")], 5,
             retention_ms=5, now_ms=100)
    assert d.hold is not None and d.hold.base_offset == 0


def test_future_timestamp_hold_is_logged_when_it_starts_moves_and_ends(new_log, monkeypatch):
    import structlog
    from structlog.testing import CapturingLogger

    from sundial.storage import log_retention

    # A logger of its own: the process-wide structlog set-up (cached, level-filtered by
    # whichever test configured it first) must not decide what this test sees.
    captured = CapturingLogger()
    monkeypatch.setattr(log_retention, "logger", structlog.wrap_logger(
        captured, processors=[], wrapper_class=structlog.BoundLogger, cache_logger_on_first_use=False))
    log = new_log(retention_ms=DAY)
    fill(log, [NOW_MS + 10 * DAY, NOW_MS - 3 * DAY, NOW_MS - 3 * DAY], 1)
    for _ in range(3):
        assert [h.reason for h in log.delete_old_segments(NOW_MS).held] == ["future_timestamp"]
    # the clock reaches the timestamp: the hold ends and everything expired goes
    later = NOW_MS + 12 * DAY
    assert len(log.delete_old_segments(later).deleted) == 3
    log.delete_old_segments(later)
    kinds = [(call.kwargs["event"], call.kwargs.get("base_offset")) for call in captured.calls
             if call.kwargs.get("event") in ("retention_held_by_future_timestamp", "retention_hold_released")]
    assert kinds == [("retention_held_by_future_timestamp", 0), ("retention_hold_released", 0)]
