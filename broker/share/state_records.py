"""The records of ``__share_group_state``, byte for byte as Kafka's share coordinator writes them
(``share-coordinator/src/main/resources/common/message``, Kafka 4.2), and the merge of state batches
(Kafka ``PersisterStateBatchCombiner``).

* key: int16 record type (0 ``ShareSnapshotKey``, 1 ``ShareUpdateKey``), then GroupId (int16-length
  string), TopicId (16 bytes), Partition (int32) — not flexible;
* ``ShareSnapshotValue`` (value version 0, flexible): SnapshotEpoch int32, StateEpoch int32,
  LeaderEpoch int32, StartOffset int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches
  (compact array of FirstOffset int64, LastOffset int64, DeliveryState int8, DeliveryCount int16),
  tagged field 0 DeliveryCompleteCount int32 (default -1, KIP-1226);
* ``ShareUpdateValue`` (value version 0, flexible): SnapshotEpoch, LeaderEpoch, StartOffset (-1:
  unchanged), StateBatches, tagged field 0 DeliveryCompleteCount;
* a null value on a ``ShareSnapshotKey``: the share-partition's state is deleted (tombstone).

Decoding raises :class:`~broker.coordinator_schema.SchemaError`, never anything else.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, replace
from typing import Iterable

from sundial.protocol.primitives import INT16, INT32, INT64, write_array_len, write_string, write_tagged_fields

from ..coordinator_schema import MessageReader, SchemaError
from ..topics import SHARE_STATE_TOPIC
from .state_batch import RecordState, StateBatch

#: Record types: the int16 version that starts a key (Kafka ``CoordinatorRecordType`` of the share coordinator).
SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_UPDATE_RECORD_TYPE = 1
#: The value version of both value schemas.
VALUE_VERSION = 0
#: DeliveryCompleteCount when unknown (Kafka's default of the tagged field).
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1
#: ShareUpdate StartOffset meaning "not changed".
UNCHANGED_START_OFFSET = -1
#: Leader epoch of a state written by an initialization (Kafka ``InitializeShareGroupState`` has none).
NO_LEADER_EPOCH = -1
#: Tag of DeliveryCompleteCount in both value schemas.
_TAG_DELIVERY_COMPLETE_COUNT = 0

_BATCH = struct.Struct(">qqbh")


# --- record codec -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """``ShareSnapshotKey`` / ``ShareUpdateKey``: which record, for which share-partition."""

    record_type: int
    group_id: str
    topic_id: bytes
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


def encode_key(key: ShareStateKey) -> bytes:
    if len(key.topic_id) != 16:
        raise ValueError("a topic id is 16 bytes")
    out = bytearray(INT16.pack(key.record_type))
    write_string(out, key.group_id)
    out += key.topic_id
    out += INT32.pack(key.partition)
    return bytes(out)


def _put_batches(out: bytearray, batches: tuple[StateBatch, ...]) -> None:
    write_array_len(out, len(batches), compact=True)
    for b in batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count)
        out.append(0)  # the batch's empty tagged-field section


def _put_tags(out: bytearray, delivery_complete_count: int) -> None:
    tags = {}
    if delivery_complete_count != UNKNOWN_DELIVERY_COMPLETE_COUNT:
        tags[_TAG_DELIVERY_COMPLETE_COUNT] = INT32.pack(delivery_complete_count)
    write_tagged_fields(out, tags)


def encode_snapshot_value(v: ShareSnapshotValue) -> bytes:
    out = bytearray(INT16.pack(VALUE_VERSION))
    out += INT32.pack(v.snapshot_epoch) + INT32.pack(v.state_epoch) + INT32.pack(v.leader_epoch)
    out += INT64.pack(v.start_offset) + INT64.pack(v.create_timestamp_ms) + INT64.pack(v.write_timestamp_ms)
    _put_batches(out, v.state_batches)
    _put_tags(out, v.delivery_complete_count)
    return bytes(out)


def encode_update_value(v: ShareUpdateValue) -> bytes:
    out = bytearray(INT16.pack(VALUE_VERSION))
    out += INT32.pack(v.snapshot_epoch) + INT32.pack(v.leader_epoch) + INT64.pack(v.start_offset)
    _put_batches(out, v.state_batches)
    _put_tags(out, v.delivery_complete_count)
    return bytes(out)


def decode_key(data) -> ShareStateKey:
    r = MessageReader(bytes(data))
    record_type = r.i16()
    if record_type not in (SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE):
        raise SchemaError(f"not a share-state key (record type {record_type})")
    group_id = r.string()
    topic_id = INT64.pack(r.i64()) + INT64.pack(r.i64())  # the 16 bytes of a uuid
    partition = r.i32()
    r.done()
    return ShareStateKey(record_type, group_id, topic_id, partition)


def _read_batches(r: MessageReader) -> tuple[StateBatch, ...]:
    batches = []
    for _ in range(r.array_len()):
        first, last, state, count = r.i64(), r.i64(), r.i8(), r.i16()
        r.tags()
        try:
            delivery_state = RecordState(state)
        except ValueError:
            raise SchemaError(f"unknown delivery state {state}") from None
        if last < first:
            raise SchemaError(f"state batch {first}..{last} is empty")
        batches.append(StateBatch(first, last, delivery_state, count))
    return tuple(batches)


def _delivery_complete_count(r: MessageReader) -> int:
    raw = r.tags().get(_TAG_DELIVERY_COMPLETE_COUNT)
    if raw is None:
        return UNKNOWN_DELIVERY_COMPLETE_COUNT
    if len(raw) != 4:
        raise SchemaError("DeliveryCompleteCount is not an int32")
    return INT32.unpack(raw)[0]


def decode_value(record_type: int, data) -> ShareSnapshotValue | ShareUpdateValue:
    r = MessageReader(bytes(data), flexible=True)
    version = r.i16()
    if version != VALUE_VERSION:
        raise SchemaError(f"unknown share-state value version {version}")
    if record_type == SHARE_SNAPSHOT_RECORD_TYPE:
        snapshot_epoch, state_epoch, leader_epoch = r.i32(), r.i32(), r.i32()
        start_offset, created, written = r.i64(), r.i64(), r.i64()
        batches = _read_batches(r)
        value = ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start_offset, created, written,
                                   batches, _delivery_complete_count(r))
    else:
        snapshot_epoch, leader_epoch, start_offset = r.i32(), r.i32(), r.i64()
        batches = _read_batches(r)
        value = ShareUpdateValue(snapshot_epoch, leader_epoch, start_offset, batches, _delivery_complete_count(r))
    r.done()
    return value


# --- merging state batches --------------------------------------------------------------------

def _priority(b: StateBatch) -> tuple[int, int]:
    """Which of two overlapping batches an offset keeps: the higher delivery count, then the
    higher state (Kafka ``PersisterStateBatchCombiner.compareBatchDeliveryInfo``)."""
    return (b.delivery_count, int(b.delivery_state))


def combine_state_batches(so_far: Iterable[StateBatch], new: Iterable[StateBatch],
                          start_offset: int) -> tuple[StateBatch, ...]:
    """Kafka ``PersisterStateBatchCombiner.combineStateBatches``: the batches of both lists, cut at
    ``start_offset`` (-1: no cut), where they overlap each offset in the batch of the higher
    priority (:func:`_priority`), sorted, without overlaps, neighbours of one state and delivery
    count merged."""
    batches: list[StateBatch] = []
    for b in (*so_far, *new):
        if start_offset != UNCHANGED_START_OFFSET:
            if b.last_offset < start_offset:
                continue
            if b.first_offset < start_offset:
                b = replace(b, first_offset=start_offset)
        batches.append(b)
    if not batches:
        return ()
    # Sweep the offsets: at each boundary, the covering batch of the highest priority wins.
    bounds = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    starts = sorted(batches, key=lambda b: b.first_offset)
    active: list[tuple[tuple[int, int], int, StateBatch]] = []  # max-heap by priority (negated)
    out: list[StateBatch] = []
    i = 0
    for lo, hi in zip(bounds, bounds[1:]):
        while i < len(starts) and starts[i].first_offset <= lo:
            b = starts[i]
            p = _priority(b)
            heapq.heappush(active, ((-p[0], -p[1]), i, b))
            i += 1
        while active and active[0][2].last_offset < lo:
            heapq.heappop(active)
        if not active:
            continue
        top = active[0][2]
        # Drop popped-out batches lazily: the best one covering ``lo`` is on top once expired are gone.
        piece = StateBatch(lo, hi - 1, top.delivery_state, top.delivery_count)
        if out and out[-1].last_offset + 1 == lo and out[-1].delivery_state is piece.delivery_state \
                and out[-1].delivery_count == piece.delivery_count:
            out[-1] = StateBatch(out[-1].first_offset, piece.last_offset, piece.delivery_state, piece.delivery_count)
        else:
            out.append(piece)
    return tuple(out)


def delivery_complete_count(batches: Iterable[StateBatch]) -> int:
    """Records of ``batches`` acknowledged or archived (the batches start at the SPSO or later)."""
    return sum(b.record_count for b in batches if b.delivery_state.is_terminal)


__all__ = [
    "NO_LEADER_EPOCH", "SHARE_SNAPSHOT_RECORD_TYPE", "SHARE_STATE_TOPIC", "SHARE_UPDATE_RECORD_TYPE",
    "UNCHANGED_START_OFFSET", "UNKNOWN_DELIVERY_COMPLETE_COUNT", "ShareSnapshotValue", "ShareStateKey",
    "ShareUpdateValue", "combine_state_batches", "decode_key", "decode_value", "delivery_complete_count",
    "encode_key", "encode_snapshot_value", "encode_update_value",
]
