"""Making a partition log durable: flush jobs prepared on the owning thread, run on any thread.

:class:`LogFlushing` is a collaborator of :class:`storage.log.PartitionLog`: it reads the
log's :class:`~storage.segments.LogSegments` and owns what the next flush must also sync
(the directory, the index files of rolled segments); the log owns the recovery point and
hands it in.

``prepare_flush`` (owner thread) returns a :class:`FlushJob` holding duplicated
descriptors of every ``.log`` with data between the recovery point and the target,
plus the index files of rolled segments and the directory when segments were created;
``FlushJob.run`` (any thread) fdatasyncs and closes them; ``mark_flushed`` (owner
thread) advances the recovery point. Instead of ``run``, ``hand_over`` gives the
descriptors to a native worker (storage/_fsync_worker.c) that does the same work
(sync in order, stop at the first failure, close all); its errno then becomes the
error ``run`` would have raised through :func:`flush_failure`.
``maybe_flush_due(now_ms)`` applies ``flush.messages`` / ``flush.ms`` and Kafka's
flush-on-roll. A job carries the segment list's version at its preparation; one prepared
before a truncation does not move the recovery point
(:meth:`storage.segments.LogSegments.not_truncated_since`); one prepared before a cleaner's
swap does, since the swapped-in segment was fsynced before it.
"""

from __future__ import annotations

import os

from .errors import KafkaStorageError
from .segment import LogSegment
from .segments import LogSegments


def flush_failure(exc: OSError) -> KafkaStorageError:
    """The error a flush whose fdatasync failed with ``exc`` reports."""
    return KafkaStorageError.from_os_error(exc, "flush failed")


def close_fds(fds) -> None:
    """Close every descriptor, ignoring errors (each one is closed whatever the others do)."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class FlushJob:
    """fdatasync work prepared on the owning thread; :meth:`run` is safe on any thread."""

    __slots__ = ("fds", "target_offset", "generation", "segments", "_done")

    def __init__(self, fds: list[int], target_offset: int, generation: int, segments: list) -> None:
        self.fds = fds
        self.target_offset = target_offset
        self.generation = generation
        self.segments = segments      # segments whose index files are synced by this job
        self._done = False

    def run(self) -> None:
        """fdatasync every descriptor, then close them all (also on failure)."""
        if self._done:
            return
        self._done = True
        error: OSError | None = None
        try:
            for fd in self.fds:
                if error is None:
                    try:
                        os.fdatasync(fd)
                    except OSError as exc:
                        error = exc
        finally:
            close_fds(self.fds)
        if error is not None:
            raise flush_failure(error)

    def hand_over(self) -> tuple[int, ...]:
        """The descriptors, now owned by the caller, who must do what :meth:`run` does with
        them (fdatasync each in order, stopping at the first failure; close all). The job
        counts as run: neither ``run`` nor ``discard`` touches them any more."""
        if self._done:
            raise RuntimeError("flush job already run or discarded")
        self._done = True
        return tuple(self.fds)

    def discard(self) -> None:
        """Close the descriptors without syncing (the job will not run)."""
        if not self._done:
            self._done = True
            close_fds(self.fds)

    def __del__(self) -> None:  # a job dropped without run() must not leak descriptors
        self.discard()


class LogFlushing:
    """What the flushes of one log must sync (see module doc)."""

    def __init__(self, dir_path: str, segments: LogSegments, *, dir_dirty: bool) -> None:
        self.dir = dir_path
        self._segments = segments
        self._dir_dirty = dir_dirty
        # some rolled (or rebuilt) segment's index files are not fsynced yet
        self._index_sync_needed = any(not s.indexes_durable for s in segments[:-1])
        self._last_flush_ms: int | None = None

    def note_dir_changed(self) -> None:
        """A segment file was created, renamed or swapped in: the next flush syncs the directory."""
        self._dir_dirty = True

    def note_segment_rolled(self) -> None:
        """A new segment was created and the previous one's indexes wait for their sync."""
        self._dir_dirty = True
        self._index_sync_needed = True

    def prepare(self, target: int, recovery_point: int) -> FlushJob | None:
        """A :class:`FlushJob` making offsets below ``target`` durable, or None if nothing to do."""
        segments = self._segments
        pending = ([s for s in segments if not s.is_active and not s.indexes_durable]
                   if self._index_sync_needed else [])
        if target <= recovery_point and not pending:
            return None
        fds: list[int] = []
        segs: list[LogSegment] = []
        try:
            chosen = set()
            if target > recovery_point:
                for seg in segments[segments.index_for(recovery_point):]:
                    if seg.base_offset >= target and seg.base_offset > recovery_point:
                        break
                    with_indexes = not seg.is_active and not seg.indexes_durable
                    fds.extend(seg.flush_fds(include_indexes=with_indexes))
                    chosen.add(id(seg))
                    if with_indexes:
                        segs.append(seg)
            for seg in pending:   # rolled segments whose trimmed indexes are not on disk yet
                if id(seg) not in chosen and seg.base_offset < max(target, recovery_point):
                    fds.extend(seg.flush_fds(include_indexes=True))
                    segs.append(seg)
            if self._dir_dirty:
                fds.append(os.open(self.dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            raise KafkaStorageError.from_os_error(exc, f"cannot prepare flush of {self.dir}") from exc
        self._dir_dirty = False
        return FlushJob(fds, target, segments.version, segs)

    def completed(self, job: FlushJob) -> bool:
        """After ``job.run()``: note its segments' indexes durable; False when the log was truncated
        (or reset) meanwhile and the recovery point must stay. A cleaner swap meanwhile does not
        count: the cleaned segment's files were fsynced before the swap and it moved no offset, so
        every offset below the job's target is on disk either way (the swap marks the directory for
        the next flush)."""
        if not self._segments.not_truncated_since(job.generation):
            return False
        for seg in job.segments:
            seg.indexes_durable = True
        if self._index_sync_needed:
            self._index_sync_needed = any(not s.is_active and not s.indexes_durable for s in self._segments)
        return True

    def due_target(self, now_ms: int, *, time_check: bool, unflushed: int, flush_messages: int, flush_ms: int,
                   recovery_point: int) -> int | None:
        """The offset a flush is due up to (``flush.messages``, ``flush.ms`` checked only with
        ``time_check``, or a past roll), -1 for the log end offset, None when none is due."""
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms
        due = unflushed > 0 and (unflushed >= flush_messages
                                 or (time_check and now_ms - self._last_flush_ms >= flush_ms))
        if due:
            self._last_flush_ms = now_ms
            return -1
        active_base = self._segments.active.base_offset
        if recovery_point < active_base or self._index_sync_needed:
            return active_base
        return None


__all__ = ["FlushJob", "LogFlushing", "close_fds", "flush_failure"]
