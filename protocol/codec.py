"""The seam the broker calls: ``decode_request`` and ``encode_response``.

Routing: Produce, Fetch, ListOffsets and ShareFetch go to the hand-written codecs in
``protocol.messages`` (records stay memoryviews / payload objects, no copies; ShareFetch
requests are decoded by the schema codec, its responses written by hand); every other
API goes through ``protocol.schema_codec`` (kafka-python 3 schemas, plus Kafka 4.2's JSON
for the group APIs kafka-python lacks).

``decode_request(header, frame)``: checks the key (``UnknownApiKeyError``) and
version (``UnsupportedVersionError``) against ``SUPPORTED_VERSIONS``, then decodes
``frame[header.header_size:]``. Any malformed body raises ``ProtocolError``; no
other exception type escapes (fuzzed in tests/property/test_protocol_fuzz.py).

``encode_response(header, response)``: the whole frame as a list of buffers —
int32 size prefix, response header (v0, or v1 for flexible versions; ApiVersions
always v0), body. Only a Fetch or ShareFetch response can contain more than one element: record
payload objects (anything with an integer ``size``, e.g. a storage file slice) are
placed in the list as they are, for the connection to ``sendfile``.
"""

from __future__ import annotations

import struct

from . import schema_codec
from .api_keys import ApiKey, is_known_api_key, is_supported, response_header_version
from .errors import ProtocolError, UnknownApiKeyError, UnsupportedVersionError
from .header import RequestHeader, encode_request_header, encode_response_header
from .messages import HAND_WRITTEN
from .primitives import as_byte_view, skip_tags

_SIZE = struct.Struct(">i")

#: Failure types of hand-written decoders that mean "malformed input".
_DECODE_FAILURES = (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError)


def decode_request(header: RequestHeader, frame):
    """Decode the body of ``frame`` (size prefix stripped) whose header is ``header``."""
    api_key, api_version = header.api_key, header.api_version
    if not is_known_api_key(api_key):
        raise UnknownApiKeyError(api_key)
    if not is_supported(api_key, api_version):
        raise UnsupportedVersionError(api_key, api_version)
    codec = HAND_WRITTEN.get(api_key)
    if codec is None:
        return schema_codec.decode_request_body(api_key, api_version, frame, header.header_size)
    try:
        return codec.decode_request(api_version, frame, header.header_size)
    except ProtocolError:
        raise
    except _DECODE_FAILURES as exc:
        raise ProtocolError(f"malformed {ApiKey(api_key).name} v{api_version} request: "
                            f"{type(exc).__name__}: {exc}") from None


class EncodedBody(bytes):
    """A response body already encoded for one API version (e.g. a cached ApiVersions answer).

    ``encode_response`` frames it as it is; it is the caller's job to have encoded it
    for the request's version (see :func:`encode_response_body`).
    """


def encode_response_body(api_key: int, api_version: int, response) -> EncodedBody:
    """The body alone (no size prefix, no header) of a response, for caching."""
    frame = encode_response(RequestHeader(api_key, api_version, 0, None, 0), response)
    raw = b"".join(bytes(b) for b in frame)
    header_bytes = len(encode_response_header(api_key, api_version, 0))
    return EncodedBody(raw[4 + header_bytes:])


def encode_response(header: RequestHeader, response) -> list:
    """Size prefix + response header + body, as a list of buffers (see module doc)."""
    api_key, api_version = header.api_key, header.api_version
    hdr = encode_response_header(api_key, api_version, header.correlation_id)
    if type(response) is EncodedBody:
        return [_SIZE.pack(len(hdr) + len(response)), hdr, response]
    codec = HAND_WRITTEN.get(api_key)
    if codec is None:
        return [schema_codec.encode_response_frame(api_key, api_version, hdr, response)]
    return codec.encode_response_frame(api_version, hdr, response)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   request) -> bytes:
    """Whole request frame (size prefix + header + body) — for tests and tools.

    ``request`` is a dict or a kafka-python object (any API), or one of the
    hand-written request dataclasses.
    """
    codec = HAND_WRITTEN.get(api_key)
    if codec is not None and not isinstance(request, dict) and codec.is_request_object(request):
        body = codec.encode_request(api_version, request)
    else:
        body = schema_codec.encode_request_body(api_key, api_version, request)
    frame = encode_request_header(api_key, api_version, correlation_id, client_id) + body
    return _SIZE.pack(len(frame)) + frame


def decode_response(api_key: int, api_version: int, frame, has_size_prefix: bool = True):
    """Decode a response frame with kafka-python's classes — for tests and tools.

    Returns (correlation_id, body object).
    """
    view = as_byte_view(frame)
    pos = 4 if has_size_prefix else 0
    correlation_id = _SIZE.unpack_from(view, pos)[0]
    pos += 4
    if response_header_version(api_key, api_version) == 1:
        pos = skip_tags(view, pos)
    return correlation_id, schema_codec.decode_response_body(api_key, api_version, view, pos)
