"""The broker settings the consumer-group state machine reads, typed (Kafka ``GroupCoordinatorConfig``).

The daemon builds one :class:`ConsumerGroupSettings` from its configuration (``group.consumer.*``,
Kafka's names and defaults) and hands it to the manager. The per-group settings that
IncrementalAlterConfigs can change on a GROUP resource (``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``) are not here: the manager asks for them per group on each
heartbeat through the ``group_settings`` callable it is given, so a change applies from the
member's next heartbeat, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kafka ``GroupCoordinatorConfig.CONSUMER_GROUP_MAX_SIZE_DEFAULT``.
DEFAULT_MAX_SIZE = 2**31 - 1
#: Kafka ``CONSUMER_GROUP_REGEX_REFRESH_INTERVAL_MS_DEFAULT`` (10 minutes).
DEFAULT_REGEX_REFRESH_INTERVAL_MS = 600_000


@dataclass(frozen=True)
class ConsumerGroupSettings:
    #: ``group.consumer.max.size``: members a group accepts; a new one beyond gets GROUP_MAX_SIZE_REACHED.
    max_size: int = DEFAULT_MAX_SIZE
    #: ``group.consumer.assignors`` (names): the first is the default; others get UNSUPPORTED_ASSIGNOR.
    assignors: tuple[str, ...] = ("uniform", "range")
    #: ``group.consumer.regex.refresh.interval.ms``: how often a group's regexes are re-resolved
    #: even when no topic was created or deleted meanwhile.
    regex_refresh_interval_ms: int = DEFAULT_REGEX_REFRESH_INTERVAL_MS
    #: ``group.consumer.migration.policy``: whether a classic group with members converts to a
    #: consumer group when a consumer-protocol member joins (upgrade), and a consumer group whose
    #: last consumer-protocol member leaves converts back to classic (downgrade). Empty groups
    #: always convert. Kafka's default, ``bidirectional``, allows both.
    upgrade_enabled: bool = True
    downgrade_enabled: bool = True
    #: ``group.max.size``: a downgrade is refused when the classic group would be larger.
    classic_max_size: int = DEFAULT_MAX_SIZE
