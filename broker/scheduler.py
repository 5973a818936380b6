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
  (:mod:`broker.page_cache`).

Start-up recovery has its own threads (``num.recovery.threads.per.data.dir`` per
data dir, :class:`storage.LogManager`), fsyncs theirs (:mod:`broker.flusher`), the log
cleaner its own (:mod:`broker.log_cleaner`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a scheduler thread; the loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

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
        self.executor.shutdown(wait=True, cancel_futures=False)


__all__ = ["Scheduler"]
