"""Batch planning against a fake offset client; every expectation is brute force over the fake log."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.pipeline_fakes import FakeLog, FakeOffsetClient
from support.unit_helpers import selected

from sundial.pipeline.errors import DataLossError, OffsetResolutionError
from sundial.pipeline.offsets import TopicPartition
from sundial.pipeline.options import parse_options
from sundial.pipeline.resolve import OffsetRange, plan_batch, rate_limit, split_ranges

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def opts(**extra):
    raw = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", **{k.replace("_", "."): v for k, v in extra.items()}}
    return parse_options(raw, streaming=False)


def o(**kw):
    """Options with exact spelling (keys with dots passed as-is)."""
    return parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **kw}, streaming=False)


# out-of-order CreateTime timestamps across three partitions
LOGS = {
    T0: FakeLog([100, 300, 200, 400, 150, 500, 250, 600]),
    T1: FakeLog([50, 60, 700, 10, 800]),
    T2: FakeLog([]),
}


def by_tp(ranges):
    out = {}
    for r in ranges:
        out.setdefault(r.tp, []).append(r)
    return out


def test_full_read_earliest_to_latest():
    ranges = plan_batch(o(), FakeOffsetClient(LOGS))
    assert [(r.tp, r.start, r.end) for r in ranges] == [(T0, 0, 8), (T1, 0, 5)]   # empty T2 dropped


def test_time_window_is_offset_range_first_ts_at_or_after():
    # the empty partition has no offset for 250: with the default strategy that is an error
    with pytest.raises(OffsetResolutionError):
        plan_batch(o(startingTimestamp="250", endingTimestamp="650"), FakeOffsetClient(LOGS))
    ranges = by_tp(plan_batch(o(startingTimestamp="250", endingTimestamp="650",
                                startingOffsetsByTimestampStrategy="latest"), FakeOffsetClient(LOGS)))
    # T0: first ts >= 250 is offset 1 (300); first ts >= 650: none -> latest 8
    assert [(r.start, r.end) for r in ranges[T0]] == [(1, 8)]
    # T1: first >= 250 is offset 2 (700); first >= 650 is offset 2 -> empty, dropped
    assert T1 not in ranges


def test_exact_window_keeps_exactly_the_brute_force_set():
    client = FakeOffsetClient(LOGS)
    ranges = plan_batch(o(startingTimestamp="150", endingTimestamp="500", startingOffsetsByTimestampStrategy="latest",
                          **{"sundial.exactTimeWindow": "true"}), client)
    truth = {(tp, off) for tp, log in LOGS.items() for off, ts in enumerate(log.timestamps) if 150 <= ts < 500}
    assert selected(ranges, LOGS) == truth
    # the plain offset range [off(150), off(500)) misses T0 offset 6 (ts 250 after ts 500)
    plain = plan_batch(o(startingTimestamp="150", endingTimestamp="500", startingOffsetsByTimestampStrategy="latest"),
                       FakeOffsetClient(LOGS))
    assert truth - selected(plain, LOGS) == {(T0, 6)}


def test_exact_window_max_disorder_bounds_the_scan():
    logs = {T0: FakeLog([10, 20, 30, 25, 40, 50, 60, 70])}
    ranges = plan_batch(o(startingTimestamp="20", endingTimestamp="30",
                          **{"sundial.exactTimeWindow": "true", "sundial.exactTimeWindow.maxDisorderMs": "15"}),
                        FakeOffsetClient(logs))
    # scan stops at offset(30 + 15) = offset 5 (ts 50), not at the log end 8
    assert [(r.start, r.end, r.min_timestamp_ms, r.max_timestamp_ms) for r in ranges] == [(1, 5, 20, 30)]
    assert selected(ranges, logs) == {(T0, 1), (T0, 3)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs=st.lists(st.lists(st.integers(0, 1000), max_size=40), min_size=3, max_size=3),
    a=st.integers(0, 1100), width=st.integers(0, 600),
    max_records=st.one_of(st.none(), st.integers(1, 15)), min_parts=st.one_of(st.none(), st.integers(1, 12)),
)
def test_property_windows_match_brute_force(logs, a, width, max_records, min_parts):
    b = a + width
    fake = {TopicPartition("t", i): FakeLog(ts) for i, ts in enumerate(logs)}
    extra = {"startingOffsetsByTimestampStrategy": "latest"}
    if max_records:
        extra["maxRecordsPerPartition"] = str(max_records)
    if min_parts:
        extra["minPartitions"] = str(min_parts)
    plain = plan_batch(o(startingTimestamp=str(a), endingTimestamp=str(b), **extra), FakeOffsetClient(fake))
    # plain: per partition exactly [first ts>=a, first ts>=b) (latest when none)
    expect = set()
    for tp, log in fake.items():
        start = log.first_at_or_after(a)
        start = log.log_end if start is None else start
        end = log.first_at_or_after(b)
        end = log.log_end if end is None else end
        expect |= {(tp, off) for off in range(start, end)}
    got = [(r.tp, off) for r in plain for off in range(r.start, r.end)]
    assert len(got) == len(set(got)), "split ranges overlap"
    assert set(got) == expect
    if max_records:
        assert all(r.size <= max_records for r in plain)
    exact = plan_batch(o(startingTimestamp=str(a), endingTimestamp=str(b), **extra,
                         **{"sundial.exactTimeWindow": "true"}), FakeOffsetClient(fake))
    truth = {(tp, off) for tp, log in fake.items() for off, ts in enumerate(log.timestamps) if a <= ts < b}
    assert selected(exact, fake) == truth


def test_strategy_error_vs_latest():
    with pytest.raises(OffsetResolutionError) as info:
        plan_batch(o(startingTimestamp="750"), FakeOffsetClient(LOGS))
    assert info.value.option == "startingTimestamp"
    assert "No offset matched from request of topic-partition t-0 and timestamp 750" in str(info.value)
    assert "startingOffsetsByTimestampStrategy" in str(info.value)
    ranges = by_tp(plan_batch(o(startingTimestamp="750", startingOffsetsByTimestampStrategy="latest"),
                              FakeOffsetClient(LOGS)))
    assert T0 not in ranges                           # starts at latest: nothing
    assert [(r.start, r.end) for r in ranges[T1]] == [(4, 5)]


def test_ending_timestamp_past_the_end_is_latest():
    ranges = plan_batch(o(endingTimestamp="99999"), FakeOffsetClient(LOGS))
    assert [(r.tp, r.start, r.end) for r in ranges] == [(T0, 0, 8), (T1, 0, 5)]


@pytest.mark.parametrize("key, value", [
    ("startingOffsets", '{"t":{"0":1,"1":0}}'),
    ("startingOffsetsByTimestamp", '{"t":{"0":1,"1":0}}'),
    ("endingOffsets", '{"t":{"0":1}}'),
    ("endingOffsetsByTimestamp", '{"t":{"0":1,"1":2,"2":3,"3":4}}'),
])
def test_incomplete_or_wrong_partition_map_is_refused(key, value):
    with pytest.raises(OffsetResolutionError) as info:
        plan_batch(o(**{key: value}), FakeOffsetClient(LOGS))
    assert info.value.option == key
    assert "you must specify all TopicPartitions" in str(info.value)
    assert "Assigned: ['t-0', 't-1', 't-2']" in str(info.value)


def test_specific_offsets_with_sentinels():
    ranges = by_tp(plan_batch(o(startingOffsets='{"t":{"0":2,"1":-2,"2":-2}}',
                                endingOffsets='{"t":{"0":-1,"1":3,"2":-1}}'), FakeOffsetClient(LOGS)))
    assert [(r.start, r.end) for r in ranges[T0]] == [(2, 8)]
    assert [(r.start, r.end) for r in ranges[T1]] == [(0, 3)]


def test_start_below_log_start_is_data_loss():
    logs = {T0: FakeLog([1, 2, 3, 4, 5], log_start=3)}
    with pytest.raises(DataLossError) as info:
        plan_batch(o(startingOffsets='{"t":{"0":1}}'), FakeOffsetClient(logs))
    assert "log start offset is 3" in str(info.value) and "failOnDataLoss" in str(info.value)
    ranges = plan_batch(o(startingOffsets='{"t":{"0":1}}', failOnDataLoss="false"), FakeOffsetClient(logs))
    assert [(r.start, r.end) for r in ranges] == [(3, 5)]


def test_offsets_past_the_log_end_are_refused():
    with pytest.raises(OffsetResolutionError) as info:
        plan_batch(o(endingOffsets='{"t":{"0":99,"1":-1,"2":-1}}'), FakeOffsetClient(LOGS))
    assert info.value.option == "endingOffsets" and "past the log end offset 8" in str(info.value)
    with pytest.raises(OffsetResolutionError) as info:
        plan_batch(o(startingOffsets='{"t":{"0":5,"1":0,"2":0}}', endingTimestamp="150"), FakeOffsetClient(LOGS))
    assert info.value.option == "startingOffsets" and "after endingTimestamp" in str(info.value)


def test_assign_reads_only_assigned_partitions():
    opts_ = parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t":[1]}'}, streaming=False)
    assert [(r.tp, r.start, r.end) for r in plan_batch(opts_, FakeOffsetClient(LOGS))] == [(T1, 0, 5)]


# --- splitting -------------------------------------------------------------------------------

def rng(p, start, end):
    return OffsetRange(TopicPartition("t", p), start, end)


def test_split_by_max_records():
    out = split_ranges([rng(0, 0, 10), rng(1, 5, 6), rng(2, 3, 3)], max_records_per_partition=4)
    assert [(r.tp.partition, r.start, r.end) for r in out] == [(0, 0, 3), (0, 3, 6), (0, 6, 10), (1, 5, 6)]


def test_split_by_min_partitions_keeps_small_ranges_whole():
    # the connector's own example: sizes 10 and 500, minPartitions 4 -> 1 + 3 parts
    out = split_ranges([rng(0, 0, 10), rng(1, 0, 500)], min_partitions=4)
    assert [(r.tp.partition, r.start, r.end) for r in out] == [(0, 0, 10), (1, 0, 166), (1, 166, 333), (1, 333, 500)]


def test_split_min_partitions_after_max_records():
    out = split_ranges([rng(0, 0, 100)], min_partitions=8, max_records_per_partition=50)
    assert len(out) == 8 and sum(r.size for r in out) == 100


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 500), max_size=6), min_parts=st.one_of(st.none(), st.integers(1, 20)),
       max_records=st.one_of(st.none(), st.integers(1, 200)))
def test_property_split_covers_exactly(sizes, min_parts, max_records):
    ranges = [rng(i, 1000, 1000 + s) for i, s in enumerate(sizes)]
    out = split_ranges(ranges, min_parts, max_records)
    for r in ranges:
        pieces = sorted((x.start, x.end) for x in out if x.tp == r.tp)
        if r.size == 0:
            assert pieces == []
            continue
        assert pieces[0][0] == r.start and pieces[-1][1] == r.end
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert all(e > s for s, e in pieces)
    if max_records:
        assert all(x.size <= max_records for x in out)


# --- admission control ---------------------------------------------------------------------------

def test_rate_limit_proportional_and_never_starves():
    start = {T0: 0, T1: 0, T2: 0}
    until = {T0: 900, T1: 90, T2: 10}
    out = rate_limit(100, start, until)
    assert out == {T0: 90, T1: 9, T2: 1}
    assert rate_limit(10_000, start, until) == until
    # partitions with nothing new keep their end
    assert rate_limit(5, {T0: 7, T1: 3}, {T0: 7, T1: 10}) == {T0: 7, T1: 8}


@settings(max_examples=200, deadline=None)
@given(backlogs=st.lists(st.integers(0, 10_000), min_size=1, max_size=6), limit=st.integers(1, 5000))
def test_property_rate_limit_bounds(backlogs, limit):
    start = {TopicPartition("t", i): 10 for i in range(len(backlogs))}
    until = {TopicPartition("t", i): 10 + b for i, b in enumerate(backlogs)}
    out = rate_limit(limit, start, until)
    taken = sum(out[tp] - start[tp] for tp in start)
    small = sum(1 for b in backlogs if b > 0)
    assert all(start[tp] <= out[tp] <= until[tp] for tp in start)
    assert taken <= limit + small                      # ceil for starving partitions only
    if sum(backlogs) <= limit:
        assert out == until
    else:
        assert taken >= min(sum(backlogs), limit) - len(backlogs)
