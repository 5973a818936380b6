"""Deleting old segments of a partition log: retention passes and delayed file removal.

:class:`LogRetention` is a base of :class:`storage.log.PartitionLog`. Which segments a
rule may delete is decided by the pure functions of :mod:`storage.retention` (Kafka's
``deleteRetentionMsBreachedSegments`` & co., reference §7, and the consumed retention
of seed 004); this module applies the decisions: rules run in order (log start offset,
consumed, size, time), each on the facts left by the previous one; the active segment
is rolled first when every segment goes; deleted segments are renamed ``.deleted`` at
once and removed after ``file.delete.delay.ms`` (:meth:`delete_expired_files`).
"""

from __future__ import annotations

import os
from typing import Callable

import structlog

from . import files
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


class LogRetention:
    """Retention of a :class:`~storage.log.PartitionLog` (see module doc)."""

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
                              self._producers.mark_snapshots_deleted(seg.base_offset for seg in doomed))
        if self._producers_loaded:
            self._producers.truncate_head(self.log_start_offset)

    def _schedule_delete(self, segments: list[LogSegment], now_ms: int, also: list[str] = ()) -> None:
        """Rename to ``.deleted`` now; remove after ``file.delete.delay.ms`` (with ``also``: files
        already renamed, such as the producer snapshots of those segments)."""
        paths: list[str] = list(also)
        for seg in segments:
            seg.close_handles()
            if not seg.log_path.endswith(files.DELETED_SUFFIX):
                paths.extend(seg.rename_suffix(files.DELETED_SUFFIX))
            else:
                paths.extend(p for p in (seg.log_path, seg.offset_index.path, seg.time_index.path,
                                         seg.txn_index.path) if os.path.exists(p))
        if not paths:
            return
        # Like Kafka's asyncDeleteSegment, even a zero delay hands the unlinks to the next
        # housekeeping run (the broker does them off the event loop): unlinking a large
        # segment can take long on a slow disk.
        self._pending_deletes.append((now_ms + max(self.config.file_delete_delay_ms, 0), paths))

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
