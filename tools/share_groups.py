"""``sundial share-groups``: list, describe, reset and delete share groups (KIP-932), with
kafka-share-groups.sh's options (Kafka 4.2).

* ``--list`` prints the share groups' ids (ListGroups with type ``share``); ``--state [STATES]``
  adds the ``STATE`` column and, given states (comma-separated, case-insensitive), keeps only those.
* ``--describe --group G`` (or ``--all-groups``): ``--offsets`` (the default) prints ``GROUP TOPIC
  PARTITION START-OFFSET LAG`` — the share-partition start offset (SPSO: every record before it is
  acknowledged or archived) and the share lag (KIP-1226: records from the SPSO on not yet
  acknowledged or archived, ``-`` when unknown); ``--verbose`` adds ``LEADER-EPOCH``. ``--members``
  prints ``GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT`` (``--verbose`` adds
  ``MEMBER-EPOCH``); ``--state`` prints ``GROUP COORDINATOR (ID) STATE #MEMBERS`` (``--verbose``
  adds ``GROUP-EPOCH ASSIGNMENT-EPOCH``).
* ``--reset-offsets --group G`` with ``--topic T[:P,...]`` (repeatable) or ``--all-topics`` (every
  topic the group has a start offset on) and one scenario: ``--to-earliest``, ``--to-latest``,
  ``--to-datetime T`` (the first record at or after T, the log end when none is), ``--by-duration D``
  (the same with T = now - D). It prints ``GROUP TOPIC PARTITION NEW-OFFSET``; only ``--execute``
  changes anything (``--dry-run`` is the default), and only while the group has no members
  (AlterShareGroupOffsets). The group need not exist yet: the offsets are where it will start.
* ``--delete --group G`` deletes empty share groups (DeleteGroups) with their state;
  ``--delete-offsets --group G --topic T`` deletes the group's state on the topics
  (DeleteShareGroupOffsets): it starts there again by ``share.auto.offset.reset``.

The share-group APIs (ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets) are Kafka's JSON schemas from ``sundial.protocol`` sent through
kafka-python's admin client connections (its security settings and coordinator look-up), so the
tool works against any broker that serves them.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from kafka import TopicPartition
from kafka.errors import IncompatibleBrokerVersion, KafkaError, for_code

from sundial.protocol.errors import ErrorCode
from sundial.protocol.schema_codec import (AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
                                           DescribeShareGroupOffsetsRequest, ShareGroupDescribeRequest)

from .common import EXIT_USAGE, GROUP_RESET_HELP, ClientSettings, ToolError, add_group_tool_arguments, \
    check_reset_arguments, check_view_arguments, delete_groups, describe_error, format_table, now_ms, parse_names, \
    parse_partitions, tool_command
from .timeparse import TimeFormatError, parse_datetime_ms, parse_duration_ms
from .wire import list_offsets, topic_partition_counts

EPILOG = """examples:
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --list --state
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --describe --group workers
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --describe --group workers --members --verbose
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group workers --topic jobs \\
      --to-datetime 2026-11-22T06:00:00Z                          (dry run: prints the plan)
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group workers --all-topics \\
      --by-duration 15m --execute
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --delete-offsets --group workers --topic jobs
  sundial share-groups --bootstrap-server 127.0.0.1:9092 --delete --group workers"""

SCENARIOS = ("to_earliest", "to_latest", "to_datetime", "by_duration")
#: Share-group states (Kafka ``GroupState.groupStatesForType(SHARE)``).
SHARE_GROUP_STATES = ("Stable", "Dead", "Empty")
INACTIVE_STATES = ("Empty", "Dead")
MISSING = "-"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "share-groups", help="list, describe (start offsets and lag), reset offsets, delete share groups",
        description="Share groups (KIP-932, Kafka's queues) on any broker that serves them, with "
                    "kafka-share-groups.sh's options. --reset-offsets is a dry run unless --execute is given.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_group_tool_arguments(p, {
        **GROUP_RESET_HELP,
        "--list": "list the share groups",
        "--describe": "describe share groups (start offsets by default)",
        "--reset-offsets": "set a share group's start offsets",
        "--delete": "delete share groups (they must have no members)",
        "--delete-offsets": "delete a share group's state on the --topic topics",
        "--group": "share group id (repeatable)",
        "--all-groups": "every share group (with --describe, --delete)",
        "--offsets": "describe: start offsets and lag (the default)",
        "--members": "describe: members and their assignments",
        "--state": "describe: coordinator, state, member count; with --list: show each group's state, "
                   "only these states if given (comma-separated: Stable, Empty, Dead)",
        "--verbose": "describe --offsets: leader epochs; --members: member epochs; --state: group and "
                     "assignment epochs",
        "--topic": "reset offsets of this topic or of some partitions (orders:0,2), or delete the offsets "
                   "of this topic (repeatable)",
        "--all-topics": "reset offsets of every topic the group has start offsets on",
        "--execute": "set the new offsets",
    })
    p.set_defaults(func=run)


@tool_command("share-groups")
def run(args) -> int:
    check_args(args)
    settings = ClientSettings.from_args(args)
    with settings.admin_session() as admin:
        if args.list:
            return _list(admin, args)
        groups = _groups(admin, args)
        if args.describe:
            return _describe(admin, groups, args)
        if args.reset_offsets:
            return _reset(admin, groups[0], args)
        if args.delete:
            return _delete(admin, groups)
        return _delete_offsets(admin, groups[0], args)


def check_args(args) -> None:
    check_reset_arguments(args, SCENARIOS, EXIT_USAGE)
    if args.reset_offsets and (len(args.group) != 1 or args.all_groups):
        raise ToolError("--reset-offsets needs exactly one --group", EXIT_USAGE)
    if args.delete_offsets:
        if len(args.group) != 1:
            raise ToolError("--delete-offsets needs exactly one --group", EXIT_USAGE)
        if not args.topic:
            raise ToolError("--delete-offsets needs --topic TOPIC", EXIT_USAGE)
        if any(":" in t for t in args.topic):
            raise ToolError("--delete-offsets deletes whole topics: give --topic TOPIC without partitions",
                            EXIT_USAGE)
    check_view_arguments(args, EXIT_USAGE)
    if args.verbose and not args.describe:
        raise ToolError("--verbose only goes with --describe", EXIT_USAGE)
    if args.list:
        parse_states(args.state)


def parse_states(text: str | None) -> list[str]:
    """``--list --state`` values, matched case-insensitively (Kafka's spelling kept); [] for all."""
    return parse_names(text, SHARE_GROUP_STATES, "state")


# -- requests ------------------------------------------------------------------------------------------

def _send(admin, group_id: str, request, what: str):
    """Send ``request`` to the group's coordinator; KafkaError → ToolError."""
    try:
        coordinator_id = admin._manager.run(admin._find_coordinator_ids, [group_id]).get(group_id)

        async def ask():
            return await admin._manager.send(request, node_id=coordinator_id)

        return admin._manager.run(ask), coordinator_id
    except IncompatibleBrokerVersion:
        raise ToolError(f"the broker does not serve {type(request).__name__[:-7]}: it has no share groups") from None
    except KafkaError as exc:
        raise ToolError(f"{what} failed: {type(exc).__name__}: {describe_error(exc)}") from None


def _error(code: int, message: str | None) -> str:
    name = for_code(code).__name__
    return f"{name}: {message}" if message else name


def _refuse_error(answer, doing: str) -> None:
    """An answer's top-level error, as ``<doing> failed: ...``."""
    if answer.error_code:
        raise ToolError(f"{doing} failed: {_error(answer.error_code, answer.error_message)}")


def _refuse_partition_errors(topics, doing: str) -> None:
    """The first partition error of a response's ``topics``, as ``<doing> on topic:partition failed: ...``."""
    for topic in topics or ():
        for p in topic.partitions or ():
            _refuse_error(p, f"{doing} on {topic.topic_name}:{p.partition_index}")


def describe_share_group(admin, group_id: str):
    """(the ShareGroupDescribe entry or None when there is no such share group, coordinator id)."""
    response, coordinator_id = _send(admin, group_id, ShareGroupDescribeRequest(
        group_ids=[group_id], include_authorized_operations=False), f"describing share group {group_id!r}")
    (described,) = [g for g in response.groups if g.group_id == group_id] or [None]
    if described is None:
        raise ToolError(f"describing share group {group_id!r} failed: no answer for the group")
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None, coordinator_id
    _refuse_error(described, f"describing share group {group_id!r}")
    if described.group_state == "Dead":
        return None, coordinator_id
    return described, coordinator_id


def start_offsets(admin, group_id: str) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, start offset, leader epoch, lag) of every share-partition with state, sorted."""
    request = DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None)])
    response, _ = _send(admin, group_id, request, f"describing offsets of share group {group_id!r}")
    rows = []
    for group in response.groups:
        _refuse_error(group, f"describing offsets of share group {group_id!r}")
        _refuse_partition_errors(group.topics, f"describing offsets of share group {group_id!r}")
        for topic in group.topics or ():
            for p in topic.partitions or ():
                if p.start_offset >= 0:
                    rows.append((topic.topic_name, p.partition_index, p.start_offset, p.leader_epoch,
                                 getattr(p, "lag", -1)))
    return sorted(rows)


# -- list -------------------------------------------------------------------------------------------------

def _list(admin, args) -> int:
    states = parse_states(args.state)
    try:
        groups = admin.list_groups(states_filter=states or None, types_filter=["share"])
    except IncompatibleBrokerVersion:
        raise ToolError("the broker cannot list share groups (it does not serve ListGroups v5)") from None
    except KafkaError as exc:
        raise ToolError(f"listing groups failed: {type(exc).__name__}: {describe_error(exc)}") from None
    groups = sorted(groups, key=lambda g: g["group_id"])
    if args.state is None:
        for g in groups:
            print(g["group_id"])
        return 0
    print(format_table(("GROUP", "STATE"), [(g["group_id"], g.get("group_state") or "Unknown") for g in groups]))
    return 0


def _groups(admin, args) -> list[str]:
    if args.all_groups:
        try:
            groups = sorted(g["group_id"] for g in admin.list_groups(types_filter=["share"]))
        except KafkaError as exc:
            raise ToolError(f"listing groups failed: {type(exc).__name__}: {describe_error(exc)}") from None
        if not groups:
            raise ToolError("there are no share groups")
        return groups
    return list(dict.fromkeys(args.group))


# -- describe ---------------------------------------------------------------------------------------------

def assignment_text(topic_partitions) -> str:
    """``topic:0,1;other:2`` (sorted), ``-`` when empty (Kafka's tool's ASSIGNMENT cell)."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in topic_partitions or ():
        by_topic[tp.topic_name].extend(tp.partitions or ())
    if not by_topic:
        return MISSING
    return ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items()))


def offset_rows(group_id: str, offsets, *, verbose: bool) -> tuple[list[str], list[tuple]]:
    headers = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
    rows = []
    for topic, partition, start, epoch, lag in offsets:
        rows.append(tuple([group_id, topic, partition] + ([epoch if epoch >= 0 else MISSING] if verbose else [])
                          + [start, lag if lag is not None and lag >= 0 else MISSING]))
    return headers, rows


def member_rows(described, *, verbose: bool) -> tuple[list[str], list[tuple]]:
    headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["MEMBER-EPOCH"] if verbose else []) \
        + ["ASSIGNMENT"]
    rows = []
    for m in sorted(described.members or (), key=lambda m: m.member_id):
        parts = m.assignment.topic_partitions if m.assignment else ()
        count = sum(len(tp.partitions or ()) for tp in parts or ())
        rows.append(tuple([described.group_id, m.member_id, m.client_host or MISSING, m.client_id or MISSING, count]
                          + ([m.member_epoch] if verbose else []) + [assignment_text(parts)]))
    return headers, rows


def state_rows(described, coordinator: str, *, verbose: bool) -> tuple[list[str], list[tuple]]:
    headers = ["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else []) \
        + ["#MEMBERS"]
    row = [described.group_id, coordinator, described.group_state]
    if verbose:
        row += [described.group_epoch, described.assignment_epoch]
    return headers, [tuple(row + [len(described.members or ())])]


def _coordinator_text(admin, node_id: int | None) -> str:
    try:
        brokers = sorted(admin._manager.cluster.brokers(), key=lambda b: b.node_id)  # kafka-python's cluster view
        b = ([b for b in brokers if b.node_id == node_id] or brokers[:1])[0]
        return f"{b.host}:{b.port} ({b.node_id})"
    except Exception:  # noqa: BLE001 - cosmetic only
        return MISSING


def _describe(admin, groups: list[str], args) -> int:
    blocks = []
    missing = []
    for group in groups:
        described, coordinator_id = describe_share_group(admin, group)
        if described is None:
            missing.append(group)
            continue
        if args.state is not None:
            headers, rows = state_rows(described, _coordinator_text(admin, coordinator_id), verbose=args.verbose)
        elif args.members:
            if not described.members:
                print(f"Share group '{group}' has no active members.", file=sys.stderr)
                continue
            headers, rows = member_rows(described, verbose=args.verbose)
        else:
            offsets = start_offsets(admin, group)
            if not offsets:
                print(f"Share group '{group}' has no offset information.", file=sys.stderr)
                continue
            headers, rows = offset_rows(group, offsets, verbose=args.verbose)
        blocks.append(format_table(headers, rows))
    if blocks:
        print("\n\n".join(blocks))
    if missing:
        raise ToolError(f"share group {missing[0]!r} does not exist")
    return 0


# -- reset ------------------------------------------------------------------------------------------------

def _partitions(admin, specs: list[str]) -> list[TopicPartition]:
    wanted: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, _, parts = spec.partition(":")
        topic = topic.strip()
        if not topic:
            raise ToolError(f"bad --topic {spec!r}; use TOPIC or TOPIC:0,1", EXIT_USAGE)
        partitions = parse_partitions(parts) if parts.strip() else None
        if topic not in wanted:
            wanted[topic] = partitions
        elif wanted[topic] is None or partitions is None:
            wanted[topic] = None
        else:
            wanted[topic] = sorted(set(wanted[topic]) | set(partitions))
    counts = topic_partition_counts(admin, wanted)
    tps = []
    for topic, partitions in wanted.items():
        for p in range(counts[topic]) if partitions is None else partitions:
            if p >= counts[topic]:
                raise ToolError(f"topic {topic!r} has no partition {p} (it has {counts[topic]})")
            tps.append(TopicPartition(topic, p))
    return sorted(tps)


def compute_reset(admin, tps: list[TopicPartition], args, now: int) -> dict[TopicPartition, int]:
    """``{TopicPartition: new start offset}`` (Kafka's ``OffsetsUtils`` rules for each scenario)."""
    if args.to_earliest:
        return {tp: at.offset for tp, at in list_offsets(admin, {tp: -2 for tp in tps}).items()}
    ends = list_offsets(admin, {tp: -1 for tp in tps})
    if args.to_latest:
        return {tp: at.offset for tp, at in ends.items()}
    try:
        if args.to_datetime is not None:
            target = parse_datetime_ms(args.to_datetime, now_ms=now)
        else:
            target = max(now - parse_duration_ms(args.by_duration), 0)
    except TimeFormatError as exc:
        raise ToolError(str(exc), EXIT_USAGE) from None
    found = list_offsets(admin, {tp: target for tp in tps})
    return {tp: (found[tp].offset if found[tp].offset >= 0 else ends[tp].offset) for tp in tps}


def _reset(admin, group: str, args) -> int:
    now = now_ms()
    try:  # a bad time is reported before any round trip
        if args.to_datetime is not None:
            parse_datetime_ms(args.to_datetime, now_ms=now)
        if args.by_duration is not None:
            parse_duration_ms(args.by_duration)
    except TimeFormatError as exc:
        raise ToolError(str(exc), EXIT_USAGE) from None
    described, _ = describe_share_group(admin, group)
    if described is not None and described.group_state not in INACTIVE_STATES:
        raise ToolError(f"Share group '{group}' is not empty.")
    if args.all_topics:
        tps = sorted({TopicPartition(t, p) for t, p, *_ in start_offsets(admin, group)})
        if not tps:
            raise ToolError(f"share group {group!r} has no start offsets; name the partitions with --topic")
    else:
        tps = _partitions(admin, args.topic)
    new = compute_reset(admin, tps, args, now)
    if args.execute:
        _alter(admin, group, new)
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                       [(group, tp.topic, tp.partition, off) for tp, off in sorted(new.items())]))
    if not args.execute:
        print("(dry run: nothing was changed; add --execute to set these offsets)", file=sys.stderr)
    return 0


def _alter(admin, group: str, offsets: dict[TopicPartition, int]) -> None:
    by_topic: dict[str, list] = defaultdict(list)
    for tp, offset in sorted(offsets.items()):
        by_topic[tp.topic].append(AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
                                  .AlterShareGroupOffsetsRequestPartition(partition_index=tp.partition,
                                                                          start_offset=offset))
    request = AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
        for t, ps in by_topic.items()])
    response, _ = _send(admin, group, request, f"setting offsets of share group {group!r}")
    _refuse_error(response, f"setting offsets of share group {group!r}")
    _refuse_partition_errors(response.responses, f"setting the offset of share group {group!r}")


# -- delete -----------------------------------------------------------------------------------------------

def _delete(admin, groups: list[str]) -> int:
    return delete_groups(admin, groups, noun="share group", listed_as="share groups")


def _delete_offsets(admin, group: str, args) -> int:
    topics = list(dict.fromkeys(t.strip() for t in args.topic))
    request = DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
    response, _ = _send(admin, group, request, f"deleting offsets of share group {group!r}")
    _refuse_error(response, f"deleting offsets of share group {group!r}")
    results = {t.topic_name: (t.error_code, t.error_message) for t in response.responses or ()}
    rows = [(t, "Successful" if not results.get(t, (0, None))[0] else f"Error: {_error(*results[t])}")
            for t in sorted(results)]
    print(format_table(("TOPIC", "STATUS"), rows))
    if any(code for code, _ in results.values()):
        raise ToolError(f"some offsets of share group {group!r} could not be deleted")
    return 0
