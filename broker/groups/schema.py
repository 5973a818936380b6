"""Kafka's ``__consumer_offsets`` record keys and values, byte for byte.

Sundial stores committed offsets and group metadata as records of its internal
``__consumer_offsets`` topic using Apache Kafka's own schemas
(``group-coordinator/src/main/resources/common/message/*.json``), so Kafka's tools
(``kafka-console-consumer --formatter ...OffsetsMessageFormatter``, kcat with a
decoder) can read them. Every key and value starts with an int16 version; strings
are int16-length UTF-8 (-1 = null), bytes int32-length, arrays int32 count. Version 4
values are flexible (unsigned-varint ``N+1`` lengths and counts, a tagged-field
section after each struct); Sundial writes v3 and v1 and reads v0–v4.

Keys::

    OffsetCommitKey     version 0 or 1 (Kafka writes 1): group string, topic string, partition int32
    GroupMetadataKey    version 2:                        group string

Values (a null value is a tombstone: the key was deleted)::

    OffsetCommitValue   v0: offset int64, metadata string, commit_timestamp int64
                        v1: v0 + expire_timestamp int64   (written when a v2-v4 OffsetCommit set
                                                           retention_time_ms)
                        v2: same fields as v0
                        v3: offset int64, leader_epoch int32, metadata string, commit_timestamp int64
                        v4: v3, flexible
    GroupMetadataValue  protocol_type string, generation int32, protocol nullable string,
                        leader nullable string, current_state_timestamp int64 (v2+),
                        members [member_id string, group_instance_id nullable string (v3+),
                                 client_id string, client_host string, rebalance_timeout int32 (v1+),
                                 session_timeout int32, subscription bytes, assignment bytes]

Decoding raises :class:`SchemaError` (never anything else) on any malformed input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from sundial.protocol.primitives import INT16, INT32, INT64

from ..coordinator_schema import MessageReader, SchemaError
from ..coordinator_schema import encode_string as _str

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2



@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1  # -1: none (Kafka's Option.empty)


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes

    def as_dict(self) -> dict:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "session_timeout_ms": self.session_timeout_ms,
                "subscription": self.subscription, "assignment": self.assignment}


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: tuple[MemberRecord, ...] = field(default_factory=tuple)


# --- writer -------------------------------------------------------------------------------

def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return INT32.pack(-1)
    return INT32.pack(len(value)) + bytes(value)


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + INT32.pack(partition)


def encode_group_key(group: str) -> bytes:
    return INT16.pack(GROUP_METADATA_KEY_VERSION) + _str(group)


def encode_offset_value(value: OffsetValue) -> bytes:
    """v1 when an expire timestamp is set (old OffsetCommit retention), else v3 (Kafka's choice)."""
    if value.expire_timestamp_ms >= 0:
        return (INT16.pack(1) + INT64.pack(value.offset) + _str(value.metadata or "")
                + INT64.pack(value.commit_timestamp_ms) + INT64.pack(value.expire_timestamp_ms))
    return (INT16.pack(3) + INT64.pack(value.offset) + INT32.pack(value.leader_epoch) + _str(value.metadata or "")
            + INT64.pack(value.commit_timestamp_ms))


def encode_group_value(value: GroupValue) -> bytes:
    parts = [INT16.pack(3), _str(value.protocol_type or ""), INT32.pack(value.generation), _str(value.protocol),
             _str(value.leader), INT64.pack(value.current_state_timestamp_ms), INT32.pack(len(value.members))]
    for m in value.members:
        parts += [_str(m.member_id), _str(m.group_instance_id), _str(m.client_id), _str(m.client_host),
                  INT32.pack(m.rebalance_timeout_ms), INT32.pack(m.session_timeout_ms), _bytes(m.subscription),
                  _bytes(m.assignment)]
    return b"".join(parts)


# --- reader -------------------------------------------------------------------------------

def decode_key(raw: bytes | None) -> OffsetKey | GroupKey:
    if raw is None:
        raise SchemaError("record without a key")
    try:
        r = MessageReader(bytes(raw))
        version = r.i16()
        if version in (0, 1):
            key: OffsetKey | GroupKey = OffsetKey(r.string(), r.string(), r.i32())
        elif version == 2:
            key = GroupKey(r.string())
        else:
            raise SchemaError(f"unknown key version {version}")
        r.done()
        return key
    except struct.error as exc:  # pragma: no cover - _take guards lengths
        raise SchemaError(str(exc)) from None


def _value_reader(raw: bytes, schema: str) -> tuple[MessageReader, int]:
    """A reader past the value's version (v0-v4; v4 is flexible) and that version."""
    r = MessageReader(bytes(raw))
    version = r.i16()
    if not 0 <= version <= 4:
        raise SchemaError(f"unknown {schema} version {version}")
    r.flexible = version >= 4
    return r, version


def decode_offset_value(raw: bytes) -> OffsetValue:
    r, version = _value_reader(raw, "OffsetCommitValue")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.tags()
    r.done()
    return OffsetValue(offset, leader_epoch, metadata or "", commit_ts, expire_ts)


def decode_group_value(raw: bytes) -> GroupValue:
    r, version = _value_reader(raw, "GroupMetadataValue")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tags()
        members.append(MemberRecord(member_id, instance, client_id, client_host, rebalance_timeout,
                                    session_timeout, subscription, assignment))
    r.tags()
    r.done()
    return GroupValue(protocol_type or "", generation, protocol, leader, state_ts, tuple(members))
