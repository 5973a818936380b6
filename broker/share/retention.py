"""Share groups as readers for consumed-log retention (seed 004; docs/retention.md).

A share group consumes a partition from its share-partition start offset (SPSO): every record
before it is acknowledged or archived, never delivered again; records from it on may still be.
So with consumed retention on, a segment may go early only once it lies wholly below the SPSO of
every share group with state for the partition, as well as below the committed offset of every
consumer group (:meth:`broker.groups.offset_manager.GroupMetadataManager.consumed_upto`).

:class:`ConsumedReaders` is what the replica manager asks (``consumed_upto(topic, partition,
log_start_offset)``): the smaller of the consumer groups' answer and the share groups' SPSOs, and
which group holds it. A share group that subscribes to the topic but has no state for the
partition yet (its first fetch has not come) holds everything from the log start offset, as a
consumer group with live members that has not committed does. When the consumer side cannot know
its answer, neither can this: consumed retention skips the partition for that pass.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

from ..groups.offset_manager import ConsumedUpto


class ConsumerGroupsReader(Protocol):
    def consumed_upto(self, topic: str, partition: int, log_start_offset: int) -> ConsumedUpto: ...


class StartOffsets(Protocol):
    def start_offsets(self, topic: str, partition: int) -> dict[str, int]: ...


class ConsumedReaders:
    """Consumer groups and share groups together as the consumed-retention input.

    ``share_subscribers(topic)`` names the share groups with members subscribed to the topic; by
    default they are read from the group coordinator's share groups (``groups.share``)."""

    def __init__(self, groups: ConsumerGroupsReader | None, share_state: StartOffsets,
                 share_subscribers: Callable[[str], Iterable[str]] | None = None) -> None:
        self.groups = groups
        self.share_state = share_state
        if share_subscribers is None:
            share_groups = getattr(groups, "share", None)
            if share_groups is not None:
                def share_subscribers(topic: str) -> list[str]:
                    return [g for g, topics in share_groups.subscribed_groups().items() if topic in topics]
        self.share_subscribers = share_subscribers

    def consumed_upto(self, topic: str, partition: int, log_start_offset: int) -> ConsumedUpto:
        answer = (self.groups.consumed_upto(topic, partition, log_start_offset) if self.groups is not None
                  else ConsumedUpto(None, None))
        if answer.unknown:
            return answer
        best = None if answer.offset is None else (answer.offset, answer.holder_group)
        candidates = dict(self.share_state.start_offsets(topic, partition))
        if self.share_subscribers is not None:
            for group_id in self.share_subscribers(topic):
                candidates.setdefault(group_id, log_start_offset)
        for group_id, offset in sorted(candidates.items()):
            if best is None or offset < best[0]:
                best = (offset, group_id)
        return ConsumedUpto(None, None) if best is None else ConsumedUpto(best[0], best[1])


__all__ = ["ConsumedReaders"]
