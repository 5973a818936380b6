"""The executor side of the sink: one Spark task's rows -> records, through confluent-kafka.

:class:`TaskWriter` takes the task's rows as :class:`pipeline.sink_columns.SinkColumns`
chunks and writes them with one librdkafka producer. Two modes:

**At-least-once** (default). An idempotent producer (``enable.idempotence=true``, unless
the options turn it off): the broker drops the duplicates of the producer's own
retries, but a Spark retry of the task, or a re-run of a micro-batch, sends the rows
again. That is spark-sql-kafka's guarantee.

**Exactly-once** (``sundial.exactlyOnce=true``). The task writes inside one Kafka
transaction:

1. ``init_transactions`` with the task's transactional id
   (``<prefix><query or job id>-<Spark partition>``). The coordinator fences every
   earlier producer of that id (a previous attempt still running is cut off) and
   aborts its open transaction, or waits for its commit to finish.
2. ``begin_transaction``; every row is sent.
3. The *marker*: the committed offset of group ``<prefix><query or job id>-<Spark
   partition>`` on partition 0 of the first topic written (by name) holds the epoch
   (the micro-batch id; 0 for a batch job) of the last transaction that committed. If
   it already holds this epoch or a later one, an earlier run of this task committed
   the same rows: the transaction is aborted, and nothing becomes visible twice.
4. Otherwise the marker is written into the transaction (``send_offsets_to_transaction``)
   and the transaction commits: rows and marker become visible together.

Any failure aborts the transaction: a read_committed consumer never sees the rows of a
failed attempt. A read_uncommitted consumer does (Kafka's own rule for aborted data).

A record the producer client or the broker refuses fails the task with a
:class:`pipeline.errors.SinkError` that names the row, the record's topic, partition,
key and timestamp, and the error. Nothing is dropped silently. Sending stops at the
first refusal.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from array import array
from dataclasses import dataclass, replace
from functools import partial
from itertools import repeat
from typing import Callable, Iterable

import structlog

from .errors import OptionError, SinkError
from .sink_columns import RowPosition, SinkColumns
from .sink_options import SinkOptions

logger = structlog.get_logger(__name__)

CONTROL_TIMEOUT_S = 120.0           # init/commit/abort of a transaction, the marker lookup
BUFFER_FULL_POLL_S = 0.05
CLIENT_ID = "sundial-spark-sink"

# what the consumer that reads and writes markers needs of the producer's settings
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "client.dns.", "broker.address.")

_HINTS = {
    "INVALID_TIMESTAMP": ("the topic accepts CreateTimes only within message.timestamp.before.max.ms / "
                          "message.timestamp.after.max.ms of the broker's clock"),
    "MSG_SIZE_TOO_LARGE": ("the record is larger than the topic's max.message.bytes or the producer's "
                           "message.max.bytes (kafka.message.max.bytes)"),
    "_MSG_SIZE_TOO_LARGE": "the record is larger than the producer's message.max.bytes (kafka.message.max.bytes)",
    "UNKNOWN_TOPIC_OR_PART": "the topic or partition does not exist",
    "_UNKNOWN_TOPIC": "the topic does not exist",
    "_UNKNOWN_PARTITION": "the topic has no such partition",
    "TOPIC_AUTHORIZATION_FAILED": "the principal may not write to the topic",
}


@dataclass(frozen=True)
class TaskIdentity:
    """Who is writing: the row positions, and for exactly-once the transaction and marker."""

    position: RowPosition
    transactional_id: str | None = None
    marker_group: str | None = None
    epoch: int = 0


@dataclass(frozen=True)
class TaskResult:
    """What one task did (travels to the driver in the commit message)."""

    spark_partition: int
    attempt: int
    rows: int
    topics: tuple[str, ...] = ()
    transactional_id: str | None = None
    committed: bool = False             # exactly-once: this attempt's transaction committed
    skipped_epoch: int | None = None    # exactly-once: an earlier run had committed; this one aborted


# --- producer settings ----------------------------------------------------------------------

def producer_config(opts: SinkOptions, *, transactional_id: str | None = None,
                    on_delivery: Callable | None = None) -> dict:
    """confluent-kafka ``Producer`` settings for one task."""
    config = {"client.id": CLIENT_ID, **opts.producer_settings, "bootstrap.servers": opts.bootstrap_servers}
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    if on_delivery is not None:
        config["on_delivery"] = on_delivery
    return config


def _marker_consumer_config(opts: SinkOptions, group: str) -> dict:
    config = {name: value for name, value in opts.producer_settings.items()
              if name.startswith(_SHARED_PREFIXES) or name == "client.id"}
    config.setdefault("client.id", CLIENT_ID)
    config.update({"bootstrap.servers": opts.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                   "isolation.level": "read_committed"})
    return config


_UNKNOWN_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')
_NAMED_PROPERTY = re.compile(r'property "([^"]+)"')


def _culprit(producer_factory: Callable, settings: dict) -> str | None:
    """The first setting the producer refuses on its own (librdkafka does not always say)."""
    from confluent_kafka import KafkaException

    for name, value in settings.items():
        try:
            producer = producer_factory({name: value, "log_level": 0})
        except KafkaException:
            return name
        del producer
    return None


def check_producer_settings(opts: SinkOptions, producer_factory: Callable | None = None) -> SinkOptions:
    """The options with the ``kafka.*`` names librdkafka does not know removed (each logged as
    ``kafka_option_ignored``); a value librdkafka refuses raises :class:`OptionError`.

    Builds a producer with no bootstrap servers, which never connects."""
    if producer_factory is None:
        from confluent_kafka import Producer as producer_factory
    from confluent_kafka import KafkaException

    settings = dict(opts.producer_settings)
    while True:
        config = dict(settings, **{"log_level": 0})
        if opts.exactly_once:
            config["transactional.id"] = "sundial-settings-check"
        try:
            producer = producer_factory(config)
        except KafkaException as exc:
            text = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
            unknown = _UNKNOWN_PROPERTY.search(text)
            if unknown and unknown.group(1) in settings:
                name = unknown.group(1)
                logger.warning("kafka_option_ignored", option=f"kafka.{name}",
                               reason="the producer client (librdkafka) has no such setting")
                del settings[name]
                continue
            named = _NAMED_PROPERTY.search(text)
            name = named.group(1) if named and named.group(1) in settings else _culprit(producer_factory, settings)
            option = f"kafka.{name}" if name else "kafka.*"
            raise OptionError(option, f"the producer refuses the sink's {option} setting: {text}") from None
        del producer
        return replace(opts, producer_settings=settings)


# --- the task ---------------------------------------------------------------------------------

def _iso(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "no timestamp"
    try:
        return (_dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=ms)) \
            .isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:
        return "out of range"


def _short(key) -> str:
    if key is None:
        return "null"
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _error_name(err) -> str:
    return err.name() if hasattr(err, "name") else type(err).__name__


def _error_text(err) -> str:
    return err.str() if hasattr(err, "str") else str(err)


@dataclass(frozen=True)
class Refusal:
    """One record the producer could not deliver."""

    row: int
    timestamp_ms: int           # what the sink sent (0: none, the client's clock)
    err: object                 # confluent_kafka.KafkaError
    topic: str | None
    partition: int | None
    key: object
    size_bytes: int             # key + value


def _human_ms(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            return f"{ms / size:.1f} {unit}"
    return f"{ms} ms"


def topic_timestamp_window(opts: SinkOptions, topic: str) -> tuple[int, int] | None:
    """(before_ms, after_ms) a topic allows around the broker's clock (DescribeConfigs), or None."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    config = {k: v for k, v in _marker_consumer_config(opts, "unused").items()
              if k not in ("group.id", "enable.auto.commit", "isolation.level")}
    try:
        admin = AdminClient(config)
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=30)
    except Exception as exc:   # only the error message gets poorer
        logger.warning("sink_describe_configs_failed", topic=topic, error=str(exc))
        return None

    def value(name: str) -> int | None:
        entry = entries.get(name)
        try:
            return int(entry.value) if entry is not None and entry.value is not None else None
        except ValueError:
            return None

    difference = value("message.timestamp.difference.max.ms")
    before = value("message.timestamp.before.max.ms")
    after = value("message.timestamp.after.max.ms")
    before = before if before is not None else difference
    after = after if after is not None else difference
    if before is None or after is None:
        return None
    if difference is not None:
        before, after = min(before, difference), min(after, difference)
    return before, after


class TaskWriter:
    """Writes one Spark task's rows (see the module docstring for the two modes)."""

    def __init__(self, opts: SinkOptions, identity: TaskIdentity, *, producer_factory: Callable | None = None,
                 consumer_factory: Callable | None = None, topic_partition: Callable | None = None,
                 timestamp_window: Callable | None = None, clock_ms: Callable[[], int] | None = None) -> None:
        if producer_factory is None or consumer_factory is None or topic_partition is None:
            from confluent_kafka import Consumer, Producer, TopicPartition

            producer_factory = producer_factory or Producer
            consumer_factory = consumer_factory or Consumer
            topic_partition = topic_partition or TopicPartition
        self.opts = opts
        self.identity = identity
        self._producer_factory = producer_factory
        self._consumer_factory = consumer_factory
        self._topic_partition = topic_partition
        self._timestamp_window = timestamp_window or (lambda topic: topic_timestamp_window(opts, topic))
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.rows = 0
        self.delivered = 0
        self.failures: list[Refusal] = []
        self.topics: set[str] = set()
        self._sent_ts = array("q")                               # per row: the timestamp sent
        self._partition_rows: dict[tuple[str, int], array] = {}  # rows sent to a named partition, in order
        self._partition_reported: dict[tuple[str, int], int] = {}

    @property
    def failed(self) -> int:
        return len(self.failures)

    # --- delivery reports --------------------------------------------------------------------

    # Which row a delivery report is about: a row that names its partition is written through
    # the producer's one ``on_delivery`` and found again by its place in that partition (an
    # idempotent producer reports each partition's records in the order they were produced);
    # any other row carries its index in a callback of its own, which costs the client about
    # 3 µs per record (measured), so it is kept for rows whose partition the client chooses.

    def _on_ordered_delivery(self, err, msg) -> None:
        tp = (msg.topic(), msg.partition())
        seen = self._partition_reported.get(tp, 0)
        self._partition_reported[tp] = seen + 1
        if err is None:
            self.delivered += 1
            return
        rows = self._partition_rows.get(tp)
        self._record_failure(rows[seen] if rows is not None and seen < len(rows) else -1, err, msg)

    def _on_delivery(self, row: int, err, msg) -> None:
        if err is None:
            self.delivered += 1
            return
        self._record_failure(row, err, msg)

    def _record_failure(self, row: int, err, msg) -> None:
        ts = self._sent_ts[row] if 0 <= row < len(self._sent_ts) else 0
        if msg is None:
            self.failures.append(Refusal(row, ts, err, None, None, None, 0))
            return
        key, value = msg.key(), msg.value()
        self.failures.append(Refusal(row, ts, err, msg.topic(), msg.partition(), key,
                                     len(key or b"") + len(value or b"")))

    def _timestamp_culprit(self, failures: list[Refusal]) -> tuple[Refusal, str]:
        """The first refused row whose CreateTime is outside the topic's window, and why."""
        now = self._clock_ms()
        stamped = [f for f in failures if f.timestamp_ms > 0]
        if not stamped:
            return failures[0], ""
        window = self._timestamp_window(stamped[0].topic)
        if window is not None:
            before, after = window
            outside = [f for f in stamped if f.timestamp_ms < now - before or f.timestamp_ms > now + after]
            if outside:
                culprit = min(outside, key=lambda f: f.row)
                offset = culprit.timestamp_ms - now
                side = "before" if offset < 0 else "after"
                return culprit, (f": its CreateTime is {_human_ms(abs(offset))} {side} the clock, and topic "
                                 f"'{culprit.topic}' accepts CreateTimes from {_human_ms(before)} before to "
                                 f"{_human_ms(after)} after the broker's clock (message.timestamp.before.max.ms="
                                 f"{before}, message.timestamp.after.max.ms={after})")
        culprit = max(stamped, key=lambda f: abs(f.timestamp_ms - now))
        return culprit, (f": of the refused rows its CreateTime is the farthest from the clock "
                         f"({_human_ms(culprit.timestamp_ms - now)}); the topic bounds CreateTimes with "
                         f"message.timestamp.before.max.ms / message.timestamp.after.max.ms")

    def _refusal(self) -> SinkError:
        failures = self.failures
        name = _error_name(failures[0].err)
        same = [f for f in failures if _error_name(f.err) == name]
        culprit, why = same[0], ""
        if name == "INVALID_TIMESTAMP":
            culprit, why = self._timestamp_culprit(same)
        elif name in ("MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE"):
            culprit = max(same, key=lambda f: f.size_bytes)
            why = f": its key and value take {culprit.size_bytes} bytes"
        hint = _HINTS.get(name)
        text = (f"{self.identity.position.describe(culprit.row)} was refused: {name} "
                f"({_error_text(culprit.err)}){why}" + (f" - {hint}" if hint and not why else "")
                + f". The record: topic '{culprit.topic}', partition {culprit.partition}, key {_short(culprit.key)}, "
                  f"timestamp {culprit.timestamp_ms} ({_iso(culprit.timestamp_ms)}).")
        if len(failures) > 1:
            rows = sorted(f.row for f in failures)
            text += (f" The broker refuses a whole record batch for one bad record: {len(failures)} of the "
                     f"{self.rows} records this task sent failed (rows {rows[0]} to {rows[-1]})")
            if len(same) < len(failures):
                text += ", some with " + ", ".join(sorted({_error_name(f.err) for f in failures} - {name}))
            text += ";"
        else:
            text += f" 1 of the {self.rows} records this task sent failed;"
        if self.opts.exactly_once:
            text += " the task's transaction is aborted, so read_committed consumers see none of its records"
        else:
            text += " records of this task that the broker had already accepted stay in the topic"
        return SinkError(text)

    def _row_error(self, row: int, topic, partition: int, exc: Exception) -> SinkError:
        err = exc.args[0] if exc.args and hasattr(exc.args[0], "name") else exc
        name = _error_name(err)
        hint = _HINTS.get(name)
        where = f"topic '{topic}'" + (f", partition {partition}" if partition >= 0 else "")
        return SinkError(f"{self.identity.position.describe(row)} ({where}) cannot be sent: {name} "
                         f"({_error_text(err)})" + (f" - {hint}" if hint else ""))

    # --- sending -----------------------------------------------------------------------------

    def _send(self, producer, chunks: Iterable[SinkColumns]) -> None:
        """Produce every row; stop at the first refusal (raised after the flush)."""
        from confluent_kafka import KafkaException

        produce, poll = producer.produce, producer.poll
        on_delivery = self._on_delivery
        ordered = self.opts.idempotent
        sent_ts, partition_rows = self._sent_ts, self._partition_rows
        row = self.rows
        try:
            for cols in chunks:
                n = len(cols)
                if cols.topics is None:
                    topics = repeat(cols.topic, n)
                    self.topics.add(cols.topic)
                else:
                    topics = cols.topics
                    self.topics.update(cols.topics)
                headers = cols.headers if cols.headers is not None else repeat(None, n)
                for value, key, topic, part, ts, hs in zip(cols.values, cols.keys, topics, cols.partitions,
                                                           cols.timestamps, headers):
                    sent_ts.append(ts)
                    if ordered and part >= 0:
                        callback = None            # reported through on_delivery, found by its place
                    else:
                        callback = partial(on_delivery, row)
                    while True:
                        try:
                            # positional: (topic, value, key, partition, callback, on_delivery, timestamp, headers)
                            produce(topic, value, key, part, callback, None, ts, hs)
                            break
                        except BufferError:
                            poll(BUFFER_FULL_POLL_S)
                        except (KafkaException, TypeError, ValueError) as exc:
                            self.rows = row
                            raise self._row_error(row, topic, part, exc) from None
                    if callback is None:
                        rows_of = partition_rows.get((topic, part))
                        if rows_of is None:
                            rows_of = partition_rows[(topic, part)] = array("q")
                        rows_of.append(row)
                    row += 1
                self.rows = row
                poll(0)
                if self.failed:
                    break
        finally:
            self.rows = row
        producer.flush()
        if self.failed:
            raise self._refusal()

    def write(self, chunks: Iterable[SinkColumns]) -> TaskResult:
        if self.opts.exactly_once:
            return self._write_transaction(chunks)
        producer = self._producer_factory(producer_config(self.opts, on_delivery=self._on_ordered_delivery))
        self._send(producer, chunks)
        return self._result(committed=False)

    def _result(self, **kw) -> TaskResult:
        position = self.identity.position
        return TaskResult(position.spark_partition, position.attempt, self.rows, tuple(sorted(self.topics)),
                          self.identity.transactional_id, **kw)

    # --- exactly-once --------------------------------------------------------------------------

    def _control(self, what: str, call: Callable, *args) -> None:
        """One transaction control call, retried while the client calls the error retriable."""
        from confluent_kafka import KafkaException

        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                call(*args)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                retriable = err is not None and hasattr(err, "retriable") and err.retriable()
                if retriable and attempt < attempts:
                    logger.warning("sink_transaction_retry", step=what, attempt=attempt, error=str(err),
                                   transactional_id=self.identity.transactional_id)
                    continue
                detail = _error_text(err) if err is not None else str(exc)
                hint = ""
                if err is not None and hasattr(err, "fatal") and err.fatal():
                    hint = (" (fatal: another run of this task took over the transactional id, or the "
                            "transaction outlived kafka.transaction.timeout.ms)")
                raise SinkError(f"Spark partition {self.identity.position.spark_partition}: {what} for transactional "
                                f"id '{self.identity.transactional_id}' failed: {detail}{hint}") from None

    def _abort_quietly(self, producer) -> None:
        try:
            producer.abort_transaction(CONTROL_TIMEOUT_S)
        except Exception as exc:   # the original error matters more; the coordinator aborts on timeout
            logger.warning("sink_abort_failed", transactional_id=self.identity.transactional_id, error=str(exc))

    def _committed_epoch(self, consumer, topic: str) -> int | None:
        from confluent_kafka import KafkaException

        try:
            found = consumer.committed([self._topic_partition(topic, 0)], timeout=CONTROL_TIMEOUT_S)
        except KafkaException as exc:
            raise SinkError(f"Spark partition {self.identity.position.spark_partition}: reading the exactly-once "
                            f"marker of group '{self.identity.marker_group}' failed: {exc}") from None
        offset = found[0].offset if found else -1
        return offset if offset is not None and offset >= 0 else None

    def _write_transaction(self, chunks: Iterable[SinkColumns]) -> TaskResult:
        ident = self.identity
        assert ident.transactional_id and ident.marker_group, "exactly-once needs a transactional id and a marker"
        producer = self._producer_factory(producer_config(self.opts, transactional_id=ident.transactional_id,
                                                          on_delivery=self._on_ordered_delivery))
        self._control("init_transactions", producer.init_transactions, CONTROL_TIMEOUT_S)
        producer.begin_transaction()
        consumer = None
        try:
            self._send(producer, chunks)
            if self.rows == 0:
                producer.abort_transaction(CONTROL_TIMEOUT_S)
                return self._result(committed=False)
            marker_topic = min(self.topics)
            consumer = self._consumer_factory(_marker_consumer_config(self.opts, ident.marker_group))
            prior = self._committed_epoch(consumer, marker_topic)
            if prior is not None and prior >= ident.epoch:
                self._control("abort_transaction", producer.abort_transaction, CONTROL_TIMEOUT_S)
                logger.warning("sink_epoch_already_committed", transactional_id=ident.transactional_id,
                               epoch=ident.epoch, committed_epoch=prior, rows_aborted=self.rows)
                return self._result(committed=False, skipped_epoch=prior)
            metadata = json.dumps({"epoch": ident.epoch, "rows": self.rows,
                                   "sparkPartition": ident.position.spark_partition}, separators=(",", ":"))
            marker = self._topic_partition(marker_topic, 0, ident.epoch, metadata)
            self._control("send_offsets_to_transaction", producer.send_offsets_to_transaction, [marker],
                          consumer.consumer_group_metadata(), CONTROL_TIMEOUT_S)
            self._control("commit_transaction", producer.commit_transaction, CONTROL_TIMEOUT_S)
        except BaseException:
            self._abort_quietly(producer)
            raise
        finally:
            if consumer is not None:
                consumer.close()
        return self._result(committed=True)
