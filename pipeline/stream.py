"""Micro-batch planning for streaming reads: offsets, admission control, data-loss checks.

Pure Python over :class:`pipeline.resolve.OffsetClient`; :mod:`pipeline.source` wraps it
in Spark's ``DataSourceStreamReader``. One :class:`StreamPlanner` lives in Spark's
stream-runner process for the whole query (it is never pickled to executors).

Offsets are Spark's checkpoint shape ``{"topic": {"partition": next_offset}}``
(:func:`pipeline.offsets.format_partition_offsets`), ordered deterministically.

* ``initial_offsets``: the starting options (default ``latest``), applied only to a new
  query; a restart resumes from the checkpoint.
* ``latest_offsets(start, ...)``: the log end offsets, capped by admission control:
  ``maxOffsetsPerTrigger`` (shared in proportion to backlog), ``minOffsetsPerTrigger``
  with ``maxTriggerDelay`` (the batch is deferred by returning ``start`` until enough
  records are waiting or the delay has passed; ignored under Trigger.AvailableNow, which
  must terminate). Partitions that appear mid-query start at their log start offset.
  After ``prepare_available_now`` the end offsets never pass the target frozen then.
* ``plan(start, end)``: ranges for one micro-batch. Data loss is reported per
  ``failOnDataLoss``: a start below the log start offset (retention or DeleteRecords
  removed records the query has not read), a partition that disappeared, a new
  partition whose log does not start at 0, an end below its start. With
  ``failOnDataLoss=false`` the range starts at the log start offset instead.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

import structlog

from .errors import OffsetResolutionError
from .offsets import (
    EarliestLimit,
    LatestLimit,
    TopicPartition,
    format_partition_offsets,
    limit_timestamp_for,
    offsets_from_json_dict,
)
from .options import SourceOptions
from .resolve import OffsetClient, OffsetRange, rate_limit, report_data_loss, resolve_limit, split_ranges

logger = structlog.get_logger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class StreamPlanner:
    def __init__(self, opts: SourceOptions, client: OffsetClient, clock_ms: Callable[[], int] = _now_ms) -> None:
        self.opts = opts
        self.client = client
        self.clock_ms = clock_ms
        self.last_trigger_ms = 0
        self.available_now_target: dict[TopicPartition, int] | None = None
        self.last_latest: dict[TopicPartition, int] | None = None
        self._initial: dict[TopicPartition, int] | None = None

    # --- offsets ---------------------------------------------------------------------

    def initial_offsets(self) -> dict[TopicPartition, int]:
        if self._initial is not None:
            return dict(self._initial)
        opts = self.opts
        tps = self.client.partitions(opts.subscription)
        if not tps:
            self._initial = {}
            return {}
        earliest = self.client.earliest_offsets(tps)
        latest = self.client.latest_offsets(tps)
        if isinstance(opts.starting, (EarliestLimit, LatestLimit)):
            option = "startingOffsets"
        else:
            option = {"GlobalTimestamp": "startingTimestamp",
                      "SpecificTimestamps": "startingOffsetsByTimestamp"}.get(type(opts.starting).__name__,
                                                                             "startingOffsets")
        start = resolve_limit(opts.starting, tps, self.client, earliest=earliest, latest=latest, is_start=True,
                              strategy=opts.starting_strategy, option=option)
        for tp in tps:
            if start[tp] > latest[tp]:
                raise OffsetResolutionError(option, (
                    f"{option} for {tp} is offset {start[tp]}, past the log end offset {latest[tp]}"))
            if start[tp] < earliest[tp]:
                report_data_loss(opts.fail_on_data_loss, (
                    f"{option} for {tp} is offset {start[tp]} but the log start offset is {earliest[tp]}"),
                    topic=tp.topic, partition=tp.partition, offset=start[tp], log_start_offset=earliest[tp])
                start[tp] = earliest[tp]
        self._initial = start
        logger.info("stream_initial_offsets_resolved", offsets=format_partition_offsets(start))
        return dict(start)

    def _fetch_latest(self, known: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Latest offsets of the partitions covered now; re-asked a few times if one went backwards."""
        attempts = 0
        while True:
            tps = self.client.partitions(self.opts.subscription)
            latest = self.client.latest_offsets(tps) if tps else {}
            backwards = {tp: (known[tp], off) for tp, off in latest.items() if tp in known and off < known[tp]}
            attempts += 1
            if not backwards or attempts >= self.opts.fetch_num_retries:
                if backwards:
                    logger.warning("latest_offset_went_backwards",
                                   partitions={str(tp): v for tp, v in backwards.items()})
                return latest
            time.sleep(self.opts.fetch_retry_interval_ms / 1000)

    def latest_offsets(self, start: Mapping[TopicPartition, int], *, all_available: bool = False,
                       max_rows: int | None = None, min_rows: int | None = None) -> dict[TopicPartition, int]:
        """End offsets for the next micro-batch; equal to ``start`` when there is nothing to do."""
        if self.available_now_target is not None:
            latest = dict(self.available_now_target)
        else:
            latest = self._fetch_latest(start)
        self.last_latest = dict(latest)
        if all_available:
            return latest

        new_tps = [tp for tp in latest if tp not in start]
        begin = dict(start)
        if new_tps:
            begin.update(self.client.earliest_offsets(new_tps))

        if min_rows is not None and self.available_now_target is None:
            now = self.clock_ms()
            if now - self.last_trigger_ms >= self.opts.max_trigger_delay_ms:
                self.last_trigger_ms = now
            else:
                waiting = sum(off - begin.get(tp, 0) for tp, off in latest.items())
                if waiting < min_rows:
                    logger.debug("micro_batch_deferred", waiting_records=waiting, min_records=min_rows)
                    return {tp: off for tp, off in start.items()}
                self.last_trigger_ms = now
        if max_rows is not None:
            return rate_limit(max_rows, begin, latest)
        return latest

    def prepare_available_now(self) -> None:
        # No starting options here: on a restart Spark resumes from its checkpoint, and
        # resolving e.g. a startingTimestamp again could fail for no reason.
        self.available_now_target = self._fetch_latest({})
        logger.info("available_now_target_frozen", offsets=format_partition_offsets(self.available_now_target))

    # --- micro-batch ranges -------------------------------------------------------------

    def plan(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
        opts = self.opts
        if dict(start) == dict(end):
            return []
        fail = opts.fail_on_data_loss
        new_tps = [tp for tp in end if tp not in start]
        new_begin = self.client.earliest_offsets(new_tps) if new_tps else {}
        for tp in new_tps:
            if tp not in new_begin:
                report_data_loss(fail, f"Cannot find earliest offsets of {tp}. Some data may have been missed",
                                 topic=tp.topic, partition=tp.partition)
            elif new_begin[tp] != 0:
                report_data_loss(fail, (
                    f"Added partition {tp} starts from {new_begin[tp]} instead of 0. Some data may have been missed"),
                    topic=tp.topic, partition=tp.partition, log_start_offset=new_begin[tp])
        gone = sorted(tp for tp in start if tp not in end)
        if gone:
            report_data_loss(fail, f"{[str(tp) for tp in gone]} are gone. Some data may have been missed")

        tps = [tp for tp in sorted(end) if tp in start or tp in new_begin]
        begin = {tp: start[tp] if tp in start else new_begin[tp] for tp in tps}
        old = [tp for tp in tps if tp in start]
        earliest = self.client.earliest_offsets(old) if old else {}
        ranges = []
        for tp in tps:
            s, e = begin[tp], end[tp]
            if e < s:
                report_data_loss(fail, (
                    f"Partition {tp}'s offset was changed from {s} to {e}, some data may have been missed"),
                    topic=tp.topic, partition=tp.partition)
                continue
            log_start = earliest.get(tp)
            if log_start is not None and s < log_start:
                report_data_loss(fail, (
                    f"Cannot fetch offset {s} of {tp}: the log start offset is now {log_start}"),
                    topic=tp.topic, partition=tp.partition, offset=s, log_start_offset=log_start)
                s = min(log_start, e)
            lo = limit_timestamp_for(opts.starting, tp) if opts.exact_time_window else None
            ranges.append(OffsetRange(tp, s, e, lo, None))
        return split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict:
    return format_partition_offsets(offsets)


def offsets_from_json(obj) -> dict[TopicPartition, int]:
    return offsets_from_json_dict(obj or {})
