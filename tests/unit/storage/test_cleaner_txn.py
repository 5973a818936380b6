"""Compaction of logs with transactions (Kafka's ``Cleaner`` with ``CleanedTransactionMetadata``):
aborted records go and never shadow committed ones, markers go once their transaction
is gone and their delete horizon has passed, open transactions are never cleaned, and
cleaned segments carry the ``.txnindex`` entries of the markers they keep."""

import os
import struct

from support.cleaner_helpers import append, batches_on_disk, clean_until_done
from support.log_helpers import NOW_MS

from sundial.records.framing import iter_records
from sundial.records.layout import DELETE_HORIZON_FLAG_MASK
from sundial.storage.log import PartitionLog

DAY = 86_400_000


class Producer:
    def __init__(self, log, pid):
        self.log, self.pid, self.seq = log, pid, 0

    def send(self, *kvs, ts=NOW_MS):
        recs = append(self.log, [(k, v, ts) for k, v in kvs], producer_id=self.pid, producer_epoch=0,
                      base_sequence=self.seq, is_transactional=True)
        self.seq += len(kvs)
        return recs

    def end(self, commit, ts=NOW_MS):
        return self.log.append_txn_marker(producer_id=self.pid, producer_epoch=0, coordinator_epoch=0,
                                          control_type=int(commit), timestamp_ms=ts, now_ms=NOW_MS).first_offset


def txn_index(path):
    if not os.path.exists(path):
        return []
    raw = open(path, "rb").read()
    return [struct.unpack_from(">hqqqq", raw, p)[1:] for p in range(0, len(raw), 34)]


def read_all(log):
    """The data records on disk (markers excluded), in offset order."""
    return [r for _, v in batches_on_disk(log) if not v.is_control for r in iter_records(v)]


def markers(log):
    return [(v.last_offset, v.record_count, bool(v.attributes & DELETE_HORIZON_FLAG_MASK))
            for _, v in batches_on_disk(log) if v.is_control]


def test_aborted_records_go_and_never_shadow_committed_ones(env):
    log, mgr, m = env(delete_retention_ms=DAY)
    base = append(log, [(b"a", b"1", NOW_MS)])                       # 0
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1.send((b"a", b"2"), (b"b", b"2"))                               # 1-2 (aborted)
    assert p1.end(False) == 3
    committed = p2.send((b"c", b"3"))                                 # 4
    assert p2.end(True) == 5
    p1.send((b"z", b"9"))                                             # 6 (committed later)
    assert p1.end(True) == 7
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    # a=1 survives: the aborted a=2 was never mapped; b=2 is gone with its transaction
    assert [(r.offset, r.key, r.value) for r in read_all(log)] == [
        (0, b"a", b"1"), (4, b"c", b"3"), (6, b"z", b"9")]
    assert base[0].offset == 0 and committed[0].offset == 4
    # markers whose transactions had batches in the walk stay, untouched
    assert markers(log) == [(3, 1, False), (5, 1, False), (7, 1, False)]
    # the cleaned segment indexes the aborted transaction whose marker it keeps
    seg = log.segments[0]
    assert txn_index(seg.txn_index.path) == [(1, 1, 3, 4)]
    assert log.collect_aborted_transactions(0, 8) == [(1, 1)]


def test_markers_of_emptied_transactions_get_a_horizon_then_go(env):
    log, mgr, m = env(delete_retention_ms=DAY)
    p1 = Producer(log, 1)
    p1.send((b"a", b"x"))                                             # 0 aborted
    p1.end(False)                                                     # 1
    p1.send((b"k", b"1"))                                             # 2 committed
    p1.end(True)                                                      # 3
    p1.send((b"k", b"2"))                                             # 4 committed, shadows offset 2
    p1.end(True)                                                      # 5
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    # first pass: the aborted batch goes, its marker stays (a batch of it was walked)
    assert [r.offset for r in read_all(log)] == [4]
    assert markers(log) == [(1, 1, False), (3, 1, False), (5, 1, False)]
    assert txn_index(log.segments[0].txn_index.path) == [(1, 0, 1, 2)]
    # second pass: the ABORT and the first COMMIT have no batch left: stamped with a horizon
    append(log, [(b"q", b"1", NOW_MS)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS + 10)
    assert markers(log) == [(1, 1, True), (3, 1, True), (5, 1, False)]
    assert txn_index(log.segments[0].txn_index.path) == []
    on_disk = {v.last_offset: v for _, v in batches_on_disk(log)}
    assert on_disk[1].base_timestamp == NOW_MS + 10 + DAY and on_disk[1].max_timestamp == NOW_MS
    # a pass at or after the horizon removes them; the last COMMIT stays
    append(log, [(b"r", b"1", NOW_MS)])
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS + 10 + DAY)
    assert markers(log) == [(5, 1, False)]
    assert [r.offset for r in read_all(log)] == [4, 6, 7]


def test_open_transaction_is_never_cleaned(env):
    log, mgr, m = env()
    append(log, [(b"k", b"1", NOW_MS)])                               # 0
    p1 = Producer(log, 1)
    p1.send((b"k", b"2"))                                             # 1 open
    log.roll(NOW_MS)
    append(log, [(b"k", b"3", NOW_MS)])                               # 2
    log.roll(NOW_MS)
    assert log.last_stable_offset == 1
    clean_until_done(log, mgr, m, NOW_MS)
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    p1.end(False)
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    assert [r.offset for r in read_all(log)] == [2]


def test_cleaned_txn_index_survives_restart_and_interrupted_swap(env, tmp_path):
    log, mgr, m = env(delete_retention_ms=DAY)
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1.send((b"a", b"1"))
    p2.send((b"b", b"1"))
    p1.end(False)
    p2.end(False)
    log.roll(NOW_MS)
    clean_until_done(log, mgr, m, NOW_MS)
    want = txn_index(log.segments[0].txn_index.path)
    assert [e[0] for e in want] == [1, 2]
    cfg = log.config
    log.close()
    again = PartitionLog.open(log.dir, cfg, topic="t", partition=0)
    assert txn_index(again.segments[0].txn_index.path) == want
    again.close()
    # an interrupted swap (the .log.swap is there, indexes not): completed, .txnindex rebuilt from the log
    d = log.dir
    os.rename(os.path.join(d, f"{0:020d}.log"), os.path.join(d, f"{0:020d}.log.swap"))
    os.remove(os.path.join(d, f"{0:020d}.txnindex"))
    third = PartitionLog.open(d, cfg, topic="t", partition=0)
    assert txn_index(third.segments[0].txn_index.path) == want
    third.close()
