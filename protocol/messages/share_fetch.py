"""ShareFetch (API key 78), versions 1–2: requests through the schema codec, responses by hand.

Share groups (KIP-932). The request is small and decoded by :mod:`protocol.schema_codec`
from Kafka's ``ShareFetchRequest.json``; the response carries record batches, so it is
written here, like Fetch's, without copying them.

Request (every version flexible), as the schema object ``decode_request`` returns:

    group_id               nullable string
    member_id              nullable string
    share_session_epoch    int32     0 opens a share session, -1 closes it, else the next epoch
    max_wait_ms            int32
    min_bytes              int32
    max_bytes              int32     (0x7fffffff)
    max_records            int32
    batch_size             int32
    share_acquire_mode     int8   v2+  (0 batch-optimized, 1 record-limit; 0 at v1)
    is_renew_ack           bool   v2+  (False at v1)
    topics [
      topic_id             uuid.UUID
      partitions [
        partition_index    int32
        acknowledgement_batches [first_offset int64, last_offset int64, acknowledge_types [int8]]
      ]                    (acknowledge types: 0 gap, 1 accept, 2 release, 3 reject, 4 renew)
    ]
    forgotten_topics_data [topic_id uuid.UUID, partitions [int32]]

Response (``ShareFetchResponse.json``), a dict (or objects) with these snake_case names;
a missing field takes the schema default shown:

    throttle_time_ms              int32   (0)
    error_code                    int16   (0)
    error_message                 nullable string (None)
    acquisition_lock_timeout_ms   int32   (0)
    responses [
      topic_id                    uuid.UUID, 16 raw bytes, or None (the zero UUID)
      partitions [
        partition_index           int32   (0)
        error_code                int16   (0)
        error_message             nullable string (None)
        acknowledge_error_code    int16   (0)
        acknowledge_error_message nullable string (None)
        current_leader            {leader_id int32 (0), leader_epoch int32 (0)}
        records                   None, bytes, a memoryview, or a payload object (b"")
        acquired_records          [{first_offset, last_offset, delivery_count}] or
                                  (first_offset, last_offset, delivery_count) tuples
      ]
    ]
    node_endpoints [node_id int32, host string, port int32, rack nullable string]

Zero copy as in :mod:`protocol.messages.fetch`: a partition's ``records`` may be any
payload object with an integer ``size`` (a storage file slice); it and bytes-likes of
``INLINE_MAX_BYTES`` or more become their own elements of the returned buffer list.
"""

from __future__ import annotations

import struct
import uuid

from .. import schema_codec
from ..api_keys import ApiKey
from ..primitives import write_array_len, write_string
from .common import BufferList, field

_IHH = struct.Struct(">ih")
_H = struct.Struct(">h")
_II = struct.Struct(">ii")
_QQH = struct.Struct(">qqh")
_ZERO_UUID = bytes(16)


def is_request_object(obj) -> bool:
    return False  # requests are schema objects or dicts: the schema codec encodes both


def decode_request(api_version: int, frame, offset: int):
    return schema_codec.decode_request_body(ApiKey.SHARE_FETCH, api_version, frame, offset)


def encode_request(api_version: int, request) -> bytes:
    """Request body (tests and tools)."""
    return schema_codec.encode_request_body(ApiKey.SHARE_FETCH, api_version, request)


def _uuid_bytes(value) -> bytes:
    if value is None:
        return _ZERO_UUID
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) != 16:
            raise ValueError(f"a topic id needs 16 bytes, got {len(raw)}")
        return raw
    return uuid.UUID(str(value)).bytes


def _acquired(out: bytearray, items) -> None:
    write_array_len(out, len(items), True)
    for item in items:
        if isinstance(item, tuple):
            out += _QQH.pack(item[0], item[1], item[2])
        else:
            out += _QQH.pack(field(item, "first_offset", 0), field(item, "last_offset", 0),
                             field(item, "delivery_count", 0))
        out.append(0)


def encode_response_frame(api_version: int, header_bytes: bytes, response) -> list:
    """Size prefix + ``header_bytes`` + body as a list of buffers (payloads not copied)."""
    buf = BufferList(header_bytes)
    out = buf.cur
    out += _IHH.pack(field(response, "throttle_time_ms", 0), field(response, "error_code", 0))
    write_string(out, field(response, "error_message", None), True)
    out += struct.pack(">i", field(response, "acquisition_lock_timeout_ms", 0))
    topics = field(response, "responses", ()) or ()
    write_array_len(out, len(topics), True)
    for t in topics:
        out += _uuid_bytes(field(t, "topic_id", None))
        parts = field(t, "partitions", ()) or ()
        write_array_len(out, len(parts), True)
        for p in parts:
            out += _IHH.pack(field(p, "partition_index", 0), field(p, "error_code", 0))
            write_string(out, field(p, "error_message", None), True)
            out += _H.pack(field(p, "acknowledge_error_code", 0))
            write_string(out, field(p, "acknowledge_error_message", None), True)
            leader = field(p, "current_leader", None)
            if leader is None:
                out += _II.pack(0, 0)
            else:
                out += _II.pack(field(leader, "leader_id", 0), field(leader, "leader_epoch", 0))
            out.append(0)  # current_leader's tagged fields
            out = buf.records(field(p, "records", b""), True)
            _acquired(out, field(p, "acquired_records", ()) or ())
            out.append(0)  # partition tagged fields
        out.append(0)  # topic tagged fields
    nodes = field(response, "node_endpoints", ()) or ()
    write_array_len(out, len(nodes), True)
    for n in nodes:
        out += struct.pack(">i", field(n, "node_id", 0))
        write_string(out, field(n, "host", ""), True)
        out += struct.pack(">i", field(n, "port", 0))
        write_string(out, field(n, "rack", None), True)
        out.append(0)
    out.append(0)  # top-level tagged fields
    return buf.finish()
