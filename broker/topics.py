"""Topic creation rules shared by CreateTopics, Metadata auto-creation and the tools.

Kafka's rules: a topic name is 1–249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or
``..``; two names that differ only by ``.`` versus ``_`` collide (their metric names
would be equal) and the second is refused; partitions must be positive; the
replication factor of a single node is 1 (or -1 for "the default"); configs are
topic-level keys with valid values. Each refusal is an exception carrying the Kafka
error code and a message, so callers can answer per topic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import structlog

from sundial.config import ConfigError
from sundial.config.topic_names import collision_key, topic_name_problem
from sundial.protocol.errors import ErrorCode
from sundial.storage.errors import KafkaStorageError
from sundial.storage.topics import InvalidTopicError, TopicAlreadyExistsError

logger = structlog.get_logger(__name__)

#: Kafka's internal topics, named here once (their owners import the names).
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})


class TopicError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def validate_topic_name(name: str | None) -> None:
    """INVALID_TOPIC_EXCEPTION with Kafka's message unless ``name`` is legal (:mod:`config.topic_names`)."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    name: str
    topic_id: bytes
    partitions: int
    replication_factor: int


def _check_create(broker, name: str, num_partitions: int, replication_factor: int,
                  configs: dict[str, str | None] | None, assignments: dict[int, list[int]] | None
                  ) -> tuple[int, dict[str, str]]:
    """Kafka's refusals of a creation (TopicError); the partition count and the overrides."""
    logs = broker.logs
    validate_topic_name(name)
    if logs.topic(name) is not None:
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
    key = collision_key(name)
    for other in logs.topics():
        if collision_key(other.name) == key:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"topic '{name}' collides with existing topic '{other.name}'")
    if assignments:
        num_partitions = len(assignments)
        for p, replicas in assignments.items():
            if sorted(set(replicas)) != [broker.node_id] or p not in range(num_partitions):
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"partition {p} must be assigned to broker {broker.node_id} only")
    if num_partitions == -1:
        num_partitions = broker.config.topic_admin.num_partitions
    if num_partitions <= 0:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be larger than 0")
    if replication_factor not in (-1, 1):
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"replication factor {replication_factor} is larger than the 1 available broker")
    overrides = {k: v for k, v in (configs or {}).items() if v is not None}
    try:
        broker.config.topic_config(overrides)
    except ConfigError as exc:
        raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return num_partitions, overrides


def _created(broker, meta, overrides: dict[str, str], via: str, client_id: str | None) -> CreatedTopic:
    logger.info("topic_created", topic=meta.name, topic_id=str(uuid.UUID(bytes=bytes(meta.topic_id))),
                partitions=meta.partitions, configs=overrides, via=via, client_id=client_id)
    if getattr(broker, "groups", None) is not None:
        broker.groups.topics_changed()     # consumer groups' regexes and subscriptions
    return CreatedTopic(meta.name, meta.topic_id, meta.partitions, 1)


def create_topic(broker, name: str, num_partitions: int, replication_factor: int = -1,
                 configs: dict[str, str | None] | None = None, *, validate_only: bool = False,
                 assignments: dict[int, list[int]] | None = None, via: str = "CreateTopics",
                 client_id: str | None = None) -> CreatedTopic:
    """Create a topic (or only validate the request) with its file work on this thread (start-up,
    tools, tests); raises TopicError with Kafka's code. Requests use :func:`create_topic_durably`.

    A created topic is logged once (``topic_created``: name, id, partitions, the configs
    set on it, ``via`` CreateTopics or auto-creation, and the asking client's id)."""
    num_partitions, overrides = _check_create(broker, name, num_partitions, replication_factor, configs,
                                              assignments)
    if validate_only:
        return CreatedTopic(name, b"\0" * 16, num_partitions, 1)
    meta = broker.logs.create_topic(name, num_partitions, overrides)
    return _created(broker, meta, overrides, via, client_id)


async def create_topic_durably(broker, name: str, num_partitions: int, replication_factor: int = -1,
                               configs: dict[str, str | None] | None = None, *, validate_only: bool = False,
                               assignments: dict[int, list[int]] | None = None, via: str = "CreateTopics",
                               client_id: str | None = None) -> CreatedTopic:
    """:func:`create_topic` with the file work (the topic list written and fsynced, then the
    partition directories) on the scheduler's ordered thread: the event loop serves other
    requests meanwhile, and the topic is served, and reported created, only once the topic
    list holding it is durable. A failed write is KAFKA_STORAGE_ERROR and creates nothing."""
    num_partitions, overrides = _check_create(broker, name, num_partitions, replication_factor, configs,
                                              assignments)
    if validate_only:
        return CreatedTopic(name, b"\0" * 16, num_partitions, 1)
    logs = broker.logs
    try:
        pending = logs.prepare_create_topic(name, num_partitions, overrides)
    except TopicAlreadyExistsError as exc:   # its creation is under way
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)) from None
    except InvalidTopicError as exc:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
    try:
        await _run_ordered(broker, pending.run)
    except BaseException as exc:
        logs.abandon_create_topic(pending)
        if isinstance(exc, (KafkaStorageError, OSError)):
            logger.error("topic_create_failed", topic=name, error=str(exc))
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create topic '{name}': {exc}") from None
        raise
    return _created(broker, logs.finish_create_topic(pending), overrides, via, client_id)


async def delete_topic_durably(broker, name: str):
    """Delete a topic: gone at once for every request (the caller drops what else refers to it);
    returns once the topic list without it is durable and its directories are renamed for
    deletion, on the scheduler's ordered thread (so before any later creation of the name makes
    its directories). Raises ``storage`` UnknownTopicOrPartitionError, or KafkaStorageError."""
    logs = broker.logs
    pending = logs.prepare_delete_topic(name)
    await _run_ordered(broker, pending.run)
    logs.finish_delete_topic(pending)
    return pending.meta


async def _run_ordered(broker, fn) -> None:
    scheduler = getattr(getattr(broker, "replica_manager", None), "scheduler", None)
    if scheduler is None:
        fn()
    else:
        await scheduler.run_ordered(fn)


def auto_create_allowed(broker, name: str) -> bool:
    return broker.config.topic_admin.auto_create_topics_enable and not name.startswith("__")
