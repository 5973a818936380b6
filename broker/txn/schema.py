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

from .state import TopicPartition, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_V0_HEAD = struct.Struct(">qhib")
_V0_TAIL = struct.Struct(">qq")


class SchemaError(ValueError):
    """Bytes that are not a valid ``__transaction_state`` key or value."""


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


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 32767:
        raise SchemaError("string longer than 32767 bytes")
    return _H.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key of another coordinator record type."""
    buf = memoryview(data)
    try:
        (version,) = _H.unpack_from(buf, 0)
        if version != KEY_VERSION:
            return None
        (n,) = _H.unpack_from(buf, 2)
        if n < 0 or 4 + n > len(buf):
            raise SchemaError("bad transactional id length")
        return bytes(buf[4:4 + n]).decode("utf-8")
    except (struct.error, UnicodeDecodeError) as exc:
        raise SchemaError(f"bad transaction log key: {exc}") from None


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
    out = bytearray(_H.pack(VALUE_VERSION))
    out += _V0_HEAD.pack(v.producer_id, v.producer_epoch, v.transaction_timeout_ms, int(v.state))
    if v.state == TxnState.EMPTY:
        out += _I.pack(-1)
    else:
        groups = group_partitions(v.partitions)
        out += _I.pack(len(groups))
        for topic, ids in groups:
            out += _string(topic)
            out += _I.pack(len(ids))
            out += b"".join(_I.pack(p) for p in ids)
    out += _V0_TAIL.pack(v.last_update_timestamp_ms, v.start_timestamp_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.buf = memoryview(data)
        self.pos = 0

    def unpack(self, st: struct.Struct):
        vals = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return vals

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise SchemaError("bad varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise SchemaError("length past the end")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.unpack(_H)[0]
        if n < 0:
            raise SchemaError("null string")
        return self.raw(n).decode("utf-8")

    def array_len(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.unpack(_I)[0]

    def tags(self) -> dict[int, bytes]:
        found = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found[tag] = self.raw(self.uvarint())
        return found


def decode_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    try:
        (version,) = r.unpack(_H)
        if version not in (0, 1):
            raise SchemaError(f"unknown transaction log value version {version}")
        compact = version >= 1
        producer_id, epoch, timeout_ms, status = r.unpack(_V0_HEAD)
        n = r.array_len(compact)
        partitions: set[TopicPartition] = set()
        for _ in range(max(n, 0)):
            topic = r.string(compact)
            for _ in range(r.array_len(compact)):
                partitions.add((topic, r.unpack(_I)[0]))
            if compact:
                r.tags()
        last_update, start = r.unpack(_V0_TAIL)
        prev_pid = next_pid = -1
        if compact:
            tags = r.tags()
            if 0 in tags:
                prev_pid = struct.unpack(">q", tags[0])[0]
            if 1 in tags:
                next_pid = struct.unpack(">q", tags[1])[0]
        state = TxnState(status)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, SchemaError):
            raise
        raise SchemaError(f"bad transaction log value: {exc}") from None
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
