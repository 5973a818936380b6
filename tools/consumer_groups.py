"""``sundial consumer-groups``: list, describe (with lag in time), reset offsets, delete
(kafka-consumer-groups.sh's flags), for groups of both types: ``classic`` (JoinGroup/SyncGroup)
and ``consumer`` (Kafka 4's consumer rebalance protocol, KIP-848).

``--list`` prints the group ids; ``--type [TYPES]`` and ``--state [STATES]`` add the
``TYPE`` and ``STATE`` columns and, given values (comma-separated, case-insensitive), keep
only those types (classic, consumer) and states (ListGroups v5 filters), as Kafka 4's tool.

A group is described as Kafka's admin client describes it (:func:`tools.wire.describe_group`):
ConsumerGroupDescribe, then DescribeGroups for a classic group. ``--members`` prints
``GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS`` (the instance id column
only when a member has one); ``--verbose`` adds ``CURRENT-EPOCH CURRENT-ASSIGNMENT
TARGET-EPOCH TARGET-ASSIGNMENT`` (a member's epoch and current assignment, the group's
target-assignment epoch and the member's target assignment; ``-`` for classic members) and,
when classic and consumer-protocol members share a group, ``UPGRADED``. Assignments read
``topic:0,1;other:2``. ``--state`` prints ``GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE
#MEMBERS``; ``--verbose`` adds ``GROUP-EPOCH`` and ``TARGET-ASSIGNMENT-EPOCH`` before
``#MEMBERS`` (``-`` for a classic group). A group in a rebalancing state (PreparingRebalance,
CompletingRebalance, Assigning, Reconciling) gets Kafka's warning on stderr.

``--describe`` prints Kafka's columns ``GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG`` plus ``TIME-LAG-MS`` and then ``CONSUMER-ID HOST CLIENT-ID``.
The lag in time is how old the oldest record the group has not consumed is: now minus
the timestamp of the first record at or after the committed offset (from the log start
offset when the commit is below it), 0 when the group is caught up, ``-`` when unknown
(as ``broker.groups.lag`` computes it inside Sundial). It is measured over the wire, so
it works against any Kafka-compatible broker.

``--reset-offsets`` computes new committed offsets and prints them (``GROUP TOPIC
PARTITION NEW-OFFSET``, then the offset it replaces); it commits only with ``--execute`` (``--dry-run`` is the
default), and only while the group is inactive (Empty or Dead), as Kafka requires.
Scenarios (Kafka's):

* ``--to-earliest`` / ``--to-latest`` – the log start / log end offset;
* ``--to-offset N`` – N, clamped to [log start, log end];
* ``--to-datetime T`` – offsetsForTimes(T): the first record at or after T, or the log
  end offset when none is (T: ms, ISO-8601 where no offset means UTC, ``now-15m``);
* ``--by-duration D`` – as ``--to-datetime`` with T = now − D (``PT15M``, ``15m``);
* ``--shift-by N`` – committed offset + N (N may be negative), clamped;
* ``--to-current`` – the committed offset, unchanged.

Partitions: ``--topic T`` (every partition) or ``--topic T:0,2``, repeatable, or
``--all-topics`` (every topic the group has committed offsets for).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from kafka import TopicPartition
from kafka.errors import IncompatibleBrokerVersion, KafkaError, NoError

from .common import EXIT_ERROR, GROUP_RESET_HELP, ClientSettings, ToolError, add_group_tool_arguments, \
    check_reset_arguments, check_view_arguments, delete_groups, describe_error, format_table, now_ms, parse_names, \
    parse_partitions, tool_command
from .timeparse import TimeFormatError, parse_datetime_ms, parse_duration_ms
from .wire import GROUP_TYPE_CLASSIC, GROUP_TYPE_CONSUMER, GroupView, committed_offsets, commit_offsets, \
    describe_group, list_offsets, record_timestamps, require_inactive, topic_partition_counts

EPILOG = """examples:
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --list
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --list --type consumer --state
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group billing --members --verbose
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group billing --state --verbose
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group billing
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group billing \\
      --topic orders --to-datetime 2026-11-22T06:00:00Z            (dry run: prints the plan)
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group billing \\
      --all-topics --by-duration 15m --execute
  sundial consumer-groups --bootstrap-server 127.0.0.1:9092 --delete --group billing"""

SCENARIOS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration", "shift_by", "to_current")

#: Group types ``--type`` takes (Kafka 4's tool: the consumer group types), in Kafka's spelling.
GROUP_TYPES = (GROUP_TYPE_CLASSIC, GROUP_TYPE_CONSUMER)
#: Group states ``--list --state`` takes (Kafka ``GroupState.groupStatesForType(CONSUMER)``).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
#: States in which Kafka's tool warns that the group is rebalancing.
REBALANCING_STATES = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "consumer-groups", help="list, describe (lag in offsets and time), reset offsets, delete groups",
        description="Consumer groups of both types (classic, and consumer: Kafka 4's rebalance protocol) on any "
                    "Kafka-compatible broker, with kafka-consumer-groups.sh's flags. "
                    "--describe adds TIME-LAG-MS (now minus the timestamp of the oldest unconsumed record). "
                    "--reset-offsets is a dry run unless --execute is given.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_group_tool_arguments(p, {
        **GROUP_RESET_HELP,
        "--list": "list the groups",
        "--describe": "describe groups (offsets and lag by default)",
        "--reset-offsets": "reset a group's committed offsets",
        "--delete": "delete groups (they must have no members)",
        "--delete-offsets": "delete a group's committed offsets of the given --topic partitions",
        "--group": "group id (repeatable)",
        "--all-groups": "every group (with --describe, --delete)",
        "--offsets": "describe: offsets and lag (the default)",
        "--members": "describe: members and their partition counts",
        "--state": "describe: coordinator, assignment strategy, state, member count; with --list: "
                   "show each group's state, only these states if given (comma-separated)",
        "--type": "with --list: show each group's type (classic, consumer), only these types if given "
                  "(comma-separated)",
        "--verbose": "describe --members: epochs, current and target assignment of each member; "
                     "describe --state: group epoch and target assignment epoch",
        "--topic": "reset/delete offsets of this topic, or of some partitions: orders:0,2 (repeatable)",
        "--all-topics": "reset offsets of every topic the group has committed offsets for",
        "--to-offset": "reset to OFFSET (clamped to the log)",
        "--shift-by": "move the committed offsets by N (may be < 0)",
        "--to-current": "keep the committed offsets",
        "--execute": "commit the new offsets",
    })
    p.set_defaults(func=run)


@tool_command("consumer-groups")
def run(args) -> int:
    _check_args(args)
    settings = ClientSettings.from_args(args)
    with settings.admin_session() as admin:
        if args.list:
            return _list(admin, args)
        groups = _groups(admin, args)
        if args.describe:
            return _describe(admin, settings, groups, args)
        if args.reset_offsets:
            return _reset(admin, groups, args)
        if args.delete:
            return _delete(admin, groups)
        return _delete_offsets(admin, groups[0], args)


def _check_args(args) -> None:
    check_reset_arguments(args, SCENARIOS, EXIT_ERROR)
    if args.reset_offsets and not args.group and not args.all_groups:
        raise ToolError("--reset-offsets needs --group")
    if args.delete_offsets:
        if len(args.group) != 1:
            raise ToolError("--delete-offsets needs exactly one --group")
        if not args.topic:
            raise ToolError("--delete-offsets needs --topic TOPIC[:PARTITIONS]")
    check_view_arguments(args, EXIT_ERROR)
    if args.type is not None and not args.list:
        raise ToolError("--type only goes with --list")
    if args.verbose and not args.describe:
        raise ToolError("--verbose only goes with --describe")
    if args.list:
        parse_types(args.type)
        parse_states(args.state)


def parse_types(text: str | None) -> list[str]:
    """``--type`` values: [] for every type."""
    return parse_names(text, GROUP_TYPES, "type")


def parse_states(text: str | None) -> list[str]:
    """``--list --state`` values: [] for every state."""
    return parse_names(text, GROUP_STATES, "state")


def _all_group_ids(admin) -> list[dict]:
    return sorted(admin.list_groups(), key=lambda g: g["group_id"])


def _groups(admin, args) -> list[str]:
    if args.all_groups:
        groups = [g["group_id"] for g in _all_group_ids(admin)]
        if not groups:
            raise ToolError("there are no consumer groups")
        return groups
    out: list[str] = []
    for g in args.group:
        if g not in out:
            out.append(g)
    return out


def list_rows(groups: list[dict], *, with_type: bool, with_state: bool) -> tuple[list[str], list[tuple]]:
    """Headers and rows of ``--list --type/--state`` from ListGroups entries (sorted by group id)."""
    headers = ["GROUP"] + (["TYPE"] if with_type else []) + (["STATE"] if with_state else [])
    rows = []
    for g in sorted(groups, key=lambda g: g["group_id"]):
        row = [g["group_id"]]
        if with_type:
            row.append(_group_type(g))
        if with_state:
            row.append(g.get("group_state") or "Unknown")
        rows.append(tuple(row))
    return headers, rows


def _group_type(listed: dict) -> str:
    """A ListGroups entry's type; before v5 (no GroupType) a group with the consumer protocol
    type or none is classic, as Kafka's admin client reads it."""
    if listed.get("group_type"):
        return listed["group_type"]
    return GROUP_TYPE_CLASSIC if (listed.get("protocol_type") or "") in ("", "consumer") else "Unknown"


def _list(admin, args) -> int:
    types, states = parse_types(args.type), parse_states(args.state)
    if args.type is None and args.state is None:
        for g in _all_group_ids(admin):
            print(g["group_id"])
        return 0
    try:
        groups = admin.list_groups(states_filter=states or None, types_filter=types or None)
    except IncompatibleBrokerVersion:
        raise ToolError(f"the broker cannot filter groups by {'type' if types else 'state'} "
                        f"(it does not serve ListGroups v{5 if types else 4})") from None
    except KafkaError as exc:
        raise ToolError(f"listing groups failed: {type(exc).__name__}: {describe_error(exc)}") from None
    headers, rows = list_rows(groups, with_type=args.type is not None, with_state=args.state is not None)
    print(format_table(headers, rows))
    return 0


# -- describe ------------------------------------------------------------------------------------------


def assignment_text(pairs) -> str:
    """Kafka's tool's assignment cell: ``topic:0,1;other:2`` (topics and partitions sorted), ``-`` if none."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in pairs:
        by_topic[topic].append(partition)
    if not by_topic:
        return "-"
    return ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items()))


def member_rows(view: GroupView, *, verbose: bool) -> tuple[list[str], list[tuple]]:
    """``--describe --members`` headers and rows (Kafka 4's kafka-consumer-groups.sh columns)."""
    with_instance = any(m.instance_id for m in view.members)
    upgraded = {m.upgraded for m in view.members}
    with_upgraded = verbose and {True, False} <= upgraded
    headers = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        headers += ["UPGRADED"] if with_upgraded else []
    rows = []
    for m in view.members:
        row = [view.group_id, m.member_id] + ([m.instance_id or "-"] if with_instance else []) + \
            [m.host or "-", m.client_id or "-", len(m.assignment)]
        if verbose:
            consumer_member = m.member_epoch is not None
            row += [m.member_epoch if consumer_member else None, assignment_text(m.assignment),
                    view.assignment_epoch if consumer_member else None,
                    assignment_text(m.target_assignment) if consumer_member else "-"]
            if with_upgraded:
                row.append("-" if m.upgraded is None else str(m.upgraded).lower())
        rows.append(tuple(row))
    return headers, rows


def state_rows(view: GroupView, coordinator: str, *, verbose: bool) -> tuple[list[str], list[tuple]]:
    """``--describe --state`` headers and the group's row (epochs with ``--verbose``)."""
    headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [view.group_id, coordinator, view.assignor or "-", view.state]
    if verbose:
        headers += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [view.group_epoch, view.assignment_epoch]
    return headers + ["#MEMBERS"], [tuple(row + [len(view.members)])]


def group_lag_rows(admin, settings: ClientSettings, view: GroupView, now: int) -> list[tuple]:
    """Rows (group, topic, partition, current, log end, lag, time lag ms, consumer id, host, client id):
    every committed partition and every partition a member owns (its current assignment)."""
    group = view.group_id
    committed = committed_offsets(admin, group)
    owners = {tp: m for m in view.members for tp in m.assignment}
    tps = set(committed) | {TopicPartition(t, p) for (t, p) in owners}
    if not tps:
        return []
    existing = set(admin.list_topics())
    live = sorted(tp for tp in tps if tp.topic in existing)
    ends = list_offsets(admin, {tp: -1 for tp in live}) if live else {}
    starts = list_offsets(admin, {tp: -2 for tp in live}) if live else {}
    lookups = {}
    for tp in live:
        c = committed.get(tp)
        if c is not None and c < ends[tp].offset:
            lookups[tp] = max(c, starts[tp].offset)
    timestamps = record_timestamps(settings, lookups, exact=False) if lookups else {}
    rows = []
    for tp in sorted(tps):
        c = committed.get(tp)
        end = ends[tp].offset if tp in ends else None
        lag = max(end - c, 0) if c is not None and end is not None else None
        if c is None or end is None:
            time_lag = None
        elif c >= end:
            time_lag = 0
        else:
            ts = timestamps.get(tp)
            time_lag = None if ts is None else max(now - ts, 0)
        member = owners.get((tp.topic, tp.partition))
        rows.append((group, tp.topic, tp.partition, c, end, lag, time_lag,
                     member.member_id if member else None, member.host if member else None,
                     member.client_id if member else None))
    return rows


def _describe(admin, settings: ClientSettings, groups: list[str], args) -> int:
    blocks = []
    missing = []
    for group in groups:
        view = describe_group(admin, group)
        if view.state in REBALANCING_STATES:
            print(f"Warning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        if args.state is not None:
            if not view.exists:
                missing.append(group)
                continue
            headers, rows = state_rows(view, _coordinator_text(admin, view.coordinator_id), verbose=args.verbose)
            blocks.append(format_table(headers, rows))
            continue
        if args.members:
            if not view.exists:
                missing.append(group)
                continue
            if not view.members:
                print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
                continue
            headers, rows = member_rows(view, verbose=args.verbose)
            blocks.append(format_table(headers, rows))
            continue
        rows = group_lag_rows(admin, settings, view, now_ms())
        if not rows:
            if not view.exists:
                missing.append(group)
            else:
                print(f"Consumer group '{group}' has no committed offsets and no assigned partitions.",
                      file=sys.stderr)
            continue
        if not view.members:
            print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
        blocks.append(format_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                    "TIME-LAG-MS", "CONSUMER-ID", "HOST", "CLIENT-ID"), rows))
    if blocks:
        print("\n\n".join(blocks))
    if missing:
        raise ToolError(f"consumer group {missing[0]!r} does not exist")
    return 0


def _coordinator_text(admin, node_id: int | None) -> str:
    """``host:port (id)`` of the group's coordinator (the first broker when it is unknown)."""
    try:
        brokers = sorted(admin._manager.cluster.brokers(), key=lambda b: b.node_id)  # kafka-python's cluster view
        chosen = [b for b in brokers if b.node_id == node_id] or brokers[:1]
        b = chosen[0]
        return f"{b.host}:{b.port} ({b.node_id})"
    except Exception:  # noqa: BLE001 - cosmetic only
        return "-"


# -- reset ---------------------------------------------------------------------------------------------


def _parse_topic_partitions(admin, specs: list[str]) -> list:
    wanted: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, _, parts = spec.partition(":")
        topic = topic.strip()
        if not topic:
            raise ToolError(f"bad --topic {spec!r}; use TOPIC or TOPIC:0,1")
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


def compute_reset(admin, group: str, tps: list, args, committed: dict, now: int) -> dict:
    """``{TopicPartition: new offset}`` for one group (Kafka's ResetOffsets rules)."""
    starts = list_offsets(admin, {tp: -2 for tp in tps})
    ends = list_offsets(admin, {tp: -1 for tp in tps})

    def clamp(tp, offset: int) -> int:
        return min(max(offset, starts[tp].offset), ends[tp].offset)

    if args.to_earliest:
        return {tp: starts[tp].offset for tp in tps}
    if args.to_latest:
        return {tp: ends[tp].offset for tp in tps}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in tps}
    if args.to_datetime is not None or args.by_duration is not None:
        try:
            if args.to_datetime is not None:
                target = parse_datetime_ms(args.to_datetime, now_ms=now)
            else:
                target = max(now - parse_duration_ms(args.by_duration), 0)
        except TimeFormatError as exc:
            raise ToolError(str(exc)) from None
        found = list_offsets(admin, {tp: target for tp in tps})
        return {tp: (found[tp].offset if found[tp].offset >= 0 else ends[tp].offset) for tp in tps}
    if args.shift_by is not None or args.to_current:
        out = {}
        for tp in tps:
            if tp not in committed:
                raise ToolError(f"group {group!r} has no committed offset for {tp.topic}:{tp.partition} to "
                                f"{'shift' if args.shift_by is not None else 'keep'}")
            out[tp] = clamp(tp, committed[tp] + (args.shift_by or 0))
        return out
    raise ToolError("no reset scenario given")  # pragma: no cover - _check_args guarantees one


def _reset(admin, groups: list[str], args) -> int:
    # Parse the time first: a bad time is reported before any broker round trip.
    now = now_ms()
    try:
        if args.to_datetime is not None:
            parse_datetime_ms(args.to_datetime, now_ms=now)
        if args.by_duration is not None:
            parse_duration_ms(args.by_duration)
    except TimeFormatError as exc:
        raise ToolError(str(exc)) from None
    rows = []
    for group in groups:
        if args.execute:
            require_inactive(admin, group, "this broker")
        committed = committed_offsets(admin, group)
        if args.all_topics:
            existing = set(admin.list_topics())
            tps = sorted(tp for tp in committed if tp.topic in existing)
            if not tps:
                raise ToolError(f"group {group!r} has no committed offsets; name the partitions with --topic")
        else:
            tps = _parse_topic_partitions(admin, args.topic)
        new = compute_reset(admin, group, tps, args, committed, now)
        if args.execute:
            commit_offsets(admin, group, new)
        rows.extend((group, tp.topic, tp.partition, off, committed.get(tp)) for tp, off in sorted(new.items()))
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", "PREVIOUS-OFFSET"), rows))
    if not args.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)", file=sys.stderr)
    return 0


# -- delete ----------------------------------------------------------------------------------------------


def _delete(admin, groups: list[str]) -> int:
    return delete_groups(admin, groups, noun="group", listed_as="consumer groups")


def _delete_offsets(admin, group: str, args) -> int:
    tps = _parse_topic_partitions(admin, args.topic)
    try:
        results = admin.delete_group_offsets(group, tps)
    except KafkaError as exc:
        raise ToolError(f"deleting offsets of group {group!r} failed: {type(exc).__name__}: "
                        f"{describe_error(exc)}") from None
    rows = [(tp.topic, tp.partition, "Successful" if err is NoError else f"Error: {err.__name__}")
            for tp, err in sorted(results.items())]
    print(format_table(("TOPIC", "PARTITION", "STATUS"), rows))
    if any(err is not NoError for err in results.values()):
        raise ToolError(f"some offsets of group {group!r} could not be deleted")
    return 0
