"""``sundial console-producer``: one record per line of stdin, like kafka-console-producer.sh.

Kafka's options: ``--topic``, ``--property`` / ``--reader-property`` with the properties of
Kafka's ``LineMessageReader`` (``parse.key``, ``key.separator``, ``parse.headers``,
``headers.delimiter``, ``headers.separator``, ``headers.key.separator``, ``ignore.error``,
``null.marker``) and Sundial's ``parse.timestamp`` / ``timestamp.separator``, which give each
record its timestamp (:mod:`tools.console`); ``--request-required-acks`` (default ``all``),
``--compression-codec``, ``--batch-size``, ``--timeout`` (linger, default 1000 ms), ``--sync``;
``--command-config`` with the client settings every sundial tool takes.

Lines are read as UTF-8; bytes that are not UTF-8 reach the record unchanged. A line the
reader cannot parse stops the tool with one error line naming it (the records before it are
sent first), as Kafka's tool stops. Unlike Kafka's tool, which logs a failed send and goes on
with exit status 0, a record the broker did not take makes the exit status 1, with one line
that counts the failures and names the first. The topic must exist or be created by the
broker when the producer asks for it (``auto.create.topics.enable``); otherwise the tool says
so in one line. The input ends at end of file or with Ctrl-C; either way the lines read so far
are sent before the tool exits.
"""

from __future__ import annotations

import argparse
import sys

from kafka.errors import KafkaError, KafkaTimeoutError

from .common import DEFAULT_TIMEOUT_MS, EXIT_USAGE, ClientSettings, ToolError, add_bootstrap_argument, \
    add_command_config_argument, close_quietly, describe_error, now_ms, read_client_properties, tool_command
from .console import READER_PROPERTIES, LineError, LineReader, parse_properties

COMMAND = "console-producer"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: --request-required-acks as given → kafka-python's ``acks``.
ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}

EPILOG = """examples:
  sundial console-producer --bootstrap-server 127.0.0.1:9092 --topic orders
  printf 'k1:v1\\nk2:v2\\n' | sundial console-producer --bootstrap-server 127.0.0.1:9092 --topic orders \\
      --property parse.key=true --property key.separator=:
  printf '2026-11-27T14:05:00Z\\tsource:web\\tk1\\tv1\\n' | sundial console-producer \\
      --bootstrap-server 127.0.0.1:9092 --topic orders \\
      --property parse.timestamp=true --property parse.headers=true --property parse.key=true

input: one record per line, [TIMESTAMP<tab>][HEADERS<tab>][KEY<tab>]VALUE as the parse.* properties say;
headers are k:v pairs separated by commas. Times without an offset are UTC. The input ends at end of file
(Ctrl-D) or Ctrl-C; the lines read are sent. Exit codes: 0 every record sent, 1 an error (one line on
stderr), 2 bad usage."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        COMMAND, help="send lines of stdin as records, with keys, headers and timestamps "
                      "(kafka-console-producer.sh)",
        description="Read lines from stdin and send each as a record to a topic, in kafka-console-producer.sh's "
                    "format. parse.key, parse.headers and parse.timestamp take the key, headers and timestamp "
                    "from the line.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p)
    p.add_argument("--topic", required=True, help="the topic to send to")
    p.add_argument("--property", "--reader-property", dest="property", action="append", default=[],
                   metavar="KEY=VALUE",
                   help="input format, repeatable: parse.key, parse.headers, parse.timestamp, ignore.error "
                        "(true/false), key.separator, headers.delimiter, headers.separator, headers.key.separator, "
                        "timestamp.separator, null.marker")
    p.add_argument("--request-required-acks", default="all", choices=sorted(ACKS),
                   help="acknowledgements the broker gives before a send counts (default: all)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", default="none", choices=CODECS,
                   help="compression of the batches sent (default: none; the flag alone: gzip)")
    p.add_argument("--batch-size", type=int, default=16_384, metavar="BYTES",
                   help="largest batch per partition in bytes (default 16384)")
    p.add_argument("--timeout", type=int, default=1000, metavar="MS",
                   help="how long a record may wait for its batch to fill (linger; default 1000)")
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement before the next line")
    add_command_config_argument(p, "--producer.config")
    p.add_argument("--request-timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"how long to wait for the broker (connect, metadata and each request; default "
                        f"{DEFAULT_TIMEOUT_MS})")
    p.set_defaults(func=run)


def read_lines(stream=None):
    """Lines of stdin without their terminator (``\\n``, ``\\r\\n``); undecodable bytes kept as surrogates."""
    stream = stream if stream is not None else sys.stdin
    raw = getattr(stream, "buffer", None)
    for line in (raw if raw is not None else stream):
        if isinstance(line, bytes):
            line = line.decode("utf-8", "surrogateescape")
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        yield line


class _Deliveries:
    """Counts acknowledged and failed sends (producer callbacks run on its I/O thread)."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error = ""

    def ok(self, _metadata) -> None:
        self.acked += 1

    def error(self, exc) -> None:
        self.failed += 1
        if not self.first_error:
            self.first_error = f"{type(exc).__name__}: {describe_error(exc)}"


@tool_command(COMMAND)
def run(args) -> int:
    reader = LineReader(parse_properties(args.property, READER_PROPERTIES, "--property"))
    if args.batch_size < 0 or args.timeout < 0:
        raise ToolError("--batch-size and --timeout must not be negative", EXIT_USAGE)
    acks = ACKS[args.request_required_acks]
    settings = ClientSettings(args.bootstrap_server, timeout_ms=args.request_timeout_ms,
                              extra={"client_id": "console-producer", **read_client_properties(args.command_config)})
    producer = settings.producer(acks=acks, enable_idempotence=acks == "all", linger_ms=args.timeout,
                                 batch_size=args.batch_size,
                                 compression_type=None if args.compression_codec == "none" else args.compression_codec)
    deliveries = _Deliveries()
    sent = 0
    try:
        try:
            producer.partitions_for(args.topic)
        except KafkaTimeoutError:
            raise ToolError(f"unknown topic {args.topic!r}: the broker neither has it nor created it within "
                            f"{settings.timeout_ms} ms") from None
        prompt = sys.stdin.isatty() and sys.stdout.isatty()
        lines = read_lines()
        number = 0
        while True:
            if prompt:
                print(">", end="", flush=True)
            try:
                line = next(lines, None)
            except KeyboardInterrupt:
                line = None     # Ctrl-C: the lines read so far are sent, as at the end of the input
            if line is None:
                break
            number += 1
            try:
                record = reader.parse(line, number, now_ms=now_ms())
                future = _send(producer, args.topic, record, number)
            except LineError as exc:
                _flush(producer, settings.timeout_ms)
                raise ToolError(f"{exc} ({_sent_so_far(sent, deliveries)})") from None
            sent += 1
            future.add_callback(deliveries.ok)
            future.add_errback(deliveries.error)
            if args.sync:
                try:
                    future.get(timeout=settings.timeout_ms / 1000)
                except KafkaError as exc:
                    raise ToolError(f"line {number} was not sent: {type(exc).__name__}: {describe_error(exc)} "
                                    f"({sent - 1} record(s) before it were sent)") from None
        _flush(producer, settings.timeout_ms)
    finally:
        close_quietly(producer)
    if deliveries.failed:
        raise ToolError(f"{deliveries.failed} of {sent} records were not sent to {args.topic!r}; the first: "
                        f"{deliveries.first_error}")
    return 0


def _sent_so_far(sent: int, deliveries: _Deliveries) -> str:
    return f"{sent} record(s) before it were sent" if not deliveries.failed else \
        f"{sent} record(s) before it were sent, {deliveries.failed} of them failed"


def _send(producer, topic: str, record, number: int):
    if record.key is None and record.value is None:
        raise LineError(f"line {number}: a record needs a key or a value, but both are null")
    for key, value in record.headers:
        if value is None:
            raise LineError(f"line {number}: header {key!r} has a null value, which this tool's client "
                            f"(kafka-python) cannot send")
    return producer.send(topic, key=record.key, value=record.value, headers=list(record.headers),
                         timestamp_ms=record.timestamp_ms)


def _flush(producer, timeout_ms: int) -> None:
    try:
        producer.flush(timeout=max(timeout_ms / 1000, 1))
    except KafkaTimeoutError:
        raise ToolError(f"the broker did not acknowledge every record within {timeout_ms} ms") from None
