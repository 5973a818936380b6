"""Every Sundial setting, with Kafka's dotted names and defaults.

* :mod:`config.defs`: how a setting is declared and parsed (:class:`ConfigDef`, :class:`ConfigError`).
* :mod:`config.topic`: topic-level keys (Kafka's ``LogConfig``) and :func:`resolve_topic_config`,
  which gives a topic's effective :class:`TopicConfig` from its overrides and the broker's keys.
* :mod:`config.broker`: broker-level keys (Kafka's ``KafkaConfig``) and :class:`BrokerConfig`.
* :mod:`config.group_coordinator`: the group protocols' broker keys (``group.consumer.*``,
  ``group.share.*``, ``group.streams.*``) and :class:`GroupCoordinatorConfig`.
* :mod:`config.group`: the GROUP config resource (a group's own keys), its validation and rows.
* :mod:`config.loader`: ``server.properties`` and ``--override`` parsing.
* :mod:`config.topic_names`: Kafka's topic-name rules (storage, the daemon and the tools
  read them from here).

This package imports only the standard library; storage, protocol and broker all read it.
"""

from .broker import BROKER_CONFIGS, BrokerConfig, CleanerConfig, Listener, parse_listeners
from .defs import LONG_MAX, ConfigDef, ConfigError, ConfigType
from .group import GROUP_CONFIGS, GroupConfig, ShareAutoOffsetReset
from .group_coordinator import GroupCoordinatorConfig
from .loader import load_broker_config, parse_properties
from .topic import (
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    TimestampType,
    TopicConfig,
    describe_topic_config,
    format_overrides,
    normalize_overrides,
    record_version_for,
    resolve_topic_config,
)

__all__ = [
    "BROKER_CONFIGS", "TOPIC_CONFIGS", "BrokerConfig", "CleanerConfig", "Listener", "parse_listeners", "LONG_MAX",
    "ConfigDef", "ConfigError", "ConfigType", "load_broker_config", "parse_properties", "ConfigEntry",
    "ConfigSource", "TimestampType", "TopicConfig", "describe_topic_config", "format_overrides",
    "normalize_overrides", "record_version_for", "resolve_topic_config", "GROUP_CONFIGS", "GroupConfig",
    "ShareAutoOffsetReset", "GroupCoordinatorConfig",
]
