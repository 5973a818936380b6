"""Driver-side planning: options -> per-partition offset ranges, split into Spark tasks.

Pure Python over a small :class:`OffsetClient` interface (the real one,
:class:`pipeline.client.KafkaOffsetClient`, speaks ListOffsets/Metadata through
kafka-python; tests use a fake over lists of records).

Semantics reproduced from spark-sql-kafka:

* A timestamp resolves to the **earliest offset whose timestamp is >= it**
  (``offsetsForTimes``); the meaning follows the topic's ``message.timestamp.type``.
* No such offset: a *start* fails (strategy ``error``, the default) or starts at the
  log end offset (strategy ``latest``); an *end* becomes the log end offset.
* Ending offsets are exclusive: a task reads ``[start, end)``.
* A per-partition map (offsets or timestamps) must name every assigned partition.
* Splitting: ``maxRecordsPerPartition`` first cuts each range into
  ``ceil(size / max)`` equal parts; if that leaves fewer than ``minPartitions`` ranges,
  ranges are cut again in proportion to their size (the connector's
  ``KafkaOffsetRangeCalculator``). Empty ranges are dropped.
* ``maxOffsetsPerTrigger`` is shared across partitions in proportion to their backlog,
  never starving a partition with a backlog (:func:`rate_limit`).

Beyond the connector (documented in docs/spark.md): a start offset below the log start
offset is data loss (fail, or clamp with ``failOnDataLoss=false``); a start or end past
the log end offset, or a start after its end, is refused at planning time instead of
timing out in a task.

Pushed filters (``sundial.filterPushdown``, :mod:`pipeline.pushdown`) narrow the resolved
ranges before they are split (:func:`narrow_ranges`): topics and partitions are dropped,
offset ranges cut, a lower timestamp bound moves the start to ``offsetsForTimes``, and
both timestamp bounds travel to the tasks.

The exact time window (``sundial.exactTimeWindow``): a range carries
``[min_timestamp_ms, max_timestamp_ms)`` and tasks drop records outside it. Records
before ``offset(A)`` all have timestamps < A, so the start needs no extra scan; with
out-of-order CreateTime producers records with timestamps < B can follow
``offset(B)``, so the range is extended to the log end offset (or to
``offset(B + maxDisorderMs)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Protocol, Sequence

import structlog

from .errors import DATA_LOSS_HINT_FAIL, DATA_LOSS_HINT_SKIP, DataLossError, OffsetResolutionError
from .offsets import (
    EARLIEST,
    LATEST,
    EarliestLimit,
    GlobalTimestamp,
    LatestLimit,
    OffsetLimit,
    SpecificOffsets,
    SpecificTimestamps,
    TopicPartition,
    limit_timestamp_for,
)
from .options import SourceOptions, Subscription
from .pushdown import Pushed

logger = structlog.get_logger(__name__)


class OffsetClient(Protocol):
    """What planning needs from a broker. Implementations retry transient errors."""

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The topic-partitions the subscription covers now, sorted."""

    def earliest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offsets (ListOffsets -2)."""

    def latest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offsets (ListOffsets -1; the last stable offset under read_committed)."""

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Earliest offset with timestamp >= T per partition; None where no record has one."""

    def close(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class OffsetRange:
    """One Spark task's work: offsets ``[start, end)`` of one partition."""

    tp: TopicPartition
    start: int
    end: int
    min_timestamp_ms: int | None = None     # exact window: keep timestamp >= this
    max_timestamp_ms: int | None = None     # exact window: keep timestamp < this

    @property
    def size(self) -> int:
        return self.end - self.start


def report_data_loss(fail_on_data_loss: bool, message: str, **fields) -> None:
    """Raise :class:`DataLossError`, or log and return when failOnDataLoss is false."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {DATA_LOSS_HINT_FAIL}")
    logger.warning("data_loss_skipped", detail=message, hint=DATA_LOSS_HINT_SKIP, **fields)


# --- resolving one end of the range --------------------------------------------------

def _require_all_partitions(option: str, specified: Iterable[TopicPartition], assigned: Sequence[TopicPartition],
                            *, offsets: bool) -> None:
    specified = set(specified)
    if specified != set(assigned):
        extra = "\nUse -1 for latest, -2 for earliest." if offsets else ""
        raise OffsetResolutionError(option, (
            f"If {option} contains specific offsets, you must specify all TopicPartitions.{extra}\n"
            f"Specified: {sorted(map(str, specified))} Assigned: {sorted(map(str, assigned))}"))


def resolve_limit(limit: OffsetLimit, tps: Sequence[TopicPartition], client: OffsetClient, *,
                  earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                  is_start: bool, strategy: str, option: str) -> dict[TopicPartition, int]:
    """Concrete offsets for every partition in ``tps`` (no -1/-2 left)."""
    if isinstance(limit, EarliestLimit):
        return {tp: earliest[tp] for tp in tps}
    if isinstance(limit, LatestLimit):
        return {tp: latest[tp] for tp in tps}
    if isinstance(limit, SpecificOffsets):
        _require_all_partitions(option, limit.offsets, tps, offsets=True)
        out = {}
        for tp in tps:
            off = limit.offsets[tp]
            out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        return out
    if isinstance(limit, SpecificTimestamps):
        _require_all_partitions(option, limit.timestamps, tps, offsets=False)
        wanted = {tp: limit.timestamps[tp] for tp in tps}
    else:
        assert isinstance(limit, GlobalTimestamp)
        wanted = {tp: limit.timestamp_ms for tp in tps}
    found = client.offsets_for_times(wanted)
    out = {}
    for tp in tps:
        off = found.get(tp)
        if off is None or off < 0:
            if is_start and strategy == "error":
                raise OffsetResolutionError(option, (
                    f"No offset matched from request of topic-partition {tp} and timestamp {wanted[tp]}. "
                    "Set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead."))
            off = latest[tp]
        out[tp] = off
    return out


def _limit_option(limit, side: str) -> str:
    """The option that gave ``limit``, for error messages; ``side`` is "starting" or "ending"."""
    if isinstance(limit, GlobalTimestamp):
        return f"{side}Timestamp"
    if isinstance(limit, SpecificTimestamps):
        return f"{side}OffsetsByTimestamp"
    return f"{side}Offsets"


# --- batch -----------------------------------------------------------------------------

def plan_batch(opts: SourceOptions, client: OffsetClient, pushed: Pushed | None = None) -> list[OffsetRange]:
    """Resolve a batch query to split, non-empty offset ranges (narrowed by pushed filters)."""
    assert opts.ending is not None, "batch options carry an ending limit"
    tps = client.partitions(opts.subscription)
    if not tps:
        logger.warning("no_partitions_matched", subscription=str(opts.subscription))
        return []
    earliest = client.earliest_offsets(tps)
    latest = client.latest_offsets(tps)
    start_option, end_option = _limit_option(opts.starting, "starting"), _limit_option(opts.ending, "ending")
    start = resolve_limit(opts.starting, tps, client, earliest=earliest, latest=latest, is_start=True,
                          strategy=opts.starting_strategy, option=start_option)
    end = resolve_limit(opts.ending, tps, client, earliest=earliest, latest=latest, is_start=False,
                        strategy=opts.starting_strategy, option=end_option)

    scan_end: dict[TopicPartition, int] = {}
    if opts.exact_time_window:
        scan_end = _exact_window_scan_ends(opts, tps, client, latest)

    ranges = []
    for tp in tps:
        s, e = start[tp], end[tp]
        if s > latest[tp]:
            raise OffsetResolutionError(start_option, (
                f"{start_option} for {tp} resolves to offset {s}, past the log end offset {latest[tp]}"))
        if e > latest[tp]:
            raise OffsetResolutionError(end_option, (
                f"{end_option} for {tp} resolves to offset {e}, past the log end offset {latest[tp]}"))
        clamped = False
        if s < earliest[tp]:
            report_data_loss(opts.fail_on_data_loss, (
                f"Cannot fetch offset {s} of {tp}: the log start offset is {earliest[tp]}"),
                topic=tp.topic, partition=tp.partition, offset=s, log_start_offset=earliest[tp])
            s, clamped = earliest[tp], True
        if e < s:
            if clamped:
                e = s
            else:
                raise OffsetResolutionError(start_option, (
                    f"{start_option} for {tp} resolves to offset {s}, after {end_option} at offset {e}"))
        lo = hi = None
        if opts.exact_time_window:
            lo = limit_timestamp_for(opts.starting, tp)
            hi = limit_timestamp_for(opts.ending, tp)
            if hi is not None:
                e = max(e, scan_end[tp])
        ranges.append(OffsetRange(tp, s, e, lo, hi))
    if pushed is not None:
        ranges = narrow_ranges(ranges, pushed, client)
    planned = split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    logger.info("batch_planned", partitions=len(tps), tasks=len(planned),
                records=sum(r.size for r in planned))
    return planned


def _exact_window_scan_ends(opts: SourceOptions, tps: Sequence[TopicPartition], client: OffsetClient,
                            latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Where an exact-window task stops: the log end offset, or offset(B + maxDisorderMs)."""
    if opts.exact_window_max_disorder_ms is None:
        return dict(latest)
    wanted = {}
    for tp in tps:
        hi = limit_timestamp_for(opts.ending, tp)
        if hi is not None:
            wanted[tp] = hi + opts.exact_window_max_disorder_ms
    found = client.offsets_for_times(wanted) if wanted else {}
    out = {}
    for tp in tps:
        off = found.get(tp)
        out[tp] = latest[tp] if off is None or off < 0 else off
    return out


def narrow_ranges(ranges: Sequence[OffsetRange], pushed: Pushed, client: OffsetClient) -> list[OffsetRange]:
    """The part of each range that pushed filters keep (see :mod:`pipeline.pushdown`).

    Runs after the options are resolved and checked, so that a query fails or succeeds
    the same way with pushdown on and off; the rows are the options' rows that pass the
    filters. A lower timestamp bound moves the start to ``offsetsForTimes`` (nothing at
    or after it: the range is empty); both bounds go to the tasks, which drop what falls
    outside them."""
    if not pushed.filters:
        return list(ranges)
    if pushed.empty:
        logger.info("filters_pushed", filters=list(pushed.filters), tasks=0, reason="the filters exclude every row")
        return []
    kept = [r for r in ranges if pushed.keeps_topic(r.tp.topic) and pushed.keeps_partition(r.tp.partition)]
    out = []
    for r in kept:
        s, e = r.start, r.end
        if pushed.min_offset is not None:
            s = max(s, pushed.min_offset)
        if pushed.max_offset is not None:
            e = min(e, pushed.max_offset)
        lo, hi = r.min_timestamp_ms, r.max_timestamp_ms
        if pushed.min_timestamp_ms is not None:
            lo = pushed.min_timestamp_ms if lo is None else max(lo, pushed.min_timestamp_ms)
        if pushed.max_timestamp_ms is not None:
            hi = pushed.max_timestamp_ms if hi is None else min(hi, pushed.max_timestamp_ms)
        out.append(OffsetRange(r.tp, s, max(s, e), lo, hi))
    first_ms = pushed.min_timestamp_ms
    lookup = [r.tp for r in out if r.size > 0]
    if first_ms is not None and first_ms > 0 and lookup:
        # the first offset whose timestamp is >= first_ms: every earlier record is earlier in time
        found = client.offsets_for_times({tp: first_ms for tp in lookup})
        for i, r in enumerate(out):
            if r.size <= 0:
                continue
            off = found.get(r.tp)
            start = r.end if off is None or off < 0 else min(max(r.start, off), r.end)
            out[i] = replace(r, start=start)
    logger.info("filters_pushed", filters=list(pushed.filters), partitions=len(out),
                records=sum(max(r.size, 0) for r in out))
    return out


# --- splitting ---------------------------------------------------------------------------

def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` consecutive pieces; integer division, the last piece takes the remainder."""
    out = []
    remaining, start = r.size, r.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.end)
        out.append(replace(r, start=start, end=end))
        start = end
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round rounds half up
    return max(int(math.floor(size / total * min_parts + 0.5)), 1)


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Drop empty ranges, then split by ``maxRecordsPerPartition`` and ``minPartitions``."""
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        cut = []
        for r in out:
            cut.extend(_divide(r, -(-r.size // max_records_per_partition)))
        out = cut
    if min_partitions and len(out) < min_partitions:
        total = sum(r.size for r in out)
        unsplit = [_part_count(r.size, total, min_partitions) == 1 for r in out]
        unsplit_total = sum(r.size for r, u in zip(out, unsplit) if u)
        split_total = total - unsplit_total
        split_min = max(min_partitions - sum(unsplit), 1)
        cut = []
        for r, u in zip(out, unsplit):
            parts = 1 if u else _part_count(r.size, split_total, split_min)
            cut.extend(_divide(r, parts))
        out = [r for r in cut if r.size > 0]
    return out


# --- admission control ---------------------------------------------------------------------

def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               until: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Share ``limit`` offsets across partitions in proportion to their backlog.

    A partition's share is ``floor(limit * backlog / total)``, or 1 when that is below 1
    (a small partition is never starved); the result never passes ``until``.
    """
    sizes = {tp: end - start[tp] for tp, end in until.items() if tp in start and end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(until)
    out = {}
    for tp, end in until.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out
