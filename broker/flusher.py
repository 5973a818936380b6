"""Group commit for acks=all: one fsync covers every append that arrived before it.

A Produce with ``acks=-1`` is answered only after its data is on disk. Each
partition has a :class:`PartitionFlusher`: callers ``await wait_flushed(offset)``;
a flush covers everything appended up to the moment it starts, so concurrent
producers share fsyncs instead of queueing one each; at most two run per partition
at a time (see the class). The fsync itself (``FlushJob.run``) runs on a small thread pool so the
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
        _EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sundial-fsync")
    return _EXECUTOR


class PartitionFlusher:
    """Batches the fsyncs of one partition log, with up to two in flight.

    A waiter is covered by the first flush that starts after its data was appended.
    While one fsync runs, appends that arrive after it started need another: that one
    starts at once (a second thread) instead of waiting for the first to finish, so a
    request waits about one fsync, not up to two. Concurrent fdatasync calls are safe:
    each makes durable everything written to the file before it began, so a flush that
    finishes first may advance the recovery point past one still running.
    """

    MAX_IN_FLIGHT = 2

    def __init__(self, log, topic: str, partition: int) -> None:
        self._log = log
        self._topic = topic
        self._partition = partition
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._running = 0
        self._covered_below = -1    # target offset (exclusive) of the newest flush started
        self._highest_waiting = -1  # largest last_offset among waiters
        self._jobs: set[asyncio.Task] = set()
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
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (last_offset, next(self._seq), fut))
        if last_offset > self._highest_waiting:
            self._highest_waiting = last_offset
        self._start_flush()
        return fut

    def _start_flush(self) -> None:
        """Start a flush if some waiter is not covered by one running and a slot is free."""
        if self._running >= self.MAX_IN_FLIGHT or not self._waiters:
            return
        if self._running and self._highest_waiting < self._covered_below:
            return  # everybody waiting is covered by a flush already running
        try:
            job = self._log.prepare_flush()
        except Exception as exc:
            logger.error("flush_failed", topic=self._topic, partition=self._partition, error=str(exc))
            self._release_below(None, exc)
            return
        if job is None:
            if not self._running:
                # Nothing to flush yet waiters are not covered: the log moved (truncation
                # or deletion). Release them rather than spin.
                self._release_below(None, None)
            return
        self._covered_below = job.target_offset
        self._running += 1
        task = asyncio.get_running_loop().create_task(self._run_job(job))
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def _run_job(self, job) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(flush_executor(), job.run)
            self._log.mark_flushed(job)
            self.flushes += 1
        except Exception as exc:  # an fsync failure must reach every producer it was to cover
            logger.error("flush_failed", topic=self._topic, partition=self._partition, error=str(exc))
            self._release_below(job.target_offset, exc)
        finally:
            self._running -= 1
        self._release_below(self._log.recovery_point, None)
        self._start_flush()

    def _release_below(self, end_offset: int | None, exc: BaseException | None) -> None:
        """Complete waiters whose last offset is below ``end_offset`` (None: all of them)."""
        waiters = self._waiters
        while waiters and (end_offset is None or waiters[0][0] < end_offset):
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                if exc is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(exc)
        if not waiters:
            self._highest_waiting = -1
