"""records/ (batch views, iteration rules, reader semantics, in-batch search, rewrites).

Ground truth comes from kafka_bytes_ref (an independent encoder written from the
reference's byte tables), kafka-python's record readers, and brute force.
"""

import gzip
import os
import random
import struct
import tempfile

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from support import kafka_bytes_ref as ref
from sundial import records as R
from sundial.storage.errors import CorruptRecordError, InvalidRecordError


def v2(records, **kw):
    """records: list of (timestamp, key, value, headers) with offset deltas 0..n-1."""
    return ref.v2_batch([(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)], **kw)


def simple_v2(timestamps, base_offset=0, **kw):
    return v2([(ts, b"k%d" % i, b"value-%d" % i, ()) for i, ts in enumerate(timestamps)],
              base_offset=base_offset, **kw)


def legacy_wrapper(magic, offset, inner, *, timestamp=-1, attributes=1, codec_fn=gzip.compress):
    """A compressed legacy wrapper around `inner` (bytes of inner messages)."""
    return ref.legacy_message(magic, offset, None, codec_fn(inner), timestamp=timestamp, attributes=attributes)


# ---------------------------------------------------------------- header views

def test_v2_header_fields_match_the_byte_table():
    data = simple_v2([1000, 900, 1500], base_offset=42, attributes=0x10, producer_id=7, producer_epoch=3,
                     base_sequence=11, partition_leader_epoch=5)
    (view,) = list(R.iter_batches(data))
    assert view.position == 0
    assert view.size_bytes == len(data)
    assert view.magic == 2
    assert view.base_offset == 42
    assert view.last_offset == 44 and view.next_offset == 45
    assert view.base_timestamp == 1000
    assert view.max_timestamp == 1500
    assert view.timestamp_type == R.CREATE_TIME
    assert view.compression == 0 and not view.is_compressed
    assert view.is_transactional and not view.is_control
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == (7, 3, 11)
    assert view.last_sequence == 13
    assert view.record_count == 3
    assert view.partition_leader_epoch == 5
    assert view.crc == struct.unpack_from(">I", data, 17)[0]
    assert view.crc_valid()
    assert bytes(view.data) == data


def test_v2_attribute_bits():
    for attributes, expect in [(0x08, dict(timestamp_type=1)), (0x20, dict(is_control=True)),
                               (0x03, dict(compression=3)), (0x14, dict(is_transactional=True, compression=4))]:
        view = next(R.iter_batches(simple_v2([1], attributes=attributes)))
        for name, value in expect.items():
            assert getattr(view, name) == value, (attributes, name)


def test_legacy_header_fields():
    m0 = ref.legacy_message(0, 17, b"k", b"v")
    m1 = ref.legacy_message(1, 18, None, b"v", timestamp=1234, attributes=0x08)
    v0, v1 = list(R.iter_batches(m0 + m1))
    assert (v0.magic, v0.base_offset, v0.last_offset, v0.record_count) == (0, 17, 17, 1)
    assert (v0.max_timestamp, v0.timestamp_type) == (-1, -1)
    assert (v1.magic, v1.position, v1.last_offset, v1.max_timestamp, v1.timestamp_type) == (1, len(m0), 18, 1234, 1)
    for v in (v0, v1):
        assert v.crc_valid()
        assert (v.producer_id, v.producer_epoch, v.base_sequence, v.partition_leader_epoch) == (-1, -1, -1, -1)
        assert not v.is_control and not v.is_transactional


def test_crc_covers_the_right_bytes():
    data = bytearray(simple_v2([5, 6]))
    data[12] ^= 0xFF                      # partition leader epoch: outside the CRC
    assert next(R.iter_batches(data)).crc_valid()
    for pos in (21, 30, 60, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        assert not next(R.iter_batches(bad)).crc_valid(), pos
        with pytest.raises(CorruptRecordError):
            next(R.iter_batches(bad)).ensure_valid()
    legacy = bytearray(ref.legacy_message(1, 0, b"k", b"v", timestamp=3))
    legacy[0] ^= 0xFF                     # offset: outside the message CRC
    assert next(R.iter_batches(legacy)).crc_valid()
    legacy[16 + 3] ^= 0x01
    assert not next(R.iter_batches(legacy)).crc_valid()


# ---------------------------------------------------------------- iteration rules (§2.1)

def test_partial_trailing_entry_is_ignored():
    a = simple_v2([1, 2], base_offset=0)
    b = simple_v2([3], base_offset=2)
    for cut in range(1, len(b)):
        views = list(R.iter_batches(a + b[:-cut]))
        assert [v.base_offset for v in views] == [0]


@pytest.mark.parametrize("zeros", range(0, 7))
def test_up_to_six_zero_bytes_after_the_data_change_nothing(zeros):
    """§12.6 item 78."""
    data = simple_v2([1, 2]) + simple_v2([3], base_offset=2)
    views = list(R.iter_batches(data + bytes(zeros)))
    assert [r.offset for r in R.iter_records(data + bytes(zeros))] == [0, 1, 2]
    assert len(views) == 2


def test_a_long_zero_tail_is_corrupt_not_partial():
    data = simple_v2([1]) + bytes(64)
    it = R.iter_batches(data)
    next(it)
    with pytest.raises(CorruptRecordError, match="smaller than the minimum"):
        next(it)


def test_seventeen_bytes_or_fewer_stop_silently():
    data = simple_v2([1])
    tail = struct.pack(">qi", 0, 5) + b"\x00" * 5          # 17 bytes, size < 14
    assert len(list(R.iter_batches(data + tail))) == 1


def test_bad_magic_is_corrupt():
    data = bytearray(simple_v2([1]))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="magic"):
        list(R.iter_batches(data))


def test_v2_entry_smaller_than_header_is_corrupt():
    data = struct.pack(">qiib", 0, 20, 0, 2) + bytes(19)
    with pytest.raises(CorruptRecordError):
        list(R.iter_batches(data))


def test_iter_batches_with_start_position_and_end():
    a, b, c = simple_v2([1]), simple_v2([2], base_offset=1), simple_v2([3], base_offset=2)
    data = a + b + c
    assert [v.base_offset for v in R.iter_batches(data, len(a))] == [1, 2]
    assert [v.position for v in R.iter_batches(data, len(a))] == [len(a), len(a) + len(b)]
    assert [v.base_offset for v in R.iter_batches(data, 0, end=len(a) + len(b))] == [0, 1]
    assert [v.position for v in R.iter_batches(data, len(a), file_position=1000)] == [1000, 1000 + len(b)]


def test_iter_file_batches_matches_buffer_iteration():
    rng = random.Random(3)
    data = b"".join(simple_v2([rng.randrange(100) for _ in range(rng.randrange(1, 40))], base_offset=i * 100)
                    for i in range(30))
    with tempfile.TemporaryFile() as f:
        f.write(data + b"\x00" * 5)
        f.flush()
        expected = [(v.position, v.base_offset, bytes(v.data)) for v in R.iter_batches(data)]
        for chunk in (64, 200, 1000, 1 << 20):
            got = [(v.position, v.base_offset, bytes(v.data))
                   for v in R.iter_file_batches(f.fileno(), 0, len(data) + 5, chunk_bytes=chunk)]
            assert got == expected, chunk
        second = expected[1][0]
        got = [v.base_offset for v in R.iter_file_batches(f.fileno(), second, len(data) - 3, chunk_bytes=100)]
        assert got == [e[1] for e in expected[1:-1]]


# ---------------------------------------------------------------- records and reader semantics (§2.8)

def test_v2_records_match_kafka_python_reader():
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    rng = random.Random(7)
    for i in range(50):
        key = None if i % 7 == 0 else os.urandom(rng.randrange(0, 20))
        value = None if i % 11 == 0 else os.urandom(rng.randrange(0, 300))
        headers = [("h%d" % j, None if j == 1 else b"x" * j) for j in range(i % 3)]
        builder.append(i, timestamp=10_000 + rng.randrange(-500, 500), key=key, value=value, headers=headers)
    data = bytes(builder.build())
    theirs = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers))
              for r in MemoryRecords(data).next_batch()]
    ours = [tuple(r) for r in R.iter_records(data)]
    assert ours == theirs


def test_legacy_records_match_kafka_python_reader():
    for magic in (0, 1):
        for codec in (0, 1):
            builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
            for i in range(10):
                builder.append(i, timestamp=5000 + i, key=None if i % 2 else b"key", value=b"v" * i)
            data = bytes(builder.build())
            theirs = []
            records = MemoryRecords(data)
            while records.has_next():
                theirs += [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value)
                           for r in records.next_batch()]
            ours = [(r.offset, r.timestamp, r.timestamp_type if magic else None, r.key, r.value)
                    for r in R.iter_records(data)]
            theirs = [(o, t if magic else -1, tt if magic else None, k, v) for o, t, tt, k, v in theirs]
            assert ours == theirs, (magic, codec)


def test_v2_log_append_time_reports_max_timestamp_for_every_record():
    data = simple_v2([1, 2, 3], attributes=0x08, max_timestamp=15)
    assert [(r.timestamp, r.timestamp_type) for r in R.iter_records(data)] == [(15, 1)] * 3


def test_v1_compressed_wrapper_rules():
    inner = b"".join(ref.legacy_message(1, i, None, b"x%d" % i, timestamp=100 + i) for i in range(3))
    create = legacy_wrapper(1, 10, inner, timestamp=102)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in R.iter_records(create)] == \
        [(8, 100, 0), (9, 101, 0), (10, 102, 0)]
    view = next(R.iter_batches(create))
    assert (view.base_offset, view.last_offset, view.record_count) == (8, 10, 3)
    log_append = legacy_wrapper(1, 10, inner, timestamp=999, attributes=0x09)
    assert [(r.timestamp, r.timestamp_type) for r in R.iter_records(log_append)] == [(999, 1)] * 3
    zero = legacy_wrapper(1, 0, inner, timestamp=102)
    assert [r.offset for r in R.iter_records(zero)] == [0, 1, 2]
    with pytest.raises(InvalidRecordError, match="wrapper offset"):
        list(R.iter_records(legacy_wrapper(1, 1, inner)))
    with pytest.raises(InvalidRecordError, match="no inner records"):
        list(R.iter_records(legacy_wrapper(1, 5, b"")))
    with pytest.raises(InvalidRecordError, match="null value"):
        list(R.iter_records(ref.legacy_message(1, 5, None, None, attributes=1)))


def test_v0_compressed_inner_offsets_are_absolute():
    inner = b"".join(ref.legacy_message(0, 50 + i, None, b"x") for i in range(3))
    data = legacy_wrapper(0, 52, inner)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in R.iter_records(data)] == \
        [(50, -1, -1), (51, -1, -1), (52, -1, -1)]


def test_v2_structural_errors_are_invalid_record():
    good = [(0, 10, b"k", b"v", ())]
    bad_payloads = {
        "count": ref.v2_batch(good, count=2),
        "trailing": ref.v2_batch(good, payload=ref.v2_record(0, 0, b"k", b"v") + b"\x00"),
        "overrun": ref.v2_batch(good, payload=ref.zigzag_varint(50) + b"\x00" * 10),
        "headers": ref.v2_batch(good, payload=ref.zigzag_varint(5) + b"\x00\x00\x00\x01\x01\x01"[:0]
                                + b"\x00\x00\x00" + ref.zigzag_varint(-1) + ref.zigzag_varint(-1)
                                + ref.zigzag_varint(-3)),
        "size": ref.v2_batch(good, payload=ref.zigzag_varint(9) + b"\x00\x00\x00\x01\x01\x01\x00\x00\x00"),
    }
    for name, data in bad_payloads.items():
        view = next(R.iter_batches(data))
        assert view.crc_valid()
        with pytest.raises(InvalidRecordError):
            list(R.iter_records(view))
        with pytest.raises(InvalidRecordError):
            R.scan_v2_records(view)


def test_scan_v2_records_summary():
    data = v2([(100, b"a", b"1", ()), (-1, None, b"2", ()), (50, b"c", b"3", ()), (300, b"d", None, ())])
    scan = R.scan_v2_records(next(R.iter_batches(data)))
    assert scan == R.V2RecordScan(50, 300, True, 1)
    data = ref.v2_batch([(0, 5, b"a", b"", ()), (2, 6, b"b", b"", ())], last_offset_delta=1)
    assert R.scan_v2_records(next(R.iter_batches(data))).sequential_offsets is False
    only_missing = v2([(-1, b"a", b"", ())], base_timestamp=-1)
    assert R.scan_v2_records(next(R.iter_batches(only_missing))) == R.V2RecordScan(None, None, True, -1)


# ---------------------------------------------------------------- in-batch search

def brute_first(records, target, min_offset):
    for r in records:
        if r.timestamp >= target and r.offset >= min_offset:
            return (r.offset, r.timestamp)
    return None


def brute_equal(records, ts):
    return next((r.offset for r in records if r.timestamp == ts), None)


def sample_batches():
    rng = random.Random(11)
    out = []
    for n in (1, 2, 5, 40, 300):
        ts = [rng.choice([-1, rng.randrange(0, 1000)]) for _ in range(n)]
        out.append(simple_v2(ts, base_offset=100))
        out.append(simple_v2(sorted(t for t in ts), base_offset=100))
        out.append(simple_v2(ts, base_offset=100, attributes=0x08, max_timestamp=777))
        payload = b"".join(ref.v2_record(i, t - ts[0], b"k", b"v" * i) for i, t in enumerate(ts))
        out.append(simple_v2(ts, base_offset=100, attributes=1, payload=gzip.compress(payload)))
        inner = b"".join(ref.legacy_message(1, i, None, b"x", timestamp=t) for i, t in enumerate(ts))
        out.append(legacy_wrapper(1, 100 + n - 1, inner, timestamp=max(ts)))
    out.append(ref.legacy_message(1, 9, None, b"x", timestamp=500))
    out.append(ref.legacy_message(0, 9, None, b"x"))
    return out


def test_find_first_at_or_after_equals_brute_force():
    for data in sample_batches():
        view = next(R.iter_batches(data))
        records = list(R.iter_records(view))
        rng = random.Random(5)
        stamps = sorted(set(rng.sample([r.timestamp for r in records], min(12, len(records))))
                        | {-5, 0, 1, 2000, 777, 778})
        offsets = sorted(set(rng.sample([r.offset for r in records], min(6, len(records))))
                         | {0, records[-1].offset + 1})
        for target in stamps:
            for min_offset in offsets:
                assert R.find_first_at_or_after(view, target, min_offset) == \
                    brute_first(records, target, min_offset), (view, target, min_offset)


def test_first_record_with_timestamp_equals_brute_force():
    for data in sample_batches():
        view = next(R.iter_batches(data))
        records = list(R.iter_records(view))
        for ts in {r.timestamp for r in records} | {12345}:
            expected = brute_equal(records, ts) if view.magic else None
            assert R.first_record_with_timestamp(view, ts) == expected, (view, ts)


def search_for_timestamp(data, target, starting_offset=0):
    """FileRecords.searchForTimestamp over a buffer: (timestamp, offset, epoch) or None."""
    for view in R.iter_batches(data):
        found = R.find_first_at_or_after(view, target, starting_offset)
        if found is not None:
            epoch = view.partition_leader_epoch if view.magic == 2 else None
            return (found[1], found[0], epoch)
    return None


def test_search_for_timestamp_two_batches():
    """§12.6 item 76."""
    data = simple_v2([10], base_offset=5, partition_leader_epoch=0) + \
        simple_v2([11], base_offset=6, partition_leader_epoch=1)
    assert search_for_timestamp(data, 9) == (10, 5, 0)
    assert search_for_timestamp(data, 10) == (10, 5, 0)
    assert search_for_timestamp(data, 11) == (11, 6, 1)
    assert search_for_timestamp(data, 12) is None
    v1 = ref.legacy_message(1, 5, None, b"a", timestamp=10) + ref.legacy_message(1, 6, None, b"b", timestamp=11)
    assert search_for_timestamp(v1, 10) == (10, 5, None)
    v0 = ref.legacy_message(0, 5, None, b"a") + ref.legacy_message(0, 6, None, b"b")
    for target in (0, 9, 10, 11, 12):
        assert search_for_timestamp(v0, target) is None


# ---------------------------------------------------------------- in-place rewrites

def test_set_log_append_time_on_v2():
    """§12.6 item 77."""
    data = bytearray(simple_v2([1, 2, 3]))
    view = next(R.iter_batches(data))
    view.set_max_timestamp(R.LOG_APPEND_TIME, 15)
    again = next(R.iter_batches(data))
    assert again.crc_valid()
    assert again.timestamp_type == R.LOG_APPEND_TIME and again.max_timestamp == 15
    assert [r.timestamp for r in R.iter_records(data)] == [15, 15, 15]
    assert again.base_timestamp == 1
    with pytest.raises(ValueError):
        view.set_max_timestamp(R.NO_TIMESTAMP_TYPE, 15)


def test_set_last_offset_and_epoch_on_v2_keep_crc():
    data = bytearray(simple_v2([1, 2, 3]))
    crc_before = bytes(data[17:21])
    view = next(R.iter_batches(data))
    view.set_last_offset(1000)
    view.set_partition_leader_epoch(9)
    again = next(R.iter_batches(data))
    assert (again.base_offset, again.last_offset, again.partition_leader_epoch) == (998, 1000, 9)
    assert again.crc_valid() and bytes(data[17:21]) == crc_before
    assert [r.offset for r in R.iter_records(data)] == [998, 999, 1000]


def test_legacy_rewrites():
    data = bytearray(ref.legacy_message(1, 0, b"k", b"v", timestamp=5) + ref.legacy_message(0, 1, b"k", b"v"))
    v1, v0 = list(R.iter_batches(data))
    v1.set_last_offset(77)
    v1.set_max_timestamp(R.LOG_APPEND_TIME, 1234)
    v0.set_last_offset(78)
    with pytest.raises(ValueError):
        v0.set_max_timestamp(R.CREATE_TIME, 1)
    parsed = ref.parse_legacy_entries(bytes(data))
    assert parsed[0][:4] == (77, 1, 0x08, 1234)
    assert parsed[1][0] == 78
    assert [r.offset for r in R.iter_records(data)] == [77, 78]


def test_rewrite_needs_a_writable_buffer():
    view = next(R.iter_batches(simple_v2([1])))
    with pytest.raises(TypeError):
        view.set_last_offset(3)


def test_implementation_is_reported():
    assert R.IMPLEMENTATION in ("c", "python")


def test_set_max_timestamp_recomputes_attributes_like_kafka():
    """computeAttributes keeps codec, type, transactional and control bits; the delete-horizon bit goes."""
    data = bytearray(simple_v2([1, 2], attributes=0x40 | 0x10 | 0x01,
                               payload=gzip.compress(ref.v2_record(0, 0, b"k", b"v") + ref.v2_record(1, 1, b"k", b"v"))))
    view = next(R.iter_batches(data))
    view.set_max_timestamp(R.LOG_APPEND_TIME, 99)
    assert struct.unpack_from(">h", data, 21)[0] == 0x08 | 0x10 | 0x01
    assert next(R.iter_batches(data)).crc_valid()
