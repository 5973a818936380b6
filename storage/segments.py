"""The segment list of one partition log and the one factory of segments.

Kafka's ``LogSegments`` plus the splice of ``LocalLog.replaceSegments``: :class:`LogSegments`
alone holds the segments of a log (oldest first), their base offsets and the log's
**version**, one counter that every change of the list moves. Nothing else changes the
list; every change is one of its methods:

==================  ==========================================  =====================
method              used by                                     kind
==================  ==========================================  =====================
``add``             rolling (a new active segment)              grows
``pop_empty_active`` rolling onto an empty active segment        grows (its base stays)
``drop_prefix``     retention                                   shrinks from the front
``truncate_to``     truncation                                  rewrites
``reset``           truncation below the first segment          rewrites
``replace``         the cleaner's swap                          rewrites
==================  ==========================================  =====================

(Recovery builds the list the log starts with; see :mod:`storage.recovery`.)

Whoever keeps something derived from the list keys it on the version it saw and asks
before using it:

* :meth:`LogSegments.unchanged_since` for anything derived from the list itself (the
  timestamp-search prefix arrays): every change counts;
* :meth:`LogSegments.bytes_unchanged_since` for anything derived from the bytes at an
  offset or a file position (the batch-index cache): only the changes that rewrite offsets
  still in the log count (truncation, reset, the cleaner's swap); a roll or retention
  leaves every remaining offset's bytes where they were;
* :meth:`LogSegments.not_truncated_since` for a cleaning pass and a flush job: a
  truncation (or reset) since its snapshot refuses the pass's swaps and the job's move of
  the recovery point. A pass's own swaps (it swaps several groups in turn) and retention
  are checked by segment identity instead. A swap does not void a flush job: the cleaned
  segment was fsynced before it and keeps every offset, so what the job was to make
  durable is durable when it ends (voiding it cost acks=all producers a second fsync).

The kind of each change is decided here, in the mutator, so no caller can forget to
invalidate a cache or a flush job.

:class:`SegmentFactory` is the one place segments are created and opened (the log and
recovery both use it): it applies the topic config's index sizes, preallocation and the
roll jitter, and hands every segment the :class:`~storage.index.MappedIndexes` it was given.
"""

from __future__ import annotations

import bisect
import random
from typing import Callable, Iterator

from sundial.config.topic import TopicConfig

from .index import MappedIndexes
from .segment import LogSegment, random_segment_jitter


class SegmentFactory:
    """Creates and opens the segments of one partition directory.

    ``mapped_indexes`` bounds the mapped index files of every segment it makes; the log
    manager's one instance in the broker (a private one with the default limit when None).
    """

    def __init__(self, dir_path: str, rng: random.Random, mapped_indexes: MappedIndexes | None = None) -> None:
        self.dir = dir_path
        self._rng = rng
        self._mapped_indexes = mapped_indexes if mapped_indexes is not None else MappedIndexes()

    @property
    def mapped_indexes(self) -> MappedIndexes:
        return self._mapped_indexes

    def create(self, config: TopicConfig, base_offset: int, *, created_ms: int | None = None) -> LogSegment:
        """A new, empty segment at ``base_offset`` (files created, preallocated when configured)."""
        return LogSegment.create(self.dir, base_offset, index_interval_bytes=config.index_interval_bytes,
                                 max_index_size=config.segment_index_bytes,
                                 roll_jitter_ms=random_segment_jitter(config, self._rng), created_ms=created_ms,
                                 preallocate_bytes=config.segment_bytes if config.preallocate else 0,
                                 mapped_indexes=self._mapped_indexes)

    def open(self, config: TopicConfig, base_offset: int, *, with_jitter: bool = True) -> LogSegment:
        """An existing segment. ``with_jitter=False`` for one that will not be active (a cleaned
        segment swapped in), which draws no jitter."""
        jitter = random_segment_jitter(config, self._rng) if with_jitter else 0
        return LogSegment.open(self.dir, base_offset, index_interval_bytes=config.index_interval_bytes,
                               max_index_size=config.segment_index_bytes, roll_jitter_ms=jitter,
                               mapped_indexes=self._mapped_indexes)


class LogSegments:
    """The segments of one log, their base offsets and the version (see module doc)."""

    __slots__ = ("_segments", "_bases", "_version", "_rewritten_at", "_truncated_at", "_snapshot")

    def __init__(self, segments: list[LogSegment]) -> None:
        if not segments:
            raise ValueError("a log needs at least one segment")
        self._segments = list(segments)
        self._bases = [s.base_offset for s in segments]
        self._version = 0
        self._rewritten_at = 0     # version of the last change that rewrote offsets still in the log
        self._truncated_at = 0     # version of the last truncation or reset
        self._snapshot: tuple[LogSegment, ...] | None = None   # what snapshot() hands out, until a change
        for seg in segments:
            seg.is_active = False
        segments[-1].is_active = True

    # -- versions ------------------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    @property
    def rewrite_version(self) -> int:
        """The version of the last change that rewrote offsets still in the log (a key for what
        is derived from bytes at a file position)."""
        return self._rewritten_at

    def unchanged_since(self, version: int) -> bool:
        """No change of any kind since ``version``."""
        return version == self._version

    def bytes_unchanged_since(self, version: int) -> bool:
        """Every offset still in the log has the bytes (and file position) it had at ``version``."""
        return version >= self._rewritten_at

    def not_truncated_since(self, version: int) -> bool:
        """No truncation or reset since ``version``."""
        return version >= self._truncated_at

    def _changed(self, *, rewrites: bool = False, truncates: bool = False) -> None:
        self._version += 1
        self._snapshot = None
        if rewrites:
            self._rewritten_at = self._version
        if truncates:
            self._truncated_at = self._version

    # -- reading -------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, index):
        return self._segments[index]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def snapshot(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first, as they are now: an immutable tuple that later changes
        of the list do not touch (built once per version)."""
        snap = self._snapshot
        if snap is None:
            snap = self._snapshot = tuple(self._segments)
        return snap

    def index_for(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (floor by base offset; 0 if below all)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def has_base(self, base_offset: int) -> bool:
        return base_offset in self._bases

    def base_offsets(self) -> list[int]:
        return list(self._bases)

    def position_of(self, segment: LogSegment) -> int:
        """Index of ``segment`` (by identity), -1 when it is not in the log."""
        return next((i for i, s in enumerate(self._segments) if s is segment), -1)

    # -- changes -------------------------------------------------------------------------------------------------
    def add(self, segment: LogSegment) -> None:
        """Append ``segment`` as the new active segment (a roll; the caller has retired the old
        one with :meth:`~storage.segment.LogSegment.on_become_inactive`)."""
        if self._segments and self._segments[-1].is_active:
            raise ValueError("the active segment must be retired before a new one is added")
        segment.is_active = True
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._changed()

    def pop_empty_active(self) -> LogSegment:
        """Remove the active segment, which is empty, for a roll that recreates it at its base."""
        seg = self._segments[-1]
        if seg.size_bytes != 0:
            raise ValueError("only an empty active segment is popped")
        self._segments.pop()
        self._bases.pop()
        self._changed()
        return seg

    def drop_prefix(self, count: int) -> list[LogSegment]:
        """Remove the ``count`` oldest segments (retention; never the active one); the removed ones."""
        if count >= len(self._segments):
            raise ValueError("retention never drops the active segment")
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._changed()
        return doomed

    def truncate_to(self, offset: int, dispose: Callable[[list[LogSegment]], None]) -> list[LogSegment]:
        """Remove every segment whose base is above ``offset`` (handed to ``dispose`` first), then
        cut the new active segment at ``offset``; the removed segments."""
        keep = bisect.bisect_right(self._bases, offset)
        if keep == 0:
            raise ValueError(f"offset {offset} is below the first segment; reset the log instead")
        doomed = self._segments[keep:]
        del self._segments[keep:]
        del self._bases[keep:]
        self._changed(rewrites=True, truncates=True)
        dispose(doomed)
        active = self._segments[-1]
        active.truncate_to(offset)
        active.is_active = True
        return doomed

    def reset(self, segment: LogSegment) -> list[LogSegment]:
        """Replace every segment by ``segment`` (a new, empty active one); the removed segments."""
        doomed = self._segments
        segment.is_active = True
        self._segments = [segment]
        self._bases = [segment.base_offset]
        self._changed(rewrites=True, truncates=True)
        return doomed

    def replace(self, first: int, count: int, segment: LogSegment) -> list[LogSegment]:
        """Splice ``segment`` (inactive) in place of ``count`` segments from index ``first`` (the
        cleaner's swap); the replaced segments."""
        if first < 0 or count <= 0 or first + count > len(self._segments) - 1:
            raise ValueError("the swap replaces inactive segments of the log")
        old = self._segments[first:first + count]
        segment.is_active = False
        self._segments[first:first + count] = [segment]
        self._bases[first:first + count] = [segment.base_offset]
        self._changed(rewrites=True)
        return old


__all__ = ["LogSegments", "SegmentFactory"]
