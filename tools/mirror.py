"""``sundial mirror``: copy topics from cluster A to cluster B, keeping CreateTime.

The mirror-maker case of KIP-32 (seed 002): each record is produced to B with the
same key, value, headers and partition number, and **its timestamp as CreateTime**.
The broker of B then does what its topic says: a CreateTime topic keeps the
original timestamp (so offsetsForTimes, retention and failover at T − X agree across
the clusters), a LogAppendTime topic re-stamps it with B's clock. A record read from
a LogAppendTime topic on A carries A's append time, which then becomes its CreateTime
on B. A null value (tombstone) stays null; a record with neither key nor value (legal,
but kafka-python's producer refuses it) is skipped with a warning.

Delivery is at least once: records are produced with acks=all and an idempotent
producer, and only after B acknowledged a poll's records are the positions committed
to the mirror's group on A (``--group``). A restart resumes from the group's
committed offsets (partitions without one start at ``--from``); records produced to B
after the last commit before a crash are copied again.

Missing target topics are created with the source's partition count (``--no-create-topics``
to refuse instead) and with the source topic's settings that decide time on B
(:data:`COPIED_TOPIC_CONFIGS`: ``message.timestamp.type``, retention, segment and
compaction settings), where A sets them on the topic or its broker (DescribeConfigs
source other than the default), as MirrorMaker 2 does; ``--no-copy-configs`` creates
them with B's defaults instead. Not copied: the CreateTime bounds
(``message.timestamp.*.max.ms``: a mirror replays old records by design, and a past bound
would refuse a catch-up, which is why MirrorMaker 2 leaves them out too) and Sundial's
consumed retention (``retention.commitoffset.*``: it depends on the groups of each
cluster, and a Kafka cluster B would refuse the key). An existing target topic is left
as it is. A target topic with fewer partitions than the source is an error.
``--target-prefix`` renames (``A.orders``).

Reports end-to-end latency: target append time minus CreateTime. For a LogAppendTime
target the append time is the one B returns in the produce response; for a CreateTime
target B does not return one and the acknowledgement time is used. Progress lines go
to stderr every ``--progress-interval-s``; the summary goes to stdout.

Stops on Ctrl-C / SIGTERM (after committing what B acknowledged), with ``--stop-at-end``
once every partition reached the log end offset it had when the mirror started, or
after ``--max-records``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from kafka import TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, for_code
from kafka.structs import OffsetAndMetadata

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_two_cluster_client_arguments, \
    close_quietly, describe_error, now_ms, read_client_properties, split_names, tool_command
from .timeparse import TimeFormatError, parse_time_spec
from .topics import topic_configs
from .wire import list_offsets, topic_partition_counts

#: Settings a target topic created by the mirror takes from its source topic (see the module doc).
COPIED_TOPIC_CONFIGS = (
    "message.timestamp.type",
    "retention.ms", "retention.bytes",
    "segment.ms", "segment.bytes", "segment.jitter.ms", "segment.index.bytes", "index.interval.bytes",
    "cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
)

EPILOG = """examples:
  sundial mirror --source-bootstrap a:9092 --target-bootstrap b:9092 --topics orders,payments --group mirror-ab
  sundial mirror --source-bootstrap a:9092 --target-bootstrap b:9092 --topics orders --from now-1h --stop-at-end
  sundial mirror --source-bootstrap a:9092 --target-bootstrap b:9092 --topics orders --target-prefix a."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "mirror", help="copy topics from cluster A to B keeping keys, values, headers and CreateTime",
        description="Copy records from cluster A to cluster B with the same key, value, headers, partition "
                    "and timestamp (sent as CreateTime; a LogAppendTime topic on B re-stamps it). Resumable "
                    "through --group; reports end-to-end latency (target append time minus CreateTime).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p, "--source-bootstrap", what="cluster A, which the records are copied from")
    add_bootstrap_argument(p, "--target-bootstrap", what="cluster B, which the records are copied to")
    p.add_argument("--topics", action="append", required=True, metavar="TOPIC[,TOPIC...]",
                   help="topics to copy (repeatable, comma-separated)")
    p.add_argument("--group", help="consumer group on A keeping the mirror's position (resumable); without it "
                                   "nothing is committed and every run starts at --from")
    p.add_argument("--from", dest="start", default="earliest", metavar="TIME",
                   help="where partitions without a committed offset start: earliest (default), latest, or a "
                        "time (ms, ISO-8601 (no offset = UTC), now-DURATION)")
    p.add_argument("--target-prefix", default="", metavar="PREFIX", help="prefix for target topic names")
    p.add_argument("--no-create-topics", action="store_true", help="fail instead of creating missing target topics")
    p.add_argument("--no-copy-configs", action="store_true",
                   help="create missing target topics with B's defaults instead of the source topic's "
                        "message.timestamp.type, retention, segment and compaction settings")
    p.add_argument("--stop-at-end", action="store_true",
                   help="stop once every partition reached the log end offset it had at start")
    p.add_argument("--max-records", type=int, default=None, metavar="N", help="stop after copying N records")
    p.add_argument("--compression-type", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none",
                   help="compression of the batches sent to B (default: none)")
    p.add_argument("--progress-interval-s", type=float, default=10.0, metavar="S",
                   help="seconds between progress lines on stderr (0: none; default 10)")
    add_two_cluster_client_arguments(p)
    p.set_defaults(func=run)


class LatencyStats:
    """End-to-end latencies (ms) of acknowledged records; thread-safe (producer callbacks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples: list[int] = []
        self.acked = 0
        self.bytes = 0

    def add(self, latency_ms: int | None, size: int) -> None:
        with self._lock:
            self.acked += 1
            self.bytes += size
            if latency_ms is not None:
                self.samples.append(latency_ms)

    def summary(self) -> dict:
        with self._lock:
            data = sorted(self.samples)
        if not data:
            return {"count": 0}

        def pct(q: float) -> int:
            return data[min(len(data) - 1, int(q * len(data)))]

        return {"count": len(data), "min": data[0], "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99),
                "max": data[-1]}


class _Stop:
    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def __call__(self, signum, _frame) -> None:
        self.requested = True
        self.signal_name = signal.Signals(signum).name


@tool_command("mirror")
def run(args) -> int:
    topics = split_names(args.topics)
    if not topics:
        raise ToolError("--topics names no topic")
    if args.max_records is not None and args.max_records < 1:
        raise ToolError("--max-records must be at least 1")
    try:
        start_spec = parse_time_spec(args.start, now_ms=now_ms())
    except TimeFormatError as exc:
        raise ToolError(str(exc)) from None
    if start_spec.value == -3:
        raise ToolError("--from takes earliest, latest or a time")
    source = ClientSettings(args.source_bootstrap, timeout_ms=args.timeout_ms, flag="--source-bootstrap",
                            extra=read_client_properties(args.source_command_config), client_id="sundial-mirror")
    target = ClientSettings(args.target_bootstrap, timeout_ms=args.timeout_ms, flag="--target-bootstrap",
                            extra=read_client_properties(args.target_command_config), client_id="sundial-mirror")
    mapping = {t: args.target_prefix + t for t in topics}
    admin_a = admin_b = consumer = producer = None
    try:
        admin_a = source.admin()
        admin_b = target.admin()
        counts = topic_partition_counts(admin_a, topics)
        append_time_targets = _prepare_targets(admin_a, admin_b, mapping, counts, create=not args.no_create_topics,
                                               copy_configs=not args.no_copy_configs)
        consumer = source.consumer(group_id=args.group, enable_auto_commit=False, auto_offset_reset="earliest",
                                   max_poll_records=1000)
        producer = target.producer(acks="all", linger_ms=5,
                                   compression_type=None if args.compression_type == "none" else args.compression_type)
        return _copy(args, admin_a, consumer, producer, counts, mapping, append_time_targets, start_spec.value)
    finally:
        close_quietly(producer, consumer, admin_a, admin_b)


def source_topic_configs(admin_a, topic: str) -> dict[str, str]:
    """The :data:`COPIED_TOPIC_CONFIGS` that A sets for ``topic`` (on the topic or its broker)."""
    return {name: entry["value"] for name, entry in sorted(topic_configs(admin_a, topic).items())
            if name in COPIED_TOPIC_CONFIGS and entry["source"] != "default" and entry["value"] is not None
            and not entry.get("sensitive")}


def _prepare_targets(admin_a, admin_b, mapping: dict[str, str], counts: dict[str, int], *, create: bool,
                     copy_configs: bool = True) -> set[str]:
    """Create missing target topics; return the target topics that use LogAppendTime."""


    existing = set(admin_b.list_topics())
    missing = [t for t in mapping if mapping[t] not in existing]
    if missing and not create:
        raise ToolError(f"target topic {mapping[missing[0]]!r} does not exist on B (drop --no-create-topics to "
                        f"create it)")
    if missing:
        configs = {t: source_topic_configs(admin_a, t) if copy_configs else {} for t in missing}
        response = admin_b.create_topics([NewTopic(mapping[t], counts[t], -1, topic_configs=configs[t])
                                          for t in missing], raise_errors=False)
        for result in response.get("topics", []):
            if result.get("error_code") not in (0, 36):    # 36: created meanwhile

                name = result.get("name")
                hint = (" (add --no-copy-configs to create it with B's defaults)"
                        if any(configs.get(t) for t in missing if mapping[t] == name) else "")
                raise ToolError(f"cannot create target topic {name!r}: "
                                f"{for_code(result['error_code']).__name__}: {result.get('error_message') or ''}"
                                f"{hint}")
        for t in missing:
            copied = ", ".join(f"{k}={v}" for k, v in configs[t].items())
            print(f"Created target topic {mapping[t]} with {counts[t]} partitions"
                  + (f" and the source topic's configs {copied}." if copied else "."), file=sys.stderr)
    target_counts = topic_partition_counts(admin_b, mapping.values())
    for src, dst in mapping.items():
        if target_counts[dst] < counts[src]:
            raise ToolError(f"target topic {dst!r} has {target_counts[dst]} partitions, fewer than the "
                            f"{counts[src]} of {src!r} on A; add partitions on B first")
    lat = set()
    for dst in mapping.values():
        entry = topic_configs(admin_b, dst).get("message.timestamp.type")
        if entry and entry.get("value") == "LogAppendTime":
            lat.add(dst)
    return lat


def _start_positions(admin_a, consumer, tps: list, group: str | None, start: int) -> dict:
    committed = {}
    if group:
        try:
            raw = admin_a.list_group_offsets({group: tps})
        except KafkaError as exc:
            raise ToolError(f"cannot read the committed offsets of group {group!r} on A: "
                            f"{describe_error(exc)}") from None
        committed = {tp: oam.offset for tp, oam in raw.get(group, {}).items() if oam.offset is not None
                     and oam.offset >= 0}
    rest = [tp for tp in tps if tp not in committed]
    positions = dict(committed)
    if rest:
        found = list_offsets(admin_a, {tp: start for tp in rest})
        ends = list_offsets(admin_a, {tp: -1 for tp in rest}) if start >= 0 else {}
        for tp in rest:
            off = found[tp].offset
            positions[tp] = off if off >= 0 else ends[tp].offset
    return positions


def _copy(args, admin_a, consumer, producer, counts, mapping, lat_targets, start) -> int:
    tps = [TopicPartition(t, p) for t in mapping for p in range(counts[t])]
    positions = _start_positions(admin_a, consumer, tps, args.group, start)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, positions[tp])
    stop_at = None
    if args.stop_at_end:
        stop_at = {tp: r.offset for tp, r in list_offsets(admin_a, {tp: -1 for tp in tps}).items()}
    stats = LatencyStats()
    stop = _Stop()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    last_progress = started
    sent = 0
    failures: list[str] = []
    skipped: list[str] = []
    try:
        while not stop.requested:
            if stop_at is not None and all(positions[tp] >= stop_at[tp] for tp in tps):
                break
            if args.max_records is not None and sent >= args.max_records:
                break
            budget = None if args.max_records is None else args.max_records - sent
            polled = consumer.poll(timeout_ms=200, max_records=budget or 1000)
            batch_positions = {}
            for tp, records in polled.items():
                dst = mapping[tp.topic]
                is_lat = dst in lat_targets
                for rec in records:
                    if stop_at is not None and rec.offset >= stop_at[tp]:
                        break
                    ts = rec.timestamp if rec.timestamp is not None and rec.timestamp >= 0 else None
                    if rec.key is None and rec.value is None:
                        # Legal in Kafka, but kafka-python's producer cannot send it.
                        skipped.append(f"{tp.topic}:{tp.partition}@{rec.offset}")
                        batch_positions[tp] = rec.offset + 1
                        continue
                    size = (len(rec.key) if rec.key else 0) + (len(rec.value) if rec.value else 0)
                    future = producer.send(dst, key=rec.key, value=rec.value, partition=rec.partition,
                                           timestamp_ms=ts, headers=list(rec.headers or []))
                    future.add_callback(_on_ack(stats, ts, size, is_lat))
                    future.add_errback(_on_error(failures, dst, rec.partition, rec.offset))
                    sent += 1
                    batch_positions[tp] = rec.offset + 1
            if batch_positions:
                producer.flush(timeout=args.timeout_ms / 1000)
                if failures:
                    raise ToolError(f"B refused records: {failures[0]}; positions up to the last acknowledged "
                                    f"poll are committed")
                positions.update(batch_positions)
                if args.group:
                    try:
                        consumer.commit({tp: OffsetAndMetadata(off, "", -1) for tp, off in batch_positions.items()})
                    except KafkaError as exc:
                        raise ToolError(f"cannot commit the mirror's position to group {args.group!r} on A: "
                                        f"{describe_error(exc)}") from None
            now = time.monotonic()
            if args.progress_interval_s > 0 and now - last_progress >= args.progress_interval_s:
                last_progress = now
                _progress_line(stats, sent, now - started)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    producer.flush(timeout=args.timeout_ms / 1000)
    if failures:
        raise ToolError(f"B refused records: {failures[0]}")
    _summary(args, stats, time.monotonic() - started, mapping, lat_targets, stop)
    if skipped:
        print(f"warning: skipped {len(skipped)} record(s) with neither key nor value (kafka-python cannot produce "
              f"them), e.g. {skipped[0]}", file=sys.stderr)
    return 0


def _on_ack(stats: LatencyStats, create_ms: int | None, size: int, log_append_time: bool):
    def callback(metadata) -> None:
        if create_ms is None:
            stats.add(None, size)
            return
        appended = metadata.timestamp if log_append_time and metadata.timestamp not in (None, -1) else now_ms()
        stats.add(max(appended - create_ms, 0), size)

    return callback


def _on_error(failures: list[str], topic: str, partition: int, offset: int):
    def errback(exc) -> None:
        failures.append(f"{topic}:{partition} (source offset {offset}): {type(exc).__name__}: {describe_error(exc)}")

    return errback


def _progress_line(stats: LatencyStats, sent: int, elapsed_s: float) -> None:
    s = stats.summary()
    latency = (f", end-to-end latency p50 {s['p50']} ms p99 {s['p99']} ms max {s['max']} ms"
               if s["count"] else "")
    print(f"mirror: copied {stats.acked} of {sent} sent records ({stats.acked / max(elapsed_s, 1e-9):.0f}/s)"
          f"{latency}", file=sys.stderr, flush=True)


def _summary(args, stats: LatencyStats, elapsed_s: float, mapping, lat_targets, stop: _Stop) -> None:
    s = stats.summary()
    why = f" (stopped by {stop.signal_name})" if stop.requested else ""
    print(f"Mirrored {stats.acked} records ({stats.bytes} key+value bytes) from {args.source_bootstrap} to "
          f"{args.target_bootstrap} in {elapsed_s:.1f} s{why}: "
          + ", ".join(f"{src} -> {dst}" + (" (LogAppendTime)" if dst in lat_targets else "")
                      for src, dst in mapping.items()))
    if s["count"]:
        print(f"End-to-end latency (target append time - CreateTime, ms): min {s['min']} p50 {s['p50']} "
              f"p95 {s['p95']} p99 {s['p99']} max {s['max']} over {s['count']} records")
