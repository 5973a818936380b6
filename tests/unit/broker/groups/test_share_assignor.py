"""The ``simple`` share assignor: balance, sharing, coverage and stickiness, checked against the definitions."""

from __future__ import annotations

import math
import uuid

from hypothesis import given, settings, strategies as st

from sundial.broker.groups.share.assignor import assign, desired_counts

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


def flat(a):
    return {(t, p) for t, ps in a.items() for p in ps}


@st.composite
def groups(draw, homogeneous=None):
    partitions = {t: draw(st.integers(0, 6)) for t in TOPICS}
    n = draw(st.integers(0, 9))
    members = [f"m{i}" for i in range(n)]
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    if same:
        topics = frozenset(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))
        subs = {m: topics for m in members}
    else:
        subs = {m: frozenset(draw(st.sets(st.sampled_from(TOPICS), min_size=1))) for m in members}
    # a previous assignment, possibly stale (topics no longer subscribed, partitions gone)
    current = {}
    for m in members:
        if draw(st.booleans()):
            current[m] = {t: frozenset(draw(st.sets(st.integers(0, 7), max_size=4))) for t in
                          draw(st.sets(st.sampled_from(TOPICS), max_size=3))}
    return subs, partitions, current


def check_balanced(members, tps, result):
    """The definition: sharing at most S = ceil(M/P), every partition read, counts differ by <= 1."""
    if not members:
        return
    readers = {tp: [m for m in members if tp in result[m]] for tp in tps}
    if not tps:
        assert all(not result[m] for m in members)
        return
    sharing = math.ceil(len(members) / len(tps))
    assert all(1 <= len(rs) <= sharing for rs in readers.values()), readers
    counts = [len(result[m]) for m in members]
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1
    assert sum(counts) == sum(desired_counts(len(members), len(tps))[1])


@settings(max_examples=400)
@given(groups())
def test_simple_assignor_properties(group):
    subs, partitions, current = group
    result = {m: flat(a) for m, a in assign(subs, partitions, current).items()}
    assert set(result) == set(subs)
    for m, tps in result.items():       # only existing partitions of subscribed topics
        assert all(t in subs[m] and 0 <= p < partitions[t] for t, p in tps)
    if len(set(subs.values())) <= 1:
        topics = next(iter(subs.values()), frozenset())
        check_balanced(sorted(subs), [(t, p) for t in topics for p in range(partitions[t])], result)
    else:
        for t in TOPICS:               # balanced per topic among its subscribers
            subscribers = sorted(m for m in subs if t in subs[m])
            tps = [(t, p) for p in range(partitions[t])]
            check_balanced(subscribers, tps, {m: {tp for tp in result[m] if tp[0] == t} for m in subscribers})


@settings(max_examples=300)
@given(groups())
def test_an_assignment_is_a_fixed_point(group):
    subs, partitions, current = group
    first = assign(subs, partitions, current)
    assert assign(subs, partitions, first) == first


@settings(max_examples=300)
@given(groups(homogeneous=True), st.integers(0, 8))
def test_a_joining_member_moves_no_more_than_it_must(group, extra):
    """Stickiness: after one member joins, each old member keeps all but what balance forces away."""
    subs, partitions, _ = group
    before = assign(subs, partitions, {})
    topics = next(iter(subs.values()), None)
    if topics is None:
        return
    joined = {**subs, "zz-new": topics}
    after = assign(joined, partitions, before)
    _, counts = desired_counts(len(joined), sum(partitions[t] for t in topics))
    wanted = dict(zip(sorted(joined), counts))
    for m in subs:
        kept = flat(before[m]) & flat(after[m])
        assert len(kept) >= min(len(flat(before[m])), wanted[m]) - 1


def test_examples():
    t = TOPICS[0]
    # 3 members, 1 partition: all three share it
    assert assign({"a": {t}, "b": {t}, "c": {t}}, {t: 1}, {}) == {m: {t: frozenset({0})} for m in "abc"}
    # 2 members, 4 partitions: two each
    got = assign({"a": {t}, "b": {t}}, {t: 4}, {})
    assert sorted(len(v[t]) for v in got.values()) == [2, 2] and flat(got["a"]) | flat(got["b"]) == {(t, p) for p in range(4)}
    # a member subscribed to a topic that does not exist gets nothing
    assert assign({"a": frozenset()}, {}, {}) == {"a": {}}
