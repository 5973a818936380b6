"""``sundial get-offsets``: offsets at a time, in kafka-get-offsets.sh's format.

One line per partition, ``topic:partition:offset`` (``:timestamp`` appended with
``--with-timestamp``), sorted by topic then partition number. ``--time`` is
``latest`` (default), ``earliest``, ``max-timestamp``, ms since the epoch, ISO-8601
(no offset = UTC), ``now`` or ``now-DURATION``. For a time, the offset is the first
record whose timestamp is at or after it (ListOffsets / offsetsForTimes, answered by
the broker with Kafka's rules); **-1 when no record matches** (Kafka 3.x's tool leaves
such partitions out; the -1 line says "nothing at or after that time" explicitly).
``latest`` and ``earliest`` report timestamp -1, as the broker does.

Works against any Kafka-compatible broker; ``max-timestamp`` needs ListOffsets v7
(Kafka 3.0+; Sundial supports it).
"""

from __future__ import annotations

import argparse
import re

from kafka import TopicPartition

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, now_ms, parse_partitions, \
    tool_command
from .timeparse import TIME_HELP, TimeFormatError, parse_time_spec
from .wire import all_topics, list_offsets, topic_partition_counts, unknown_topic

EPILOG = """examples:
  sundial get-offsets --bootstrap-server 127.0.0.1:9092 --topic orders
  sundial get-offsets --bootstrap-server 127.0.0.1:9092 --topic orders --partitions 0,2 --time 2026-11-22T06:00:00Z
  sundial get-offsets --bootstrap-server 127.0.0.1:9092 --topic 'orders.*' --time now-15m --with-timestamp
  sundial get-offsets --bootstrap-server 127.0.0.1:9092 --topic orders --time max-timestamp

output: topic:partition:offset[:timestamp], -1 when no record is at or after the time."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "get-offsets", help="offsets of partitions at a time (kafka-get-offsets.sh)",
        description="Print the offset of each partition at a time, one line per partition: "
                    "topic:partition:offset. For a time, the offset is the first record whose timestamp "
                    "is at or after it (offsetsForTimes); -1 when no record matches.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p)
    p.add_argument("--topic", metavar="TOPIC",
                   help="topic name or regular expression (full match); default: every topic")
    p.add_argument("--partitions", metavar="LIST", help="partition ids, e.g. 0,1,4-6 (default: all)")
    p.add_argument("--time", default="latest", metavar="TIME", help=f"{TIME_HELP} (default: latest)")
    p.add_argument("--with-timestamp", action="store_true",
                   help="append :timestamp (the matched record's timestamp; -1 for earliest/latest)")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="leave out internal topics (__consumer_offsets) when matching a pattern")
    add_client_arguments(p)
    p.set_defaults(func=run)


def _matching_topics(admin, pattern: str | None, exclude_internal: bool) -> list[str]:
    names = all_topics(admin, include_internal=not exclude_internal)
    if pattern is None:
        return names
    if pattern in names:
        return [pattern]
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"--topic {pattern!r} is neither a topic nor a valid regular expression ({exc})") from None
    matched = [n for n in names if regex.fullmatch(n)]
    if not matched:
        raise unknown_topic(admin, pattern, " (no topic matches it)")
    return matched


@tool_command("get-offsets")
def run(args) -> int:
    try:
        spec = parse_time_spec(args.time, now_ms=now_ms())
    except TimeFormatError as exc:
        raise ToolError(str(exc)) from None
    partitions = parse_partitions(args.partitions)
    settings = ClientSettings.from_args(args)
    with settings.admin_session() as admin:
        topics = _matching_topics(admin, args.topic, args.exclude_internal_topics)
        counts = topic_partition_counts(admin, topics)
        tps = []
        for topic in topics:
            wanted = range(counts[topic]) if partitions is None else partitions
            for p in wanted:
                if p >= counts[topic]:
                    if args.topic is not None and len(topics) == 1:
                        raise ToolError(f"topic {topic!r} has no partition {p} (it has {counts[topic]})")
                    continue
                tps.append(TopicPartition(topic, p))
        if not tps:
            raise ToolError("no partition matches the given --topic and --partitions")
        results = list_offsets(admin, {tp: spec.value for tp in tps}, timeout_ms=settings.timeout_ms)
    for tp in sorted(tps):
        r = results[tp]
        line = f"{tp.topic}:{tp.partition}:{r.offset}"
        if args.with_timestamp:
            line += f":{r.timestamp_ms}"
        print(line)
    return 0
