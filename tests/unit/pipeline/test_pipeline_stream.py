"""Micro-batch planning: initial offsets, admission control, AvailableNow, data loss (fake client)."""

import json

import pytest
from support.pipeline_fakes import FakeLog, FakeOffsetClient

from sundial.pipeline.errors import DataLossError, OffsetResolutionError
from sundial.pipeline.offsets import TopicPartition
from sundial.pipeline.options import parse_options
from sundial.pipeline.stream import StreamPlanner, offsets_from_json, offsets_to_json

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def planner(logs, clock=None, **kw):
    opts = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **kw}, streaming=True)
    return StreamPlanner(opts, FakeOffsetClient(logs), **({"clock_ms": clock} if clock else {}))


def logs_of(*sizes, start=0):
    return {TopicPartition("t", i): FakeLog(list(range(start, start + n)), 0) for i, n in enumerate(sizes)}


def drain(p, start, **limits):
    """Run micro-batches until the end offset stops moving; returns the batch sizes and the final offsets."""
    sizes, reads = [], []
    for _ in range(1000):
        end = p.latest_offsets(start, **limits)
        if end == start:
            return sizes, start, reads
        ranges = p.plan(start, end)
        sizes.append(sum(r.size for r in ranges))
        reads.extend((r.tp, off) for r in ranges for off in range(r.start, r.end))
        start = end
    raise AssertionError("did not converge")


def test_checkpoint_shape_is_sparks():
    offsets = {TopicPartition("b", 10): 5, TopicPartition("b", 2): 7, TopicPartition("a", 0): 1}
    text = json.dumps(offsets_to_json(offsets))
    assert text == '{"a": {"0": 1}, "b": {"2": 7, "10": 5}}'
    assert offsets_from_json(json.loads(text)) == offsets


def test_initial_offsets_default_latest_and_by_timestamp():
    logs = {T0: FakeLog([10, 30, 20, 40]), T1: FakeLog([5, 50])}
    assert planner(logs).initial_offsets() == {T0: 4, T1: 2}
    assert planner(logs, startingOffsets="earliest").initial_offsets() == {T0: 0, T1: 0}
    assert planner(logs, startingTimestamp="25").initial_offsets() == {T0: 1, T1: 1}
    with pytest.raises(OffsetResolutionError):
        planner(logs, startingTimestamp="45").initial_offsets()
    assert planner(logs, startingTimestamp="45", startingOffsetsByTimestampStrategy="latest").initial_offsets() == \
        {T0: 4, T1: 1}
    with pytest.raises(OffsetResolutionError) as info:
        planner(logs, startingOffsets='{"t":{"0":1}}').initial_offsets()
    assert "you must specify all TopicPartitions" in str(info.value)


def test_max_offsets_per_trigger_batches_and_exactly_once():
    logs = logs_of(1000, 1000, 1000)
    p = planner(logs, startingOffsets="earliest", maxOffsetsPerTrigger="700")
    start = p.initial_offsets()
    sizes, final, reads = drain(p, start, max_rows=700)
    assert sizes == [699, 699, 699, 699, 204]           # floor(700/3) per partition, then the rest
    assert final == {T0: 1000, T1: 1000, T2: 1000}
    assert sorted(reads) == sorted((tp, off) for tp in logs for off in range(1000))


def test_all_available_ignores_limits():
    p = planner(logs_of(10, 10), startingOffsets="earliest", maxOffsetsPerTrigger="3")
    assert p.latest_offsets(p.initial_offsets(), all_available=True) == {T0: 10, T1: 10}


def test_available_now_freezes_the_target():
    logs = logs_of(50, 50)
    p = planner(logs, startingOffsets="earliest")
    start = p.initial_offsets()
    p.prepare_available_now()
    logs[T0].timestamps.extend(range(100))             # produced after the target was frozen
    sizes, final, _ = drain(p, start, max_rows=30)
    assert sum(sizes) == 100 and final == {T0: 50, T1: 50}


def test_min_offsets_waits_for_records_or_the_delay():
    now = [1_000_000]
    logs = logs_of(0)
    p = planner(logs, lambda: now[0], startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="5s")
    start = p.initial_offsets()
    # first trigger: the delay since "never" has passed, so a batch runs even with 0 waiting
    assert p.latest_offsets(start, min_rows=10) == {T0: 0}
    logs[T0].timestamps.extend(range(4))
    now[0] += 1000
    assert p.latest_offsets(start, min_rows=10) == start            # 4 < 10, delay not over: deferred
    now[0] += 4000
    assert p.latest_offsets(start, min_rows=10) == {T0: 4}          # 5 s passed: runs anyway
    logs[T0].timestamps.extend(range(20))
    now[0] += 100
    assert p.latest_offsets({T0: 4}, min_rows=10) == {T0: 24}       # 20 >= 10: runs at once


def test_min_offsets_ignored_under_available_now():
    p = planner(logs_of(3), lambda: 10**12, startingOffsets="earliest", minOffsetsPerTrigger="10")
    start = p.initial_offsets()
    p.latest_offsets(start, min_rows=10)                 # consumes the initial delay window
    p.prepare_available_now()
    assert p.latest_offsets(start, min_rows=10) == {T0: 3}


def test_new_partition_starts_at_earliest():
    logs = logs_of(5)
    p = planner(logs, startingOffsets="earliest")
    start = {T0: 5}
    logs[T1] = FakeLog(list(range(8)))
    end = p.latest_offsets(start)
    assert end == {T0: 5, T1: 8}
    ranges = p.plan(start, end)
    assert [(r.tp, r.start, r.end) for r in ranges] == [(T1, 0, 8)]
    assert p.latest_offsets(start, max_rows=4) == {T0: 5, T1: 4}


def test_retention_mid_stream_fail_or_skip():
    logs = logs_of(100)
    start, end = {T0: 10}, {T0: 100}
    logs[T0].log_start = 40                              # retention removed offsets 0..39
    with pytest.raises(DataLossError) as info:
        planner(logs).plan(start, end)
    assert "Cannot fetch offset 10 of t-0: the log start offset is now 40" in str(info.value)
    assert 'failOnDataLoss' in str(info.value)
    ranges = planner(logs, failOnDataLoss="false").plan(start, end)
    assert [(r.start, r.end) for r in ranges] == [(40, 100)]
    logs[T0].log_start = 100                             # everything gone
    ranges = planner(logs, failOnDataLoss="false").plan(start, end)
    assert ranges == []


def test_deleted_partition_and_offset_going_backwards():
    logs = logs_of(10, 10)
    with pytest.raises(DataLossError) as info:
        planner(logs).plan({T0: 5, T1: 5, T2: 3}, {T0: 10, T1: 10})
    assert "are gone" in str(info.value)
    with pytest.raises(DataLossError) as info:
        planner(logs).plan({T0: 8, T1: 5}, {T0: 6, T1: 10})
    assert "offset was changed from 8 to 6" in str(info.value)
    ranges = planner(logs, failOnDataLoss="false").plan({T0: 8, T1: 5}, {T0: 6, T1: 10})
    assert [(r.tp, r.start, r.end) for r in ranges] == [(T1, 5, 10)]


def test_new_partition_not_starting_at_zero_is_data_loss():
    logs = logs_of(5)
    logs[T1] = FakeLog(list(range(8)), log_start=3)
    with pytest.raises(DataLossError) as info:
        planner(logs).plan({T0: 5}, {T0: 5, T1: 8})
    assert "Added partition t-1 starts from 3 instead of 0" in str(info.value)


def test_exact_window_lower_bound_in_streaming():
    logs = {T0: FakeLog([10, 30, 20, 40])}
    p = planner(logs, startingTimestamp="25", **{"sundial.exactTimeWindow": "true"})
    start = p.initial_offsets()
    ranges = p.plan(start, p.latest_offsets(start))
    assert [(r.start, r.end, r.min_timestamp_ms, r.max_timestamp_ms) for r in ranges] == [(1, 4, 25, None)]


def test_equal_offsets_plan_nothing():
    p = planner(logs_of(5))
    assert p.plan({T0: 5}, {T0: 5}) == []
