"""The driver's offset client: Metadata and ListOffsets through kafka-python's KafkaConsumer.

:class:`KafkaOffsetClient` implements :class:`pipeline.resolve.OffsetClient`. It never
joins a group (``group_id=None``), never commits and never fetches records; every call
is retried ``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs`` apart, with
a fresh consumer after a failure (the connector's ``withRetries``).

:func:`consumer_config` turns ``kafka.*`` source options into kafka-python keyword
arguments: dots become underscores (``kafka.security.protocol`` -> ``security_protocol``)
and string values are converted to the type of kafka-python's default. A Java-only
setting kafka-python does not know (``sasl.jaas.config``, ...) is logged as
``kafka_option_ignored`` and skipped, as the Java client warns about unknown configs.
"""

from __future__ import annotations

import re
import time
from typing import Callable, Mapping, Sequence, TypeVar

import structlog

from .errors import OffsetResolutionError, OptionError
from .offsets import TopicPartition
from .options import SourceOptions, Subscription

logger = structlog.get_logger(__name__)

T = TypeVar("T")

# settings this source owns; a kafka.* option cannot override them
_FORCED = {"group_id", "enable_auto_commit", "auto_offset_reset", "key_deserializer", "value_deserializer",
           "bootstrap_servers"}
_NUMERIC_NONE_DEFAULTS = {"receive_buffer_bytes", "send_buffer_bytes"}


def consumer_config(kafka_params: Mapping[str, str], bootstrap_servers: str, *, client_id: str) -> dict:
    """kafka-python ``KafkaConsumer`` keyword arguments for ``kafka.*`` options."""
    from kafka import KafkaConsumer

    defaults = KafkaConsumer.DEFAULT_CONFIG
    config: dict = {}
    for name, raw in kafka_params.items():
        key = name.replace(".", "_")
        option = f"kafka.{name}"
        if key in _FORCED or key == "group_id":
            continue
        if key not in defaults:
            logger.warning("kafka_option_ignored", option=option, reason="kafka-python has no such setting")
            continue
        default = defaults[key]
        text = str(raw).strip()
        try:
            if isinstance(default, bool):
                if text.lower() not in ("true", "false"):
                    raise ValueError("expected true or false")
                value = text.lower() == "true"
            elif isinstance(default, int):
                value = int(text)
            elif isinstance(default, float):
                value = float(text)
            elif key == "api_version":
                value = tuple(int(part) for part in text.split("."))
            elif default is None and key in _NUMERIC_NONE_DEFAULTS:
                value = int(text)
            elif default is None or isinstance(default, str):
                value = text
            else:
                raise OptionError(option, f"option '{option}' cannot be set through a source option")
        except ValueError as exc:
            raise OptionError(option, f"option '{option}' has an invalid value '{raw}': {exc}") from None
        config[key] = value
    config.update(
        bootstrap_servers=[s.strip() for s in bootstrap_servers.split(",") if s.strip()],
        group_id=None,
        enable_auto_commit=False,
        client_id=config.get("client_id", client_id),
    )
    config.setdefault("allow_auto_create_topics", False)   # reading must never create a topic
    return config


class KafkaOffsetClient:
    """OffsetClient over kafka-python, created lazily and reset after errors."""

    def __init__(self, opts: SourceOptions, *, client_id: str = "sundial-spark-driver") -> None:
        self.opts = opts
        self.config = consumer_config(opts.kafka_params, opts.bootstrap_servers, client_id=client_id)
        self._consumer = None

    # --- plumbing ----------------------------------------------------------------------

    def _get(self):
        if self._consumer is None:
            from kafka import KafkaConsumer

            self._consumer = KafkaConsumer(**self.config)
        return self._consumer

    def _reset(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close(autocommit=False)
            except Exception:  # closing a broken client must not hide the original error
                pass

    def _with_retries(self, what: str, body: Callable[[object], T]) -> T:
        from kafka.errors import KafkaError

        attempts = self.opts.fetch_num_retries
        for attempt in range(1, attempts + 1):
            try:
                return body(self._get())
            except (OffsetResolutionError, OptionError):
                raise
            except (KafkaError, OSError) as exc:
                logger.warning("offset_request_failed", request=what, attempt=attempt, attempts=attempts,
                               error=repr(exc))
                self._reset()
                if attempt == attempts:
                    raise OffsetResolutionError(None, (
                        f"{what} failed {attempts} times against {self.opts.bootstrap_servers}: {exc}")) from exc
                time.sleep(self.opts.fetch_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    @staticmethod
    def _kafka_tps(tps: Sequence[TopicPartition]):
        from kafka import TopicPartition as KafkaTopicPartition

        return [KafkaTopicPartition(tp.topic, tp.partition) for tp in tps]

    # --- OffsetClient ------------------------------------------------------------------

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        def body(consumer) -> list[TopicPartition]:
            if subscription.kind == "subscribePattern":
                consumer.topics()          # refreshes metadata for all topics
                names = sorted(t for t in consumer.topics() if re.fullmatch(subscription.pattern, t))
            elif subscription.kind == "subscribe":
                names = list(subscription.topics)
            else:
                names = sorted({tp.topic for tp in subscription.assigned})
            found: list[TopicPartition] = []
            for name in names:
                parts = consumer.partitions_for_topic(name)
                if not parts:
                    if subscription.kind == "assign":
                        raise OffsetResolutionError("assign", f"option 'assign' names topic '{name}', which does not exist")
                    logger.warning("subscribed_topic_missing", topic=name)
                    continue
                if subscription.kind == "assign":
                    wanted = [tp for tp in subscription.assigned if tp.topic == name]
                    missing = [str(tp) for tp in wanted if tp.partition not in parts]
                    if missing:
                        raise OffsetResolutionError("assign", (
                            f"option 'assign' names partitions that do not exist: {missing} "
                            f"(topic '{name}' has {len(parts)} partitions)"))
                    found.extend(wanted)
                else:
                    found.extend(TopicPartition(name, p) for p in parts)
            return sorted(found)

        return self._with_retries("Metadata", body)

    def earliest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        result = self._with_retries("ListOffsets(earliest)", lambda c: c.beginning_offsets(self._kafka_tps(tps)))
        return {TopicPartition(tp.topic, tp.partition): int(off) for tp, off in result.items()}

    def latest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        result = self._with_retries("ListOffsets(latest)", lambda c: c.end_offsets(self._kafka_tps(tps)))
        return {TopicPartition(tp.topic, tp.partition): int(off) for tp, off in result.items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        if not timestamps:
            return {}
        from kafka import TopicPartition as KafkaTopicPartition

        query = {KafkaTopicPartition(tp.topic, tp.partition): int(ts) for tp, ts in timestamps.items()}
        result = self._with_retries("ListOffsets(timestamp)", lambda c: c.offsets_for_times(query))
        out: dict[TopicPartition, int | None] = {}
        for tp, found in result.items():
            out[TopicPartition(tp.topic, tp.partition)] = None if found is None else int(found.offset)
        return out

    def close(self) -> None:
        self._reset()
