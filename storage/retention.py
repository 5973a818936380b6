"""Which segments retention may delete: pure rules over a snapshot of a log's segments.

Kafka's rules (``UnifiedLog.deleteOldSegments``; reference §7) plus the two-level
consumed-log retention of seed 004 (a KIP-68 draft that never shipped).

Walk the segments oldest → newest; for each let ``upper`` be the next segment's base
offset (the log end offset for the last). A segment is deletable only if
``high watermark >= upper``, the rule's predicate holds, and it is not the last segment
while empty. The walk stops at the first segment that is not deletable: only a
**contiguous prefix** is ever deleted. Rules run in this order, each on what the
previous ones left:

=====================  ======================================================================
rule (reason)          predicate
=====================  ======================================================================
``log_start_offset``   the next segment's base offset <= log start offset (always applied,
                       whatever ``cleanup.policy``)
``consumed``           seed 004, only when ``consumed_retention_enabled`` and the caller knows
                       the consumed offset: every record of the segment lies below it
                       (``upper <= consumed_upto``) **and** ``now - largest timestamp >
                       retention.commitoffset.ms``; ``consumed_upto`` unknown (None) skips
                       the rule (the seed's "-1 means skip")
``retention_bytes``    ``retention.bytes >= 0`` and the log is at least that big: delete the
                       oldest while ``size - retention.bytes - segment size >= 0`` (subtracting)
``retention_ms``       ``retention.ms >= 0`` and ``now - largest timestamp > retention.ms``
=====================  ======================================================================

All but the first need ``delete`` in ``cleanup.policy``. "Largest timestamp" is the
segment's max record timestamp, or its ``.log`` mtime when it has none.

Holds: when a rule stops at a segment for a reason an operator should know, a
:class:`HeldSegment` says so — ``future_timestamp`` (its largest timestamp is ahead of
the clock, so time retention cannot pass it and everything behind it waits: KAFKA-6482,
Redpanda #9820) and ``not_consumed`` (old enough for consumed retention but a group has
not committed past it). Ordinary "not old enough yet" is not a hold, nor is a segment
retention could never delete anyway: the empty last segment (a retention roll has just
created it, and its mtime may be a moment ahead of the pass's clock) or the last
segment whose time is its mtime.

The caller (:meth:`storage.log.PartitionLog.delete_old_segments`) rolls first when a
rule would delete every segment, advances the log start offset to the first surviving
base offset before renaming files to ``.deleted``, and removes them after
``file.delete.delay.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

REASON_LOG_START = "log_start_offset"
REASON_CONSUMED = "consumed"
REASON_SIZE = "retention_bytes"
REASON_TIME = "retention_ms"

HOLD_FUTURE_TIMESTAMP = "future_timestamp"
HOLD_NOT_CONSUMED = "not_consumed"


class SegmentFacts(NamedTuple):
    """What retention needs to know about one segment."""

    base_offset: int
    upper_offset: int          # next segment's base offset, or the log end offset for the last
    size_bytes: int
    largest_timestamp_ms: int  # max record timestamp, or mtime when none
    timestamp_source: str      # "records" or "mtime"


@dataclass(frozen=True, slots=True)
class DeletedSegment:
    base_offset: int
    last_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class HeldSegment:
    base_offset: int
    last_offset: int
    largest_timestamp_ms: int
    reason: str
    detail: str = ""


@dataclass(slots=True)
class RetentionOutcome:
    """What one retention pass did to one partition."""

    topic: str
    partition: int
    deleted: list[DeletedSegment] = field(default_factory=list)
    held: list[HeldSegment] = field(default_factory=list)
    log_start_offset: int = 0
    rolled: bool = False

    @property
    def deleted_bytes(self) -> int:
        return sum(d.size_bytes for d in self.deleted)

    def __bool__(self) -> bool:
        return bool(self.deleted or self.held)


class Decision(NamedTuple):
    count: int                     # length of the deletable prefix
    hold: HeldSegment | None


Predicate = Callable[[int, SegmentFacts], bool]


def deletable_prefix(segments: Sequence[SegmentFacts], high_watermark: int, predicate: Predicate) -> int:
    """Length of the prefix Kafka's ``deletableSegments`` would return for ``predicate``."""
    n = len(segments)
    count = 0
    for i, seg in enumerate(segments):
        is_last = i == n - 1
        if high_watermark < seg.upper_offset:
            break
        if is_last and seg.upper_offset <= seg.base_offset:  # last and empty
            break
        if not predicate(i, seg):
            break
        count += 1
    return count


def log_start_rule(segments: Sequence[SegmentFacts], high_watermark: int, log_start_offset: int) -> Decision:
    n = len(segments)

    def pred(i: int, seg: SegmentFacts) -> bool:
        return i + 1 < n and segments[i + 1].base_offset <= log_start_offset

    return Decision(deletable_prefix(segments, high_watermark, pred), None)


def size_rule(segments: Sequence[SegmentFacts], high_watermark: int, retention_bytes: int) -> Decision:
    if retention_bytes < 0:
        return Decision(0, None)
    total = sum(s.size_bytes for s in segments)
    if total < retention_bytes:
        return Decision(0, None)
    diff = [total - retention_bytes]

    def pred(i: int, seg: SegmentFacts) -> bool:
        if diff[0] - seg.size_bytes >= 0:
            diff[0] -= seg.size_bytes
            return True
        return False

    return Decision(deletable_prefix(segments, high_watermark, pred), None)


def _hold(seg: SegmentFacts, reason: str, detail: str) -> HeldSegment:
    return HeldSegment(seg.base_offset, seg.upper_offset - 1, seg.largest_timestamp_ms, reason, detail)


def _time_could_delete(segments: Sequence[SegmentFacts], index: int, high_watermark: int) -> bool:
    """Whether only its timestamp keeps time retention from ``segments[index]``.

    Not the last segment when it is empty (never deleted: the one a retention roll just
    created) or when its time comes from the file's mtime (the active segment of a log
    without record timestamps is written to after the pass read the clock), and not a
    segment above the high watermark.
    """
    seg = segments[index]
    if high_watermark < seg.upper_offset:
        return False
    if index == len(segments) - 1 and (seg.upper_offset <= seg.base_offset or seg.timestamp_source != "records"):
        return False
    return True


def time_rule(segments: Sequence[SegmentFacts], high_watermark: int, retention_ms: int, now_ms: int) -> Decision:
    if retention_ms < 0:
        return Decision(0, None)
    count = deletable_prefix(segments, high_watermark,
                             lambda i, seg: now_ms - seg.largest_timestamp_ms > retention_ms)
    hold = None
    if count < len(segments):
        blocker = segments[count]
        if blocker.largest_timestamp_ms > now_ms and _time_could_delete(segments, count, high_watermark):
            behind = sum(1 for s in segments[count + 1:] if now_ms - s.largest_timestamp_ms > retention_ms)
            hold = _hold(blocker, HOLD_FUTURE_TIMESTAMP,
                         f"largest timestamp is {blocker.largest_timestamp_ms - now_ms} ms in the future "
                         f"({blocker.timestamp_source}); {behind} later expired segment(s) wait behind it")
    return Decision(count, hold)


def consumed_rule(segments: Sequence[SegmentFacts], high_watermark: int, consumed_upto: int | None,
                  retention_commitoffset_ms: int, now_ms: int) -> Decision:
    if consumed_upto is None or consumed_upto < 0:
        return Decision(0, None)

    def old_enough(seg: SegmentFacts) -> bool:
        return now_ms - seg.largest_timestamp_ms > retention_commitoffset_ms

    count = deletable_prefix(segments, high_watermark,
                             lambda i, seg: seg.upper_offset <= consumed_upto and old_enough(seg))
    hold = None
    if count < len(segments):
        blocker = segments[count]
        is_empty_last = count == len(segments) - 1 and blocker.upper_offset <= blocker.base_offset
        if old_enough(blocker) and blocker.upper_offset > consumed_upto and not is_empty_last:
            hold = _hold(blocker, HOLD_NOT_CONSUMED,
                         f"consumed up to offset {consumed_upto}, segment ends at {blocker.upper_offset - 1}")
    return Decision(count, hold)


__all__ = [
    "SegmentFacts", "DeletedSegment", "HeldSegment", "RetentionOutcome", "Decision", "deletable_prefix",
    "log_start_rule", "size_rule", "time_rule", "consumed_rule", "REASON_LOG_START", "REASON_CONSUMED",
    "REASON_SIZE", "REASON_TIME", "HOLD_FUTURE_TIMESTAMP", "HOLD_NOT_CONSUMED",
]
