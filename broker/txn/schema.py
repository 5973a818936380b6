"""Kafka's ``__transaction_state`` record key and value, byte for byte (``TransactionLog``).

Key (``TransactionLogKey``): ``int16 version`` (0; Kafka's ``CoordinatorRecordType.TRANSACTION_LOG``)
then ``string transactional_id`` (int16 length + UTF-8). Any other key version is not a
transaction log key and is skipped on load, as Kafka does.

Value (``TransactionLogValue``), ``int16 version`` then:

* **version 0** (what Kafka 3.x writes, and what Sundial writes: transaction version 0,
  no KIP-890): ``int64 producer_id, int16 producer_epoch, int32 transaction_timeout_ms,
  int8 transaction_status, [PartitionsSchema] transaction_partitions (int32 count, -1 =
  null), int64 transaction_last_update_timestamp_ms, int64 transaction_start_timestamp_ms``;
  ``PartitionsSchema = string topic, [int32] partition_ids``.
* **version 1** (flexible, read only): the same fields with compact strings/arrays
  (unsigned varint length + 1, 0 = null) and a tagged-field section after each struct;
  tag 0 = previous producer id, tag 1 = next producer id, tag 2 = client transaction
  version (int16) on the top level, unknown tags skipped.

The partitions are null in Empty (Kafka writes null there) and grouped by topic in
first-seen order otherwise. A null value (tombstone) removes the transactional id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sundial.protocol.primitives import INT16, INT32, INT64

from ..coordinator_schema import MessageReader, SchemaError
from ..coordinator_schema import encode_string as _str
from .state import TopicPartition, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0

_V0_HEAD = struct.Struct(">qhib")
_V0_TAIL = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1


def encode_key(transactional_id: str) -> bytes:
    return INT16.pack(KEY_VERSION) + _str(transactional_id)


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key of another coordinator record type."""
    r = MessageReader(bytes(data))
    if r.i16() != KEY_VERSION:
        return None
    return r.string()


def group_partitions(partitions) -> list[tuple[str, list[int]]]:
    """Partitions grouped by topic, topics and ids sorted (a stable, readable order)."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return list(by_topic.items())


def encode_value(v: TxnLogValue) -> bytes:
    if v.state == TxnState.EMPTY and v.partitions:
        raise SchemaError("an Empty transaction has no partitions")
    if v.state == TxnState.PREPARE_EPOCH_FENCE:
        raise SchemaError("PrepareEpochFence is never written")
    out = bytearray(INT16.pack(VALUE_VERSION))
    out += _V0_HEAD.pack(v.producer_id, v.producer_epoch, v.transaction_timeout_ms, int(v.state))
    if v.state == TxnState.EMPTY:
        out += INT32.pack(-1)
    else:
        groups = group_partitions(v.partitions)
        out += INT32.pack(len(groups))
        for topic, ids in groups:
            out += _str(topic)
            out += INT32.pack(len(ids))
            out += b"".join(INT32.pack(p) for p in ids)
    out += _V0_TAIL.pack(v.last_update_timestamp_ms, v.start_timestamp_ms)
    return bytes(out)


def _tagged_int64(tags: dict[int, bytes], tag: int) -> int:
    raw = tags.get(tag)
    if raw is None:
        return -1
    if len(raw) != INT64.size:
        raise SchemaError(f"tagged field {tag} is {len(raw)} bytes, not an int64")
    return INT64.unpack(raw)[0]


def decode_value(data: bytes) -> TxnLogValue:
    r = MessageReader(bytes(data))
    version = r.i16()
    if version not in (0, 1):
        raise SchemaError(f"unknown transaction log value version {version}")
    r.flexible = version >= 1
    producer_id, epoch, timeout_ms, status = r.i64(), r.i16(), r.i32(), r.i8()
    n = r.uvarint() - 1 if r.flexible else r.i32()   # -1 = null (Kafka writes null in Empty)
    partitions: set[TopicPartition] = set()
    for _ in range(max(n, 0)):
        topic = r.string()
        for _ in range(r.array_len()):
            partitions.add((topic, r.i32()))
        r.tags()
    last_update, start = r.i64(), r.i64()
    tags = r.tags()
    prev_pid, next_pid = _tagged_int64(tags, 0), _tagged_int64(tags, 1)
    try:
        state = TxnState(status)
    except ValueError:
        raise SchemaError(f"unknown transaction status {status}") from None
    if state == TxnState.EMPTY:
        partitions = set()
    return TxnLogValue(producer_id, epoch, timeout_ms, state, frozenset(partitions), last_update, start,
                       prev_pid, next_pid)


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int32."""
    h = 0
    raw = value.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka ``TransactionStateManager.partitionFor``: ``Utils.abs(id.hashCode) % count``."""
    h = java_string_hash(transactional_id)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions
