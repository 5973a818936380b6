"""Loading and recovery (§8): behaviours 70–73, 75, plus index repair on every load (KAFKA-10207)."""

import os
import shutil

import pytest
from support.log_helpers import NOW_MS, batch, topic_config
from support.unit_helpers import records_on_disk

from sundial.storage import files
from sundial.storage.log import PartitionLog

DAY = 86_400_000


def build(tmp_path, n=100, name="t-0", **cfg):
    cfg.setdefault("segment_bytes", 1000)
    cfg.setdefault("index_interval_bytes", 1)
    config = topic_config(**cfg)
    d = str(tmp_path / name)
    log = PartitionLog.create(d, config, topic="t", partition=0, now_ms=NOW_MS)
    stamps = [NOW_MS + (i * 7919) % 1000 for i in range(n)]
    for ts in stamps:
        log.append(batch([ts], magic=config.record_version), now_ms=NOW_MS)
    return log, config, d, stamps


def reopen(d, config, **kw):
    kw.setdefault("clean", False)
    return PartitionLog.open(d, config, topic="t", partition=0, **kw)


def index_contents(log):
    out = []
    for seg in log.segments:
        out.append(([tuple(seg.offset_index.entry(i)) for i in range(seg.offset_index.entries)],
                    [seg.time_index.entry(i)[:2] for i in range(seg.time_index.entries)]))
    return out


def check_search(log, stamps):
    """Every target answered as brute force over one-record-per-offset ``stamps``."""
    segs = []
    for seg in log.segments:
        segs.append([(o, stamps[o]) for o in range(seg.base_offset, seg.next_offset)])
    from support.log_helpers import brute_force_search_segments

    for target in sorted(set(stamps)) + [min(stamps) - 1, max(stamps) + 1]:
        got = log.fetch_offset_by_timestamp(target)
        expect = brute_force_search_segments(segs, target, log.log_start_offset)
        assert ((got.offset, got.timestamp_ms) if got else None) == expect, target


def test_log_recovers_to_correct_offset(tmp_path):  # 70
    log, config, d, stamps = build(tmp_path)
    before = index_contents(log)
    leo = log.log_end_offset
    log.close()
    again = reopen(d, config, recovery_point=leo)
    assert again.log_end_offset == leo and index_contents(again) == before
    again.close()
    third = reopen(d, config, recovery_point=10)
    assert third.log_end_offset == leo and index_contents(third) == before
    assert third.recovery_point == 10
    third.flush()
    assert third.recovery_point == leo
    third.close_handles()


@pytest.mark.parametrize("damage", ["delete", "garbage"])
@pytest.mark.parametrize("clean", [False, True])
def test_index_rebuild(tmp_path, damage, clean):  # 71 (clean=True: beyond Kafka)
    log, config, d, stamps = build(tmp_path)
    before = index_contents(log)
    log.close()
    for name in os.listdir(d):
        if name.endswith((".index", ".timeindex")):
            path = os.path.join(d, name)
            if damage == "delete":
                os.remove(path)
            else:
                with open(path, "wb") as fh:
                    fh.write(b"\x01\x02")
    again = reopen(d, config, clean=clean, recovery_point=0)
    assert all(seg.offset_index.entries > 0 and seg.time_index.entries > 0 for seg in again.segments)
    assert index_contents(again) == before
    check_search(again, stamps)
    again.close_handles()


def test_rebuild_time_index_for_old_messages(tmp_path):  # 72
    log, config, d, stamps = build(tmp_path, message_format_version="0.9.0")
    log.close()
    for name in os.listdir(d):
        if name.endswith(".timeindex"):
            os.remove(os.path.join(d, name))
    again = reopen(d, config, recovery_point=0)
    for seg in again.segments:
        assert seg.time_index.entries == 0
        seg.time_index.trim_to_valid_size()
        assert os.path.getsize(seg.time_index.path) == 0
    again.close_handles()


def test_corrupt_log(tmp_path):  # 73
    log, config, d, stamps = build(tmp_path, segment_bytes=10**6)
    records = records_on_disk(log)
    seg = log.active_segment
    log.close()
    with open(seg.log_path, "ab") as fh:
        fh.write(os.urandom(300))
    with open(seg.offset_index.path, "ab") as fh:
        fh.write(os.urandom(100))
    again = reopen(d, config, recovery_point=0)
    assert records_on_disk(again) == records
    check_search(again, stamps)
    again.close_handles()


def test_orphan_indexes_and_deleted_files_removed(tmp_path):  # 75
    log, config, d, _ = build(tmp_path)
    log.close()
    orphan = [files.index_file(d, 999_999), files.time_index_file(d, 999_999)]
    stale = [files.log_file(d, 500_000) + ".deleted", files.index_file(d, 500_000) + ".deleted",
             files.log_file(d, 400_000) + ".cleaned", files.snapshot_file(d, 7) + ".tmp"]
    for path in orphan + stale:
        open(path, "wb").close()
    again = reopen(d, config, clean=True)
    for path in orphan + stale:
        assert not os.path.exists(path)
    again.close_handles()


def test_torn_tail_of_active_segment(tmp_path):
    log, config, d, stamps = build(tmp_path, segment_bytes=10**6)
    records = records_on_disk(log)
    seg = log.active_segment
    size = seg.size_bytes
    log.close_handles()  # crash: no final time entry, no trim
    with open(seg.log_path, "r+b") as fh:
        fh.truncate(size - 5)   # the last batch is torn
    again = reopen(d, config, recovery_point=0)
    assert records_on_disk(again) == records[:-1]
    assert again.log_end_offset == len(records) - 1
    again.close_handles()


def test_corruption_in_middle_segment_deletes_later_segments(tmp_path):
    log, config, d, stamps = build(tmp_path, segment_bytes=600)
    assert len(log.segments) >= 4
    victim = log.segments[1]
    later = [s.base_offset for s in log.segments[2:]]
    log.close()
    with open(victim.log_path, "r+b") as fh:
        fh.seek(victim.size_bytes // 2)
        fh.write(b"\xff" * 20)
    again = reopen(d, config, recovery_point=0)
    assert len(again.segments) == 2
    assert again.log_end_offset <= later[0]
    for base in later:
        assert not os.path.exists(files.log_file(d, base))
    again.close_handles()


def test_zero_filled_time_index_is_rebuilt_and_retention_keeps_the_segment(tmp_path):
    """KAFKA-10207: an untrimmed (pre-allocated, zero-filled) index must not read as max timestamp 0."""
    log, config, d, stamps = build(tmp_path, retention_ms=DAY)
    first = log.segments[0]
    log.close()
    with open(first.time_index.path, "ab") as fh:
        fh.write(b"\0" * 12 * 50)
    with open(first.offset_index.path, "ab") as fh:
        fh.write(b"\0" * 8 * 50)
    again = reopen(d, config, clean=True)
    seg0 = again.segments[0]
    assert seg0.max_timestamp_so_far == max(stamps[seg0.base_offset:seg0.next_offset])
    out = again.delete_old_segments(NOW_MS + 1000)
    assert not out.deleted
    check_search(again, stamps)
    again.close_handles()


def test_wrong_sized_or_inconsistent_offset_index_rebuilt_on_clean_start(tmp_path):
    log, config, d, stamps = build(tmp_path)
    seg = log.segments[1]
    log.close()
    raw = open(seg.offset_index.path, "rb").read()
    with open(seg.offset_index.path, "wb") as fh:   # entries out of order
        fh.write(raw[8:16] + raw[0:8] + raw[16:])
    again = reopen(d, config, clean=True)
    s1 = again.segments[1]
    entries = [s1.offset_index.entry(i) for i in range(s1.offset_index.entries)]
    assert entries == sorted(entries)
    check_search(again, stamps)
    again.close_handles()


def test_clean_start_trusts_good_indexes(tmp_path, monkeypatch):
    log, config, d, stamps = build(tmp_path)
    log.close()
    from sundial.storage import segment as segmod

    calls = []
    real = segmod.LogSegment.recover
    monkeypatch.setattr(segmod.LogSegment, "recover", lambda self, **kw: calls.append(self) or real(self, **kw))
    again = reopen(d, config, clean=True)
    assert calls == []
    assert again.recovery_point == again.log_end_offset
    again.close_handles()


def test_preallocated_active_segment_recovered(tmp_path):
    log, config, d, stamps = build(tmp_path, segment_bytes=64 * 1024, preallocate=True)
    records = records_on_disk(log)
    log.close_handles()   # crash: file still pre-allocated, zeros after the data
    assert os.path.getsize(log.active_segment.log_path) == 64 * 1024
    again = reopen(d, config, recovery_point=0)
    assert records_on_disk(again) == records
    again.close_handles()


def test_log_below_log_start_offset_checkpoint_is_emptied(tmp_path):
    log, config, d, _ = build(tmp_path, n=10)
    log.close()
    again = reopen(d, config, clean=True, log_start_offset=50)
    assert again.log_start_offset == 50 and again.log_end_offset == 50 and len(again.segments) == 1
    again.close_handles()


def test_log_start_offset_is_max_of_checkpoint_and_first_base(tmp_path):
    log, config, d, _ = build(tmp_path, n=30)
    log.close()
    first = min(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))
    os.remove(files.log_file(d, first))
    again = reopen(d, config, clean=True, log_start_offset=3)
    assert again.log_start_offset == again.segments[0].base_offset > 3
    again.close_handles()


def test_empty_directory_gets_a_segment(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    log = reopen(str(d), topic_config(), clean=True, log_start_offset=7)
    assert log.log_end_offset == 7 and os.path.exists(files.log_file(str(d), 7))
    log.close_handles()


def test_swap_file_is_completed(tmp_path):
    log, config, d, stamps = build(tmp_path, segment_bytes=600)
    bases = [s.base_offset for s in log.segments]
    records = records_on_disk(log)
    log.close()
    # pretend a cleaner merged the first two segments into a .swap that was not installed yet
    merged = open(files.log_file(d, bases[0]), "rb").read() + open(files.log_file(d, bases[1]), "rb").read()
    with open(files.log_file(d, bases[0]) + ".swap", "wb") as fh:
        fh.write(merged)
    again = reopen(d, config, clean=True)
    assert [s.base_offset for s in again.segments][:2] == [bases[0], bases[2]]
    assert records_on_disk(again) == records
    again.close_handles()


def test_recovery_of_many_segments_logs_and_keeps_data(tmp_path):
    log, config, d, stamps = build(tmp_path, n=300, segment_bytes=500)
    records = records_on_disk(log)
    log.close_handles()
    again = reopen(d, config, recovery_point=0)
    assert records_on_disk(again) == records
    check_search(again, stamps)
    again.close_handles()
    shutil.rmtree(d)
