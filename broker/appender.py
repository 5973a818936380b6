"""Appends whose writes leave the event loop: one queue per partition, writer threads for the bytes.

An append to a partition log has three steps (:meth:`storage.log.PartitionLog.begin_append`,
the write, :meth:`~storage.log.PartitionLog.finish_append`). Validation, the producer-state
check, the offsets and the roll are CPU work on the loop thread; the write of the bytes is
the step whose cost depends on the disk (a ``pwritev`` into the page cache can wait for
writeback or the filesystem's journal for a long time on a busy disk), so it runs on an
:class:`AppendWriters` thread while the loop serves other requests. The log's state moves
only in ``finish_append``, back on the loop, so readers never see an append half done.

:class:`PartitionAppender` keeps each partition's appends in arrival order: while one write
is in flight the next appends wait in its queue and begin, one after another, when it ends
(their offsets and idempotent sequences are those of one-at-a-time appends). An append that
needs no write (an idempotent retry, a refused batch) is answered without a thread hop when
nothing is queued before it. Callers get the outcome at once or an ``asyncio.Future`` of it.

:class:`AppendWriters` has two implementations behind one ``submit(pending, loop, done)``:
native threads of :mod:`storage._fsync_worker` (``submit_write``: they never take the GIL and
signal an eventfd the loop watches), or Python threads when the extension is not built
(``SUNDIAL_NATIVE_FSYNC=0`` or ``SUNDIAL_NO_EXTENSIONS=1`` force them). They are separate
from the fsync threads of :mod:`broker.flusher`, so an acks=1 write never queues behind an
fsync. A test that needs a slow or failing disk builds ``AppendWriters(n, write=...)``.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Callable

import structlog

from sundial.storage import disk
from sundial.storage.files import native_fsync_built, native_fsync_worker, pwritev_all
from sundial.storage.log import AppendResult, PendingAppend

from .flusher import FlushThreads, NativeCompletions

logger = structlog.get_logger(__name__)



def _write(fd: int, position: int, chunks: tuple) -> None:
    pwritev_all(fd, chunks, position, sum(len(c) for c in chunks))


def _write_on_slow_disk(fd: int, position: int, chunks: tuple) -> None:
    disk.current().pause("write")
    _write(fd, position, chunks)


class _WriteJob:
    """One append's write for a Python writer thread: the descriptor it owns and closes."""

    __slots__ = ("pending", "_parts", "_write")

    def __init__(self, pending: PendingAppend, write: Callable[[int, int, tuple], None]) -> None:
        self.pending = pending
        self._parts = pending.hand_over()
        self._write = write

    def run(self) -> None:
        fd, position, chunks = self._parts
        try:
            self._write(fd, position, chunks)
        finally:
            os.close(fd)


def _as_os_error(error: BaseException | None) -> OSError | None:
    if error is None or isinstance(error, OSError):
        return error
    return OSError(f"append write failed: {error!r}")   # a broken injected disk: an I/O error


class AppendWriters:
    """The threads that write appends' bytes (see module doc); whoever builds them closes them.
    Up to ``threads`` of them, started on demand (the broker's ``num.io.threads``): appends of
    that many partitions write at once.

    Native threads (:class:`broker.flusher.NativeCompletions` over their own
    :func:`~storage.files.native_fsync_worker`, ``submit_write``) when built, else Python ones
    (:class:`broker.flusher.FlushThreads` running :class:`_WriteJob`). ``write(fd, position,
    chunks)`` replaces the write on Python threads (a slow or failing disk in tests), and so
    does the disk seam when it makes ``write`` slow (:mod:`storage.disk`): only Python threads
    can call back into it."""

    def __init__(self, threads: int, *,
                 write: Callable[[int, int, tuple], None] | None = None) -> None:
        if write is None and disk.current().is_slow("write"):
            write = _write_on_slow_disk
        native = write is None and native_fsync_built() and os.environ.get("SUNDIAL_NATIVE_FSYNC", "") != "0"
        self._write = write or _write
        self._native = NativeCompletions(native_fsync_worker(threads),
                                         lambda err: OSError(err, os.strerror(err))) if native else None
        self._threads = None if native else FlushThreads(threads, name="sundial-append")

    def submit(self, pending: PendingAppend, loop: asyncio.AbstractEventLoop, done) -> None:
        """Write ``pending``'s bytes on a writer thread, then call ``done(pending, error)`` on
        ``loop`` (``error``: the ``OSError`` of a failed write, or None)."""
        if self._native is None:
            self._threads.submit(_WriteJob(pending, self._write), loop,
                                 lambda job, error: done(job.pending, _as_os_error(error)))
            return
        token = self._native.track(pending, loop, done)
        try:
            fd, position, chunks = pending.hand_over()
        except BaseException:
            self._native.forget(token)
            raise
        try:
            self._native.worker.submit_write(token, fd, position, chunks)
        except BaseException:   # the descriptor is still ours
            self._native.forget(token)
            os.close(fd)
            raise

    def close(self) -> None:
        """Let the threads end once every queued write is done; later submits raise RuntimeError."""
        if self._native is not None:
            self._native.close()
        else:
            self._threads.close()


#: ``begin()`` → (the log, what ``begin_append`` gave); may raise what ``begin_append`` raises.
Begin = Callable[[], tuple]
#: ``settle(log, result, exc)`` → the caller's outcome, from an AppendResult or an exception.
Settle = Callable[[object, "AppendResult | None", "BaseException | None"], object]


class PartitionAppender:
    """One partition's appends in arrival order, with at most one write in flight (module doc)."""

    __slots__ = ("_writers", "_queue", "_in_flight")

    def __init__(self, writers: AppendWriters) -> None:
        self._writers = writers
        self._queue: deque = deque()       # (begin, settle, future) waiting for the write in flight
        self._in_flight = None              # (log, settle, future) of the write in flight

    @property
    def idle(self) -> bool:
        """No write in flight and nothing queued."""
        return self._in_flight is None and not self._queue

    def submit(self, begin: Begin, settle: Settle, on_done: Callable[[object], None] | None = None):
        """Begin an append now, or after the ones before it. Returns the outcome ``settle`` makes at
        once when no write is needed and nothing waits before it. Otherwise, with ``on_done``, returns
        :data:`PENDING` and calls ``on_done(outcome)`` on the loop when the append ends (no future,
        no extra loop turn); without it, returns a Future of the outcome."""
        waiter = on_done if on_done is not None else asyncio.get_running_loop().create_future()
        if self._in_flight is None and not self._queue:
            outcome = self._begin(begin, settle, None)
            if outcome is not PENDING:
                return outcome
            self._in_flight = (*self._in_flight[:2], waiter)
        else:
            self._queue.append((begin, settle, waiter))
        return PENDING if on_done is not None else waiter

    def _begin(self, begin: Begin, settle: Settle, waiter):
        """Run ``begin``; settle at once (the outcome is returned, or handed to ``waiter`` when given)
        or start the write and return PENDING (``_in_flight`` then holds ``waiter``)."""
        log = None
        try:
            log, begun = begin()
        except Exception as exc:
            return self._settled(settle(log, None, exc), waiter)
        if not isinstance(begun, PendingAppend):
            return self._settled(settle(log, begun, None), waiter)
        self._in_flight = (log, settle, waiter)
        try:
            self._writers.submit(begun, asyncio.get_running_loop(), self._written)
        except Exception as exc:     # no writer thread, no descriptor: this append fails, the log is free
            self._in_flight = None
            try:
                log.finish_append(begun, exc if isinstance(exc, OSError) else OSError(str(exc)))
            except Exception as failed:
                return self._settled(settle(log, None, failed), waiter)
            raise AssertionError("finish_append of a failed write returned")   # pragma: no cover
        return PENDING

    @staticmethod
    def _settled(outcome, waiter):
        """Hand ``outcome`` to ``waiter`` (a Future or a callback); None. With no waiter, return it."""
        if waiter is None:
            return outcome
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                waiter.set_result(outcome)
        else:
            waiter(outcome)
        return None

    def _written(self, pending: PendingAppend, error: OSError | None) -> None:
        """On the loop, once the write in flight is done: finish it, then begin the next ones."""
        log, settle, waiter = self._in_flight
        self._in_flight = None
        try:
            result = log.finish_append(pending, error)
        except Exception as exc:
            outcome = settle(log, None, exc)
        else:
            outcome = settle(log, result, None)
        try:
            self._settled(outcome, waiter)
        finally:
            queue_ = self._queue
            while queue_ and self._in_flight is None:
                begin, settle, waiter = queue_.popleft()
                self._begin(begin, settle, waiter)

    async def wait_idle(self) -> None:
        """Return once nothing is in flight or queued (closing, moving a log)."""
        loop = asyncio.get_running_loop()
        while not self.idle:
            idle = loop.create_future()
            self._queue.append((_idle_marker, _idle_settle, lambda _outcome: idle.done() or idle.set_result(None)))
            await idle

#: What :meth:`PartitionAppender.submit` returns when ``on_done`` will be called.
PENDING = object()


def _idle_marker():
    return None, None


def _idle_settle(log, result, exc):
    return None
