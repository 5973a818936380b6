"""A client's rate over sampled windows and the throttle time of a quota, as Kafka computes them.

Pure arithmetic on integer milliseconds: no clock, no asyncio. :class:`RateSensor` is Kafka's
``Rate`` over a ``WindowedSum`` (``SampledStat``) with ``quota.window.num`` samples of
``quota.window.size.seconds``; :meth:`RateSensor.record_and_throttle_ms` is ``Sensor.record`` with
its quota check followed by ``QuotaUtils.throttleTime``:

* **Samples.** A value is added to the current sample; a sample is complete once
  ``window_ms`` has passed since it started, and the next value then starts a new one. At
  most ``samples + 1`` are kept, the oldest recycled. Before a measurement, every sample whose
  last value is ``samples * window_ms`` old or more is reset (it starts again at now, empty).
* **Rate.** The sum of the samples divided by the time they span: from the start of the oldest
  sample to now, counted as at least ``samples - 1`` whole windows (a client that has just begun
  is measured as if the earlier windows held nothing), and at least 1 ms.
* **Throttle.** After recording, a rate above the bound is a violation; the throttle is the
  time that brings the rate back to the bound if nothing more were recorded:
  ``round((rate - bound) / bound * window_size_ms)``. A request-percentage throttle is capped
  at one window (Kafka's ``ClientRequestQuotaManager``); byte-rate throttles are not capped.

Negative values are recorded too: a throttled Fetch "unrecords" the bytes it will not send.
"""

from __future__ import annotations

import math


class _Sample:
    __slots__ = ("value", "start_ms", "last_event_ms")

    def __init__(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class RateSensor:
    """One client's rate of one quantity (bytes, or request-handler percent-seconds)."""

    __slots__ = ("samples", "window_ms", "_samples", "_current", "last_record_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a rate needs at least one sample of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The span the rate divides by (Kafka ``Rate.windowSize``)."""
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = min(s.start_ms for s in self._samples)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def rate(self, now_ms: int) -> float:
        """Units per second at ``now_ms``."""
        value = self.total(now_ms)
        return value / (self.window_size_ms(now_ms) / 1000.0)

    def record_and_throttle_ms(self, value: float, now_ms: int, bound: float, max_throttle_ms: int | None = None) -> int:
        """Record ``value``; the throttle in ms when the rate now exceeds ``bound``, else 0."""
        self.record(value, now_ms)
        return self.throttle_ms(now_ms, bound, max_throttle_ms)

    def throttle_ms(self, now_ms: int, bound: float, max_throttle_ms: int | None = None) -> int:
        rate = self.rate(now_ms)
        if rate <= bound:
            return 0
        throttle = throttle_time_ms(rate, bound, self.window_size_ms(now_ms))
        return throttle if max_throttle_ms is None else min(throttle, max_throttle_ms)

    def max_value_in_window(self, bound: float) -> float:
        """The most one request may add without being throttled for sure (Kafka
        ``maxValueInQuotaWindow``): the bound times ``samples - 1`` windows."""
        return bound * (self.samples - 1) * self.window_ms / 1000.0


def throttle_time_ms(rate: float, bound: float, window_size_ms: int) -> int:
    """Kafka ``QuotaUtils.throttleTime``: how long until ``rate`` falls to ``bound``, in ms."""
    if bound <= 0:
        raise ValueError("a quota bound must be positive")
    # Java's Math.round rounds halves up; Python's round() would round them to even.
    return int(math.floor((rate - bound) / bound * window_size_ms + 0.5))
