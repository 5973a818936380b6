"""The column decoder against batches built by kafka-python's independent encoder."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.pipeline_fakes import build_batch, control_batch, xerial_snappy

from sundial.pipeline.records import (
    AbortedTransactions,
    Columns,
    CorruptBatchError,
    Window,
    decode_records,
    decompress,
)

ALL = Window(0, 1 << 62)

record_st = st.tuples(
    st.integers(-(1 << 40), 1 << 40),                                    # timestamp delta from a base
    st.one_of(st.none(), st.binary(max_size=40)),                        # key
    st.one_of(st.none(), st.binary(max_size=300)),                       # value
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
)


def rows(cols: Columns):
    return list(zip(cols.offsets, cols.timestamps, cols.timestamp_types, cols.keys, cols.values, cols.headers))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(record_st, min_size=1, max_size=12), min_size=1, max_size=5),
       codec=st.sampled_from([0, 1, 2, 3, 4]), start=st.integers(0, 70), width=st.integers(0, 80),
       window=st.one_of(st.none(), st.tuples(st.integers(-(1 << 40), 1 << 40), st.integers(0, 1 << 41))))
def test_property_decode_matches_encoder(batches, codec, start, width, window):
    base_ts = 1_700_000_000_000
    buf = b""
    written = []              # (offset, ts, key, value, headers) - the ground truth
    offset = 0
    for batch in batches:
        base = offset
        recs = []
        for i, (delta, key, value, headers) in enumerate(batch):
            ts = base_ts + delta
            recs.append((i, ts, key, value, headers))
            written.append((base + i, ts, key, value, headers))
        buf += build_batch(recs, base_offset=base, codec=codec)
        offset += len(batch)
    lo_ts = hi_ts = None
    if window is not None:
        lo_ts = base_ts + window[0]
        hi_ts = lo_ts + window[1]
    w = Window(start, start + width, lo_ts, hi_ts)
    cols = Columns()
    result = decode_records(buf, w, cols)
    expect = [(o, t, 0, k, v, [(hk, hv) for hk, hv in h] or None) for o, t, k, v, h in written
              if w.start <= o < w.end and (lo_ts is None or t >= lo_ts) and (hi_ts is None or t < hi_ts)]
    assert rows(cols) == expect
    # the position moves past every batch read and stops after the one reaching the window end
    assert result.next_offset == _expected_next(batches, start, start + width)


def _expected_next(batches, start, end):
    ends, offset = [], 0
    for batch in batches:
        offset += len(batch)
        ends.append(offset)
    read = [e for e in ends if e > start]          # batches holding offsets >= start
    if not read:
        return start
    return next((e for e in read if e >= end), read[-1])


def test_headers_are_optional_and_ordered():
    buf = build_batch([(0, 5, b"k", b"v", [("a", b"1"), ("a", None), ("b", b"")]), (1, 6, None, None, [])])
    cols = Columns()
    decode_records(buf, ALL, cols)
    assert cols.headers == [[("a", b"1"), ("a", None), ("b", b"")], None]
    assert cols.keys == [b"k", None] and cols.values == [b"v", None]
    cols = Columns()
    decode_records(buf, ALL, cols, include_headers=False)
    assert cols.headers == [None, None]


def test_log_append_time_batch_uses_max_timestamp_and_stops_the_exact_window():
    first = build_batch([(0, 1, b"a", b"", []), (1, 999, b"b", b"", [])], base_offset=0, log_append_time_ms=5000)
    second = build_batch([(0, 2, b"c", b"", [])], base_offset=2, log_append_time_ms=7000)
    cols = Columns()
    result = decode_records(first + second, ALL, cols)
    assert cols.timestamps == [5000, 5000, 7000] and cols.timestamp_types == [1, 1, 1]
    cols = Columns()
    result = decode_records(first + second, Window(0, 100, 4000, 6000), cols)
    assert cols.offsets == [0, 1] and result.window_passed and result.next_offset == 2


def test_control_batches_are_skipped_but_advance_the_position():
    buf = (build_batch([(0, 1, b"a", b"", [])], base_offset=0, producer_id=7, transactional=True)
           + control_batch(1, 7, abort=False)
           + build_batch([(0, 1, b"b", b"", [])], base_offset=2))
    cols = Columns()
    result = decode_records(buf, ALL, cols)
    assert cols.offsets == [0, 2] and result.next_offset == 3


def test_read_committed_drops_aborted_transactions():
    buf = (build_batch([(0, 1, b"aborted", b"", [])], base_offset=0, producer_id=7, transactional=True)
           + build_batch([(0, 1, b"committed", b"", [])], base_offset=1, producer_id=8, transactional=True)
           + control_batch(2, 7, abort=True)
           + control_batch(3, 8, abort=False)
           + build_batch([(0, 1, b"later", b"", [])], base_offset=4, producer_id=7, transactional=True)
           + control_batch(5, 7, abort=False))
    cols = Columns()
    decode_records(buf, ALL, cols, aborted=AbortedTransactions([(7, 0)]))
    assert cols.keys == [b"committed", b"later"]
    cols = Columns()
    decode_records(buf, ALL, cols)                      # read_uncommitted sees everything
    assert cols.keys == [b"aborted", b"committed", b"later"]


def test_partial_trailing_batch_is_left_for_the_next_fetch():
    full = build_batch([(0, 1, b"a", b"x" * 50, [])], base_offset=0)
    nxt = build_batch([(0, 1, b"b", b"y" * 50, [])], base_offset=1)
    cols = Columns()
    result = decode_records(full + nxt[:30], ALL, cols)
    assert cols.offsets == [0] and result.next_offset == 1 and result.batches == 1
    result = decode_records(nxt[:30], Window(1, 10), Columns())
    assert result.batches == 0 and result.next_offset == 1


def test_crc_mismatch_is_detected():
    buf = bytearray(build_batch([(0, 1, b"a", b"value", [])]))
    buf[-3] ^= 0xFF                                     # a byte of the value: structure intact
    with pytest.raises(CorruptBatchError, match="CRC-32C"):
        decode_records(bytes(buf), ALL, Columns())
    decode_records(bytes(buf), ALL, Columns(), check_crcs=False)    # check.crcs=false reads it


def test_malformed_batches_raise_specific_errors():
    good = build_batch([(0, 1, b"a", b"value", [])])
    short = struct.pack(">qi", 0, 5) + b"\x00" * 5
    with pytest.raises(CorruptBatchError, match="invalid length"):
        decode_records(short, ALL, Columns())
    broken = bytearray(good)
    struct.pack_into(">i", broken, 57, 2)               # claims 2 records, holds 1
    with pytest.raises(CorruptBatchError):
        decode_records(bytes(broken), ALL, Columns(), check_crcs=False)


def test_xerial_snappy_and_codec_errors():
    body = b"hello world " * 5000
    assert decompress(2, xerial_snappy(body)) == body
    with pytest.raises(CorruptBatchError, match="codec 4"):
        decompress(4, b"not zstd")
    with pytest.raises(CorruptBatchError, match="unknown compression codec 6"):
        decompress(6, b"")


def test_legacy_message_sets_decode():
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(timestamp=1000 + i, key=b"k%d" % i, value=b"v")
    builder.close()
    buf = bytes(builder.buffer())
    cols = Columns()
    result = decode_records(buf, Window(1, 10), cols)
    assert cols.offsets == [1, 2] and cols.timestamps == [1001, 1002] and cols.keys == [b"k1", b"k2"]
    assert result.next_offset == 3
