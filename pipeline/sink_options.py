"""Option parsing for the sink, ``df.write.format("sundial")`` / ``writeStream.format("sundial")``.

Pure Python (no pyspark, no network). The names are spark-sql-kafka's sink options,
case-insensitive, values strings:

* ``kafka.bootstrap.servers`` (required);
* ``topic``: the topic of every row; it overrides a ``topic`` column;
* ``kafka.<name>``: producer settings, passed to the producer client (librdkafka, through
  confluent-kafka) under the same name. Most Java producer names are librdkafka names
  too (``acks``, ``compression.type``, ``linger.ms``, ``batch.size``,
  ``enable.idempotence``, ``security.protocol``, ``sasl.mechanism``); a Java-only name
  librdkafka does not know is logged as ``kafka_option_ignored`` and skipped
  (:func:`pipeline.producer.producer_config`), as the reader does with kafka-python.

Refused, as Spark refuses them: ``kafka.key.serializer`` and ``kafka.value.serializer``
(keys and values are bytes or UTF-8 strings). Refused because the sink owns them:
``kafka.transactional.id`` (derived per task, see ``sundial.transactionalIdPrefix``).

Producer defaults where the sink differs from librdkafka's, so that it behaves like
Spark's Java producer: ``enable.idempotence=true`` (Kafka's default since 3.0) and
``partitioner=murmur2_random`` (the Java client's hash of keyed records, so a key lands
in the same partition as from a Java producer). As in the Java client, an explicit
``kafka.acks`` other than ``all``/``-1`` without an explicit ``kafka.enable.idempotence``
turns idempotence off instead of failing.

Sundial's own options (an unknown ``sundial.*`` key is an error):

* ``sundial.exactlyOnce`` = ``false`` (default) | ``true``: each task writes inside one
  Kafka transaction, committed with a marker that makes a re-run of the same task
  (retry, or a restarted micro-batch) abort instead of publishing again
  (:mod:`pipeline.producer`);
* ``sundial.transactionalIdPrefix`` (default ``sundial-spark-``): the start of every
  transactional id and marker group id the sink uses (Kafka ACLs grant by prefix);
* ``sundial.inputFormat`` = ``arrow`` (default) | ``rows``: Spark hands each task Arrow
  record batches, or Row objects (slower; for comparison).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .errors import OptionError
from .options import bool_option, bootstrap_servers, lowered_options

DEFAULT_TRANSACTIONAL_ID_PREFIX = "sundial-spark-"
MAX_TRANSACTIONAL_ID_PREFIX_CHARS = 100

SINK_OPTIONS = {name.lower(): name for name in (
    "kafka.bootstrap.servers", "topic",
    "sundial.exactlyOnce", "sundial.transactionalIdPrefix", "sundial.inputFormat",
)}

REJECTED_PRODUCER_KEYS = {
    "key.serializer": ("Kafka option 'key.serializer' is not supported: keys are written as bytes "
                       "(a string key is written as its UTF-8 bytes). Serialize keys with DataFrame operations."),
    "value.serializer": ("Kafka option 'value.serializer' is not supported: values are written as bytes "
                         "(a string value is written as its UTF-8 bytes). Serialize values with DataFrame "
                         "operations."),
    "transactional.id": ("Kafka option 'transactional.id' is not supported: with sundial.exactlyOnce=true the "
                         "sink derives one transactional id per task; set sundial.transactionalIdPrefix to "
                         "choose how they start."),
}

# producer settings the sink sets unless the user does (see the module docstring)
PRODUCER_DEFAULTS = {
    "enable.idempotence": "true",
    "partitioner": "murmur2_random",
}


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    producer_settings: Mapping[str, str] = field(default_factory=dict)   # librdkafka names and string values
    exactly_once: bool = False
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    input_format: str = "arrow"
    streaming: bool = False

    @property
    def idempotent(self) -> bool:
        return str(self.producer_settings.get("enable.idempotence", "false")).lower() == "true"


def _producer_settings(opts: Mapping[str, str], exactly_once: bool) -> dict[str, str]:
    settings: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka."):]
        if name in REJECTED_PRODUCER_KEYS:
            raise OptionError(key, REJECTED_PRODUCER_KEYS[name])
        settings[name] = str(value).strip()
    acks = settings.get("acks")
    weak_acks = acks is not None and acks.lower() not in ("all", "-1")
    if "enable.idempotence" in settings:
        idempotence = settings["enable.idempotence"].lower()
        if idempotence not in ("true", "false"):
            raise OptionError("kafka.enable.idempotence", (
                f"option 'kafka.enable.idempotence' must be 'true' or 'false', got '{settings['enable.idempotence']}'"))
        settings["enable.idempotence"] = idempotence
    elif weak_acks:
        settings["enable.idempotence"] = "false"      # the Java client's rule for an explicit weaker acks
    for name, value in PRODUCER_DEFAULTS.items():
        settings.setdefault(name, value)
    if exactly_once:
        if weak_acks:
            raise OptionError("kafka.acks", (
                f"sundial.exactlyOnce=true writes through transactions, which need acks=all; got kafka.acks={acks}"))
        if settings["enable.idempotence"] != "true":
            raise OptionError("kafka.enable.idempotence", (
                "sundial.exactlyOnce=true writes through transactions, which need an idempotent producer: "
                "remove kafka.enable.idempotence=false"))
    return settings


def parse_sink_options(raw: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    """Validate and interpret the options of one ``write``/``writeStream`` call."""
    opts = lowered_options(raw, SINK_OPTIONS, sink=True)
    bootstrap = bootstrap_servers(opts, "producer")
    topic = opts.get("topic")
    if topic is not None:
        topic = str(topic).strip()
        if not topic:
            raise OptionError("topic", "option 'topic' is empty; give a topic name or leave the option out "
                                       "and write a 'topic' column")
    exactly_once = bool_option(opts, "sundial.exactlyonce", False, SINK_OPTIONS)
    prefix = str(opts.get("sundial.transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX))
    if not prefix.strip() or len(prefix) > MAX_TRANSACTIONAL_ID_PREFIX_CHARS:
        raise OptionError("sundial.transactionalIdPrefix", (
            f"option 'sundial.transactionalIdPrefix' must be 1 to {MAX_TRANSACTIONAL_ID_PREFIX_CHARS} characters, "
            f"got '{prefix}'"))
    input_format = str(opts.get("sundial.inputformat", "arrow")).strip().lower()
    if input_format not in ("arrow", "rows"):
        raise OptionError("sundial.inputFormat", (
            f"option 'sundial.inputFormat' must be 'arrow' or 'rows', got '{opts['sundial.inputformat']}'"))
    return SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic,
        producer_settings=_producer_settings(opts, exactly_once),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        input_format=input_format,
        streaming=streaming,
    )
