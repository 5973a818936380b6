"""What the cleaner does to one batch: map its keys, then keep or rewrite it.

Kafka's ``Cleaner.buildOffsetMapForSegment`` (the per-batch part) and the cleaner's
``RecordFilter`` run through ``MemoryRecords.filterTo`` / ``buildRetainedRecordsInto``.
The per-record work of v2 batches is :mod:`storage.offset_map` (C when built).

Record rule (``Cleaner.shouldRetainRecord``), for every record of a data batch:

* an offset above the map's latest offset (beyond the part this pass mapped) is kept;
* a record without a key is dropped (Kafka counts it as an invalid message);
* otherwise it is kept when its offset is >= the map's offset for its key **and** it has
  a value or deletes are still retained: v2 — the batch has no delete horizon yet, or
  ``now < horizon``; v0/v1 — the segment's mtime is after the legacy delete horizon
  (the mtime of the last clean segment minus ``delete.retention.ms``).

Batch rule (``checkBatchRetention``), with the walk's transaction state
(:class:`storage.cleaner_txn.CleanedTransactionMetadata`) saying whether the batch *may be
discarded* (a data batch of an aborted transaction; a marker whose transaction has no
batch left in this walk):

* the records of a discardable data batch all go; a discardable control batch loses its
  marker once its delete horizon has passed (``horizon <= now``); a discardable marker
  without a horizon yet is rewritten with one (``now + delete.retention.ms``, attribute
  bit 6, base timestamp = horizon, the record keeping its timestamp) — Kafka piggy-backs
  marker removal on tombstone retention; other markers stay as they are;
* the last batch of a producer that is still active (the batch ending at its last data
  offset; with no data batch, a control batch of its current epoch) and the last
  batch of the cleaning round (next offset = first uncleanable offset) are kept even
  when every record goes — as an **empty batch**: the 61-byte header with count 0, no
  compression, base timestamp -1 and the old max timestamp, producer id, epoch, base
  sequence, offsets and leader epoch (``DefaultRecordBatch.writeEmptyHeader``), so the
  producer's last sequence and the round's last offset survive;
* any other batch whose records all go is dropped;
* a batch whose records all stay is written as it is, unless it keeps a tombstone and
  has no delete horizon yet: then, as when some records go, it is rebuilt with the same
  base offset, last offset delta (``overrideLastOffset``), producer fields, leader epoch,
  attributes and codec (re-compressed at the codec's default level); the base timestamp
  becomes the delete horizon (``now + delete.retention.ms``, attribute bit 6) when the
  batch has or gets one, else the first kept record's timestamp; the max timestamp is
  the kept records' largest (LogAppendTime: unchanged).

Legacy entries (magic 0/1) keep their magic — Sundial still stores them for
``message.format.version`` < 0.11, as Kafka did until 3.x (Kafka 4 rewrites them as v2):
an uncompressed message is kept or dropped; a compressed wrapper whose inner messages do
not all stay is rebuilt with the kept ones and its codec. An emptied legacy entry is
always dropped (Kafka cannot write an empty legacy batch either).
"""

from __future__ import annotations

from typing import NamedTuple

from sundial.records import codecs
from sundial.records.batch import BatchView
from sundial.records.builder import build_records, encode_v2_record, v2_header
from sundial.records.framing import iter_records
from sundial.records.layout import (
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    LOG_APPEND_TIME,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)

from .offset_map import SkimpyOffsetMap


class KeptBatch(NamedTuple):
    """One batch as the cleaned segment receives it."""

    data: bytes | memoryview
    last_offset: int
    max_timestamp: int
    records: int


class FilterContext(NamedTuple):
    """The facts of one cleaning round that the batch rules need."""

    offset_map: SkimpyOffsetMap
    now_ms: int
    delete_retention_ms: int
    upper_bound_offset: int                 # first uncleanable offset of the round
    active_producers: dict[int, tuple[int, int]]   # producer id -> (last data offset or -1, epoch)
    max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES


def delete_horizon(view: BatchView) -> int | None:
    """The batch's delete horizon (its base timestamp when attribute bit 6 is set), or None."""
    if view.magic == MAGIC_V2 and view.attributes & DELETE_HORIZON_FLAG_MASK:
        return view.base_timestamp
    return None


def _payload(view: BatchView, max_bytes: int):
    """(buffer, start, end) of the uncompressed records section of a v2 batch."""
    if view.compression == codecs.NONE:
        return view.buf, view.start + RECORDS_OFFSET, view.start + view.size_bytes
    payload = view.records_payload(max_bytes)
    return payload, 0, len(payload)


# -- the offset map ------------------------------------------------------------------------------------
def map_batch(view: BatchView, offset_map: SkimpyOffsetMap, start_offset: int, max_entries: int,
              max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> tuple[bool, int]:
    """Put the keys of one batch (``buildOffsetMapForSegment``); (map full, records read)."""
    if view.is_control:
        return False, 1
    if view.magic == MAGIC_V2:
        buf, pos, end = _payload(view, max_bytes)
        result = offset_map.put_v2(buf, pos, end, view.record_count, view.base_offset, start_offset, max_entries)
        return result.full, result.records_read
    read = 0
    for record in iter_records(view, max_bytes=max_bytes):
        if record.key is not None and record.offset >= start_offset:
            if offset_map.entries >= max_entries:
                return True, read
            offset_map.put(record.key, record.offset)
        read += 1
    return False, read


# -- filtering -----------------------------------------------------------------------------------------
def _empty_batch(view: BatchView) -> bytes:
    attributes = ((TIMESTAMP_TYPE_MASK if view.timestamp_type == LOG_APPEND_TIME else 0)
                  | (TRANSACTIONAL_FLAG_MASK if view.is_transactional else 0)
                  | (CONTROL_FLAG_MASK if view.is_control else 0))
    return v2_header(base_offset=view.base_offset, batch_bytes=RECORD_BATCH_OVERHEAD,
                     partition_leader_epoch=view.partition_leader_epoch, attributes=attributes,
                     last_offset_delta=view.last_offset_delta, base_timestamp=NO_TIMESTAMP,
                     max_timestamp=view.max_timestamp, producer_id=view.producer_id,
                     producer_epoch=view.producer_epoch, base_sequence=view.base_sequence, record_count=0,
                     payload=b"")


def _last_batch_of_producer(view: BatchView, ctx: FilterContext) -> bool:
    last = ctx.active_producers.get(view.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset >= 0:
        return view.last_offset == last_data_offset
    return view.is_control and view.producer_epoch == epoch


def _marker_with_horizon(view: BatchView, horizon: int) -> bytes:
    """The control batch rebuilt with a delete horizon (Kafka ``buildRetainedRecordsInto``)."""
    parts = [encode_v2_record(r.offset - view.base_offset, r.timestamp - horizon, r.key, r.value, r.headers)
             for r in iter_records(view)]
    payload = b"".join(parts)
    attributes = ((TIMESTAMP_TYPE_MASK if view.timestamp_type == LOG_APPEND_TIME else 0) | TRANSACTIONAL_FLAG_MASK
                  | CONTROL_FLAG_MASK | DELETE_HORIZON_FLAG_MASK)
    return v2_header(base_offset=view.base_offset, batch_bytes=RECORD_BATCH_OVERHEAD + len(payload),
                     partition_leader_epoch=view.partition_leader_epoch, attributes=attributes,
                     last_offset_delta=view.last_offset_delta, base_timestamp=horizon,
                     max_timestamp=view.max_timestamp, producer_id=view.producer_id,
                     producer_epoch=view.producer_epoch, base_sequence=view.base_sequence,
                     record_count=len(parts), payload=payload) + payload


def filter_batch(view: BatchView, ctx: FilterContext, retain_legacy_deletes: bool,
                 stats, txn=None) -> KeptBatch | None:
    """The batch to write for ``view`` (None: drop it); counts into ``stats``
    (``messages_read``, ``messages_written``, ``invalid_messages``). ``txn`` is the walk's
    :class:`~storage.cleaner_txn.CleanedTransactionMetadata`."""
    if view.magic != MAGIC_V2:
        return _filter_legacy(view, ctx, retain_legacy_deletes, stats)
    count = view.record_count
    stats.messages_read += count
    horizon = delete_horizon(view)
    can_discard = False
    if txn is not None:
        can_discard = txn.on_control_batch_read(view) if view.is_control else txn.on_batch_read(view)
    retain_empty = ((view.producer_id >= 0 and _last_batch_of_producer(view, ctx))
                    or view.next_offset == ctx.upper_bound_offset)
    if view.is_control:
        if can_discard and horizon is not None and horizon <= ctx.now_ms or count == 0:
            return KeptBatch(_empty_batch(view), view.last_offset, view.max_timestamp, 0) if retain_empty else None
        stats.messages_written += count
        if can_discard and horizon is None:
            data = _marker_with_horizon(view, ctx.now_ms + ctx.delete_retention_ms)
            return KeptBatch(data, view.last_offset, view.max_timestamp, count)
        return KeptBatch(view.data, view.last_offset, view.max_timestamp, count)
    if can_discard:
        return KeptBatch(_empty_batch(view), view.last_offset, view.max_timestamp, 0) if retain_empty else None
    buf, pos, end = _payload(view, ctx.max_decompressed_bytes)
    result = ctx.offset_map.filter_v2(
        buf, pos, end, count, base_offset=view.base_offset, base_timestamp=view.base_timestamp,
        log_append_time=view.timestamp_type == LOG_APPEND_TIME, max_timestamp=view.max_timestamp,
        retain_deletes=horizon is None or ctx.now_ms < horizon, horizon=horizon,
        new_horizon=ctx.now_ms + ctx.delete_retention_ms)
    stats.invalid_messages += result.invalid
    if result.records is None:
        stats.messages_written += count
        return KeptBatch(view.data, view.last_offset, view.max_timestamp, count)
    if result.kept == 0:
        if retain_empty:
            return KeptBatch(_empty_batch(view), view.last_offset, view.max_timestamp, 0)
        return None
    stats.messages_written += result.kept
    payload = result.records
    if view.compression != codecs.NONE:
        payload = codecs.compress(view.compression, payload, magic=MAGIC_V2)
    attributes = (view.compression | (TIMESTAMP_TYPE_MASK if view.timestamp_type == LOG_APPEND_TIME else 0)
                  | (TRANSACTIONAL_FLAG_MASK if view.is_transactional else 0)
                  | (DELETE_HORIZON_FLAG_MASK if result.with_horizon else 0))
    header = v2_header(base_offset=view.base_offset, batch_bytes=RECORD_BATCH_OVERHEAD + len(payload),
                       partition_leader_epoch=view.partition_leader_epoch, attributes=attributes,
                       last_offset_delta=view.last_offset_delta, base_timestamp=result.new_base_timestamp,
                       max_timestamp=result.new_max_timestamp, producer_id=view.producer_id,
                       producer_epoch=view.producer_epoch, base_sequence=view.base_sequence,
                       record_count=result.kept, payload=payload)
    return KeptBatch(header + payload, view.last_offset, result.new_max_timestamp, result.kept)


def _filter_legacy(view: BatchView, ctx: FilterContext, retain_deletes: bool, stats) -> KeptBatch | None:
    m = ctx.offset_map
    records = list(iter_records(view, max_bytes=ctx.max_decompressed_bytes))
    stats.messages_read += len(records)
    kept = []
    for record in records:
        if record.offset > m.latest_offset:
            kept.append(record)
        elif record.key is not None:
            if record.offset >= m.get(record.key) and (record.value is not None or retain_deletes):
                kept.append(record)
        else:
            stats.invalid_messages += 1
    if not kept:
        return None
    stats.messages_written += len(kept)
    if len(kept) == len(records):
        return KeptBatch(view.data, view.last_offset, view.max_timestamp, len(kept))
    log_append = view.timestamp_type == LOG_APPEND_TIME
    built = build_records(view.magic, kept, offsets=[r.offset for r in kept], compression=view.compression,
                          timestamp_type=view.timestamp_type if view.timestamp_type >= 0 else 0,
                          log_append_time_ms=view.max_timestamp if log_append else NO_TIMESTAMP)
    return KeptBatch(built.buffer, built.last_offset, built.max_timestamp, len(kept))


__all__ = ["KeptBatch", "FilterContext", "filter_batch", "map_batch", "delete_horizon"]
