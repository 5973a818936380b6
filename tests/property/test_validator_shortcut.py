"""The validator's one-batch shortcut never changes an outcome (Hypothesis).

``storage.validator._one_batch_in_place`` takes the common append (one v2 batch kept in
place) in one pass and gives up (None) on anything else. Ground truth is
``validate_general``, the path every append took before the shortcut: for every batch and
topic configuration drawn here, the shortcut either gives up or returns exactly what that
path returns (bytes, offsets, timestamps, producer fields), and ``validate_records``
raises or returns exactly what it does. The batches are drawn to reach every rule:
corrupt bytes, trailing bytes, wrong header fields (base offset, counts, max timestamp,
unknown attribute bits, producer-set LogAppendTime, control flag), idempotent and
transactional producers, gaps in the offset deltas, null keys, timestamps out of bounds,
and configurations that store another codec or format or limit sizes.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sundial.config.topic import TopicConfig
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage import validator as V

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

near_now = st.integers(NOW - 20_000, NOW + 20_000)
timestamps = st.one_of(near_now, near_now, near_now, st.just(-1), st.integers(0, 2**45))
blobs = st.one_of(st.binary(max_size=30), st.binary(max_size=30), st.binary(max_size=30), st.none())


def _outcome(fn):
    try:
        result = fn()
    except Exception as exc:  # the refusal itself is the outcome compared
        return ("raised", type(exc), str(exc), getattr(exc, "record_errors", None))
    return ("ok", bytes(result.buffer), result.first_offset, result.last_offset, result.record_count,
            result.max_timestamp_ms, result.shallow_offset_of_max_timestamp, result.log_append_time_ms,
            result.converted, result.batches, result.size_bytes)


def _set_header(raw: bytearray, fmt: str, offset: int, value: int, *, fix_crc: bool) -> None:
    struct.pack_into(fmt, raw, offset, value)
    if fix_crc:
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))


@st.composite
def batches(draw):
    recs = [SimpleRecord(draw(timestamps), draw(blobs), draw(blobs), ())
            for _ in range(draw(st.integers(1, 12)))]
    producer_id = draw(st.sampled_from([-1, 7]))
    offsets = None
    if draw(st.integers(0, 9)) == 0:
        gaps = draw(st.lists(st.integers(1, 3), min_size=len(recs) - 1, max_size=len(recs) - 1))
        offsets = [sum(gaps[:i]) for i in range(len(recs))]  # deltas from 0, with gaps
    raw = bytearray(build_records(
        2, recs, compression=draw(st.sampled_from([0, 1, 2, 3, 4])), producer_id=producer_id,
        producer_epoch=draw(st.sampled_from([-1, 0, 3])) if producer_id >= 0 else -1,
        base_sequence=draw(st.sampled_from([-1, 0, 2**31 - 2])) if producer_id >= 0 else -1,
        is_transactional=producer_id >= 0 and draw(st.booleans()), offsets=offsets).buffer)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        fix_crc = draw(st.booleans())
        which = draw(st.sampled_from(["base_offset", "max_ts", "attributes", "count", "delta", "byte"]))
        if which == "base_offset":
            _set_header(raw, ">q", 0, draw(st.integers(0, 5)), fix_crc=fix_crc)
        elif which == "max_ts":
            _set_header(raw, ">q", 35, draw(timestamps), fix_crc=fix_crc)
        elif which == "attributes":
            bits = draw(st.sampled_from([0x08, 0x10, 0x20, 0x40, 0x80, 0x100]))
            _set_header(raw, ">h", 21, struct.unpack_from(">h", raw, 21)[0] | bits, fix_crc=fix_crc)
        elif which == "count":
            _set_header(raw, ">i", 57, draw(st.integers(-1, 14)), fix_crc=fix_crc)
        elif which == "delta":
            _set_header(raw, ">i", 23, draw(st.integers(-1, 14)), fix_crc=fix_crc)
        else:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    if draw(st.integers(0, 9)) == 0:
        raw += bytes(draw(st.binary(min_size=1, max_size=20)))
    return bytes(raw)


configs = st.builds(
    lambda fmt, codec, lat, compact, before, after, max_bytes, segment_bytes: TopicConfig(
        message_format_version=fmt, compression_type=codec,
        message_timestamp_type="LogAppendTime" if lat else "CreateTime",
        cleanup_policy="compact" if compact else "delete",
        message_timestamp_before_max_ms=before, message_timestamp_after_max_ms=after,
        max_message_bytes=max_bytes, segment_bytes=segment_bytes),
    st.sampled_from(["3.0", "3.0", "3.0", "v1"]),
    st.sampled_from(["producer", "producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
    st.booleans(), st.sampled_from([False, False, True]),
    st.one_of(st.just(LONG_MAX), st.integers(0, 30_000)), st.one_of(st.just(LONG_MAX), st.integers(10_000, 30_000)),
    st.sampled_from([1_048_588, 1_048_588, 120]), st.sampled_from([1 << 30, 1 << 30, 200]))


@SETTINGS
@given(raw=batches(), config=configs, next_offset=st.integers(0, 2**40), leader_epoch=st.integers(0, 5),
       as_view=st.booleans())
def test_shortcut_gives_up_or_agrees_with_every_rule(raw, config, next_offset, leader_epoch, as_view):
    records = memoryview(raw) if as_view else raw
    general = _outcome(lambda: V.validate_general(records, config=config, next_offset=next_offset, now_ms=NOW,
                                                  leader_epoch=leader_epoch))
    fast = V._one_batch_in_place(records, config, next_offset, NOW, leader_epoch)
    if fast is not None:
        assert _outcome(lambda: fast) == general
    assert _outcome(lambda: V.validate_records(records, config=config, next_offset=next_offset, now_ms=NOW,
                                               leader_epoch=leader_epoch)) == general


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_what_clients_send_takes_the_shortcut(codec, log_append_time):
    """A canonical batch from a client (idempotent, timestamps near the clock, keys set)
    into a default topic takes the shortcut: it must not silently stop applying."""
    recs = [SimpleRecord(NOW - i, b"k%d" % i, b"v" * 50, ()) for i in range(20)]
    raw = build_records(2, recs, compression=codec, producer_id=5, producer_epoch=0, base_sequence=40).buffer
    config = TopicConfig(message_timestamp_type="LogAppendTime" if log_append_time else "CreateTime")
    fast = V._one_batch_in_place(memoryview(raw), config, 1000, NOW, 0)
    assert fast is not None
    assert _outcome(lambda: fast) == _outcome(lambda: V.validate_general(raw, config=config, next_offset=1000,
                                                                         now_ms=NOW))
