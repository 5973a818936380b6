"""Making a partition log durable: flush jobs prepared on the owning thread, run on any thread.

:class:`LogFlushing` is a base of :class:`storage.log.PartitionLog`.

``prepare_flush`` (owner thread) returns a :class:`FlushJob` holding duplicated
descriptors of every ``.log`` with data between the recovery point and the target,
plus the index files of rolled segments and the directory when segments were created;
``FlushJob.run`` (any thread) fdatasyncs and closes them; ``mark_flushed`` (owner
thread) advances the recovery point. Instead of ``run``, ``hand_over`` gives the
descriptors to a native worker (storage/_fsync_worker.c) that does the same work
(sync in order, stop at the first failure, close all); its errno then becomes the
error ``run`` would have raised through :func:`flush_failure`.
``maybe_flush_due(now_ms)`` applies ``flush.messages`` / ``flush.ms`` and Kafka's
flush-on-roll. A job prepared before a
truncation does not move the recovery point (the log's generation changed).
"""

from __future__ import annotations

import os

from .errors import KafkaStorageError
from .segment import LogSegment


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
    """Flushing of a :class:`~storage.log.PartitionLog` (see module doc)."""

    def prepare_flush(self, up_to_offset: int | None = None) -> FlushJob | None:
        """A :class:`FlushJob` making offsets below the target durable, or None if nothing to do."""
        self._check_open()
        target = self._leo if up_to_offset is None else min(up_to_offset, self._leo)
        pending = ([s for s in self._segments if not s.is_active and not s.indexes_durable]
                   if self._index_sync_needed else [])
        if target <= self.recovery_point and not pending:
            return None
        fds: list[int] = []
        segs: list[LogSegment] = []
        try:
            chosen = set()
            if target > self.recovery_point:
                for seg in self._segments[self._segment_index_for(self.recovery_point):]:
                    if seg.base_offset >= target and seg.base_offset > self.recovery_point:
                        break
                    with_indexes = not seg.is_active and not seg.indexes_durable
                    fds.extend(seg.flush_fds(include_indexes=with_indexes))
                    chosen.add(id(seg))
                    if with_indexes:
                        segs.append(seg)
            for seg in pending:   # rolled segments whose trimmed indexes are not on disk yet
                if id(seg) not in chosen and seg.base_offset < max(target, self.recovery_point):
                    fds.extend(seg.flush_fds(include_indexes=True))
                    segs.append(seg)
            if self._dir_dirty:
                fds.append(os.open(self.dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            raise KafkaStorageError.from_os_error(exc, f"cannot prepare flush of {self.dir}") from exc
        self._dir_dirty = False
        return FlushJob(fds, target, self._generation, segs)

    def mark_flushed(self, job: FlushJob) -> None:
        """After ``job.run()``: advance the recovery point (owning thread only)."""
        if job.generation != self._generation:
            return  # truncated meanwhile: the synced range may not match the log any more
        for seg in job.segments:
            seg.indexes_durable = True
        if self._index_sync_needed:
            self._index_sync_needed = any(not s.is_active and not s.indexes_durable for s in self._segments)
        new_point = min(job.target_offset, self._leo)
        if new_point > self.recovery_point:
            self.recovery_point = new_point

    def flush(self, up_to_offset: int | None = None) -> None:
        """Synchronous flush on the calling thread (shutdown, tests)."""
        job = self.prepare_flush(up_to_offset)
        if job is not None:
            job.run()
            self.mark_flushed(job)

    def maybe_flush_due(self, now_ms: int, *, time_check: bool = True) -> FlushJob | None:
        """A flush job if ``flush.messages``, ``flush.ms`` (checked only with ``time_check``) or a
        past roll asks for one."""
        if self._closed:
            return None
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms
        unflushed = self.unflushed_messages
        cfg = self.config
        due = unflushed > 0 and (unflushed >= cfg.flush_messages
                                 or (time_check and now_ms - self._last_flush_ms >= cfg.flush_ms))
        if due:
            self._last_flush_ms = now_ms
            return self.prepare_flush()
        if self.recovery_point < self._segments[-1].base_offset or self._index_sync_needed:
            return self.prepare_flush(self._segments[-1].base_offset)
        return None


__all__ = ["FlushJob", "LogFlushing", "close_fds", "flush_failure"]
