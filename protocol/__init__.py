"""Sundial's sans-I/O Kafka protocol package: bytes in, requests out, responses to bytes.

No sockets, no asyncio, no clock. Layout:

* ``framing``     — ``FrameDecoder``: size-prefixed frames out of a byte stream.
* ``header``      — request header parse (v0–v2), response header encode (v0/v1).
* ``api_keys``    — ``ApiKey``, ``SUPPORTED_VERSIONS``, flexible/header versions.
* ``errors``      — ``ErrorCode`` and the exceptions this package raises.
* ``primitives``  — bounds-checked reader and writers for Kafka's wire types.
* ``messages/``   — hand-written Produce, Fetch, ListOffsets, ShareFetch responses (records as views).
* ``schema_codec``— every other API through kafka-python 3's schema classes.
* ``schemas/``    — Kafka 4.2's JSON for the group APIs kafka-python lacks (KIP-848, KIP-932).
* ``features``    — ApiVersions feature fields (``group.version``, ``share.version``) as Kafka reports them.
* ``codec``       — ``decode_request`` / ``encode_response`` (the broker's seam).
"""

from .api_keys import SUPPORTED_VERSIONS, ApiKey
from .codec import decode_request, decode_response, encode_request, encode_response
from .errors import (
    ErrorCode,
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from .framing import FrameDecoder
from .header import RequestHeader, parse_request_header, peek_api_key_version_correlation
from .schema_codec import encode_api_versions_fallback

__all__ = [
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "ErrorCode",
    "FrameDecoder",
    "FrameTooLargeError",
    "InvalidFrameError",
    "ProtocolError",
    "RequestHeader",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "decode_request",
    "decode_response",
    "encode_api_versions_fallback",
    "encode_request",
    "encode_response",
    "parse_request_header",
    "peek_api_key_version_correlation",
]
