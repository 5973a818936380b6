"""Group commit for acks=all: one fsync covers every append that arrived before it.

A Produce with ``acks=-1`` is answered only after its data is on disk. Each
partition has a :class:`PartitionFlusher`: callers ``await wait_flushed(offset)``;
at most one flush runs per partition at a time, and it covers everything appended
up to the moment it starts, so concurrent producers share fsyncs instead of queueing
one each. The fsync itself (``FlushJob.run``) runs on a small thread pool so the
event loop keeps serving; ``prepare_flush``/``mark_flushed`` run on the loop thread
because storage is not thread-safe.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from concurrent.futures import ThreadPoolExecutor

import structlog

logger = structlog.get_logger(__name__)

_EXECUTOR: ThreadPoolExecutor | None = None


def flush_executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sundial-fsync")
    return _EXECUTOR


class PartitionFlusher:
    """Serialises and batches fsyncs of one partition log."""

    def __init__(self, log, topic: str, partition: int) -> None:
        self._log = log
        self._topic = topic
        self._partition = partition
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._task: asyncio.Task | None = None
        self.flushes = 0

    def flushed_offset(self) -> int:
        """Offsets below this are on disk."""
        return self._log.recovery_point

    async def wait_flushed(self, last_offset: int) -> None:
        """Return once every offset <= last_offset has been fsynced."""
        fut = self.flushed_future(last_offset)
        if fut is not None:
            await asyncio.shield(fut)

    def flushed_future(self, last_offset: int) -> asyncio.Future | None:
        """A future done once every offset <= last_offset is fsynced (exception: the fsync
        failed), or None when that is already so. Cancelling it only drops this waiter."""
        if self._log.recovery_point > last_offset:
            return None
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        heapq.heappush(self._waiters, (last_offset, next(self._seq), fut))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                job = self._log.prepare_flush()
                if job is not None:
                    await loop.run_in_executor(flush_executor(), job.run)
                    self._log.mark_flushed(job)
                    self.flushes += 1
                done_below = self._log.recovery_point
                while self._waiters and self._waiters[0][0] < done_below:
                    _, _, fut = heapq.heappop(self._waiters)
                    if not fut.done():
                        fut.set_result(None)
                if job is None and self._waiters:
                    # Nothing to flush yet everybody is not covered: the log moved
                    # (truncation or deletion). Release the waiters rather than spin.
                    self._fail_all(None)
        except Exception as exc:  # an fsync failure must reach every waiting producer
            logger.error("flush_failed", topic=self._topic, partition=self._partition, error=str(exc))
            self._fail_all(exc)

    def _fail_all(self, exc: BaseException | None) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                if exc is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(exc)
