"""Group commit for acks=all: one fsync covers every append that arrived before it.

A Produce with ``acks=-1`` is answered only after its data is on disk. Each
partition has a :class:`PartitionFlusher`: callers ``await wait_flushed(offset)``;
a flush covers everything appended up to the moment it starts, so concurrent
producers share fsyncs instead of queueing one each; at most two run per partition
at a time (see the class). The fsync itself runs on one of a few long-lived fsync
threads so the event loop keeps serving however slow the disk; ``prepare_flush``/
``mark_flushed`` run on the loop thread because storage is not thread-safe.

Two implementations of those threads, one interface (``submit(job, loop, done)``,
``async run(job)``, ``close()``); :func:`make_flush_threads` picks one. There is no
process-wide pool: whoever builds the threads owns them and closes them (the broker's
:class:`PartitionFlushers`, built once by whoever composes the broker, or by a
ReplicaManager given none):

* :class:`NativeFlushThreads` (default when storage's native fsync worker is built,
  Linux; :func:`storage.files.native_fsync_worker`): the job hands its descriptors to
  native threads that fdatasync and close them without ever taking the GIL, and signal
  an eventfd the loop watches (``loop.add_reader``, once per loop); the loop's reader
  calls ``done`` for each finished job. No GIL hand-off on either side of the fsync.
* :class:`FlushThreads` (fallback; ``SUNDIAL_NATIVE_FSYNC=0`` or
  ``SUNDIAL_NO_EXTENSIONS=1`` force it): Python threads run each job (``FlushJob.run``,
  or the ``run_job`` it was built with) and report with ``loop.call_soon_threadsafe``
  (uvloop coalesces the wake-ups of completions that arrive together).

Either way the loop thread does one queue put per flush and runs one callback when the
fsync is done: no executor future, chained asyncio future or task per flush. Whoever
builds a :class:`PartitionFlusher` or a :class:`~broker.replica_manager.ReplicaManager`
may hand it its threads (``threads=``/``flush_threads=``); a test that needs a failing or
slow disk builds ``FlushThreads(n, run_job=...)`` and passes it in.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
import os
import queue
import threading

from typing import Callable

import structlog

from sundial.storage.files import native_fsync_built, native_fsync_worker
from sundial.storage.log_flush import FlushJob, close_fds, flush_failure

logger = structlog.get_logger(__name__)


def _run_job(job: FlushJob) -> None:
    job.run()


class _Runner:
    """``run`` on top of the subclass's ``submit(job, loop, done)``, shared by both implementations."""

    async def run(self, job) -> None:
        """Run ``job`` on a flush thread and wait for it (raises what ``job.run`` raises)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.submit(job, loop, lambda _job, error: _settle(fut, error))
        await fut


class FlushThreads(_Runner):
    """A fixed set of long-lived threads that run flush jobs from one queue.

    :meth:`submit` queues ``(job, loop, done)``; a free thread runs ``run_job(job)``
    (default ``job.run()``; the fdatasync calls release the GIL) and then schedules ``done(job, error)`` on ``loop``
    (``error`` is the exception ``run`` raised, or None). Jobs of different partitions
    run in parallel up to the number of threads; a job waits in the queue only while
    every thread is busy with another fsync. A thread is started only when none is idle,
    so a steady stream of one flush at a time keeps one warm thread (fewer wake-ups and
    context switches than spreading the jobs over all of them). The threads are daemons
    blocked on the queue when idle: they hold no lock and no data, and a shutdown
    flushes every log on the loop thread itself. The submitting thread takes no lock a
    worker holds (idle threads are counted in a deque, whose append and pop are atomic),
    so a worker the host preempts never holds up the event loop.
    """

    def __init__(self, threads: int, *, run_job: Callable[[FlushJob], None] = _run_job,
                 name: str = "sundial-fsync") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._run_job = run_job
        self._name = name
        self._size = threads
        self._started = 0            # submitting threads only (the event loop)
        self._idle: deque = deque()  # one entry per thread at (or on its way to) the queue
        self._closed = False

    @property
    def size(self) -> int:
        """The most threads that run at once."""
        return self._size

    def submit(self, job, loop: asyncio.AbstractEventLoop, done) -> None:
        if self._closed:
            raise RuntimeError("the fsync threads are closed")
        try:
            self._idle.pop()         # a thread is free: it takes the job
        except IndexError:
            if self._started < self._size:
                self._started += 1
                try:
                    threading.Thread(target=self._work, name=f"{self._name}_{self._started - 1}",
                                     daemon=True).start()
                except RuntimeError:  # the OS refused a thread: the running ones take the job
                    self._started -= 1
                    if self._started == 0:
                        raise
        self._queue.put((job, loop, done))

    def _work(self) -> None:
        get = self._queue.get
        idle = self._idle
        run_job = self._run_job
        first = True
        while True:
            if not first:
                idle.append(None)
            first = False            # the submit that started this thread counted it busy
            item = get()
            if item is None:         # close(): the jobs queued before it have run
                return
            job, loop, done = item
            error = None
            try:
                run_job(job)
            except BaseException as exc:  # reaches the waiters; the thread goes on
                error = exc
            try:
                loop.call_soon_threadsafe(done, job, error)
            except RuntimeError:
                pass  # the loop is closed: the daemon is stopping and nobody waits

    def close(self) -> None:
        """Let the threads end once the jobs queued before run; later submits raise RuntimeError."""
        if not self._closed:
            self._closed = True
            for _ in range(self._started):
                self._queue.put(None)


def _settle(fut: asyncio.Future, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


class NativeCompletions:
    """The jobs handed to one native worker (:func:`storage.files.native_fsync_worker`) and their
    reports: each loop that submits watches the worker's eventfd (``add_reader``, registered on
    its first job; loops closed since are forgotten then). The reader collects every finished
    job and calls ``done(job, error)`` on the job's own loop (directly when that is the running
    loop, else through ``call_soon_threadsafe``); ``error`` is None or ``failure(errno)``."""

    def __init__(self, worker, failure: Callable[[int], BaseException]) -> None:
        self.worker = worker
        self._fd = worker.fileno()
        self._failure = failure
        self._jobs: dict[int, tuple] = {}   # token -> (job, loop, done); loop threads only
        self._tokens = itertools.count()
        self._loops: list[asyncio.AbstractEventLoop] = []

    def track(self, job, loop: asyncio.AbstractEventLoop, done) -> int:
        """The token to submit ``job`` under; ``forget`` it when the submit fails."""
        if loop not in self._loops:
            self._loops = [known for known in self._loops if not known.is_closed()]
            loop.add_reader(self._fd, self._collect)
            self._loops.append(loop)
        token = next(self._tokens)
        self._jobs[token] = (job, loop, done)
        return token

    def forget(self, token: int) -> None:
        self._jobs.pop(token, None)

    def _collect(self) -> None:
        """The eventfd's reader, on some loop that submitted: report every finished job."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for token, err in self.worker.completed():
            entry = self._jobs.pop(token, None)
            if entry is None:
                continue
            job, loop, done = entry
            error = None if err == 0 else self._failure(err)
            if loop is running:
                try:
                    done(job, error)
                except Exception:   # one waiter's failure must not lose the other completions
                    logger.exception("native_job_callback_failed")
            else:
                try:
                    loop.call_soon_threadsafe(done, job, error)
                except RuntimeError:
                    pass  # that loop is closed: nobody waits for this job any more

    def close(self) -> None:
        """Stop watching, then stop the native threads once every queued job has run."""
        for loop in self._loops:
            if not loop.is_closed():
                loop.remove_reader(self._fd)
        self._loops = []
        self.worker.close()


class NativeFlushThreads(_Runner):
    """Flush jobs on native fsync threads (:func:`storage.files.native_fsync_worker`).

    :meth:`submit` takes the job's descriptors (``FlushJob.hand_over``) and queues them
    under a token; the worker fdatasyncs and closes them without the GIL and signals its
    eventfd, and :class:`NativeCompletions` reports the job with ``done(job, error)``, ``error``
    being None or what ``FlushJob.run`` would have raised (:func:`storage.log_flush.flush_failure`
    of the errno). Threads start lazily up to ``threads``, as with :class:`FlushThreads`.
    Every job is synced for real: a disk to inject goes through ``FlushThreads(run_job=...)``.
    """

    def __init__(self, threads: int) -> None:
        self._jobs = NativeCompletions(native_fsync_worker(threads),
                                       lambda err: flush_failure(OSError(err, os.strerror(err))))
        self._size = threads

    @property
    def size(self) -> int:
        """The most threads that run at once."""
        return self._size

    def submit(self, job, loop: asyncio.AbstractEventLoop, done) -> None:
        token = self._jobs.track(job, loop, done)
        try:
            fds = job.hand_over()
        except BaseException:
            self._jobs.forget(token)
            raise
        try:
            self._jobs.worker.submit(token, fds)
        except BaseException:   # RuntimeError: no thread could start; the fds are still ours
            self._jobs.forget(token)
            close_fds(fds)
            raise

    def close(self) -> None:
        """Stop the native threads once every queued job has run."""
        self._jobs.close()


def native_fsync_available() -> bool:
    """Whether :func:`make_flush_threads` builds :class:`NativeFlushThreads`: the extension is
    built and neither ``SUNDIAL_NATIVE_FSYNC=0`` nor ``SUNDIAL_NO_EXTENSIONS=1`` is set."""
    return native_fsync_built() and os.environ.get("SUNDIAL_NATIVE_FSYNC", "") != "0"


def make_flush_threads(threads: int) -> FlushThreads | NativeFlushThreads:
    """Up to ``threads`` new fsync threads for one owner, who closes them: native when available
    (:func:`native_fsync_available`), else Python threads. Threads start on demand (the
    broker's are ``num.io.threads``)."""
    return NativeFlushThreads(threads) if native_fsync_available() else FlushThreads(threads)


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

    def __init__(self, log, topic: str, partition: int, *, threads: FlushThreads | NativeFlushThreads) -> None:
        """``threads``: the fsync threads to run its flushes on."""
        self._log = log
        self._threads = threads
        self._topic = topic
        self._partition = partition
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._running = 0
        self._covered_below = -1    # target offset (exclusive) of the newest flush started
        self._highest_waiting = -1  # largest last_offset among waiters
        self._loop: asyncio.AbstractEventLoop | None = None
        self.flushes = 0

    def serves(self, log) -> bool:
        """Whether this flusher flushes ``log`` (a partition's log is replaced when its topic is
        deleted and created again; its flusher goes with the old one)."""
        return self._log is log

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
            self._threads.submit(job, self._loop, self._job_done)
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


class PartitionFlushers:
    """The one :class:`PartitionFlusher` of each partition, for every writer that waits for
    durability: Produce with acks=all and transaction markers (through the
    :class:`~broker.replica_manager.ReplicaManager`) and the coordinators' internal topics
    (``__consumer_offsets``, ``__share_group_state``: :class:`~broker.groups.offsets.PartitionOffsetsLog`).
    One flusher per log means one in-flight accounting per log: a coordinator's write and a
    marker written to the same partition share fsyncs instead of racing two flushers.

    A partition's flusher goes with its log: when the log was replaced (topic deleted and
    created again, a log-dir move's swap) the next call builds a new one.
    """

    def __init__(self, threads: FlushThreads | NativeFlushThreads | None = None, *, thread_count: int = 1) -> None:
        """``threads``: the fsync threads every flusher runs on, owned by the caller (None: up to
        ``thread_count`` new ones of :func:`make_flush_threads`, owned and closed by :meth:`close`)."""
        self._owns_threads = threads is None
        self.threads = threads if threads is not None else make_flush_threads(thread_count)
        self._flushers: dict[tuple[str, int], PartitionFlusher] = {}

    def flusher(self, topic: str, partition: int, log) -> PartitionFlusher:
        """The flusher of ``log``, partition ``partition`` of ``topic``."""
        key = (topic, partition)
        f = self._flushers.get(key)
        if f is None or not f.serves(log):
            f = PartitionFlusher(log, topic, partition, threads=self.threads)
            self._flushers[key] = f
        return f

    async def wait_flushed(self, topic: str, partition: int, log, last_offset: int) -> None:
        """Return once every offset <= ``last_offset`` of ``log`` is fsynced (raises what the fsync raised)."""
        await self.flusher(topic, partition, log).wait_flushed(last_offset)

    def forget_topic(self, topic: str) -> None:
        """Drop the flushers of ``topic`` (deleted)."""
        for key in [k for k in self._flushers if k[0] == topic]:
            del self._flushers[key]

    def close(self) -> None:
        """Forget every flusher and close the threads when they are this object's own."""
        self._flushers.clear()
        if self._owns_threads:
            self.threads.close()
