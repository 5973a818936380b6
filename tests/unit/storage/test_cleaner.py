"""Log compaction: the cleaner's record, batch, segment and index rules (Kafka's Cleaner, filterTo)."""

import os
import struct

import pytest
from support.cleaner_helpers import (
    Rec,
    append,
    batches_on_disk,
    clean_pass,
    clean_until_done,
    compact_log,
    model_after_clean,
    read_all,
)
from support.log_helpers import NOW_MS, brute_force_search_segments

from sundial.records import codecs
from sundial.records.layout import DELETE_HORIZON_FLAG_MASK, LOG_APPEND_TIME
from sundial.storage.cleaner import SegmentSource, group_segments_by_size
from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.offset_map import SkimpyOffsetMap

DAY = 86_400_000


def fill_rounds(log, keys: int, rounds: int, *, per_segment: int, ts0: int = NOW_MS - DAY, codec: int = 0,
                headers=()):
    """``rounds`` overwrites of ``keys`` keys, one record per batch, a roll every ``per_segment`` records."""
    records = []
    n = 0
    for r in range(rounds):
        for k in range(keys):
            if n and n % per_segment == 0:
                log.roll(NOW_MS)
            records += append(log, [(b"k%d" % k, b"v%d-%d" % (k, r), ts0 + n, headers)], codec=codec)
            n += 1
    return records


def test_latest_value_per_key_keeps_offset_timestamp_and_headers(env):
    log, mgr, m = env()
    records = fill_rounds(log, 5, 6, per_segment=7, headers=[("h", b"x"), ("n", None)])
    lso, leo = log.log_start_offset, log.log_end_offset
    active_base = log.active_segment.base_offset
    passes = clean_until_done(log, mgr, m, NOW_MS)
    assert passes and passes[-1].end_offset == active_base
    got = read_all(log)
    assert got == model_after_clean(records, active_base)
    assert all(r.headers == (("h", b"x"), ("n", None)) for r in got)
    assert (log.log_start_offset, log.log_end_offset) == (lso, leo)
    assert log.segments[0].base_offset == 0
    assert mgr.all_checkpoints()[("t", 0)] == active_base


def test_active_segment_is_never_cleaned(env):
    log, mgr, m = env()
    records = fill_rounds(log, 3, 4, per_segment=100)   # everything in the active segment
    assert clean_pass(log, mgr, m, NOW_MS) is None
    assert read_all(log) == records


def test_tombstone_kept_and_stamped_then_dropped_after_delete_retention(env):
    log, mgr, m = env(delete_retention_ms=DAY)
    recs = append(log, [(b"a", b"1", NOW_MS), (b"b", b"1", NOW_MS)])
    recs += append(log, [(b"a", None, NOW_MS + 1)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    assert read_all(log) == [recs[1], recs[2]]       # a's older value went; its tombstone stays
    (_, tomb_batch), = [(b, v) for b, v in batches_on_disk(log) if v.record_count and v.last_offset == 2]
    assert tomb_batch.attributes & DELETE_HORIZON_FLAG_MASK
    assert tomb_batch.base_timestamp == NOW_MS + DAY          # the delete horizon
    assert read_all(log)[1].timestamp == NOW_MS + 1            # the record keeps its timestamp
    # new data makes the log dirty again; a pass before the horizon keeps the tombstone ...
    recs += append(log, [(b"c", b"1", NOW_MS + 2)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS + DAY - 1)
    assert [r.offset for r in read_all(log)] == [1, 2, 3]
    # ... one at or after it drops it
    recs += append(log, [(b"d", b"1", NOW_MS + 3)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS + DAY)
    assert [r.offset for r in read_all(log)] == [1, 3, 4]


def test_records_without_a_key_are_dropped_as_invalid(env):
    log, mgr, m = env()
    append(log, [(None, b"x", NOW_MS), (b"k", b"1", NOW_MS)])
    append(log, [(b"k", b"2", NOW_MS)])
    log.roll(NOW_MS)
    p = clean_pass(log, mgr, m, NOW_MS)
    assert p.stats.invalid_messages == 1
    assert [(r.offset, r.value) for r in read_all(log)] == [(2, b"2")]


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(env, codec):
    log, mgr, m = env()
    recs = append(log, [(b"k%d" % i, b"v%d" % i * 20, NOW_MS + i) for i in range(10)], codec=codec)
    recs += append(log, [(b"k%d" % i, b"w%d" % i, NOW_MS + 20 + i) for i in range(0, 10, 2)], codec=codec)
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    assert read_all(log) == model_after_clean(recs, log.active_segment.base_offset)
    views = [v for _, v in batches_on_disk(log)]
    assert views and all(v.compression == codec for v in views) and all(v.crc_valid() for v in views)
    first = views[0]
    # the rebuilt batch keeps its base offset and last offset delta, its base timestamp is its first record's
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 9, 5)
    assert first.base_timestamp == NOW_MS + 1 and first.max_timestamp == NOW_MS + 9


def test_log_append_time_batches_keep_their_time(env):
    log, mgr, m = env()
    append(log, [(b"a", b"1", 5), (b"b", b"1", 6)], timestamp_type=LOG_APPEND_TIME, log_append_time_ms=NOW_MS)
    append(log, [(b"a", b"2", 7)], timestamp_type=LOG_APPEND_TIME, log_append_time_ms=NOW_MS + 1)
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    got = read_all(log)
    assert [(r.offset, r.timestamp) for r in got] == [(1, NOW_MS), (2, NOW_MS + 1)]
    view = batches_on_disk(log)[0][1]
    assert view.timestamp_type == LOG_APPEND_TIME and view.max_timestamp == NOW_MS


def test_last_batch_of_an_active_producer_is_kept_empty(env):
    log, mgr, m = env()
    append(log, [(b"a", b"1", NOW_MS)], producer_id=7, producer_epoch=0, base_sequence=0)
    append(log, [(b"a", b"2", NOW_MS + 1), (b"a", b"3", NOW_MS + 2)], producer_id=7, producer_epoch=0,
           base_sequence=1)
    append(log, [(b"a", b"4", NOW_MS + 3)])          # no producer id: supersedes everything above
    append(log, [(b"b", b"1", NOW_MS + 4)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    views = [v for _, v in batches_on_disk(log)]
    empty = [v for v in views if v.record_count == 0]
    assert len(empty) == 1
    e = empty[0]
    assert (e.producer_id, e.producer_epoch, e.base_sequence, e.base_offset, e.last_offset) == (7, 0, 1, 1, 2)
    assert e.base_timestamp == -1 and e.max_timestamp == NOW_MS + 2 and e.size_bytes == 61 and e.crc_valid()
    assert [r.offset for r in read_all(log)] == [3, 4]
    # the producer's next batch is still in sequence after a restart
    log.close()
    from sundial.storage.log import PartitionLog
    reopened = PartitionLog.open(log.dir, log.config, topic="t", partition=0)
    try:
        from sundial.records.builder import SimpleRecord, build_records
        r = reopened.append(build_records(2, [SimpleRecord(NOW_MS, b"a", b"5")], producer_id=7, producer_epoch=0,
                                          base_sequence=3).buffer, now_ms=NOW_MS)
        assert r.first_offset == 5 and not r.duplicate
    finally:
        reopened.close_handles()


def test_last_batch_of_the_round_is_kept_empty(env):
    log, mgr, m = env()
    append(log, [(b"a", b"1", NOW_MS)])
    append(log, [(None, b"x", NOW_MS + 1)])           # keyless: dropped, but it ends the round
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    views = [v for _, v in batches_on_disk(log)]
    assert [(v.base_offset, v.record_count) for v in views] == [(0, 1), (1, 0)]
    assert log.segments[0].next_offset == 2


def test_full_map_cleans_up_to_where_it_reached_then_continues(env):
    log, mgr, _ = env()
    records = fill_rounds(log, 40, 3, per_segment=25)
    small = SkimpyOffsetMap(24 * 20)                    # 20 slots, 18 entries at load factor 0.9
    passes = clean_until_done(log, mgr, small, NOW_MS)
    assert len(passes) > 2
    assert all(p.end_offset > p.first_dirty for p in passes)
    assert [p.first_dirty for p in passes[1:]] == [p.end_offset for p in passes[:-1]]
    assert read_all(log) == model_after_clean(records, log.active_segment.base_offset)


def test_min_compaction_lag_holds_segments_back(env):
    log, mgr, m = env(min_compaction_lag_ms=60_000)
    old = fill_rounds(log, 3, 2, per_segment=3, ts0=NOW_MS - 120_000)
    log.roll(NOW_MS)
    new = append(log, [(b"k0", b"new", NOW_MS - 1_000)])
    log.roll(NOW_MS)
    p = clean_pass(log, mgr, m, NOW_MS)
    assert p.first_uncleanable == new[0].offset            # the recent segment is not cleanable
    assert read_all(log) == model_after_clean(old, new[0].offset) + new
    # once the lag has passed it is
    p = clean_pass(log, mgr, m, NOW_MS + 60_000)
    assert p.first_uncleanable == log.active_segment.base_offset
    assert [r.value for r in read_all(log) if r.key == b"k0"] == [b"new"]


def test_max_compaction_lag_forces_a_log_below_the_dirty_ratio(env):
    log, mgr, m = env(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    fill_rounds(log, 2, 2, per_segment=2, ts0=NOW_MS)
    log.roll(NOW_MS)
    append(log, [(b"z", b"1", NOW_MS)])
    # ratio 1.0 > 0.99 would qualify anyway: make the clean section large first
    clean_until_done(log, mgr, m, NOW_MS)
    append(log, [(b"k0", b"x" * 10, NOW_MS + 1)])
    log.roll(NOW_MS)
    assert clean_pass(log, mgr, m, NOW_MS + 30_000) is None          # ratio too low, lag not reached
    assert mgr.max_dirty_ratio < 0.99
    p = clean_pass(log, mgr, m, NOW_MS + 61_000 + 1)                  # first batch 60 s overdue
    assert p is not None and mgr.last_pre_clean.delayed_partitions == 1


def test_dirtiest_log_first_and_ratio_threshold(tmp_path):
    a = compact_log(tmp_path / "a-0", min_cleanable_dirty_ratio=0.5)
    b = compact_log(tmp_path / "b-0", min_cleanable_dirty_ratio=0.5)
    try:
        for log in (a, b):
            append(log, [(b"k", b"1", NOW_MS)])
            log.roll(NOW_MS)
        mgr = LogCleanerManager([str(tmp_path)])
        mgr._checkpoints[str(tmp_path)] = {("a", 0): 1, ("b", 0): 0}   # a clean, b dirty
        a.topic, b.topic = "a", "b"
        chosen = mgr.grab_filthiest_log([("a", 0, a), ("b", 0, b)], NOW_MS)
        assert (chosen.topic, chosen.cleanable_ratio) == ("b", 1.0)
        assert mgr.grab_filthiest_log([("a", 0, a), ("b", 0, b)], NOW_MS) is None   # b in progress, a clean
    finally:
        a.close_handles()
        b.close_handles()


def test_checkpoint_outside_the_log_is_reset(env, tmp_path):
    log, mgr, m = env()
    fill_rounds(log, 2, 2, per_segment=2)
    log.roll(NOW_MS)
    mgr.update_checkpoint(str(tmp_path), ("t", 0), 10_000)
    p = clean_pass(log, mgr, m, NOW_MS)
    assert p.first_dirty == 0
    text = open(tmp_path / "cleaner-offset-checkpoint").read().split("\n")
    assert text[:3] == ["0", "1", f"t 0 {p.end_offset}"]


def test_offset_and_time_indexes_of_cleaned_segments_point_at_batch_starts(env):
    log, mgr, m = env(index_interval_bytes=64, segment_bytes=100_000)
    records = fill_rounds(log, 7, 30, per_segment=60)
    clean_until_done(log, mgr, m, NOW_MS)
    for seg in log.segments[:-1]:
        assert seg.check_indexes() == []
        raw = os.pread(seg.fd, seg.size_bytes, 0)
        starts = {}
        pos = 0
        while pos < len(raw):
            base, size = struct.unpack_from(">qi", raw, pos)
            last = base + struct.unpack_from(">i", raw, pos + 23)[0]
            starts[pos] = last
            pos += 12 + size
        entries = [struct.unpack_from(">ii", open(seg.offset_index.path, "rb").read(), i)
                   for i in range(0, os.path.getsize(seg.offset_index.path), 8)]
        for rel, position in entries:
            assert starts[position] == seg.base_offset + rel
        tentries = [struct.unpack_from(">qi", open(seg.time_index.path, "rb").read(), i)
                    for i in range(0, os.path.getsize(seg.time_index.path), 12)]
        assert tentries and tentries[-1][0] == seg.max_timestamp_so_far
    got = read_all(log)
    assert got == model_after_clean(records, log.active_segment.base_offset)


def test_offsets_for_times_on_a_cleaned_log_is_kafkas_two_step_answer(env):
    log, mgr, m = env(index_interval_bytes=32)
    fill_rounds(log, 6, 8, per_segment=9)
    clean_until_done(log, mgr, m, NOW_MS)
    got = read_all(log)
    segs = [[(r.offset, r.timestamp) for r in got if seg.base_offset <= r.offset < seg.next_offset]
            for seg in log.segments]
    mtimes = [seg.last_modified_ms() for seg in log.segments]
    for target in range(NOW_MS - DAY - 2, NOW_MS - DAY + 50):
        expected = brute_force_search_segments(segs, target, log.log_start_offset, mtimes)
        found = log.fetch_offset_by_timestamp(target)
        assert (None if found is None else (found.offset, found.timestamp_ms)) == expected, target


@pytest.mark.parametrize("magic,codec", [(1, codecs.NONE), (1, codecs.GZIP), (0, codecs.SNAPPY)])
def test_legacy_entries_keep_their_magic(env, magic, codec):
    log, mgr, m = env()
    recs = append(log, [(b"k%d" % i, b"v%d" % i, NOW_MS + i) for i in range(6)], magic=magic, codec=codec)
    recs += append(log, [(b"k1", b"w", NOW_MS + 9)], magic=magic, codec=codec)
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    assert read_all(log) == model_after_clean(recs, log.active_segment.base_offset)
    assert {v.magic for _, v in batches_on_disk(log)} == {magic}


def test_segments_are_grouped_up_to_segment_bytes_and_merged_on_later_passes(env):
    log, mgr, m = env(segment_bytes=3000)
    records = fill_rounds(log, 4, 40, per_segment=10)
    before = len(log.segments)
    clean_until_done(log, mgr, m, NOW_MS)
    append(log, [(b"k0", b"again", NOW_MS)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    assert len(log.segments) < before
    assert all(s.size_bytes <= 3000 for s in log.segments)
    assert [r.value for r in read_all(log) if r.key == b"k0"] == [b"again"]
    assert len(read_all(log)) == 4 and len(records) == 160


def source(base, size, oi=0, ti=0):
    return SegmentSource(None, base, -1, size, oi, ti, 0)


def test_group_segments_by_size():
    segs = [source(0, 400), source(10, 400), source(20, 300), source(30, 0), source(40, 500)]
    groups = group_segments_by_size(segs, 1000, 1000, 50)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30, 40]]
    groups = group_segments_by_size([source(0, 10, oi=600), source(10, 10, oi=600)], 1000, 1000, 20)
    assert len(groups) == 2                       # the offset indexes would not fit in one
    big = 2**31
    groups = group_segments_by_size([source(0, 10), source(big - 10, 10)], 1000, 1000, big + 5)
    assert len(groups) == 2                       # relative offsets would overflow


def test_swap_is_refused_after_truncation_and_the_log_stays_intact(env):
    log, mgr, m = env()
    records = fill_rounds(log, 3, 4, per_segment=4)
    log.roll(NOW_MS)
    ltc = mgr.grab_filthiest_log([("t", 0, log)], NOW_MS)
    job = log.cleaning_job(ltc.first_dirty_offset, ltc.first_uncleanable_offset, NOW_MS)
    from sundial.storage.cleaner import Cleaner, CleaningAborted
    log.truncate_to(8)
    with pytest.raises(CleaningAborted):
        Cleaner(m).clean(job, lambda c: log.replace_segments(c, NOW_MS))
    job.close()
    mgr.done_cleaning(ltc, None)
    assert read_all(log) == records[:8]
    assert not [f for f in os.listdir(log.dir) if f.endswith((".cleaned", ".swap"))]


def test_compact_delete_time_retention_still_applies(env):
    log, mgr, m = env(cleanup_policy=("compact", "delete"), retention_ms=DAY)
    fill_rounds(log, 3, 3, per_segment=3, ts0=NOW_MS - 3 * DAY)
    log.roll(NOW_MS)
    recent = append(log, [(b"k9", b"1", NOW_MS)])
    clean_until_done(log, mgr, m, NOW_MS)
    outcome = log.delete_old_segments(NOW_MS)
    assert outcome.deleted and read_all(log) == recent
    assert log.log_start_offset == recent[0].offset


def test_deleted_files_go_through_the_deleted_suffix(env):
    log, mgr, m = env(file_delete_delay_ms=1000)
    fill_rounds(log, 2, 3, per_segment=2)
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    names = os.listdir(log.dir)
    assert any(n.endswith(".log.deleted") for n in names)
    assert not any(n.endswith((".cleaned", ".swap")) for n in names)
    assert log.delete_expired_files(NOW_MS + 1001) > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log.dir))
    assert isinstance(read_all(log)[0], Rec)


def test_dump_log_verifies_cleaned_segments_and_shows_empty_batches_and_horizons(env, capsys):
    from sundial.cli import build_parser

    log, mgr, m = env(index_interval_bytes=48)
    append(log, [(b"a", b"1", NOW_MS)], producer_id=3, producer_epoch=0, base_sequence=0)
    fill_rounds(log, 5, 6, per_segment=8, ts0=NOW_MS + 10)
    append(log, [(b"a", None, NOW_MS + 100)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    log.close()
    args = build_parser().parse_args(["dump-log", "--files", log.dir, "--verify-index-only"])
    assert args.func(args) == 0, capsys.readouterr().err
    args = build_parser().parse_args(["dump-log", "--files", log.dir])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "count: 0" in out and "producerId: 3" in out                  # the producer's emptied last batch
    assert f"deleteHorizonMs: OptionalLong[{NOW_MS + 86_400_000}]" in out   # the tombstone's batch


def test_consumed_retention_keeps_working_on_compact_delete(env):
    log, mgr, m = env(cleanup_policy=("compact", "delete"), retention_ms=7 * DAY, consumed_retention_enabled=True,
                      retention_commitoffset_ms=1000)
    fill_rounds(log, 3, 4, per_segment=4, ts0=NOW_MS - DAY)
    log.roll(NOW_MS)
    tail = append(log, [(b"k9", b"1", NOW_MS)])
    clean_until_done(log, mgr, m, NOW_MS)
    assert len(log.segments) == 2                        # the cleaned segments were merged into one
    held = log.delete_old_segments(NOW_MS, consumed_upto=tail[0].offset - 1)
    assert not held.deleted and held.held[0].reason == "not_consumed"
    outcome = log.delete_old_segments(NOW_MS, consumed_upto=tail[0].offset)
    assert {d.reason for d in outcome.deleted} == {"consumed"}
    assert log.log_start_offset == tail[0].offset and read_all(log) == tail


def test_the_producer_snapshots_of_merged_segments_go_with_them(env):
    """Each roll leaves ``<base>.snapshot``; cleaning merges segments, and the snapshots at the bases
    merged away are renamed ``.deleted`` at the swap and removed with the segments (Kafka deletes
    them then), not left until a restart. The merged segment keeps its own."""
    log, mgr, m = env(file_delete_delay_ms=1000)
    fill_rounds(log, 2, 4, per_segment=2)
    log.roll(NOW_MS)
    bases_before = [s.base_offset for s in log.segments]
    snapshots_before = {int(n[:20]) for n in os.listdir(log.dir) if n.endswith(".snapshot")}
    assert len(snapshots_before) >= 3
    clean_until_done(log, mgr, m, NOW_MS)
    bases_after = {s.base_offset for s in log.segments}
    merged_away = set(bases_before) - bases_after
    assert merged_away
    names = os.listdir(log.dir)
    live = {int(n[:20]) for n in names if n.endswith(".snapshot")}
    marked = {int(n[:20]) for n in names if n.endswith(".snapshot.deleted")}
    assert live == snapshots_before - merged_away
    assert marked == snapshots_before & merged_away
    assert log.delete_expired_files(NOW_MS + 1001) > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log.dir))
