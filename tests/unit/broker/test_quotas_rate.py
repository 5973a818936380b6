"""The quota rate and throttle time against a brute-force model and Kafka's own numbers."""

from __future__ import annotations

import copy
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.quotas_rate import RateSensor, throttle_time_ms


class ModelRate:
    """The rate written the long way: every sample ever started is kept in a plain list (no ring,
    no recycling); the live ones are the last ``samples + 1`` started. ``kafka=True`` is Kafka's
    Rate; otherwise the span is also capped at the time since the first record plus one window."""

    def __init__(self, samples: int, window_ms: int, kafka: bool = False) -> None:
        self.n, self.w, self.kafka = samples, window_ms, kafka
        self.all: list[dict] = []
        self.first_ms: int | None = None

    def live(self) -> list[dict]:
        return self.all[-(self.n + 1):]

    def record(self, value: float, now: int) -> None:
        if self.first_ms is None:
            self.first_ms = now
        if not self.all:
            self.all.append({"start": now, "last": now, "value": 0.0})
        cur = self.all[-1]
        if now - cur["start"] >= self.w:
            cur = {"start": now, "last": now, "value": 0.0}
            self.all.append(cur)
        cur["value"] += value
        cur["last"] = now

    def purge(self, now: int) -> None:
        for s in self.live():
            if now - s["last"] >= self.n * self.w:
                s.update(start=now, last=now, value=0.0)

    def first(self, now: int) -> int:
        """When the first value was recorded (now, before any)."""
        return now if self.first_ms is None else self.first_ms

    def window(self, now: int) -> int:
        self.purge(now)
        first = self.first(now)
        if not self.all:
            self.all.append({"start": now, "last": now, "value": 0.0})
        elapsed = now - min(s["start"] for s in self.live())
        while elapsed // self.w < self.n - 1:        # pad, one whole window at a time
            elapsed += self.w
        if not self.kafka:
            elapsed = min(elapsed, now - first + self.w)
        return max(elapsed, 1)

    def total(self, now: int) -> float:
        self.purge(now)
        return sum(s["value"] for s in self.live())

    def rate(self, now: int) -> float:
        return self.total(now) / (self.window(now) / 1000.0)


def java_round(x: float) -> int:
    return math.floor(x + 0.5)


events = st.lists(st.tuples(st.integers(0, 2500), st.floats(-500, 5000, allow_nan=False)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(samples=st.integers(1, 12), window_ms=st.sampled_from([1, 7, 100, 1000]), evts=events,
       bound=st.floats(1, 4000, allow_nan=False))
def test_rate_and_throttle_equal_the_model(samples, window_ms, evts, bound):
    sensor, model = RateSensor(samples, window_ms), ModelRate(samples, window_ms)
    now = 10_000
    for delta, value in evts:
        now += delta
        got = sensor.record_and_throttle_ms(value, now, bound)
        model.record(value, now)
        rate, window = model.rate(now), model.window(now)
        assert math.isclose(sensor.rate(now), rate, rel_tol=1e-9, abs_tol=1e-9)
        assert sensor.window_size_ms(now) == window
        expected = 0 if rate <= bound else java_round((rate - bound) / bound * window)
        assert got == expected
        # The throttle is the time that brings the rate down to the bound when nothing more is
        # recorded: checked where the span grows with the clock until then (no sample expires;
        # the span is not Kafka's padded one, which drops back at each window's end, nor the
        # 1 ms floor; a capped span stays capped, with Kafka's padding still longer).
        live = model.live()
        later_ms = now + expected + 1
        unpadded = now - min(s["start"] for s in live) >= max(1, (samples - 1) * window_ms)
        capped = window == now - model.first(now) + window_ms \
            and later_ms - model.first(now) < (samples - 1) * window_ms
        if expected and later_ms - min(s["last"] for s in live) < samples * window_ms and (capped or unpadded):
            later = copy.deepcopy(model).rate(later_ms)   # a look ahead, not a step
            assert later <= bound * (1 + 1e-6)


@settings(max_examples=300, deadline=None)
@given(samples=st.integers(2, 12), window_ms=st.sampled_from([7, 100, 1000]), evts=events,
       bound=st.floats(1, 4000, allow_nan=False))
def test_only_a_new_clients_first_windows_differ_from_kafka(samples, window_ms, evts, bound):
    """Sundial's span is never longer than Kafka's, and equals it once the first record is
    ``samples - 2`` windows old: from then on rate and throttle are Kafka's."""
    sensor, kafka = RateSensor(samples, window_ms), ModelRate(samples, window_ms, kafka=True)
    now = 10_000
    first = None
    for delta, value in evts:
        now += delta
        first = now if first is None else first
        got = sensor.record_and_throttle_ms(value, now, bound)
        kafka.record(value, now)
        assert sensor.window_size_ms(now) <= kafka.window(now)
        if now - first >= (samples - 2) * window_ms:
            rate = kafka.rate(now)
            assert sensor.window_size_ms(now) == kafka.window(now)
            assert got == (0 if rate <= bound else java_round((rate - bound) / bound * kafka.window(now)))


@settings(max_examples=300, deadline=None)
@given(samples=st.integers(2, 12), window_ms=st.sampled_from([7, 100, 1000]),
       sends=st.lists(st.tuples(st.integers(0, 800), st.floats(1, 5000, allow_nan=False)), min_size=1, max_size=80),
       bound=st.floats(1, 4000, allow_nan=False))
def test_a_new_client_never_gets_more_than_the_quota_since_its_start_plus_one_window(samples, window_ms, sends,
                                                                                       bound):
    """A client that sends whenever its throttle has passed (after a further gap of its own):
    what it was let through before ``t`` ms is at most the quota times ``t`` plus one window
    (and half a millisecond of rounding), for as long as Kafka would still pad its span."""
    sensor = RateSensor(samples, window_ms)
    start = now = 10_000
    sent = 0.0
    for gap, value in sends:
        if now - start >= (samples - 1) * window_ms:
            break
        assert sent <= bound * (now - start + window_ms + 0.5) / 1000.0 * (1 + 1e-9)
        throttle = sensor.record_and_throttle_ms(value, now, bound)
        sent += value
        now += throttle + gap


def test_kafka_quota_violation_example():
    """Kafka's ClientQuotaManagerTest.testQuotaViolation: 400 B/s for 10 s under a 500 B/s quota, then
    2300 bytes half a second later: 6300 B over 10.5 s is 600 B/s, throttled 2100 ms."""
    sensor = RateSensor(11, 1000)
    now = 0
    for _ in range(10):
        assert sensor.record_and_throttle_ms(400, now, 500) == 0
        now += 1000
    now += 500
    assert sensor.record_and_throttle_ms(2300, now, 500) == 2100
    now += 2100
    for _ in range(10):
        sensor.record_and_throttle_ms(400, now, 500)
        now += 1000
    assert sensor.record_and_throttle_ms(0, now, 500) == 0   # the burst has rolled over


def test_a_new_client_may_send_one_window_at_once_not_ten():
    sensor, kafka = RateSensor(11, 1000), ModelRate(11, 1000, kafka=True)
    # One window's worth at once is exactly the bound (Kafka measures it over 10 windows: 50 B/s).
    assert sensor.record_and_throttle_ms(500, 0, 500) == 0
    # 5000 B more at once: 5500 B over the 1 s the client has existed in, throttled until 11 s
    # have passed. Kafka sees 5500 B over 10 s, 550 B/s, and throttles it for 1 s.
    assert sensor.record_and_throttle_ms(5000, 0, 500) == 10_000
    kafka.record(5500, 0)
    assert kafka.rate(0) == 550.0
    assert throttle_time_ms(kafka.rate(0), 500, kafka.window(0)) == 1000
    # Once the first record is 9 windows old both spans are 10 s + the current window's part,
    # and from 10 windows on Kafka's span has no padding left: the same rate as Kafka's.
    for now in (9_000, 9_999, 10_000, 10_001, 15_000):
        assert sensor.window_size_ms(now) == kafka.window(now)
        assert sensor.rate(now) == kafka.rate(now)
    assert sensor.window_size_ms(8_999) == 9_999 < kafka.window(8_999) == 10_999


def test_request_throttle_is_capped_and_rounding_is_javas():
    sensor = RateSensor(2, 1000)
    assert sensor.record_and_throttle_ms(10_000, 0, 1, max_throttle_ms=1000) == 1000
    assert throttle_time_ms(1.5, 1.0, 1) == 1          # Math.round(0.5) == 1 (Python's round gives 0)
    assert throttle_time_ms(2.5, 1.0, 1) == 2          # Math.round(1.5) == 2
    assert throttle_time_ms(1.25, 1.0, 10) == 3        # Math.round(2.5) == 3 (Python's round gives 2)


def test_unrecord_takes_a_value_back():
    sensor = RateSensor(11, 1000)
    sensor.record(700, 5)
    sensor.record(-700, 5)
    assert sensor.rate(5) == 0.0


def test_largest_single_value_is_one_window_while_new_then_kafkas():
    sensor = RateSensor(11, 1000)
    assert sensor.max_value_in_window(500, 0) == 500          # no record yet: new
    sensor.record(10, 0)
    assert sensor.max_value_in_window(500, 9_999) == 500
    assert sensor.max_value_in_window(500, 10_000) == 500 * 10  # Kafka's maxValueInQuotaWindow
    assert RateSensor(1, 1000).max_value_in_window(500, 0) == 0  # Kafka's, for a single sample
