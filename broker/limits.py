"""Memory bound on buffered request bytes across all connections (``queued.max.request.bytes``).

Kafka's request ``MemoryPool`` (non-strict): a connection may start receiving a
request body only when the pool has memory left; the whole declared size is then
taken at once, so the body is always received to the end (a frame half-read never
waits for memory, which is what keeps the pool free of deadlocks). When the pool is
exhausted a connection that wants to start a new body stops reading until requests
finish and give their bytes back. One body may overshoot the limit, as in Kafka.

Accounting (bytes are request *bodies*, the 4-byte size prefix excluded):

* a frame whose size prefix has been read holds a grant of its declared size;
* complete frames (queued or being handled) hold their size until handled;
* bytes of a frame whose grant was refused are not counted: at most one socket read
  per paused connection, and counting them could starve the pool of grants.

A limit of -1 (Kafka's default) or 0 means no bound: grants always succeed and the
pool only keeps count (``used_bytes`` is exported for tests and metrics).

The per-connection bound is separate (:mod:`broker.connection`): reading pauses
while the connection's queued bytes pass ``sundial.connection.max.queued.bytes``.
"""

from __future__ import annotations

from collections import deque


class RequestMemoryPool:
    __slots__ = ("limit_bytes", "used_bytes", "peak_bytes", "_waiters")

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes if limit_bytes and limit_bytes > 0 else 0
        self.used_bytes = 0
        self.peak_bytes = 0
        self._waiters: deque = deque()

    @property
    def bounded(self) -> bool:
        return self.limit_bytes > 0

    def available(self) -> bool:
        return not self.limit_bytes or self.used_bytes < self.limit_bytes

    def try_grant(self, n: int) -> bool:
        if self.available():
            self.charge(n)
            return True
        return False

    def charge(self, n: int) -> None:
        self.used_bytes += n
        if self.used_bytes > self.peak_bytes:
            self.peak_bytes = self.used_bytes

    def release(self, n: int) -> None:
        if n <= 0:
            return
        self.used_bytes -= n
        if self.used_bytes < 0:  # pragma: no cover - accounting bug guard
            self.used_bytes = 0
        while self._waiters and self.available():
            waiter = self._waiters.popleft()
            waiter.grant_arrived()

    def wait(self, waiter) -> None:
        """Queue ``waiter`` (``grant_arrived()`` is called once memory is available)."""
        self._waiters.append(waiter)

    def forget(self, waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    @property
    def waiting(self) -> int:
        return len(self._waiters)
