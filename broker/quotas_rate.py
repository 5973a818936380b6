"""A client's rate over sampled windows and the throttle time of a quota, as Kafka computes them
except in a new client's first windows (no initial burst of ten windows).

Pure arithmetic on integer milliseconds: no clock, no asyncio. :class:`RateSensor` is Kafka's
``Rate`` over a ``WindowedSum`` (``SampledStat``) with ``quota.window.num`` samples of
``quota.window.size.seconds``; :meth:`RateSensor.record_and_throttle_ms` is ``Sensor.record`` with
its quota check followed by ``QuotaUtils.throttleTime``:

* **Samples.** A value is added to the current sample; a sample is complete once
  ``window_ms`` has passed since it started, and the next value then starts a new one. At
  most ``samples + 1`` are kept, the oldest recycled. Before a measurement, every sample whose
  last value is ``samples * window_ms`` old or more is reset (it starts again at now, empty).
* **Rate.** The sum of the samples divided by the time they span (the *span*): from the start
  of the oldest sample to now, counted as at least ``samples - 1`` whole windows (the windows
  before the oldest sample held nothing), and at least 1 ms; **but never more than the time
  since the sensor's first record plus one window** (where Sundial differs from Kafka).
* **Why the cap.** Kafka pads the span of a client that has just begun to ``samples - 1``
  windows, as if it had been there and idle before, so a new client may send ``samples - 1``
  windows' worth of its quota at once (10 s of it by default) before any throttle, and is 10-20%
  above its quota over its first 30 s. Here a new client's span is the windows it has existed
  in (the one its first record fell in included): it may send one window's worth at once, and
  after ``t`` ms no more than the quota times ``t`` plus one window. The cap binds only in a
  client's first ``samples - 2`` windows: in the last padded window Kafka's span equals it, and
  from then on Kafka's is the shorter (an established client, including one that comes back
  after its samples expired, is measured exactly as in Kafka).
* **Throttle.** After recording, a rate above the bound is a violation; the throttle is the
  time that brings the rate back to the bound if nothing more were recorded:
  ``round((rate - bound) / bound * span_ms)`` (Kafka's ``QuotaUtils.throttleTime``; exact while
  the span grows with the clock, as a new client's does). A request-percentage throttle is
  capped at one window (Kafka's ``ClientRequestQuotaManager``); byte-rate throttles are not.
* **Largest single value** (:func:`max_value_in_window`): what one request may add without
  being throttled by its size alone, the bound times the shortest span the rate can have: one
  window while the client is new, ``samples - 1`` windows after (Kafka's
  ``maxValueInQuotaWindow``). A Fetch's ``max_bytes`` is capped at it.

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

    __slots__ = ("samples", "window_ms", "_samples", "_current", "last_record_ms", "first_record_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a rate needs at least one sample of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0
        #: When the sensor recorded its first value (None: nothing yet).
        self.first_record_ms: int | None = None

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
        if self.first_record_ms is None:
            self.first_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def age_ms(self, now_ms: int) -> int:
        """Time since the sensor's first record (0 before it)."""
        return 0 if self.first_record_ms is None else max(now_ms - self.first_record_ms, 0)

    def is_new(self, now_ms: int) -> bool:
        """Whether the sensor's first record is less than ``samples - 1`` windows old (its span
        may then be as short as one window)."""
        return self.age_ms(now_ms) < (self.samples - 1) * self.window_ms

    def window_size_ms(self, now_ms: int) -> int:
        """The span the rate divides by: Kafka's ``Rate.windowSize``, but never more than the time
        since the sensor's first record plus one window (Kafka's padding stops there)."""
        return min(self.kafka_window_size_ms(now_ms), self.age_ms(now_ms) + self.window_ms)

    def kafka_window_size_ms(self, now_ms: int) -> int:
        """Kafka ``Rate.windowSize``: the samples' span, padded to ``samples - 1`` whole windows."""
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

    def max_value_in_window(self, bound: float, now_ms: int) -> float:
        """The most one request may add now without being throttled by its size alone."""
        return max_value_in_window(bound, self.samples, self.window_ms, self.is_new(now_ms))


def max_value_in_window(bound: float, samples: int, window_ms: int, new: bool) -> float:
    """The bound times the shortest span a rate can have: one window for a ``new`` client (one
    with no sensor yet too), else ``samples - 1`` windows (Kafka ``maxValueInQuotaWindow``)."""
    windows = 1 if new and samples > 1 else samples - 1
    return bound * windows * window_ms / 1000.0


def throttle_time_ms(rate: float, bound: float, window_size_ms: int) -> int:
    """Kafka ``QuotaUtils.throttleTime``: how long until ``rate`` falls to ``bound``, in ms."""
    if bound <= 0:
        raise ValueError("a quota bound must be positive")
    # Java's Math.round rounds halves up; Python's round() would round them to even.
    return int(math.floor((rate - bound) / bound * window_size_ms + 0.5))
