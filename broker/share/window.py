"""The in-flight window of a share-partition: its start and end offsets, the in-flight batches
between them and where the next fetch reads (the offsets half of Kafka ``SharePartition``).

The start offset (SPSO) is the first offset not yet acknowledged or archived; every record before
it is done. The records from the SPSO to the end offset are *in flight*, in :class:`CachedState`.
The SPSO advances over a prefix of finished records, and in-flight batches wholly behind it are
dropped (:meth:`InFlightWindow.advance_start_offset`). The next fetch reads past the end offset,
or back at the first in-flight record made available again (:meth:`InFlightWindow.next_fetch_offset`).

A restored window may have a *gap window* (Kafka ``GapWindow``): offsets after the SPSO that the
persisted state did not mention because they were acquired, and never acknowledged, when it was
written. They are fetched and delivered again, in offset order, until the end offset has moved
past the last restored batch; meanwhile the SPSO does not pass them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from .cached_state import CachedState
from .in_flight import InFlightBatch, InFlightState
from .locks import AcquisitionLocks
from .state_batch import RecordState, StateBatch, coalesce

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED


@dataclass(frozen=True, slots=True)
class RecordView:
    """One in-flight record as the engine holds it."""

    state: RecordState
    delivery_count: int
    member_id: str
    #: The acquisition lock's deadline while ACQUIRED, else None.
    deadline_ms: int | None


@dataclass(slots=True)
class _GapWindow:
    end_offset: int
    gap_start_offset: int


class InFlightWindow:
    def __init__(self, start_offset: int, locks: AcquisitionLocks) -> None:
        self._locks = locks
        self._start_offset = start_offset
        self._end_offset = start_offset
        self._cached = CachedState()
        self._find_next_fetch_offset = False
        self._gap_window: _GapWindow | None = None

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        """Kafka's end offset: the last offset fetched while records are in flight, the next
        offset to fetch when none is."""
        return self._end_offset

    @property
    def cached(self) -> CachedState:
        """The in-flight batches (the share-partition adds and changes them)."""
        return self._cached

    def record_count(self) -> int:
        """Records between the SPSO and the end offset (Kafka ``numInFlightRecords``)."""
        return self._end_offset - self._start_offset + 1 if self._cached else 0

    # --- restore and persist -----------------------------------------------------------------

    def load(self, state_batches: Sequence[StateBatch]) -> None:
        """Fill an empty window from persisted state batches (Kafka ``maybeInitialize``)."""
        gap_start = -1
        previous_last = self._start_offset - 1
        for sb in sorted(state_batches, key=lambda b: b.first_offset):
            if sb.first_offset < self._start_offset or sb.first_offset <= previous_last:
                raise ValueError(f"state batch {sb} before the start offset {self._start_offset} or overlapping")
            if sb.last_offset < sb.first_offset:
                raise ValueError(f"empty state batch {sb}")
            if gap_start == -1 and sb.first_offset > previous_last + 1:
                gap_start = previous_last + 1
            previous_last = sb.last_offset
            # Nothing is persisted as acquired; should a state say so, its lock is long gone.
            state = AVAILABLE if sb.delivery_state is ACQUIRED else RecordState(sb.delivery_state)
            self._cached.put(InFlightBatch(sb.first_offset, sb.last_offset,
                                           InFlightState(state, sb.delivery_count)))
        if not self._cached:
            return
        self._find_next_fetch_offset = True
        self._end_offset = self._cached.last().last_offset
        if gap_start != -1:
            self._gap_window = _GapWindow(self._end_offset, gap_start)
        self.advance_start_offset()

    def state_batches(self) -> tuple[StateBatch, ...]:
        """The in-flight records from the SPSO on as persisted: an acquired record as it was before
        it was acquired (AVAILABLE, one delivery less)."""
        batches = []
        for batch in self._cached:
            for first, last, state in batch.ranges():
                if last < self._start_offset:
                    continue
                record_state, count = state.state, state.delivery_count
                if record_state is ACQUIRED:
                    record_state, count = AVAILABLE, count - 1
                batches.append(StateBatch(max(first, self._start_offset), last, record_state, count))
        return coalesce(batches)

    # --- views -------------------------------------------------------------------------------

    def delivery_complete_count(self) -> int:
        done = 0
        for batch in self._cached:
            for first, last, state in batch.ranges():
                if state.state.is_terminal and last >= self._start_offset:
                    done += last - max(first, self._start_offset) + 1
        return done

    def record(self, offset: int) -> RecordView | None:
        if offset < self._start_offset:
            return None
        batch = self._cached.floor(offset)
        if batch is None or offset > batch.last_offset:
            return None
        return _view(batch.offset_states[offset] if batch.is_split else batch.batch_state)

    def records(self) -> Iterator[tuple[int, RecordView]]:
        for batch in self._cached:
            for first, last, state in batch.ranges():
                view = _view(state)
                for offset in range(max(first, self._start_offset), last + 1):
                    yield offset, view

    # --- the next fetch ----------------------------------------------------------------------

    def mark_available(self) -> None:
        """An in-flight record became available: the next fetch looks for it."""
        self._find_next_fetch_offset = True

    def next_fetch_offset(self) -> int:
        """Kafka ``nextFetchOffset``."""
        cached = self._cached
        fresh = not cached or self._start_offset > cached.last().last_offset
        if not self._find_next_fetch_offset:
            return self._end_offset if fresh else self._end_offset + 1
        if fresh:
            self._find_next_fetch_offset = False
            return self._end_offset
        gap_active = self.gap_window_active()
        gap_start = self._gap_window.gap_start_offset if gap_active else -1
        for batch in cached:
            if gap_active:
                if batch.first_offset > gap_start:
                    return gap_start
                gap_start = max(batch.last_offset + 1, gap_start)
            for first, _, state in batch.ranges():
                if state.state is AVAILABLE:
                    return first
        self._find_next_fetch_offset = False
        return self._end_offset + 1

    def on_new_batches(self, first_offset: int, last_offset: int) -> None:
        """New in-flight batches cover ``first_offset..last_offset`` (Kafka, end of
        ``acquireNewBatchRecords``): a window that starts with them starts there, and the end
        offset moves up to them (not when they fill a gap of a restored window)."""
        if self._cached.first().first_offset == first_offset:
            self._start_offset = first_offset
        if last_offset > self._end_offset:
            self._end_offset = last_offset

    def gap_window_active(self) -> bool:
        return self._gap_window is not None and self._gap_window.end_offset == self._end_offset

    def narrow_gap_window(self, offset: int) -> None:
        """Kafka ``maybeUpdatePersisterGapWindowStartOffset``: the restored offsets before
        ``offset`` are fetched; the window closes once the end offset has moved past it."""
        window = self._gap_window
        if window is None:
            return
        if window.end_offset == self._end_offset and offset <= window.end_offset:
            window.gap_start_offset = offset
        else:
            self._gap_window = None

    # --- archiving ---------------------------------------------------------------------------

    def archive_records(self, start: int, end_exclusive: int, batches: Sequence[InFlightBatch],
                        from_state: RecordState) -> bool:
        """Archive the records in ``from_state`` within ``start..end_exclusive - 1`` of ``batches``
        (Kafka ``archiveRecords``); whether any was."""
        any_archived = False
        last = end_exclusive - 1
        for batch in batches:
            if batch.first_offset >= end_exclusive:
                break
            full_match = batch.first_offset >= start and batch.last_offset <= last
            if not full_match or batch.is_split:
                if not batch.is_split:
                    if batch.batch_state.state is not from_state:
                        continue
                    batch.split(self._locks)
                for offset, state in batch.offset_states.items():
                    if offset < start:
                        continue
                    if offset > last:
                        break
                    if state.state is not from_state:
                        continue
                    state.archive()
                    any_archived = True
                continue
            if batch.batch_state.state is from_state:
                batch.batch_state.archive()
                any_archived = True
        return any_archived

    def archive_stale_batches(self, fetch_offset: int, base_offset: int) -> bool:
        """Archive available in-flight records between the fetch offset and the first fetched batch
        (Kafka ``maybeArchiveStaleBatches``): the log no longer has them (compaction), and the SPSO
        must be able to pass them."""
        if not self._cached or fetch_offset >= base_offset:
            return False
        from_offset = fetch_offset
        floor = self._cached.floor(fetch_offset)
        if floor is not None and floor.last_offset >= fetch_offset:
            from_offset = floor.first_offset
        stale = self._cached.between(from_offset, base_offset, to_inclusive=False)
        if stale and self.archive_records(fetch_offset, base_offset, stale, AVAILABLE):
            self._find_next_fetch_offset = True
            return True
        return False

    def move_log_start(self, log_start_offset: int) -> None:
        """Kafka ``updateCacheAndOffsets``. Unlike Kafka, restored offsets still to fetch that are
        now before the log start are given up too; Kafka would go on fetching at them, and fail."""
        if log_start_offset <= self._start_offset:
            return
        if not self._cached:
            self._start_offset = self._end_offset = log_start_offset
            return
        if self.archive_records(self._start_offset, log_start_offset, list(self._cached), AVAILABLE):
            self._find_next_fetch_offset = True
        self._start_offset = log_start_offset
        if self._end_offset < self._start_offset:
            self._end_offset = self._start_offset
        if self._gap_window is not None and self._gap_window.gap_start_offset < log_start_offset:
            self._gap_window.gap_start_offset = log_start_offset

    # --- the start offset --------------------------------------------------------------------

    def advance_start_offset(self) -> None:
        """Move the SPSO past the acknowledged and archived records at the front of the window and
        drop the in-flight batches wholly behind it (Kafka ``maybeUpdateCachedStateAndOffsets``).
        Unlike Kafka, never backwards (below a log start offset it was moved to)."""
        if not self._can_move_start_offset():
            return
        last_done = self._last_offset_done()
        if last_done == -1:
            return
        cached = self._cached
        if last_done == cached.last().last_offset:
            self._start_offset = max(self._start_offset, last_done + 1)
            self._end_offset = self._start_offset
            cached.clear()
            return
        first_key = cached.first().first_offset
        holder = cached.floor(last_done)
        if last_done == holder.last_offset:
            next_key = cached.higher_key(last_done)
            if next_key > self._start_offset:
                self._start_offset = next_key
            if self.gap_window_active():
                # Offsets the restored state did not mention come before the next batch.
                self._start_offset = min(self._gap_window.gap_start_offset, self._start_offset)
            last_key_to_remove = holder.first_offset
        else:
            if last_done + 1 > self._start_offset:
                self._start_offset = last_done + 1
            last_key_to_remove = None if holder.first_offset == first_key else cached.lower_key(holder.first_offset)
        if last_key_to_remove is not None:
            cached.remove_through(last_key_to_remove)

    def _can_move_start_offset(self) -> bool:
        """Kafka ``canMoveStartOffset``: the record at the SPSO is acknowledged or archived."""
        floor = self._cached.floor(self._start_offset) if self._cached else None
        if floor is None:
            return False  # nothing in flight, or restored offsets at the SPSO still to fetch
        if self._start_offset > floor.last_offset:
            return True  # the SPSO moved past this batch (log start); the scan decides
        state = floor.offset_states[self._start_offset] if floor.is_split else floor.batch_state
        return state.state.is_terminal

    def _last_offset_done(self) -> int:
        """The last offset of the run of acknowledged and archived records at the front of the
        in-flight batches, -1 if the first is not (Kafka ``findLastOffsetAcknowledged``)."""
        last_done = -1
        gap = self._gap_window if self.gap_window_active() else None
        for batch in self._cached:
            if gap is not None and batch.last_offset >= gap.gap_start_offset:
                return last_done
            for _, last, state in batch.ranges():
                if not state.state.is_terminal:
                    return last_done
                last_done = last
        return last_done


def _view(state: InFlightState) -> RecordView:
    deadline = state.lock.deadline_ms if state.lock is not None and state.state is ACQUIRED else None
    return RecordView(state.state, state.delivery_count, state.member_id, deadline)
