"""What a share fetch hands the engine and gets back, and the pure parts of acquisition.

The engine does not read the log. For each ShareFetch the caller reads the partition from
:meth:`~.partition.SharePartition.next_fetch_offset` up to the isolation bound (the high watermark,
or the last stable offset for ``share.isolation.level=read_committed``) as a fetch would, and
passes the record batches it got as :class:`FetchedBatch` ranges (base and last offset of each,
control batches included). Acquired ranges are aligned to those batches as Kafka aligns them:

* whole batches are acquired where possible; a limit on the number of records (the request's
  ``MaxRecords``, what remains of the partition's in-flight cap) is met at the end of the batch
  that contains the limit, so it may be exceeded ("This limit can be exceeded for alignment of
  batch boundaries", ShareFetch ``MaxRecords``);
* new records are answered in ranges of about ``BatchSize`` records, cut at batch boundaries
  (Kafka ``createBatches``);
* in ``record_limit`` mode (ShareFetch v2 ``ShareAcquireMode=1``, KIP-1206) the record limit is
  strict: only that many records are acquired and the rest of the batch stays available.

``read_committed`` (Kafka ``maybeFilterAbortedTransactionalAcquiredRecords``): the log read stops
at the last stable offset and reports the aborted transactions of the range read (producer id,
first offset). Walking the fetched batches in order, Kafka adds to a set of aborted producers each
aborted transaction whose first offset is at or before the batch's last offset, drops a producer
from the set at its ABORT marker, and takes every transactional data batch of a producer in the
set as aborted. The caller does that walk (the transaction index is the log's business) and hands
the engine the aborted data batches as offset ranges; the engine archives the acquired records in
them and leaves them out of the answer. Control batches are not filtered: like any records they
are acquired, and clients acknowledge the offsets they did not deliver as gaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Sequence


class AcquireMode(IntEnum):
    """ShareFetch v2 ``ShareAcquireMode`` (Kafka ``ShareAcquireMode``)."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A record batch of the log read for a share fetch: its base and last offset."""

    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """One ``AcquiredRecords`` entry of a ShareFetch response partition."""

    first_offset: int
    last_offset: int
    delivery_count: int

    @property
    def record_count(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True, slots=True)
class AcquireResult:
    """The acquired ranges, in offset order, and how many offsets they hold (Kafka
    ``ShareAcquiredRecords``; the count is what the fetch deducts from its ``MaxRecords``)."""

    records: tuple[AcquiredRecords, ...] = ()
    count: int = 0


EMPTY_ACQUIRE = AcquireResult()


def usable_batches(batches: Sequence[FetchedBatch], fetch_offset: int,
                   read_bound_offset: int | None) -> tuple[FetchedBatch, ...]:
    """The batches a log read from ``fetch_offset`` bounded by ``read_bound_offset`` returns.

    Batches must be in offset order and must not overlap (ValueError). Batches wholly before the
    fetch offset are dropped (a read starts at the batch holding the fetch offset), so are those at
    or beyond the bound; a batch across the bound is a caller error (the high watermark and the
    last stable offset are batch boundaries).
    """
    out: list[FetchedBatch] = []
    previous_last = None
    for batch in batches:
        if batch.last_offset < batch.base_offset:
            raise ValueError(f"fetched batch {batch} ends before it starts")
        if previous_last is not None and batch.base_offset <= previous_last:
            raise ValueError(f"fetched batches out of order or overlapping at {batch}")
        previous_last = batch.last_offset
        if batch.last_offset < fetch_offset:
            continue
        if read_bound_offset is not None and batch.last_offset >= read_bound_offset:
            if batch.base_offset < read_bound_offset:
                raise ValueError(f"fetched batch {batch} crosses the read bound {read_bound_offset}")
            break
        out.append(batch)
    return tuple(out)


def last_offset_of_batch_holding(batches: Sequence[FetchedBatch], offset: int) -> int:
    """The last offset of the fetched batch holding ``offset``, or ``offset`` when none holds it
    (Kafka ``lastOffsetFromBatchWithRequestOffset``)."""
    holder = None
    for batch in batches:
        if offset >= batch.base_offset:
            holder = batch
            continue
        break
    if holder is not None and offset <= holder.last_offset:
        return holder.last_offset
    return offset


def ranges_of_batch_size(batches: Sequence[FetchedBatch], first_offset: int, last_offset: int,
                         batch_size: int) -> list[tuple[int, int]]:
    """``first_offset..last_offset`` cut into ranges that start at batch boundaries, a new range
    being started at the first batch boundary at least ``batch_size`` records after the current
    range's start (Kafka ``createBatches``, batch-optimized mode)."""
    ranges: list[tuple[int, int]] = []
    current = first_offset
    if last_offset - first_offset + 1 > batch_size:
        for batch in batches:
            if batch.base_offset > last_offset:
                break
            if batch.base_offset - current >= batch_size:
                ranges.append((current, batch.base_offset - 1))
                current = batch.base_offset
    ranges.append((current, last_offset))
    return ranges


def without_ranges(acquired: Iterable[AcquiredRecords],
                   removed: Sequence[tuple[int, int]]) -> list[AcquiredRecords]:
    """``acquired`` with the offsets of the ``removed`` ranges (sorted, non-overlapping) cut out
    (Kafka ``filterRecordBatchesFromAcquiredRecords``)."""
    out: list[AcquiredRecords] = []
    for records in acquired:
        first = records.first_offset
        for lo, hi in removed:
            if hi < first or lo > records.last_offset:
                continue
            if lo > first:
                out.append(AcquiredRecords(first, lo - 1, records.delivery_count))
            first = hi + 1
            if first > records.last_offset:
                break
        if first <= records.last_offset:
            out.append(AcquiredRecords(first, records.last_offset, records.delivery_count))
    return out
