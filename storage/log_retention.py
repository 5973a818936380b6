"""Deleting old segments of a partition log: retention passes and delayed file removal.

:class:`LogRetention` is a base of :class:`storage.log.PartitionLog`. Which segments a
rule may delete is decided by the pure functions of :mod:`storage.retention` (Kafka's
``deleteRetentionMsBreachedSegments`` & co., reference §7, and the consumed retention
of seed 004); this module applies the decisions: rules run in order (log start offset,
consumed, size, time), each on the facts left by the previous one; the active segment
is rolled first when every segment goes; deleted segments are renamed ``.deleted`` at
once and removed after ``file.delete.delay.ms`` (:meth:`delete_expired_files`).

Renames off the owner thread (``defer_renames``, set by the log manager of a broker
that has a scheduler): the segments a retention pass drops leave the log at once (the
log start offset moves, their descriptors are closed), but their renames to
``.deleted`` become :class:`SegmentRename` jobs the broker takes
(:meth:`take_rename_jobs`), runs on its scheduler after the log start offsets are
checkpointed, and hands back (:meth:`renamed`); only then does the delay before the
unlinks start. Renames come before any segment file is created or reopened in the
log: rolling, truncating and swapping in a cleaned segment first finish every rename
still owed (:meth:`_finish_renames`), waiting for one under way.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import structlog

from . import disk, files
from .retention import (
    HOLD_FUTURE_TIMESTAMP,
    REASON_CONSUMED,
    REASON_LOG_START,
    REASON_SIZE,
    REASON_TIME,
    DeletedSegment,
    RetentionOutcome,
    SegmentFacts,
    consumed_rule,
    log_start_rule,
    size_rule,
    time_rule,
)
from .segment import LogSegment

logger = structlog.get_logger(__name__)


class SegmentRename:
    """The renames to ``.deleted`` of segments a retention pass dropped; :meth:`run` does them
    once, on any thread (a second caller waits for the first and gets the same paths)."""

    def __init__(self, segments: list[LogSegment], also: list[str], due_ms: int) -> None:
        self.segments = segments
        self.also = list(also)       # files already renamed (the producer snapshots of those segments)
        self.due_ms = due_ms         # when the unlinks may happen (file.delete.delay.ms after the pass)
        self.bases = frozenset(seg.base_offset for seg in segments)
        self.handed_over = False
        self._lock = threading.Lock()
        self._paths: list[str] | None = None

    @property
    def done(self) -> bool:
        return self._paths is not None

    def run(self) -> list[str]:
        """Rename every file of the segments; the ``.deleted`` paths to unlink later."""
        with self._lock:
            if self._paths is None:
                slow = disk.current()
                paths = list(self.also)
                for seg in self.segments:
                    slow.pause("rename")
                    try:
                        paths.extend(_rename_to_deleted(seg))
                    except OSError as exc:  # KafkaStorageError included: the files stay, logged
                        logger.error("segment_rename_failed", dir=seg.dir, base_offset=seg.base_offset,
                                     error=str(exc))
                self._paths = paths
            return self._paths


def _rename_to_deleted(seg: LogSegment) -> list[str]:
    if not seg.log_path.endswith(files.DELETED_SUFFIX):
        return seg.rename_suffix(files.DELETED_SUFFIX)
    return [p for p in (seg.log_path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path)
            if os.path.exists(p)]


class LogRetention:
    """Retention of a :class:`~storage.log.PartitionLog` (see module doc)."""

    #: Retention's renames become :class:`SegmentRename` jobs for the broker's scheduler.
    defer_renames = False

    def _facts(self) -> list[SegmentFacts]:
        segs = self._segments
        out = []
        for i, seg in enumerate(segs):
            upper = segs[i + 1].base_offset if i + 1 < len(segs) else self._leo
            out.append(SegmentFacts(seg.base_offset, upper, seg.size_bytes, seg.largest_timestamp_ms(),
                                    seg.largest_timestamp_source))
        return out

    def delete_old_segments(self, now_ms: int, consumed_upto: int | None = None) -> RetentionOutcome:
        """One retention pass (reference §7, seed 004); see :mod:`storage.retention`."""
        self._check_open()
        outcome = RetentionOutcome(self.topic, self.partition)
        cfg = self.config
        hw = self.high_watermark
        rules: list[tuple[str, Callable]] = [
            (REASON_LOG_START, lambda facts: log_start_rule(facts, hw, self.log_start_offset))]
        if cfg.delete:
            if cfg.consumed_retention_enabled:
                rules.append((REASON_CONSUMED, lambda facts: consumed_rule(
                    facts, hw, consumed_upto, cfg.retention_commitoffset_ms, now_ms)))
            rules.append((REASON_SIZE, lambda facts: size_rule(facts, hw, cfg.retention_bytes)))
            rules.append((REASON_TIME, lambda facts: time_rule(facts, hw, cfg.retention_ms, now_ms)))
        for reason, rule in rules:
            facts = self._facts()
            decision = rule(facts)
            if decision.hold is not None:
                outcome.held.append(decision.hold)
            if decision.count:
                self._delete_prefix(decision.count, facts, reason, now_ms, outcome)
        self._log_future_hold(next((h for h in outcome.held if h.reason == HOLD_FUTURE_TIMESTAMP), None))
        outcome.log_start_offset = self.log_start_offset
        return outcome

    def _log_future_hold(self, hold) -> None:
        """Warn when a future timestamp starts (or moves to another segment) holding time retention,
        note when it stops: once per change, not on every pass. Consumed-retention holds are
        logged by the broker, which knows the group."""
        logged = self._future_hold_logged
        if hold is None:
            if logged is not None:
                self._future_hold_logged = None
                logger.info("retention_hold_released", topic=self.topic, partition=self.partition,
                            reason=HOLD_FUTURE_TIMESTAMP, base_offset=logged)
            return
        if logged == hold.base_offset:
            return
        self._future_hold_logged = hold.base_offset
        logger.warning("retention_held_by_future_timestamp", topic=self.topic, partition=self.partition,
                       base_offset=hold.base_offset, last_offset=hold.last_offset,
                       largest_timestamp_ms=hold.largest_timestamp_ms, detail=hold.detail)

    def _delete_prefix(self, count: int, facts: list[SegmentFacts], reason: str, now_ms: int,
                       outcome: RetentionOutcome) -> None:
        doomed_facts = facts[:count]
        if count == len(self._segments):
            new = self.roll(now_ms, reason="retention")
            outcome.rolled = True
            if doomed_facts[-1].base_offset == new.base_offset:
                doomed_facts = doomed_facts[:-1]
                count -= 1
        if count <= 0:
            return
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._search = None
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
        for f in doomed_facts:
            outcome.deleted.append(DeletedSegment(f.base_offset, f.upper_offset - 1, f.size_bytes,
                                                  f.largest_timestamp_ms, reason))
            logger.info("segment_deleted", topic=self.topic, partition=self.partition, base_offset=f.base_offset,
                        last_offset=f.upper_offset - 1, size_bytes=f.size_bytes,
                        largest_timestamp_ms=f.largest_timestamp_ms, reason=reason)
        self._schedule_delete(doomed, now_ms,
                              self._producers.mark_snapshots_deleted(seg.base_offset for seg in doomed),
                              defer=self.defer_renames)
        if self._producers_loaded:
            self._producers.truncate_head(self.log_start_offset)

    def _schedule_delete(self, segments: list[LogSegment], now_ms: int, also: list[str] = (), *,
                         defer: bool = False) -> None:
        """Rename to ``.deleted`` now (``defer``: a :class:`SegmentRename` job for the broker's
        scheduler); remove after ``file.delete.delay.ms`` (with ``also``: files already renamed,
        such as the producer snapshots of those segments)."""
        for seg in segments:
            seg.close_handles()
        due_ms = now_ms + max(self.config.file_delete_delay_ms, 0)
        if defer and segments:
            # one job per segment, so that the scheduler's threads share a long list
            self._renames_owed.extend(SegmentRename([seg], list(also) if i == 0 else [], due_ms)
                                      for i, seg in enumerate(segments))
            return
        self._add_pending_delete(SegmentRename(segments, list(also), due_ms).run(), due_ms)

    def _add_pending_delete(self, paths: list[str], due_ms: int) -> None:
        if paths:
            # Like Kafka's asyncDeleteSegment, even a zero delay hands the unlinks to the next
            # housekeeping run (the broker does them off the event loop): unlinking a large
            # segment can take long on a slow disk.
            self._pending_deletes.append((due_ms, paths))

    def take_rename_jobs(self) -> list[SegmentRename]:
        """The renames owed, handed over to be run on any thread and given back to :meth:`renamed`."""
        jobs = [j for j in self._renames_owed if not j.handed_over]
        for job in jobs:
            job.handed_over = True
        return jobs

    def renamed(self, job: SegmentRename) -> None:
        """Owner thread, after ``job.run()``: its files now wait for their unlink."""
        if job in self._renames_owed:
            self._renames_owed.remove(job)
            self._add_pending_delete(job.run(), job.due_ms)

    def _finish_renames(self, base_offset: int | None = None) -> None:
        """Do the renames still owed now, on this thread (waiting for one under way): those of a
        segment at ``base_offset`` before a segment file with that base is created or reopened
        (rare: retention's segments lie below the log start), every one when the log closes."""
        for job in list(self._renames_owed):
            if base_offset is None or base_offset in job.bases:
                self.renamed(job)

    def take_expired_files(self, now_ms: int) -> list[str]:
        """Hand over the ``.deleted`` files whose delay has passed and forget them.

        Only bookkeeping: the caller removes the returned paths (``files.remove_quietly``),
        on any thread, since nothing else opens a file once it is renamed ``.deleted``.
        """
        due_paths: list[str] = []
        keep = []
        for due, paths in self._pending_deletes:
            if due <= now_ms:
                due_paths.extend(paths)
            else:
                keep.append((due, paths))
        self._pending_deletes = keep
        return due_paths

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` files whose delay has passed; number of files removed."""
        return sum(files.remove_quietly(p) for p in self.take_expired_files(now_ms))

    def pending_delete_paths(self) -> list[str]:
        return [p for _, paths in self._pending_deletes for p in paths]


__all__ = ["LogRetention"]
