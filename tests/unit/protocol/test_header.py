"""Request header parse (v0–v2) and response header encode, against kafka-python."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.api_header import RequestHeader as KpRequestHeader
from kafka.protocol.api_header import ResponseHeader as KpResponseHeader

from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ProtocolError
from sundial.protocol.header import (
    encode_request_header,
    encode_response_header,
    parse_request_header,
    peek_api_key_version_correlation,
)


def kp_request_header(api_key, api_version, correlation_id, client_id, flexible):
    h = KpRequestHeader(request_api_key=api_key, request_api_version=api_version,
                        correlation_id=correlation_id, client_id=client_id)
    return bytes(h.encode(flexible=flexible))


@pytest.mark.parametrize("client_id", [None, "", "kafka-python-3.0.12", "\u00e9\u00e8-client", "x" * 300])
@pytest.mark.parametrize(("api_key", "api_version", "flexible"), [
    (ApiKey.PRODUCE, 8, False), (ApiKey.PRODUCE, 9, True), (ApiKey.API_VERSIONS, 0, False),
    (ApiKey.API_VERSIONS, 3, True), (ApiKey.METADATA, 12, True), (ApiKey.SASL_HANDSHAKE, 1, False),
])
def test_parse_matches_kafka_python(api_key, api_version, flexible, client_id):
    raw = kp_request_header(api_key, api_version, -123456, client_id, flexible)
    body = b"\x01\x02\x03"
    h = parse_request_header(raw + body)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (api_key, api_version, -123456, client_id)
    assert h.header_size == len(raw)
    assert h.header_version == (2 if flexible else 1)
    assert encode_request_header(api_key, api_version, -123456, client_id) == raw


def test_v2_header_with_tagged_fields():
    raw = struct.pack(">hhih", 3, 12, 7, 1) + b"c" + b"\x02" + b"\x00\x01\xaa" + b"\x05\x02\xbb\xcc"
    h = parse_request_header(raw + b"body")
    assert h.header_size == len(raw)
    assert {k: bytes(v) for k, v in h.tagged_fields.items()} == {0: b"\xaa", 5: b"\xbb\xcc"}


def test_controlled_shutdown_v0_has_no_client_id():
    h = parse_request_header(struct.pack(">hhi", 7, 0, 9) + b"rest")
    assert (h.client_id, h.header_size, h.header_version) == (None, 8, 0)


def test_unknown_api_key_reads_as_v1():
    h = parse_request_header(struct.pack(">hhih", 999, 3, 1, 2) + b"ab")
    assert (h.api_key, h.client_id, h.header_size) == (999, "ab", 12)


def test_unsupported_future_api_versions_version_still_parses():
    raw = kp_request_header(ApiKey.API_VERSIONS, 127, 5, "librdkafka", True)
    h = parse_request_header(raw)
    assert (h.api_version, h.client_id, h.header_size) == (127, "librdkafka", len(raw))


@pytest.mark.parametrize("flexible", [False, True])
def test_every_truncation_is_a_protocol_error(flexible):
    raw = kp_request_header(ApiKey.METADATA, 12 if flexible else 8, 1, "client", flexible)
    for n in range(len(raw)):
        with pytest.raises(ProtocolError):
            parse_request_header(raw[:n])


@pytest.mark.parametrize("bad", [
    struct.pack(">hhih", 0, 3, 1, 5) + b"\xff\xfe\xfd\xfc\xfb",  # invalid UTF-8
    struct.pack(">hhih", 0, 3, 1, -2),  # negative length other than -1
    struct.pack(">hhih", 0, 9, 1, 0) + b"\x01\x00\x05ab",  # tag overruns
    struct.pack(">hhih", 0, 9, 1, 0) + b"\x02\x01\x00\x01\x00",  # tags out of order
    struct.pack(">hhih", 0, 9, 1, 0) + b"\xff\xff\xff\xff\xff\x01",  # varint too long
])
def test_malformed_headers(bad):
    with pytest.raises(ProtocolError):
        parse_request_header(bad)


def test_peek():
    assert peek_api_key_version_correlation(struct.pack(">hhi", 1, 12, 77) + b"???") == (1, 12, 77)
    with pytest.raises(ProtocolError):
        peek_api_key_version_correlation(b"\x00\x01\x00")


@pytest.mark.parametrize(("api_key", "api_version", "version"), [
    (ApiKey.PRODUCE, 8, 0), (ApiKey.PRODUCE, 9, 1), (ApiKey.FETCH, 12, 1), (ApiKey.FETCH, 11, 0),
    (ApiKey.API_VERSIONS, 3, 0), (ApiKey.API_VERSIONS, 0, 0), (ApiKey.SASL_HANDSHAKE, 1, 0),
])
def test_response_header(api_key, api_version, version):
    expected = bytes(KpResponseHeader(correlation_id=-99).encode(flexible=version == 1))
    assert encode_response_header(api_key, api_version, -99) == expected
