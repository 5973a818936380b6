"""records/builder.py: bytes checked by an independent parser (kafka_bytes_ref) and kafka-python."""

import gzip
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from support import kafka_bytes_ref as ref
from support.unit_helpers import kafka_python_records
from sundial.records import codecs
from sundial import records as R
from sundial.records.builder import SimpleRecord, build_batch, build_records, encode_varint
from sundial.storage.errors import UnsupportedCompressionTypeError

RECS = [SimpleRecord(1000, b"k0", b"v0", (("a", b"1"),)),
        SimpleRecord(1300, None, b"v1", ()),
        SimpleRecord(1200, b"k2", None, (("b", None), ("c", b""))),
        SimpleRecord(-1, b"k3", b"", ())]
LEGACY = [r._replace(headers=()) for r in RECS]


def test_varint_encoding_matches_reference():
    for n in [0, 1, -1, 63, 64, -64, -65, 300, -300, 2**31 - 1, -2**31, 2**62, -2**63, 2**63 - 1]:
        assert encode_varint(n) == ref.zigzag_varint(n)
        assert R.read_varlong(encode_varint(n), 0) == (n, len(encode_varint(n)))


def test_v2_uncompressed_layout():
    data = build_batch(2, RECS, base_offset=500, producer_id=9, producer_epoch=2, base_sequence=40,
                       partition_leader_epoch=3)
    h = ref.parse_v2_batch(data)
    assert h["base_offset"] == 500
    assert h["partition_leader_epoch"] == 3
    assert h["attributes"] == 0
    assert h["last_offset_delta"] == 3
    assert h["base_timestamp"] == 1000
    assert h["max_timestamp"] == 1300
    assert (h["producer_id"], h["producer_epoch"], h["base_sequence"], h["count"]) == (9, 2, 40, 4)
    recs = ref.parse_v2_records(h["payload"], h["count"])
    assert [(od, td) for od, td, *_ in recs] == [(0, 0), (1, 300), (2, 200), (3, -1001)]
    assert [(k, v, hd) for _, _, k, v, hd in recs] == [(r.key, r.value, r.headers) for r in RECS]


def test_v2_is_byte_identical_to_kafka_python():
    theirs = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                       producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, r in enumerate(RECS[:3]):
        theirs.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    theirs_bytes = bytes(theirs.build())
    ours = build_batch(2, RECS[:3], partition_leader_epoch=struct.unpack_from(">i", theirs_bytes, 12)[0])
    assert ours == theirs_bytes


def test_legacy_uncompressed_is_byte_identical_to_kafka_python():
    for magic in (0, 1):
        theirs = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
        for i, r in enumerate(LEGACY):
            theirs.append(i, timestamp=r.timestamp if magic else None, key=r.key, value=r.value)
        assert build_batch(magic, LEGACY) == bytes(theirs.build())


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_v2_codecs_round_trip_and_flags(codec):
    data = build_batch(2, RECS, compression=codec, base_offset=7)
    h = ref.parse_v2_batch(data)
    assert h["attributes"] & 0x07 == codec
    payload = h["payload"] if codec == 0 else bytes(codecs.decompress(codec, h["payload"]))
    if codec == 1:
        assert gzip.decompress(h["payload"]) == payload
    assert len(ref.parse_v2_records(payload, 4)) == 4
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in R.iter_records(data)]
    assert got == [(7 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(RECS)]
    if codec in (0, 1):
        assert kafka_python_records(data) == [(7 + i, r.timestamp, r.key, r.value) for i, r in enumerate(RECS)]


def test_v2_log_append_time_keeps_deltas_and_stamps_max():
    built = build_records(2, RECS, timestamp_type=R.LOG_APPEND_TIME, log_append_time_ms=99_999, base_offset=10)
    h = ref.parse_v2_batch(built.buffer)
    assert h["attributes"] & 0x08
    assert (h["base_timestamp"], h["max_timestamp"]) == (1000, 99_999)
    assert [r.timestamp for r in R.iter_records(built.buffer)] == [99_999] * 4
    assert (built.max_timestamp, built.shallow_offset_of_max_timestamp) == (99_999, 13)


def test_v1_compressed_wrapper_layout():
    built = build_records(1, LEGACY, compression=1, base_offset=100)
    (wrapper,) = ref.parse_legacy_entries(built.buffer)
    offset, magic, attributes, timestamp, key, value = wrapper
    assert (offset, magic, attributes, timestamp, key) == (103, 1, 1, 1300, None)
    inner = ref.parse_legacy_entries(gzip.decompress(value))
    assert [m[0] for m in inner] == [0, 1, 2, 3]
    assert [m[3] for m in inner] == [r.timestamp for r in LEGACY]
    assert [(r.offset, r.timestamp) for r in R.iter_records(built.buffer)] == \
        [(100 + i, r.timestamp) for i, r in enumerate(LEGACY)]
    assert kafka_python_records(built.buffer) == [(100 + i, r.timestamp, r.key, r.value) for i, r in enumerate(LEGACY)]
    assert (built.max_timestamp, built.shallow_offset_of_max_timestamp) == (1300, 103)


def test_v1_log_append_time_stamps_wrapper_and_inner():
    built = build_records(1, LEGACY, compression=1, timestamp_type=R.LOG_APPEND_TIME, log_append_time_ms=5000)
    (wrapper,) = ref.parse_legacy_entries(built.buffer)
    assert wrapper[2] == 0x09 and wrapper[3] == 5000
    assert all(m[2] == 0x08 and m[3] == 5000 for m in ref.parse_legacy_entries(gzip.decompress(wrapper[5])))
    plain = build_records(1, LEGACY, timestamp_type=R.LOG_APPEND_TIME, log_append_time_ms=5000, base_offset=4)
    assert all(m[2] == 0x08 and m[3] == 5000 for m in ref.parse_legacy_entries(plain.buffer))
    assert (plain.max_timestamp, plain.shallow_offset_of_max_timestamp) == (5000, 4)


def test_v0_compressed_inner_offsets_absolute_and_no_timestamps():
    built = build_records(0, LEGACY, compression=1, base_offset=100)
    (wrapper,) = ref.parse_legacy_entries(built.buffer)
    assert wrapper[0] == 103 and wrapper[1] == 0
    assert [m[0] for m in ref.parse_legacy_entries(gzip.decompress(wrapper[5]))] == [100, 101, 102, 103]
    assert (built.max_timestamp, built.shallow_offset_of_max_timestamp) == (-1, -1)


def test_records_info_per_reference_table():
    """§3.6: uncompressed v0/v1 point at the first record reaching the max; v2/compressed at the last."""
    ts = [SimpleRecord(t, b"k", b"v") for t in (5, 9, 9, 1)]
    assert build_records(1, ts, base_offset=20)[4:] == (9, 21)
    assert build_records(1, ts, base_offset=20, compression=1)[4:] == (9, 23)
    assert build_records(2, ts, base_offset=20)[4:] == (9, 23)
    none = [SimpleRecord(-1, b"k", b"v")] * 3
    assert build_records(2, none)[4:] == (-1, -1)
    assert build_records(1, none)[4:] == (-1, -1)


def test_explicit_offsets():
    data = build_batch(2, RECS[:3], offsets=[10, 12, 15])
    view = next(R.iter_batches(data))
    assert (view.base_offset, view.last_offset, view.record_count) == (10, 15, 3)
    assert [r.offset for r in R.iter_records(data)] == [10, 12, 15]


def test_builder_refusals():
    with pytest.raises(ValueError):
        build_batch(1, RECS)                               # headers need v2
    with pytest.raises(UnsupportedCompressionTypeError):
        build_batch(1, LEGACY, compression=4)
    with pytest.raises(ValueError):
        build_batch(2, [SimpleRecord(-2, b"k", b"v")])
    with pytest.raises(ValueError):
        build_batch(1, LEGACY, producer_id=5)
    assert build_records(2, []).buffer == b""


def test_transactional_and_control_flags():
    data = build_batch(2, RECS[:1], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True,
                       is_control=True)
    view = next(R.iter_batches(data))
    assert view.is_transactional and view.is_control and view.crc_valid()
