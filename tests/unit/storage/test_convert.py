"""storage/convert.py: down-conversion for Fetch v0-v3 clients (reference §9.3)."""

import pytest

from support import kafka_bytes_ref as ref
from support.unit_helpers import kafka_python_records
from sundial.records import codecs
from sundial import records as R
from sundial.records.builder import SimpleRecord, build_batch
from sundial.storage.convert import down_convert
from sundial.storage.errors import UnsupportedCompressionTypeError

RECS = [SimpleRecord(1000 + 7 * i, b"k%d" % i, b"v" * i, (("h", b"x"),)) for i in range(6)]


def entries(data):
    return list(R.iter_batches(data))


def test_uncompressed_v2_to_v1_keeps_offsets_and_drops_records_below_fetch_offset():
    data = build_batch(2, RECS, base_offset=100) + build_batch(2, RECS[:2], base_offset=106)
    out = down_convert(data, 1, 103)
    got = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in R.iter_records(out)]
    expected = [(100 + i, r.timestamp, 0, r.key, r.value, ()) for i, r in enumerate(RECS + RECS[:2])][3:]
    assert got == expected
    assert all(e.magic == 1 and not e.is_compressed and e.crc_valid() for e in entries(out))
    assert kafka_python_records(out) == [(o, t, k, v) for o, t, _, k, v, _ in expected]


def test_to_v0_has_no_timestamps():
    data = build_batch(2, RECS, base_offset=10)
    out = down_convert(data, 0, 0)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in R.iter_records(out)] == \
        [(10 + i, -1, -1) for i in range(6)]
    assert all(e.magic == 0 for e in entries(out))


@pytest.mark.parametrize("codec", [1, 2, 3])
@pytest.mark.parametrize("to_magic", [0, 1])
def test_compressed_batch_keeps_codec_and_every_record(codec, to_magic):
    data = build_batch(2, RECS, base_offset=50, compression=codec)
    out = down_convert(data, to_magic, 53)
    (wrapper,) = entries(out)
    assert (wrapper.magic, wrapper.compression, wrapper.last_offset) == (to_magic, codec, 55)
    assert wrapper.crc_valid()
    got = [(r.offset, r.key, r.value) for r in R.iter_records(out)]
    assert got == [(50 + i, r.key, r.value) for i, r in enumerate(RECS)]
    if codec == 1:
        assert [x[0] for x in kafka_python_records(out)] == list(range(50, 56))
    if codec == codecs.LZ4 and to_magic == 0:
        # KAFKA-1493: magic-0 lz4 frames carry the broken header checksum
        frame = ref.parse_legacy_entries(out)[0][5]
        assert frame[:4] == codecs.LZ4_FRAME_MAGIC
        assert frame[6] == (codecs.xxh32(frame[:6]) >> 8) & 0xFF
        assert frame[6] != (codecs.xxh32(frame[4:6]) >> 8) & 0xFF


def test_log_append_time_becomes_the_v1_timestamp():
    data = bytearray(build_batch(2, RECS, base_offset=0))
    next(R.iter_batches(data)).set_max_timestamp(R.LOG_APPEND_TIME, 777_777)
    out = down_convert(bytes(data), 1, 0)
    assert [(r.timestamp, r.timestamp_type) for r in R.iter_records(out)] == [(777_777, 1)] * 6
    gz = bytearray(build_batch(2, RECS, compression=1))
    next(R.iter_batches(gz)).set_max_timestamp(R.LOG_APPEND_TIME, 5)
    out = down_convert(bytes(gz), 1, 0)
    assert entries(out)[0].timestamp_type == 1
    assert [r.timestamp for r in R.iter_records(out)] == [5] * 6


def test_control_batches_dropped_and_zstd_refused():
    control = build_batch(2, [SimpleRecord(1, b"\x00\x00\x00\x00", b"x")], base_offset=0, is_control=True,
                          producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    data = control + build_batch(2, RECS[:2], base_offset=1)
    assert [r.offset for r in R.iter_records(down_convert(data, 1, 0))] == [1, 2]
    with pytest.raises(UnsupportedCompressionTypeError):
        down_convert(build_batch(2, RECS, compression=4), 1, 0)
    zstd_v2 = build_batch(2, RECS, compression=4)
    assert down_convert(zstd_v2, 2, 0) == zstd_v2


def test_partial_trailing_batch_and_nothing_to_convert():
    a = build_batch(2, RECS[:2], base_offset=0)
    b = build_batch(2, RECS[2:], base_offset=2)
    out = down_convert(a + b[:-5], 1, 0)
    assert [r.offset for r in R.iter_records(out)] == [0, 1]
    only_partial = b[:-5]
    assert down_convert(only_partial, 1, 0) == only_partial


def test_legacy_entries_at_or_below_target_are_copied():
    v1 = ref.legacy_message(1, 5, b"k", b"v", timestamp=9) + ref.legacy_message(1, 6, b"k", b"w", timestamp=10)
    v2 = build_batch(2, RECS[:1], base_offset=7)
    out = down_convert(v1 + v2, 1, 0)
    assert out[:len(v1)] == v1
    assert [r.offset for r in R.iter_records(out)] == [5, 6, 7]
    to_v0 = down_convert(v1, 0, 6)
    assert [(r.offset, r.timestamp) for r in R.iter_records(to_v0)] == [(6, -1)]
