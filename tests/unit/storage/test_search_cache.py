"""Timestamp search inside big batches through the batch-index cache the logs are given.

The cache builds a running-max index of a batch the second time a search lands in it;
answers must stay equal to brute force before and after that, when the log start
offset falls inside a cached batch, and after a truncation re-creates the same
positions with other data.
"""

import random

import pytest
from support.log_helpers import NOW_MS, topic_config

from sundial.records.builder import SimpleRecord, build_records
from sundial.storage.log import PartitionLog
from sundial.storage.log_search import BatchIndexCache


def big_batch(stamps):
    return build_records(2, [SimpleRecord(ts, None, b"v", ()) for ts in stamps]).buffer


def brute(records, target, log_start=0):
    hits = [(off, ts) for off, ts in records if ts >= target and off >= log_start]
    return min(hits) if hits else None


@pytest.fixture
def indexes():
    return BatchIndexCache()


@pytest.fixture
def log(tmp_path, indexes):
    plog = PartitionLog.create(str(tmp_path / "t-0"), topic_config(), topic="t", partition=0, now_ms=NOW_MS,
                               batch_indexes=indexes)
    yield plog
    plog.close_handles()


def _answer(plog, target):
    found = plog.fetch_offset_by_timestamp(target)
    return None if found is None else (found.offset, found.timestamp_ms)


def test_cached_answers_equal_brute_force(log, indexes):
    rng = random.Random(3)
    records = []
    for _ in range(4):
        stamps = [NOW_MS - 10**6 + rng.randint(0, 10**5) for _ in range(2000)]
        base = log.log_end_offset
        log.append(big_batch(stamps), now_ms=NOW_MS)
        records += [(base + i, ts) for i, ts in enumerate(stamps)]
    assert indexes.index_count == 0
    targets = [rng.choice(records)[1] + rng.choice((-1, 0, 1)) for _ in range(300)]
    for _ in range(3):  # first visits walk, second visits build, later ones bisect
        for target in targets:
            assert _answer(log, target) == brute(records, target)
    assert indexes.index_count > 0
    # log start inside a cached batch: offsets below it never answer
    log.delete_records(2500)
    for target in targets[:100]:
        assert _answer(log, target) == brute(records, target, log_start=2500)


def test_truncation_invalidates_cached_indexes(log):
    stamps = [NOW_MS - 50_000 + i for i in range(1000)]
    log.append(big_batch(stamps), now_ms=NOW_MS)
    for _ in range(3):
        assert _answer(log, stamps[500]) == (500, stamps[500])
    log.truncate_to(0)
    other = [NOW_MS - 90_000 + 2 * i for i in range(1000)]  # same positions, other timestamps
    log.append(big_batch(other), now_ms=NOW_MS)
    for _ in range(3):
        assert _answer(log, other[100]) == (100, other[100])
        assert _answer(log, stamps[500]) == brute(list(enumerate(other)), stamps[500])


def test_logs_sharing_a_cache_never_answer_from_each_other(tmp_path, log, indexes):
    """Two logs with batches at the same base offsets and positions share one cache."""
    other = PartitionLog.create(str(tmp_path / "t-1"), topic_config(), topic="t", partition=1, now_ms=NOW_MS,
                                batch_indexes=indexes)
    try:
        mine = [NOW_MS - 50_000 + i for i in range(1000)]
        theirs = [NOW_MS - 90_000 + 2 * i for i in range(1000)]
        log.append(big_batch(mine), now_ms=NOW_MS)
        other.append(big_batch(theirs), now_ms=NOW_MS)
        for _ in range(3):
            assert _answer(log, mine[500]) == (500, mine[500])
            assert _answer(other, theirs[300]) == (300, theirs[300])
            assert _answer(log, theirs[300]) == brute(list(enumerate(mine)), theirs[300])
        assert indexes.index_count == 2
    finally:
        other.close_handles()


def test_the_logs_of_one_manager_share_its_cache(tmp_path):
    """The budget of the big-batch indexes holds for all the partitions a LogManager opens, not per log."""
    from sundial.storage.log_manager import LogManager

    shared = BatchIndexCache()
    mgr = LogManager([str(tmp_path)], {"log.message.timestamp.after.max.ms": 2**63 - 1}, batch_indexes=shared)
    mgr.startup()
    try:
        mgr.create_topic("t", 2)
        stamps = {0: [NOW_MS - 50_000 + i for i in range(1000)], 1: [NOW_MS - 90_000 + 2 * i for i in range(1000)]}
        logs = {p: mgr.get_log("t", p) for p in (0, 1)}
        for p, plog in logs.items():
            plog.append(big_batch(stamps[p]), now_ms=NOW_MS)
        for _ in range(3):
            for p, plog in logs.items():
                assert _answer(plog, stamps[p][400]) == (400, stamps[p][400])
        assert shared.index_count == 2
    finally:
        mgr.shutdown()
