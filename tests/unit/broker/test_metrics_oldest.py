"""``sundial_log_oldest_timestamp_ms`` follows compaction: once the cleaner removes the record at
the log start offset, the scrape reports the first surviving record's timestamp (the log start
offset itself does not move), computed here from a full read of the log."""

from types import SimpleNamespace

import pytest
from support.cleaner_helpers import append, clean_until_done, compact_log, read_all
from support.log_helpers import NOW_MS

from sundial.broker.metrics import PartitionRows
from sundial.records.framing import NotInPageCache
from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.offset_map import SkimpyOffsetMap


class _OneLog:
    def __init__(self, log):
        self.log = log

    def topics(self):
        return [SimpleNamespace(name="t", partitions=1)]

    def is_open(self, topic, partition):
        return True

    def get_log(self, topic, partition):
        return self.log


def _oldest(rows) -> int:
    (row,) = rows()
    return row["oldest_timestamp_ms"]


def test_oldest_timestamp_follows_a_cleaner_swap_that_removes_the_first_record(tmp_path):
    log = compact_log(tmp_path / "t-0")
    try:
        rows = PartitionRows(lambda: _OneLog(log))
        assert _oldest(rows) == -1                       # empty
        t0 = NOW_MS - 10_000
        append(log, [(b"a", b"1", t0)])                   # offset 0: overwritten below
        append(log, [(b"b", b"1", t0 + 1)])
        assert _oldest(rows) == t0
        log.roll(NOW_MS)
        append(log, [(b"a", b"2", t0 + 2)])
        log.roll(NOW_MS)
        append(log, [(b"c", b"1", t0 + 3)])               # keeps a later segment active
        assert _oldest(rows) == t0                       # cached, still right
        passes = clean_until_done(log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 10), NOW_MS)
        assert passes
        survivors = read_all(log)
        assert survivors[0].offset > log.log_start_offset == 0   # offset 0 is gone, the start did not move
        assert _oldest(rows) == survivors[0].timestamp == t0 + 1
    finally:
        log.close_handles()


def _refuse_all(fd, position, size) -> bool:
    return False   # a page-cache probe for which nothing is resident


def test_a_roll_keeps_the_oldest_timestamp_and_a_cleaner_swap_reads_it_again(tmp_path):
    """The answer is kept across appends and rolls (nothing at the log start changed), so a scrape
    after a roll reads nothing: a probe that refuses every range is never asked. A cleaner swap
    rewrites offsets still in the log: the next ask reads, and the probe's refusal is raised."""
    log = compact_log(tmp_path / "t-0")
    try:
        t0 = NOW_MS - 10_000
        append(log, [(b"a", b"1", t0)])
        append(log, [(b"b", b"1", t0 + 1)])
        with pytest.raises(NotInPageCache):
            log.oldest_record_timestamp(_refuse_all)   # nothing known yet: it must read
        assert log.oldest_record_timestamp() == t0
        for i in range(3):
            log.roll(NOW_MS)
            append(log, [(b"a", b"%d" % (i + 2), t0 + 2 + i)])
            assert log.oldest_record_timestamp(_refuse_all) == t0   # kept: no read
        log.roll(NOW_MS)
        append(log, [(b"c", b"1", t0 + 9)])
        assert clean_until_done(log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 10), NOW_MS)
        with pytest.raises(NotInPageCache):
            log.oldest_record_timestamp(_refuse_all)
        assert log.oldest_record_timestamp() == read_all(log)[0].timestamp == t0 + 1
    finally:
        log.close_handles()


def test_none_yet_is_read_again_once_records_come(tmp_path):
    log = compact_log(tmp_path / "t-0")
    try:
        assert log.oldest_record_timestamp() is None
        assert log.oldest_record_timestamp(_refuse_all) is None   # the log end did not move
        append(log, [(b"a", b"1", NOW_MS - 5)])
        with pytest.raises(NotInPageCache):
            log.oldest_record_timestamp(_refuse_all)
        assert log.oldest_record_timestamp() == NOW_MS - 5
    finally:
        log.close_handles()
