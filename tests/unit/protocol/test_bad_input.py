"""Bad input never crashes: every malformed request gets a documented exception."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from sundial.protocol import FrameDecoder, decode_request, encode_request
from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from sundial.protocol.errors import ProtocolError, UnknownApiKeyError, UnsupportedVersionError
from sundial.protocol.header import RequestHeader, parse_request_header
from support.protocol_cases import full_value, schema_classes, to_kp

ALL = [(int(k), v) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) for v in range(lo, hi + 1)]
IDS = [f"{ApiKey(k).name}-v{v}" for k, v in ALL]


def valid_frame(api_key, version) -> bytes:
    req_cls, _ = schema_classes(api_key)
    kp = to_kp(req_cls, full_value(req_cls, version), version)
    kp.with_header(correlation_id=5, client_id="c")
    return bytes(kp.encode(header=True, framed=True))[4:]


@pytest.mark.parametrize(("api_key", "version"), ALL, ids=IDS)
def test_every_truncation_is_refused(api_key, version):
    frame = valid_frame(api_key, version)
    header = parse_request_header(frame)
    decode_request(header, memoryview(frame))  # the whole frame is fine
    offsets = list(range(header.header_size, len(frame)))
    if len(offsets) > 120:
        offsets = offsets[:60] + offsets[60::7] + offsets[-40:]
    for n in offsets:
        with pytest.raises(ProtocolError):
            decode_request(header, memoryview(frame[:n]))


def test_unknown_key_and_unsupported_versions():
    with pytest.raises(UnknownApiKeyError):
        decode_request(RequestHeader(999, 0, 1, None, 10), b"\x00" * 20)
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(RequestHeader(ApiKey.FETCH, 13, 1, None, 10), b"\x00" * 64)
    assert info.value.error_code == 35
    for key in (ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.LEADER_AND_ISR, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS):
        hi = SUPPORTED_VERSIONS.get(key, (0, -1))[1]
        with pytest.raises(UnsupportedVersionError):
            decode_request(RequestHeader(key, hi + 1, 1, None, 10), b"\x00" * 64)
    with pytest.raises(UnsupportedVersionError):
        decode_request(RequestHeader(ApiKey.PRODUCE, -1, 1, None, 10), b"\x00" * 64)


def _produce_frame(version, body_patch=None):
    value = {"acks": 1, "timeout_ms": 100, "topic_data": [
        {"name": "topic", "partition_data": [{"index": 0, "records": b"r" * 20}]}]}
    frame = bytearray(encode_request(ApiKey.PRODUCE, version, 1, "c", value)[4:])
    return frame


@pytest.mark.parametrize("version", [3, 8])
def test_lying_counts_and_lengths(version):
    frame = _produce_frame(version)
    header = parse_request_header(frame)
    base = header.header_size + 2 + 2 + 4  # null transactional id, acks, timeout
    for patch_at, value in [
        (base, 2**31 - 1),          # topics count
        (base, -2),                 # negative count other than null
        (base, -1),                 # null for a non-nullable array
        (base + 4 + 2 + 5, 2**31 - 1),  # partitions count
        (base + 4 + 2 + 5 + 4 + 4, 2**31 - 1),  # records length beyond the frame
        (base + 4 + 2 + 5 + 4 + 4, -7),  # negative records length
    ]:
        bad = bytearray(frame)
        struct.pack_into(">i", bad, patch_at, value)
        tracemalloc.start()
        try:
            with pytest.raises(ProtocolError):
                decode_request(header, bad)
            _, peak_bytes = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # nothing was allocated for the claimed count (measured in bytes, not in time)
        assert peak_bytes < 1 << 20, (patch_at, value, peak_bytes)


@pytest.mark.parametrize(("api_key", "version"), [(0, 9), (1, 12), (2, 7)])
def test_lying_compact_counts(api_key, version):
    """A compact count of 2**32-2 in a flexible hot request: refused before allocating."""
    frame = bytearray(valid_frame(api_key, version))
    header = parse_request_header(frame)
    # put a huge uvarint where the topics array starts, after the fixed prefix
    if api_key == 0:  # transactional_id, acks, timeout_ms
        prefix = len(encode_request_string(full_value(schema_classes(0)[0], 9)["transactional_id"])) + 6
    else:  # Fetch v12: five int32 and an int8 before topics; ListOffsets v7: int32 + int8
        prefix = {1: 4 * 3 + 4 + 1 + 4 + 4, 2: 4 + 1}[api_key]
    start = header.header_size + prefix
    bad = frame[:start] + b"\xfe\xff\xff\xff\x0f" + frame[start + 1:]
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_request(header, bad)


def encode_request_string(s):
    from sundial.protocol.primitives import write_string

    out = bytearray()
    write_string(out, s, True)
    return out


def test_invalid_utf8_topic_names():
    frame = _produce_frame(3)
    header = parse_request_header(frame)
    at = bytes(frame).index(b"topic")
    bad = bytearray(frame)
    bad[at:at + 2] = b"\xc3\x28"
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_request(header, bad)
    metadata = bytearray(encode_request(ApiKey.METADATA, 4, 1, "c", {"topics": [{"name": "topic"}]})[4:])
    at = bytes(metadata).index(b"topic")
    metadata[at] = 0xFF
    with pytest.raises(ProtocolError):
        decode_request(parse_request_header(metadata), metadata)


def test_null_where_not_nullable():
    produce = _produce_frame(3)
    at = bytes(produce).index(b"\x00\x05topic")
    bad = produce[:at] + b"\xff\xff" + produce[at + 7:]
    with pytest.raises(ProtocolError):
        decode_request(parse_request_header(bad), bad)
    metadata = bytearray(encode_request(ApiKey.METADATA, 4, 1, "c", {"topics": [{"name": "topic"}]})[4:])
    at = bytes(metadata).index(b"\x00\x05topic")
    bad = metadata[:at] + b"\xff\xff" + metadata[at + 7:]
    with pytest.raises(ProtocolError, match="non-nullable"):
        decode_request(parse_request_header(bad), bad)
    # null topics is how v1+ asks for all topics: allowed
    all_topics = encode_request(ApiKey.METADATA, 4, 1, "c", {"topics": None})[4:]
    assert decode_request(parse_request_header(all_topics), all_topics).topics is None


def test_random_garbage_after_a_valid_header():
    frame = bytearray(_produce_frame(3))
    header = parse_request_header(frame)
    body = bytes(range(256)) * 4
    with pytest.raises(ProtocolError):
        decode_request(header, frame[:header.header_size] + body)


def test_frame_decoder_plus_decode_on_a_stream():
    frames = b"".join(struct.pack(">i", len(f)) + f for f in (_produce_frame(v) for v in range(10)))
    decoded = [decode_request(parse_request_header(f), f) for f in FrameDecoder(1 << 20).feed(frames)]
    assert [d.acks for d in decoded] == [1] * 10
