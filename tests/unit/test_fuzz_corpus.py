"""Replays the fuzz corpus (tests/fuzz/corpus/TARGET/*: seeds and every regression input of a
finding) through the differential checks of tests/fuzz/differential.py: the C accelerator and its
pure-Python reference must agree on each input. scripts/fuzz runs the same checks coverage-guided."""

import os

import pytest

from sundial.records.extensions import extensions_enabled

FUZZ_DIR = os.path.join(os.path.dirname(__file__), "..", "fuzz")
CORPUS = os.path.join(FUZZ_DIR, "corpus")

if not extensions_enabled():
    pytest.skip("the C accelerators are turned off", allow_module_level=True)
try:
    import differential  # tests/fuzz, on the path through pyproject.toml's pytest pythonpath
except ImportError as exc:  # pragma: no cover - depends on the build
    if exc.name == "differential":
        raise  # the path is wrong, not the build
    pytest.skip(f"the C accelerators are not built: {exc}", allow_module_level=True)

def test_every_target_has_a_corpus():
    assert sorted(os.listdir(CORPUS)) == sorted(differential.TARGETS)
    for target in differential.TARGETS:
        assert len(os.listdir(os.path.join(CORPUS, target))) >= 5, target

@pytest.mark.parametrize("target", sorted(differential.TARGETS))
def test_corpus_replays_clean(target):
    check = differential.TARGETS[target]
    names = sorted(os.listdir(os.path.join(CORPUS, target)))
    for name in names:
        with open(os.path.join(CORPUS, target, name), "rb") as f:
            check(f.read())


# -- findings of the fuzz targets: each has its input in the corpus (regression-*) and a test here --------
def _regression(target, name):
    with open(os.path.join(CORPUS, target, f"regression-{name}"), "rb") as f:
        return f.read()


def test_index_walk_refuses_a_negative_count_in_c_and_python():
    from sundial.records import _speedups, walks
    from sundial.records.errors import InvalidRecordError
    differential.check_index_v2(_regression("index_v2", "negative-count"))
    with pytest.raises(ValueError):
        _speedups.index_v2(b"", 0, 0, -1, 0)
    with pytest.raises(InvalidRecordError):
        walks._index_v2_py(b"", 0, 0, -1, 0)


def test_offset_map_put_refuses_a_negative_count_in_c_and_python():
    from sundial.storage import _cleaner_speedups, offset_map
    differential.check_cleaner_put(_regression("cleaner_put", "negative-count"))
    for put in (_cleaner_speedups.map_put_v2, offset_map._put_v2_py):
        with pytest.raises(ValueError, match="negative record count"):
            put(bytearray(24), 1, 0, 1, b"", 0, 0, -1, 0, 0)


@pytest.mark.parametrize("count", [(1 << 31) - 1, 1 << 62, (1 << 63) - 1])
def test_filter_refuses_a_count_larger_than_its_region_before_sizing_anything(count):
    """The C filter sized five arrays by the declared count: 2^62 records of 72 bytes wrapped
    size_t to a tiny allocation it then wrote past; 2^31 - 1 raised MemoryError."""
    from sundial.records.builder import encode_v2_record
    from sundial.storage import _cleaner_speedups, offset_map
    differential.check_cleaner_filter(_regression("cleaner_filter", "huge-count-wraps-allocation"))
    differential.check_cleaner_filter(_regression("cleaner_filter", "int32-max-count"))
    region = encode_v2_record(0, 0, b"k", b"v")
    args = (0, len(region), count, 0, 0, False, 0, 10, False, False, 0, 0)
    for filter_v2 in (_cleaner_speedups.filter_v2, offset_map._filter_v2_py):
        with pytest.raises(ValueError, match="more records than its data holds"):
            filter_v2(bytearray(24), 1, region, *args)


def test_record_offsets_wrap_like_java_longs_in_c_and_python():
    """base offset + offset delta past 2^63 - 1: signed overflow in C, struct.error in Python."""
    from sundial.records.builder import encode_v2_record
    from sundial.storage import _cleaner_speedups, offset_map
    differential.check_cleaner_put(_regression("cleaner_put", "offset-overflow"))
    differential.check_cleaner_filter(_regression("cleaner_filter", "offset-overflow"))
    region = encode_v2_record(0, 0, b"a", b"1") + encode_v2_record(1, 0, b"b", b"2")
    for put in (_cleaner_speedups.map_put_v2, offset_map._put_v2_py):
        entries, last, full, read = put(bytearray(24 * 4), 4, 0, 4, region, 0, len(region), 2, (1 << 63) - 1,
                                        -(1 << 63))
        assert (entries, last, full, read) == (2, -(1 << 63), False, 2)
