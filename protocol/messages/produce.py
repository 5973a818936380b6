"""Produce (API key 0), versions 0–9, hand-written.

Request (Kafka ``ProduceRequest.json``; "flex" = v9+: compact lengths, tagged-field
section at the end of every struct):

    transactional_id  nullable string   v3+
    acks              int16
    timeout_ms        int32
    topic_data        [
      name            string
      partition_data  [
        index         int32
        records       nullable records  (v0–v2: message set of magic 0/1; v3+: record batches)
      ]
    ]

Response (``ProduceResponse.json``):

    responses [
      name                  string
      partition_responses [
        index               int32
        error_code          int16
        base_offset         int64
        log_append_time_ms  int64   v2+   (-1 unless the topic uses LogAppendTime)
        log_start_offset    int64   v5+
        record_errors       [batch_index int32, batch_index_error_message nullable string]  v8+
        error_message       nullable string  v8+
        (current_leader is a tagged field from v10: never written here)
      ]
    ]
    throttle_time_ms int32  v1+ (after the array)

Invariants: ``records`` is a ``memoryview`` into the request frame (never copied);
lengths and counts are checked against the bytes left before anything is sliced.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..primitives import (
    INT32,
    as_byte_view,
    read_bytes_view,
    read_nullable_string,
    skip_tags,
    write_array_len,
    write_string,
    write_tagged_fields,
)
from .common import field, read_topics, write_topics

FIRST_FLEXIBLE = 9

_HI = struct.Struct(">hi")
_IHQ = struct.Struct(">ihq")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_unpack_i32 = INT32.unpack_from


@dataclass(slots=True)
class ProducePartitionData:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopicData:
    name: str
    partition_data: tuple[ProducePartitionData, ...]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[ProduceTopicData, ...]


def is_request_object(obj) -> bool:
    return isinstance(obj, ProduceRequest)


def decode_request(api_version: int, frame, offset: int) -> ProduceRequest:
    buf = as_byte_view(frame)
    pos = offset
    flex = api_version >= FIRST_FLEXIBLE
    transactional_id = None
    if api_version >= 3:
        transactional_id, pos = read_nullable_string(buf, pos, flex)
    acks, timeout_ms = _HI.unpack_from(buf, pos)
    pos += 6

    def read_partition(buf, pos):
        index = _unpack_i32(buf, pos)[0]
        records, pos = read_bytes_view(buf, pos + 4, flex)
        return ProducePartitionData(index, records), pos

    topics, pos = read_topics(buf, pos, flex, 6 if flex else 8, read_partition, ProduceTopicData)
    if flex:
        skip_tags(buf, pos)
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def encode_request(api_version: int, request) -> bytes:
    """Request body (tests and tools); records are copied into the result."""
    flex = api_version >= FIRST_FLEXIBLE
    out = bytearray()
    if api_version >= 3:
        write_string(out, field(request, "transactional_id", None), flex)
    out += _HI.pack(field(request, "acks", 0), field(request, "timeout_ms", 0))

    def write_partition(out, p):
        out += _I.pack(field(p, "index", 0))
        records = field(p, "records", b"")
        if records is None:
            write_array_len(out, None, flex)
        else:
            write_array_len(out, len(records), flex)
            out += records

    write_topics(out, field(request, "topic_data", ()), flex, "name", "partition_data", write_partition)
    if flex:
        out.append(0)
    return bytes(out)


def encode_response_frame(api_version: int, header_bytes: bytes, response) -> list:
    flex = api_version >= FIRST_FLEXIBLE
    out = bytearray(b"\x00\x00\x00\x00")
    out += header_bytes

    def write_partition(out, p):
        out += _IHQ.pack(field(p, "index", 0), field(p, "error_code", 0), field(p, "base_offset", 0))
        if api_version >= 2:
            out += _Q.pack(field(p, "log_append_time_ms", -1))
        if api_version >= 5:
            out += _Q.pack(field(p, "log_start_offset", -1))
        if api_version >= 8:
            errors = field(p, "record_errors", ()) or ()
            write_array_len(out, len(errors), flex)
            for e in errors:
                if isinstance(e, tuple):
                    batch_index, message = e
                else:
                    batch_index = field(e, "batch_index", 0)
                    message = field(e, "batch_index_error_message", None)
                out += _I.pack(batch_index)
                write_string(out, message, flex)
                if flex:
                    out.append(0)
            write_string(out, field(p, "error_message", None), flex)

    write_topics(out, field(response, "responses", ()), flex, "name", "partition_responses", write_partition)
    if api_version >= 1:
        out += _I.pack(field(response, "throttle_time_ms", 0))
    if flex:
        write_tagged_fields(out, None)
    _I.pack_into(out, 0, len(out) - 4)
    return [out]
