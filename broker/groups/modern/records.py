"""Kafka's consumer-group (KIP-848) records of ``__consumer_offsets``, byte for byte.

Layouts are Apache Kafka's coordinator record schemas
(``group-coordinator/src/main/resources/common/message/ConsumerGroup*.json``), framed
as Kafka's ``CoordinatorRecordSerde`` frames them:

* **key** = int16 record type, then the key struct, *not* flexible: strings are int16
  length + UTF-8 (the record type was the key "version" before Kafka 4.0; the bytes are
  the same);
* **value** = int16 value version (always 0), then the value struct, *flexible*:
  compact strings, bytes and arrays (unsigned varint ``N + 1``; 0 = null) and a
  tagged-field section after every struct, nested ones included;
* a null value is a tombstone: the key was deleted.

======  ==============================================  ==========================================
 type    key fields                                      value fields (tagged: ``tag N``)
======  ==============================================  ==========================================
 3       GroupId                                         Epoch int32; MetadataHash int64 (tag 0,
                                                         default 0, Kafka 4.1+)
 4       GroupId                                         Topics [TopicId uuid, TopicName,
                                                         NumPartitions int32, PartitionMetadata
                                                         [Partition int32, Racks [string]]]
 5       GroupId, MemberId                               InstanceId?, RackId?, ClientId,
                                                         ClientHost, SubscribedTopicNames [string],
                                                         SubscribedTopicRegex?, RebalanceTimeoutMs
                                                         int32, ServerAssignor?,
                                                         ClassicMemberMetadata? (tag 0)
 6       GroupId                                         AssignmentEpoch int32
 7       GroupId, MemberId                               TopicPartitions [TopicId, Partitions]
 8       GroupId, MemberId                               MemberEpoch int32, PreviousMemberEpoch
                                                         int32, State int8, AssignedPartitions
                                                         [TopicId, Partitions],
                                                         PartitionsPendingRevocation (same)
 16      GroupId, RegularExpression                      Topics [string], Version int64,
                                                         Timestamp int64
======  ==============================================  ==========================================

``?`` = nullable. ``ClassicMemberMetadata`` = SessionTimeoutMs int32, SupportedProtocols
[Name string, Metadata bytes]; as a nullable tagged struct its tag payload starts with a
uvarint presence marker (0 = null, else present). Its JSON ``"default": null`` leaves
Kafka's generator with the *empty struct* as default, so Kafka writes tag 0 with the null
marker for a consumer-protocol member and omits the tag for the empty struct; decoding an
absent tag 0 gives the empty struct, as Kafka's reader does.

Versions: every value is version 0; Sundial writes what Kafka 4.1/4.2 writes. It reads
the layouts of Kafka 3.8 through 4.2 (Kafka 3.8 fixed them; 3.6/3.7 early-access groups
used incompatible layouts under the same version numbers, which Kafka 3.8+ cannot read
either). Tagged fields it does not know are skipped, as a Kafka 4.2 reader skips them:
Kafka 4.3's AssignmentTimestamp (type 6, tag 0) and per-partition AssignmentEpochs
(type 8, tag 0 of each TopicPartitions) among them. Type 4 is deprecated since Kafka 4.1
(the metadata hash replaced it): Kafka 4.1+ writes only its tombstone.

Sets are written in a stable order: topics by topic id, partitions ascending (Kafka
writes its hash sets' iteration order, which readers never depend on); names lists keep
the given order (Kafka sorts the subscribed topic names before writing them). A record
naming one topic id twice in an assignment is refused, as Kafka's loader refuses it;
repeated partitions collapse.

Decoding raises :class:`SchemaError` (never anything else) on malformed input: truncated
or trailing bytes, unknown record types or value versions, nulls in non-nullable fields,
strings over 32767 bytes, impossible counts. Encoding raises it for values that do not
fit their fields.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Callable, Mapping, Union

from sundial.protocol.errors import ProtocolError
from sundial.protocol.primitives import (
    INT8,
    INT16,
    INT32,
    INT64,
    Reader,
    write_array_len,
    write_bytes,
    write_string,
    write_tagged_fields,
    write_uvarint,
)

from ...coordinator_schema import SchemaError

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

#: The value version Kafka writes for every record type here.
VALUE_VERSION = 0
#: Kafka's limit on any string field (its generated code refuses longer ones both ways).
MAX_STRING_BYTES = 0x7FFF

Assignment = Mapping[uuid.UUID, frozenset[int]]


class MemberState(IntEnum):
    """``ConsumerGroupCurrentMemberAssignmentValue.State`` (Kafka ``MemberState``)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


# --- keys ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regular_expression: str


# --- values -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...] = ()  # Kafka 3.x filled it; empty since 4.0


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


Key = Union[ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupMemberMetadataKey,
            ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
            ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupRegularExpressionKey]
Value = Union[ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataValue, ConsumerGroupMemberMetadataValue,
              ConsumerGroupTargetAssignmentMetadataValue, ConsumerGroupTargetAssignmentMemberValue,
              ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupRegularExpressionValue]


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One ``__consumer_offsets`` record; ``value`` None is a tombstone."""

    key: Key
    value: Value | None


# --- writer -------------------------------------------------------------------------------------

def _put_str(out: bytearray, value: str | None, compact: bool = True) -> None:
    if value is not None and len(value) * 4 > MAX_STRING_BYTES and len(value.encode("utf-8")) > MAX_STRING_BYTES:
        raise SchemaError(f"string of {len(value.encode('utf-8'))} bytes is longer than {MAX_STRING_BYTES}")
    write_string(out, value, compact)


def _put_strings(out: bytearray, values: tuple[str, ...]) -> None:
    write_array_len(out, len(values), True)
    for v in values:
        _put_str(out, v)


def _put_assignment(out: bytearray, assignment: Assignment) -> None:
    """[]TopicPartitions: topics by id, partitions ascending, each struct with empty tags."""
    write_array_len(out, len(assignment), True)
    for topic_id in sorted(assignment):
        partitions = sorted(assignment[topic_id])
        out += topic_id.bytes
        write_array_len(out, len(partitions), True)
        for p in partitions:
            out += INT32.pack(p)
        write_tagged_fields(out, None)


def _classic_payload(c: ClassicMemberMetadata | None) -> bytes | None:
    """Tag 0 of a member value: None when omitted (the empty struct, Kafka's default)."""
    if c is None:
        return b"\x00"
    if c == ClassicMemberMetadata(0, ()):
        return None
    out = bytearray()
    write_uvarint(out, 1)
    out += INT32.pack(c.session_timeout_ms)
    write_array_len(out, len(c.supported_protocols), True)
    for proto in c.supported_protocols:
        _put_str(out, proto.name)
        write_bytes(out, bytes(proto.metadata), True)
        write_tagged_fields(out, None)
    write_tagged_fields(out, None)
    return bytes(out)


def _encode_value(out: bytearray, value) -> None:
    tags: dict[int, bytes] = {}
    if isinstance(value, ConsumerGroupMetadataValue):
        out += INT32.pack(value.epoch)
        if value.metadata_hash != 0:
            tags[0] = INT64.pack(value.metadata_hash)
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        write_array_len(out, len(value.topics), True)
        for t in value.topics:
            out += t.topic_id.bytes
            _put_str(out, t.topic_name)
            out += INT32.pack(t.num_partitions)
            write_array_len(out, len(t.partition_metadata), True)
            for pm in t.partition_metadata:
                out += INT32.pack(pm.partition)
                _put_strings(out, pm.racks)
                write_tagged_fields(out, None)
            write_tagged_fields(out, None)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        _put_str(out, value.instance_id)
        _put_str(out, value.rack_id)
        _put_str(out, value.client_id)
        _put_str(out, value.client_host)
        _put_strings(out, value.subscribed_topic_names)
        _put_str(out, value.subscribed_topic_regex)
        out += INT32.pack(value.rebalance_timeout_ms)
        _put_str(out, value.server_assignor)
        classic = _classic_payload(value.classic_member_metadata)
        if classic is not None:
            tags[0] = classic
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        out += INT32.pack(value.assignment_epoch)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        _put_assignment(out, value.topic_partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        out += INT32.pack(value.member_epoch) + INT32.pack(value.previous_member_epoch) + INT8.pack(value.state)
        _put_assignment(out, value.assigned_partitions)
        _put_assignment(out, value.partitions_pending_revocation)
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        _put_strings(out, value.topics)
        out += INT64.pack(value.version) + INT64.pack(value.timestamp_ms)
    else:  # pragma: no cover - _TYPES pairs keys with these classes
        raise SchemaError(f"not a consumer-group record value: {type(value).__name__}")
    write_tagged_fields(out, tags)


# --- reader -------------------------------------------------------------------------------------

def _str(r: Reader, compact: bool = True) -> str:
    s = r.string(compact)
    if len(s) * 4 > MAX_STRING_BYTES and len(s.encode("utf-8")) > MAX_STRING_BYTES:
        raise SchemaError(f"string longer than {MAX_STRING_BYTES} bytes")
    return s


def _nullable_str(r: Reader) -> str | None:
    s = r.nullable_string(True)
    if s is not None and len(s) * 4 > MAX_STRING_BYTES and len(s.encode("utf-8")) > MAX_STRING_BYTES:
        raise SchemaError(f"string longer than {MAX_STRING_BYTES} bytes")
    return s


def _count(r: Reader, min_item_bytes: int) -> int:
    return r.array_count(True, min_item_bytes, nullable=False)


def _strings(r: Reader) -> tuple[str, ...]:
    return tuple(_str(r) for _ in range(_count(r, 1)))


def _assignment(r: Reader) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(_count(r, 18)):  # uuid, partitions count, tags
        topic_id = uuid.UUID(bytes=r.uuid())
        partitions = frozenset(r.int32() for _ in range(_count(r, 4)))
        r.tagged_fields()  # Kafka 4.3 adds AssignmentEpochs here (tag 0); 4.2 skips it
        if topic_id in out:
            raise SchemaError(f"topic id {topic_id} appears twice in one assignment")
        out[topic_id] = partitions
    return out


def _classic(payload: memoryview) -> ClassicMemberMetadata | None:
    r = Reader(payload)
    if r.uvarint() == 0:
        value = None
    else:
        session_timeout_ms = r.int32()
        protocols = []
        for _ in range(_count(r, 3)):
            name = _str(r)
            metadata = bytes(r.bytes_view(True, nullable=False))
            r.tagged_fields()
            protocols.append(ClassicProtocol(name, metadata))
        r.tagged_fields()
        value = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
    if r.remaining():
        raise SchemaError("tagged field ClassicMemberMetadata is longer than its struct")
    return value


def _tags(r: Reader) -> dict[int, memoryview]:
    return r.tagged_fields() or {}


def _decode_value(record_type: int, r: Reader):
    if record_type == CONSUMER_GROUP_METADATA:
        epoch = r.int32()
        raw_hash = _tags(r).get(0)
        if raw_hash is not None and len(raw_hash) != INT64.size:
            raise SchemaError(f"tagged field MetadataHash is {len(raw_hash)} bytes, not 8")
        return ConsumerGroupMetadataValue(epoch, INT64.unpack(raw_hash)[0] if raw_hash is not None else 0)
    if record_type == CONSUMER_GROUP_PARTITION_METADATA:
        topics = []
        for _ in range(_count(r, 23)):  # uuid, name, int32, racks count, tags
            topic_id = uuid.UUID(bytes=r.uuid())
            name = _str(r)
            num_partitions = r.int32()
            racks = []
            for _ in range(_count(r, 6)):
                partition = r.int32()
                racks.append(PartitionMetadata(partition, _strings(r)))
                r.tagged_fields()
            r.tagged_fields()
            topics.append(TopicMetadata(topic_id, name, num_partitions, tuple(racks)))
        r.tagged_fields()
        return ConsumerGroupPartitionMetadataValue(tuple(topics))
    if record_type == CONSUMER_GROUP_MEMBER_METADATA:
        instance_id, rack_id = _nullable_str(r), _nullable_str(r)
        client_id, client_host = _str(r), _str(r)
        topic_names = _strings(r)
        regex = _nullable_str(r)
        rebalance_timeout_ms = r.int32()
        assignor = _nullable_str(r)
        raw_classic = _tags(r).get(0)
        # An absent tag 0 reads as Kafka's default: the empty struct (see the module doc).
        classic = _classic(raw_classic) if raw_classic is not None else ClassicMemberMetadata(0, ())
        return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host, topic_names, regex,
                                                assignor, rebalance_timeout_ms, classic)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        epoch = r.int32()
        r.tagged_fields()  # Kafka 4.3 adds AssignmentTimestamp (tag 0); 4.2 skips it
        return ConsumerGroupTargetAssignmentMetadataValue(epoch)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        assignment = _assignment(r)
        r.tagged_fields()
        return ConsumerGroupTargetAssignmentMemberValue(assignment)
    if record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        member_epoch, previous_epoch, state = r.int32(), r.int32(), r.int8()
        assigned, pending = _assignment(r), _assignment(r)
        r.tagged_fields()
        return ConsumerGroupCurrentMemberAssignmentValue(member_epoch, previous_epoch, state, assigned, pending)
    topics = _strings(r)
    version_, timestamp_ms = r.int64(), r.int64()
    r.tagged_fields()
    return ConsumerGroupRegularExpressionValue(topics, version_, timestamp_ms)


def record_type_of(key_bytes) -> int | None:
    """The int16 record type a ``__consumer_offsets`` key starts with (None when shorter)."""
    if key_bytes is None or len(key_bytes) < 2:
        return None
    return INT16.unpack_from(key_bytes, 0)[0]


class RecordFamily:
    """The framing every group record of ``__consumer_offsets`` shares, for one family of record types.

    A key is the int16 record type then the key's strings (classic int16 lengths); a value is the
    int16 value version (always :data:`VALUE_VERSION`) then the value struct, which
    ``encode_value(out, value)`` appends and ``decode_value(record_type, reader)`` reads; a null
    value is a tombstone. ``types`` maps each record type to its (key class, value class);
    ``record`` builds a record from (key, value); ``kind`` names the family in errors.
    """

    def __init__(self, kind: str, types: dict[int, tuple[type, type]], record: type,
                 encode_value: Callable[[bytearray, object], None],
                 decode_value: Callable[[int, Reader], object]) -> None:
        self._kind = kind
        self._types = types
        self._key_types: dict[type, tuple[int, type]] = {k: (t, v) for t, (k, v) in types.items()}
        self._record = record
        self._encode_value = encode_value
        self._decode_value = decode_value
        self.record_types = frozenset(types)

    def encode_key(self, key) -> bytes:
        """The record type, then the key's strings (classic int16 lengths)."""
        entry = self._key_types.get(type(key))
        if entry is None:
            raise SchemaError(f"not a {self._kind} record key: {type(key).__name__}")
        out = bytearray(INT16.pack(entry[0]))
        for f in fields(key):
            _put_str(out, getattr(key, f.name), compact=False)
        return bytes(out)

    def encode_record(self, record) -> tuple[bytes, bytes | None]:
        """(key bytes, value bytes or None for a tombstone), as Kafka 4.1/4.2 writes them."""
        try:
            key_bytes = self.encode_key(record.key)
            value = record.value
            if value is None:
                return key_bytes, None
            expected = self._key_types[type(record.key)][1]
            if type(value) is not expected:
                raise SchemaError(f"a {type(record.key).__name__} takes a {expected.__name__}, "
                                  f"not a {type(value).__name__}")
            out = bytearray(INT16.pack(VALUE_VERSION))
            self._encode_value(out, value)
            return key_bytes, bytes(out)
        except (struct.error, OverflowError, UnicodeEncodeError) as exc:
            raise SchemaError(f"{type(record).__name__} does not fit its fields: {exc}") from None

    def is_key(self, key_bytes) -> bool:
        """Whether the key is one of this family's record types."""
        return record_type_of(key_bytes) in self._types

    def decode_record(self, key_bytes, value_bytes):
        """A record of this family; ``value_bytes`` None is a tombstone. Raises SchemaError."""
        if key_bytes is None:
            raise SchemaError("record without a key")
        try:
            r = Reader(bytes(key_bytes))
            record_type = r.int16()
            entry = self._types.get(record_type)
            if entry is None:
                raise SchemaError(f"record type {record_type} is not a {self._kind} record")
            key_cls = entry[0]
            key = key_cls(*(_str(r, compact=False) for _ in fields(key_cls)))
            if r.remaining():
                raise SchemaError(f"{r.remaining()} trailing bytes after the key")
            if value_bytes is None:
                return self._record(key, None)
            r = Reader(bytes(value_bytes))
            version = r.int16()
            if version != VALUE_VERSION:
                raise SchemaError(f"unknown value version {version} for record type {record_type}")
            value = self._decode_value(record_type, r)
            if r.remaining():
                raise SchemaError(f"{r.remaining()} trailing bytes after the value")
            return self._record(key, value)
        except ProtocolError as exc:
            raise SchemaError(str(exc)) from None


#: record type -> (key class, value class)
_TYPES: dict[int, tuple[type, type]] = {
    CONSUMER_GROUP_METADATA: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    CONSUMER_GROUP_PARTITION_METADATA: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    CONSUMER_GROUP_MEMBER_METADATA: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (ConsumerGroupTargetAssignmentMetadataKey,
                                                ConsumerGroupTargetAssignmentMetadataValue),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (ConsumerGroupTargetAssignmentMemberKey,
                                              ConsumerGroupTargetAssignmentMemberValue),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (ConsumerGroupCurrentMemberAssignmentKey,
                                               ConsumerGroupCurrentMemberAssignmentValue),
    CONSUMER_GROUP_REGULAR_EXPRESSION: (ConsumerGroupRegularExpressionKey, ConsumerGroupRegularExpressionValue),
}
_FAMILY = RecordFamily("consumer-group", _TYPES, CoordinatorRecord, _encode_value, _decode_value)

#: The record types of this module.
RECORD_TYPES = _FAMILY.record_types


def encode_key(key: Key) -> bytes:
    """The record type, then the key's strings (classic int16 lengths)."""
    return _FAMILY.encode_key(key)


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone), as Kafka 4.1/4.2 writes them."""
    return _FAMILY.encode_record(record)


def is_consumer_group_key(key_bytes) -> bool:
    """Whether the key is one of this module's record types (3-8, 16)."""
    return _FAMILY.is_key(key_bytes)


def decode_record(key_bytes, value_bytes) -> CoordinatorRecord:
    """A record of types 3-8 or 16; ``value_bytes`` None is a tombstone. Raises SchemaError."""
    return _FAMILY.decode_record(key_bytes, value_bytes)
