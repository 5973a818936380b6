"""The target assignment of a group for a new group epoch (Kafka ``TargetAssignmentBuilder``).

The assignor sees every member (with the heartbeat's changes applied): its subscribed topic
ids (names and resolved regex, existing topics only), rack, instance id, and its current
target as the stickiness input. A static member that replaces a departed one (same instance
id, new member id) inherits the departed member's target. The records are the delta: one
target record (type 7) per member whose target changed (or that had none), then the new
assignment epoch (type 6), in Kafka's order.
"""

from __future__ import annotations

from collections.abc import Mapping

from .assignment import Assignment, freeze
from .assignors import MemberSpec, ServerAssignor, TopicSpec
from .group import ConsumerGroup, Replacing, ResolvedRegex
from .record_helpers import target_assignment, target_assignment_epoch
from .records import CoordinatorRecord
from .topics import TopicImage


def build_target_assignment(group: ConsumerGroup, group_epoch: int, assignor: ServerAssignor, image: TopicImage,
                            replacing: Replacing, resolved: Mapping[str, ResolvedRegex]
                            ) -> tuple[dict[str, Assignment], list[CoordinatorRecord]]:
    """(member id → new target, records) for ``group_epoch``; ``replacing`` as in
    :meth:`ConsumerGroup.members_after`."""
    members = group.members_after(replacing)
    specs: dict[str, MemberSpec] = {}
    topic_ids = set()
    for member_id, member in members.items():
        current = group.target_of(member_id)
        previous = group.static_member_id(member.instance_id)
        if previous is not None and previous != member_id:
            current = group.target_of(previous)
        subscribed = group.subscribed_topic_ids(member, image, resolved)
        topic_ids |= subscribed
        specs[member_id] = MemberSpec(subscribed_topic_ids=subscribed, rack_id=member.rack_id,
                                      assigned=current, instance_id=member.instance_id)
    topics = {topic_id: TopicSpec(image.partitions(topic_id)) for topic_id in topic_ids}
    computed = assignor.assign(specs, topics, homogeneous=group.is_homogeneous(replacing, resolved))
    targets: dict[str, Assignment] = {}
    records: list[CoordinatorRecord] = []
    for member_id in members:
        new = freeze(computed.get(member_id, {}))
        targets[member_id] = new
        if group.targets.get(member_id) != new:
            records.append(target_assignment(group.group_id, member_id, new))
    records.append(target_assignment_epoch(group.group_id, group_epoch))
    return targets, records
