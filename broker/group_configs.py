"""The GROUP config resource's state: every group's own keys, durable, and their effective values.

:class:`GroupConfigStore` owns the keys each group set through AlterConfigs or
IncrementalAlterConfigs on ``ConfigResource(GROUP, id)`` (:mod:`config.group` defines the keys,
their validation and their DescribeConfigs rows). The group coordinators read a group's
effective settings from it, typed, and may subscribe to changes:

* :meth:`GroupConfigStore.config` gives a group's :class:`~config.group.GroupConfig` (its value,
  else the broker default, within the broker's current bounds), and shortcuts such as
  :meth:`consumer_session_timeout_ms` or :meth:`share_auto_offset_reset` one value of it;
* :meth:`add_listener` registers ``callback(group_id, GroupConfig)``, called on the event loop
  after a change is durable (not on validate-only requests); it returns the function that
  unregisters it.

Durability: the whole store is one JSON file, ``group-configs.json`` in the first data
directory::

    {"version": 1, "groups": {"g1": {"consumer.session.timeout.ms": "50000"}}}

A change is written to a temporary file, fsynced, renamed over the store and the directory
fsynced (``storage.files.write_file_atomically``) in a worker thread, so the event loop never
waits on the disk; the change takes effect (and is answered) only once it is durable, and the
file is always either the old or the new store after a kill -9. Changes are serialised by an
``asyncio`` lock, so two requests never compute their new set from the same old one. The file
is read once, when the broker is built.

A stored value outside bounds that the broker's settings have narrowed since is kept (and
described as stored) but capped when read, with a warning at start (Kafka 4.3, KIP-1240).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Callable, Mapping

import structlog

from sundial.config import ConfigError
from sundial.config.group import (
    GROUP_CONFIGS,
    GroupConfig,
    ShareAutoOffsetReset,
    describe_group_config,
    resolve_group_config,
    validate_group_config,
)
from sundial.config.group_coordinator import GroupCoordinatorConfig
from sundial.config.topic import ConfigEntry
from sundial.storage.files import write_file_atomically

logger = structlog.get_logger(__name__)

FILE_NAME = "group-configs.json"
STORE_VERSION = 1

Listener = Callable[[str, GroupConfig], None]


class GroupConfigStore:
    """Every group's GROUP-resource keys (one owner), their effective values and change listeners."""

    def __init__(self, path: str, coordinator: GroupCoordinatorConfig) -> None:
        self.path = path
        self.coordinator = coordinator
        self._overrides: dict[str, dict[str, str]] = self._load()
        self._effective: dict[str, GroupConfig] = {}
        self._defaults, _ = resolve_group_config({}, coordinator)
        self._listeners: list[Listener] = []
        self._lock = asyncio.Lock()
        for group_id in sorted(self._overrides):
            self.config(group_id, warn=True)

    @classmethod
    def open(cls, data_dir: str, coordinator: GroupCoordinatorConfig) -> "GroupConfigStore":
        """The store of a broker whose first data directory is ``data_dir``."""
        return cls(os.path.join(data_dir, FILE_NAME), coordinator)

    # -- reading --------------------------------------------------------------------------------
    def groups(self) -> list[str]:
        """Groups that set at least one key."""
        return sorted(self._overrides)

    def overrides(self, group_id: str) -> dict[str, str]:
        """The keys ``group_id`` set, as stored (a copy)."""
        return dict(self._overrides.get(group_id, {}))

    def config(self, group_id: str, *, warn: bool = False) -> GroupConfig:
        """The group's effective settings: its values, else the broker defaults, within the broker bounds."""
        cached = self._effective.get(group_id)
        if cached is not None:
            return cached
        stored = self._overrides.get(group_id)
        if not stored:
            return self._defaults
        effective, capped = resolve_group_config(stored, self.coordinator)
        if warn:
            for key, value, used in capped:
                logger.warning("group_config_capped", group=group_id, key=key, stored=stored[key], effective=used,
                               reason="outside the broker's bounds" if value != -1 else "does not parse")
        self._effective[group_id] = effective
        return effective

    def consumer_session_timeout_ms(self, group_id: str) -> int:
        return self.config(group_id).consumer_session_timeout_ms

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        return self.config(group_id).consumer_heartbeat_interval_ms

    def consumer_settings(self, group_id: str) -> tuple[int, int]:
        """``(session timeout, heartbeat interval)`` in ms: the consumer-group manager's ``group_settings``."""
        config = self.config(group_id)
        return config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms

    def share_session_timeout_ms(self, group_id: str) -> int:
        return self.config(group_id).share_session_timeout_ms

    def share_heartbeat_interval_ms(self, group_id: str) -> int:
        return self.config(group_id).share_heartbeat_interval_ms

    def share_record_lock_duration_ms(self, group_id: str) -> int:
        return self.config(group_id).share_record_lock_duration_ms

    def share_auto_offset_reset(self, group_id: str) -> ShareAutoOffsetReset:
        return self.config(group_id).share_auto_offset_reset

    def share_isolation_level(self, group_id: str) -> str:
        """``read_uncommitted`` or ``read_committed``."""
        return self.config(group_id).share_isolation_level

    def describe(self, group_id: str) -> list[ConfigEntry]:
        """DescribeConfigs rows of the group (every key; see ``config.group.describe_group_config``)."""
        return describe_group_config(self._overrides.get(group_id, {}), self.coordinator)

    # -- listeners ------------------------------------------------------------------------------
    def add_listener(self, callback: Listener) -> Callable[[], None]:
        """Call ``callback(group_id, effective config)`` after each durable change; returns the remover."""
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    # -- changing -------------------------------------------------------------------------------
    async def alter(self, group_id: str, change: Callable[[dict[str, str]], Mapping[str, str | None]], *,
                    validate_only: bool = False) -> dict[str, str]:
        """Replace the group's keys by ``change(current keys)``, validated as Kafka does.

        Raises :class:`ConfigError` (its ``message`` is Kafka's) and changes nothing when the new
        set is refused; ``OSError`` when it cannot be made durable (nothing changes either).
        Returns the new set as stored. With ``validate_only`` nothing is written. A change that
        has begun completes even if the request awaiting it is cancelled, so the file and the
        memory never disagree.
        """
        task = asyncio.ensure_future(self._alter(group_id, change, validate_only))
        # a refusal raised after the caller was cancelled is not an unretrieved-exception warning
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(task)

    async def _alter(self, group_id: str, change, validate_only: bool) -> dict[str, str]:
        async with self._lock:
            new = validate_group_config(change(self.overrides(group_id)), self.coordinator)
            if validate_only or new == self._overrides.get(group_id, {}):
                return new
            old = self._overrides.get(group_id, {})
            snapshot = {g: dict(keys) for g, keys in self._overrides.items() if g != group_id}
            if new:
                snapshot[group_id] = new
            await asyncio.to_thread(self._save, snapshot)
            self._overrides = snapshot
            self._effective.pop(group_id, None)
        logger.info("group_config_altered", group=group_id, configs=new)
        for key, reason in GROUP_CONFIGS.without_effect(k for k, v in new.items() if old.get(k) != v):
            logger.warning("config_key_without_effect", key=key, group=group_id, reason=reason)
        effective = self.config(group_id)
        for callback in list(self._listeners):
            try:
                callback(group_id, effective)
            except Exception:   # a listener's bug must not fail the request that made the change
                logger.exception("group_config_listener_failed", group=group_id)
        return new

    # -- the file -------------------------------------------------------------------------------
    def _load(self) -> dict[str, dict[str, str]]:
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(self.path, f"cannot read the group configs: {exc.strerror or exc}") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(self.path, f"the group-config store is not valid JSON ({exc}); "
                                         f"fix or remove it") from None
        if not isinstance(doc, dict) or doc.get("version") != STORE_VERSION or not isinstance(doc.get("groups"), dict):
            raise ConfigError(self.path, f"not a version {STORE_VERSION} group-config store")
        groups: dict[str, dict[str, str]] = {}
        for group_id, keys in doc["groups"].items():
            if not isinstance(keys, dict):
                raise ConfigError(self.path, f"group {group_id!r}: expected an object of keys")
            kept = {}
            for key, value in keys.items():
                if key in GROUP_CONFIGS and isinstance(value, str):
                    kept[key] = value
                else:
                    logger.warning("group_config_dropped", group=group_id, key=key, value=value,
                                   reason="unknown group config name" if key not in GROUP_CONFIGS else "not a string")
            if kept:
                groups[group_id] = kept
        if groups:
            logger.info("group_configs_loaded", path=self.path, groups=len(groups))
        return groups

    def _save(self, groups: Mapping[str, Mapping[str, str]]) -> None:
        """Runs in a worker thread: the whole store, atomically and durably."""
        data = json.dumps({"version": STORE_VERSION, "groups": {g: dict(sorted(keys.items()))
                                                                  for g, keys in sorted(groups.items())}},
                          indent=1).encode() + b"\n"
        write_file_atomically(self.path, data)


__all__ = ["GroupConfigStore", "FILE_NAME"]
