"""The quota rate and throttle time against a brute-force model and Kafka's own numbers."""

from __future__ import annotations

import copy
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.quotas_rate import RateSensor, throttle_time_ms


class ModelRate:
    """Kafka's Rate over a WindowedSum written the long way: every sample ever started is kept
    in a plain list (no ring, no recycling); the live ones are the last ``samples + 1`` started."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.n, self.w = samples, window_ms
        self.all: list[dict] = []

    def live(self) -> list[dict]:
        return self.all[-(self.n + 1):]

    def record(self, value: float, now: int) -> None:
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

    def window(self, now: int) -> int:
        self.purge(now)
        if not self.all:
            self.all.append({"start": now, "last": now, "value": 0.0})
        elapsed = now - min(s["start"] for s in self.live())
        # at least samples - 1 whole windows
        elapsed = max(elapsed, (self.n - 1) * self.w + elapsed % self.w) if elapsed // self.w < self.n - 1 \
            else elapsed
        return max(elapsed, 1)

    def rate(self, now: int) -> float:
        self.purge(now)
        total = sum(s["value"] for s in self.live())
        return total / (self.window(now) / 1000.0)


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
        expected = 0 if rate <= bound else math.floor((rate - bound) / bound * window + 0.5)
        assert got == expected
        # The throttle is the time that brings the rate down to the bound when nothing more is
        # recorded (while no sample expires meanwhile).
        oldest = min(s["start"] for s in model.live())
        if expected and now + expected + 1 - max(s["last"] for s in model.live()) < samples * window_ms \
                and now - oldest >= max(1, (samples - 1) * window_ms):
            later = copy.deepcopy(model).rate(now + expected + 1)   # a look ahead, not a step
            assert later <= bound * (1 + 1e-6)


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


def test_a_new_client_is_measured_over_the_full_window():
    sensor = RateSensor(11, 1000)
    # 10 windows assumed before the first value: 5000 bytes at once is 500 B/s, exactly the bound.
    assert sensor.record_and_throttle_ms(5000, 0, 500) == 0
    assert sensor.record_and_throttle_ms(1, 0, 500) == 0 or sensor.rate(0) > 500


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
    assert sensor.max_value_in_window(500) == 500 * 10
