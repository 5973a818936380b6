"""Topic-partitions, offset-range limits and the JSON shapes spark-sql-kafka uses for them.

Pure Python (no pyspark, no network). The JSON forms are the connector's own:

* ``assign``:                      ``{"topicA":[0,1],"topicB":[2,4]}``
* ``startingOffsets``/``endingOffsets`` and checkpoint offsets:
                                   ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``
  (-2 = earliest, -1 = latest; a checkpoint offset is the *next* offset to read)
* ``*OffsetsByTimestamp``:         ``{"topicA":{"0":1000,"1":1000}}`` (epoch ms)

Invariants: partition numbers are ints >= 0 inside the package and strings only in
JSON; :func:`format_partition_offsets` sorts topics by name and partitions numerically
so the same offsets always serialise to the same string (Spark compares streaming
offsets by their JSON text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, NamedTuple

EARLIEST = -2
"""Offset sentinel for "the log start offset" (ListOffsets timestamp -2)."""
LATEST = -1
"""Offset sentinel for "the log end offset" (ListOffsets timestamp -1)."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka's own rendering, used in error messages
        return f"{self.topic}-{self.partition}"


class OffsetJsonError(ValueError):
    """A JSON option value does not have the connector's shape."""


# --- offset range limits (what a starting/ending option asks for) -------------------

@dataclass(frozen=True)
class EarliestLimit:
    """Every partition from its log start offset."""


@dataclass(frozen=True)
class LatestLimit:
    """Every partition at its log end offset."""


@dataclass(frozen=True)
class SpecificOffsets:
    """An explicit offset (or -2/-1) per partition; must name every assigned partition."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class SpecificTimestamps:
    """A timestamp (ms) per partition; must name every assigned partition."""

    timestamps: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class GlobalTimestamp:
    """One timestamp (ms) for every assigned partition."""

    timestamp_ms: int


OffsetLimit = EarliestLimit | LatestLimit | SpecificOffsets | SpecificTimestamps | GlobalTimestamp


def limit_timestamp_for(limit: OffsetLimit, tp: TopicPartition) -> int | None:
    """The timestamp a limit resolves ``tp`` by, or None when it is offset-based."""
    if isinstance(limit, GlobalTimestamp):
        return limit.timestamp_ms
    if isinstance(limit, SpecificTimestamps):
        return limit.timestamps.get(tp)
    return None


# --- JSON ------------------------------------------------------------------------------

_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1000,"1":1000},"topicB":{"0":2000}}'


def _load_object(text: str, example: str) -> dict:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        raise OffsetJsonError(f"Expected e.g. {example}, got {text}") from None
    if not isinstance(value, dict):
        raise OffsetJsonError(f"Expected e.g. {example}, got {text}")
    return value


def _as_int(value, example: str, text: str) -> int:
    # bool is an int subclass in Python; JSON true/false is not an offset
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetJsonError(f"Expected e.g. {example}, got {text}")
    return value


def _partition_number(key, example: str, text: str) -> int:
    try:
        number = int(key)
    except (TypeError, ValueError):
        raise OffsetJsonError(f"Expected e.g. {example}, got {text}") from None
    if number < 0 or str(number) != str(key).strip():
        raise OffsetJsonError(f"Expected e.g. {example}, got {text}")
    return number


def parse_assign(text: str) -> list[TopicPartition]:
    """``{"t":[0,1]}`` -> sorted, de-duplicated topic-partitions."""
    obj = _load_object(text, _ASSIGN_EXAMPLE)
    out: set[TopicPartition] = set()
    for topic, partitions in obj.items():
        if not isinstance(partitions, list):
            raise OffsetJsonError(f"Expected e.g. {_ASSIGN_EXAMPLE}, got {text}")
        for p in partitions:
            p = _as_int(p, _ASSIGN_EXAMPLE, text)
            if p < 0:
                raise OffsetJsonError(f"Expected e.g. {_ASSIGN_EXAMPLE}, got {text}")
            out.add(TopicPartition(topic, p))
    return sorted(out)


def _parse_partition_map(text: str, example: str) -> dict[TopicPartition, int]:
    obj = _load_object(text, example)
    out: dict[TopicPartition, int] = {}
    for topic, partitions in obj.items():
        if not isinstance(partitions, dict):
            raise OffsetJsonError(f"Expected e.g. {example}, got {text}")
        for key, value in partitions.items():
            tp = TopicPartition(topic, _partition_number(key, example, text))
            out[tp] = _as_int(value, example, text)
    return out


def parse_partition_offsets(text: str) -> dict[TopicPartition, int]:
    """``{"t":{"0":23,"1":-1}}`` -> {tp: offset}; -2/-1 kept as sentinels."""
    offsets = _parse_partition_map(text, _OFFSETS_EXAMPLE)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise OffsetJsonError(
                f"offset {offset} for {tp} is invalid: use an offset >= 0, -1 (latest) or -2 (earliest)")
    return offsets


def parse_partition_timestamps(text: str) -> dict[TopicPartition, int]:
    """``{"t":{"0":1000}}`` -> {tp: timestamp_ms}."""
    timestamps = _parse_partition_map(text, _TIMESTAMPS_EXAMPLE)
    for tp, ts in timestamps.items():
        if ts < 0:
            raise OffsetJsonError(f"timestamp {ts} for {tp} is invalid: timestamps are epoch milliseconds >= 0")
    return timestamps


def format_partition_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{tp: offset} -> Spark's checkpoint shape, deterministically ordered."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json_dict(obj: Mapping) -> dict[TopicPartition, int]:
    """The inverse of :func:`format_partition_offsets` (a checkpoint offset read back)."""
    if not isinstance(obj, Mapping):
        raise OffsetJsonError(f"Expected e.g. {_OFFSETS_EXAMPLE}, got {obj!r}")
    text = json.dumps(obj)
    return _parse_partition_map(text, _OFFSETS_EXAMPLE)
