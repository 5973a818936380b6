"""Group commit for acks=all: one fsync covers every append that arrived before it.

A Produce with ``acks=-1`` is answered only after its data is on disk. Each
partition has a :class:`PartitionFlusher`: callers ``await wait_flushed(offset)``;
a flush covers everything appended up to the moment it starts, so concurrent
producers share fsyncs instead of queueing one each; at most two run per partition
at a time (see the class). The fsync itself (``FlushJob.run``) runs on one of a few
long-lived fsync threads (:class:`FlushThreads`) so the event loop keeps serving however
slow the disk; ``prepare_flush``/``mark_flushed`` run on the loop thread because storage
is not thread-safe.

Per flush the loop thread does one queue put and, when the fsync is done, runs one
callback (``loop.call_soon_threadsafe``; uvloop coalesces the wake-ups of completions
that arrive together): no executor future, chained asyncio future or task per flush.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import queue
import threading

import structlog

logger = structlog.get_logger(__name__)


class FlushThreads:
    """A fixed set of long-lived threads that run flush jobs from one queue.

    :meth:`submit` queues ``(job, loop, done)``; a free thread runs ``job.run()`` (the
    fdatasync calls release the GIL) and then schedules ``done(job, error)`` on ``loop``
    (``error`` is the exception ``run`` raised, or None). Jobs of different partitions
    run in parallel up to the number of threads; a job waits in the queue only while
    every thread is busy with another fsync. A thread is started only when none is idle,
    so a steady stream of one flush at a time keeps one warm thread (fewer wake-ups and
    context switches than spreading the jobs over all of them). The threads are daemons
    blocked on the queue when idle: they hold no lock and no data, and a shutdown
    flushes every log on the loop thread itself.
    """

    def __init__(self, threads: int) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._size = threads
        self._started = 0
        # Threads at (or on their way to) the queue minus jobs queued and not yet taken:
        # > 0 means a queued job finds a thread at once. Changed under _lock only.
        self._free = 0
        self._lock = threading.Lock()

    def submit(self, job, loop: asyncio.AbstractEventLoop, done) -> None:
        with self._lock:
            start = self._free <= 0 and self._started < self._size
            self._free -= 1
            if start:
                self._started += 1
                try:
                    threading.Thread(target=self._work, name=f"sundial-fsync_{self._started - 1}",
                                     daemon=True).start()
                except RuntimeError:  # the OS refused a thread: the running ones take the job
                    self._started -= 1
                    if self._started == 0:
                        self._free += 1
                        raise
        self._queue.put((job, loop, done))

    async def run(self, job) -> None:
        """Run ``job`` on a flush thread and wait for it (raises what ``job.run`` raised)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.submit(job, loop, lambda _job, error: _settle(fut, error))
        await fut

    def _work(self) -> None:
        get = self._queue.get
        lock = self._lock
        while True:
            with lock:
                self._free += 1
            job, loop, done = get()
            error = None
            try:
                job.run()
            except BaseException as exc:  # reaches the waiters; the thread goes on
                error = exc
            try:
                loop.call_soon_threadsafe(done, job, error)
            except RuntimeError:
                pass  # the loop is closed: the daemon is stopping and nobody waits


def _settle(fut: asyncio.Future, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


_THREADS: FlushThreads | None = None


def flush_threads() -> FlushThreads:
    """The process's fsync threads (four: two flushes in flight for each of two partitions)."""
    global _THREADS
    if _THREADS is None:
        _THREADS = FlushThreads(4)
    return _THREADS


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
        self._loop: asyncio.AbstractEventLoop | None = None
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
        loop = self._loop = asyncio.get_running_loop()
        fut = loop.create_future()
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
        try:
            flush_threads().submit(job, self._loop, self._job_done)
        except RuntimeError as exc:  # no fsync thread at all: fail the waiters, do not hang them
            self._running -= 1
            job.discard()
            logger.error("flush_failed", topic=self._topic, partition=self._partition, error=str(exc))
            self._release_below(None, exc)

    def _job_done(self, job, error: BaseException | None) -> None:
        """On the loop thread, once ``job.run()`` returned (``error``: what it raised)."""
        self._running -= 1
        if error is None:
            try:
                self._log.mark_flushed(job)
                self.flushes += 1
            except Exception as exc:
                error = exc
        if error is not None:  # an fsync failure must reach every producer it was to cover
            logger.error("flush_failed", topic=self._topic, partition=self._partition, error=str(error))
            self._release_below(job.target_offset, error)
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
