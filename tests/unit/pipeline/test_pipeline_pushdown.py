"""Filter pushdown: Spark's Filter objects -> offset ranges, checked against brute force over fake logs.

The oracle evaluates every filter on every record the plain plan reads, the way Spark
would (the ``timestamp`` column is ``ts_ms * 1000`` µs); the pushed plan must read exactly
the records that pass. pyspark's Filter classes are plain dataclasses (no JVM).
"""

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.pipeline_fakes import FakeLog, FakeOffsetClient
from support.unit_helpers import selected

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'sundial-broker[spark]')")

from pyspark.sql.datasource import (  # noqa: E402
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from sundial.pipeline.errors import OptionError  # noqa: E402
from sundial.pipeline.offsets import TopicPartition  # noqa: E402
from sundial.pipeline.options import parse_options  # noqa: E402
from sundial.pipeline.pushdown import Pushed, translate  # noqa: E402
from sundial.pipeline.resolve import plan_batch  # noqa: E402

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
TS, PART, OFF, TOPIC = ("timestamp",), ("partition",), ("offset",), ("topic",)


def at_us(us: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=us)


def o(**kw):
    return parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t,u", **kw}, streaming=False)


# --- the brute-force evaluation of a filter on one record --------------------------------------

def column_value(column, tp, offset, ts_ms):
    return {"timestamp": at_us(ts_ms * 1000), "partition": tp.partition, "offset": offset, "topic": tp.topic,
            "timestampType": 0, "key": None}[column]


def holds(f, tp, offset, ts_ms) -> bool:
    if isinstance(f, Not):
        return not holds(f.child, tp, offset, ts_ms)
    v = column_value(f.attribute[0], tp, offset, ts_ms)
    if isinstance(f, IsNotNull):
        return v is not None
    if isinstance(f, IsNull):
        return v is None
    if v is None:
        return False
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return v == f.value
    if isinstance(f, GreaterThan):
        return v > f.value
    if isinstance(f, GreaterThanOrEqual):
        return v >= f.value
    if isinstance(f, LessThan):
        return v < f.value
    if isinstance(f, LessThanOrEqual):
        return v <= f.value
    if isinstance(f, In):
        return v in f.value
    raise AssertionError(f)


def brute_force(plain_ranges, logs, filters):
    return {(tp, off) for tp, off in selected(plain_ranges, logs)
            if all(holds(f, tp, off, logs[tp].timestamps[off]) for f in filters)}


# --- translate --------------------------------------------------------------------------------

def test_timestamp_bounds_become_a_half_open_ms_window():
    pushed, rest = translate([GreaterThanOrEqual(TS, at_us(1_000_500)), LessThanOrEqual(TS, at_us(2_000_999))])
    assert rest == []
    # ts_ms * 1000 >= 1_000_500 <=> ts_ms >= 1001; ts_ms * 1000 <= 2_000_999 <=> ts_ms <= 2000
    assert (pushed.min_timestamp_ms, pushed.max_timestamp_ms) == (1001, 2001)
    pushed, _ = translate([GreaterThan(TS, at_us(1_000_000)), LessThan(TS, at_us(2_000_000))])
    assert (pushed.min_timestamp_ms, pushed.max_timestamp_ms) == (1001, 2000)
    pushed, _ = translate([EqualTo(TS, at_us(5_000_000))])
    assert (pushed.min_timestamp_ms, pushed.max_timestamp_ms) == (5000, 5001)
    pushed, _ = translate([EqualTo(TS, at_us(5_000_001))])          # between two milliseconds: nothing
    assert pushed.empty


def test_what_stays_with_spark_is_returned_by_reference_in_order():
    keep = [Not(EqualTo(PART, 1)), In(TS, (at_us(1000),)), EqualTo(("key",), b"k"), IsNotNull(("key",)),
            IsNull(TS), StringStartsWith(TOPIC, "t"), EqualTo(TS, dt.datetime(2026, 1, 1)),   # naive: not taken
            EqualTo(PART, 1.5), EqualTo(OFF, True), EqualNullSafe(PART, None), GreaterThan(("a", "b"), 1)]
    taken = [IsNotNull(TS), IsNotNull(PART), EqualTo(PART, 2), In(TOPIC, ("t", None)), GreaterThanOrEqual(OFF, 3)]
    mixed = [keep[0], taken[0], keep[1], taken[1], keep[2], taken[2], keep[3], taken[3], keep[4], taken[4]] + keep[5:]
    pushed, rest = translate(mixed)
    assert len(rest) == len(keep) and all(a is b for a, b in zip(rest, keep))
    assert pushed.partitions == frozenset({2}) and pushed.topics == frozenset({"t"}) and pushed.min_offset == 3
    assert translate([In(PART, [0, 2])])[0].partitions == frozenset({0, 2})      # a list, as Spark sends it
    assert len(pushed.filters) == len(taken)


def test_contradictions_are_empty():
    assert translate([EqualTo(PART, 1), EqualTo(PART, 2)])[0].empty
    assert translate([In(PART, (1, 2)), GreaterThan(PART, 2)])[0].empty
    assert translate([GreaterThanOrEqual(OFF, 5), LessThan(OFF, 5)])[0].empty
    assert translate([EqualTo(TOPIC, "t"), EqualTo(TOPIC, "u")])[0].empty
    assert not translate([GreaterThanOrEqual(OFF, 5), LessThan(OFF, 6)])[0].empty
    assert not Pushed().empty


# --- planning ---------------------------------------------------------------------------------

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
LOGS = {
    T0: FakeLog([100, 300, 200, 400, 150, 500, 250, 600]),
    T1: FakeLog([50, 60, 700, 10, 800]),
    U0: FakeLog([1000, 1001, 1002]),
}


def test_lower_timestamp_bound_starts_at_offsets_for_times():
    client = FakeOffsetClient(LOGS)
    pushed, _ = translate([GreaterThanOrEqual(TS, at_us(250_000)), In(PART, (0, 1)), EqualTo(TOPIC, "t")])
    ranges = plan_batch(o(), client, pushed)
    # T0: first ts >= 250 is offset 1; T1: offset 2; topic u is not planned at all
    assert [(r.tp, r.start, r.end, r.min_timestamp_ms, r.max_timestamp_ms) for r in ranges] == [
        (T0, 1, 8, 250, None), (T1, 2, 5, 250, None)]
    assert selected(ranges, LOGS) == {(T0, 1), (T0, 3), (T0, 5), (T0, 6), (T0, 7), (T1, 2), (T1, 4)}


def test_no_record_at_or_after_the_lower_bound_reads_nothing():
    pushed, _ = translate([GreaterThan(TS, at_us(999_000))])
    ranges = plan_batch(o(), FakeOffsetClient(LOGS), pushed)
    assert [(r.tp, r.start, r.end) for r in ranges] == [(U0, 0, 3)]


def test_offset_filters_cut_the_range_and_errors_stay_those_of_the_options():
    pushed, _ = translate([GreaterThan(OFF, 1), LessThanOrEqual(OFF, 3), EqualTo(TOPIC, "t")])
    ranges = plan_batch(o(), FakeOffsetClient(LOGS), pushed)
    assert [(r.tp, r.start, r.end) for r in ranges] == [(T0, 2, 4), (T1, 2, 4)]
    # an offset filter past the log end is an empty result, not the options' error
    pushed, _ = translate([GreaterThanOrEqual(OFF, 100)])
    assert plan_batch(o(), FakeOffsetClient(LOGS), pushed) == []


def test_pushdown_is_batch_only():
    with pytest.raises(OptionError, match="batch reads only"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "sundial.filterPushdown": "true"},
                      streaming=True)
    assert o(**{"sundial.filterPushdown": "true"}).filter_pushdown
    assert not o().filter_pushdown


# --- the property: pushed plan == plain plan + Spark's evaluation ---------------------------------

_us = st.integers(-2_000, 1_200_000)
_filter = st.one_of(
    st.builds(lambda c, us: c(TS, at_us(us)),
              st.sampled_from([GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo, EqualNullSafe]),
              st.one_of(_us, _us.map(lambda u: u - u % 1000))),
    st.builds(lambda c, n: c(PART, n),
              st.sampled_from([GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo]),
              st.integers(-1, 3)),
    # Spark's planning worker hands IN values over as a list (decoded from JSON), the API documents a tuple
    st.builds(lambda ns, as_list: In(PART, ns if as_list else tuple(ns)), st.lists(st.integers(0, 2), max_size=3),
              st.booleans()),
    st.builds(lambda c, n: c(OFF, n),
              st.sampled_from([GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo]),
              st.integers(-1, 12)),
    st.builds(lambda t: EqualTo(TOPIC, t), st.sampled_from(["t", "u", "v"])),
    st.builds(lambda ts: In(TOPIC, ts), st.lists(st.sampled_from(["t", "u"]), max_size=2)),
    st.sampled_from([IsNotNull(TS), IsNotNull(OFF), IsNotNull(TOPIC)]),
    st.builds(lambda n: Not(EqualTo(PART, n)), st.integers(0, 2)),                  # stays with Spark
    st.builds(lambda us: In(TS, (at_us(us),)), _us),                                  # stays with Spark
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs=st.lists(st.lists(st.integers(0, 1200), max_size=12), min_size=3, max_size=3),
    filters=st.lists(_filter, max_size=5),
    window=st.one_of(st.none(), st.tuples(st.integers(0, 1200), st.integers(0, 600), st.booleans())),
    max_records=st.one_of(st.none(), st.integers(1, 5)),
)
def test_property_pushed_plan_reads_what_spark_would_keep(logs, filters, window, max_records):
    fake = {T0: FakeLog(logs[0]), T1: FakeLog(logs[1]), U0: FakeLog(logs[2])}
    kw = {"startingOffsetsByTimestampStrategy": "latest"}
    if window is not None:
        a, width, exact = window
        kw.update(startingTimestamp=str(a), endingTimestamp=str(a + width))
        if exact:
            kw["sundial.exactTimeWindow"] = "true"
    if max_records:
        kw["maxRecordsPerPartition"] = str(max_records)
    plain = plan_batch(o(**kw), FakeOffsetClient(fake))
    pushed, rest = translate(filters)
    ranges = plan_batch(o(**kw), FakeOffsetClient(fake), pushed)
    got = [(r.tp, off) for r in ranges for off in range(r.start, r.end)]
    assert len(got) == len(set(got)), "split ranges overlap"
    kept = {(tp, off) for tp, off in selected(ranges, fake)
            if all(holds(f, tp, off, fake[tp].timestamps[off]) for f in rest)}
    assert kept == brute_force(plain, fake, filters)
    if max_records:
        assert all(r.size <= max_records for r in ranges)
