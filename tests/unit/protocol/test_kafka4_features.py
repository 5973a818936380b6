"""ApiVersions v3+ feature fields as Kafka 4.x reports them (``group.version``, ``share.version``).

Golden bytes are written out by hand from ``ApiVersionsResponse.json`` (tags 0, 1 and 2 of the
top-level struct); a model of librdkafka 2.0.2's reader (kcat 1.7.1) shows what that client does
with them.
"""

from __future__ import annotations

import struct

import pytest

from sundial.protocol import decode_response, encode_response
from sundial.protocol.features import GROUP_VERSION, SHARE_VERSION, TRANSACTION_VERSION, api_versions_feature_fields
from sundial.protocol.header import RequestHeader
from sundial.protocol.schema_codec import encode_response_body
from support.unit_helpers import read_uvarint
from support.wire_bytes import TAGS, carray, cstr, i16, i32, i64, uvarint

TABLE = [{"api_key": 18, "min_version": 0, "max_version": 4}, {"api_key": 68, "min_version": 0, "max_version": 1}]
SUPPORTED = {GROUP_VERSION: (0, 1), SHARE_VERSION: (0, 1)}
FINALIZED = {GROUP_VERSION: 1, SHARE_VERSION: 0}


def _answer(version, supported=SUPPORTED, finalized=FINALIZED, epoch=1):
    return dict({"error_code": 0, "api_keys": TABLE, "throttle_time_ms": 0},
                **api_versions_feature_fields(version, supported, finalized, epoch))


def _head():
    return i16(0) + carray([i16(k["api_key"]) + i16(k["min_version"]) + i16(k["max_version"]) + TAGS
                            for k in TABLE]) + i32(0)


def _tag(tag: int, data: bytes) -> bytes:
    return uvarint(tag) + uvarint(len(data)) + data


def test_fields_per_request_version():
    assert api_versions_feature_fields(2, SUPPORTED, FINALIZED, 1) == {}
    v3 = api_versions_feature_fields(3, SUPPORTED, FINALIZED, 1)
    assert v3 == {"supported_features": [], "finalized_features_epoch": 1,
                  "finalized_features": [{"name": "group.version", "max_version_level": 1, "min_version_level": 1}]}
    v4 = api_versions_feature_fields(4, SUPPORTED, FINALIZED, 1)
    assert v4["supported_features"] == [{"name": "group.version", "min_version": 0, "max_version": 1},
                                        {"name": "share.version", "min_version": 0, "max_version": 1}]
    assert v4["finalized_features"] == v3["finalized_features"]  # share.version at level 0 is off: not listed
    # a feature whose minimum is above 0 is listed to v3 clients too
    assert api_versions_feature_fields(3, {"x.version": (1, 3)}, {"x.version": 2}, 5)["supported_features"] == [
        {"name": "x.version", "min_version": 1, "max_version": 3}]


@pytest.mark.parametrize(("supported", "finalized", "epoch"), [
    ({GROUP_VERSION: (0, 1)}, {GROUP_VERSION: 2}, 1),          # level above the supported range
    ({}, {TRANSACTION_VERSION: 2}, 1),                          # finalized but not supported
    ({GROUP_VERSION: (1, 0)}, {}, 1),                           # empty range
    ({GROUP_VERSION: (0, 1)}, {GROUP_VERSION: 1}, -1),          # clients ignore epoch -1
])
def test_inconsistent_tables_are_broker_bugs(supported, finalized, epoch):
    with pytest.raises(ValueError):
        api_versions_feature_fields(4, supported, finalized, epoch)


def test_v4_answer_golden_bytes():
    body = encode_response_body(18, 4, _answer(4))
    supported = carray([cstr("group.version") + i16(0) + i16(1) + TAGS, cstr("share.version") + i16(0) + i16(1) + TAGS])
    finalized = carray([cstr("group.version") + i16(1) + i16(1) + TAGS])
    assert body == _head() + uvarint(3) + _tag(0, supported) + _tag(1, i64(1)) + _tag(2, finalized)
    _, back = decode_response(18, 4, b"".join(bytes(b) for b in encode_response(RequestHeader(18, 4, 3, "c", 0),
                                                                                 _answer(4))))
    assert [(f.name, f.min_version, f.max_version) for f in back.supported_features] == [
        ("group.version", 0, 1), ("share.version", 0, 1)]
    assert [(f.name, f.min_version_level, f.max_version_level) for f in back.finalized_features] == [
        ("group.version", 1, 1)]
    assert back.finalized_features_epoch == 1


def test_v3_answer_golden_bytes_leave_out_minimum_zero():
    body = encode_response_body(18, 3, _answer(3))
    finalized = carray([cstr("group.version") + i16(1) + i16(1) + TAGS])
    assert body == _head() + uvarint(2) + _tag(1, i64(1)) + _tag(2, finalized)


def test_no_features_no_tags():
    assert encode_response_body(18, 3, _answer(3, {}, {}, -1)) == _head() + TAGS


# -- librdkafka 2.0.2 (kcat 1.7.1) ---------------------------------------------------------------

def librdkafka_202_read(body: bytes):
    """``rd_kafka_handle_ApiVersion`` of librdkafka 2.0.2 over a v3 body.

    Its ``rd_kafka_buf_skip_tags`` skips ``taglen - 1`` bytes per tagged field (fixed in 2.2.0,
    "Fix number of bytes skipped when receiving tags", #4278); every read and skip is bounds
    checked (underflow is a parse error, as in ``read_uvarint``) and nothing checks for bytes
    left at the end.
    """
    pos = 0
    (error_code,) = struct.unpack_from(">h", body, pos)
    n, pos = read_uvarint(body, pos + 2)

    def skip_tags(pos):
        count, pos = read_uvarint(body, pos)
        for _ in range(count):
            _, pos = read_uvarint(body, pos)
            size, pos = read_uvarint(body, pos)
            if size > 1:
                pos += size - 1
                if pos > len(body):
                    raise ValueError("Read underflow")
        return pos

    keys = []
    for _ in range(n - 1):
        keys.append(struct.unpack_from(">hhh", body, pos))
        pos = skip_tags(pos + 6)
    (throttle,) = struct.unpack_from(">i", body, pos)
    skip_tags(pos + 4)
    return error_code, keys, throttle


@pytest.mark.parametrize("epoch", [0, 1, 127, 128, 2**31, 2**55])
def test_librdkafka_202_reads_the_api_keys_of_a_v3_answer_with_features(epoch):
    # The buggy reader lands inside the epoch's eight bytes and reads tag numbers and sizes there.
    body = encode_response_body(18, 3, _answer(3, epoch=epoch))
    assert librdkafka_202_read(body) == (0, [(18, 0, 4), (68, 0, 1)], 0)
    with_supported = encode_response_body(18, 3, _answer(3, {"x.version": (1, 2), GROUP_VERSION: (0, 1)},
                                                          {"x.version": 2, GROUP_VERSION: 1}, epoch))
    assert librdkafka_202_read(with_supported) == (0, [(18, 0, 4), (68, 0, 1)], 0)


def test_librdkafka_202_needs_a_small_epoch():
    # With a supported feature listed, the reader takes the epoch's first byte for a size: an epoch
    # of 2**57 or more (first byte above 1) sends it past the end, a parse error that fails the
    # connection. Keep the finalized-features epoch small (Kafka's is a metadata offset).
    body = encode_response_body(18, 3, _answer(3, {"x.version": (1, 2)}, {"x.version": 2}, 2**62))
    with pytest.raises(ValueError, match="underflow"):
        librdkafka_202_read(body)
