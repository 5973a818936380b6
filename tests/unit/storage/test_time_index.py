"""TimeIndex: behaviours 1–10 of the reference's §12.1 (base offset 45, 30 slots)."""

import os
import struct

import pytest

from sundial.storage.errors import CorruptIndexError, InvalidOffsetError
from sundial.storage.offset_index import IndexFullError
from sundial.storage.time_index import TimeIndex, TimestampOffset

BASE = 45


def make(tmp_path, name="00000000000000000045.timeindex", base=BASE, slots=30):
    return TimeIndex(str(tmp_path / name), base, max_index_size=slots * 12)


def fill(idx):
    for i in range(1, idx.max_entries):
        idx.maybe_append(i * 10, i * 10 + BASE)


def test_lookup_on_empty_index(tmp_path):  # 1
    idx = make(tmp_path)
    assert idx.lookup(100) == TimestampOffset(-1, BASE)
    idx.close_handler()


def test_lookup(tmp_path):  # 2
    idx = make(tmp_path)
    fill(idx)
    assert idx.lookup(9) == TimestampOffset(-1, BASE)
    assert idx.lookup(25) == TimestampOffset(20, 65)
    assert idx.lookup(30) == TimestampOffset(30, 75)
    assert idx.lookup(10**12) == TimestampOffset(290, 335)
    idx.close_handler()


def test_entry(tmp_path):  # 3
    idx = make(tmp_path)
    with pytest.raises(IndexError):
        idx.entry(0)
    fill(idx)
    assert [idx.entry(i)[:2] for i in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]
    idx.close_handler()


def test_truncate(tmp_path):  # 4
    idx = make(tmp_path)
    fill(idx)
    idx.truncate()
    assert idx.entries == 0
    fill(idx)
    idx.truncate_to(55)
    assert idx.entries == 0
    assert idx.last_entry() == TimestampOffset(-1, BASE)
    fill(idx)
    idx.truncate_to(76)
    assert idx.last_entry() == TimestampOffset(30, 75)
    idx.close_handler()


def test_is_full_one_slot_early(tmp_path):  # 5
    idx = make(tmp_path)
    assert not idx.is_full()
    fill(idx)
    assert idx.entries == 29
    assert idx.is_full()
    idx.close_handler()


def test_append_to_full_index(tmp_path):  # 6
    idx = make(tmp_path)
    fill(idx)
    with pytest.raises(IndexFullError):
        idx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(10000, 280, skip_full_check=True)
    assert idx.maybe_append(10000, 1000, skip_full_check=True)
    assert idx.entries == 30
    assert idx.last_entry() == TimestampOffset(10000, 1000)
    idx.close_handler()


def test_last_entry(tmp_path):  # 7
    idx = make(tmp_path)
    assert idx.last_entry() == TimestampOffset(-1, BASE)
    idx.maybe_append(1, 46)
    assert idx.last_entry() == TimestampOffset(1, 46)
    idx.close_handler()


def test_resize(tmp_path):  # 8
    idx = make(tmp_path)
    size = idx.length_bytes
    assert idx.resize(size) is False
    assert idx.resize(size // 2) is True
    assert idx.resize(size * 2) is True
    idx.close_handler()


def test_sanity_check(tmp_path):  # 9
    idx = make(tmp_path)
    fill(idx)
    idx.sanity_check()
    idx.close_handler()
    # last offset below the base offset
    p = tmp_path / "00000000000000000100.timeindex"
    p.write_bytes(struct.pack(">qi", 10, -1))
    bad = TimeIndex(str(p), 100, 360)
    with pytest.raises(CorruptIndexError):
        bad.sanity_check()
    bad.close_handler()
    # last timestamp below the first
    p2 = tmp_path / "00000000000000000200.timeindex"
    p2.write_bytes(struct.pack(">qi", 50, 1) + struct.pack(">qi", 40, 2))
    bad2 = TimeIndex(str(p2), 200, 360)
    with pytest.raises(CorruptIndexError):
        bad2.sanity_check()
    bad2.close_handler()
    # length not a multiple of 12
    p3 = tmp_path / "00000000000000000300.timeindex"
    p3.write_bytes(struct.pack(">qi", 50, 1) + b"\0" * 5)
    bad3 = TimeIndex(str(p3), 300, 360)
    with pytest.raises(CorruptIndexError):
        bad3.sanity_check()
    bad3.close_handler()


def test_entry_size_and_parse(tmp_path):  # 10
    assert TimeIndex.ENTRY_SIZE == 12
    idx = make(tmp_path)
    idx.maybe_append(123456789012, 50)
    idx.trim_to_valid_size()
    raw = open(idx.path, "rb").read()
    assert raw == struct.pack(">qi", 123456789012, 5)
    assert TimeIndex.parse_entry(raw, BASE) == TimestampOffset(123456789012, 50)
    idx.close_handler()


def test_equal_timestamp_ignored_smaller_rejected(tmp_path):
    idx = make(tmp_path)
    assert idx.maybe_append(100, 50)
    assert not idx.maybe_append(100, 51)
    with pytest.raises(ValueError):
        idx.maybe_append(99, 52)
    assert idx.entries == 1
    idx.close_handler()


def test_no_timestamp_never_indexed(tmp_path):
    idx = make(tmp_path)
    assert not idx.maybe_append(-1, 50)
    assert idx.entries == 0
    idx.close_handler()


def test_peek_last_entry_does_not_map(tmp_path):
    idx = make(tmp_path)
    idx.maybe_append(5, 46)
    idx.maybe_append(9, 48)
    idx.close()
    again = make(tmp_path)
    assert again.peek_last_entry() == TimestampOffset(9, 48)
    assert not again.is_loaded
    assert again.last_entry() == TimestampOffset(9, 48)
    assert os.path.getsize(again.path) == 24
    again.close_handler()
