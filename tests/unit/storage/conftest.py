"""Fixtures of the storage unit tests."""

from __future__ import annotations

import pytest
from support.cleaner_helpers import compact_log
from support.log_helpers import NOW_MS, topic_config

from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.log import PartitionLog
from sundial.storage.offset_map import SkimpyOffsetMap


@pytest.fixture
def env(tmp_path):
    """``make(**topic config)`` → (a compacted log, a cleaner manager, a 64k-slot offset map);
    the logs' handles are closed after the test."""
    made = []

    def make(**cfg):
        log = compact_log(tmp_path / "t-0", **cfg)
        made.append(log)
        return log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 16)

    yield make
    for log in made:
        log.close_handles()


@pytest.fixture
def new_log(tmp_path):
    """``new_log(name="t-0", **topic config)`` → a new partition log of topic ``t`` under ``tmp_path``
    (support.log_helpers.topic_config with the overrides), created at NOW_MS; closed after the test."""
    logs = []

    def factory(name="t-0", **cfg):
        log = PartitionLog.create(str(tmp_path / name), topic_config(**cfg), topic="t", partition=0, now_ms=NOW_MS)
        logs.append(log)
        return log

    yield factory
    for log in logs:
        log.close_handles()


@pytest.fixture
def dirs(tmp_path):
    """Two data directories (``log.dirs``) under ``tmp_path``, not created yet."""
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]
