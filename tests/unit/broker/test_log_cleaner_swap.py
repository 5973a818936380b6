"""The log cleaner swaps a cleaned segment only into the log that serves the partition now: a log
taken out of service during the pass (a log-dir move's swap, which runs on the mover's thread with
that log object; a topic deleted) is left alone, so no thread races the loop over its segments."""

from __future__ import annotations

import asyncio

import pytest

from support.cleaner_helpers import append, clean_pass
from support.log_helpers import NOW_MS

from sundial.broker.log_cleaner import LogCleanerService
from sundial.broker.metrics import BrokerMetrics
from sundial.config import BrokerConfig
from sundial.storage.cleaner import CleaningAborted
from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.log_manager import LogManager
from sundial.storage.offset_map import SkimpyOffsetMap

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "300", "message.timestamp.after.max.ms": "9223372036854775807",
           "message.timestamp.before.max.ms": "9223372036854775807"}


def _service(tmp_path):
    logs = LogManager([str(tmp_path)], {})
    logs.startup()
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    for i in range(12):
        append(log, [(b"k%d" % (i % 3), b"v%d" % i, NOW_MS + i)])
    assert len(log.segments) >= 3
    service = LogCleanerService(logs, BrokerConfig({}).cleaner, [str(tmp_path)], metrics=BrokerMetrics(),
                                now_ms=lambda: NOW_MS)
    return logs, log, service


def _offered_swaps(tmp_path, log, service, before_swap=lambda: None):
    """A cleaning pass whose swaps go through the service's loop-side swap; what each answered."""
    answers = []

    def swap(cleaned):
        before_swap()
        answers.append(asyncio.run(service._swap("t", 0, log, cleaned)))
        return answers[-1]

    clean_pass(log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 16), NOW_MS, swap=swap)
    return answers


def test_a_swap_goes_into_the_log_that_serves_the_partition(tmp_path):
    logs, log, service = _service(tmp_path)
    try:
        bytes_before = sum(s.size_bytes for s in log.segments)
        answers = _offered_swaps(tmp_path, log, service)
        assert answers and all(answers)
        assert sum(s.size_bytes for s in log.segments) < bytes_before     # superseded values went
    finally:
        logs.shutdown()


def test_a_swap_into_a_log_no_longer_in_service_is_refused_and_leaves_it_alone(tmp_path):
    logs, log, service = _service(tmp_path)
    try:
        files_before = sorted(p.name for p in (tmp_path / "t-0").iterdir())
        segments_before = list(log.segments)
        taken = []

        def take_out_of_service():   # what a log-dir move's start_swap does to the partition
            if not taken:
                taken.append(logs._logs.pop(("t", 0)))

        with pytest.raises(CleaningAborted):        # the pass ends; the log keeps what it had
            _offered_swaps(tmp_path, log, service, before_swap=take_out_of_service)
        assert taken
        assert list(log.segments) == segments_before
        live = sorted(p.name for p in (tmp_path / "t-0").iterdir() if not p.name.endswith(".cleaned"))
        assert live == [n for n in files_before if not n.endswith(".cleaned")]
        logs._logs[("t", 0)] = taken[0]
    finally:
        logs.shutdown()
