"""Share groups as readers for consumed-log retention: the consumed offset is the smallest of every
consumer group's and every share group's position, computed here by brute force."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sundial.broker.groups.offset_manager import ConsumedUpto
from sundial.broker.share.retention import ConsumedReaders


class Consumers:
    def __init__(self, answer: ConsumedUpto) -> None:
        self.answer = answer

    def consumed_upto(self, topic, partition, log_start_offset):
        return self.answer


class Shares:
    def __init__(self, offsets: dict[str, int]) -> None:
        self.offsets = offsets

    def start_offsets(self, topic, partition):
        return dict(self.offsets)


positions = st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers(0, 1000), max_size=4)


@given(consumer=st.one_of(st.none(), st.tuples(st.integers(0, 1000), st.text("xyz", min_size=1, max_size=2))),
       shares=positions, subscribers=st.sets(st.text("abcd", min_size=1, max_size=3), max_size=3),
       log_start=st.integers(0, 50))
def test_smallest_position_of_every_reader(consumer, shares, subscribers, log_start):
    answer = ConsumedUpto(None, None) if consumer is None else ConsumedUpto(*consumer)
    readers = ConsumedReaders(Consumers(answer), Shares(shares), lambda topic: subscribers)
    got = readers.consumed_upto("t", 0, log_start)
    everyone = {g: o for g, o in shares.items()}
    for g in subscribers:
        everyone.setdefault(g, log_start)
    if consumer is not None:
        everyone.setdefault(("consumer", consumer[1]), consumer[0])
    if not everyone:
        assert got == ConsumedUpto(None, None)
        return
    expected = min(everyone.values())
    assert got.offset == expected
    holder = got.holder_group
    assert holder in shares and shares[holder] == expected or holder in subscribers and expected == log_start \
        or consumer is not None and holder == consumer[1] and consumer[0] == expected


def test_unknown_consumer_answer_skips_the_pass():
    readers = ConsumedReaders(Consumers(ConsumedUpto(None, None, unknown=True)), Shares({"s": 5}))
    assert readers.consumed_upto("t", 0, 0).unknown


def test_a_lagging_share_group_holds_consumer_groups_back():
    readers = ConsumedReaders(Consumers(ConsumedUpto(900, "fast")), Shares({"slow-share": 120, "other": 400}))
    assert readers.consumed_upto("t", 0, 0) == ConsumedUpto(120, "slow-share")
    readers = ConsumedReaders(None, Shares({}))
    assert readers.consumed_upto("t", 0, 0) == ConsumedUpto(None, None)


def test_subscribers_read_from_the_share_groups_by_default():
    class ShareGroups:
        def subscribed_groups(self):
            return {"sub": frozenset({"t"}), "elsewhere": frozenset({"u"})}

    class Groups(Consumers):
        share = ShareGroups()

    readers = ConsumedReaders(Groups(ConsumedUpto(50, "c")), Shares({"has-state": 30}))
    assert readers.consumed_upto("t", 0, 7) == ConsumedUpto(7, "sub")
    assert readers.consumed_upto("v", 0, 7) == ConsumedUpto(30, "has-state")
