"""The mapped-index LRU is an object of whoever builds the logs: each LogManager's own limit
holds across all of its logs and only there, and lookups answer as a brute-force read does."""

import pytest
from support.log_helpers import NOW_MS, batch, brute_force_search_segments

from sundial.records import iter_records
from sundial.storage.index import MappedIndexes
from sundial.storage.log_manager import LogManager

UNBOUNDED = {"message.timestamp.after.max.ms": "9223372036854775807"}
SMALL_SEGMENTS = {"segment.bytes": "400", "index.interval.bytes": "1"}
PARTITIONS = 3
BATCHES = 40


def stamp(partition: int, i: int) -> int:
    return NOW_MS + (i * 31 + partition * 7) % 97


def filled_manager(root, mapped: MappedIndexes) -> LogManager:
    mgr = LogManager([str(root)], UNBOUNDED, mapped_indexes=mapped)
    mgr.startup()
    mgr.create_topic("t", PARTITIONS, SMALL_SEGMENTS)
    for p in range(PARTITIONS):
        log = mgr.get_log("t", p)
        for i in range(BATCHES):
            log.append(batch([stamp(p, i)]), now_ms=NOW_MS)
        assert len(log.segments) >= 4
    return mgr


def indexes_of(mgr: LogManager) -> list:
    return [idx for p in range(PARTITIONS) for seg in mgr.get_log("t", p).segments
            for idx in (seg.offset_index, seg.time_index)]


def mapped_now(mgr: LogManager) -> int:
    """Counted on the indexes themselves, not by the LRU's own book-keeping."""
    return sum(idx.is_mapped for idx in indexes_of(mgr))


def first_offset_read_at(log, offset: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record a read at ``offset`` returns (offset-index lookup)."""
    info = log.read(offset, 1)
    data = b"".join(s.read() for s in info.slices)
    return next((r.offset, r.timestamp) for r in iter_records(data) if r.offset >= offset)


def check_answers(mgr: LogManager, mapped: MappedIndexes, limit: int) -> None:
    for p in range(PARTITIONS):
        log = mgr.get_log("t", p)
        segments = [[(o, stamp(p, o)) for o in range(s.base_offset, s.next_offset)] for s in log.segments]
        for target in range(NOW_MS - 1, NOW_MS + 99, 3):
            got = log.fetch_offset_by_timestamp(target)
            assert ((got.offset, got.timestamp_ms) if got else None) == \
                brute_force_search_segments(segments, target, 0)
            assert mapped_now(mgr) <= limit and len(mapped) <= limit
        for offset in range(0, BATCHES):
            assert first_offset_read_at(log, offset) == (offset, stamp(p, offset))
            assert mapped_now(mgr) <= limit and len(mapped) <= limit


@pytest.mark.parametrize("limit", [2, 5])
def test_one_manager_keeps_at_most_its_limit_mapped_across_its_logs(tmp_path, limit):
    mapped = MappedIndexes(limit)
    mgr = filled_manager(tmp_path, mapped)
    try:
        assert len(indexes_of(mgr)) > 4 * limit
        check_answers(mgr, mapped, limit)
        assert mapped_now(mgr) == len(mapped) > 0
    finally:
        mgr.shutdown()
    assert len(mapped) == 0
    # reopened (through the loader) with the same object: the limit still holds
    again = LogManager([str(tmp_path)], UNBOUNDED, mapped_indexes=mapped, recovery_threads_per_data_dir=2)
    again.startup()
    try:
        check_answers(again, mapped, limit)
    finally:
        again.shutdown()


def test_two_managers_do_not_evict_each_others_mappings(tmp_path):
    mapped_a, mapped_b = MappedIndexes(3), MappedIndexes(8)
    a = filled_manager(tmp_path / "a", mapped_a)
    b = filled_manager(tmp_path / "b", mapped_b)
    try:
        check_answers(b, mapped_b, 8)
        held_by_b = [idx for idx in indexes_of(b) if idx.is_mapped]
        assert len(held_by_b) == len(mapped_b) == 8
        check_answers(a, mapped_a, 3)     # many mappings made and dropped in a
        assert [idx for idx in indexes_of(b) if idx.is_mapped] == held_by_b
        assert len(mapped_b) == 8 and len(mapped_a) <= 3
    finally:
        a.shutdown()
        b.shutdown()


def test_the_limit_is_at_least_two_and_can_be_lowered(tmp_path):
    mapped = MappedIndexes(8)
    mgr = filled_manager(tmp_path, mapped)
    try:
        check_answers(mgr, mapped, 8)
        assert len(mapped) == 8
        mapped.set_limit(0)
        assert mapped.limit == 2 and mapped_now(mgr) == len(mapped) == 2
        check_answers(mgr, mapped, 2)
    finally:
        mgr.shutdown()
    assert MappedIndexes().limit >= 64
