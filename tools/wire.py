"""Look-ups over the wire shared by the tools, through kafka-python's clients.

* :func:`topic_partition_counts` – Metadata for named topics (unknown topic → ToolError);
* :func:`list_offsets` – ListOffsets for any spec: a timestamp >= 0 (offsetsForTimes),
  ``-1`` latest, ``-2`` earliest, ``-3`` max timestamp (sent at v7+ by
  ``KafkaAdminClient.list_partition_offsets``, which picks the lowest version able to
  carry the spec). "No record matches" is offset -1, timestamp -1, as on the wire;
* :func:`record_timestamps` – the timestamp of the record at given offsets (Fetch via
  a ``KafkaConsumer`` with manual assignment and no group), used for lag in time and
  for failover's T;
* :func:`group_state`, :func:`committed_offsets` – DescribeGroups / OffsetFetch.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping, NamedTuple

from kafka import TopicPartition
from kafka.errors import KafkaError, NoError, UnknownTopicOrPartitionError, for_code
from kafka.protocol.consumer import OffsetSpec
from kafka.structs import OffsetAndMetadata

from sundial.records.timestamps import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

from .common import ClientSettings, ToolError, close_quietly, describe_error


class OffsetAt(NamedTuple):
    offset: int          # -1: no record matches
    timestamp_ms: int    # -1 for earliest/latest and when nothing matches


def topic_partition_counts(admin, topics: Iterable[str]) -> dict[str, int]:
    """Partition count of each named topic; an unknown topic is a ToolError."""
    names = list(dict.fromkeys(topics))
    if not names:
        return {}
    result = {}
    for info in admin.describe_topics(names):
        code = info.get("error_code", 0)
        name = info["name"]
        if code == 3:
            raise ToolError(f"unknown topic {name!r}")
        if code:
            raise ToolError(f"cannot describe topic {name!r}: {for_code(code).__name__}")
        result[name] = len(info.get("partitions") or [])
    return result


def all_topics(admin, *, include_internal: bool = True) -> list[str]:
    names = sorted(admin.list_topics())
    if not include_internal:
        names = [n for n in names if not n.startswith("__")]
    return names


def list_offsets(admin, specs: Mapping, *, timeout_ms: int | None = None) -> dict:
    """``{TopicPartition: spec}`` → ``{TopicPartition: OffsetAt}`` (see module doc)."""
    if not specs:
        return {}
    wire_specs = {}
    for tp, spec in specs.items():
        value = int(spec)
        if value == LATEST_TIMESTAMP:
            wire_specs[tp] = OffsetSpec.LATEST
        elif value == EARLIEST_TIMESTAMP:
            wire_specs[tp] = OffsetSpec.EARLIEST
        elif value == MAX_TIMESTAMP:
            wire_specs[tp] = OffsetSpec.MAX_TIMESTAMP
        else:
            wire_specs[tp] = value
    try:
        raw = admin.list_partition_offsets(wire_specs, timeout_ms=timeout_ms)
    except UnknownTopicOrPartitionError as exc:
        raise ToolError(f"unknown topic or partition: {describe_error(exc).split(': ', 1)[-1]}") from None
    except KafkaError as exc:
        raise ToolError(f"ListOffsets failed: {type(exc).__name__}: {describe_error(exc)}") from None
    return {tp: OffsetAt(r.offset, r.timestamp) for tp, r in raw.items()}


def record_timestamps(settings: ClientSettings, offsets: Mapping, *, timeout_ms: int | None = None,
                      exact: bool = True) -> dict:
    """``{TopicPartition: offset}`` → ``{TopicPartition: timestamp_ms | None}``.

    With ``exact`` the record must sit at exactly that offset (None if it is gone or is
    not a data record); otherwise the first record at or after the offset counts (the
    oldest record not yet consumed, for lag in time). Offsets outside
    [log start offset, log end offset) give None without a fetch.
    """
    wanted = {TopicPartition(tp.topic, tp.partition): int(off) for tp, off in offsets.items() if off is not None
              and off >= 0}
    result: dict = {tp: None for tp in offsets}
    if not wanted:
        return result
    deadline_s = time.monotonic() + (timeout_ms or settings.timeout_ms) / 1000
    consumer = settings.consumer(group_id=None, enable_auto_commit=False, auto_offset_reset="none",
                                 max_partition_fetch_bytes=256 * 1024, fetch_max_wait_ms=100)
    try:
        tps = list(wanted)
        begin = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps)
        pending = {}
        for tp, off in wanted.items():
            if begin.get(tp) is None or end.get(tp) is None or off < begin[tp] or off >= end[tp]:
                continue
            pending[tp] = off
        if not pending:
            return result
        consumer.assign(list(pending))
        for tp, off in pending.items():
            consumer.seek(tp, off)
        while pending and time.monotonic() < deadline_s:
            batch = consumer.poll(timeout_ms=200, max_records=500)
            for tp, records in batch.items():
                if tp not in pending:
                    continue
                want = pending[tp]
                for rec in records:
                    if rec.offset < want:
                        continue
                    if rec.offset == want or not exact:
                        result[tp] = rec.timestamp if rec.timestamp is not None and rec.timestamp >= 0 else None
                    pending.pop(tp)
                    consumer.pause(tp)
                    break
        if pending:
            names = ", ".join(f"{tp.topic}:{tp.partition}@{off}" for tp, off in sorted(pending.items()))
            raise ToolError(f"timed out reading record timestamps from {settings.bootstrap} ({names})")
        return result
    finally:
        close_quietly(consumer)


def group_description(admin, group_id: str) -> dict:
    try:
        desc = admin.describe_groups([group_id])
    except KafkaError as exc:
        raise ToolError(f"cannot describe group {group_id!r}: {type(exc).__name__}: {describe_error(exc)}") from None
    info = desc.get(group_id) or {}
    if info.get("error"):
        raise ToolError(f"cannot describe group {group_id!r}: {info['error']}")
    return info


def committed_offsets(admin, group_id: str) -> dict:
    """``{TopicPartition: committed offset}`` of a group (empty when it has none)."""
    try:
        raw = admin.list_group_offsets({group_id: None})
    except KafkaError as exc:
        raise ToolError(f"cannot read committed offsets of group {group_id!r}: {type(exc).__name__}: "
                        f"{describe_error(exc)}") from None
    offsets = raw.get(group_id, {})
    return {tp: oam.offset for tp, oam in offsets.items() if oam.offset is not None and oam.offset >= 0}


INACTIVE_STATES = ("Empty", "Dead")


def require_inactive(admin, group_id: str, where: str) -> str:
    """Raise unless the group has no live members (Kafka's rule for resetting offsets)."""
    state = group_description(admin, group_id).get("group_state") or "Dead"
    if state not in INACTIVE_STATES:
        raise ToolError(f"offsets of group {group_id!r} on {where} can only be changed while the group is "
                        f"inactive, but its state is {state}; stop its consumers first")
    return state


def commit_offsets(admin, group_id: str, offsets: Mapping) -> None:
    """OffsetCommit outside any generation (the group must be inactive); errors → ToolError."""
    if not offsets:
        return
    payload = {tp: OffsetAndMetadata(int(off), "", None) for tp, off in offsets.items()}
    try:
        results = admin.alter_group_offsets(group_id, payload)
    except KafkaError as exc:
        raise ToolError(f"committing offsets for group {group_id!r} failed: {type(exc).__name__}: "
                        f"{describe_error(exc)}") from None
    failed = {tp: err for tp, err in results.items() if err is not NoError}
    if failed:
        first_tp, first_err = sorted(failed.items())[0]
        raise ToolError(f"committing offsets for group {group_id!r} failed for {len(failed)} partition(s), "
                        f"e.g. {first_tp.topic}:{first_tp.partition}: {first_err.__name__}")
