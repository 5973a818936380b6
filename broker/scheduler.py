"""The broker's scheduler threads: every blocking file operation the daemon starts from
the event loop runs here, as Kafka's ``KafkaScheduler`` (``background.threads``).

The event loop thread only does work whose cost does not depend on the disk: it
decides (bookkeeping in storage, on the loop) and hands the file work to
:class:`Scheduler`, then carries on serving requests. What runs here:

* removing ``.deleted`` segment files and ``-delete`` directories (housekeeping);
* renaming the segments retention dropped to ``.deleted``, after the log start
  offsets are checkpointed (:meth:`Scheduler.delete_dropped_segments`);
* opening a partition on first use, with the recovery or clean-up of its leftovers
  (``ReplicaManager.open_logs``);
* checkpoint writes;
* warming the page cache behind a Fetch answer before ``sendfile``
  (:mod:`broker.page_cache`);
* on one more thread, in the order they were asked for (:meth:`Scheduler.run_ordered`):
  the file work of topic creations and deletions (the topic list written and fsynced,
  the partition directories made or renamed), so a topic deleted and created again
  under the same name has its old directories renamed before the new ones are made.

Start-up recovery has its own threads (``num.recovery.threads.per.data.dir`` per
data dir, :class:`storage.LogManager`), fsyncs theirs (:mod:`broker.flusher`), the log
cleaner its own (:mod:`broker.log_cleaner`).
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import queue
import threading
from typing import Any, Callable

import structlog

logger = structlog.get_logger(__name__)


class Workers(concurrent.futures.Executor):
    """``count`` threads over one first-in first-out queue of jobs.

    :meth:`submit` only queues: it never starts a thread, so the event loop never waits for one
    to start (``Thread.start`` waits until the new thread runs, up to 220 ms seen on a busy host
    for a pool that starts its threads on demand). :class:`Scheduler` starts the threads
    (:meth:`start_thread`) from a helper thread; jobs queued before they run wait for them. With
    one thread, jobs run one at a time in the order they were queued."""

    def __init__(self, name: str, count: int) -> None:
        self.name = name
        self.count = count
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._shut_down = False
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        with self._lock:
            if self._shut_down:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: concurrent.futures.Future = concurrent.futures.Future()
            self._jobs.put((future, fn, args, kwargs))
        return future

    def start_thread(self) -> bool:
        """Start one more thread (up to ``count``); False once shut down or full."""
        with self._lock:
            if self._shut_down or len(self._threads) >= self.count:
                return False
            thread = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
        thread.start()
        return True

    def live_threads(self) -> list[threading.Thread]:
        with self._lock:
            return [t for t in self._threads if t.is_alive()]

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            _run(*job)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Queue no more jobs; the threads finish the queued ones (cancelled instead with
        ``cancel_futures``) and end. With ``wait``, returns when they have, having run itself any
        job no thread was started to run."""
        with self._lock:
            self._shut_down = True
            threads = list(self._threads)
            if cancel_futures:
                _cancel_queued(self._jobs)
            for _ in threads:
                self._jobs.put(None)
        if not wait:
            return
        for thread in threads:
            if thread.ident is not None:   # one still starting takes its end marker when it runs
                thread.join()
        while True:   # left by a close that came before any thread was started
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                _run(*job)


def _run(future: concurrent.futures.Future, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the job, as an executor does
        future.set_exception(exc)
    else:
        future.set_result(result)


def _cancel_queued(jobs: queue.SimpleQueue) -> None:
    kept = []
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            break
        if job is None:
            kept.append(job)
        else:
            job[0].cancel()
    for job in kept:
        jobs.put(job)


class Scheduler:
    """``threads`` worker threads for blocking file work; :meth:`run` awaits one job."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("the scheduler needs at least one thread")
        self.threads = threads
        self.executor = Workers("sundial-scheduler", threads)
        self.ordered = Workers("sundial-scheduler-ordered", 1)
        self._closing = False
        self._threads_started = threading.Event()    # set when the starter below is done
        # Every thread is started at construction, from a helper thread that is itself started
        # without waiting for it to run: the loop never waits for a thread start.
        _thread.start_new_thread(self._start_threads, ())

    def _start_threads(self) -> None:
        try:
            for workers in (self.ordered, self.executor):
                for _ in range(workers.count):
                    if self._closing or not workers.start_thread():
                        return
        except RuntimeError:   # the interpreter is shutting down
            return
        finally:
            self._threads_started.set()

    def started(self, timeout_s: float | None = None) -> bool:
        """True once every thread has been started (or the start stopped because of :meth:`close`)."""
        return self._threads_started.wait(timeout_s)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a scheduler thread; the loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def run_ordered(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the ordered thread, after every job given to it before; the loop goes
        on meanwhile. The job runs to its end even when the caller is cancelled."""
        fut = self.ordered.submit(fn, *args)
        return await asyncio.shield(asyncio.wrap_future(fut))

    async def run_all(self, fn: Callable[[Any], Any], items: list, *, chunks: int | None = None) -> list:
        """``fn(chunk)`` for ``items`` split in up to ``chunks`` (default: the thread count) slices,
        in parallel; the results in order."""
        if not items:
            return []
        n = max(1, min(chunks or self.threads, len(items)))
        size = -(-len(items) // n)
        slices = [items[i:i + size] for i in range(0, len(items), size)]
        return list(await asyncio.gather(*(self.run(fn, part) for part in slices)))

    def close(self) -> None:
        """Wait for the jobs under way, start no more."""
        self._closing = True
        self._threads_started.wait()   # the executors' shutdown joins the threads it started
        self.ordered.shutdown(wait=True, cancel_futures=False)
        self.executor.shutdown(wait=True, cancel_futures=False)


__all__ = ["Scheduler", "Workers"]
