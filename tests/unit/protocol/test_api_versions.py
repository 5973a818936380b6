"""ApiVersions quirks: header v0 always, no default tagged fields, the v0 fallback."""

from __future__ import annotations

import io
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.old.api_versions import ApiVersionsResponse_v0

from sundial.protocol import FrameDecoder, decode_request, encode_api_versions_fallback, encode_response
from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from sundial.protocol.errors import ErrorCode
from sundial.protocol.header import RequestHeader, parse_request_header
from support.unit_helpers import read_uvarint

TABLE = [{"api_key": int(k), "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
BROKER_ANSWER = {"error_code": ErrorCode.NONE, "api_keys": TABLE, "throttle_time_ms": 0}


def librdkafka_202_parse_v3(frame: bytes):
    """ApiVersions v3 answer read the way librdkafka 2.0.2 does, including its tag-skip bug.

    ``rd_kafka_buf_skip_tags`` in 2.0.2 skips ``taglen - 1`` bytes per tagged field, so
    any tagged field desynchronises it; an answer without tagged fields parses cleanly.
    """
    pos = 4  # size
    (correlation_id,) = struct.unpack_from(">i", frame, pos)
    pos += 4  # response header v0: no tagged fields
    (error_code,) = struct.unpack_from(">h", frame, pos)
    pos += 2
    n, pos = read_uvarint(frame, pos)
    keys = []

    def skip_tags(pos):
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size - 1  # the bug
        return pos

    for _ in range(n - 1):
        keys.append(struct.unpack_from(">hhh", frame, pos))
        pos = skip_tags(pos + 6)
    (throttle,) = struct.unpack_from(">i", frame, pos)
    pos = skip_tags(pos + 4)
    if pos != len(frame):
        raise ValueError(f"Read underflow at {pos}/{len(frame)}")
    return correlation_id, error_code, keys, throttle


def test_v3_answer_has_no_tagged_fields_and_parses_in_librdkafka_202():
    frame = b"".join(bytes(b) for b in encode_response(RequestHeader(18, 3, 42, "rdkafka", 0), BROKER_ANSWER))
    correlation_id, error_code, keys, throttle = librdkafka_202_parse_v3(frame)
    assert (correlation_id, error_code, throttle) == (42, 0, 0)
    assert keys == [(e["api_key"], e["min_version"], e["max_version"]) for e in TABLE]
    assert frame.endswith(b"\x00\x00\x00\x00\x00")  # throttle 0, then an empty tag section


def test_v3_default_features_are_omitted():
    with_defaults = dict(BROKER_ANSWER, supported_features=[], finalized_features_epoch=-1,
                         finalized_features=[], zk_migration_ready=False)
    header = RequestHeader(18, 3, 1, None, 0)
    assert bytes(encode_response(header, with_defaults)[0]) == bytes(encode_response(header, BROKER_ANSWER)[0])


def test_v3_non_default_feature_is_written():
    answer = dict(BROKER_ANSWER, finalized_features_epoch=7)
    frame = bytes(encode_response(RequestHeader(18, 3, 1, None, 0), answer)[0])
    assert frame.endswith(b"\x01\x01\x08\x00\x00\x00\x00\x00\x00\x00\x07")
    decoded = ApiVersionsResponse.decode(frame, version=3, header=True, framed=True)
    assert decoded.finalized_features_epoch == 7


@pytest.mark.parametrize("version", range(0, 4))
def test_answer_uses_response_header_v0(version):
    frame = bytes(encode_response(RequestHeader(18, version, 9, None, 0), BROKER_ANSWER)[0])
    decoded = ApiVersionsResponse.decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 9
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == \
        [(e["api_key"], e["min_version"], e["max_version"]) for e in TABLE]


@pytest.mark.parametrize("asked", [4, 5, 127])
def test_unsupported_version_gets_a_v0_error_35_body(asked):
    request = ApiVersionsRequest[4](client_software_name="kafka-python", client_software_version="3.0.12")
    request.with_header(correlation_id=31, client_id="kp")
    wire = bytearray(request.encode(header=True, framed=True))
    struct.pack_into(">h", wire, 6, asked)
    (frame,) = FrameDecoder(1 << 20).feed(bytes(wire))
    header = parse_request_header(frame)
    assert (header.api_version, header.correlation_id, header.client_id) == (asked, 31, "kp")
    answer = b"".join(encode_api_versions_fallback(header.correlation_id, TABLE))
    # What kafka-python does with it: error 35 and the ApiVersions range to retry with.
    decoded = ApiVersionsResponse.decode(answer, version=asked if asked <= 4 else 4, header=True, framed=True)
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [k for k in decoded.api_keys if k.api_key == 18][0].max_version == 3
    old = ApiVersionsResponse_v0.decode(io.BytesIO(answer[8:]))
    assert old.error_code == 35 and len(old.api_keys) == len(TABLE)
    assert struct.unpack(">i", answer[:4])[0] == len(answer) - 4


def test_fallback_accepts_mapping_and_tuples():
    as_map = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 12)}
    as_tuples = [(3, 0, 12), (18, 0, 3)]
    assert encode_api_versions_fallback(1, as_map) == encode_api_versions_fallback(1, sorted(as_tuples))


@pytest.mark.parametrize("version", range(0, 4))
def test_request_decodes_software_name(version):
    request = ApiVersionsRequest[version](client_software_name="confluent-kafka-python",
                                          client_software_version="2.16.1-rdkafka-2.16.0")
    request.with_header(correlation_id=1, client_id="rdkafka")
    (frame,) = FrameDecoder(1 << 20).feed(bytes(request.encode(header=True, framed=True)))
    decoded = decode_request(parse_request_header(frame), frame)
    if version >= 3:
        assert decoded.client_software_name == "confluent-kafka-python"
        assert decoded.client_software_version == "2.16.1-rdkafka-2.16.0"
    else:
        assert decoded.client_software_name == ""  # schema default outside v3+


def test_the_librdkafka_202_emulation_does_fail_on_tagged_fields():
    answer = dict(BROKER_ANSWER, finalized_features_epoch=7)
    frame = bytes(encode_response(RequestHeader(18, 3, 1, None, 0), answer)[0])
    with pytest.raises((ValueError, IndexError, struct.error)):
        librdkafka_202_parse_v3(frame)
