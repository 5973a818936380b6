"""Kafka's share-group (KIP-932) records of ``__consumer_offsets``, byte for byte.

Layouts are Apache Kafka's coordinator record schemas
(``group-coordinator/src/main/resources/common/message/ShareGroup*.json``), framed as every
record of the consumer-protocol groups is (:mod:`broker.groups.modern.records`): the key is the
int16 record type then the key's strings with int16 lengths (not flexible); the value is the
int16 value version (always 0) then a flexible struct (compact strings and arrays, a tagged-field
section after every struct); a null value is a tombstone.

======  ==============================================  ==========================================
 type    key fields                                      value fields
======  ==============================================  ==========================================
 9       GroupId                                         (ShareGroupPartitionMetadata: deprecated
                                                         since Kafka 4.1, kept as bytes)
 10      GroupId, MemberId                               RackId?, ClientId, ClientHost,
                                                         SubscribedTopicNames [string]
 11      GroupId                                         Epoch int32, MetadataHash int64
 12      GroupId                                         AssignmentEpoch int32
 13      GroupId, MemberId                               TopicPartitions [TopicId, Partitions]
 14      GroupId, MemberId                               MemberEpoch int32, PreviousMemberEpoch
                                                         int32, State int8, AssignedPartitions
                                                         [TopicId, Partitions]
 15      GroupId                                         (ShareGroupStatePartitionMetadata: the
                                                         share-partitions whose state the share
                                                         coordinator initialized; kept as bytes)
======  ==============================================  ==========================================

``?`` = nullable. Kafka 4.0 (early access) wrote type 11 without ``MetadataHash``; both layouts
are read (the 4.0 one gives hash 0). Types 9 and 15 are read and kept as their value bytes
(:class:`OpaqueValue`) so that snapshots of the offsets log carry them unchanged and a group's
deletion tombstones them; Sundial writes neither (the share coordinator's own store,
``__share_group_state``, says which share-partitions have state). Unknown tagged fields are
skipped, as a Kafka reader skips them.

Sets are written in a stable order: topics by topic id, partitions ascending; subscribed topic
names sorted (as Kafka sorts them). Decoding raises :class:`SchemaError` (never anything else)
on malformed input.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Mapping, Union

from sundial.protocol.primitives import INT8, INT32, INT64, Reader, write_tagged_fields

from ...coordinator_schema import SchemaError
from ..modern.records import (  # the byte rules and framing of the group records, one home
    RecordFamily, _assignment, _nullable_str, _put_assignment, _put_str, _put_strings, _str, _strings)

SHARE_GROUP_PARTITION_METADATA = 9
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15


Assignment = Mapping[uuid.UUID, frozenset[int]]


# --- keys ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ShareGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str


# --- values -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OpaqueValue:
    """A value Sundial keeps as Kafka wrote it (types 9 and 15): the bytes after the version."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: Assignment


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment


Key = Union[ShareGroupPartitionMetadataKey, ShareGroupMemberMetadataKey, ShareGroupMetadataKey,
            ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMemberKey,
            ShareGroupCurrentMemberAssignmentKey, ShareGroupStatePartitionMetadataKey]
Value = Union[OpaqueValue, ShareGroupMemberMetadataValue, ShareGroupMetadataValue,
              ShareGroupTargetAssignmentMetadataValue, ShareGroupTargetAssignmentMemberValue,
              ShareGroupCurrentMemberAssignmentValue]


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One share-group record of ``__consumer_offsets``; ``value`` None is a tombstone."""

    key: Key
    value: Value | None


# --- writer -------------------------------------------------------------------------------------

def _encode_value(out: bytearray, value) -> None:
    if isinstance(value, OpaqueValue):
        out += value.data
        return
    if isinstance(value, ShareGroupMemberMetadataValue):
        _put_str(out, value.rack_id)
        _put_str(out, value.client_id)
        _put_str(out, value.client_host)
        _put_strings(out, tuple(sorted(value.subscribed_topic_names)))
    elif isinstance(value, ShareGroupMetadataValue):
        out += INT32.pack(value.epoch) + INT64.pack(value.metadata_hash)
    elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        out += INT32.pack(value.assignment_epoch)
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        _put_assignment(out, value.topic_partitions)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        out += INT32.pack(value.member_epoch) + INT32.pack(value.previous_member_epoch) + INT8.pack(value.state)
        _put_assignment(out, value.assigned_partitions)
    else:  # pragma: no cover - _TYPES pairs keys with these classes
        raise SchemaError(f"not a share-group record value: {type(value).__name__}")
    write_tagged_fields(out, None)


# --- reader -------------------------------------------------------------------------------------

def _decode_value(record_type: int, r: Reader):
    if record_type in (SHARE_GROUP_PARTITION_METADATA, SHARE_GROUP_STATE_PARTITION_METADATA):
        data = bytes(r.buf[r.pos:r.end])
        r.pos = r.end
        return OpaqueValue(data)
    if record_type == SHARE_GROUP_MEMBER_METADATA:
        rack_id = _nullable_str(r)
        client_id, client_host = _str(r), _str(r)
        names = _strings(r)
        r.tagged_fields()
        return ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names)
    if record_type == SHARE_GROUP_METADATA:
        epoch = r.int32()
        # Kafka 4.0's early-access layout ends here (the tagged-field section is one byte).
        metadata_hash = r.int64() if r.remaining() > 1 else 0
        r.tagged_fields()
        return ShareGroupMetadataValue(epoch, metadata_hash)
    if record_type == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        epoch = r.int32()
        r.tagged_fields()
        return ShareGroupTargetAssignmentMetadataValue(epoch)
    if record_type == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        assignment = _assignment(r)
        r.tagged_fields()
        return ShareGroupTargetAssignmentMemberValue(assignment)
    member_epoch, previous_epoch, state = r.int32(), r.int32(), r.int8()
    assigned = _assignment(r)
    r.tagged_fields()
    return ShareGroupCurrentMemberAssignmentValue(member_epoch, previous_epoch, state, assigned)


#: record type -> (key class, value class)
_TYPES: dict[int, tuple[type, type]] = {
    SHARE_GROUP_PARTITION_METADATA: (ShareGroupPartitionMetadataKey, OpaqueValue),
    SHARE_GROUP_MEMBER_METADATA: (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
    SHARE_GROUP_METADATA: (ShareGroupMetadataKey, ShareGroupMetadataValue),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: (ShareGroupTargetAssignmentMetadataKey,
                                             ShareGroupTargetAssignmentMetadataValue),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: (ShareGroupCurrentMemberAssignmentKey,
                                            ShareGroupCurrentMemberAssignmentValue),
    SHARE_GROUP_STATE_PARTITION_METADATA: (ShareGroupStatePartitionMetadataKey, OpaqueValue),
}
_FAMILY = RecordFamily("share-group", _TYPES, ShareRecord, _encode_value, _decode_value)
RECORD_TYPES = _FAMILY.record_types


def encode_key(key: Key) -> bytes:
    return _FAMILY.encode_key(key)


def encode_record(record: ShareRecord) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone), as Kafka 4.1/4.2 writes them."""
    return _FAMILY.encode_record(record)


def is_share_group_key(key_bytes) -> bool:
    """Whether the key is one of this module's record types (9-15)."""
    return _FAMILY.is_key(key_bytes)


def decode_record(key_bytes, value_bytes) -> ShareRecord:
    """A record of types 9-15; ``value_bytes`` None is a tombstone. Raises SchemaError."""
    return _FAMILY.decode_record(key_bytes, value_bytes)
