"""Produce, Fetch and ListOffsets: the hand-written codecs against kafka-python 3.

For every supported version, with an all-defaults and an every-field-set value:
kafka-python's request encoding decodes (header + body) to the same values, and
Sundial's request encoding is the same bytes; Sundial's response encoding equals
kafka-python's; and where ``kafka.protocol.old`` has structs for the version
(the only oracle below the Kafka 4.x schemas' minimum versions), they agree too.
Plus the zero-copy rules: Produce records are views into the frame; Fetch payload
objects are passed through and counted in the size prefix and records length.
"""

from __future__ import annotations

import struct

import pytest

from sundial.protocol import FrameDecoder, decode_request, encode_request, encode_response
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.header import RequestHeader, encode_response_header, parse_request_header
from sundial.protocol.messages import HAND_WRITTEN
from sundial.protocol.messages.common import INLINE_MAX_BYTES
from support.kp_frames import kp_case, kp_framed, supported_cases
from support.protocol_cases import (
    OLD_CLASSES,
    Slice,
    assert_same,
    case_value,
    iter_frames,
    old_body,
    old_comparable,
    schema_classes,
)

CASES = supported_cases(lambda key: key in HAND_WRITTEN)
IDS = [f"{ApiKey(k).name}-v{v}-{c}" for k, v, c in CASES]


@pytest.mark.parametrize(("api_key", "version", "case"), CASES, ids=IDS)
def test_request_from_kafka_python(api_key, version, case):
    value, kp, wire = kp_case(api_key, version, case, response=False, correlation_id=99, client_id="producer-1")
    (frame,) = FrameDecoder(1 << 20).feed(wire)
    header = parse_request_header(frame)
    decoded = decode_request(header, frame)
    assert_same(decoded, kp)
    # Sundial's request encoding, from the dict and from its own dataclass
    assert encode_request(api_key, version, 99, "producer-1", value) == wire
    assert encode_request(api_key, version, 99, "producer-1", decoded) == wire


@pytest.mark.parametrize(("api_key", "version", "case"), CASES, ids=IDS)
def test_response_matches_kafka_python(api_key, version, case):
    value, _, expected = kp_case(api_key, version, case, response=True, correlation_id=2**31 - 1)
    got = iter_frames(encode_response(RequestHeader(api_key, version, 2**31 - 1, None, 0), value))
    assert got == expected


OLD = [(k, v, c) for k, v, c in CASES if (k, v) in OLD_CLASSES]


@pytest.mark.parametrize(("api_key", "version", "case"), OLD, ids=[f"{ApiKey(k).name}-v{v}-{c}" for k, v, c in OLD])
def test_old_hand_written_structs_agree(api_key, version, case):
    old_req, old_resp = OLD_CLASSES[(api_key, version)]
    req_cls, resp_cls = schema_classes(api_key)
    codec = HAND_WRITTEN[api_key]
    req_value = old_comparable(req_cls, case_value(req_cls, version, case), version)
    assert old_body(old_req, req_cls, req_value, version) == codec.encode_request(version, req_value)
    resp_value = old_comparable(resp_cls, case_value(resp_cls, version, case), version)
    hdr = encode_response_header(api_key, version, 5)
    frame = iter_frames(codec.encode_response_frame(version, hdr, resp_value))
    assert old_body(old_resp, resp_cls, resp_value, version) == frame[4 + len(hdr):]


# -- zero copy ------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 10))
def test_produce_records_are_views_into_the_frame(version):
    records = bytes(range(256)) * 4
    value = {"acks": -1, "timeout_ms": 30000,
             "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": records}]}]}
    wire = encode_request(ApiKey.PRODUCE, version, 1, "c", value)
    (frame,) = FrameDecoder(1 << 20).feed(bytearray(wire))
    request = decode_request(parse_request_header(frame), frame)
    view = request.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view.obj is frame.obj
    assert bytes(view) == records


def _fetch_response(version, records):
    return {"throttle_time_ms": 5, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "a", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": r}
            for r in records]},
        {"topic": "b", "partitions": []}]}


@pytest.mark.parametrize("version", range(0, 13))
def test_fetch_payload_objects_pass_through_uncopied(version):
    big = bytes(range(256)) * 64  # 16 KiB
    small = b"\x01" * 100
    payloads = [Slice(big), None, small, memoryview(big), Slice(b""), Slice(small)]
    header = RequestHeader(ApiKey.FETCH, version, 77, "c", 0)
    buffers = encode_response(header, _fetch_response(version, payloads))
    assert payloads[0] in buffers and payloads[5] in buffers  # objects as they are, in place
    assert not any(isinstance(b, Slice) and b.size == 0 for b in buffers)
    assert any(isinstance(b, memoryview) and b.obj is big for b in buffers)  # big views not copied
    wire = iter_frames(buffers)
    assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
    _, resp_cls = schema_classes(ApiKey.FETCH)
    plain = [None if p is None else (p.data if isinstance(p, Slice) else bytes(p)) for p in payloads]
    assert wire == kp_framed(resp_cls, _fetch_response(version, plain), version, correlation_id=77)[1]


def test_fetch_small_payloads_are_inlined():
    payload = b"x" * (INLINE_MAX_BYTES - 1)
    buffers = encode_response(RequestHeader(ApiKey.FETCH, 11, 1, None, 0), _fetch_response(11, [payload]))
    assert len(buffers) == 1


def test_fetch_payload_without_size_is_refused():
    with pytest.raises(TypeError):
        encode_response(RequestHeader(ApiKey.FETCH, 11, 1, None, 0), _fetch_response(11, [object()]))


def test_fetch_v12_default_tagged_structs_are_omitted():
    header = RequestHeader(ApiKey.FETCH, 12, 1, None, 0)
    plain = _fetch_response(12, [b"abc"])
    tagged = _fetch_response(12, [b"abc"])
    tagged["responses"][0]["partitions"][0].update(
        diverging_epoch={"epoch": -1, "end_offset": -1}, current_leader={"leader_id": -1, "leader_epoch": -1},
        snapshot_id={"end_offset": -1, "epoch": -1})
    assert iter_frames(encode_response(header, tagged)) == iter_frames(encode_response(header, plain))


def test_list_offsets_v0_old_style_offsets():
    header = RequestHeader(ApiKey.LIST_OFFSETS, 0, 3, None, 0)
    value = {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "old_style_offsets": [30, 20, 0]}]}]}
    _, resp_cls = schema_classes(ApiKey.LIST_OFFSETS)
    assert iter_frames(encode_response(header, value)) == kp_framed(resp_cls, value, 0, correlation_id=3)[1]


def test_produce_v8_record_errors_as_tuples_or_dicts():
    header = RequestHeader(ApiKey.PRODUCE, 8, 3, None, 0)
    as_dicts = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 87, "base_offset": -1, "record_errors": [
            {"batch_index": 0, "batch_index_error_message": "bad"}, {"batch_index": 2}],
         "error_message": "invalid"}]}]}
    as_tuples = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 87, "base_offset": -1, "record_errors": [(0, "bad"), (2, None)],
         "error_message": "invalid"}]}]}
    assert iter_frames(encode_response(header, as_dicts)) == iter_frames(encode_response(header, as_tuples))
