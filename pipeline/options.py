"""Option parsing for ``format("sundial")``: spark-sql-kafka's names, defaults and precedence.

Pure Python (no pyspark, no network); :func:`parse_options` runs on the Spark driver
when a query is planned, so every mistake fails before any task starts, with an
:class:`OptionError` whose message names the option.

Names are case-insensitive (Spark lower-cases them); values are strings.

Precedence, exactly as the Kafka connector: for each end of the range,
``*Timestamp`` (one timestamp for all partitions) beats ``*OffsetsByTimestamp``
(per partition) beats ``*Offsets`` (``earliest``/``latest``/JSON). Defaults:
batch ``earliest`` .. ``latest``; streaming starts at ``latest``. Ending options are
rejected in streaming queries, ``latest`` as a batch start and ``earliest`` as a batch
end are rejected.

Kafka consumer settings pass through as ``kafka.<name>``. The keys Spark rejects
(``auto.offset.reset``, ``key.deserializer``, ``value.deserializer``,
``enable.auto.commit``, ``interceptor.classes``) are rejected here too.
``kafka.group.id`` and ``groupIdPrefix`` are accepted and unused: this source never
joins a group.

Sundial's own options live under ``sundial.``; an unknown ``sundial.*`` key is an error
(a typo there would silently change results):

* ``sundial.outputFormat`` = ``arrow`` (default) | ``rows``
* ``sundial.arrowBatchRows`` = most rows per Arrow batch (default 100000; a batch
  never holds more than one Fetch response)
* ``sundial.exactTimeWindow`` = ``false`` (default) | ``true``: keep only records whose
  timestamp lies in [start timestamp, end timestamp) of their partition, reading past
  the ending offset so that out-of-order CreateTime records are not lost
* ``sundial.exactTimeWindow.maxDisorderMs``: stop that extra scan at the offset of
  (end timestamp + this many ms) instead of the log end offset
* ``sundial.fetcher`` = ``auto`` (default) | ``wire`` | ``consumer``: how tasks read
  (``wire`` is the fast Fetch client for PLAINTEXT listeners; ``consumer`` is
  kafka-python's KafkaConsumer, needed for SSL/SASL; ``auto`` picks by
  ``kafka.security.protocol``)
* ``sundial.filterPushdown`` = ``false`` (default) | ``true``: batch reads take
  ``WHERE`` filters on timestamp, partition, offset and topic as offset ranges
  (:mod:`pipeline.pushdown`); needs ``spark.sql.python.filterPushdown.enabled=true``
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from .errors import OptionError
from .offsets import (
    EARLIEST,
    LATEST,
    EarliestLimit,
    GlobalTimestamp,
    LatestLimit,
    OffsetJsonError,
    OffsetLimit,
    SpecificOffsets,
    SpecificTimestamps,
    TopicPartition,
    parse_assign,
    parse_partition_offsets,
    parse_partition_timestamps,
)

DEFAULT_POLL_TIMEOUT_MS = 120_000          # Spark falls back to spark.network.timeout (120 s)
DEFAULT_MAX_TRIGGER_DELAY = "15m"
DEFAULT_ARROW_BATCH_ROWS = 100_000      # an upper bound: a batch is at most one Fetch response
DEFAULT_FETCH_NUM_RETRIES = 3
DEFAULT_FETCH_RETRY_INTERVAL_MS = 1000

REJECTED_KAFKA_KEYS = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured "
        "Streaming manages which offsets are consumed internally; 'startingOffsets' only applies "
        "when a new streaming query is started, and resuming always picks up from where the "
        "query left off."),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are returned as bytes. "
        "Use DataFrame operations to explicitly deserialize the keys."),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are returned as bytes. "
        "Use DataFrame operations to explicitly deserialize the values."),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}

# canonical spelling of every option this source understands, by lower-cased key
KNOWN_OPTIONS = {name.lower(): name for name in (
    "kafka.bootstrap.servers", "assign", "subscribe", "subscribePattern",
    "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets",
    "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "minPartitions",
    "maxRecordsPerPartition", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "includeHeaders", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "groupIdPrefix",
    "sundial.outputFormat", "sundial.arrowBatchRows", "sundial.exactTimeWindow",
    "sundial.exactTimeWindow.maxDisorderMs", "sundial.fetcher", "sundial.filterPushdown",
)}

STRATEGY_KEYS = ("subscribe", "subscribepattern", "assign")


@dataclass(frozen=True)
class Subscription:
    """What to read: exactly one of ``assign``, ``subscribe``, ``subscribePattern``."""

    kind: str                                   # "assign" | "subscribe" | "subscribePattern"
    topics: tuple[str, ...] = ()                # subscribe
    pattern: str | None = None                  # subscribePattern (Python ``re`` syntax)
    assigned: tuple[TopicPartition, ...] = ()   # assign

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.assigned)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit | None                  # None for streaming queries
    starting_strategy: str = "error"            # startingOffsetsByTimestampStrategy
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_num_retries: int = DEFAULT_FETCH_NUM_RETRIES
    fetch_retry_interval_ms: int = DEFAULT_FETCH_RETRY_INTERVAL_MS
    kafka_params: Mapping[str, str] = field(default_factory=dict)   # "kafka." stripped
    output_format: str = "arrow"
    arrow_batch_rows: int = DEFAULT_ARROW_BATCH_ROWS
    exact_time_window: bool = False
    exact_window_max_disorder_ms: int | None = None
    fetcher: str = "auto"
    filter_pushdown: bool = False
    streaming: bool = False

    @property
    def read_committed(self) -> bool:
        return self.kafka_params.get("isolation.level", "read_uncommitted").lower() == "read_committed"

    @property
    def use_wire_fetcher(self) -> bool:
        if self.fetcher != "auto":
            return self.fetcher == "wire"
        return self.kafka_params.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT"


# --- scalar parsers ------------------------------------------------------------------

def bool_option(opts: Mapping[str, str], key: str, default: bool, names: Mapping[str, str] | None = None) -> bool:
    """Option ``key`` (lower-cased) as true or false; ``names`` spells it for errors (default: the source's)."""
    if key not in opts:
        return default
    raw = str(opts[key]).strip().lower()
    if raw in ("true", "false"):
        return raw == "true"
    name = (names or KNOWN_OPTIONS)[key]
    raise OptionError(name, f"option '{name}' must be 'true' or 'false', got '{opts[key]}'")


def _integer_option(opts: Mapping[str, str], key: str, refusal) -> tuple[str, int]:
    """(Spark's name of option ``key``, its value read as an integer); else an error with the message
    ``refusal(name, stripped text)``."""
    name = KNOWN_OPTIONS[key]
    raw = str(opts[key]).strip()
    try:
        return name, int(raw)
    except ValueError:
        raise OptionError(name, refusal(name, raw)) from None


def _int(opts: Mapping[str, str], key: str, default: int | None, *, minimum: int | None = None,
         positive: bool = False) -> int | None:
    if key not in opts:
        return default
    name, value = _integer_option(opts, key, lambda name, raw: f"option '{name}' must be an integer, got '{opts[key]}'")
    if positive and value <= 0:
        raise OptionError(name, f"{name} must be positive, got {value}")
    if minimum is not None and value < minimum:
        raise OptionError(name, f"{name} must be >= {minimum}, got {value}")
    return value


_TIME_UNITS_MS = {
    "us": 0.001, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
    "h": 3_600_000, "d": 86_400_000,
}


def parse_time_ms(text: str, option: str) -> int:
    """Spark's ``timeStringAsMs``: ``500``, ``500ms``, ``10s``, ``15m``, ``2h``, ``1d``."""
    m = re.fullmatch(r"\s*(-?\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m:
        raise OptionError(option, f"option '{option}' must be a duration such as '500ms', '10s' or '15m', got '{text}'")
    value, unit = int(m.group(1)), m.group(2).lower() or "ms"
    if unit not in _TIME_UNITS_MS:
        raise OptionError(option, f"option '{option}' has an unknown time unit '{unit}' in '{text}'")
    if value < 0:
        raise OptionError(option, f"option '{option}' must not be negative, got '{text}'")
    return int(value * _TIME_UNITS_MS[unit])


# --- the offset-range options --------------------------------------------------------

def _timestamp_value(opts: Mapping[str, str], key: str) -> int:
    name, value = _integer_option(
        opts, key, lambda name, raw: f"option '{name}': expected a single long value (epoch ms), got {raw}")
    if value < 0:
        raise OptionError(name, f"option '{name}' must be epoch milliseconds >= 0, got {value}")
    return value


def offset_limit(opts: Mapping[str, str], ts_key: str, by_ts_key: str, offsets_key: str,
                 default: OffsetLimit) -> OffsetLimit:
    """One end of the range, by the connector's precedence (timestamp > per-partition > offsets)."""
    if ts_key in opts:
        return GlobalTimestamp(_timestamp_value(opts, ts_key))
    if by_ts_key in opts:
        try:
            return SpecificTimestamps(parse_partition_timestamps(opts[by_ts_key]))
        except OffsetJsonError as exc:
            raise OptionError(KNOWN_OPTIONS[by_ts_key], f"option '{KNOWN_OPTIONS[by_ts_key]}': {exc}") from None
    if offsets_key in opts:
        raw = str(opts[offsets_key]).strip()
        if raw.lower() == "latest":
            return LatestLimit()
        if raw.lower() == "earliest":
            return EarliestLimit()
        try:
            return SpecificOffsets(parse_partition_offsets(raw))
        except OffsetJsonError as exc:
            raise OptionError(KNOWN_OPTIONS[offsets_key], f"option '{KNOWN_OPTIONS[offsets_key]}': {exc}") from None
    return default


def _starting_limit(opts: Mapping[str, str], default: OffsetLimit) -> OffsetLimit:
    return offset_limit(opts, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets", default)


def _ending_limit(opts: Mapping[str, str]) -> OffsetLimit:
    return offset_limit(opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", LatestLimit())


def _option_name(opts: Mapping[str, str], side: str) -> str:
    """The ``side`` ("starting" or "ending") option given, spelled as Spark spells it (the offsets one if none)."""
    for key in (f"{side}timestamp", f"{side}offsetsbytimestamp", f"{side}offsets"):
        if key in opts:
            return KNOWN_OPTIONS[key]
    return f"{side}Offsets"


def _check_batch_limits(opts: Mapping[str, str], start: OffsetLimit, end: OffsetLimit) -> None:
    # a batch query starts nowhere at latest and ends nowhere at earliest (Spark's messages)
    for limit, option, refused_limit, refused_offset, whole, per_partition in (
            (start, "startingOffsets", LatestLimit, LATEST, "starting offset can't be latest",
             "startingOffsets for {} can't be latest"),
            (end, "endingOffsets", EarliestLimit, EARLIEST, "ending offset can't be earliest",
             "ending offset for {} can't be earliest")):
        if isinstance(limit, refused_limit):
            raise OptionError(option, f"{whole} for batch queries on Kafka")
        if isinstance(limit, SpecificOffsets):
            for tp, off in sorted(limit.offsets.items()):
                if off == refused_offset:
                    raise OptionError(option, f"{per_partition.format(tp)} for batch queries on Kafka")
    # the connector's checkOffsetLimitValidity, plus the single-timestamp case
    if isinstance(start, SpecificOffsets) and isinstance(end, SpecificOffsets):
        # the sentinels (-1 latest, -2 earliest) are not compared
        _check_per_partition_limits(start.offsets, end.offsets, "Offsets", lambda s, e: s >= 0 and e >= 0 and s > e)
    if isinstance(start, SpecificTimestamps) and isinstance(end, SpecificTimestamps):
        _check_per_partition_limits(start.timestamps, end.timestamps, "OffsetsByTimestamp", lambda s, e: s > e)
    if isinstance(start, GlobalTimestamp) and isinstance(end, GlobalTimestamp):
        if start.timestamp_ms > end.timestamp_ms:
            raise OptionError(_option_name(opts, "starting"), (
                f"startingTimestamp ({start.timestamp_ms}) is greater than endingTimestamp ({end.timestamp_ms})"))


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in STRATEGY_KEYS if k in opts]
    if not given:
        raise OptionError("subscribe", (
            "One of the following options must be specified for Kafka source: "
            "subscribe, subscribePattern, assign. See the docs for more details."))
    if len(given) > 1:
        raise OptionError(KNOWN_OPTIONS[given[1]], (
            "Only one of the following options can be specified for Kafka source: "
            "subscribe, subscribePattern, assign. See the docs for more details."))
    key = given[0]
    value = str(opts[key])
    if key == "assign":
        if not value.strip().startswith("{"):
            raise OptionError("assign", f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        try:
            assigned = parse_assign(value)
        except OffsetJsonError as exc:
            raise OptionError("assign", f"option 'assign': {exc}") from None
        return Subscription("assign", assigned=tuple(assigned))
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe", f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)))
    pattern = value.strip()
    if not pattern:
        raise OptionError("subscribePattern", (
            f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'"))
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError("subscribePattern", f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
    return Subscription("subscribePattern", pattern=pattern)


def _kafka_params(opts: Mapping[str, str]) -> dict[str, str]:
    params = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in REJECTED_KAFKA_KEYS:
            raise OptionError(key, REJECTED_KAFKA_KEYS[name])
        params[name] = str(value)
    level = params.get("isolation.level")
    if level is not None and level.lower() not in ("read_committed", "read_uncommitted"):
        raise OptionError("kafka.isolation.level", (
            f"option 'kafka.isolation.level' must be 'read_committed' or 'read_uncommitted', got '{level}'"))
    return params


def _check_per_partition_limits(start: Mapping, end: Mapping, option: str, start_after_end) -> None:
    """startingX and endingX (``option``: X) name the same partitions, and no partition's start is after
    its end (``start_after_end(start, end)``)."""
    if set(start) != set(end):
        raise OptionError(f"ending{option}", (
            f"starting{option} and ending{option} must name the same topic partitions: "
            f"starting {sorted(map(str, start))}, ending {sorted(map(str, end))}"))
    for tp in sorted(start):
        s, e = start[tp], end[tp]
        if start_after_end(s, e):
            raise OptionError(f"starting{option}", (
                f"starting{option} for {tp} ({s}) is greater than ending{option} ({e})"))


def lowered_options(raw: Mapping[str, str], known: Mapping[str, str], *, sink: bool = False) -> dict:
    """``raw`` keyed by lower-cased names (Spark's options are case-insensitive); a ``sundial.`` name
    that is not in ``known`` (lower-cased name → Spark's spelling) is refused, naming the known ones."""
    opts = {str(k).lower(): v for k, v in dict(raw).items()}
    for key in opts:
        if key.startswith("sundial.") and key not in known:
            names = ", ".join(sorted(v for v in known.values() if v.startswith("sundial.")))
            raise OptionError(key, f"unknown option '{key}' for the sink; Sundial's own sink options are: {names}"
                              if sink else f"unknown option '{key}'; Sundial's own options are: {names}")
    return opts


def bootstrap_servers(opts: Mapping[str, str], client: str) -> str:
    """The required ``kafka.bootstrap.servers`` (``client``: "consumer" or "producer", for the message)."""
    bootstrap = str(opts.get("kafka.bootstrap.servers", "")).strip()
    if not bootstrap:
        raise OptionError("kafka.bootstrap.servers",
                          f"Option 'kafka.bootstrap.servers' must be specified for configuring Kafka {client}")
    return bootstrap


def parse_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate and interpret the options of one ``spark.read``/``readStream`` call."""
    opts = lowered_options(raw, KNOWN_OPTIONS)
    bootstrap = bootstrap_servers(opts, "consumer")
    subscription = _subscription(opts)
    kafka_params = _kafka_params(opts)

    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy", (
            f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got '{opts['startingoffsetsbytimestampstrategy']}'"))

    if streaming:
        for key, message in (("endingoffsets", "ending offset not valid in streaming queries"),
                             ("endingoffsetsbytimestamp", "ending timestamp not valid in streaming queries"),
                             ("endingtimestamp", "ending timestamp not valid in streaming queries")):
            if key in opts:
                raise OptionError(KNOWN_OPTIONS[key], message)
        starting = _starting_limit(opts, LatestLimit())
        ending = None
    else:
        starting = _starting_limit(opts, EarliestLimit())
        ending = _ending_limit(opts)
        _check_batch_limits(opts, starting, ending)

    max_per_trigger = _int(opts, "maxoffsetspertrigger", None, positive=True)
    min_per_trigger = _int(opts, "minoffsetspertrigger", None, positive=True)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError("minOffsetsPerTrigger", (
            f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({max_per_trigger})."))
    delay_ms = parse_time_ms(opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY), "maxTriggerDelay")

    output_format = str(opts.get("sundial.outputformat", "arrow")).strip().lower()
    if output_format not in ("arrow", "rows"):
        raise OptionError("sundial.outputFormat", f"option 'sundial.outputFormat' must be 'arrow' or 'rows', got '{opts['sundial.outputformat']}'")
    fetcher = str(opts.get("sundial.fetcher", "auto")).strip().lower()
    if fetcher not in ("auto", "wire", "consumer"):
        raise OptionError("sundial.fetcher", f"option 'sundial.fetcher' must be 'auto', 'wire' or 'consumer', got '{opts['sundial.fetcher']}'")

    exact = bool_option(opts, "sundial.exacttimewindow", False)
    disorder = _int(opts, "sundial.exacttimewindow.maxdisorderms", None, minimum=0)
    if exact:
        has_start_ts = isinstance(starting, (GlobalTimestamp, SpecificTimestamps))
        has_end_ts = ending is not None and isinstance(ending, (GlobalTimestamp, SpecificTimestamps))
        if not (has_start_ts or has_end_ts):
            raise OptionError("sundial.exactTimeWindow", (
                "option 'sundial.exactTimeWindow' needs a time window: set startingTimestamp/"
                "startingOffsetsByTimestamp and/or endingTimestamp/endingOffsetsByTimestamp"))
    elif disorder is not None:
        raise OptionError("sundial.exactTimeWindow.maxDisorderMs",
                          "option 'sundial.exactTimeWindow.maxDisorderMs' only applies with sundial.exactTimeWindow=true")
    pushdown = bool_option(opts, "sundial.filterpushdown", False)
    if pushdown and streaming:
        raise OptionError("sundial.filterPushdown", (
            "option 'sundial.filterPushdown' applies to batch reads only: Spark pushes no filters into streaming "
            "sources. Use startingTimestamp (or startingOffsets) to choose where a stream starts"))

    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_strategy=strategy,
        fail_on_data_loss=bool_option(opts, "failondataloss", True),
        min_partitions=_int(opts, "minpartitions", None, positive=True),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", None, positive=True),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay_ms,
        include_headers=bool_option(opts, "includeheaders", False),
        poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", DEFAULT_POLL_TIMEOUT_MS, positive=True),
        fetch_num_retries=_int(opts, "fetchoffset.numretries", DEFAULT_FETCH_NUM_RETRIES, positive=True),
        fetch_retry_interval_ms=_int(opts, "fetchoffset.retryintervalms", DEFAULT_FETCH_RETRY_INTERVAL_MS, minimum=0),
        kafka_params=kafka_params,
        output_format=output_format,
        arrow_batch_rows=_int(opts, "sundial.arrowbatchrows", DEFAULT_ARROW_BATCH_ROWS, positive=True),
        exact_time_window=exact,
        exact_window_max_disorder_ms=disorder,
        fetcher=fetcher,
        filter_pushdown=pushdown,
        streaming=streaming,
    )


def validate_either_mode(raw: Mapping[str, str]) -> None:
    """Raise the :class:`OptionError` of options that are invalid for batch *and* streaming."""
    try:
        parse_options(raw, streaming=False)
    except OptionError:
        try:
            parse_options(raw, streaming=True)
        except OptionError as exc:
            raise exc from None


def include_headers_of(raw: Mapping[str, str]) -> bool:
    """``includeHeaders`` alone: the schema is needed before the full options are parsed."""
    opts = {str(k).lower(): v for k, v in dict(raw).items()}
    return bool_option(opts, "includeheaders", False)
