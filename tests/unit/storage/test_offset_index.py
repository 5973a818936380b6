"""OffsetIndex: behaviours 11–18 of the reference's §12.2, plus file mechanics."""

import os
import random
import struct

import pytest

from sundial.storage.errors import CorruptIndexError, InvalidOffsetError
from sundial.storage.offset_index import IndexFullError, OffsetIndex, OffsetPosition

BASE = 45


@pytest.fixture
def index(tmp_path):
    idx = OffsetIndex(str(tmp_path / "00000000000000000045.index"), BASE, max_index_size=30 * 8)
    yield idx
    idx.close_handler()


def test_empty_index_lookup_returns_base_offset_and_position_zero(index):  # 11
    for target in (0, BASE, BASE + 1, 10**9):
        assert index.lookup(target) == OffsetPosition(BASE, 0)


def test_random_lookup_matches_floor_model(index):  # 12
    rng = random.Random(7)
    offsets = sorted(rng.sample(range(BASE + 1, BASE + 1000), 30))
    positions = sorted(rng.sample(range(0, 100_000), 30))
    for o, p in zip(offsets, positions):
        index.append(o, p)
    model = dict(zip(offsets, positions))
    for o in offsets:
        assert index.lookup(o) == OffsetPosition(o, model[o])
    for target in range(BASE - 5, BASE + 1005):
        below = [o for o in offsets if o <= target]
        expected = OffsetPosition(below[-1], model[below[-1]]) if below else OffsetPosition(BASE, 0)
        assert index.lookup(target) == expected


def test_lookup_extreme_cases(index):  # 13
    for i in range(index.max_entries):
        index.append(BASE + 1 + i, i)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 30) == OffsetPosition(BASE + 30, 29)


def test_append_to_full_index_fails(index):  # 14
    for i in range(index.max_entries):
        index.append(BASE + 1 + i, i)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(BASE + 100, 1000)


def test_append_out_of_order_fails(index):  # 15
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)


def test_reopen_trimmed_index(tmp_path):  # 16
    path = str(tmp_path / "00000000000000000045.index")
    idx = OffsetIndex(path, BASE, 30 * 8)
    idx.append(BASE + 5, 1)
    idx.append(BASE + 9, 8)
    idx.close()
    assert os.path.getsize(path) == 16
    again = OffsetIndex(path, BASE, 30 * 8)
    assert again.entries == 2
    assert again.last_offset == BASE + 9
    assert again.lookup(BASE + 5) == OffsetPosition(BASE + 5, 1)
    assert again.lookup(BASE + 9) == OffsetPosition(BASE + 9, 8)
    with pytest.raises(IndexFullError):
        again.append(BASE + 10, 12)
    again.close_handler()


def test_truncate_to(tmp_path):  # 17
    idx = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 10 * 8)
    for i in range(1, 10):
        idx.append(i, i)
    idx.truncate_to(12)
    assert idx.last_entry() == OffsetPosition(9, 9)
    idx.truncate_to(10)
    assert idx.last_entry() == OffsetPosition(9, 9)
    idx.truncate_to(9)
    assert idx.last_entry() == OffsetPosition(8, 8)
    idx.truncate_to(5)
    assert idx.last_entry() == OffsetPosition(4, 4)
    idx.truncate()
    assert idx.entries == 0
    assert idx.last_offset == 0
    idx.close_handler()


def test_sanity_check_last_offset_equal_to_base(index):  # 18
    index.append(BASE, 0)
    index.sanity_check()


def test_sanity_check_detects_bad_length(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\0" * 13)
    idx = OffsetIndex(str(path), 0, 1024)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_detects_offset_below_base(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">ii", -5, 0))
    idx = OffsetIndex(str(path), 100, 1024)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close_handler()


def test_new_file_is_preallocated_rounded_down(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    idx = OffsetIndex(path, 0, 1003)
    assert not os.path.exists(path)  # lazy
    assert idx.entries == 0
    assert os.path.getsize(path) == 1000
    assert idx.max_entries == 125
    idx.append(3, 40)
    idx.trim_to_valid_size()
    assert os.path.getsize(path) == 8
    assert open(path, "rb").read() == struct.pack(">ii", 3, 40)
    idx.close_handler()


def test_resize_and_size_smaller_than_entry_rejected(tmp_path):
    with pytest.raises(ValueError):
        OffsetIndex(str(tmp_path / "x.index"), 0, 7)
    idx = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 80)
    assert idx.resize(80) is False
    assert idx.resize(40) is True
    assert idx.max_entries == 5
    assert idx.resize(160) is True
    assert idx.max_entries == 20
    idx.close_handler()


def test_rename_and_delete_of_unloaded_index_do_not_create_it(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    idx = OffsetIndex(path, 0, 80)
    idx.rename_to(path + ".deleted")
    assert not os.path.exists(path) and not os.path.exists(path + ".deleted")
    assert idx.delete_if_exists() is False


def test_relative_offset_overflow_rejected(index):
    with pytest.raises(InvalidOffsetError):
        index.append(BASE + 2**31, 0)
