"""Request headers (parse) and response headers (encode).

Request header layout (Kafka ``RequestHeader.json``; the frame's size prefix is
already stripped):

* v0: ``api_key int16, api_version int16, correlation_id int32`` (ControlledShutdown
  v0 only, which Sundial does not serve);
* v1: v0 + ``client_id`` nullable string with an **int16** length;
* v2: v1 + a tagged-field section. ``client_id`` keeps its int16 length even in v2.

Which version applies depends on (api_key, api_version):
``protocol.api_keys.request_header_version``. Keys this package does not know are
read as v1. ``header_size`` is the number of bytes the header takes, so the body
starts at ``frame[header_size:]``.

Response header: v0 = ``correlation_id int32``; v1 = v0 + an empty tagged-field
section (one 0 byte). ApiVersions answers always use v0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .api_keys import request_header_version, response_header_version
from .errors import ProtocolError
from .primitives import Reader, as_byte_view, read_text

_PREFIX = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")
_LENGTH = struct.Struct(">h")


@dataclass(slots=True)
class RequestHeader:
    """A parsed request header."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int
    #: Tagged fields of a v2 header ({tag: raw bytes}); None when absent or empty.
    tagged_fields: dict | None = None

    @property
    def header_version(self) -> int:
        return request_header_version(self.api_key, self.api_version)


def peek_api_key_version_correlation(frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from a frame's first 8 bytes.

    For error replies to frames whose header is readable but whose body is not.
    """
    if len(frame) < 8:
        raise ProtocolError(f"frame of {len(frame)} bytes is too short for a request header")
    return _PREFIX.unpack_from(frame, 0)


def parse_request_header(frame) -> RequestHeader:
    """Parse the header at the start of ``frame``; ``ProtocolError`` if truncated."""
    n = len(frame)
    if n < 8:
        raise ProtocolError(f"frame of {n} bytes is too short for a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    version = request_header_version(api_key, api_version)
    if version == 0:
        return RequestHeader(api_key, api_version, correlation_id, None, 8)
    if n < 10:
        raise ProtocolError(f"frame of {n} bytes is too short for a request header v{version}")
    buf = as_byte_view(frame)
    length = _LENGTH.unpack_from(buf, 8)[0]
    if length >= 0:
        client_id, pos = read_text(buf, 10, length)
    elif length == -1:
        client_id, pos = None, 10
    else:
        raise ProtocolError(f"negative client_id length {length}")
    tags = None
    if version >= 2:
        if pos >= n:
            raise ProtocolError("request header v2 is missing its tagged-field section")
        if buf[pos] == 0:
            pos += 1
        else:
            reader = Reader(buf, pos)
            tags = reader.tagged_fields()
            pos = reader.pos
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, tags)


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """Response header bytes (v0 or v1) for a response to (api_key, api_version)."""
    if response_header_version(api_key, api_version) == 1:
        return _CORRELATION.pack(correlation_id) + b"\x00"
    return _CORRELATION.pack(correlation_id)


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Request header bytes (v0, v1 or v2) — for tests and tools."""
    out = bytearray(_PREFIX.pack(api_key, api_version, correlation_id))
    version = request_header_version(api_key, api_version)
    if version >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            data = client_id.encode("utf-8")
            out += struct.pack(">h", len(data)) + data
    if version >= 2:
        out.append(0)
    return bytes(out)
