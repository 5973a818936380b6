"""Which log the cleaner takes next, and where each log's dirty section begins.

Kafka's ``LogCleanerManager`` and ``LogToClean`` (reference: compaction-and-transactions
§2-§6). Every function takes ``now_ms``; nothing here reads a clock.

Cleaner checkpoint
------------------
``<log.dir>/cleaner-offset-checkpoint`` (Kafka's ``OffsetCheckpointFile`` format,
:mod:`storage.checkpoints`) holds, per partition, the first offset not yet cleaned —
the end offset of its last completed pass. Written after every pass (tmp + fsync +
rename), with the entries of partitions that no longer exist left out.

Cleanable range (``cleanableOffsets``)
--------------------------------------
* first dirty offset = the checkpoint, or the log start offset when there is none; a
  checkpoint below the log start offset or above the log end offset is reset to the log
  start offset (and written back);
* first uncleanable offset = the smallest of the last stable offset (the high watermark
  when no transaction is open: an open transaction is never cleaned), the active
  segment's base offset, and — when
  ``min.compaction.lag.ms`` > 0 — the base offset of the first non-active segment from
  the one holding the first dirty offset whose largest timestamp (max record timestamp,
  else mtime) is newer than ``now - min.compaction.lag.ms``; at least the first dirty offset.

Choice (``grabFilthiestCompactedLog``)
--------------------------------------
For every compacted log not being cleaned and not marked uncleanable:

* clean bytes = sizes of the segments whose base offset is below the first dirty offset;
* the first uncleanable offset is rounded down to a segment base (the segment holding
  it, the active segment when none); cleanable bytes = sizes of the segments from the one
  holding the first dirty offset up to it; dirty ratio = cleanable / (clean + cleanable);
  logs with no bytes at all are skipped;
* compaction delay (KIP-354) = ``now - max.compaction.lag.ms`` minus the earliest first-batch
  timestamp (> 0) of the non-active segments from the first dirty one, when positive;
* a log qualifies when its ratio is above ``min.cleanable.dirty.ratio``, or when its
  delay is positive and it has cleanable bytes; the dirtiest qualifying log (first on a
  tie) is taken and marked in progress until :meth:`LogCleanerManager.done_cleaning`.

The largest ratio of the pass is kept for the ``max-dirty-percent`` metric, with the
number of qualifying logs, of delayed logs and the largest delay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable

import structlog

from .checkpoints import read_offset_checkpoint, write_offset_checkpoint

logger = structlog.get_logger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class LogToClean:
    """A log chosen (or considered) for cleaning, with Kafka's ``LogToClean`` figures."""

    topic: str
    partition: int
    log: object
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0


@dataclass(slots=True)
class PreCleanStats:
    cleanable_partitions: int = 0
    delayed_partitions: int = 0
    max_compaction_delay_ms: int = 0


def _segments_from(log, start: int, end: int) -> list:
    """Kafka ``logSegments(start, end)``: the segment holding ``start`` (or the first) up to base < end."""
    if start >= end:
        return []
    segs = log.segments
    out = []
    for i, seg in enumerate(segs):
        if seg.base_offset >= end:
            break
        if i + 1 < len(segs) and segs[i + 1].base_offset <= start:
            continue
        out.append(seg)
    return out


def _non_active_from(log, start: int) -> list:
    """Kafka ``nonActiveLogSegmentsFrom``."""
    active = log.active_segment
    if start > active.base_offset:
        return []
    return _segments_from(log, start, active.base_offset)


def cleanable_offsets(log, last_clean_offset: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable dirty offset, checkpoint must be rewritten); see the module doc."""
    start = log.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start:
        if not log.config.delete:
            logger.warning("cleaner_checkpoint_reset", topic=log.topic, partition=log.partition,
                           checkpoint=checkpoint, log_start_offset=start, reason="below the log start offset")
        first_dirty, force = start, True
    elif checkpoint > log.log_end_offset:
        logger.warning("cleaner_checkpoint_reset", topic=log.topic, partition=log.partition, checkpoint=checkpoint,
                       log_start_offset=start, log_end_offset=log.log_end_offset,
                       reason="above the log end offset")
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    candidates = [log.last_stable_offset, log.active_segment.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in _non_active_from(log, first_dirty):
            if seg.largest_timestamp_ms() > now_ms - lag:
                candidates.append(seg.base_offset)
                break
    return first_dirty, max(first_dirty, min(candidates)), force


def cleanable_bytes(log, first_dirty_offset: int, uncleanable_offset: int) -> tuple[int, int]:
    """Kafka ``calculateCleanableBytes``: (segment-aligned first uncleanable offset, cleanable bytes)."""
    non_active = _non_active_from(log, uncleanable_offset)
    first_uncleanable = (non_active[0] if non_active else log.active_segment).base_offset
    size = sum(s.size_bytes for s in _segments_from(log, min(first_dirty_offset, first_uncleanable),
                                                     first_uncleanable))
    return first_uncleanable, size


def max_compaction_delay(log, first_dirty_offset: int, now_ms: int) -> int:
    """Kafka ``maxCompactionDelay`` (KIP-354): how long the oldest dirty segment is overdue, or 0."""
    stamps = [t for t in (s.first_batch_timestamp() for s in _non_active_from(log, first_dirty_offset)) if t > 0]
    earliest = min(stamps) if stamps else (1 << 63) - 1
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def write_cleaner_checkpoint(path: str, offsets: dict[TopicPartition, int]) -> None:
    """Write one ``cleaner-offset-checkpoint`` (tmp + fsync + rename); a failure is logged."""
    try:
        write_offset_checkpoint(path, offsets)
    except OSError as exc:
        logger.error("cleaner_checkpoint_write_failed", path=path, error=str(exc))


class LogCleanerManager:
    """Cleaner checkpoints, the logs in progress or uncleanable, and the choice of log (see module doc).

    ``partition_exists(topic, partition)`` tells which checkpoint entries to keep.
    Not thread-safe: the log owner's thread calls every method.
    """

    def __init__(self, log_dirs: list[str], partition_exists: Callable[[str, int], bool] | None = None) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._exists = partition_exists or (lambda topic, partition: True)
        self._checkpoints: dict[str, dict[TopicPartition, int]] = {
            d: read_offset_checkpoint(os.path.join(d, CLEANER_CHECKPOINT_FILE)) for d in self.log_dirs}
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()
        self.max_dirty_ratio = 0.0
        self.last_pre_clean = PreCleanStats()
        self.last_run_ms: int | None = None

    # -- checkpoints ---------------------------------------------------------------------------------
    def all_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for per_dir in self._checkpoints.values():
            out.update(per_dir)
        return out

    def update_checkpoint(self, log_dir: str, tp: TopicPartition, offset: int | None) -> None:
        """Set (or with None remove) ``tp``'s entry and rewrite ``log_dir``'s file."""
        write_cleaner_checkpoint(*self.stage_checkpoint(log_dir, tp, offset))

    def stage_checkpoint(self, log_dir: str, tp: TopicPartition,
                         offset: int | None) -> tuple[str, dict[TopicPartition, int]]:
        """Set (or remove) ``tp``'s entry in memory; the file's path and content to write
        (:func:`write_cleaner_checkpoint`, on any thread: the write fsyncs)."""
        log_dir = os.path.abspath(log_dir)
        per_dir = {k: v for k, v in self._checkpoints.get(log_dir, {}).items() if self._exists(*k)}
        if offset is None:
            per_dir.pop(tp, None)
        else:
            per_dir[tp] = offset
        self._checkpoints[log_dir] = per_dir
        return os.path.join(log_dir, CLEANER_CHECKPOINT_FILE), dict(per_dir)

    # -- choosing ------------------------------------------------------------------------------------
    def grab_filthiest_log(self, logs: Iterable, now_ms: int) -> LogToClean | None:
        """The dirtiest compacted log that qualifies (marked in progress), or None; ``logs`` yields
        ``(topic, partition, PartitionLog)``."""
        self.last_run_ms = now_ms
        checkpoints = self.all_checkpoints()
        pre = PreCleanStats()
        dirty: list[LogToClean] = []
        for topic, partition, log in logs:
            tp = (topic, partition)
            if not log.config.compact or tp in self.in_progress or tp in self.uncleanable or log.closed:
                continue
            first_dirty, uncleanable, force = cleanable_offsets(log, checkpoints.get(tp), now_ms)
            if force:
                self.update_checkpoint(os.path.dirname(log.dir), tp, first_dirty)
            delay = max_compaction_delay(log, first_dirty, now_ms)
            if delay > 0:
                pre.delayed_partitions += 1
                pre.max_compaction_delay_ms = max(pre.max_compaction_delay_ms, delay)
            first_uncleanable, cleanable = cleanable_bytes(log, first_dirty, uncleanable)
            clean = sum(s.size_bytes for s in log.segments if s.base_offset < first_dirty)
            ltc = LogToClean(topic, partition, log, first_dirty, first_uncleanable, clean, cleanable, delay)
            if ltc.total_bytes > 0:
                dirty.append(ltc)
        self.max_dirty_ratio = max((l.cleanable_ratio for l in dirty), default=0.0)
        cleanable_logs = [l for l in dirty if (l.needs_compaction_now and l.cleanable_bytes > 0)
                          or l.cleanable_ratio > l.log.config.min_cleanable_dirty_ratio]
        pre.cleanable_partitions = len(cleanable_logs)
        self.last_pre_clean = pre
        if not cleanable_logs:
            return None
        filthiest = max(cleanable_logs, key=lambda l: l.cleanable_ratio)
        self.in_progress.add((filthiest.topic, filthiest.partition))
        return filthiest

    def done_cleaning(self, ltc: LogToClean, end_offset: int | None, *, write: bool = True):
        """The pass over ``ltc`` ended: checkpoint ``end_offset`` (None: aborted, keep the old one).
        With ``write=False`` the file write is returned (``(path, offsets)`` or None) for the caller
        to do with :func:`write_cleaner_checkpoint`."""
        tp = (ltc.topic, ltc.partition)
        self.in_progress.discard(tp)
        staged = None
        if end_offset is not None and self._exists(*tp):
            staged = self.stage_checkpoint(os.path.dirname(ltc.log.dir), tp, end_offset)
        if write and staged is not None:
            write_cleaner_checkpoint(*staged)
            return None
        return staged

    def mark_uncleanable(self, topic: str, partition: int) -> None:
        self.uncleanable.add((topic, partition))

    def maintain(self) -> None:
        """Forget in-memory state of partitions that no longer exist (Kafka ``maintainUncleanablePartitions``)."""
        self.uncleanable = {tp for tp in self.uncleanable if self._exists(*tp)}
        for d, per_dir in self._checkpoints.items():
            self._checkpoints[d] = {tp: v for tp, v in per_dir.items() if self._exists(*tp)}


__all__ = ["LogCleanerManager", "LogToClean", "PreCleanStats", "cleanable_offsets", "cleanable_bytes",
           "max_compaction_delay", "write_cleaner_checkpoint", "CLEANER_CHECKPOINT_FILE"]
