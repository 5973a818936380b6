"""``sundial console-consumer``: read a topic to stdout, like kafka-console-consumer.sh, starting at a time.

Kafka's options and output: ``--topic``, ``--group``, ``--from-beginning``, ``--partition``
with ``--offset``, ``--isolation-level``, ``--max-messages``, ``--timeout-ms`` (exit once no
record came for that long), ``--property`` / ``--formatter-property`` with the
``print.*`` properties and separators of Kafka's ``DefaultMessageFormatter``
(:mod:`tools.console`), ``--command-config`` with the client settings every sundial tool
takes. On exit it prints ``Processed a total of N messages`` to stderr, as Kafka does. Ctrl-C and
SIGTERM stop it cleanly (offsets committed, exit status 0), as they stop ``sundial mirror``.
``--timeout-ms`` counts only while the tool holds partitions (a group member waiting for its
first assignment is not idle); the broker timeout of the other tools' ``--timeout-ms`` is
``--request-timeout-ms`` here.

Time, this broker's speciality:

* ``--from TIME`` starts every partition at the first record whose timestamp is at or
  after TIME: the answer of ListOffsets (``offsetsForTimes``), through the same look-up
  as ``sundial get-offsets --time`` (:func:`tools.wire.list_offsets`), so both give the
  same offset for the same time. A partition without such a record starts at its log
  end. TIME is anything ``get-offsets --time`` takes (:mod:`tools.timeparse`: ms,
  ISO-8601 where **no offset means UTC**, ``now-15m``, ``earliest``, ``latest``). Where
  the time landed in each partition goes to stderr, one line per partition.
* ``--until TIME`` ends a partition at its first record whose timestamp is at or after
  TIME (that record is not printed): the partition's offset for TIME, found while reading.
  A partition also ends when TIME has passed on the wall clock and the consumer has read
  everything the partition holds (its log end offset; the last stable offset under
  ``read_committed``), so a time in the past never waits for records that are not coming.
  The tool exits once every partition it reads has ended.

Without ``--group`` the tool assigns itself the partitions and commits nothing (Kafka's tool
makes up a group ``console-consumer-NNNNN`` instead; reading without one leaves nothing
behind). With ``--group`` it subscribes as a member of that group, starts where the group
committed (else ``latest``, or ``earliest`` with ``--from-beginning``; ``--from``
overrides both for the partitions it is first given), and commits the offsets of the
records it **printed** every 5 s and on exit (Kafka's tool auto-commits the position after
each poll, which counts records fetched but not printed when ``--max-messages`` stops it).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time

from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from .common import DEFAULT_TIMEOUT_MS, EXIT_USAGE, ClientSettings, ToolError, \
    add_bootstrap_argument, add_command_config_argument, close_quietly, describe_error, now_ms, parse_partitions, \
    read_client_properties, tool_command
from .console import FORMATTER_PROPERTIES, RecordFormatter, parse_properties
from .timeparse import DATETIME_HELP, TIME_HELP, SPECIAL_LABELS, TimeFormatError, format_ms, parse_datetime_ms, \
    parse_time_spec
from .wire import list_offsets, topic_partition_counts

COMMAND = "console-consumer"
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
COMMIT_INTERVAL_S = 5.0
#: How often, once --until has passed, partitions are checked for having been read to their end.
END_CHECK_INTERVAL_S = 1.0
POLL_TIMEOUT_MS = 200
MAX_POLL_RECORDS = 500

EPILOG = """examples:
  sundial console-consumer --bootstrap-server 127.0.0.1:9092 --topic orders --from-beginning
  sundial console-consumer --bootstrap-server 127.0.0.1:9092 --topic orders --from 2026-11-27T14:05 \\
      --until 2026-11-27T14:10 --property print.timestamp=true --property print.key=true
  sundial console-consumer --bootstrap-server 127.0.0.1:9092 --topic orders --from now-15m --max-messages 10
  sundial console-consumer --bootstrap-server 127.0.0.1:9092 --topic orders --group audit \\
      --isolation-level read_committed --property print.headers=true --property print.offset=true

output: one line per record (print.timestamp, print.partition, print.offset, print.headers, print.key,
print.value; key.separator, line.separator, headers.separator, null.literal). --from prints to stderr where
the time landed in each partition. Times without an offset are UTC. Exit codes: 0 done (--max-messages,
--timeout-ms or --until reached, or stopped by Ctrl-C or SIGTERM), 1 an error (one line on stderr), 2 bad usage."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        COMMAND, help="print a topic's records, from a time to a time (kafka-console-consumer.sh)",
        description="Read records of a topic and print them to stdout, one line each, in "
                    "kafka-console-consumer.sh's format. --from TIME starts each partition at the first record "
                    "at or after TIME (offsetsForTimes, as get-offsets --time); --until TIME ends each partition "
                    "at its first record at or after TIME.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p)
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--group", help="consume as a member of this group and commit the printed records' offsets "
                                   "(default: no group, nothing committed)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest record (with --group: where the group has no committed offset)")
    start.add_argument("--from", dest="start", metavar="TIME",
                       help=f"start each partition at the first record at or after TIME ({TIME_HELP})")
    start.add_argument("--offset", metavar="OFFSET",
                       help="with --partition: earliest, latest or an offset (default: latest)")
    p.add_argument("--until", metavar="TIME",
                   help=f"end each partition at its first record at or after TIME, not printed ({DATETIME_HELP})")
    p.add_argument("--partition", metavar="LIST",
                   help="read only these partitions, e.g. 0 or 0,2-3 (not with --group)")
    p.add_argument("--isolation-level", default="read_uncommitted", choices=ISOLATION_LEVELS,
                   help="read_committed leaves out records of open and aborted transactions "
                        "(default: read_uncommitted)")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit once no record has come for MS milliseconds while holding partitions "
                        "(default: wait for ever)")
    p.add_argument("--property", "--formatter-property", dest="property", action="append", default=[],
                   metavar="KEY=VALUE", help="output format, repeatable: print.timestamp, print.key, print.value, "
                                             "print.partition, print.offset, print.headers (true/false), "
                                             "key.separator, line.separator, headers.separator, null.literal")
    add_command_config_argument(p, "--consumer.config")
    p.add_argument("--request-timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"how long to wait for the broker (connect and each request; default {DEFAULT_TIMEOUT_MS})")
    p.set_defaults(func=run)


def _check_usage(args) -> None:
    if args.offset is not None and args.partition is None:
        raise ToolError("--offset needs --partition", EXIT_USAGE)
    if args.group is not None and args.partition is not None:
        raise ToolError("--group and --partition cannot be used together", EXIT_USAGE)
    if args.max_messages is not None and args.max_messages < 1:
        raise ToolError("--max-messages must be at least 1", EXIT_USAGE)
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise ToolError("--timeout-ms must not be negative", EXIT_USAGE)


def _offset_spec(text: str) -> int:
    """``--offset``: earliest (-2), latest (-1) or an offset >= 0, as a list_offsets spec or an offset."""
    low = text.strip().lower()
    if low in ("earliest", "latest"):
        return parse_time_spec(low, now_ms=0).value
    if low.isdigit():
        return int(low)
    raise ToolError(f"--offset {text!r}: use earliest, latest or an offset >= 0", EXIT_USAGE)


class _Stop:
    """Ctrl-C and SIGTERM end the tool (installed in the main thread only).

    The signal raises ``KeyboardInterrupt``, except while a record is being printed and counted
    (:meth:`held`): then it is kept until the record's bookkeeping is done, so a record that
    reached stdout is always counted and committed. A second signal during a write that blocks
    (a reader that stopped reading) raises at once.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.previous: dict = {}
        self._holding = False
        self._pending = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self._on_signal) for sig in self.SIGNALS}

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def _on_signal(self, _signum, _frame) -> None:
        if self._holding and not self._pending:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self):
        """Keep a stop signal until the block is done, then act on it."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._pending:
            raise KeyboardInterrupt


@tool_command(COMMAND)
def run(args) -> int:
    _check_usage(args)
    formatter = RecordFormatter(parse_properties(args.property, FORMATTER_PROPERTIES, "--property"))
    clock = now_ms()
    try:
        start_spec = parse_time_spec(args.start, now_ms=clock) if args.start is not None else None
        until_ms = parse_datetime_ms(args.until, now_ms=clock) if args.until is not None else None
    except TimeFormatError as exc:
        raise ToolError(str(exc)) from None
    offset_arg = _offset_spec(args.offset) if args.offset is not None else None
    wanted = parse_partitions(args.partition)
    settings = ClientSettings(args.bootstrap_server, timeout_ms=args.request_timeout_ms,
                              extra={"client_id": "console-consumer", **read_client_properties(args.command_config)})
    admin = consumer = None
    stop = _Stop()
    stop.install()
    try:
        admin = settings.admin()
        count = topic_partition_counts(admin, [args.topic])[args.topic]
        if wanted is None:
            tps = [TopicPartition(args.topic, p) for p in range(count)]
        else:
            missing = [p for p in wanted if p >= count]
            if missing:
                raise ToolError(f"topic {args.topic!r} has no partition {missing[0]} (it has {count})")
            tps = [TopicPartition(args.topic, p) for p in wanted]
        starts = {}
        if start_spec is not None:
            starts = _resolve_start(admin, tps, start_spec.value, settings.timeout_ms)
        elif offset_arg is not None:
            if offset_arg >= 0:
                starts = {tp: offset_arg for tp in tps}
            else:
                starts = {tp: r.offset for tp, r in list_offsets(admin, {tp: offset_arg for tp in tps},
                                                                 timeout_ms=settings.timeout_ms).items()}
        close_quietly(admin)
        admin = None
        from_beginning = args.from_beginning
        consumer = settings.consumer(
            group_id=args.group, enable_auto_commit=False, isolation_level=args.isolation_level,
            auto_offset_reset="earliest" if from_beginning else "latest", max_poll_records=MAX_POLL_RECORDS)
        session = _Session(consumer, formatter, stop, group=args.group, until_ms=until_ms,
                           max_messages=args.max_messages, idle_timeout_ms=args.timeout_ms,
                           timeout_ms=settings.timeout_ms)
        if args.group is None:
            consumer.assign(tps)
            for tp in tps:
                if tp in starts:
                    consumer.seek(tp, starts[tp])
                elif from_beginning:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek_to_end(tp)
        else:
            consumer.subscribe([args.topic], listener=_FirstAssignmentSeeks(consumer, starts, session))
        try:
            session.run()
        except KeyboardInterrupt:
            pass                # Ctrl-C or SIGTERM: how a consumer that follows a topic is meant to stop
        session.finish()
        return 0
    finally:
        stop.restore()
        close_quietly(consumer, admin)


def _resolve_start(admin, tps, spec: int, timeout_ms: int) -> dict:
    """Start offset per partition for ``--from`` (offsetsForTimes; the log end where nothing matches),
    and one line per partition on stderr saying where the time landed."""
    found = list_offsets(admin, {tp: spec for tp in tps}, timeout_ms=timeout_ms)
    unmatched = [tp for tp in tps if found[tp].offset < 0]
    ends = list_offsets(admin, {tp: -1 for tp in unmatched}, timeout_ms=timeout_ms) if unmatched else {}
    label = SPECIAL_LABELS.get(spec) or format_ms(spec)
    starts = {}
    for tp in sorted(tps):
        at = found[tp]
        if at.offset >= 0:
            starts[tp] = at.offset
            when = f" (timestamp {format_ms(at.timestamp_ms)})" if at.timestamp_ms >= 0 else ""
            print(f"from {label}: {tp.topic}:{tp.partition} at offset {at.offset}{when}", file=sys.stderr)
        else:
            starts[tp] = ends[tp].offset
            print(f"from {label}: {tp.topic}:{tp.partition} has no record at or after it; starting at its end, "
                  f"offset {starts[tp]}", file=sys.stderr)
    sys.stderr.flush()
    return starts


class _FirstAssignmentSeeks(ConsumerRebalanceListener):
    """With --group: --from/--offset positions apply to a partition the first time it is assigned;
    committed offsets of printed records are committed before partitions are taken away."""

    def __init__(self, consumer, starts: dict, session: "_Session") -> None:
        self.consumer = consumer
        self.pending = dict(starts)
        self.session = session

    def on_partitions_revoked(self, revoked) -> None:
        self.session.commit(quiet=True)
        self.session.forget(revoked)

    def on_partitions_assigned(self, assigned) -> None:
        for tp in assigned:
            if tp in self.pending:
                self.consumer.seek(tp, self.pending.pop(tp))


class _Session:
    """The read loop: prints records, applies --until, --max-messages and --timeout-ms, commits for --group."""

    def __init__(self, consumer, formatter: RecordFormatter, stop: _Stop, *, group: str | None,
                 until_ms: int | None, max_messages: int | None, idle_timeout_ms: int | None,
                 timeout_ms: int) -> None:
        self.consumer = consumer
        self.formatter = formatter
        self.stop = stop
        self.group = group
        self.until_ms = until_ms
        self.max_messages = max_messages
        self.idle_timeout_ms = idle_timeout_ms
        self.timeout_ms = timeout_ms
        self.count = 0
        self.ended: set = set()
        self.printed: dict = {}          # tp -> next offset after the last printed (or skipped-to) record
        self.committed: dict = {}
        self._out = getattr(sys.stdout, "buffer", None)
        self._last_commit_s = time.monotonic()
        self._last_end_check_s = 0.0
        self._finished = False

    def _write(self, data: bytes) -> None:
        if self._out is not None:
            self._out.write(data)
        else:  # a text stream without bytes underneath (an embedding program)
            sys.stdout.write(data.decode("utf-8", "replace"))

    def _flush(self) -> None:
        (self._out or sys.stdout).flush()

    def forget(self, tps) -> None:
        for tp in tps:
            self.ended.discard(tp)

    def _assigned(self) -> set:
        return set(self.consumer.assignment())

    def run(self) -> None:
        last_record_s = time.monotonic()
        while True:
            remaining = None if self.max_messages is None else self.max_messages - self.count
            batch = self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS,
                                       max_records=min(MAX_POLL_RECORDS, remaining or MAX_POLL_RECORDS))
            printed = False
            for tp in sorted(batch):
                for record in batch[tp]:
                    if tp in self.ended:
                        break
                    if self.until_ms is not None and record.timestamp is not None and \
                            record.timestamp >= self.until_ms:
                        self._end(tp)
                        break
                    line = self.formatter.format(record)
                    with self.stop.held():      # a record on stdout is a record counted and committed
                        self._write(line)
                        self.printed[tp] = record.offset + 1
                        self.count += 1
                    printed = True
                    if self.max_messages is not None and self.count >= self.max_messages:
                        self._flush()
                        return
            now_s = time.monotonic()
            if printed:
                self._flush()
                last_record_s = now_s
            elif not self.consumer.assignment():
                last_record_s = now_s       # a group member waits for its partitions: not idle yet
            if self.until_ms is not None:
                if not printed and now_ms() >= self.until_ms and now_s - self._last_end_check_s >= \
                        END_CHECK_INTERVAL_S:
                    self._last_end_check_s = now_s
                    self._end_caught_up()
                assigned = self._assigned()
                if assigned and assigned <= self.ended:
                    return
            if self.idle_timeout_ms is not None and (now_s - last_record_s) * 1000 >= self.idle_timeout_ms:
                return
            if self.group is not None and now_s - self._last_commit_s >= COMMIT_INTERVAL_S:
                self.commit(quiet=True)

    def _end(self, tp) -> None:
        self.ended.add(tp)
        self.consumer.pause(tp)

    def _end_caught_up(self) -> None:
        """Once --until has passed: end the partitions whose position reached their end offset."""
        open_tps = [tp for tp in self._assigned() if tp not in self.ended]
        if not open_tps:
            return
        try:
            ends = self.consumer.end_offsets(open_tps, timeout_ms=self.timeout_ms)
        except KafkaError:
            return                          # asked again on the next round
        for tp in open_tps:
            end = ends.get(tp)
            if end is not None and self.consumer.position(tp, timeout_ms=self.timeout_ms) >= end:
                self._end(tp)

    def commit(self, *, quiet: bool) -> None:
        self._last_commit_s = time.monotonic()
        if self.group is None:
            return
        assigned = self._assigned()
        todo = {tp: OffsetAndMetadata(off, "", -1) for tp, off in self.printed.items()
                if tp in assigned and self.committed.get(tp) != off}
        if not todo:
            return
        try:
            self.consumer.commit(todo)
        except KafkaError as exc:
            if not quiet:
                print(f"sundial {COMMAND}: warning: could not commit the offsets of group {self.group!r}: "
                      f"{type(exc).__name__}: {describe_error(exc)}", file=sys.stderr, flush=True)
            return
        self.committed.update({tp: m.offset for tp, m in todo.items()})

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            self._flush()
        finally:
            self.commit(quiet=False)
            print(f"Processed a total of {self.count} messages", file=sys.stderr, flush=True)
