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
import threading
from typing import Any, Callable

import structlog

logger = structlog.get_logger(__name__)


class Scheduler:
    """``threads`` worker threads for blocking file work; :meth:`run` awaits one job."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("the scheduler needs at least one thread")
        self.threads = threads
        self.executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="sundial-scheduler")
        self.ordered = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sundial-scheduler-ordered")
        self._closing = False
        self._threads_started = threading.Event()    # set when the helper below is done
        # Every thread started now, from a helper thread: an executor starts its threads on demand
        # and ``Thread.start`` waits until the new thread runs, which on a busy host kept the
        # event loop waiting (up to 220 ms seen) on the first jobs after each start. The helper
        # itself is started without that wait.
        _thread.start_new_thread(self._start_threads, ())

    def _start_threads(self) -> None:
        # ``_adjust_thread_count`` is what ``submit`` calls: it starts one more thread while there
        # are fewer than the maximum and none idle (a new thread only counts as idle after its
        # first job), so calling it once per thread starts them all without queueing any job a
        # caller's jobs could wait behind. Under the executor's lock, as ``submit`` calls it:
        # without it a submit racing with this could start a second thread for the ordered
        # executor, and its jobs ran out of order. (A submit in the first moments may wait for one
        # thread start here.) :meth:`close` waits for this helper to end before it shuts the
        # executors down: their shutdown walks the set of threads this adds to ("Set changed size
        # during iteration" when a server stopped right after it started, on a busy host).
        try:
            for executor, count in ((self.ordered, 1), (self.executor, self.threads)):
                for _ in range(count):
                    with executor._shutdown_lock:
                        if self._closing or executor._shutdown:
                            return
                        try:
                            executor._adjust_thread_count()
                        except RuntimeError:   # the interpreter is shutting down
                            return
        finally:
            self._threads_started.set()

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
        self._threads_started.wait()
        self.ordered.shutdown(wait=True, cancel_futures=False)
        self.executor.shutdown(wait=True, cancel_futures=False)


__all__ = ["Scheduler"]
