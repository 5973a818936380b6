"""Fixtures of the storage unit tests."""

from __future__ import annotations

import pytest
from support.cleaner_helpers import compact_log

from sundial.storage.cleaner_manager import LogCleanerManager
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
