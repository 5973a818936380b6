"""Fetch (API key 1), versions 0–12, hand-written, with zero-copy record payloads.

v13+ name topics by id only and are not served.

Request (Kafka ``FetchRequest.json``; "flex" = v12+):

    replica_id            int32                (-1 for consumers)
    max_wait_ms           int32
    min_bytes             int32
    max_bytes             int32   v3+          (absent = 0x7fffffff)
    isolation_level       int8    v4+
    session_id            int32   v7+          (absent = 0)
    session_epoch         int32   v7+          (absent = -1)
    topics [
      topic               string
      partitions [
        partition             int32
        current_leader_epoch  int32  v9+   (-1)
        fetch_offset          int64
        last_fetched_epoch    int32  v12+  (-1)
        log_start_offset      int64  v5+   (-1; followers only)
        partition_max_bytes   int32
      ]
    ]
    forgotten_topics_data [topic string, partitions [int32]]   v7+
    rack_id               string  v11+         (absent = "")
    cluster_id            tagged 0, nullable string, v12+

Response (``FetchResponse.json``):

    throttle_time_ms      int32   v1+
    error_code            int16   v7+
    session_id            int32   v7+
    responses [
      topic               string
      partitions [
        partition_index        int32
        error_code             int16
        high_watermark         int64
        last_stable_offset     int64   v4+  (-1)
        log_start_offset       int64   v5+  (-1)
        aborted_transactions   nullable [producer_id int64, first_offset int64]  v4+
        preferred_read_replica int32   v11+ (-1)
        records                nullable records
        diverging_epoch (tag 0), current_leader (tag 1), snapshot_id (tag 2): v12+,
          written only when given with non-default values
      ]
    ]

Zero copy: a partition's ``records`` may be ``None``, bytes, a memoryview, or any
payload object with an integer ``size`` (a storage file slice). Payload objects and
bytes-likes of ``INLINE_MAX_BYTES`` or more become their own elements of the
returned buffer list; their ``size`` counts towards the frame's size prefix and the
records length field. Nothing of a payload object is read here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sundial.records.layout import INT32_MAX

from ..primitives import (
    INT32,
    Reader,
    as_byte_view,
    read_count,
    read_string,
    skip_tags,
    write_array_len,
    write_string,
    write_uvarint,
)
from .common import BufferList, field, read_topics, write_topics

FIRST_FLEXIBLE = 12

_I = struct.Struct(">i")
_IQ = struct.Struct(">iq")
_IHQ = struct.Struct(">ihq")
_IHI = struct.Struct(">ihi")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_III = struct.Struct(">iii")
_II = struct.Struct(">ii")
_QI = struct.Struct(">qi")
_IB = struct.Struct(">ib")
_IBII = struct.Struct(">ibii")
_unpack_i32 = INT32.unpack_from

#: Request partition layout per version (fields in wire order, see the module doc).
_PARTITION = {v: struct.Struct(">iqi") for v in range(0, 5)}
_PARTITION.update({v: struct.Struct(">iqqi") for v in range(5, 9)})
_PARTITION.update({v: struct.Struct(">iiqqi") for v in range(9, 12)})
_PARTITION[12] = struct.Struct(">iiqiqi")


@dataclass(slots=True)
class FetchPartition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopic:
    topic: str
    partitions: tuple[FetchPartition, ...]


@dataclass(slots=True)
class ForgottenTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(slots=True)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    rack_id: str
    cluster_id: str | None


def is_request_object(obj) -> bool:
    return isinstance(obj, FetchRequest)


def decode_request(api_version: int, frame, offset: int) -> FetchRequest:
    buf = as_byte_view(frame)
    pos = offset
    v = api_version
    flex = v >= FIRST_FLEXIBLE
    replica_id, max_wait_ms, min_bytes = _III.unpack_from(buf, pos)
    pos += 12
    max_bytes, isolation_level, session_id, session_epoch = INT32_MAX, 0, 0, -1
    if v >= 7:
        max_bytes, isolation_level, session_id, session_epoch = _IBII.unpack_from(buf, pos)
        pos += 13
    elif v >= 4:
        max_bytes, isolation_level = _IB.unpack_from(buf, pos)
        pos += 5
    elif v >= 3:
        max_bytes = _unpack_i32(buf, pos)[0]
        pos += 4
    part_struct = _PARTITION[v]
    part_size = part_struct.size
    unpack_part = part_struct.unpack_from

    def read_partition(buf, pos):
        f = unpack_part(buf, pos)
        if v >= 12:  # partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, max
            return FetchPartition(f[0], f[1], f[2], f[3], f[4], f[5]), pos + part_size
        if v >= 9:  # partition, current_leader_epoch, fetch_offset, log_start_offset, max
            return FetchPartition(f[0], f[1], f[2], -1, f[3], f[4]), pos + part_size
        if v >= 5:  # partition, fetch_offset, log_start_offset, max
            return FetchPartition(f[0], -1, f[1], -1, f[2], f[3]), pos + part_size
        return FetchPartition(f[0], -1, f[1], -1, -1, f[2]), pos + part_size  # partition, fetch_offset, max

    topics, pos = read_topics(buf, pos, flex, part_size + 1 if flex else part_size, read_partition, FetchTopic)
    forgotten = []
    if v >= 7:
        n_forgotten, pos = read_count(buf, pos, flex, 3 if flex else 6)
        for _ in range(n_forgotten):
            topic, pos = read_string(buf, pos, flex)
            count, pos = read_count(buf, pos, flex, 4)
            ids = struct.unpack_from(f">{count}i", buf, pos) if count else ()
            pos += 4 * count
            if flex:
                pos = skip_tags(buf, pos)
            forgotten.append(ForgottenTopic(topic, tuple(ids)))
    rack_id = ""
    if v >= 11:
        rack_id, pos = read_string(buf, pos, flex)
    cluster_id = None
    if flex:
        if buf[pos] != 0:
            reader = Reader(buf, pos)
            tags = reader.tagged_fields()
            if tags and 0 in tags:
                cluster_id = Reader(tags[0]).nullable_string(True)
    return FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id,
                        session_epoch, topics, tuple(forgotten), rack_id, cluster_id)


def encode_request(api_version: int, request) -> bytes:
    """Request body (tests and tools)."""
    v = api_version
    flex = v >= FIRST_FLEXIBLE
    out = bytearray(_III.pack(field(request, "replica_id", -1), field(request, "max_wait_ms", 0),
                              field(request, "min_bytes", 0)))
    if v >= 3:
        out += _I.pack(field(request, "max_bytes", INT32_MAX))
    if v >= 4:
        out += struct.pack(">b", field(request, "isolation_level", 0))
    if v >= 7:
        out += _II.pack(field(request, "session_id", 0), field(request, "session_epoch", -1))

    def write_partition(out, p):
        out += _I.pack(field(p, "partition", 0))
        if v >= 9:
            out += _I.pack(field(p, "current_leader_epoch", -1))
        out += _Q.pack(field(p, "fetch_offset", 0))
        if v >= 12:
            out += _I.pack(field(p, "last_fetched_epoch", -1))
        if v >= 5:
            out += _Q.pack(field(p, "log_start_offset", -1))
        out += _I.pack(field(p, "partition_max_bytes", 0))

    write_topics(out, field(request, "topics", ()), flex, "topic", "partitions", write_partition)
    if v >= 7:
        forgotten = field(request, "forgotten_topics_data", ()) or ()
        write_array_len(out, len(forgotten), flex)
        for f in forgotten:
            write_string(out, field(f, "topic", ""), flex)
            ids = field(f, "partitions", ())
            write_array_len(out, len(ids), flex)
            for i in ids:
                out += _I.pack(i)
            if flex:
                out.append(0)
    if v >= 11:
        write_string(out, field(request, "rack_id", ""), flex)
    if flex:
        cluster_id = field(request, "cluster_id", None)
        if cluster_id is None:
            out.append(0)
        else:
            value = bytearray()
            write_string(value, cluster_id, True)
            out += b"\x01\x00"
            write_uvarint(out, len(value))
            out += value
    return bytes(out)


def _tag_struct(value, layout: struct.Struct, names: tuple[str, str]) -> bytes | None:
    """Encoded tagged struct (fields + empty tags) or None when absent/default."""
    if value is None:
        return None
    a = field(value, names[0], -1)
    b = field(value, names[1], -1)
    if a == -1 and b == -1:
        return None
    return layout.pack(a, b) + b"\x00"


_TAG_STRUCTS = (
    (0, "diverging_epoch", _IQ, ("epoch", "end_offset")),
    (1, "current_leader", _II, ("leader_id", "leader_epoch")),
    (2, "snapshot_id", _QI, ("end_offset", "epoch")),
)


def _write_partition_tags(out: bytearray, p) -> None:
    """A response partition's tag section: the tagged structs it has (or none)."""
    tags = None
    for tag, name, layout, names in _TAG_STRUCTS:
        encoded = _tag_struct(field(p, name, None), layout, names)
        if encoded is not None:
            if tags is None:
                tags = []
            tags.append((tag, encoded))
    if tags is None:
        out.append(0)
    else:
        write_uvarint(out, len(tags))
        for tag, encoded in tags:
            write_uvarint(out, tag)
            write_uvarint(out, len(encoded))
            out += encoded


def encode_response_frame(api_version: int, header_bytes: bytes, response) -> list:
    v = api_version
    flex = v >= FIRST_FLEXIBLE
    buf = BufferList(header_bytes)
    out = buf.cur
    if v >= 7:
        out += _IHI.pack(field(response, "throttle_time_ms", 0), field(response, "error_code", 0),
                         field(response, "session_id", 0))
    elif v >= 1:
        out += _I.pack(field(response, "throttle_time_ms", 0))

    def write_partition(out, p):
        out += _IHQ.pack(field(p, "partition_index", 0), field(p, "error_code", 0), field(p, "high_watermark", 0))
        if v >= 4:
            if v >= 5:
                out += _QQ.pack(field(p, "last_stable_offset", -1), field(p, "log_start_offset", -1))
            else:
                out += _Q.pack(field(p, "last_stable_offset", -1))
            aborted = field(p, "aborted_transactions", ())
            if aborted is None:
                write_array_len(out, None, flex)
            else:
                write_array_len(out, len(aborted), flex)
                for a in aborted:
                    if isinstance(a, tuple):
                        out += _QQ.pack(a[0], a[1])
                    else:
                        out += _QQ.pack(field(a, "producer_id", 0), field(a, "first_offset", 0))
                    if flex:
                        out.append(0)
        if v >= 11:
            out += _I.pack(field(p, "preferred_read_replica", -1))
        out = buf.records(field(p, "records", b""), flex)
        if flex:
            _write_partition_tags(out, p)
        return out

    out = write_topics(out, field(response, "responses", ()), flex, "topic", "partitions", write_partition,
                       partition_tags=False)
    if flex:
        out.append(0)
    return buf.finish()
