"""LogSegment: behaviours 19–37 of the reference's §12.3, plus §4.1/§4.4 index rules.

Batches are built with records.builder; ``records(o, ...)`` mirrors Kafka's test helper:
magic-1 records whose timestamp is ``offset * 10``.
"""

import os
import random

import pytest

from sundial.storage import files
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage.errors import LogSegmentOffsetOverflowError
from sundial.records import BatchView, find_first_at_or_after
from sundial.storage.segment import LogSegment, walk_headers
from sundial.storage.time_index import TimestampOffset


def records(offset: int, *values: bytes, magic: int = 1):
    """Kafka's ``LogSegmentTest.records``: one batch, offsets from ``offset``, timestamp offset*10."""
    built = build_records(magic, [SimpleRecord(offset * 10, None, v) for v in values], base_offset=offset)
    return built


def append(seg: LogSegment, built) -> None:
    seg.append(built.last_offset, built.max_timestamp, built.shallow_offset_of_max_timestamp, built.buffer)


def single(offset: int, ts: int, magic: int = 2, value: bytes = b"x" * 20):
    return build_records(magic, [SimpleRecord(ts, None, value)], base_offset=offset)


def find(seg: LogSegment, ts: int, start: int | None = None):
    def in_batch(data, position, target, min_offset):
        return find_first_at_or_after(BatchView(data, 0, position), target, min_offset)

    return seg.find_offset_by_timestamp(ts, seg.base_offset if start is None else start, in_batch)


@pytest.fixture
def make(tmp_path):
    made = []

    def factory(base=0, interval=10, index_bytes=12_000, **kw):
        seg = LogSegment.create(str(tmp_path), base, index_interval_bytes=interval, max_index_size=index_bytes, **kw)
        seg.is_active = True
        made.append(seg)
        return seg

    yield factory
    for seg in made:
        seg.close_handles()


@pytest.mark.parametrize("base,largest", [(0, -2**31), (0, 2**31), (1, 0), (100, 10), (2**31, 0), (-2**31, 0),
                                          (2**31, 2**32)])
def test_append_offset_overflow(make, base, largest):  # 19
    seg = make(base)
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(largest, 100, largest, b"x" * 40)
    assert seg.size_bytes == 0


def test_read_on_empty_segment(make):  # 20
    seg = make(40)
    assert seg.read(40, 300) is None


def test_read_before_first_offset(make):  # 21
    seg = make(40)
    built = records(50, b"hello", b"there", b"little", b"bee")
    append(seg, built)
    got = seg.read(41, 300)
    assert got.slice.read() == built.buffer


def test_read_after_last(make):  # 22
    seg = make(40)
    append(seg, records(50, b"hello", b"there"))
    assert seg.read(52, 200) is None


def test_read_from_gap(make):  # 23
    seg = make(40)
    append(seg, records(50, b"hello", b"there"))
    second = records(60, b"alpha", b"beta")
    append(seg, second)
    assert seg.read(55, 200).slice.read() == second.buffer


def test_read_when_no_max_position(make):  # 24
    seg = make(40)
    append(seg, records(50, b"hello"))
    append(seg, records(51, b"there"))
    for offset, position in ((48, 0), (50, 0), (51, 39)):
        got = seg.read(offset, 100, max_position=-1)
        assert got.slice.size == 0 and got.position == position
    for offset in (52, 53):
        assert seg.read(offset, 100, max_position=-1) is None


def test_truncate_repeatedly(make):  # 25
    seg = make(40)
    offset = 40
    for _ in range(30):
        first = records(offset, b"hello")
        second = records(offset + 1, b"there")
        append(seg, first)
        append(seg, second)
        seg.truncate_to(offset + 1)
        got = seg.read(offset, 10_000)
        assert got.slice.read() == first.buffer
        assert seg.read(offset + 1, 10_000) is None
        offset += 1
        # the truncated batch is gone: the next append reuses its offset
    assert seg.next_offset == offset


def test_truncate_empty_segment(tmp_path):  # 26
    seg = LogSegment.create(str(tmp_path), 56, index_interval_bytes=10, max_index_size=400)
    seg.offset_index.entries, seg.time_index.entries  # load (create) both
    seg.close()
    assert os.path.getsize(seg.offset_index.path) == 0
    assert os.path.getsize(seg.time_index.path) == 0
    reopened = LogSegment.open(str(tmp_path), 56, index_interval_bytes=10, max_index_size=400)
    assert reopened.offset_index.is_full()  # trimmed, no room until resized
    reopened.truncate_to(57)
    assert reopened.offset_index.max_entries == 50 and not reopened.offset_index.is_full()
    assert reopened.time_index.max_entries == 33 and not reopened.time_index.is_full()
    assert reopened.should_roll(segment_bytes=1024, max_segment_ms=10, messages_size=10,
                                max_timestamp_in_messages=-1, max_offset_in_messages=57, now_ms=0) is None
    assert reopened.should_roll(segment_bytes=1024, max_segment_ms=10, messages_size=10,
                                max_timestamp_in_messages=-1, max_offset_in_messages=57,
                                now_ms=10**9) is None  # segment.ms elapsed but size 0
    assert reopened.should_roll(segment_bytes=1024, max_segment_ms=10, messages_size=10,
                                max_timestamp_in_messages=-1, max_offset_in_messages=2**31 + 200,
                                now_ms=0) == "offset_overflow"
    reopened.close_handles()


def test_reload_largest_timestamp_and_next_offset_after_truncation(make):  # 27
    seg = make(40, interval=40)
    for offset in range(40, 70):
        append(seg, single(offset, offset * 10, magic=1, value=b"hello"))
    # 39-byte batches, interval 40: every second append is indexed
    assert seg.time_index.entries == 14
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.max_timestamp_so_far == 400
    assert seg.next_offset == 41


def test_truncate_full(make):  # 28
    seg = make(40)
    append(seg, build_records(2, [SimpleRecord(-1, None, b"hello")] * 2, base_offset=40))
    kw = dict(segment_bytes=10**6, max_segment_ms=10**9, messages_size=1, max_timestamp_in_messages=-1,
              max_offset_in_messages=42)
    seg.should_roll(now_ms=1000, **kw)               # creation time taken at the first roll check
    assert seg.time_waited_for_roll(5000, -1) == 4000
    seg.truncate_to(0)
    assert seg.size_bytes == 0 and seg.created_ms is None
    seg.should_roll(now_ms=9000, **kw)
    assert seg.time_waited_for_roll(9000, -1) == 0   # creation time reset by the truncation
    assert not seg.offset_index.is_full() and not seg.time_index.is_full()
    assert seg.read(0, 1024) is None
    again = records(40, b"hello", b"there")
    append(seg, again)
    assert seg.read(40, 1024).slice.read()[:len(again.buffer)] == again.buffer[:len(again.buffer)]


def test_find_offset_by_timestamp(make):  # 29
    seg = make(40, interval=40)
    for offset in range(40, 50):
        append(seg, single(offset, offset * 10, magic=1, value=b"hello"))
    assert seg.max_timestamp_so_far == 490
    assert find(seg, 420).offset == 42
    assert find(seg, 421).offset == 43
    assert find(seg, 430).offset == 43
    assert find(seg, 431).offset == 44
    assert find(seg, 491) is None
    assert find(seg, 401).offset == 41
    assert find(seg, 399).offset == 40


def test_next_offset_calculation(make):  # 30
    seg = make(40)
    assert seg.next_offset == 40
    append(seg, records(50, b"hello", b"there", b"you"))
    assert seg.next_offset == 53


def test_index_files_are_lazy_and_renames_do_not_create_them(make, tmp_path):  # 31
    seg = make(40)
    assert not os.path.exists(seg.offset_index.path)
    assert not os.path.exists(seg.time_index.path)
    seg.rename_suffix(files.DELETED_SUFFIX)
    assert not os.path.exists(seg.offset_index.path)
    assert not os.path.exists(seg.time_index.path)
    assert seg.log_path.endswith(".log.deleted") and os.path.exists(seg.log_path)


def test_recovery_fixes_corrupt_index(make):  # 32
    seg = make(0, interval=1)
    for i in range(100):
        append(seg, single(i, i * 10))
    index_path = seg.offset_index.path
    seg.offset_index.close()
    with open(index_path, "r+b") as fh:
        fh.seek(5)
        fh.write(bytes(random.Random(3).randrange(256) for _ in range(os.path.getsize(index_path) - 5)))
    seg.recover()
    for i in range(100):
        got = seg.read(i, 1024)
        view = BatchView(memoryview(got.slice.read()), 0)
        assert view.last_offset == i


def test_recovery_fixes_corrupt_time_index(make):  # 33
    seg = make(0, interval=1)
    for i in range(100):
        append(seg, single(i, i * 10))
    seg.time_index.close()
    with open(seg.time_index.path, "r+b") as fh:
        fh.write(bytes(random.Random(4).randrange(256) for _ in range(os.path.getsize(seg.time_index.path))))
    seg.recover()
    for i in range(100):
        assert find(seg, i * 10).offset == i
        if i < 99:
            assert find(seg, i * 10 + 1).offset == i + 1


@pytest.mark.parametrize("seed", range(5))
def test_recovery_with_corrupt_message(make, seed):  # 34
    rng = random.Random(seed)
    seg = make(0, interval=1)
    positions = []
    for i in range(100):
        positions.append(seg.size_bytes)
        append(seg, single(i, i * 10))
    k = rng.randrange(100)
    cut = positions[k] + rng.randrange(1, 60)
    with open(seg.log_path, "r+b") as fh:
        fh.seek(cut)
        fh.write(bytes(rng.randrange(256) for _ in range(seg.size_bytes - cut)))
    seg.recover()
    offsets = [h.last_offset for h in walk_headers(seg.fd, 0, seg.size_bytes)]
    assert offsets == list(range(k))
    assert seg.size_bytes == positions[k]


def test_preallocated_segment_is_trimmed_on_close(tmp_path):  # 35
    size = 512 * 1024
    seg = LogSegment.create(str(tmp_path), 40, index_interval_bytes=10, max_index_size=1000,
                            preallocate_bytes=size)
    assert os.path.getsize(seg.log_path) == size
    append(seg, records(40, b"hello", b"there"))
    data_size = seg.size_bytes
    seg.close()
    assert os.path.getsize(seg.log_path) == data_size
    reopened = LogSegment.open(str(tmp_path), 40)
    assert reopened.size_bytes == os.path.getsize(seg.log_path)
    reopened.close_handles()


def test_truncate_to_offset_inside_a_gap(make):  # 36
    seg = make(40)
    first = single(40, 40_000)
    append(seg, first)
    append(seg, single(43, 43_000))
    seg.truncate_to(41)   # 41 lies in the gap before the batch at 43
    assert [h.last_offset for h in walk_headers(seg.fd, 0, seg.size_bytes)] == [40]
    assert seg.read(40, 1024).slice.read() == first.buffer


def test_first_batch_timestamp(make):  # 37
    seg = make(40)
    assert seg.first_batch_timestamp() == 2**63 - 1
    seg.append(41, 1000, 41, single(40, 1000).buffer[:0] + build_records(
        2, [SimpleRecord(1000, None, b"x"), SimpleRecord(900, None, b"y")], base_offset=40).buffer)
    assert seg.first_batch_timestamp() == 1000


def test_worked_example_of_reference_4_4(make):
    """§4.4: interval 10, four 1-record batches, timestamps 100, 300, 200, 400."""
    seg = make(0, interval=10)
    for offset, ts in enumerate((100, 300, 200, 400)):
        append(seg, single(offset, ts))
    oi = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    size = len(single(0, 0).buffer)
    assert [tuple(e) for e in oi] == [(1, size), (2, 2 * size), (3, 3 * size)]
    ti = [seg.time_index.entry(i)[:2] for i in range(seg.time_index.entries)]
    assert ti == [(300, 1), (400, 3)]
    seg.on_become_inactive()
    assert seg.time_index.entries == 2  # 400 is not > 400: nothing added at roll


def test_first_append_never_indexed_and_counter_strictly_greater(make):
    seg = make(0, interval=0)
    append(seg, single(0, 5))
    assert seg.offset_index.entries == 0
    append(seg, single(1, 6))
    assert seg.offset_index.entries == 1
    size = len(single(0, 0).buffer)
    seg2 = make(100, interval=size)
    append(seg2, single(100, 5))
    append(seg2, single(101, 6))   # counter == interval: not strictly greater
    assert seg2.offset_index.entries == 0
    append(seg2, single(102, 7))
    assert seg2.offset_index.entries == 1
    assert seg2.offset_index.entry(0) == (102, 2 * size)


def test_offset_entry_names_last_offset_of_append_at_its_start(make):
    seg = make(0, interval=0)
    append(seg, records(0, b"a", b"b", magic=2))
    position = seg.size_bytes
    append(seg, records(2, b"c", b"d", b"e", magic=2))
    assert seg.offset_index.entry(0) == (4, position)
    # time entry points at the batch (its last offset) holding the max
    assert seg.time_index.entry(0)[:2] == (20, 4)


def test_max_timestamp_earliest_batch_wins_and_final_entry_on_close(tmp_path):
    seg = LogSegment.create(str(tmp_path), 0, index_interval_bytes=10**6, max_index_size=1200)
    seg.is_active = True
    append(seg, single(0, 500))
    append(seg, single(1, 700))
    append(seg, single(2, 700))
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (700, 1)
    assert seg.time_index.entries == 0   # never indexed: interval is huge
    seg.close()
    reopened = LogSegment.open(str(tmp_path), 0, max_index_size=1200)
    assert reopened.time_index.peek_last_entry()[:2] == (700, 1)
    assert reopened.max_timestamp_so_far == 700
    reopened.close_handles()


def test_largest_timestamp_falls_back_to_mtime(make):
    seg = make(0)
    append(seg, records(0, b"a", magic=0))
    assert seg.max_timestamp_so_far == -1
    seg.set_last_modified_ms(1_234_567_000)
    seg.is_active = False
    assert seg.largest_timestamp_ms() == 1_234_567_000
    assert seg.largest_timestamp_source == "mtime"


def test_time_based_roll_measures_from_first_batch(make):
    seg = make(0)
    append(seg, single(0, 1000))
    kw = dict(segment_bytes=10**6, max_segment_ms=100, messages_size=10, max_offset_in_messages=1)
    assert seg.should_roll(max_timestamp_in_messages=1100, now_ms=10**12, **kw) is None
    assert seg.should_roll(max_timestamp_in_messages=1101, now_ms=0, **kw) == "segment_ms"


def test_size_roll_and_full_indexes(make):
    seg = make(0, interval=0, index_bytes=24)
    kw = dict(max_segment_ms=10**9, max_timestamp_in_messages=-1, now_ms=0, max_offset_in_messages=5)
    append(seg, single(0, 1))
    size = seg.size_bytes
    assert seg.should_roll(segment_bytes=2 * size, messages_size=size, **kw) is None
    assert seg.should_roll(segment_bytes=2 * size - 1, messages_size=size, **kw) == "segment_bytes"
    assert seg.should_roll(segment_bytes=10**6, messages_size=1, **kw) is None
    append(seg, single(1, 2))   # time index of 24 bytes: 2 slots, "full" at 1 entry
    assert seg.time_index.entries == 1 and seg.offset_index.entries == 1
    assert seg.should_roll(segment_bytes=10**6, messages_size=1, **kw) == "time_index_full"
    with pytest.raises(ValueError):  # an append into a full index is refused (the log rolls first)
        append(seg, single(2, 3))


def test_read_min_one_message_and_incomplete_first_entry(make):
    seg = make(0)
    big = records(0, b"x" * 500, magic=2)
    append(seg, big)
    got = seg.read(0, 100, min_one_message=True)
    assert got.slice.size == len(big.buffer) and not got.first_entry_incomplete
    got = seg.read(0, 100, min_one_message=False)
    assert got.slice.size == 100 and got.first_entry_incomplete


def test_largest_timestamp_after_and_truncation_rescan(make):
    seg = make(0, interval=10**6)
    for offset, ts in enumerate((10, 90, 30)):
        append(seg, single(offset, ts))
    seg.truncate_to(2)
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (90, 1)
    seg.truncate_to(1)
    assert seg.max_timestamp_so_far == 10
    assert seg.largest_timestamp_after(0) == TimestampOffset(10, 0)


def test_check_indexes_reports_zero_filled_and_missing(tmp_path):
    seg = LogSegment.create(str(tmp_path), 0, index_interval_bytes=0, max_index_size=4096)
    for i in range(20):
        append(seg, single(i, 100 + i))
    seg.on_become_inactive()
    assert seg.check_indexes() == []
    seg.close()
    # an untrimmed, zero-filled time index (KAFKA-10207)
    with open(seg.time_index.path, "ab") as fh:
        fh.write(b"\0" * 1200)
    reopened = LogSegment.open(str(tmp_path), 0, index_interval_bytes=0, max_index_size=4096)
    assert reopened.check_indexes()
    os.remove(seg.time_index.path)
    assert "time index missing" in reopened.check_indexes()
    reopened.close_handles()


def test_a_read_given_a_probe_raises_for_a_header_not_in_the_page_cache(make):
    """``read(probe=...)``: a refused range raises NotInPageCache before anything is read; a
    probe that finds everything resident changes nothing."""
    from sundial.records.framing import NotInPageCache

    seg = make(0, interval=100)
    for i in range(20):
        append(seg, single(i, 1_000 + i))
    plain = seg.read(13, 1 << 20)
    same = seg.read(13, 1 << 20, probe=lambda fd, position, size: True)
    assert same == plain
    asked = []

    def cold(fd, position, size):
        asked.append((fd, position, size))
        return False

    with pytest.raises(NotInPageCache) as miss:
        seg.read(13, 1 << 20, probe=cold)
    start = seg.offset_index.lookup(13).position
    assert asked == [(seg.fd, start, min(16 * 1024, seg.size_bytes - start))]
    assert (miss.value.fd, miss.value.position) == (seg.fd, start)
