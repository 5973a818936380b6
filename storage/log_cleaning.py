"""A partition log's side of compaction: the cleaning job's snapshot and the swap.

:class:`LogCleaning` is a collaborator of :class:`storage.log.PartitionLog`, given the
segment list, the segment factory, the deleter and the log's producer state. Both methods run
on the log's owner thread; between them the cleaner thread works from the snapshot
alone (:mod:`storage.cleaner`).

``cleaning_job(first_dirty, first_uncleanable, now_ms)`` duplicates the descriptor of
every segment below the first uncleanable offset (the active segment never is) and
notes their sizes, index sizes, mtimes, the offset-index position of the first dirty
offset, the legacy tombstone horizon (the mtime of the last segment below the first
dirty offset minus ``delete.retention.ms``, 0 without one), the last data offset (-1
without a data batch) and epoch of every producer the log knows (Kafka
``lastRecordsOfActiveProducers``) and every aborted transaction of its ``.txnindex`` files.

``replace_segments(cleaned, now_ms)`` is Kafka's ``LocalLog.replaceSegments``, done so
that a crash at any point leaves a directory the loader completes or rolls back
(:mod:`storage.recovery`):

1. check that the log was not truncated since the snapshot (its segment list's version) (the offset map may hold
   offsets that are gone) and that the segments the cleaned one replaces are still, in
   order, segments of this log (a retention pass or a deletion since the snapshot); else
   the swap is refused: the caller deletes the cleaned files and the pass ends (Kafka
   aborts the cleaning of a log it truncates);
2. rename ``<base>.log.cleaned`` (then ``.index``, ``.timeindex``, and ``.txnindex`` when
   written) to ``.swap``;
3. rename every replaced segment's files to ``.deleted`` (removed after
   ``file.delete.delay.ms``), the one sharing the base offset included;
4. rename the ``.swap`` files to their final names and open the new segment in place of
   the replaced ones (its indexes were fsynced by the cleaner thread);
5. the splice is :meth:`storage.segments.LogSegments.replace`, which moves the list's
   version as a rewrite: the timestamp-search caches, the batch-index cache keys and every
   flush job prepared before the swap no longer match; the directory is fsynced by the
   next flush.

Offsets, the log start and end offsets, the recovery point and producer state do not
change: a cleaned segment holds a subset of the batches it replaces, at their offsets.
"""

from __future__ import annotations

import os

import structlog

from sundial.config.topic import TopicConfig

from . import files
from .cleaned_segment import CleanedSegment, rename_all
from .cleaner import CleaningJob, SegmentSource
from .errors import KafkaStorageError
from .log_retention import SegmentDeleter
from .producer_state import ProducerStateManager
from .segments import LogSegments, SegmentFactory

logger = structlog.get_logger(__name__)


class LogCleaning:
    """Compaction support of one log (see module doc)."""

    def __init__(self, dir_path: str, topic: str, partition: int, segments: LogSegments, factory: SegmentFactory,
                 deleter: SegmentDeleter, producers: ProducerStateManager) -> None:
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self._segments = segments
        self._factory = factory
        self._deleter = deleter
        self._producers = producers
        self._job: CleaningJob | None = None     # the pass in progress, aborted by close

    def cleaning_job(self, cfg: TopicConfig, first_dirty_offset: int, first_uncleanable_offset: int,
                     now_ms: int) -> CleaningJob:
        """A snapshot for one cleaning pass (owner thread, producer state loaded); close it with
        ``job.close()``."""
        sources: list[SegmentSource] = []
        legacy_horizon = 0
        try:
            for seg in self._segments:
                if seg.base_offset >= first_uncleanable_offset or seg.is_active:
                    break
                position = 0
                if seg.base_offset <= first_dirty_offset:
                    position = seg.offset_index.lookup(first_dirty_offset).position
                    if seg.base_offset < first_dirty_offset:
                        legacy_horizon = seg.last_modified_ms() - cfg.delete_retention_ms
                sources.append(SegmentSource(seg, seg.base_offset, os.dup(seg.fd), seg.size_bytes,
                                             seg.offset_index.file_length(), seg.time_index.file_length(),
                                             seg.last_modified_ms(), position))
        except OSError as exc:
            for src in sources:
                os.close(src.fd)
            raise KafkaStorageError.from_os_error(exc, f"cannot prepare the cleaning of {self.dir}") from exc
        producers = {pid: (entry.last_offset, entry.producer_epoch)
                     for pid, entry in self._producers.producers.items()}
        try:
            aborted = [t for seg in self._segments for t in seg.txn_index.entries()]
        except KafkaStorageError:
            for src in sources:
                os.close(src.fd)
            raise
        self._job = job = CleaningJob(
            self.topic, self.partition, self.dir, sources, first_dirty_offset, first_uncleanable_offset, now_ms,
            cfg.segment_bytes, cfg.segment_index_bytes, cfg.index_interval_bytes, cfg.delete_retention_ms,
            legacy_horizon, producers, aborted, log_generation=self._segments.version)
        return job

    def abort(self) -> None:
        """Closing the log (topic deletion, shutdown) aborts its pass, as Kafka's abortCleaning."""
        if self._job is not None:
            self._job.abort()
            self._job = None

    def replace_segments(self, cfg: TopicConfig, cleaned: CleanedSegment, now_ms: int) -> bool:
        """Swap ``cleaned`` in for the segments it replaces (owner thread); False when refused."""
        segments = self._segments
        old = cleaned.replaces
        first = segments.position_of(old[0])
        present = segments[first:first + len(old)] if first >= 0 else []
        if (not segments.not_truncated_since(cleaned.log_generation) or len(present) != len(old)
                or any(a is not b for a, b in zip(present, old)) or present[-1].is_active
                or old[0].base_offset != cleaned.base_offset):
            logger.info("cleaned_segment_swap_refused", topic=self.topic, partition=self.partition,
                        base_offset=cleaned.base_offset, reason="the log was truncated or lost the segments "
                        "the cleaned one replaces since the pass began")
            return False
        self._deleter.finish_renames(cleaned.base_offset)   # renames before the reopen below
        try:
            rename_all(self.dir, cleaned.base_offset, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
            # the producer snapshots of the segments merged away go with them (Kafka deletes them
            # at the swap; the first one's base offset is the cleaned segment's and keeps its own)
            self._deleter.schedule_delete(old, now_ms, cfg.file_delete_delay_ms,
                                          self._producers.mark_snapshots_deleted(s.base_offset for s in old[1:]))
            rename_all(self.dir, cleaned.base_offset, files.SWAP_SUFFIX, "")
        except OSError as exc:
            raise KafkaStorageError.from_os_error(
                exc, f"cannot swap in the cleaned segment {cleaned.base_offset} of {self.dir}") from exc
        seg = self._factory.open(cfg, cleaned.base_offset, with_jitter=False)
        seg.indexes_durable = True
        segments.replace(first, len(old), seg)
        logger.info("cleaned_segment_swapped_in", topic=self.topic, partition=self.partition,
                    base_offset=seg.base_offset, replaced_bases=[s.base_offset for s in old],
                    size_bytes=seg.size_bytes, replaced_bytes=cleaned.replaced_bytes)
        return True


__all__ = ["LogCleaning"]
