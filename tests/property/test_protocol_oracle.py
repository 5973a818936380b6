"""Hypothesis: Sundial's codecs equal kafka-python 3 byte for byte on random field values.

For every API in SUPPORTED_VERSIONS (one test case per API; the version is drawn):

* requests: kafka-python encodes → Sundial parses the header and decodes the body to
  the same values (hand-written dataclasses compared field by field) → Sundial's
  request encoding is the same bytes (decode∘encode round trip);
* responses: Sundial's encoding of the dict equals kafka-python's encoding of the
  same response, and kafka-python decodes it back to the same values.
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sundial.protocol import FrameDecoder, decode_request, decode_response, encode_request, encode_response
from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from sundial.protocol.header import RequestHeader, parse_request_header
from sundial.protocol.messages import HAND_WRITTEN
from support.protocol_cases import assert_same, iter_frames, schema_classes, to_kp, values

APIS = sorted(int(k) for k in SUPPORTED_VERSIONS)
ORACLE = settings(max_examples=int(__import__("os").environ.get("SUNDIAL_ORACLE_EXAMPLES", "25")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])


@functools.lru_cache(maxsize=None)
def _values(cls, version):
    return values(cls, version)


def _versions(api_key):
    lo, hi = SUPPORTED_VERSIONS[ApiKey(api_key)]
    return st.integers(lo, hi)


@pytest.mark.parametrize("api_key", APIS, ids=[ApiKey(k).name for k in APIS])
@ORACLE
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1),
       client_id=st.one_of(st.none(), st.text(max_size=20)))
def test_requests_round_trip_through_kafka_python(api_key, data, correlation_id, client_id):
    version = data.draw(_versions(api_key), label="version")
    req_cls, _ = schema_classes(api_key)
    value = data.draw(_values(req_cls, version), label="request")
    kp = to_kp(req_cls, value, version)
    kp.with_header(correlation_id=correlation_id, client_id=client_id)
    wire = bytes(kp.encode(header=True, framed=True))
    (frame,) = FrameDecoder(1 << 24).feed(wire)
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key, version, correlation_id, client_id)
    decoded = decode_request(header, frame)
    if api_key in HAND_WRITTEN:
        assert_same(decoded, kp)
    else:
        assert decoded == kp
    assert encode_request(api_key, version, correlation_id, client_id, decoded) == wire
    assert encode_request(api_key, version, correlation_id, client_id, value) == wire


@pytest.mark.parametrize("api_key", APIS, ids=[ApiKey(k).name for k in APIS])
@ORACLE
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_responses_equal_kafka_python_bytes(api_key, data, correlation_id):
    version = data.draw(_versions(api_key), label="version")
    _, resp_cls = schema_classes(api_key)
    value = data.draw(_values(resp_cls, version), label="response")
    kp = to_kp(resp_cls, value, version)
    kp.with_header(correlation_id=correlation_id)
    expected = bytes(kp.encode(header=True, framed=True))
    got = iter_frames(encode_response(RequestHeader(api_key, version, correlation_id, None, 0), value))
    assert got == expected
    if api_key == ApiKey.API_VERSIONS and value.get("error_code", 0) != 0:
        return  # read as v0 by clients when it carries an error
    back_correlation, back = decode_response(api_key, version, got)
    assert back_correlation == correlation_id
    assert back == kp
