"""Parked long-poll fetches, woken by appends (Kafka's DelayedFetch purgatory, simplified).

A Fetch that cannot satisfy ``min_bytes`` waits up to ``max_wait_ms``. It parks a
:class:`FetchWaiter` on every partition it reads; an append to any of them sets the
waiter, and the fetch then re-reads and decides again. A waiter completes exactly
once; waiters that time out are unregistered by their owner, so the registry only
holds live waiters (bounded by the number of connections, since each connection
runs one request at a time).

Shutdown (:meth:`FetchPurgatory.wake_all`) ends every long poll: a parked waiter's
``wait`` returns False as on a timeout, and so does any waiter parked afterwards, so
the fetch answers at once with what it has instead of parking again until
``max_wait_ms`` (which would hold the clean shutdown for up to its grace period).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Iterable

TopicPartition = tuple[str, int]


class FetchWaiter:
    """One parked fetch: an event set by the first append to a watched partition."""

    __slots__ = ("_event", "partitions", "_ended")

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self._event = asyncio.Event()
        self.partitions = tuple(partitions)
        self._ended = False

    def wake(self) -> None:
        self._event.set()

    def end(self) -> None:
        """Shutdown: the wait is over, answer with what there is."""
        self._ended = True
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """True when woken by an append; False on timeout or when the broker is shutting down."""
        if not self._event.is_set():
            try:
                await asyncio.wait_for(self._event.wait(), timeout_s)
            except asyncio.TimeoutError:
                return False
        return not self._ended


class FetchPurgatory:
    """Registry of parked fetches keyed by topic-partition."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[FetchWaiter]] = defaultdict(set)
        self._shutting_down = False

    def park(self, partitions: Iterable[TopicPartition]) -> FetchWaiter:
        waiter = FetchWaiter(partitions)
        if self._shutting_down:
            waiter.end()
        for tp in waiter.partitions:
            self._waiters[tp].add(waiter)
        return waiter

    def unpark(self, waiter: FetchWaiter) -> None:
        for tp in waiter.partitions:
            bucket = self._waiters.get(tp)
            if bucket is not None:
                bucket.discard(waiter)
                if not bucket:
                    del self._waiters[tp]

    def notify(self, topic: str, partition: int) -> None:
        """Called after an append: wake every fetch parked on that partition."""
        bucket = self._waiters.get((topic, partition))
        if bucket:
            for waiter in bucket:
                waiter.wake()

    def wake_all(self) -> None:
        """Shutdown: let every parked fetch answer now with what it has (and none park again)."""
        self._shutting_down = True
        for bucket in self._waiters.values():
            for waiter in bucket:
                waiter.end()

    def __len__(self) -> int:
        return len({w for bucket in self._waiters.values() for w in bucket})
