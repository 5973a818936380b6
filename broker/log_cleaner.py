"""The log cleaner of the daemon: a periodic task on the loop, the long work on one thread.

Kafka's ``LogCleaner`` / ``CleanerThread.doWork``, with Sundial's threading rule (storage
is not thread-safe; docs/architecture.md):

* on the loop: choose the dirtiest compacted log (:class:`storage.cleaner_manager.LogCleanerManager`)
  and take the job's snapshot (:meth:`PartitionLog.cleaning_job`);
* on a cleaner thread (``log.cleaner.threads`` of them, each with its own offset map of
  ``dedupe.buffer.size / threads`` and one shared I/O throttle, as Kafka's
  ``CleanerThread``s): build the offset map and write the cleaned segments
  (:class:`storage.cleaner.Cleaner`); each finished segment is handed back to the loop,
  which swaps it in (:meth:`PartitionLog.replace_segments`) while the thread waits, then
  the thread goes on with the next group. Two threads never clean the same log: the
  manager marks a grabbed log in progress;
* back on the loop: checkpoint the end offset, log the pass and update the metrics.

When a pass cleaned something the next one starts at once, else after
``log.cleaner.backoff.ms``. A pass that fails for any reason but an abort marks its
partition uncleanable until the next restart (Kafka does the same), logged as an error.
Test hook: with the environment variable ``SUNDIAL_TEST_CLEANER_PAUSE_AFTER_FIRST_SWAP_MS``
set, the cleaner thread waits that long after the first swap of the process (an abort ends
the wait). It is not a
setting: it exists so that the crash and topic-deletion tests can act in the middle of a
pass on any host, however fast it cleans.

Retention of ``compact,delete`` topics is the broker's ordinary retention task (see
docs/compaction.md). ``stop()`` aborts a pass in progress and waits for its thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import structlog

from sundial.config import CleanerConfig
from sundial.storage.cleaner import Cleaner, CleaningAborted, Throttler
from sundial.storage.cleaner_manager import LogCleanerManager, write_cleaner_checkpoint
from sundial.storage.offset_map import SkimpyOffsetMap

logger = structlog.get_logger(__name__)

# The test hook (see module doc): seconds to hold the cleaner after the process's first swap.
_test_pause_s = [int(os.environ.get("SUNDIAL_TEST_CLEANER_PAUSE_AFTER_FIRST_SWAP_MS") or 0) / 1000]


class LogCleanerService:
    """Runs compaction for one broker (see module doc)."""

    def __init__(self, logs, config: CleanerConfig, log_dirs: list[str], *, metrics,
                 now_ms: Callable[[], int]) -> None:
        self.logs = logs
        self.config = config
        self.metrics = metrics
        self.now_ms = now_ms

        def exists(topic: str, partition: int) -> bool:
            meta = logs.topic(topic)
            return meta is not None and 0 <= partition < meta.partitions

        self.manager = LogCleanerManager(log_dirs, exists)
        threads = max(config.threads, 1)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sundial-log-cleaner")
        # Checkpoint writes (tmp file, fsync, rename) run one at a time, in the order staged.
        self._checkpoint_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sundial-cleaner-checkpoint")
        self._throttler = Throttler(config.max_io_bytes_per_second, time.monotonic, time.sleep)
        self._workers = [_Worker(i) for i in range(threads)]
        self._stopping = False

    def _make_cleaner(self, worker: "_Worker") -> Cleaner:
        if worker.cleaner is None:
            cfg = self.config
            io_buffer = max(cfg.io_buffer_size // max(cfg.threads, 1) // 2, 1024)
            worker.cleaner = Cleaner(SkimpyOffsetMap(cfg.dedupe_buffer_per_thread), io_buffer_bytes=io_buffer,
                                     load_factor=cfg.dedupe_buffer_load_factor, throttler=self._throttler,
                                     clock=time.monotonic)
        return worker.cleaner

    #: Compacted partitions not opened yet (lazy opening after a clean start) that one check opens:
    #: opening checks index files on the loop, so a broker with thousands of them spreads it out.
    OPEN_PER_CHECK = 32

    def _compacted_logs(self):
        logs = self.logs
        opened = 0
        for meta in logs.topics():
            if not meta.config.compact:
                continue
            for p in range(meta.partitions):
                if not logs.is_open(meta.name, p):
                    if opened >= self.OPEN_PER_CHECK:
                        continue
                    opened += 1
                log = logs.get_log(meta.name, p)
                if log is not None and not log.closed:
                    yield meta.name, p, log

    async def run(self) -> None:
        """The cleaner task: one pass loop per cleaner thread, backing off when nothing was cleaned."""
        await asyncio.gather(*(self._run_worker(w) for w in self._workers))

    async def _run_worker(self, worker: "_Worker") -> None:
        while not self._stopping:
            try:
                cleaned = await self.clean_filthiest_log(worker)
            except asyncio.CancelledError:
                raise
            except Exception:  # the task must survive anything one pass does
                logger.exception("log_cleaner_pass_failed", cleaner_thread=worker.index)
                cleaned = False
            self.manager.maintain()
            if not cleaned:
                await asyncio.sleep(self.config.backoff_ms / 1000)

    async def clean_filthiest_log(self, worker: "_Worker | None" = None) -> bool:
        """One pass (Kafka ``cleanFilthiestLog``) on ``worker`` (the first by default); True when a
        log was cleaned."""
        worker = worker or self._workers[0]
        now = self.now_ms()
        ltc = self.manager.grab_filthiest_log(self._compacted_logs(), now)
        self._update_gauges()
        if ltc is None:
            return False
        log = ltc.log
        loop = asyncio.get_running_loop()
        end_offset = None
        started = time.monotonic()
        try:
            job = log.cleaning_job(ltc.first_dirty_offset, ltc.first_uncleanable_offset, now)
        except Exception as exc:
            self.manager.done_cleaning(ltc, None)
            self._uncleanable(ltc, exc)
            return False
        if self._stopping:
            job.close()
            self.manager.done_cleaning(ltc, None)
            return False
        worker.job = job
        logger.info("log_cleaning_started", topic=ltc.topic, partition=ltc.partition,
                    first_dirty_offset=ltc.first_dirty_offset, first_uncleanable_offset=ltc.first_uncleanable_offset,
                    dirty_ratio=round(ltc.cleanable_ratio, 4), cleanable_bytes=ltc.cleanable_bytes,
                    compaction_delay_ms=ltc.compaction_delay_ms, cleaner_thread=worker.index)

        def swap(cleaned) -> bool:      # on the cleaner thread: the loop does the swap
            if job.aborted or loop.is_closed():
                return False
            fut = asyncio.run_coroutine_threadsafe(self._swap(ltc.topic, ltc.partition, log, cleaned), loop)
            while True:
                try:
                    swapped = fut.result(timeout=1.0)
                    break
                except concurrent.futures.TimeoutError:
                    if (job.aborted or loop.is_closed()) and fut.cancel():
                        return False
            if swapped and _test_pause_s[0]:
                pause_until, _test_pause_s[0] = time.monotonic() + _test_pause_s[0], 0
                while time.monotonic() < pause_until and not job.aborted:
                    time.sleep(0.05)
            return swapped

        cleaner = self._make_cleaner(worker)

        def work():                     # on the cleaner thread; the descriptors are closed there
            try:
                return cleaner.clean(job, swap)
            finally:
                job.close()

        try:
            worker.future = loop.run_in_executor(self._executor, work)
            end_offset, stats = await asyncio.shield(worker.future)
        except CleaningAborted as exc:
            logger.info("log_cleaning_aborted", topic=ltc.topic, partition=ltc.partition, reason=str(exc))
            return False
        except Exception as exc:
            if log.closed or self._stopping:     # the topic was deleted (or the broker stops) under the pass
                logger.info("log_cleaning_aborted", topic=ltc.topic, partition=ltc.partition,
                            reason=f"the log was closed during the pass ({type(exc).__name__})")
            else:
                self._uncleanable(ltc, exc)
            return False
        finally:
            if worker.future is not None and worker.future.done():
                worker.future = None
                worker.job = None
            staged = self.manager.done_cleaning(ltc, end_offset, write=False)
            if staged is not None:          # the checkpoint's fsyncs stay off the loop
                try:
                    await loop.run_in_executor(self._checkpoint_writer, write_cleaner_checkpoint, *staged)
                except RuntimeError:        # the executor was shut down by stop(): write it here
                    write_cleaner_checkpoint(*staged)
        self._record(ltc, end_offset, stats, time.monotonic() - started)
        return True

    async def _swap(self, topic: str, partition: int, log, cleaned) -> bool:
        """On the loop: swap ``cleaned`` into ``log`` if that log still serves its partition. A log
        taken out of service since the pass began (a log-dir move's swap running on the mover's
        thread, a deleted topic, a log closed) is not touched: the pass's work is dropped."""
        if self._stopping or log.closed:
            return False
        if not self.logs.is_open(topic, partition) or self.logs.get_log(topic, partition) is not log:
            logger.info("cleaned_segment_swap_refused", topic=topic, partition=partition,
                        base_offset=cleaned.base_offset, reason="the log no longer serves the partition")
            return False
        return log.replace_segments(cleaned, self.now_ms())

    def _uncleanable(self, ltc, exc: BaseException) -> None:
        self.manager.mark_uncleanable(ltc.topic, ltc.partition)
        logger.error("log_cleaning_failed_partition_uncleanable", topic=ltc.topic, partition=ltc.partition,
                     error=f"{type(exc).__name__}: {exc}")
        self._update_gauges()

    def _record(self, ltc, end_offset: int, stats, seconds: float) -> None:
        mb = 1024 * 1024
        logger.info("log_cleaned", topic=ltc.topic, partition=ltc.partition,
                    dirty_section=[ltc.first_dirty_offset, end_offset], bytes_read=stats.bytes_read,
                    bytes_written=stats.bytes_written, records_read=stats.messages_read,
                    records_kept=stats.messages_written, records_dropped=stats.messages_read - stats.messages_written,
                    invalid_records=stats.invalid_messages, map_bytes_read=stats.map_bytes_read,
                    map_records_read=stats.map_messages_read, segments_replaced=stats.segments_replaced,
                    buffer_utilization=round(stats.buffer_utilization, 4), duration_s=round(seconds, 3),
                    map_duration_s=round(stats.elapsed_map_s, 3),
                    mb_per_s=round(stats.bytes_read / mb / max(seconds, 1e-9), 1))
        if stats.invalid_messages:
            logger.warning("log_cleaner_invalid_records", topic=ltc.topic, partition=ltc.partition,
                           count=stats.invalid_messages)
        self.metrics.cleaner_pass_done(stats.bytes_read, stats.bytes_written, seconds, stats.buffer_utilization)
        self._update_gauges()

    def _update_gauges(self) -> None:
        pre = self.manager.last_pre_clean
        self.metrics.cleaner_state(self.manager.max_dirty_ratio, pre.max_compaction_delay_ms,
                                   len(self.manager.uncleanable))

    async def stop(self) -> None:
        """Abort the passes in progress and wait for the cleaner threads; then release them."""
        self._stopping = True
        for worker in self._workers:
            if worker.job is not None:
                worker.job.abort()
        for worker in self._workers:
            future = worker.future
            if future is not None and not future.done():
                try:
                    await asyncio.wait_for(asyncio.shield(future), 120)
                except BaseException:  # noqa: BLE001 - the pass ends one way or another
                    pass
        self._executor.shutdown(wait=False)
        self._checkpoint_writer.shutdown(wait=True)


class _Worker:
    """One cleaner thread's state: its Cleaner (and offset map) and the pass it runs."""

    __slots__ = ("index", "cleaner", "job", "future")

    def __init__(self, index: int) -> None:
        self.index = index
        self.cleaner: Cleaner | None = None
        self.job = None
        self.future: asyncio.Future | None = None


__all__ = ["LogCleanerService"]
