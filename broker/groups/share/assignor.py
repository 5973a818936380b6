"""The ``simple`` share-group assignor (Kafka ``SimpleAssignor``, its homogeneous and heterogeneous builders).

A share group's members may share a partition: the share-partition hands each record to one
member at a time, so the assignor only has to spread the partitions so that every partition has
a reader and the members' loads are even. Principles, in Kafka's priority order:

1. **Balance.** With ``M`` members and ``P`` partitions, each partition goes to ``S = ceil(M / P)``
   members at most (its *sharing*), and the ``S * P`` assignments are spread so that two members'
   counts differ by at most one: member ``i`` (members in id order) wants
   ``ceil(x * (i + 1)) - ceil(x * i)`` with ``x = S * P / M``, as Kafka computes it. Since
   ``S * P >= M`` every member gets at least one partition, and every partition gets at least one
   member (fewer than ``S`` only when no member that lacks it still has room).
2. **Stickiness.** A member keeps what it had, as far as balance allows: first whatever is no
   longer assignable goes (a topic it no longer subscribes to, a partition that no longer exists),
   then what exceeds the member's count, then what exceeds a partition's sharing; only then are
   the partitions short of readers handed to the members short of partitions.

When every member subscribes to the same topics (homogeneous) all of their partitions are
balanced together; otherwise (heterogeneous) each topic is balanced on its own among the
members subscribing to it and the results are combined, as Kafka's heterogeneous builder does
(a member of two topics then gets its share of each).

Where Kafka iterates hash sets, Sundial goes in a fixed order (members by id, partitions by
topic id then number), so an assignment is a pure function of its input: what is revoked from
an overfilled member is its highest partitions, a new partition goes to the unfilled member
with the most room left, which takes the partition with the fewest readers (then the lowest
ids); where the only member with room already reads every partition short of readers, it takes a
partition from another member, which takes the short one instead, so the counts above are met
exactly (Kafka leaves such a partition short).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping

NAME = "simple"

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, frozenset[int]]


def desired_counts(num_members: int, num_partitions: int) -> tuple[int, list[int]]:
    """(sharing, per-member desired count) for ``num_members`` members in id order."""
    if num_partitions == 0 or num_members == 0:
        return 0, [0] * num_members
    sharing = (num_members + num_partitions - 1) // num_partitions
    precise = sharing * num_partitions / num_members
    return sharing, [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(num_members)]


def _balance(partitions: list[TopicPartition], members: list[str],
             current: Mapping[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Balance ``partitions`` among ``members`` (sorted ids), keeping what ``current`` allows."""
    sharing, counts = desired_counts(len(members), len(partitions))
    wanted = dict(zip(members, counts))
    valid = set(partitions)
    held: dict[str, set[TopicPartition]] = {}
    readers: dict[TopicPartition, set[str]] = {tp: set() for tp in partitions}
    # 1. keep what is still assignable, 2. up to the member's count (its lowest partitions)
    for m in members:
        kept = sorted(tp for tp in current.get(m, ()) if tp in valid)[:wanted[m]]
        held[m] = set(kept)
        for tp in kept:
            readers[tp].add(m)
    # 3. no partition above its sharing: the members holding the most partitions give it up first
    for tp in partitions:
        excess = len(readers[tp]) - sharing
        if excess > 0:
            for m in sorted(readers[tp], key=lambda m: (-len(held[m]), m))[:excess]:
                readers[tp].discard(m)
                held[m].discard(tp)
    # 4. hand out the partitions short of readers: the member with the most room first takes the
    #    partition with the fewest readers it lacks; a member that already reads every short
    #    partition trades (it takes a partition of another member, which takes the short one)
    def give(m: str, tp: TopicPartition) -> None:
        held[m].add(tp)
        readers[tp].add(m)

    while True:
        progress = False
        for m in sorted(members, key=lambda m: (len(held[m]) - wanted[m], m)):
            if len(held[m]) >= wanted[m]:
                continue
            short = [tp for tp in partitions if len(readers[tp]) < sharing]
            if not short:
                return held
            lacking = [tp for tp in short if tp not in held[m]]
            if lacking:
                give(m, min(lacking, key=lambda tp: (len(readers[tp]), tp)))
                progress = True
                continue
            for tp in short:
                x = next((x for x in members if x != m and tp not in held[x]
                          and any(q not in held[m] for q in held[x])), None)
                if x is not None:
                    q = min(q for q in held[x] if q not in held[m])
                    held[x].discard(q)
                    readers[q].discard(x)
                    give(m, q)
                    give(x, tp)
                    progress = True
                    break
        if not progress:
            return held


def _to_assignment(tps: set[TopicPartition]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, p in tps:
        out.setdefault(topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def assign(subscriptions: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Mapping[uuid.UUID, frozenset[int]]]) -> dict[str, Assignment]:
    """The target assignment of every member.

    ``subscriptions``: member id → ids of the existing topics it subscribes to; ``partitions``:
    topic id → partition count; ``current``: member id → its current target assignment (members
    absent from ``subscriptions`` are ignored). Every member of ``subscriptions`` is in the result.
    """
    members = sorted(subscriptions)
    result: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if not members:
        return {}
    owned = {m: {(t, p) for t, ps in current.get(m, {}).items() for p in ps} for m in members}
    subscriptions = {m: frozenset(subscriptions[m]) for m in members}
    topic_sets = set(subscriptions.values())
    if len(topic_sets) == 1:
        topics = sorted(next(iter(topic_sets)))
        tps = [(t, p) for t in topics for p in range(partitions.get(t, 0))]
        result = _balance(tps, members, owned)
    else:
        for t in sorted({t for s in topic_sets for t in s}):
            subscribers = [m for m in members if t in subscriptions[m]]
            tps = [(t, p) for p in range(partitions.get(t, 0))]
            got = _balance(tps, subscribers, {m: {tp for tp in owned[m] if tp[0] == t} for m in subscribers})
            for m, held in got.items():
                result[m] |= held
    return {m: _to_assignment(result[m]) for m in members}
