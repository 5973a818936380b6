"""storage/validator.py: Kafka's LogValidator cases (§12.4 items 38-53) and the shallow checks of §3.1.

Every test builds the input itself and checks the output by reading it back.
"""

import gzip

import pytest
from kafka.record.memory_records import MemoryRecords

from support import kafka_bytes_ref as ref
from sundial.config.topic import TopicConfig
from sundial.records import codecs
from sundial import records as R
from sundial.records.builder import SimpleRecord, build_batch
from sundial.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from sundial.storage.origin import AppendOrigin
from sundial.storage.validator import validate_records

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1
HOUR = 3_600_000


def cfg(magic=2, *, before=1000, after=1000, ts_type="CreateTime", codec="producer", **kw):
    return TopicConfig(message_format_version=f"v{magic}", message_timestamp_before_max_ms=before,
                       message_timestamp_after_max_ms=after, message_timestamp_type=ts_type,
                       compression_type=codec, **kw)


UNBOUNDED = dict(before=LONG_MAX, after=LONG_MAX)


def recs(timestamps, key=b"key"):
    return [SimpleRecord(t, key, b"value-%d" % i) for i, t in enumerate(timestamps)]


def make(magic, timestamps, codec=0, **kw):
    if magic == 0:
        timestamps = [-1] * len(timestamps)
    return build_batch(magic, recs(timestamps), compression=codec, **kw)


def validate(data, config, next_offset=0, now=NOW, **kw):
    return validate_records(data, config=config, next_offset=next_offset, now_ms=now, **kw)


def read_back(result):
    return list(R.iter_records(result.buffer))


def batches(result):
    return list(R.iter_batches(result.buffer))


# ---------------------------------------------------------------- §12.4 item 38, 39, 40

@pytest.mark.parametrize("magic,codec", [(1, 0), (1, 1), (2, 0), (2, 1)])
def test_invalid_create_time_rejected(magic, codec):
    data = make(magic, [NOW - 1001], codec)
    with pytest.raises(InvalidTimestampError) as info:
        validate(data, cfg(magic))
    assert info.value.record_errors[0][0] == 0


@pytest.mark.parametrize("offset_ms", [-(24 * HOUR + 5 * 60_000), HOUR + 5 * 60_000])
@pytest.mark.parametrize("magic,codec", [(1, 0), (1, 1), (2, 0), (2, 1)])
def test_past_and_future_bounds_report_every_record(offset_ms, magic, codec):
    data = make(magic, [NOW + offset_ms] * 3, codec)
    config = cfg(magic, before=24 * HOUR, after=HOUR)
    with pytest.raises(InvalidTimestampError) as info:
        validate(data, config)
    expected = 3 if (magic == 2 or codec) else 1   # uncompressed legacy: one message per batch
    assert [i for i, _ in info.value.record_errors] == list(range(expected))
    assert all("out of range" in m for _, m in info.value.record_errors)


def test_invalid_records_and_invalid_timestamp_timestamp_wins():
    inner = b"".join(ref.legacy_message(0, i, b"k", b"v") for i in range(5))
    inner += ref.legacy_message(1, 5, b"k", b"v", timestamp=NOW - 10_000)
    wrapper = ref.legacy_message(1, 5, None, gzip.compress(inner), timestamp=NOW, attributes=1)
    with pytest.raises(InvalidTimestampError) as info:
        validate(wrapper, cfg(1))
    assert len(info.value.record_errors) == 6
    assert [i for i, _ in info.value.record_errors] == list(range(6))


# ---------------------------------------------------------------- item 41, 42, 43 (LogAppendTime)

@pytest.mark.parametrize("magic", [0, 1, 2])
def test_log_append_time_non_compressed(magic):
    data = make(magic, [1234] * 3)
    result = validate(data, cfg(magic, ts_type="LogAppendTime"))
    assert result.size_bytes == len(data) and not result.converted
    out = read_back(result)
    if magic >= 1:
        assert [r.timestamp for r in out] == [NOW] * 3
        assert all(v.timestamp_type == R.LOG_APPEND_TIME and v.crc_valid() for v in batches(result))
    assert result.max_timestamp_ms == (-1 if magic == 0 else NOW)
    assert result.shallow_offset_of_max_timestamp == {0: -1, 1: 0, 2: 2}[magic]
    assert result.log_append_time_ms == NOW
    if magic == 2:
        assert batches(result)[0].base_timestamp == 1234


@pytest.mark.parametrize("magic", [1, 2])
def test_log_append_time_without_recompression(magic):
    data = make(magic, [1234] * 3, codec=1)
    result = validate(data, cfg(magic, ts_type="LogAppendTime"))
    assert result.size_bytes == len(data) and not result.converted
    assert [r.timestamp for r in read_back(result)] == [NOW] * 3
    assert (result.max_timestamp_ms, result.shallow_offset_of_max_timestamp) == (NOW, 2)
    (view,) = batches(result)
    assert view.crc_valid() and view.timestamp_type == R.LOG_APPEND_TIME
    if magic == 2:
        assert view.base_timestamp == 1234
    # the compressed payload is untouched
    original = next(R.iter_batches(data))
    assert bytes(view.records_payload()) == bytes(original.records_payload())


@pytest.mark.parametrize("target", [1, 2])
def test_log_append_time_with_recompression_from_v0(target):
    data = make(0, [1234] * 3, codec=1)
    result = validate(data, cfg(target, ts_type="LogAppendTime"))
    assert result.converted
    assert [r.timestamp for r in read_back(result)] == [NOW] * 3
    assert result.shallow_offset_of_max_timestamp == 2
    (view,) = batches(result)
    assert view.magic == target and view.crc_valid()
    if target == 2:
        assert view.base_timestamp == -1


# ---------------------------------------------------------------- item 44, 45, 46 (CreateTime)

@pytest.mark.parametrize("magic", [1, 2])
def test_create_time_non_compressed(magic):
    stamps = [NOW - 1, NOW + 1, NOW]
    data = make(magic, stamps)
    result = validate(data, cfg(magic))
    assert [r.timestamp for r in read_back(result)] == stamps
    assert result.max_timestamp_ms == NOW + 1
    assert result.shallow_offset_of_max_timestamp == (2 if magic == 2 else 1)
    assert result.size_bytes == len(data) and not result.converted
    assert result.log_append_time_ms == -1


@pytest.mark.parametrize("magic", [1, 2])
def test_create_time_compressed_in_place_and_recompressed(magic):
    stamps = [NOW - 1, NOW + 1, NOW]
    data = make(magic, stamps, codec=1)
    result = validate(data, cfg(magic))
    assert (result.max_timestamp_ms, result.shallow_offset_of_max_timestamp) == (NOW + 1, 2)
    assert result.size_bytes == len(data) and not result.converted
    assert [r.timestamp for r in read_back(result)] == stamps
    plain = make(magic, stamps)
    result = validate(plain, cfg(magic, codec="gzip"))
    assert result.converted
    (view,) = batches(result)
    assert view.compression == codecs.GZIP
    assert result.shallow_offset_of_max_timestamp == 2


def test_create_time_up_conversion():
    stamps = [NOW - 1, NOW + 1, NOW]
    result = validate(make(1, stamps, codec=1), cfg(2))
    assert result.converted
    assert (result.max_timestamp_ms, result.shallow_offset_of_max_timestamp) == (NOW + 1, 2)
    assert [r.timestamp for r in read_back(result)] == stamps
    for target in (1, 2):
        result = validate(make(0, [1, 2, 3]), cfg(target))
        assert result.converted
        assert (result.max_timestamp_ms, result.shallow_offset_of_max_timestamp) == (-1, -1)
        (view, *_) = batches(result)
        assert view.magic == target and view.timestamp_type == R.CREATE_TIME
        if target == 2:
            assert view.base_timestamp == -1


# ---------------------------------------------------------------- item 47, 48, 49

def test_non_sequential_inner_offsets():
    offsets = list(range(0, 40, 2))
    v2 = build_batch(2, recs([NOW] * 20), compression=1, offsets=offsets)
    with pytest.raises(InvalidRecordError):
        validate(v2, cfg(2))
    for magic in (0, 1):
        inner = b"".join(ref.legacy_message(magic, o, b"k", b"v", timestamp=NOW) for o in offsets)
        wrapper = ref.legacy_message(magic, 38, None, gzip.compress(inner), timestamp=NOW, attributes=1)
        result = validate(wrapper, cfg(magic), next_offset=0)
        assert [r.offset for r in read_back(result)] == list(range(20))


def test_only_one_batch_unless_uncompressed_legacy():
    for magic, codec in [(2, 0), (2, 1), (1, 1), (0, 1)]:
        data = make(magic, [NOW], codec) + make(magic, [NOW], codec)
        with pytest.raises(InvalidRecordError, match="more than one batch"):
            validate(data, cfg(magic))
    for magic in (0, 1):
        data = make(magic, [NOW, NOW]) + make(magic, [NOW], base_offset=2)
        result = validate(data, cfg(magic), next_offset=10)
        assert [r.offset for r in read_back(result)] == [10, 11, 12]


def test_batch_count_and_offset_rules():
    records = [(i, NOW, b"k", b"v", ()) for i in range(3)]
    with pytest.raises(InvalidRecordError):
        validate(ref.v2_batch([], base_timestamp=NOW, max_timestamp=NOW, count=0), cfg(2))
    for last_delta, count in [(0, 3), (15, 3), (-3, 3), (5, 6), (1, 2)]:
        data = ref.v2_batch(records, last_offset_delta=last_delta, count=count)
        with pytest.raises(InvalidRecordError):
            validate(data, cfg(2))
    result = validate(ref.v2_batch(records, last_offset_delta=2, count=3), cfg(2))
    assert result.record_count == 3


@pytest.mark.parametrize("extra", [{}, {"ts_type": "LogAppendTime"}, {"cleanup_policy": ("compact",)}])
def test_a_header_that_lies_about_the_count_is_refused_in_every_config(extra):
    """Every v2 batch gets the structural walk (as Kafka iterates every record), bounds or not."""
    records = [(i, NOW, b"k", b"v", ()) for i in range(3)]
    data = ref.v2_batch(records, last_offset_delta=5, count=6)
    with pytest.raises(InvalidRecordError):
        validate(data, cfg(2, **UNBOUNDED, **extra))


# ---------------------------------------------------------------- item 50, 51, 52, 53

def test_broken_inner_crc_is_corrupt():
    inner = bytearray(ref.legacy_message(1, 0, b"k", b"v", timestamp=NOW))
    inner[-1] ^= 0xFF
    wrapper = ref.legacy_message(1, 0, None, gzip.compress(bytes(inner)), timestamp=NOW, attributes=1)
    with pytest.raises(CorruptRecordError):
        validate(wrapper, cfg(1))


@pytest.mark.parametrize("magic,codec", [(1, 0), (1, 1), (2, 0), (2, 1)])
def test_compacted_topic_needs_keys(magic, codec):
    data = build_batch(magic, [SimpleRecord(NOW, None, b"v")], compression=codec)
    with pytest.raises(InvalidRecordError) as info:
        validate(data, cfg(magic, cleanup_policy=("compact",)))
    assert not isinstance(info.value, InvalidTimestampError)
    assert info.value.record_errors and "without key" in info.value.record_errors[0][1]


@pytest.mark.parametrize("source_magic", [0, 1, 2])
@pytest.mark.parametrize("target_magic", [0, 1, 2])
@pytest.mark.parametrize("source_codec,target_codec", [(0, "producer"), (1, "producer"), (0, "gzip"),
                                                       (1, "uncompressed"), (1, "lz4")])
def test_offsets_assigned_consecutively(source_magic, target_magic, source_codec, target_codec):
    data = make(source_magic, [NOW] * 5, source_codec)
    result = validate(data, cfg(target_magic, codec=target_codec), next_offset=1234567)
    assert (result.first_offset, result.last_offset, result.record_count) == (1234567, 1234571, 5)
    out = read_back(result)
    assert [r.offset for r in out] == list(range(1234567, 1234572))
    assert [r.value for r in out] == [b"value-%d" % i for i in range(5)]
    assert all(v.magic == target_magic and v.crc_valid() for v in batches(result))


def test_compression_level_does_not_recompress_but_codec_does():
    raw = b"".join(ref.v2_record(i, 0, b"k", b"value" * 20) for i in range(10))
    fast = ref.v2_batch([(i, NOW, b"k", b"value" * 20, ()) for i in range(10)], attributes=1,
                        payload=gzip.compress(raw, compresslevel=1))
    result = validate(fast, cfg(2, codec="gzip"))
    assert not result.converted
    assert bytes(batches(result)[0].data)[61:] == fast[61:]
    result = validate(fast, cfg(2, codec="snappy"))
    assert result.converted and batches(result)[0].compression == codecs.SNAPPY


# ---------------------------------------------------------------- §3.1 shallow checks and other rules

def test_v2_client_batch_must_have_base_offset_zero():
    with pytest.raises(InvalidRecordError, match="baseOffset"):
        validate(make(2, [NOW], base_offset=5), cfg(2))
    assert validate(make(2, [NOW], base_offset=5), cfg(2), origin=AppendOrigin.COORDINATOR).first_offset == 0


def test_batch_larger_than_max_message_bytes():
    data = make(2, [NOW] * 10)
    with pytest.raises(RecordTooLargeError):
        validate(data, cfg(2, max_message_bytes=len(data) - 1))
    assert validate(data, cfg(2, max_message_bytes=len(data))).record_count == 10


def test_converted_batch_is_checked_again_and_segment_bytes():
    data = make(2, [NOW] * 10, codec=1)
    with pytest.raises(RecordTooLargeError):
        validate(data, cfg(2, codec="uncompressed", max_message_bytes=len(data) + 1))
    with pytest.raises(RecordBatchTooLargeError):
        validate(data, cfg(2, segment_bytes=len(data) - 1))


def test_bad_crc_is_corrupt():
    data = bytearray(make(2, [NOW]))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        validate(bytes(data), cfg(2))


def test_client_rules_control_and_sequence():
    control = build_batch(2, recs([NOW]), is_control=True, producer_id=1, producer_epoch=0, base_sequence=0)
    with pytest.raises(InvalidRecordError, match="control"):
        validate(control, cfg(2))
    no_sequence = build_batch(2, recs([NOW]), producer_id=1, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="sequence"):
        validate(no_sequence, cfg(2))


def test_idempotent_or_transactional_data_needs_v2():
    idem = build_batch(2, recs([NOW]), producer_id=1, producer_epoch=0, base_sequence=0)
    txn = build_batch(2, recs([NOW]), producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    for data in (idem, txn):
        with pytest.raises(UnsupportedForMessageFormatError):
            validate(data, cfg(1))


def test_producer_info_per_batch():
    data = build_batch(2, recs([NOW] * 4), producer_id=77, producer_epoch=3, base_sequence=10)
    result = validate(data, cfg(2), next_offset=50)
    (info,) = result.batches
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence) == (77, 3, 10, 13)
    assert (info.first_offset, info.last_offset, info.record_count) == (50, 53, 4)
    rebuilt = validate(data, cfg(2, codec="gzip"), next_offset=50)
    assert (rebuilt.batches[0].producer_id, rebuilt.batches[0].base_sequence) == (77, 10)
    view = batches(rebuilt)[0]
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == (77, 3, 10)


def test_timestamp_minus_one_is_exempt_and_exact_bounds_accepted():
    for magic, codec in [(1, 0), (2, 0), (2, 1)]:
        data = make(magic, [-1, NOW - 1000, NOW + 1000], codec)
        result = validate(data, cfg(magic))
        assert result.max_timestamp_ms == NOW + 1000
        data = make(magic, [NOW - 1001], codec)
        with pytest.raises(InvalidTimestampError):
            validate(data, cfg(magic))
        data = make(magic, [NOW + 1001], codec)
        with pytest.raises(InvalidTimestampError):
            validate(data, cfg(magic))


def test_producer_set_log_append_time():
    data = ref.v2_batch([(i, 5, b"k", b"v", ()) for i in range(3)], attributes=0x08, max_timestamp=NOW)
    with pytest.raises(InvalidTimestampError) as info:
        validate(data, cfg(2, ts_type="LogAppendTime"))
    assert len(info.value.record_errors) == 3
    # KIP-937 order: an in-range batch flagged LogAppendTime is accepted by a CreateTime topic
    result = validate(data, cfg(2))
    (view,) = batches(result)
    assert view.timestamp_type == R.CREATE_TIME and view.max_timestamp == NOW and view.crc_valid()
    far = ref.v2_batch([(0, 5, b"k", b"v", ())], attributes=0x08, max_timestamp=NOW - 10_000)
    with pytest.raises(InvalidTimestampError):
        validate(far, cfg(2))
    unstamped = ref.v2_batch([(0, 5, b"k", b"v", ())], attributes=0x08, max_timestamp=-1)
    with pytest.raises(InvalidTimestampError, match="invalid timestamp"):
        validate(unstamped, cfg(2, **UNBOUNDED))


def test_unbounded_create_time_trusts_the_header_max():
    data = make(2, [NOW - 10 * HOUR, NOW + 10 * HOUR])
    result = validate(data, cfg(2, **UNBOUNDED), next_offset=3)
    assert (result.max_timestamp_ms, result.shallow_offset_of_max_timestamp) == (NOW + 10 * HOUR, 4)


def test_bounded_scan_recomputes_a_wrong_header_max():
    records = [(i, NOW + i, b"k", b"v", ()) for i in range(3)]
    data = ref.v2_batch(records, max_timestamp=NOW - 500)
    result = validate(data, cfg(2))
    (view,) = batches(result)
    assert view.max_timestamp == NOW + 2 and view.crc_valid()
    assert result.max_timestamp_ms == NOW + 2


def test_input_is_never_modified_and_rejects_leave_nothing():
    for magic, codec in [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1)]:
        data = bytearray(make(magic, [NOW, NOW + 1], codec))
        snapshot = bytes(data)
        validate(data, cfg(magic, ts_type="LogAppendTime"), next_offset=99)
        validate(data, cfg(magic), next_offset=99)
        assert bytes(data) == snapshot


def test_empty_and_partial_input():
    assert validate(b"", cfg(2)).record_count == 0
    assert validate(make(2, [NOW])[:-3], cfg(2)).chunks == ()


def test_zstd_and_headers_need_v2_topics():
    data = make(2, [NOW], codec=4)
    with pytest.raises(UnsupportedCompressionTypeError):
        validate(data, cfg(1))
    with_headers = build_batch(2, [SimpleRecord(NOW, b"k", b"v", (("h", b"x"),))])
    with pytest.raises(UnsupportedForMessageFormatError):
        validate(with_headers, cfg(1))


def test_output_reads_with_kafka_python_and_epoch_is_set():
    data = make(2, [NOW, NOW + 1], codec=1)
    result = validate(data, cfg(2), next_offset=42, leader_epoch=7)
    (view,) = batches(result)
    assert view.partition_leader_epoch == 7
    batch = MemoryRecords(bytes(result.buffer)).next_batch()
    assert [r.offset for r in batch] == [42, 43]
    result = validate(make(2, [NOW]), cfg(2, ts_type="LogAppendTime"), leader_epoch=3)
    assert batches(result)[0].partition_leader_epoch == 3


def test_in_place_v2_shares_the_records_section():
    data = make(2, [NOW] * 100)
    result = validate(data, cfg(2))
    header, payload = result.chunks
    assert len(header) == 61 and isinstance(payload, memoryview)
    assert payload.obj is data or bytes(payload) == data[61:]
