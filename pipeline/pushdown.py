"""Filter pushdown for batch reads: Spark's pushed filters -> the offset ranges to read.

Spark (pyspark >= 4.1, with ``spark.sql.python.filterPushdown.enabled=true``) offers the
reader the conjuncts of a query's ``WHERE`` as ``pyspark.sql.datasource.Filter``
objects. :func:`translate` takes the ones that can be answered from offsets and
timestamps and hands the rest back to Spark:

=========================  =====================================================
filter                     becomes
=========================  =====================================================
``timestamp >= / > t``     start at ``offsetsForTimes`` of the first ms it keeps
                           (every earlier record has an earlier timestamp), and
                           tasks drop records below it
``timestamp < / <= t``     tasks drop records at or past it; a task stops at the
                           first LogAppendTime batch that reaches it
``timestamp = t``          both
``partition = / IN``,      only the partitions that pass are planned
``partition < <= > >=``
``topic = / IN``           only the topics that pass are planned
``offset >= > < <= =``     the offset range is cut to it
``IS NOT NULL`` on topic,  always true (these columns are never null)
partition, offset,
timestamp, timestampType
=========================  =====================================================

Every filter taken is answered exactly, so Spark does not evaluate it again (``explain``
lists it under ``PushedFilters``), and a query returns the same rows with pushdown on
and off. Anything else (``NOT``, ``IN`` on timestamps or offsets, key/value/headers
predicates, a literal of an unexpected type) stays with Spark.

Spark timestamps are microseconds and Kafka's are milliseconds: a record with
``ts_ms`` is the Spark value ``ts_ms * 1000`` µs, so ``timestamp >= X`` keeps
``ts_ms >= ceil(X / 1000)`` and ``timestamp <= Y`` keeps ``ts_ms <= floor(Y / 1000)``.
The result is one half-open window ``[min_ms, max_ms)``.

Pure Python: filters are matched by class name and fields, so this module imports no
pyspark.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Iterable

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_NOT_NULL_COLUMNS = {"topic", "partition", "offset", "timestamp", "timestampType"}


@dataclass(frozen=True)
class Pushed:
    """The conjunction of the filters taken. ``None`` bounds are open."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_partition: int | None = None          # inclusive
    max_partition: int | None = None          # inclusive
    min_offset: int | None = None             # inclusive
    max_offset: int | None = None             # exclusive
    min_timestamp_ms: int | None = None       # inclusive
    max_timestamp_ms: int | None = None       # exclusive
    filters: tuple[str, ...] = ()             # what was taken, for logs

    def keeps_topic(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def keeps_partition(self, partition: int) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.min_partition is not None and partition < self.min_partition:
            return False
        return self.max_partition is None or partition <= self.max_partition

    @property
    def empty(self) -> bool:
        """True when the filters contradict each other (nothing can pass)."""
        if self.topics is not None and not self.topics:
            return True
        if self.partitions is not None and not any(self.keeps_partition(p) for p in self.partitions):
            return True
        if (self.min_partition is not None and self.max_partition is not None
                and self.min_partition > self.max_partition):
            return True
        if self.min_offset is not None and self.max_offset is not None and self.min_offset >= self.max_offset:
            return True
        return (self.min_timestamp_ms is not None and self.max_timestamp_ms is not None
                and self.min_timestamp_ms >= self.max_timestamp_ms)


def _micros(value) -> int | None:
    """Epoch µs of a pushed timestamp literal (timezone-aware datetime), else None."""
    if not isinstance(value, _dt.datetime) or value.tzinfo is None:
        return None
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _max(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def _min(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _narrow_half_open(kind: str, at_least: int, above: int, lo: int | None, hi: int | None):
    """The half-open range [lo, hi) (None: unbounded) narrowed by comparison ``kind`` with a value:
    ``at_least`` is the first whole value ``>= value`` keeps, ``above`` the first ``> value`` keeps
    (they differ for microseconds compared on milliseconds). None when ``kind`` is no comparison."""
    if kind == "GreaterThanOrEqual":
        return _max(lo, at_least), hi
    if kind == "GreaterThan":
        return _max(lo, above), hi
    if kind == "LessThan":
        return lo, _min(hi, at_least)
    if kind == "LessThanOrEqual":
        return lo, _min(hi, above)
    if kind == "EqualTo":
        return _max(lo, at_least), _min(hi, above)
    return None


def _intersect(current: frozenset | None, values: Iterable) -> frozenset:
    values = frozenset(values)
    return values if current is None else current & values


class _Builder:
    def __init__(self) -> None:
        self.topics: frozenset[str] | None = None
        self.partitions: frozenset[int] | None = None
        self.min_partition: int | None = None
        self.max_partition: int | None = None
        self.min_offset: int | None = None
        self.max_offset: int | None = None
        self.min_ts: int | None = None
        self.max_ts: int | None = None

    def take(self, f) -> bool:
        """Fold one filter in; False when it stays with Spark."""
        kind = type(f).__name__
        attribute = getattr(f, "attribute", None)
        if not isinstance(attribute, tuple) or len(attribute) != 1:
            return False
        column = attribute[0]
        if kind == "IsNotNull":
            return column in _NOT_NULL_COLUMNS
        value = getattr(f, "value", None)
        if kind == "EqualNullSafe":
            kind = "EqualTo"           # the same for columns that are never null (a null literal stays with Spark)
        if column == "timestamp":
            return self._timestamp(kind, value)
        if column == "offset":
            return self._offset(kind, value)
        if column == "partition":
            return self._partition(kind, value)
        if column == "topic":
            return self._topic(kind, value)
        return False

    def _timestamp(self, kind: str, value) -> bool:
        us = _micros(value)
        if us is None:
            return False
        narrowed = _narrow_half_open(kind, _ceil_div(us, 1000), us // 1000 + 1, self.min_ts, self.max_ts)
        if narrowed is None:
            return False
        self.min_ts, self.max_ts = narrowed
        return True

    def _offset(self, kind: str, value) -> bool:
        n = _int(value)
        if n is None:
            return False
        narrowed = _narrow_half_open(kind, n, n + 1, self.min_offset, self.max_offset)
        if narrowed is None:
            return False
        self.min_offset, self.max_offset = narrowed
        return True

    def _partition(self, kind: str, value) -> bool:
        if kind == "In":
            if not isinstance(value, (tuple, list)) or any(_int(v) is None for v in value if v is not None):
                return False
            self.partitions = _intersect(self.partitions, (v for v in value if v is not None))
            return True
        n = _int(value)
        if n is None:
            return False
        if kind == "EqualTo":
            self.partitions = _intersect(self.partitions, (n,))
        elif kind == "GreaterThanOrEqual":
            self.min_partition = _max(self.min_partition, n)
        elif kind == "GreaterThan":
            self.min_partition = _max(self.min_partition, n + 1)
        elif kind == "LessThan":
            self.max_partition = _min(self.max_partition, n - 1)
        elif kind == "LessThanOrEqual":
            self.max_partition = _min(self.max_partition, n)
        else:
            return False
        return True

    def _topic(self, kind: str, value) -> bool:
        if kind == "EqualTo" and isinstance(value, str):
            self.topics = _intersect(self.topics, (value,))
            return True
        if kind == "In" and isinstance(value, (tuple, list)) and all(isinstance(v, str) or v is None for v in value):
            self.topics = _intersect(self.topics, (v for v in value if v is not None))
            return True
        return False


def _describe(f) -> str:
    value = getattr(f, "value", None)
    if isinstance(value, _dt.datetime):
        value = value.isoformat()
    column = ".".join(getattr(f, "attribute", ()))
    return f"{type(f).__name__}({column})" if value is None else f"{type(f).__name__}({column}, {value!r})"


def translate(filters: Iterable) -> tuple[Pushed, list]:
    """(what is pushed, the filters that stay with Spark, by reference and in order)."""
    builder = _Builder()
    taken: list[str] = []
    rest = []
    for f in filters:
        if builder.take(f):
            taken.append(_describe(f))
        else:
            rest.append(f)
    pushed = Pushed(
        topics=builder.topics, partitions=builder.partitions, min_partition=builder.min_partition,
        max_partition=builder.max_partition, min_offset=builder.min_offset, max_offset=builder.max_offset,
        min_timestamp_ms=builder.min_ts, max_timestamp_ms=builder.max_ts, filters=tuple(taken))
    return pushed, rest
