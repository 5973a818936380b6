"""Deleting old segments of a partition log: retention passes and delayed file removal.

:class:`LogRetention` and :class:`SegmentDeleter` are collaborators of
:class:`storage.log.PartitionLog`. Which segments a rule may delete is decided by the pure functions of :mod:`storage.retention` (Kafka's
``deleteRetentionMsBreachedSegments`` & co., reference §7, and the consumed retention
of seed 004); this module applies the decisions: rules run in order (log start offset,
consumed, size, time), each on the facts left by the previous one; the active segment
is rolled first when every segment goes; deleted segments are renamed ``.deleted`` at
once and removed after ``file.delete.delay.ms`` (:meth:`SegmentDeleter.delete_expired_files`).
:class:`SegmentDeleter` owns those delayed removals for every segment that leaves the log
(retention, truncation, the cleaner's swap, an empty active segment recreated by a roll).

Renames off the owner thread (``defer_renames``, set by the log manager of a broker
that has a scheduler): the segments a retention pass drops leave the log at once (the
log start offset moves, their descriptors are closed), but their renames to
``.deleted`` become :class:`SegmentRename` jobs the broker takes
(:meth:`SegmentDeleter.take_rename_jobs`), runs on its scheduler after the log start
offsets are checkpointed, and hands back (:meth:`SegmentDeleter.renamed`); only then does
the delay before the unlinks start. Renames come before any segment file is created or
reopened in the log: rolling, truncating and swapping in a cleaned segment first finish
every rename still owed (:meth:`SegmentDeleter.finish_renames`), waiting for one under way.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Iterable

import structlog

from sundial.config.topic import TopicConfig

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
from .segments import LogSegments

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


class SegmentDeleter:
    """The delayed removal of the files of segments that left one log (see module doc)."""

    def __init__(self) -> None:
        #: Retention's renames become :class:`SegmentRename` jobs for the broker's scheduler.
        self.defer_renames = False
        self._pending_deletes: list[tuple[int, list[str]]] = []
        self._renames_owed: list[SegmentRename] = []

    def schedule_delete(self, segments: list[LogSegment], now_ms: int, delay_ms: int, also: list[str] = (), *,
                        defer: bool = False) -> None:
        """Rename to ``.deleted`` now (``defer``: a :class:`SegmentRename` job for the broker's
        scheduler); remove after ``delay_ms`` (``file.delete.delay.ms``), with ``also``: files
        already renamed, such as the producer snapshots of those segments."""
        for seg in segments:
            seg.close_handles()
        due_ms = now_ms + max(delay_ms, 0)
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

    def finish_renames(self, base_offset: int | None = None) -> None:
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


class LogRetention:
    """Retention passes over one log's segments (see module doc).

    Given what it uses: the segment list, the deleter, the producer snapshots of the segments
    it drops (``mark_snapshots_deleted``), and per pass the log's offsets, a roll and the
    move of the log start offset (``advance_log_start``), which the log owns.
    """

    def __init__(self, topic: str, partition: int, segments: LogSegments, deleter: SegmentDeleter,
                 mark_snapshots_deleted: Callable[[Iterable[int]], list[str]]) -> None:
        self.topic = topic
        self.partition = partition
        self._segments = segments
        self._deleter = deleter
        self._mark_snapshots_deleted = mark_snapshots_deleted
        self._future_hold_logged: int | None = None   # base offset of the future-timestamp hold last warned

    def _facts(self, log_end_offset: int) -> list[SegmentFacts]:
        segs = self._segments
        out = []
        for i, seg in enumerate(segs):
            upper = segs[i + 1].base_offset if i + 1 < len(segs) else log_end_offset
            out.append(SegmentFacts(seg.base_offset, upper, seg.size_bytes, seg.largest_timestamp_ms(),
                                    seg.largest_timestamp_source))
        return out

    def delete_old_segments(self, cfg: TopicConfig, now_ms: int, consumed_upto: int | None, *,
                            log_start_offset: int, high_watermark: int, log_end_offset: Callable[[], int],
                            roll: Callable[[int], LogSegment | None],
                            advance_log_start: Callable[[int], int]) -> RetentionOutcome:
        """One retention pass (reference §7, seed 004); see :mod:`storage.retention`.
        ``advance_log_start(offset)`` raises the log start offset (if below) and returns it;
        ``roll(now_ms)`` returns the new active segment, or None when the log cannot roll now
        (then the active segment stays until a later pass)."""
        outcome = RetentionOutcome(self.topic, self.partition)
        hw = high_watermark
        rules: list[tuple[str, Callable]] = [
            (REASON_LOG_START, lambda facts: log_start_rule(facts, hw, log_start_offset))]
        if cfg.delete:
            if cfg.consumed_retention_enabled:
                rules.append((REASON_CONSUMED, lambda facts: consumed_rule(
                    facts, hw, consumed_upto, cfg.retention_commitoffset_ms, now_ms)))
            rules.append((REASON_SIZE, lambda facts: size_rule(facts, hw, cfg.retention_bytes)))
            rules.append((REASON_TIME, lambda facts: time_rule(facts, hw, cfg.retention_ms, now_ms)))
        for reason, rule in rules:
            facts = self._facts(log_end_offset())
            decision = rule(facts)
            if decision.hold is not None:
                outcome.held.append(decision.hold)
            if decision.count:
                self._delete_prefix(cfg, decision.count, facts, reason, now_ms, outcome, roll, advance_log_start)
        self._log_future_hold(next((h for h in outcome.held if h.reason == HOLD_FUTURE_TIMESTAMP), None))
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

    def _delete_prefix(self, cfg: TopicConfig, count: int, facts: list[SegmentFacts], reason: str, now_ms: int,
                       outcome: RetentionOutcome, roll: Callable[[int], LogSegment | None],
                       advance_log_start: Callable[[int], int]) -> None:
        doomed_facts = facts[:count]
        if count == len(self._segments):
            new = roll(now_ms)
            if new is None:     # the log cannot roll now (an append is in flight): the active segment stays
                doomed_facts = doomed_facts[:-1]
                count -= 1
            else:
                outcome.rolled = True
                if doomed_facts[-1].base_offset == new.base_offset:
                    doomed_facts = doomed_facts[:-1]
                    count -= 1
        if count <= 0:
            return
        doomed = self._segments.drop_prefix(count)
        advance_log_start(self._segments[0].base_offset)
        for f in doomed_facts:
            outcome.deleted.append(DeletedSegment(f.base_offset, f.upper_offset - 1, f.size_bytes,
                                                  f.largest_timestamp_ms, reason))
            logger.info("segment_deleted", topic=self.topic, partition=self.partition, base_offset=f.base_offset,
                        last_offset=f.upper_offset - 1, size_bytes=f.size_bytes,
                        largest_timestamp_ms=f.largest_timestamp_ms, reason=reason)
        deleter = self._deleter
        deleter.schedule_delete(doomed, now_ms, cfg.file_delete_delay_ms,
                                self._mark_snapshots_deleted(seg.base_offset for seg in doomed),
                                defer=deleter.defer_renames)


__all__ = ["LogRetention", "SegmentDeleter", "SegmentRename"]
