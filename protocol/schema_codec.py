"""Control-plane codec through kafka-python 3's schema classes.

This is the only module that imports ``kafka.protocol`` (tests/unit/test_layering.py
checks it), so replacing kafka-python later touches one file.

kafka-python 3 ships Apache Kafka 4.x JSON message schemas and generates a flat
encode/decode function per (struct, version) from them. The Kafka 4 group APIs it lacks
(ConsumerGroupHeartbeat/Describe, the share-group APIs 76–79 and 90–92) are Kafka 4.2's
JSON in ``protocol/schemas``, loaded through the same machinery (``ApiMessage`` with
``load_json=``), so they decode and encode exactly like the bundled ones. ``ApiMessageData`` lowers
every schema's minimum version to 0, and the 4.x JSON still describes most fields
that older versions had, so versions below the 4.x ``validVersions`` encode as long
as their fields are in the JSON; each version listed in
``protocol.api_keys.SUPPORTED_VERSIONS`` was checked byte for byte against
``kafka.protocol.old`` (independent hand-written structs) in the tests.

Decoding (``decode_request_body``): the request body starts after the header; the
generated decoder runs on a ``memoryview`` of the frame. Its failures (struct.error,
IndexError, ValueError, UnicodeDecodeError, ...) become ``ProtocolError``; a decoder
that ran past the end of the frame (kafka-python slices strings without checking
their length) is caught by comparing the final position with the frame length; and
a non-nullable string/bytes/array/struct that arrived as null is refused, as Kafka's
generated readers do. The result is kafka-python's data object: attributes carry
Kafka's field names in snake_case; fields outside the request's version read as
their schema default.

Encoding (``encode_response_body``): the broker passes a nested ``dict`` with the
response schema's snake_case names (or a kafka-python object). Fields the version
lacks are dropped, missing fields take the schema default (a missing nullable struct,
such as ConsumerGroupHeartbeat's ``assignment``, is null), and a name the schema
does not have at all raises ``ValueError`` (a broker bug, never silently dropped).
Tagged fields equal to their default (a struct equal to its default-constructed
value included) are omitted, as Apache Kafka's generated serializers do:
librdkafka before 2.2.0 (Debian's kcat 1.7.1) cannot skip tagged fields.
UUID fields accept ``uuid.UUID``, 16 raw bytes, a hex string or None (= zero UUID).
Authorized-operations fields take Kafka's int32 bit set (-2**31 = not requested) or
kafka-python's set of bit numbers, under Kafka's names
(``cluster_authorized_operations``, ``topic_authorized_operations``) or kafka-python's
(``authorized_operations``).

ApiVersions quirks: responses always use response header v0 (handled by
``protocol.header``); an ApiVersions request of a version the broker does not serve
gets a **v0 body** with UNSUPPORTED_VERSION (35) and the api_keys table
(``encode_api_versions_fallback``), so the client can retry with a version both
sides know.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.data_container import DataContainer
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer
from kafka.protocol.schemas.fields.codecs.types import UUID as _UUIDCodec
from kafka.protocol.schemas.fields.codecs.types import BitField as _BitFieldCodec

from . import schemas as _kafka4_schemas
from .api_keys import ApiKey
from .errors import ErrorCode, ProtocolError

_SIZE = struct.Struct(">i")


# Kafka 4.2 messages kafka-python 3.0.12 does not ship: Kafka's JSON from protocol/schemas.
class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ConsumerGroupDescribeRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ConsumerGroupDescribeResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareGroupHeartbeatRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareGroupHeartbeatResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareGroupDescribeRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareGroupDescribeResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareFetchRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareFetchResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareAcknowledgeRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class ShareAcknowledgeResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class AlterShareGroupOffsetsRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class AlterShareGroupOffsetsResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701
class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=_kafka4_schemas): pass  # noqa: E701


#: API key → (request class, response class). Produce/Fetch/ListOffsets are here only
#: as test oracles and for ``encode_request``/``decode_response``; the broker's path
#: for them is the hand-written ``protocol.messages``.
SCHEMA_CLASSES: dict[int, tuple[type, type]] = {
    ApiKey.PRODUCE: (ProduceRequest, ProduceResponse),
    ApiKey.FETCH: (FetchRequest, FetchResponse),
    ApiKey.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse),
    ApiKey.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.DELETE_RECORDS: (DeleteRecordsRequest, DeleteRecordsResponse),
    ApiKey.INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    ApiKey.DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
    ApiKey.ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse),
    ApiKey.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    ApiKey.OFFSET_DELETE: (OffsetDeleteRequest, OffsetDeleteResponse),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse),
    ApiKey.DESCRIBE_ACLS: (DescribeAclsRequest, DescribeAclsResponse),
    ApiKey.CREATE_ACLS: (CreateAclsRequest, CreateAclsResponse),
    ApiKey.DELETE_ACLS: (DeleteAclsRequest, DeleteAclsResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (DescribeUserScramCredentialsRequest,
                                             DescribeUserScramCredentialsResponse),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: (AlterClientQuotasRequest, AlterClientQuotasResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (EndTxnRequest, EndTxnResponse),
    ApiKey.TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiKey.WRITE_TXN_MARKERS: (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    ApiKey.DESCRIBE_PRODUCERS: (DescribeProducersRequest, DescribeProducersResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (ListTransactionsRequest, ListTransactionsResponse),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (DescribeLogDirsRequest, DescribeLogDirsResponse),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse),
    ApiKey.SHARE_GROUP_HEARTBEAT: (ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse),
    ApiKey.SHARE_GROUP_DESCRIBE: (ShareGroupDescribeRequest, ShareGroupDescribeResponse),
    ApiKey.SHARE_FETCH: (ShareFetchRequest, ShareFetchResponse),
    ApiKey.SHARE_ACKNOWLEDGE: (ShareAcknowledgeRequest, ShareAcknowledgeResponse),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse),
}

#: Exceptions kafka-python's generated decoders raise on malformed input.
_DECODE_FAILURES = (struct.error, IndexError, ValueError, UnicodeDecodeError, TypeError,
                    OverflowError, AssertionError, KeyError, AttributeError, RecursionError)

_MISSING = object()

#: Kafka's JSON names that kafka-python 3 renames in its patched schemas.
_FIELD_ALIASES = {
    "cluster_authorized_operations": "authorized_operations",  # Metadata, DescribeCluster
    "topic_authorized_operations": "authorized_operations",  # Metadata topics
}

#: Kafka's int32 for "authorized operations not requested".
_OPERATIONS_NOT_REQUESTED = -(2**31)


def is_flexible(message_cls: type, api_version: int) -> bool:
    return bool(message_cls.flexible_version_q(api_version))


# -- decoding -------------------------------------------------------------------------

def _decoder(message_cls: type, api_version: int):
    flexible = is_flexible(message_cls, api_version)
    return message_cls._struct.compiled_decode_from(
        api_version, compact=flexible, tagged=flexible, data_class=message_cls[None])


def _field_kind(field) -> str:
    if field.is_struct_array():
        return "struct_array"
    if field.is_struct():
        return "struct"
    if field.is_array():
        return "array"
    return getattr(field, "_type_str", "")


_NULLABLE_KINDS = {"string", "bytes", "records", "array", "struct_array", "struct"}


def _check_nulls(struct_field, obj, api_version: int, path: str) -> None:
    """Refuse a null where the schema does not allow one (Kafka's readers do)."""
    for field in struct_field.untagged_fields(api_version):
        kind = _field_kind(field)
        if kind not in _NULLABLE_KINDS:
            continue
        value = getattr(obj, field.name)
        if value is None:
            if not field.nullable_for_version_q(api_version):
                raise ProtocolError(f"non-nullable field {path}{field.name} was null")
            continue
        if kind == "struct_array":
            inner = field.array_of
            for item in value:
                _check_nulls(inner, item, api_version, f"{path}{field.name}[].")
        elif kind == "struct":
            _check_nulls(field, value, api_version, f"{path}{field.name}.")


def _decode(message_cls: type, api_version: int, frame, offset: int, what: str):
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        obj, pos = _decoder(message_cls, api_version)(view, offset)
    except _DECODE_FAILURES as exc:
        raise ProtocolError(f"malformed {what} v{api_version}: {type(exc).__name__}: {exc}") from None
    if pos > len(view):
        raise ProtocolError(f"truncated {what} v{api_version}: needs {pos} bytes, frame has {len(view)}")
    _check_nulls(message_cls._struct, obj, api_version, "")
    return obj


def decode_request_body(api_key: int, api_version: int, frame, offset: int):
    """Decode the request body at ``frame[offset:]`` into kafka-python's data object."""
    request_cls = SCHEMA_CLASSES[api_key][0]
    return _decode(request_cls, api_version, frame, offset, request_cls.__name__)


def decode_response_body(api_key: int, api_version: int, frame, offset: int = 0):
    """Decode a response body (tests and tools). ApiVersions with an error decodes as v0."""
    response_cls = SCHEMA_CLASSES[api_key][1]
    if api_key == ApiKey.API_VERSIONS and len(frame) >= offset + 2:
        if _SIZE.unpack_from(b"\x00\x00" + bytes(frame[offset:offset + 2]))[0] != 0:
            api_version = 0
    return _decode(response_cls, api_version, frame, offset, response_cls.__name__)


def warm_up(versions: Mapping[int, tuple[int, int]]) -> int:
    """Load and compile now, for every API of ``versions`` (key → (min, max)), the request
    decoder and the response encoder of each version: kafka-python reads a schema and
    generates its functions on first use, which costs seconds in all. The broker calls this
    on a worker thread before its listeners open, so no request pays for it on the event
    loop. Returns the number of (API, version) pairs compiled."""
    compiled = 0
    for api_key, (lo, hi) in versions.items():
        classes = SCHEMA_CLASSES.get(api_key)
        if classes is None:
            continue
        request_cls, response_cls = classes
        for version in range(lo, hi + 1):
            _decoder(request_cls, version)
            flexible = is_flexible(response_cls, version)
            response_cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)
            compiled += 1
    return compiled


# -- building data objects from dicts ---------------------------------------------------

def _coerce_uuid(value):
    if value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) != 16:
            raise ValueError(f"a UUID needs 16 bytes, got {len(raw)}")
        return uuid.UUID(bytes=raw)
    return uuid.UUID(str(value))


def _coerce_bitfield(value):
    """Kafka's int32 bit set → kafka-python's set of bit numbers (None = not requested)."""
    if value is None or isinstance(value, (set, frozenset)):
        return value
    value = int(value)
    if value == _OPERATIONS_NOT_REQUESTED:
        return None
    value &= 0xFFFFFFFF
    return {bit for bit in range(32) if value >> bit & 1}


def _is_default(field, value, api_version: int) -> bool:
    default = field.default if not field.is_struct() or field.is_struct_array() else None
    if field.is_struct() and not field.is_struct_array():
        if value is None:
            return True
        try:
            return value == field.data_class(version=api_version)
        except (NotImplementedError, ValueError):
            return False
    if field.is_array() and default is None:
        return value is None
    return value == default


def _build(struct_field, make, value, api_version: int, path: str):
    """A kafka-python data object for ``value`` (dict or data object) at ``api_version``."""
    if isinstance(value, DataContainer):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{path or 'response'}: expected a dict, got {type(value).__name__}")
    known = struct_field.fields
    for key in value:
        if key not in known:
            alias = _FIELD_ALIASES.get(key)
            if alias is not None and alias in known:
                value = {(alias if k == key else k): v for k, v in value.items()}
                continue
            raise ValueError(f"{path or 'response'}: the schema {struct_field.name} has no field {key!r}")
    kwargs = {}
    for field in struct_field._fields:
        if not field.for_version_q(api_version):
            continue
        name = field.name
        item = value.get(name, _MISSING)
        if item is _MISSING:
            if field.is_struct() and not field.is_struct_array() and not field.tagged_field_q(api_version):
                item = None if field.nullable_for_version_q(api_version) else {}
            else:
                continue
        if field.is_struct_array():
            if item is not None:
                inner = field.array_of
                item = [_build(inner, inner.data_class, x, api_version, f"{path}{name}[].") for x in item]
        elif field.is_struct():
            if item is not None:
                item = _build(field, field.data_class, item, api_version, f"{path}{name}.")
        elif getattr(field, "_type", None) is _UUIDCodec:
            item = _coerce_uuid(item)
        elif getattr(field, "_type", None) is _BitFieldCodec:
            item = _coerce_bitfield(item)
        elif field.is_array() and getattr(field.array_of, "_type", None) is _UUIDCodec and item is not None:
            item = [_coerce_uuid(x) for x in item]
        if field.tagged_field_q(api_version) and _is_default(field, item, api_version):
            continue
        kwargs[name] = item
    return make(version=api_version, **kwargs)


def build_message(message_cls: type, api_version: int, value):
    """kafka-python message object for a dict (or pass an object through)."""
    if isinstance(value, DataContainer):
        return value
    return _build(message_cls._struct, message_cls, value, api_version, "")


def _encode_body_into(message_cls: type, api_version: int, obj, out: EncodeBuffer) -> None:
    flexible = is_flexible(message_cls, api_version)
    fn = message_cls._struct.compiled_encode_into(api_version, compact=flexible, tagged=flexible)
    fn(obj, out)


def _encode_body(message_cls: type, api_version: int, message) -> bytes:
    out = EncodeBuffer(512)
    _encode_body_into(message_cls, api_version, build_message(message_cls, api_version, message), out)
    return bytes(out.buf[:out.pos])


def encode_response_body(api_key: int, api_version: int, response) -> bytes:
    """Body bytes of a response (no size prefix, no header)."""
    return _encode_body(SCHEMA_CLASSES[api_key][1], api_version, response)


def encode_response_frame(api_key: int, api_version: int, header_bytes: bytes, response) -> bytearray:
    """Size prefix + response header + body, in one buffer."""
    response_cls = SCHEMA_CLASSES[api_key][1]
    obj = build_message(response_cls, api_version, response)
    out = EncodeBuffer(512)
    out.pos = 4
    n = len(header_bytes)
    out.ensure(n)
    out.buf[4:4 + n] = header_bytes
    out.pos += n
    _encode_body_into(response_cls, api_version, obj, out)
    _SIZE.pack_into(out.buf, 0, out.pos - 4)
    return out.buf[:out.pos]


def encode_request_body(api_key: int, api_version: int, request) -> bytes:
    """Body bytes of a request (tests and tools)."""
    return _encode_body(SCHEMA_CLASSES[api_key][0], api_version, request)


# -- ApiVersions fallback -----------------------------------------------------------------

def _api_key_entries(api_keys) -> list[tuple[int, int, int]]:
    if isinstance(api_keys, Mapping):
        return sorted((int(k), int(v[0]), int(v[1])) for k, v in api_keys.items())
    entries = []
    for entry in api_keys:
        if isinstance(entry, Mapping):
            entries.append((int(entry["api_key"]), int(entry["min_version"]), int(entry["max_version"])))
        else:
            key, lo, hi = entry
            entries.append((int(key), int(lo), int(hi)))
    return entries


def encode_api_versions_fallback(correlation_id: int, api_keys) -> list[bytes]:
    """Whole frame answering an ApiVersions request of an unsupported version.

    v0 body (error_code int16 = 35, api_keys [api_key, min_version, max_version])
    behind response header v0, whatever version was asked: the client reads the
    error and retries with the highest ApiVersions version listed. ``api_keys`` is a
    list of dicts/tuples or a {key: (min, max)} mapping.
    """
    entries = _api_key_entries(api_keys)
    body = bytearray(struct.pack(">ihi", correlation_id, ErrorCode.UNSUPPORTED_VERSION, len(entries)))
    for key, lo, hi in entries:
        body += struct.pack(">hhh", key, lo, hi)
    return [_SIZE.pack(len(body)) + bytes(body)]
