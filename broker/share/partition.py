"""The share-partition engine: the records of one topic-partition as one share group consumes them
(Kafka 4.2 ``SharePartition``), a pure state machine. It reads no clock and no log and writes no
state: every call is given the time (``now_ms``), fetches are given the record batches the caller
read, and every change of persisted state is returned as a :class:`StateChange` for the share
coordinator to write.

The records from the start offset (SPSO) to the end offset are *in flight* (:mod:`.window`):
AVAILABLE, ACQUIRED by one member, ACKNOWLEDGED or ARCHIVED, each with a delivery count (see
:mod:`.state_batch`). The next fetch reads at :meth:`next_fetch_offset`.

The operations, with Kafka's semantics:

* :meth:`acquire` (ShareFetch): takes available records for a member under a lock of
  ``lock_duration_ms`` and increments their delivery count; batch alignment, ``MaxRecords``,
  ``BatchSize``, the record-limit mode and the in-flight cap ``group.share.partition.max.record.locks``
  as :mod:`.acquisition` describes; records delivered often are handed out in smaller groups
  (below);
* :meth:`acknowledge` (ShareFetch piggy-backed acknowledgements, ShareAcknowledge): all batches of
  one call succeed or none does (Kafka rolls the whole call back);
* :meth:`poll`: acquisition locks whose deadline has come release their records;
* :meth:`release_member`: a member whose share session ended, normally or because its connection
  dropped (Kafka >= 4.1), gives back everything it holds;
* :meth:`on_log_start_offset`: records before a new log start offset (retention, DeleteRecords)
  are archived.

The delivery-count limit (``group.share.delivery.count.limit``) is checked when a record is made
available again, not when it is acquired: a released or timed-out record whose delivery count has
reached the limit is archived instead. Records given back by a departing member have their count
decremented instead, since they were fetched, not processed (Kafka KAFKA-17541), and are never
archived for it. When records have been delivered at least ``max(2, ceil(limit / 2))`` times,
acquisition hands them out in ever smaller groups, halving with each further delivery, and a
record on its last delivery alone, so that one bad record does not take a whole batch with it to
the archive (Kafka 4.2, KAFKA-17541).

Kafka writes each change to the share coordinator and completes the transition when the write
returns (rolling back if it fails). Here transitions complete at once and the returned
:class:`StateChange` is to be written before the answer goes out; the caller owns that ordering.

Where Sundial differs from Kafka 4.2, deliberately:

* a departing member's records are all released; Kafka stops releasing within a batch tracked per
  offset at the first offset another member holds, leaving the rest to their lock timeout;
* the SPSO never moves backwards; Kafka can move it back below a new log start offset when
  records acquired before the log start moved time out (the next fetch then fails with
  OFFSET_OUT_OF_RANGE and moves it forward again);
* read_committed archives the aborted records this fetch acquired; Kafka archives every acquired
  record in the aborted batches, records other members hold under an earlier isolation level
  included, and fails the fetch when the window starts inside an aborted batch;
* records archived while acquiring (aborted transactions, batches gone from a compacted log)
  advance the SPSO at once; Kafka waits for the next acknowledgement or lock timeout, and a
  partition whose in-flight window is full of such records could wait for ever;
* a fetch whose first batch starts before the SPSO, while the SPSO is inside an in-flight batch
  (a restored window, then acknowledgements), acquires what that batch has available; Kafka misses
  the batch and acquires the fetched offsets again as a new batch, records before the SPSO
  included; likewise new records are never acquired before the SPSO;
* an acknowledgement whose range starts before the SPSO and whose partition has nothing in
  flight gets INVALID_RECORD_STATE, where Kafka's lookup fails with an internal error;
* offsets a restored state did not mention that a new log start passes are given up; Kafka goes
  on fetching at them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

from sundial.protocol.errors import ErrorCode

from .acknowledgement import TARGET_STATE, AcknowledgementBatch, AcknowledgeType
from .acquisition import (EMPTY_ACQUIRE, AcquiredRecords, AcquireMode, AcquireResult, FetchedBatch,
                          last_offset_of_batch_holding, ranges_of_batch_size, usable_batches,
                          without_ranges)
from .errors import ShareError
from .in_flight import EMPTY_MEMBER_ID, DeliveryCountOps, InFlightBatch, InFlightState
from .locks import AcquisitionLocks, LockTimer
from .state_batch import RecordState, ShareStateSnapshot, StateBatch, StateChange, coalesce
from .window import InFlightWindow, RecordView

#: Kafka ``SharePartition.MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT``.
MIN_THROTTLE_DELIVERY_LIMIT = 2

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ARCHIVED = RecordState.ARCHIVED

__all__ = ["PollResult", "RecordView", "SharePartition"]


@dataclass(frozen=True, slots=True)
class PollResult:
    change: StateChange
    #: Records whose acquisition lock ran out in this poll.
    expired_records: int = 0


class _Journal:
    """The transitions of one call, undone together when the call is refused."""

    __slots__ = ("entries", "batches")

    def __init__(self) -> None:
        self.entries: list[tuple[InFlightState, tuple]] = []
        self.batches: list[StateBatch] = []

    def record(self, state: InFlightState, saved: tuple, first: int, last: int) -> None:
        self.entries.append((state, saved))
        self.batches.append(StateBatch(first, last, state.state, state.delivery_count))

    def rollback(self) -> None:
        for state, saved in reversed(self.entries):
            state.restore(saved)


class SharePartition:
    """One share-partition. ``start_offset`` is where a partition with no state starts (the
    group's ``share.auto.offset.reset`` resolved against the log by the caller: latest, earliest,
    or by duration through the time index); ``max_in_flight_records`` is
    ``group.share.partition.max.record.locks`` and ``max_delivery_count``
    ``group.share.delivery.count.limit``. The lock duration is given with each call that locks
    records (the group's ``share.record.lock.duration.ms``, else ``group.share.record.lock.duration.ms``),
    as Kafka reads it anew for each acquisition."""

    def __init__(self, start_offset: int, *, max_in_flight_records: int, max_delivery_count: int,
                 state_epoch: int = 0) -> None:
        if start_offset < 0 or max_in_flight_records < 1 or max_delivery_count < 1:
            raise ValueError("start offset, in-flight cap and delivery-count limit must be positive")
        self._max_in_flight_records = max_in_flight_records
        self._max_delivery_count = max_delivery_count
        self._throttle_delivery_limit = max(MIN_THROTTLE_DELIVERY_LIMIT, math.ceil(max_delivery_count / 2))
        self._state_epoch = state_epoch
        self._locks = AcquisitionLocks()
        self._window = InFlightWindow(start_offset, self._locks)

    # --- persisted state ---------------------------------------------------------------------

    @classmethod
    def from_snapshot(cls, snapshot: ShareStateSnapshot, *, max_in_flight_records: int,
                      max_delivery_count: int) -> SharePartition:
        """A share-partition as a restart finds it (Kafka ``maybeInitialize`` with the persister's
        state): the state batches become in-flight batches, nothing is acquired, and offsets
        between the start offset and the last state batch that no batch mentions are fetched and
        delivered again. ValueError for batches before the start offset or overlapping. The
        caller then applies the log's start offset (:meth:`on_log_start_offset`)."""
        partition = cls(snapshot.start_offset, max_in_flight_records=max_in_flight_records,
                        max_delivery_count=max_delivery_count, state_epoch=snapshot.state_epoch)
        partition._window.load(snapshot.state_batches)
        return partition

    def snapshot(self) -> ShareStateSnapshot:
        """The whole state as it is persisted: records from the SPSO on, an acquired record as it
        was before it was acquired (AVAILABLE, one delivery less)."""
        return ShareStateSnapshot(self._state_epoch, self._window.start_offset, self._window.state_batches())

    # --- views -------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The share-partition start offset (SPSO)."""
        return self._window.start_offset

    @property
    def end_offset(self) -> int:
        """Kafka's end offset: the last offset fetched while records are in flight, the next
        offset to fetch when none is."""
        return self._window.end_offset

    @property
    def state_epoch(self) -> int:
        return self._state_epoch

    def in_flight_record_count(self) -> int:
        """Records between the SPSO and the end offset (Kafka ``numInFlightRecords``), the number
        ``group.share.partition.max.record.locks`` caps."""
        return self._window.record_count()

    def delivery_complete_count(self) -> int:
        """In-flight records (from the SPSO on) acknowledged or archived (Kafka
        ``deliveryCompleteCount``, persisted for the share lag of KIP-1226)."""
        return self._window.delivery_complete_count()

    def record(self, offset: int) -> RecordView | None:
        """The in-flight record at ``offset``, None if it is before the SPSO or not in flight."""
        return self._window.record(offset)

    def records(self) -> Iterator[tuple[int, RecordView]]:
        """(offset, record) of every in-flight record from the SPSO on, in offset order."""
        return self._window.records()

    def batch_layout(self) -> tuple[tuple[int, int, bool], ...]:
        """(first offset, last offset, tracked per offset) of each in-flight batch."""
        return tuple((b.first_offset, b.last_offset, b.is_split) for b in self._window.cached)

    def next_deadline_ms(self) -> int | None:
        """When :meth:`poll` next has a lock to release, or None when no record is acquired."""
        return self._locks.next_deadline_ms()

    def next_fetch_offset(self) -> int:
        """Where the next share fetch reads the log (Kafka ``nextFetchOffset``): the first
        in-flight record made available again (released, timed out, given back) or the first
        offset a restored state did not mention, else past the end offset."""
        return self._window.next_fetch_offset()

    def can_acquire_records(self) -> bool:
        """Whether a fetch may find records to acquire (Kafka ``canAcquireRecords``): some in-flight
        record is available again, or the in-flight cap is not reached."""
        if self.next_fetch_offset() != self._window.end_offset + 1:
            return True
        return self.in_flight_record_count() < self._max_in_flight_records

    # --- acquire -----------------------------------------------------------------------------

    def acquire(self, member_id: str, fetched: Sequence[FetchedBatch], *, fetch_offset: int,
                max_records: int, batch_size: int, lock_duration_ms: int, now_ms: int,
                mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED,
                aborted: Sequence[tuple[int, int]] = (),
                read_bound_offset: int | None = None) -> AcquireResult:
        """Acquire for ``member_id`` the available records among the ``fetched`` batches, read from
        ``fetch_offset`` (the :meth:`next_fetch_offset` the read started at), each under a lock
        until ``now_ms + lock_duration_ms`` (Kafka ``acquire``).

        ``max_records`` is the fetch's remaining ``MaxRecords``, ``batch_size`` its ``BatchSize``;
        ``aborted`` lists the offset ranges of aborted transactional batches for read_committed
        (see :mod:`.acquisition`); ``read_bound_offset``, when given, drops batches from that
        offset on (the high watermark or last stable offset the read was bounded by). Nothing
        acquired persists state: an acquired record is persisted as it was before.
        """
        if batch_size < 1:
            raise ValueError("batch size must be at least 1")
        batches = usable_batches(fetched, fetch_offset, read_bound_offset)
        if max_records <= 0 or not batches:
            return EMPTY_ACQUIRE
        last_to_acquire, max_to_acquire = self._acquire_limits(fetch_offset, max_records,
                                                               batches[-1].last_offset)
        if max_to_acquire <= 0:
            return EMPTY_ACQUIRE
        window = self._window
        lock_until = now_ms + lock_duration_ms
        record_limit = mode is AcquireMode.RECORD_LIMIT
        first_base = batches[0].base_offset

        archived = window.archive_stale_batches(fetch_offset, first_base)
        base = first_base
        floor = window.cached.floor(base)
        if base < window.start_offset and (floor is None or floor.last_offset < base):
            # The fetched batch starts before the SPSO: look from the SPSO, which may be inside an
            # in-flight batch (Kafka looks from the SPSO without that batch and acquires the
            # fetched offsets again, below the SPSO, as a new batch).
            base = window.start_offset
            floor = window.cached.floor(base)
        if floor is not None and floor.last_offset >= base:
            base = floor.first_offset
        overlapping = window.cached.between(base, last_to_acquire)
        if not overlapping:
            got = self._acquire_new(member_id, batches, record_limit, first_base, last_to_acquire,
                                    batch_size, max_to_acquire, lock_until)
            return self._without_aborted(got, aborted, archived)

        records: list[AcquiredRecords] = []
        count = 0
        gap_start = base
        for batch in overlapping:
            if count >= max_to_acquire:
                break
            if window.gap_window_active():
                # Offsets a restored state did not mention, before this batch: acquire them new.
                if gap_start < batch.first_offset:
                    got = self._acquire_new(member_id, batches, record_limit, gap_start, batch.first_offset - 1,
                                            batch_size, max_to_acquire - count, lock_until)
                    records.extend(got.records)
                    count += got.count
                gap_start = batch.last_offset + 1
                if count >= max_to_acquire:
                    break
            full_match = batch.first_offset >= first_base and batch.last_offset <= last_to_acquire
            remaining = max_to_acquire - count
            limit_subset = record_limit and batch.last_offset - batch.first_offset + 1 > remaining
            throttle = self._should_throttle(batch, first_base, last_to_acquire)
            if throttle and count > 0:
                # Records delivered often go out on their own, in a later fetch.
                max_to_acquire = 0
                break
            if not full_match or batch.is_split or limit_subset or throttle:
                if not batch.is_split:
                    if batch.batch_state.state is not AVAILABLE:
                        continue
                    batch.split(self._locks)
                got_count = self._acquire_offsets(member_id, batch, first_base, last_to_acquire, remaining,
                                                  record_limit, lock_until, records)
                count += got_count
                if throttle and got_count > 0:
                    max_to_acquire = 0
                    break
                continue
            state = batch.batch_state
            if state.state is not AVAILABLE:
                continue
            if not state.try_update(ACQUIRED, DeliveryCountOps.INCREASE, self._max_delivery_count, member_id):
                continue
            state.set_lock(self._locks.schedule(member_id, batch.first_offset, batch.last_offset, lock_until))
            records.append(AcquiredRecords(batch.first_offset, batch.last_offset, state.delivery_count))
            count += batch.last_offset - batch.first_offset + 1

        tail = overlapping[-1].last_offset
        if count < max_to_acquire and tail < last_to_acquire:
            got = self._acquire_new(member_id, batches, record_limit, tail + 1, last_to_acquire,
                                    batch_size, max_to_acquire - count, lock_until)
            records.extend(got.records)
            count += got.count
        if not records:
            if archived:
                window.advance_start_offset()
            return AcquireResult((), count)
        window.narrow_gap_window(records[-1].last_offset + 1)
        return self._without_aborted(AcquireResult(tuple(records), count), aborted, archived)

    def _acquire_limits(self, fetch_offset: int, max_records: int, last_offset: int) -> tuple[int, int]:
        """(last offset to acquire, most records to acquire) under the in-flight cap (Kafka
        ``lastOffsetAndMaxRecordsToAcquire``). At the cap, a fetch from within the window may still
        take records made available again, up to the end offset."""
        end_offset = self._window.end_offset
        max_to_acquire = min(max_records, self._max_in_flight_records - self.in_flight_record_count())
        last_to_acquire = last_offset
        if max_to_acquire <= 0 and fetch_offset <= end_offset:
            max_to_acquire = min(max_records, end_offset - fetch_offset + 1)
            last_to_acquire = min(last_offset, end_offset)
        return last_to_acquire, max_to_acquire

    def _acquire_new(self, member_id: str, batches: Sequence[FetchedBatch], record_limit: bool,
                     first_offset: int, last_offset: int, batch_size: int, max_records: int,
                     lock_until: int) -> AcquireResult:
        """Acquire offsets not in flight yet as new in-flight batches (Kafka ``acquireNewBatchRecords``)."""
        window = self._window
        # Never below the SPSO (Kafka checks this only for an empty window, against its end offset).
        first = max(first_offset, window.start_offset)
        if not window.cached and window.end_offset > first:
            first = window.end_offset
        last = last_offset
        if max_records < last - first + 1:
            # Up to the end of the fetched batch holding the limit.
            last = last_offset_of_batch_holding(batches, first + max_records - 1)
            if window.gap_window_active() and last > last_offset:
                last = last_offset
        if last < first:
            return EMPTY_ACQUIRE
        records = self._new_batches(member_id, batches, record_limit, max_records, first, last,
                                    batch_size, lock_until)
        window.on_new_batches(first, last)
        if record_limit:
            last = records[0].last_offset
        window.narrow_gap_window(last + 1)
        return AcquireResult(tuple(records), last - first + 1)

    def _new_batches(self, member_id: str, batches: Sequence[FetchedBatch], record_limit: bool,
                     max_records: int, first: int, last: int, batch_size: int,
                     lock_until: int) -> list[AcquiredRecords]:
        """The in-flight batches of newly acquired offsets (Kafka ``createBatches``)."""
        cached = self._window.cached
        if record_limit:
            ranges = [(first, last)]
            if last - first + 1 > max_records:
                # Only max_records of them are taken; the rest of the batch stays available.
                batch = InFlightBatch(first, last, InFlightState(ACQUIRED, 1, member_id))
                taken_last = first + max_records - 1
                batch.split_acquired_prefix(taken_last, self._locks, lock_until)
                self._window.mark_available()
                cached.put(batch)
                return [AcquiredRecords(first, taken_last, 1)]
        else:
            ranges = ranges_of_batch_size(batches, first, last, batch_size)
        out = []
        for lo, hi in ranges:
            lock = self._locks.schedule(member_id, lo, hi, lock_until)
            cached.put(InFlightBatch(lo, hi, InFlightState(ACQUIRED, 1, member_id, lock)))
            out.append(AcquiredRecords(lo, hi, 1))
        return out

    def _acquire_offsets(self, member_id: str, batch: InFlightBatch, request_first: int, request_last: int,
                         max_records: int, record_limit: bool, lock_until: int,
                         out: list[AcquiredRecords]) -> int:
        """Acquire the available offsets of a split batch within the request, one range each
        (Kafka ``acquireSubsetBatchRecords``); how many were acquired."""
        acquired = 0
        throttled_max = -1
        limit = self._max_delivery_count
        for offset, state in batch.offset_states.items():
            if offset < request_first:
                continue
            if offset > request_last:
                break
            if state.state is not AVAILABLE:
                continue
            delivery_count = state.delivery_count
            if limit > 2 and delivery_count == limit - 1 and acquired > 0:
                break  # a record on its last delivery goes alone, in the next fetch
            if delivery_count >= self._throttle_delivery_limit and throttled_max < 0:
                halvings = delivery_count - self._throttle_delivery_limit + 1
                throttled_max = max(1, len(batch.offset_states) >> halvings)
            if not state.try_update(ACQUIRED, DeliveryCountOps.INCREASE, limit, member_id):
                continue
            state.set_lock(self._locks.schedule(member_id, offset, offset, lock_until))
            out.append(AcquiredRecords(offset, offset, state.delivery_count))
            acquired += 1
            if state.delivery_count == limit and limit > 2:
                break
            if record_limit and acquired == max_records:
                break
            if acquired == throttled_max:
                break
        return acquired

    def _should_throttle(self, batch: InFlightBatch, request_first: int, request_last: int) -> bool:
        """Whether an available record of the batch within the request has been delivered at least
        ``max(2, ceil(limit / 2))`` times (Kafka ``shouldThrottleRecordsDelivery``)."""
        if not batch.is_split:
            state = batch.batch_state
            return state.state is AVAILABLE and state.delivery_count >= self._throttle_delivery_limit
        counts = [state.delivery_count for offset, state in batch.offset_states.items()
                  if request_first <= offset <= request_last and state.state is AVAILABLE]
        return max(counts, default=0) >= self._throttle_delivery_limit

    def _without_aborted(self, result: AcquireResult, aborted: Sequence[tuple[int, int]],
                         archived_before: bool) -> AcquireResult:
        """Archive the acquired records of aborted transactions and leave them out of the answer
        (Kafka ``filterAbortedTransactionalAcquiredRecords``); advance the SPSO over what was
        archived."""
        window = self._window
        archived = archived_before
        if aborted and result.records:
            ranges = sorted(aborted)
            for records in result.records:
                for lo, hi in ranges:
                    lo, hi = max(lo, records.first_offset), min(hi, records.last_offset)
                    if lo > hi:
                        continue
                    floor = window.cached.floor(lo)
                    start = lo if floor is None else floor.first_offset
                    if window.archive_records(lo, hi + 1, window.cached.between(start, hi), ACQUIRED):
                        archived = True
            kept = without_ranges(result.records, ranges)
            result = AcquireResult(tuple(kept), sum(r.record_count for r in kept))
        if archived:
            window.advance_start_offset()
        return result

    # --- acknowledge -------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch], *, now_ms: int,
                    lock_duration_ms: int) -> StateChange:
        """Apply a member's acknowledgements of one partition (Kafka ``acknowledge``), all or none.

        Refused with :class:`ShareError`, having changed no record state, when a type is unknown or
        a range is malformed (INVALID_REQUEST), when a range starts past the last in-flight offset
        it reaches or ends past it (INVALID_REQUEST), when no in-flight batch holds its first offset
        (INVALID_RECORD_STATE), or when an offset in it is not ACQUIRED by ``member_id``
        (INVALID_RECORD_STATE). Ranges wholly before the SPSO are skipped, as are the offsets of a
        range that are before it or that no in-flight batch holds. RENEW starts the lock again from
        ``now_ms`` (and stays renewed even if a later batch of the call is refused, as in Kafka).
        """
        journal = _Journal()
        try:
            for ack in batches:
                types = ack.validated_types()
                if ack.last_offset < self._window.start_offset:
                    continue
                for batch in self._batches_for_acknowledgement(ack):
                    self._acknowledge_batch(member_id, ack, types, batch, journal, now_ms + lock_duration_ms)
        except ShareError:
            journal.rollback()
            raise
        return self._commit(journal)

    def _batches_for_acknowledgement(self, ack: AcknowledgementBatch) -> list[InFlightBatch]:
        """Kafka ``fetchSubMapForAcknowledgementBatch``."""
        cached = self._window.cached
        start_offset = self._window.start_offset
        floor = cached.floor(ack.first_offset)
        if floor is None:
            if ack.first_offset < start_offset <= ack.last_offset:
                floor = cached.floor(start_offset)
            if floor is None:
                raise ShareError(ErrorCode.INVALID_RECORD_STATE,
                                 "Batch record not found. The request batch offsets are not found in the cache.")
        batches = cached.between(floor.first_offset, ack.last_offset)
        if batches[-1].last_offset < ack.first_offset:
            raise ShareError(ErrorCode.INVALID_REQUEST,
                             "Batch record not found. The first offset in request is past acquired records.")
        if ack.last_offset > batches[-1].last_offset:
            raise ShareError(ErrorCode.INVALID_REQUEST,
                             "Batch record not found. The last offset in request is past acquired records.")
        return batches

    def _acknowledge_batch(self, member_id: str, ack: AcknowledgementBatch, types: tuple[AcknowledgeType, ...],
                           batch: InFlightBatch, journal: _Journal, lock_until: int) -> None:
        """Kafka ``acknowledgeBatchRecords`` for one in-flight batch."""
        start_offset = self._window.start_offset
        if batch.last_offset < start_offset:
            return
        if not batch.is_split:
            holder = batch.batch_state.member_id
            if holder == EMPTY_MEMBER_ID:
                raise ShareError(ErrorCode.INVALID_RECORD_STATE,
                                 "The batch cannot be acknowledged. The batch is not in the acquired state.")
            if holder != member_id:
                raise ShareError(ErrorCode.INVALID_RECORD_STATE, "Member is not the owner of batch record")
        full_match = batch.first_offset >= ack.first_offset and batch.last_offset <= ack.last_offset
        start_inside = batch.first_offset < start_offset <= batch.last_offset
        if not full_match or batch.is_split or len(types) > 1 or start_inside:
            if not batch.is_split:
                if batch.batch_state.state is not ACQUIRED:
                    raise ShareError(ErrorCode.INVALID_RECORD_STATE,
                                     "The batch cannot be acknowledged. The subset batch is not in the acquired state.")
                batch.split(self._locks)
            self._acknowledge_offsets(member_id, ack, types, batch, journal, lock_until)
            return
        state = batch.batch_state
        if state.state is not ACQUIRED:
            raise ShareError(ErrorCode.INVALID_RECORD_STATE,
                             "The batch cannot be acknowledged. The batch is not in the acquired state.")
        self._apply_ack(member_id, types[0], state, batch.first_offset, batch.last_offset, journal, lock_until)

    def _acknowledge_offsets(self, member_id: str, ack: AcknowledgementBatch, types: tuple[AcknowledgeType, ...],
                             batch: InFlightBatch, journal: _Journal, lock_until: int) -> None:
        """Kafka ``acknowledgePerOffsetBatchRecords``."""
        start_offset = self._window.start_offset
        for offset, state in batch.offset_states.items():
            if offset < ack.first_offset or offset < start_offset:
                continue
            if offset > ack.last_offset:
                break
            if state.state is not ACQUIRED:
                raise ShareError(ErrorCode.INVALID_RECORD_STATE,
                                 "The offset cannot be acknowledged. The offset is not acquired.")
            if state.member_id != member_id:
                raise ShareError(ErrorCode.INVALID_RECORD_STATE, "Member is not the owner of offset")
            self._apply_ack(member_id, ack.type_at(types, offset), state, offset, offset, journal, lock_until)

    def _apply_ack(self, member_id: str, ack_type: AcknowledgeType, state: InFlightState, first: int, last: int,
                   journal: _Journal, lock_until: int) -> None:
        if ack_type is AcknowledgeType.RENEW:
            state.cancel_lock()
            state.set_lock(self._locks.schedule(member_id, first, last, lock_until))
            return
        saved = state.saved()
        if not state.try_update(TARGET_STATE[ack_type], DeliveryCountOps.NO_OP, self._max_delivery_count,
                                EMPTY_MEMBER_ID):
            raise ShareError(ErrorCode.INVALID_RECORD_STATE, "Unable to acknowledge records for the batch")
        journal.record(state, saved, first, last)

    def _commit(self, journal: _Journal) -> StateChange:
        """Complete the transitions of a call (Kafka ``completeStateTransition(true)``): their locks
        go, records available again move the next fetch back; then the SPSO advances."""
        for state, _ in journal.entries:
            state.cancel_lock()
            if state.state is AVAILABLE:
                self._window.mark_available()
        self._window.advance_start_offset()
        return StateChange(self._window.start_offset, coalesce(journal.batches))

    # --- releases: member departure, lock expiry, log start ------------------------------------

    def release_member(self, member_id: str, now_ms: int) -> StateChange:
        """Give back every record ``member_id`` holds (Kafka ``releaseAcquiredRecords``, on share
        session close and, from Kafka 4.1, when the member's connection drops): AVAILABLE with the
        delivery count decremented, or ARCHIVED when before the SPSO. Nothing here depends on
        ``now_ms``; it is taken as every other call takes it."""
        journal = _Journal()
        start_offset = self._window.start_offset
        for batch in self._window.cached:
            if (not batch.is_split and batch.batch_state.state is ACQUIRED
                    and batch.batch_state.member_id == member_id
                    and batch.first_offset < start_offset <= batch.last_offset):
                batch.split(self._locks)  # the part before the SPSO is archived, the rest released
            for first, last, state in batch.ranges():
                if state.state is ACQUIRED and state.member_id == member_id:
                    target = ARCHIVED if last < start_offset else AVAILABLE
                    saved = state.saved()
                    state.try_update(target, DeliveryCountOps.DECREASE, self._max_delivery_count, EMPTY_MEMBER_ID)
                    journal.record(state, saved, first, last)
        return self._commit(journal)

    def poll(self, now_ms: int) -> PollResult:
        """Release the records of every acquisition lock whose deadline has come (Kafka's timer
        running ``releaseAcquisitionLockOnTimeout``): AVAILABLE with the delivery count kept,
        ARCHIVED once it has reached the limit or when before the SPSO."""
        journal = _Journal()
        while (timer := self._locks.pop_expired(now_ms)) is not None:
            self._release_on_timeout(timer, journal)
        if not journal.entries:
            return PollResult(StateChange(self._window.start_offset))
        change = self._commit(journal)
        return PollResult(change, sum(b.record_count for b in journal.batches))

    def _release_on_timeout(self, timer: LockTimer, journal: _Journal) -> None:
        cached = self._window.cached
        start_offset = self._window.start_offset
        floor = cached.floor(timer.first_offset)
        if floor is None:
            return
        for batch in cached.between(floor.first_offset, timer.last_offset):
            if (not batch.is_split and batch.batch_state.state is ACQUIRED
                    and batch.first_offset < start_offset <= batch.last_offset):
                batch.split(self._locks)
            for first, last, state in batch.ranges():
                if last < timer.first_offset or state.state is not ACQUIRED:
                    continue
                if first > timer.last_offset:
                    break
                target = ARCHIVED if last < start_offset else AVAILABLE
                saved = state.saved()
                state.try_update(target, DeliveryCountOps.NO_OP, self._max_delivery_count, EMPTY_MEMBER_ID)
                journal.record(state, saved, first, last)

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """The log start offset moved to ``log_start_offset`` (Kafka ``updateCacheAndOffsets``):
        available records before it are archived and the SPSO moves there; acquired ones are
        archived when their member lets go of them. Nothing is persisted now: the new SPSO is
        written with the next state change."""
        self._window.move_log_start(log_start_offset)
