"""What one ConsumerGroupHeartbeat does to a group (Kafka ``GroupMetadataManager.consumerGroupHeartbeat``,
``consumerGroupLeave`` and the fencing they share).

A heartbeat (epoch 0 to join, the member's epoch otherwise):

1. finds or creates the member: dynamic by member id, static by instance id (a static
   member that left with epoch -2 is replaced by the newcomer with its instance id, who
   takes over its assignment; an instance id still in use gets UNRELEASED_INSTANCE_ID), and
   checks the epoch (FENCED_MEMBER_EPOCH unless it is the member's epoch, 0, or the previous
   epoch with owned partitions within the assignment: the answer with the new epoch may
   have been lost);
2. applies the subscription fields; a changed subscription writes the member record, and
   new topic names, a new regex or a regex dropped bump the group epoch (with the metadata
   hash of the subscribed topics); a regex no member used before is checked and resolved at
   once, with every other regex of the group (record type 16);
3. computes the target assignment when the group epoch is ahead of the assignment epoch;
4. reconciles the member one step (:mod:`.reconcile`), writing its assignment record when it
   changed, and (re)starts its rebalance deadline when it must revoke;
5. restarts its session deadline. The answer carries the member's assignment only on a join,
   on a full request, or when the assignment changed, as Kafka's does.

Leaving (epoch -1) fences the member: three tombstones per member, tombstones for regexes no
one uses any more, and a group epoch bump. A static member's temporary leave (epoch -2)
only writes its assignment record with epoch -2 and keeps its partitions.

Sundial resolves a new regex during the heartbeat that brings it, so the member gets its
partitions on the next heartbeat; Kafka resolves it asynchronously (and at most every 10 s
per group), and the group epoch moves when the result comes back. The records are the same,
in a different order.

Kafka 4.2 answers UNRELEASED_INSTANCE_ID to a static member that rejoins with epoch 0 under
its own member id while the coordinator still counts it in (after a lost answer or a
FENCED_MEMBER_EPOCH), a fatal error for the Java client (open apache/kafka PR #23542).
Sundial handles such a rejoin in place, as that fix does: the member gets its assignment back,
as a dynamic member would, and one that had left with -2 starts over from epoch 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from sundial.protocol.errors import ErrorCode

from . import record_helpers as rec
from .assignment import EMPTY, Assignment, is_subset
from .assignors import ServerAssignor
from .errors import GroupError
from .group import ConsumerGroup, ResolvedRegex
from .member import LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerGroupMember, MemberState
from .reconcile import reconcile
from .records import ClassicMemberMetadata, CoordinatorRecord
from .regex import InvalidRegex, compile_topic_regex, resolve
from .requests import HeartbeatRequest
from .settings import ConsumerGroupSettings
from .target import build_target_assignment
from .topics import TopicImage


@dataclass(frozen=True)
class Context:
    image: TopicImage
    settings: ConsumerGroupSettings
    assignors: Mapping[str, ServerAssignor]
    now_ms: int
    #: The version stamped on regex resolutions (Kafka: the metadata image's offset).
    topics_version: int


@dataclass
class Change:
    """The records of one operation and the timers it moves; the manager replays and applies."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    #: Member whose session deadline restarts.
    session: str | None = None
    #: (member id, member epoch, rebalance timeout) to arm, or the member id whose deadline goes.
    arm_rebalance: tuple[str, int, int] | None = None
    disarm_rebalance: str | None = None
    #: Members leaving the group: every timer of theirs goes.
    removed: list[str] = field(default_factory=list)


class _RegexUpdate(Enum):
    NO_CHANGE = 0
    UPDATED = 1
    UPDATED_AND_RESOLVED = 2


def unknown_member(member_id: str, group_id: str) -> GroupError:
    return GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")


def member_heartbeat(ctx: Context, group: ConsumerGroup, request: HeartbeatRequest, member_id: str,
                     client_id: str, client_host: str, *, classic: ClassicMemberMetadata | None = None
                     ) -> tuple[ConsumerGroupMember, Change, ConsumerGroupMember]:
    """A join or heartbeat (epoch >= 0): (the member before, the change, the member after).
    ``member_id`` is the request's, or the id generated for a v0 join.

    With ``classic``, the request is a classic member's JoinGroup (:mod:`.classic`) translated
    into a heartbeat: the member is created if unknown, its epoch is not checked, it keeps its
    server assignor and has no rebalance deadline (classic members have join and sync deadlines)."""
    change = Change()
    records = change.records
    joining = request.member_epoch == 0 or classic is not None
    owned = request.owned
    size = len(group.members)
    if size >= ctx.settings.max_size and (not request.member_id or request.member_id not in group.members):
        raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                         f"The consumer group has reached its maximum capacity of {ctx.settings.max_size} members.")
    replacing: dict[str, ConsumerGroupMember | None] = {}
    if request.instance_id is None:
        if classic is not None:
            member = group.members.get(member_id) or ConsumerGroupMember(member_id)
            if not member.uses_classic_protocol and member_id in group.members:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
        else:
            member = _dynamic_member(group, member_id, request.member_epoch, owned, joining)
    else:
        member = _static_member(group, member_id, request.member_epoch, request.instance_id, owned, joining,
                                records, replacing, classic=classic is not None)
        change.removed = [replaced for replaced, m in replacing.items() if m is None]

    updated = member.replace(
        instance_id=_or(request.instance_id, member.instance_id), rack_id=_or(request.rack_id, member.rack_id),
        rebalance_timeout_ms=(member.rebalance_timeout_ms if request.rebalance_timeout_ms == -1
                              else request.rebalance_timeout_ms),
        server_assignor=_or(request.server_assignor, member.server_assignor),
        subscribed_topic_names=(member.subscribed_topic_names if request.subscribed_topic_names is None
                                else frozenset(request.subscribed_topic_names)),
        subscribed_topic_regex=_or(request.subscribed_topic_regex, member.subscribed_topic_regex),
        client_id=client_id, client_host=client_host, classic=_or(classic, member.classic))
    replacing[updated.member_id] = updated

    names_changed = False
    if not updated.subscription_equals(member):
        records.append(rec.member_subscription(group.group_id, updated))
        names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
    regex_update, resolved = _update_regexes(ctx, group, member, updated, replacing, records)
    subscription_changed = names_changed or regex_update is not _RegexUpdate.NO_CHANGE

    group_epoch = group.group_epoch
    bump = group_epoch == 0 or names_changed or regex_update is _RegexUpdate.UPDATED_AND_RESOLVED
    if bump:
        metadata_hash = ctx.image.metadata_hash(group.subscribed_topic_counts(replacing, resolved).keys())
        group_epoch += 1
        records.append(rec.group_epoch(group.group_id, group_epoch, metadata_hash))
        if group.has_legacy_partition_metadata:
            records.append(rec.partition_metadata_tombstone(group.group_id))

    if group_epoch > group.assignment_epoch:
        targets = _new_targets(ctx, group, group_epoch, replacing, resolved, records)
        target_epoch, target = group_epoch, targets.get(updated.member_id, EMPTY)
    else:
        target_epoch, target = group.assignment_epoch, group.target_for(updated.member_id, updated.instance_id)

    final = updated
    if subscription_changed or not updated.is_reconciled_to(target_epoch):
        final = reconcile(updated, target_epoch=target_epoch, target=target,
                          subscribed_topic_ids=group.subscribed_topic_ids(updated, ctx.image, resolved),
                          partition_epoch=group.partition_epoch, owned=owned,
                          subscription_changed=subscription_changed)
        if final != updated:
            records.append(rec.current_assignment(group.group_id, final))
            if final.state is MemberState.UNREVOKED_PARTITIONS and not final.uses_classic_protocol:
                change.arm_rebalance = (final.member_id, final.member_epoch, final.rebalance_timeout_ms)
            else:
                change.disarm_rebalance = final.member_id
    change.session = final.member_id
    return member, change, final


def sends_assignment(request: HeartbeatRequest, before: ConsumerGroupMember, after: ConsumerGroupMember) -> bool:
    """Whether the answer carries the assignment (Kafka: a join, a full request, or a change)."""
    return request.member_epoch == 0 or request.is_full or before.assigned != after.assigned


def member_leave(ctx: Context, group: ConsumerGroup, request: HeartbeatRequest) -> tuple[ConsumerGroupMember, Change]:
    """Epoch -1 (leave) or -2 (a static member's temporary leave): the member, and the change."""
    if request.instance_id is None:
        member = group.members.get(request.member_id)
        if member is None:
            raise unknown_member(request.member_id, group.group_id)
        return member, fence(ctx, group, [member])
    member = group.static_member(request.instance_id)
    _check_static(group, member, request.member_id, request.instance_id)
    if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        leaving = member.replace(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation=EMPTY)
        return member, Change(records=[rec.current_assignment(group.group_id, leaving)])
    return member, fence(ctx, group, [member])


def fence(ctx: Context, group: ConsumerGroup, members: Iterable[ConsumerGroupMember]) -> Change:
    """Remove members and bump the group epoch (Kafka ``consumerGroupFenceMembers``)."""
    members = list(members)
    change = Change(removed=[m.member_id for m in members])
    if not members:
        return change
    records = change.records
    for m in members:
        records.extend(rec.remove_member(group.group_id, m.member_id))
    leaving_regexes = Counter(m.regex for m in members if m.regex)
    subscribers = group.regex_subscribers()
    resolved = dict(group.resolved_regexes)
    for regex, count in leaving_regexes.items():
        if subscribers[regex] == count:
            records.append(rec.regular_expression_tombstone(group.group_id, regex))
            resolved.pop(regex, None)
    replacing = {m.member_id: None for m in members}
    metadata_hash = ctx.image.metadata_hash(group.subscribed_topic_counts(replacing, resolved).keys())
    records.append(rec.group_epoch(group.group_id, group.group_epoch + 1, metadata_hash))
    return change


def _or(value, default):
    return default if value is None else value


def _dynamic_member(group: ConsumerGroup, member_id: str, epoch: int, owned: Assignment | None,
                    joining: bool) -> ConsumerGroupMember:
    member = group.members.get(member_id)
    if member is None:
        if not joining:
            raise unknown_member(member_id, group.group_id)
        return ConsumerGroupMember(member_id)
    _check_epoch(member, epoch, owned)
    return member


def _static_member(group: ConsumerGroup, member_id: str, epoch: int, instance_id: str, owned: Assignment | None,
                   joining: bool, records: list[CoordinatorRecord],
                   replacing: dict[str, ConsumerGroupMember | None], *, classic: bool = False) -> ConsumerGroupMember:
    existing = group.static_member(instance_id)
    if classic:
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        if existing.member_id == member_id:
            return existing
    elif not joining:
        _check_static(group, existing, member_id, instance_id)
        _check_epoch(existing, epoch, owned)
        return existing
    if existing is None:
        return group.members.get(member_id) or ConsumerGroupMember(member_id)
    if existing.member_id == member_id:
        # The instance's own member rejoining (see the module doc: Kafka's open fix).
        if existing.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return existing.replace(member_epoch=0, previous_member_epoch=0)
        return existing
    # A classic static member replaces its predecessor whatever that one's state, as in a
    # classic group; two consumer-protocol members need the old one gone with epoch -2.
    if not classic and not existing.uses_classic_protocol and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise GroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                         f"Static member {member_id} with instance id {instance_id} cannot join the group because "
                         f"the instance id is owned by {existing.member_id} member.")
    # Replace the departed static member: the newcomer takes over its subscription and assignment.
    newcomer = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
    records.extend(rec.remove_member(group.group_id, existing.member_id))
    records.append(rec.member_subscription(group.group_id, newcomer))
    records.append(rec.target_assignment(group.group_id, member_id, group.target_of(existing.member_id)))
    records.append(rec.current_assignment(group.group_id, newcomer))
    replacing[existing.member_id] = None
    return newcomer


def _check_static(group: ConsumerGroup, member: ConsumerGroupMember | None, member_id: str, instance_id: str) -> None:
    if member is None:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if member.member_id != member_id:
        raise GroupError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                         f"was fenced by member {member.member_id}.")


def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: Assignment | None) -> None:
    """Kafka ``throwIfConsumerGroupMemberEpochIsInvalid``: 0 always rejoins."""
    if epoch == 0 or epoch == member.member_epoch:
        return
    if epoch > member.member_epoch:
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                         f"({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                         "The member must abandon all its partitions and rejoin.")
    if epoch != member.previous_member_epoch or not is_subset(owned, member.assigned):
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                         f"({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                         "The member must abandon all its partitions and rejoin.")


def _update_regexes(ctx: Context, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                    replacing: Mapping[str, ConsumerGroupMember | None], records: list[CoordinatorRecord]
                    ) -> tuple[_RegexUpdate, dict[str, ResolvedRegex]]:
    """Kafka ``maybeUpdateRegularExpressions``, resolving a new regex at once."""
    resolved = dict(group.resolved_regexes)
    old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
    if old == new:
        return _RegexUpdate.NO_CHANGE, resolved
    update = _RegexUpdate.UPDATED
    subscribers = group.regex_subscribers()
    if old and subscribers[old] == 1:
        records.append(rec.regular_expression_tombstone(group.group_id, old))
        resolved.pop(old, None)
    if new:
        if subscribers[new] == 0:
            try:
                compile_topic_regex(new)
            except InvalidRegex as e:
                raise GroupError(ErrorCode.INVALID_REGULAR_EXPRESSION, str(e)) from None
            # Resolve every regex of the group together, as Kafka's refresh does.
            regexes = sorted(group.regex_subscribers(replacing))
            fresh = resolve(regexes, ctx.image.names(), ctx.topics_version, ctx.now_ms)
            for regex in regexes:
                records.append(rec.regular_expression(group.group_id, regex, fresh[regex]))
            resolved.update(fresh)
            update = _RegexUpdate.UPDATED_AND_RESOLVED
        elif new in resolved:
            update = _RegexUpdate.UPDATED_AND_RESOLVED
    elif old:
        update = _RegexUpdate.UPDATED_AND_RESOLVED
    return update, resolved


def _new_targets(ctx: Context, group: ConsumerGroup, group_epoch: int, replacing: Mapping[str, ConsumerGroupMember | None],
                 resolved: Mapping[str, ResolvedRegex], records: list[CoordinatorRecord]) -> dict[str, Assignment]:
    default = ctx.settings.assignors[0]
    name = group.preferred_assignor(replacing) or default
    assignor = ctx.assignors.get(name) or ctx.assignors[default]
    try:
        targets, target_records = build_target_assignment(group, group_epoch, assignor, ctx.image, replacing, resolved)
    except Exception as e:      # an assignor bug must not take the coordinator down
        raise GroupError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"Failed to compute a new target assignment for epoch {group_epoch}: {e}") from e
    records.extend(target_records)
    return targets
