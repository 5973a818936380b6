"""Assignments of a consumer group: topic id → partition numbers, immutable and normalised.

Kafka keeps an assignment as ``Map<Uuid, Set<Integer>>`` (``modern/Assignment``); this package
keeps it as a read-only mapping of ``uuid.UUID`` to ``frozenset[int]`` without empty entries, so
that two assignments holding the same partitions compare equal however they were built. The
functions below are the set algebra that reconciliation and the manager use; none mutates its
arguments.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType

TopicId = uuid.UUID
#: topic id → partition numbers (never an empty set once normalised by :func:`freeze`).
Assignment = Mapping[TopicId, frozenset[int]]

EMPTY: Assignment = MappingProxyType({})


def freeze(assignment: Mapping[TopicId, Iterable[int]] | None) -> Assignment:
    """A read-only copy of ``assignment`` with frozenset values and no empty topic."""
    if not assignment:
        return EMPTY
    frozen = {topic_id: frozenset(partitions) for topic_id, partitions in assignment.items()}
    return MappingProxyType({topic_id: parts for topic_id, parts in frozen.items() if parts})


def union(*assignments: Assignment) -> Assignment:
    """Every partition of every argument."""
    merged: dict[TopicId, set[int]] = {}
    for assignment in assignments:
        for topic_id, partitions in assignment.items():
            merged.setdefault(topic_id, set()).update(partitions)
    return freeze(merged)


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether ``owned`` (what a member reported) holds any of ``partitions``.

    ``None`` means the member did not report what it owns (a heartbeat that leaves
    ``TopicPartitions`` null): it must then be presumed to still own everything, as Kafka's
    ``CurrentAssignmentBuilder.ownsRevokedPartitions`` does.
    """
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def is_subset(owned: Assignment | None, assignment: Assignment) -> bool:
    """Whether every partition of ``owned`` is in ``assignment`` (``None`` is no subset)."""
    if owned is None:
        return False
    return all(parts <= assignment.get(topic_id, frozenset()) for topic_id, parts in owned.items())


def partition_count(assignment: Assignment) -> int:
    return sum(len(parts) for parts in assignment.values())


def pairs(assignment: Assignment) -> Iterable[tuple[TopicId, int]]:
    """Every (topic id, partition) of ``assignment``."""
    for topic_id, partitions in assignment.items():
        for partition in partitions:
            yield topic_id, partition
