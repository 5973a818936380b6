"""broker/group_configs.py: the GROUP resource's durable store, its typed reads and its listeners."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import pytest
from structlog.testing import capture_logs

from sundial.broker.group_configs import FILE_NAME, GroupConfigStore
from sundial.config import BrokerConfig, ConfigError
from sundial.config.group import ShareAutoOffsetReset


def coordinator(**settings):
    return BrokerConfig({k: str(v) for k, v in settings.items()}).group_coordinator


def set_keys(**keys):
    """An IncrementalAlterConfigs-like change: SET each key (None: DELETE)."""
    def change(old):
        new = dict(old)
        for k, v in keys.items():
            k = k.replace("_", ".")
            if v is None:
                new.pop(k, None)
            else:
                new[k] = v
        return new
    return change


def run(coro):
    return asyncio.run(coro)


def test_a_new_store_answers_the_broker_defaults(tmp_path):
    store = GroupConfigStore.open(str(tmp_path), coordinator(**{"group.consumer.heartbeat.interval.ms": 6000}))
    assert store.groups() == [] and store.overrides("g") == {}
    assert store.consumer_session_timeout_ms("g") == 45000
    assert store.consumer_heartbeat_interval_ms("g") == 6000
    assert store.consumer_settings("g") == (45000, 6000)
    assert store.share_record_lock_duration_ms("g") == 30000
    assert store.share_auto_offset_reset("g") == ShareAutoOffsetReset("latest")
    assert store.share_isolation_level("g") == "read_uncommitted"
    assert not os.path.exists(tmp_path / FILE_NAME)


def test_changes_survive_a_reopen(tmp_path):
    c = coordinator()
    store = GroupConfigStore.open(str(tmp_path), c)
    run(store.alter("g1", set_keys(consumer_session_timeout_ms="50000")))
    run(store.alter("g1", set_keys(share_auto_offset_reset="by_duration:PT10M")))
    run(store.alter("g2", set_keys(share_isolation_level="read_committed")))
    reopened = GroupConfigStore.open(str(tmp_path), c)
    assert reopened.groups() == ["g1", "g2"]
    assert reopened.overrides("g1") == {"consumer.session.timeout.ms": "50000",
                                        "share.auto.offset.reset": "by_duration:PT10M"}
    assert reopened.consumer_session_timeout_ms("g1") == 50000
    assert reopened.share_auto_offset_reset("g1").start_ms(1_000_000) == 1_000_000 - 600_000
    assert reopened.share_isolation_level("g2") == "read_committed"
    with open(tmp_path / FILE_NAME) as fh:
        doc = json.load(fh)
    assert doc == {"version": 1, "groups": {"g1": {"consumer.session.timeout.ms": "50000",
                                                   "share.auto.offset.reset": "by_duration:PT10M"},
                                            "g2": {"share.isolation.level": "read_committed"}}}
    assert not os.path.exists(str(tmp_path / FILE_NAME) + ".tmp")


def test_deleting_every_key_forgets_the_group(tmp_path):
    store = GroupConfigStore.open(str(tmp_path), coordinator())
    run(store.alter("g1", set_keys(consumer_session_timeout_ms="50000")))
    run(store.alter("g1", set_keys(consumer_session_timeout_ms=None)))
    assert store.groups() == [] and store.consumer_session_timeout_ms("g1") == 45000
    assert GroupConfigStore.open(str(tmp_path), coordinator()).groups() == []


def test_a_refused_change_or_a_validate_only_one_changes_nothing(tmp_path):
    store = GroupConfigStore.open(str(tmp_path), coordinator())
    run(store.alter("g1", set_keys(consumer_session_timeout_ms="50000")))
    before = (tmp_path / FILE_NAME).read_bytes()
    with pytest.raises(ConfigError) as info:
        run(store.alter("g1", set_keys(consumer_session_timeout_ms="70000")))
    assert info.value.message.startswith(
        "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms")
    assert run(store.alter("g1", set_keys(consumer_heartbeat_interval_ms="6000"), validate_only=True)) == {
        "consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    assert store.overrides("g1") == {"consumer.session.timeout.ms": "50000"}
    assert (tmp_path / FILE_NAME).read_bytes() == before


def test_listeners_hear_durable_changes_only(tmp_path):
    store = GroupConfigStore.open(str(tmp_path), coordinator())
    heard = []

    def broken(group_id, config):
        raise RuntimeError("listener bug")

    remove = store.add_listener(lambda g, cfg: heard.append((g, cfg.consumer_heartbeat_interval_ms,
                                                             os.path.exists(tmp_path / FILE_NAME))))
    store.add_listener(broken)
    run(store.alter("g1", set_keys(consumer_heartbeat_interval_ms="7000")))
    run(store.alter("g1", set_keys(consumer_heartbeat_interval_ms="8000"), validate_only=True))
    with pytest.raises(ConfigError):
        run(store.alter("g1", set_keys(consumer_heartbeat_interval_ms="1")))
    remove()
    run(store.alter("g1", set_keys(consumer_heartbeat_interval_ms="9000")))
    assert heard == [("g1", 7000, True)]
    assert store.consumer_heartbeat_interval_ms("g1") == 9000


def test_concurrent_changes_of_one_group_are_not_lost(tmp_path):
    store = GroupConfigStore.open(str(tmp_path), coordinator())

    async def both():
        await asyncio.gather(store.alter("g", set_keys(consumer_session_timeout_ms="50000")),
                             store.alter("g", set_keys(share_isolation_level="read_committed")),
                             store.alter("g", set_keys(share_session_timeout_ms="50000")))

    run(both())
    expected = {"consumer.session.timeout.ms": "50000", "share.isolation.level": "read_committed",
                "share.session.timeout.ms": "50000"}
    assert store.overrides("g") == expected
    assert GroupConfigStore.open(str(tmp_path), coordinator()).overrides("g") == expected


def test_the_file_is_written_off_the_event_loop_and_a_cancelled_request_still_completes(tmp_path, monkeypatch):
    store = GroupConfigStore.open(str(tmp_path), coordinator())
    entered, release = threading.Event(), threading.Event()
    writer_threads = []
    real_save = store._save

    def slow_save(groups):
        writer_threads.append(threading.get_ident())
        entered.set()
        assert release.wait(30)
        real_save(groups)

    monkeypatch.setattr(store, "_save", slow_save)

    async def scenario():
        loop_thread = threading.get_ident()
        task = asyncio.ensure_future(store.alter("g", set_keys(consumer_session_timeout_ms="55000")))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3000):     # the change completes although its request was cancelled
            if store.overrides("g"):
                break
            await asyncio.sleep(0.01)
        return loop_thread

    loop_thread = run(scenario())
    assert writer_threads and writer_threads[0] != loop_thread
    assert store.overrides("g") == {"consumer.session.timeout.ms": "55000"}
    assert GroupConfigStore.open(str(tmp_path), coordinator()).consumer_session_timeout_ms("g") == 55000


def test_values_outside_narrowed_bounds_are_capped_with_a_warning(tmp_path):
    store = GroupConfigStore.open(str(tmp_path), coordinator())
    run(store.alter("g", set_keys(consumer_session_timeout_ms="60000")))
    with capture_logs() as logs:
        narrowed = GroupConfigStore.open(str(tmp_path), coordinator(**{"group.consumer.max.session.timeout.ms": 50000}))
    assert narrowed.consumer_session_timeout_ms("g") == 50000
    assert narrowed.overrides("g") == {"consumer.session.timeout.ms": "60000"}       # described as stored
    assert [(e["event"], e["key"], e["effective"]) for e in logs if e["event"] == "group_config_capped"] == [
        ("group_config_capped", "consumer.session.timeout.ms", 50000)]


def test_unknown_keys_in_the_file_are_dropped_and_a_corrupt_file_stops_the_start(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_text(json.dumps({"version": 1, "groups": {"g": {"share.delivery.count.limit": "3",
                                                               "consumer.session.timeout.ms": "50000"}}}))
    with capture_logs() as logs:
        store = GroupConfigStore.open(str(tmp_path), coordinator())
    assert store.overrides("g") == {"consumer.session.timeout.ms": "50000"}
    assert any(e["event"] == "group_config_dropped" for e in logs)
    for bad in ("{not json", json.dumps({"version": 2, "groups": {}}), json.dumps({"version": 1, "groups": []})):
        path.write_text(bad)
        with pytest.raises(ConfigError):
            GroupConfigStore.open(str(tmp_path), coordinator())
