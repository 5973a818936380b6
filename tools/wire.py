"""Look-ups over the wire shared by the tools, through kafka-python's clients.

* :func:`topic_partition_counts` – Metadata for named topics (unknown topic → ToolError);
* :func:`list_offsets` – ListOffsets for any spec: a timestamp >= 0 (offsetsForTimes),
  ``-1`` latest, ``-2`` earliest, ``-3`` max timestamp (sent at v7+ by
  ``KafkaAdminClient.list_partition_offsets``, which picks the lowest version able to
  carry the spec). "No record matches" is offset -1, timestamp -1, as on the wire;
* :func:`record_timestamps` – the timestamp of the record at given offsets (Fetch via
  a ``KafkaConsumer`` with manual assignment and no group), used for lag in time and
  for failover's T;
* :func:`describe_group` – one group of either type (:class:`GroupView`):
  ConsumerGroupDescribe for a consumer-protocol group (KIP-848), DescribeGroups for a classic
  one, as Kafka's admin client does (see the function);
* :func:`committed_offsets` – OffsetFetch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

from kafka import TopicPartition
from kafka.errors import IncompatibleBrokerVersion, KafkaError, NoError, TopicAuthorizationFailedError, \
    UnknownTopicOrPartitionError, for_code
from kafka.protocol.consumer import OffsetSpec
from kafka.structs import OffsetAndMetadata

from sundial.protocol.errors import ErrorCode
from sundial.protocol.schema_codec import ConsumerGroupDescribeRequest
from sundial.records.timestamps import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

from .common import ClientSettings, ToolError, close_quietly, describe_error, refusal


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
            raise refusal(code, operation="Describe", resource=f"topic {name!r}", doing=f"describe topic {name!r}")
        result[name] = len(info.get("partitions") or [])
    return result


def unknown_topic(admin, name: str, suffix: str = "") -> ToolError:
    """The error for a topic the listing does not show. The listing leaves out topics the principal
    may not describe; asked by name, Kafka answers TOPIC_AUTHORIZATION_FAILED for those (whether
    the topic exists or not), so that is ``not authorized`` rather than a misleading "unknown"."""
    try:
        infos = admin.describe_topics([name])
    except KafkaError:
        infos = []
    if any(info.get("error_code") == TopicAuthorizationFailedError.errno for info in infos):
        return ToolError(f"not authorized (Describe on topic {name!r})")
    return ToolError(f"unknown topic {name!r}{suffix}")


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
        topics = ", ".join(sorted({repr(tp.topic) for tp in specs}))
        raise refusal(exc, operation="Describe", resource=f"topic {topics}", doing="list offsets (ListOffsets)") \
            from None
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


GROUP_TYPE_CLASSIC = "classic"
GROUP_TYPE_CONSUMER = "consumer"
#: ConsumerGroupDescribe v1 ``MemberType``: 0 a classic member, 1 a consumer-protocol member.
_MEMBER_TYPE_UPGRADED = {0: False, 1: True}


@dataclass(frozen=True)
class MemberView:
    """One member as the tools show it; epochs and the target assignment only for the consumer protocol."""

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]                 # (topic, partition), sorted
    member_epoch: int | None = None
    target_assignment: tuple[tuple[str, int], ...] = ()
    upgraded: bool | None = None                            # consumer protocol (True) or classic (False)


@dataclass(frozen=True)
class GroupView:
    """A group of either type. ``group_type`` None and state ``Dead``: no such group."""

    group_id: str
    group_type: str | None
    state: str
    assignor: str                                           # classic: the protocol the members chose
    members: tuple[MemberView, ...] = ()
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    coordinator_id: int | None = None

    @property
    def exists(self) -> bool:
        return self.group_type is not None


def _pairs(topic_partitions) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((tp.topic_name, p) for tp in topic_partitions or () for p in tp.partitions or ()))


def consumer_group_view(described, coordinator_id: int | None = None) -> GroupView:
    """A :class:`GroupView` from one group of a ConsumerGroupDescribe response (error code 0)."""
    members = tuple(MemberView(
        member_id=m.member_id, instance_id=m.instance_id or None, client_id=m.client_id, host=m.client_host,
        assignment=_pairs(m.assignment.topic_partitions if m.assignment else ()), member_epoch=m.member_epoch,
        target_assignment=_pairs(m.target_assignment.topic_partitions if m.target_assignment else ()),
        upgraded=_MEMBER_TYPE_UPGRADED.get(getattr(m, "member_type", -1)))
        for m in described.members or ())
    return GroupView(described.group_id, GROUP_TYPE_CONSUMER, described.group_state, described.assignor_name or "",
                     members, described.group_epoch, described.assignment_epoch, coordinator_id)


def classic_group_view(group_id: str, info: dict, coordinator_id: int | None = None) -> GroupView:
    """A :class:`GroupView` from kafka-python's DescribeGroups answer for one group (no error)."""
    members = []
    for m in info.get("members") or ():
        assignment = m.get("member_assignment")
        parts = ()
        if isinstance(assignment, dict):
            parts = tuple(sorted((e["topic"], p) for e in assignment.get("assigned_partitions") or ()
                                 for p in e.get("partitions") or ()))
        members.append(MemberView(member_id=m.get("member_id") or "", instance_id=m.get("group_instance_id") or None,
                                  client_id=m.get("client_id") or "", host=m.get("client_host") or "",
                                  assignment=parts))
    state = info.get("group_state") or "Dead"
    group_type = None if state == "Dead" else GROUP_TYPE_CLASSIC
    return GroupView(group_id, group_type, state, info.get("protocol_data") or "", tuple(members),
                     coordinator_id=coordinator_id)


def _describe_error(group_id: str, exc: BaseException) -> ToolError:
    return refusal(exc, operation="Describe", resource=f"group {group_id!r}", doing=f"describe group {group_id!r}")


def describe_group(admin, group_id: str) -> GroupView:
    """One group of either type, as Kafka's admin client describes consumer groups.

    ConsumerGroupDescribe (API 69) first; a group it does not know (GROUP_ID_NOT_FOUND: a
    classic group, or none) or a broker without the API (before Kafka 3.7/KIP-848) is asked
    again with DescribeGroups, where an unknown group is Dead (v0-v5) or GROUP_ID_NOT_FOUND
    (v6+): both give a view with ``exists`` False. Other errors (authorization, coordinator)
    are a ToolError. kafka-python 3.0.12 has no ConsumerGroupDescribe: the request is Kafka's
    JSON schema from ``sundial.protocol`` sent through the admin client's own connections
    (its security settings, coordinator look-up and version negotiation).
    """
    try:
        coordinator_id = admin._manager.run(admin._find_coordinator_ids, [group_id]).get(group_id)

        async def ask():
            request = ConsumerGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False)
            return await admin._manager.send(request, node_id=coordinator_id)

        try:
            response = admin._manager.run(ask)
        except IncompatibleBrokerVersion:
            response = None
    except KafkaError as exc:
        raise _describe_error(group_id, exc) from None
    if response is not None:
        (described,) = [g for g in response.groups if g.group_id == group_id] or [None]
        code = described.error_code if described is not None else ErrorCode.UNKNOWN_SERVER_ERROR
        if code == ErrorCode.NONE:
            return consumer_group_view(described, coordinator_id)
        if code not in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
            error = for_code(code)(described.error_message or "") if described is not None else for_code(code)()
            raise _describe_error(group_id, error)
    try:
        info = admin.describe_groups([group_id], group_coordinator_id=coordinator_id).get(group_id) or {}
    except KafkaError as exc:
        raise _describe_error(group_id, exc) from None
    error = info.get("error")
    if error and "AuthorizationFailed" in error:
        raise ToolError(f"not authorized (Describe on group {group_id!r})")
    if error and "GroupIdNotFoundError" not in error:
        raise ToolError(f"cannot describe group {group_id!r}: {error}")
    if error:
        info = {"group_state": "Dead"}
    return classic_group_view(group_id, info, coordinator_id)


def group_description(admin, group_id: str) -> dict:
    """``group_state`` (``Dead`` for no such group) and ``group_type`` of a group of either type."""
    view = describe_group(admin, group_id)
    return {"group_id": group_id, "group_state": view.state, "group_type": view.group_type}


def committed_offsets(admin, group_id: str) -> dict:
    """``{TopicPartition: committed offset}`` of a group (empty when it has none)."""
    try:
        raw = admin.list_group_offsets({group_id: None})
    except KafkaError as exc:
        raise refusal(exc, operation="Describe", resource=f"group {group_id!r}",
                      doing=f"read committed offsets of group {group_id!r}") from None
    offsets = raw.get(group_id, {})
    return {tp: oam.offset for tp, oam in offsets.items() if oam.offset is not None and oam.offset >= 0}


INACTIVE_STATES = ("Empty", "Dead")


def require_inactive(admin, group_id: str, where: str) -> str:
    """Raise unless the group has no live members (Kafka's rule for resetting offsets)."""
    state = describe_group(admin, group_id).state
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
        raise refusal(exc, operation="Read", resource=f"group {group_id!r}",
                      doing=f"commit offsets for group {group_id!r}") from None
    failed = {tp: err for tp, err in results.items() if err is not NoError}
    if failed:
        first_tp, first_err = sorted(failed.items())[0]
        raise ToolError(f"committing offsets for group {group_id!r} failed for {len(failed)} partition(s), "
                        f"e.g. {first_tp.topic}:{first_tp.partition}: {first_err.__name__}")
