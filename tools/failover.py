"""``sundial failover``: move a consumer group from cluster A to cluster B at T − X.

The disaster-recovery recipe of KIP-33's first draft (seed 001): two clusters hold
the same data, but their offsets differ. When the consumers of A must switch to B,
for each partition take the timestamp **T of the last record the group consumed on
A** (the record just before its committed offset), subtract a safety margin **X**
(the replication-latency difference between the clusters, e.g. 15 minutes), and
resume on B at offsetsForTimes(T − X): the first record of B whose timestamp is at
or after T − X. Nothing is lost as long as X covers the lag between the clusters;
the price is re-reading about X worth of records.

Per partition:

* committed offset ``c`` on A (OffsetFetch); ``c == 0`` means nothing consumed: B's
  log start offset;
* T = timestamp of the record at ``c − 1`` on A (Fetch); if that record is gone
  (retention), T is unknown and the command stops unless ``--at`` gives it;
* target = ListOffsets(T − X) on B, or B's log end offset when no record of B is that
  recent (nothing there to re-read).

A down: ``--at TIME`` gives T for every partition and A is not contacted (then
``--topics`` names the topics; every partition of each topic on B is moved).

The plan is printed first (``GROUP TOPIC PARTITION SOURCE-OFFSET LAST-CONSUMED-TIME
SEEK-TIME TARGET-OFFSET TARGET-RECORD-TIME NOTE``); ``--execute`` then commits the
target offsets for the group on B, which requires the group to be inactive on B (its
consumers there not yet started). Without ``--execute`` it is a dry run.
"""

from __future__ import annotations

import argparse
import sys

from kafka import TopicPartition

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_run_mode_arguments, \
    add_two_cluster_client_arguments, close_quietly, format_table, now_ms, read_client_properties, split_names, \
    tool_command
from .timeparse import DATETIME_HELP, DURATION_HELP, TimeFormatError, format_duration_ms, format_ms, \
    parse_datetime_ms, parse_duration_ms
from .wire import committed_offsets, commit_offsets, group_description, list_offsets, record_timestamps, \
    require_inactive, topic_partition_counts

EPILOG = """examples:
  sundial failover --source-bootstrap a:9092 --target-bootstrap b:9092 --group billing --safety 15m
  sundial failover --source-bootstrap a:9092 --target-bootstrap b:9092 --group billing --safety 15m --execute
  sundial failover --target-bootstrap b:9092 --group billing --topics orders,payments \\
      --at 2026-11-22T06:00:00Z --safety 15m --execute            (A is down)"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "failover", help="move a consumer group to cluster B, resuming at the time it reached on A minus a safety "
                         "margin",
        description="Commit offsets for a group on cluster B so that it resumes at T − X, where T is the "
                    "timestamp of the last record the group consumed on cluster A and X a safety margin. "
                    "Prints the plan; commits only with --execute.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p, "--source-bootstrap", required=False,
                           what="cluster A, where the group has consumed until now; not needed with --at")
    add_bootstrap_argument(p, "--target-bootstrap", what="cluster B, where the group resumes")
    p.add_argument("--group", required=True, help="the consumer group to move")
    p.add_argument("--target-group", help="commit on B under this group id instead (default: --group)")
    p.add_argument("--topics", action="append", default=[], metavar="TOPIC[,TOPIC...]",
                   help="only these topics (default: every topic the group committed on A; required with --at)")
    p.add_argument("--safety", required=True, metavar="DURATION",
                   help=f"X, the safety margin subtracted from T ({DURATION_HELP})")
    p.add_argument("--at", metavar="TIME",
                   help=f"T for every partition, when A cannot be read ({DATETIME_HELP})")
    add_run_mode_arguments(p, dry_run_help="only print the plan (the default)",
                           execute_help="commit the planned offsets on B")
    add_two_cluster_client_arguments(p)
    p.set_defaults(func=run)


class PlanRow:
    __slots__ = ("topic", "partition", "source_offset", "t_ms", "seek_ms", "target_offset", "target_ts", "note",
                 "commit")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.source_offset: int | None = None
        self.t_ms: int | None = None
        self.seek_ms: int | None = None
        self.target_offset: int | None = None
        self.target_ts: int | None = None
        self.note = ""
        self.commit = False


@tool_command("failover")
def run(args) -> int:
    now = now_ms()
    try:
        safety_ms = parse_duration_ms(args.safety)
        at_ms = parse_datetime_ms(args.at, now_ms=now) if args.at is not None else None
    except TimeFormatError as exc:
        raise ToolError(str(exc)) from None
    topics = split_names(args.topics)
    if at_ms is None and not args.source_bootstrap:
        raise ToolError("give --source-bootstrap (cluster A) or, when A is down, --at TIME with --topics")
    if at_ms is not None and not topics:
        raise ToolError("--at needs --topics (the group's commits on A are not read)")
    target_group = args.target_group or args.group
    target = ClientSettings(args.target_bootstrap, timeout_ms=args.timeout_ms, flag="--target-bootstrap",
                            extra=read_client_properties(args.target_command_config))
    source = None
    if at_ms is None:
        source = ClientSettings(args.source_bootstrap, timeout_ms=args.timeout_ms, flag="--source-bootstrap",
                                extra=read_client_properties(args.source_command_config))

    rows = _source_side(source, args.group, topics, at_ms) if source is not None else None
    admin_b = target.admin()
    try:
        if rows is None:
            counts = topic_partition_counts(admin_b, topics)
            rows = []
            for topic in topics:
                for p in range(counts[topic]):
                    row = PlanRow(topic, p)
                    row.t_ms = at_ms
                    row.note = "T from --at"
                    rows.append(row)
        _target_side(admin_b, rows, safety_ms)
        _print_plan(args, target_group, rows, safety_ms)
        unknown = [r for r in rows if not r.commit and r.note.startswith("T unknown")]
        if unknown:
            raise ToolError(f"T is unknown for {len(unknown)} partition(s) (their last consumed record is no longer "
                            f"on A); give it with --at TIME. Nothing was committed.")
        planned = {r: r.target_offset for r in rows if r.commit}
        if not planned:
            raise ToolError(f"nothing to move: group {args.group!r} has no committed offsets on A for these topics")
        if args.execute:
            require_inactive(admin_b, target_group, f"cluster B ({target.bootstrap})")
            commit_offsets(admin_b, target_group, {TopicPartition(r.topic, r.partition): off
                                                   for r, off in planned.items()})
            print(f"Committed {len(planned)} offset(s) for group {target_group} on {target.bootstrap}.")
        else:
            print("(dry run: nothing was committed; add --execute to commit these offsets on B)", file=sys.stderr)
    finally:
        close_quietly(admin_b)
    return 0


def _source_side(source: ClientSettings, group: str, topics: list[str], at_ms: int | None) -> list[PlanRow]:
    """Committed offsets of the group on A and T per partition."""
    admin_a = source.admin()
    try:
        desc = group_description(admin_a, group)
        state = desc.get("group_state") or "Dead"
        if state not in ("Empty", "Dead"):
            print(f"warning: group {group!r} is still {state} on A; its committed offsets may still move",
                  file=sys.stderr)
        committed = committed_offsets(admin_a, group)
        if topics:
            unknown = [t for t in topics if not any(tp.topic == t for tp in committed)]
            if unknown and not committed:
                raise ToolError(f"group {group!r} has no committed offsets on A ({source.bootstrap})")
            committed = {tp: off for tp, off in committed.items() if tp.topic in topics}
            for t in unknown:
                print(f"warning: group {group!r} has no committed offsets for topic {t!r} on A", file=sys.stderr)
        if not committed:
            raise ToolError(f"group {group!r} has no committed offsets on A ({source.bootstrap})")
        wanted = {tp: off - 1 for tp, off in committed.items() if off > 0}
        stamps = record_timestamps(source, wanted, exact=True) if wanted else {}
    finally:
        close_quietly(admin_a)
    rows = []
    for tp in sorted(committed):
        row = PlanRow(tp.topic, tp.partition)
        row.source_offset = committed[tp]
        if committed[tp] == 0:
            row.note = "nothing consumed on A: log start of B"
        else:
            row.t_ms = stamps.get(tp)
            if row.t_ms is None:
                row.note = f"T unknown: record {committed[tp] - 1} is no longer on A"
        rows.append(row)
    return rows


def _target_side(admin_b, rows: list[PlanRow], safety_ms: int) -> None:
    counts = topic_partition_counts(admin_b, sorted({r.topic for r in rows}))
    for r in rows:
        if r.partition >= counts[r.topic]:
            raise ToolError(f"topic {r.topic!r} has {counts[r.topic]} partition(s) on B, fewer than on A "
                            f"(partition {r.partition})")
    tps = [TopicPartition(r.topic, r.partition) for r in rows]
    starts = list_offsets(admin_b, {tp: -2 for tp in tps})
    ends = list_offsets(admin_b, {tp: -1 for tp in tps})
    seeks = {}
    for r, tp in zip(rows, tps):
        if r.t_ms is not None:
            r.seek_ms = max(r.t_ms - safety_ms, 0)
            seeks[tp] = r.seek_ms
    found = list_offsets(admin_b, seeks) if seeks else {}
    for r, tp in zip(rows, tps):
        if r.source_offset == 0 and r.t_ms is None:
            r.target_offset = starts[tp].offset
            r.commit = True
        elif r.seek_ms is not None:
            hit = found[tp]
            if hit.offset >= 0:
                r.target_offset, r.target_ts = hit.offset, hit.timestamp_ms
            else:
                r.target_offset = ends[tp].offset
                r.note = (r.note + "; " if r.note else "") + "no record of B at or after T − X: log end"
            r.commit = True


def _print_plan(args, target_group: str, rows: list[PlanRow], safety_ms: int) -> None:
    source = args.source_bootstrap if args.at is None else "(not read: --at)"
    print(f"Failover plan for group {args.group}: {source} -> {args.target_bootstrap} as group {target_group}, "
          f"safety {format_duration_ms(safety_ms)} ({safety_ms} ms)")
    table = []
    for r in sorted(rows, key=lambda r: (r.topic, r.partition)):
        table.append((args.group, r.topic, r.partition, r.source_offset,
                      format_ms(r.t_ms) if r.t_ms is not None else None,
                      format_ms(r.seek_ms) if r.seek_ms is not None else None,
                      r.target_offset, format_ms(r.target_ts) if r.target_ts is not None else None,
                      r.note or None))
    print(format_table(("GROUP", "TOPIC", "PARTITION", "SOURCE-OFFSET", "LAST-CONSUMED-TIME", "SEEK-TIME",
                        "TARGET-OFFSET", "TARGET-RECORD-TIME", "NOTE"), table))
