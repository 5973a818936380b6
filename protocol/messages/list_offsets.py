"""ListOffsets (API key 2), versions 0–9, hand-written.

Request (Kafka ``ListOffsetsRequest.json``; "flex" = v6+):

    replica_id         int32            (-1 consumer, -2 debug)
    isolation_level    int8    v2+      (absent = 0, READ_UNCOMMITTED)
    topics [
      name             string
      partitions [
        partition_index       int32
        current_leader_epoch  int32  v4+  (-1 = unknown)
        timestamp             int64       (-1 latest, -2 earliest, -3 max timestamp (v7+),
                                           -4 earliest local (v8+), -5 latest tiered (v9+), else a time)
        max_num_offsets       int32  v0 only
      ]
    ]
    (timeout_ms int32 is v10+: not served)

Response (``ListOffsetsResponse.json``):

    throttle_time_ms   int32  v2+ (first field)
    topics [
      name             string
      partitions [
        partition_index    int32
        error_code         int16
        old_style_offsets  [int64]  v0 only
        timestamp          int64    v1+  (-1 when not found)
        offset             int64    v1+  (-1 when not found)
        leader_epoch       int32    v4+  (-1 unknown)
      ]
    ]
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..primitives import INT32, as_byte_view, skip_tags
from .common import field, read_topics, write_topics

FIRST_FLEXIBLE = 6

_I = struct.Struct(">i")
_IB = struct.Struct(">ib")
_unpack_i32 = INT32.unpack_from
_B = struct.Struct(">b")
_IQ = struct.Struct(">iq")
_IIQ = struct.Struct(">iiq")
_IQI = struct.Struct(">iqi")
_IH = struct.Struct(">ih")
_QQ = struct.Struct(">qq")
_QQI = struct.Struct(">qqi")
_Q = struct.Struct(">q")


@dataclass(slots=True)
class ListOffsetsPartition:
    partition_index: int
    current_leader_epoch: int
    timestamp: int
    max_num_offsets: int


@dataclass(slots=True)
class ListOffsetsTopic:
    name: str
    partitions: tuple[ListOffsetsPartition, ...]


@dataclass(slots=True)
class ListOffsetsRequest:
    replica_id: int
    isolation_level: int
    topics: tuple[ListOffsetsTopic, ...]


def is_request_object(obj) -> bool:
    return isinstance(obj, ListOffsetsRequest)


def decode_request(api_version: int, frame, offset: int) -> ListOffsetsRequest:
    buf = as_byte_view(frame)
    pos = offset
    v = api_version
    flex = v >= FIRST_FLEXIBLE
    if v >= 2:
        replica_id, isolation_level = _IB.unpack_from(buf, pos)
        pos += 5
    else:
        replica_id = _unpack_i32(buf, pos)[0]
        isolation_level = 0
        pos += 4
    if v == 0:
        part_struct = _IQI
    elif v >= 4:
        part_struct = _IIQ
    else:
        part_struct = _IQ
    part_size = part_struct.size
    unpack_part = part_struct.unpack_from

    def read_partition(buf, pos):
        values = unpack_part(buf, pos)
        if v == 0:
            return ListOffsetsPartition(values[0], -1, values[1], values[2]), pos + part_size
        if v >= 4:
            return ListOffsetsPartition(values[0], values[1], values[2], 1), pos + part_size
        return ListOffsetsPartition(values[0], -1, values[1], 1), pos + part_size

    topics, pos = read_topics(buf, pos, flex, part_size + 1 if flex else part_size, read_partition,
                              ListOffsetsTopic)
    if flex:
        skip_tags(buf, pos)
    return ListOffsetsRequest(replica_id, isolation_level, topics)


def encode_request(api_version: int, request) -> bytes:
    """Request body (tests and tools)."""
    flex = api_version >= FIRST_FLEXIBLE
    out = bytearray(_I.pack(field(request, "replica_id", -1)))
    if api_version >= 2:
        out += _B.pack(field(request, "isolation_level", 0))

    def write_partition(out, p):
        out += _I.pack(field(p, "partition_index", 0))
        if api_version >= 4:
            out += _I.pack(field(p, "current_leader_epoch", -1))
        out += _Q.pack(field(p, "timestamp", 0))
        if api_version == 0:
            out += _I.pack(field(p, "max_num_offsets", 1))

    write_topics(out, field(request, "topics", ()), flex, "name", "partitions", write_partition)
    if flex:
        out.append(0)
    return bytes(out)


def encode_response_frame(api_version: int, header_bytes: bytes, response) -> list:
    flex = api_version >= FIRST_FLEXIBLE
    out = bytearray(b"\x00\x00\x00\x00")
    out += header_bytes
    if api_version >= 2:
        out += _I.pack(field(response, "throttle_time_ms", 0))

    def write_partition(out, p):
        out += _IH.pack(field(p, "partition_index", 0), field(p, "error_code", 0))
        if api_version == 0:
            offsets = field(p, "old_style_offsets", ()) or ()
            out += _I.pack(len(offsets))
            for o in offsets:
                out += _Q.pack(o)
        elif api_version >= 4:
            out += _QQI.pack(field(p, "timestamp", -1), field(p, "offset", -1), field(p, "leader_epoch", -1))
        else:
            out += _QQ.pack(field(p, "timestamp", -1), field(p, "offset", -1))

    write_topics(out, field(response, "topics", ()), flex, "name", "partitions", write_partition)
    if flex:
        out.append(0)
    _I.pack_into(out, 0, len(out) - 4)
    return [out]
