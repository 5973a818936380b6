"""Acquisition locks as deadlines (Kafka ``AcquisitionLockTimerTask`` on the share-partition's timer).

Each acquisition (a whole in-flight batch, or one offset of a batch tracked per offset) gets one
:class:`LockTimer`: the member that acquired, the offsets, and the deadline ``now_ms +`` the group's
``share.record.lock.duration.ms`` at the time of acquisition (or of the RENEW acknowledgement that
extended it). A timer is cancelled when its records leave the ACQUIRED state; one that is still
live when its deadline has come fires, and the share-partition makes its records available again
(or archives them). No clock is read here: :meth:`AcquisitionLocks.pop_expired` is given the time.

A deadline is reached when ``now_ms >= deadline_ms`` (Kafka's timer runs a task once its
expiration time has come).
"""

from __future__ import annotations

import heapq
import itertools


class LockTimer:
    """One acquisition lock (Kafka ``AcquisitionLockTimerTask``)."""

    __slots__ = ("deadline_ms", "member_id", "first_offset", "last_offset", "cancelled")

    def __init__(self, deadline_ms: int, member_id: str, first_offset: int, last_offset: int) -> None:
        self.deadline_ms = deadline_ms
        self.member_id = member_id
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __repr__(self) -> str:
        state = " cancelled" if self.cancelled else ""
        return (f"LockTimer({self.member_id!r} {self.first_offset}-{self.last_offset} "
                f"at {self.deadline_ms}{state})")


class AcquisitionLocks:
    """The live acquisition locks of one share-partition, by deadline (Kafka's ``Timer``).

    Cancelled timers stay in the heap until they reach its top or the heap is compacted, which
    happens when it holds more than twice as many entries as after the last compaction.
    """

    _MIN_COMPACT_AT = 64

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, LockTimer]] = []
        self._seq = itertools.count()
        self._compact_at = self._MIN_COMPACT_AT

    def schedule(self, member_id: str, first_offset: int, last_offset: int, deadline_ms: int) -> LockTimer:
        timer = LockTimer(deadline_ms, member_id, first_offset, last_offset)
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), timer))
        if len(self._heap) > self._compact_at:
            self._heap = [entry for entry in self._heap if not entry[2].cancelled]
            heapq.heapify(self._heap)
            self._compact_at = max(self._MIN_COMPACT_AT, 2 * len(self._heap))
        return timer

    def pop_expired(self, now_ms: int) -> LockTimer | None:
        """The live timer with the earliest deadline if that deadline has come, removed; else None."""
        self._drop_cancelled()
        if self._heap and self._heap[0][0] <= now_ms:
            return heapq.heappop(self._heap)[2]
        return None

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a live timer, or None when no record is acquired."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def _drop_cancelled(self) -> None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
