"""Transactions below the coordinator: marker codec, producer-state transitions, the last
stable offset, read_committed reads, the ``.txnindex`` file and its recovery.

Ground truth is computed here: marker bytes are built by hand from Kafka's byte layout,
``.txnindex`` files are read with a reader written here, and expected aborted lists and
LSOs come from a model of the script appended.
"""

import os
import struct

import pytest
from support.kafka_bytes_ref import v2_batch
from support.log_helpers import NOW_MS, topic_config

from sundial.records.batch import BatchView
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.control import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTxnMarker,
    build_end_txn_marker,
    parse_end_txn_marker,
    read_end_txn_marker,
)
from sundial.records.errors import InvalidRecordError
from sundial.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from sundial.storage.log import PartitionLog
from sundial.storage.origin import AppendOrigin
from sundial.storage.producer_state import ProducerStateManager


# ---------------------------------------------------------------- independent construction

def kafka_end_txn_marker(pid, epoch, coord_epoch, ctype, ts, base_offset=0, leader_epoch=-1) -> bytes:
    """``MemoryRecords.withEndTransactionMarker`` from the documented layout: one control record
    in a transactional + control batch (CreateTime, no codec)."""
    key = struct.pack(">hh", 0, ctype)
    value = struct.pack(">hi", 0, coord_epoch)
    return v2_batch([(0, ts, key, value, ())], base_offset=base_offset, attributes=0x10 | 0x20, producer_id=pid,
                    producer_epoch=epoch, partition_leader_epoch=leader_epoch)


def read_txn_index(path):
    if not os.path.exists(path):
        return []
    raw = open(path, "rb").read()
    out = []
    for pos in range(0, len(raw) - 33, 34):
        version, pid, first, last, lso = struct.unpack_from(">hqqqq", raw, pos)
        assert version == 0
        out.append((pid, first, last, lso))
    return out


@pytest.mark.parametrize("ctype", [CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT])
@pytest.mark.parametrize("pid,epoch,coord,ts", [(0, 0, 0, 0), (4242, 7, 3, NOW_MS), (2**62, 32767, 2**31 - 1, 1)])
def test_end_txn_marker_is_byte_exact(ctype, pid, epoch, coord, ts):
    built = build_end_txn_marker(producer_id=pid, producer_epoch=epoch, coordinator_epoch=coord,
                                 control_type=ctype, timestamp_ms=ts)
    assert built == kafka_end_txn_marker(pid, epoch, coord, ctype, ts)
    view = BatchView(memoryview(built))
    assert view.is_control and view.is_transactional and view.base_sequence == -1 and view.record_count == 1
    assert read_end_txn_marker(view) == EndTxnMarker(ctype, coord)


def test_marker_parsing_follows_kafka():
    assert parse_end_txn_marker(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 9)) == EndTxnMarker(1, 9)
    # newer versions may append fields: extra bytes are ignored
    assert parse_end_txn_marker(struct.pack(">hhh", 1, 0, 5), struct.pack(">hih", 1, 2, 0)) == EndTxnMarker(0, 2)
    for key, value in [(b"\x00", struct.pack(">hi", 0, 1)), (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1)),
                       (struct.pack(">hh", 0, 5), struct.pack(">hi", 0, 1)), (struct.pack(">hh", 0, 0), b"\x00\x00"),
                       (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 1)), (None, None)]:
        with pytest.raises(InvalidRecordError):
            parse_end_txn_marker(key, value)
    with pytest.raises(ValueError):
        build_end_txn_marker(producer_id=1, producer_epoch=0, coordinator_epoch=0, control_type=2, timestamp_ms=0)


# ---------------------------------------------------------------- log helpers

def txn_data(pid, seq, n=2, epoch=0, transactional=True, ts=NOW_MS, value=b"v" * 20):
    recs = [SimpleRecord(ts, b"k", value) for _ in range(n)]
    return build_records(2, recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=transactional).buffer


def marker(log, pid, commit, *, epoch=0, coord=0, ts=NOW_MS):
    return log.append_txn_marker(producer_id=pid, producer_epoch=epoch, coordinator_epoch=coord,
                                 control_type=CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT,
                                 timestamp_ms=ts, now_ms=NOW_MS)


def new_log(tmp_path, **cfg):
    return PartitionLog.create(str(tmp_path / "t-0"), topic_config(**cfg), topic="t", partition=0, now_ms=NOW_MS)


# ---------------------------------------------------------------- producer state and LSO

def test_transaction_opens_and_markers_close_it(tmp_path):
    log = new_log(tmp_path)
    plain = build_records(2, [SimpleRecord(NOW_MS, None, b"x")]).buffer
    log.append(plain, now_ms=NOW_MS)                                  # 0
    a = log.append(txn_data(1, 0), now_ms=NOW_MS + 5)                 # 1-2
    assert log.last_stable_offset == 1 and log.high_watermark == 3
    assert [(t.producer_id, t.first_offset, t.start_ms) for t in log.ongoing_transactions()] == [(1, 1, NOW_MS + 5)]
    log.append(txn_data(2, 0), now_ms=NOW_MS)                         # 3-4
    log.append(txn_data(1, 2), now_ms=NOW_MS)                         # 5-6 (same transaction)
    assert log.describe_producer(1).current_txn_start_offset == a.first_offset
    # a non-transactional batch of a producer inside a transaction is refused (and nothing is appended)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn_data(1, 4, transactional=False), now_ms=NOW_MS)
    assert log.log_end_offset == 7
    m = marker(log, 1, commit=False, coord=3)                          # 7
    assert m.first_offset == 7 and log.last_stable_offset == 3
    # the abort was indexed with the LSO at completion (producer 2's transaction at 3)
    assert read_txn_index(log.active_segment.txn_index.path) == [(1, 1, 7, 3)]
    marker(log, 2, commit=True)                                        # 8: commit, not indexed
    assert log.last_stable_offset == log.high_watermark == 9 and log.ongoing_transactions() == []
    assert read_txn_index(log.active_segment.txn_index.path) == [(1, 1, 7, 3)]
    # a marker for a producer with no open transaction is appended all the same
    assert marker(log, 3, commit=True).first_offset == 9
    assert log.log_end_offset == 10 and read_txn_index(log.active_segment.txn_index.path) == [(1, 1, 7, 3)]


def test_marker_epoch_rules(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_data(1, 0, epoch=3), now_ms=NOW_MS)
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=True, epoch=2)
    marker(log, 1, commit=False, epoch=4, coord=5)                     # newer epoch: accepted (fencing abort)
    assert log.describe_producer(1).producer_epoch == 4
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(log, 1, commit=True, epoch=4, coord=4)
    leo = log.log_end_offset
    marker(log, 1, commit=True, epoch=4, coord=5)
    assert log.log_end_offset == leo + 1


def test_clients_cannot_append_control_batches(tmp_path):
    log = new_log(tmp_path)
    raw = build_end_txn_marker(producer_id=1, producer_epoch=0, coordinator_epoch=0, control_type=1,
                               timestamp_ms=NOW_MS)
    with pytest.raises(InvalidRecordError):
        log.append(raw, now_ms=NOW_MS)
    assert log.log_end_offset == 0


def test_coordinator_control_batch_must_hold_a_marker(tmp_path):
    log = new_log(tmp_path)
    bogus = build_records(2, [SimpleRecord(NOW_MS, struct.pack(">hh", 0, 9), b"\0\0\0\0\0\0")], producer_id=1,
                          producer_epoch=0, is_transactional=True, is_control=True).buffer
    with pytest.raises(InvalidRecordError):
        log.append(bogus, now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 0


def test_lso_respects_log_start_offset(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_data(1, 0), now_ms=NOW_MS)
    log.append(build_records(2, [SimpleRecord(NOW_MS, None, b"x")] * 3).buffer, now_ms=NOW_MS)
    assert log.last_stable_offset == 0
    log.delete_records(3)
    assert log.last_stable_offset == 3          # max(first open offset, log start offset)
    assert log.ongoing_transactions()[0].first_offset == 0


def test_snapshot_keeps_open_transactions_and_coordinator_epoch(tmp_path):
    psm = ProducerStateManager(str(tmp_path))
    log = new_log(tmp_path)
    log.append(txn_data(1, 0), now_ms=NOW_MS)
    log.append(txn_data(2, 0), now_ms=NOW_MS)
    marker(log, 2, commit=True, coord=11)
    log.close()
    snaps = [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".snapshot")]
    assert snaps == [f"{5:020d}.snapshot"]
    raw = open(tmp_path / "t-0" / snaps[0], "rb").read()
    entries = {}
    for i in range(struct.unpack_from(">i", raw, 6)[0]):
        pid, epoch, last_seq, last_off, delta, ts, coord, txn_first = struct.unpack_from(">qhiqiqiq", raw, 10 + i * 46)
        entries[pid] = (coord, txn_first)
    assert entries == {1: (-1, 0), 2: (11, -1)}
    assert psm.decode_snapshot(raw)[0].current_txn_first_offset == 0
    again = PartitionLog.open(str(tmp_path / "t-0"), topic_config(), topic="t", partition=0)
    assert again.last_stable_offset == 0 and [t.producer_id for t in again.ongoing_transactions()] == [1]
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(again, 2, commit=True, coord=10)
    marker(again, 1, commit=False)
    assert again.last_stable_offset == again.high_watermark


# ---------------------------------------------------------------- read_committed

def test_read_committed_stops_at_lso_and_lists_aborted(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_data(1, 0), now_ms=NOW_MS)           # 0-1 aborted
    marker(log, 1, commit=False)                         # 2
    log.append(txn_data(2, 0), now_ms=NOW_MS)           # 3-4 open
    log.append(txn_data(3, 0, transactional=False), now_ms=NOW_MS)   # 5-6 plain, after the LSO
    info = log.read(0, 1 << 20, read_committed=True)
    assert info.last_stable_offset == 3 and info.aborted_transactions == [(1, 0)]
    assert info.slices[0].size == sum(BatchView(memoryview(b)).size_bytes for b in (
        txn_data(1, 0), build_end_txn_marker(producer_id=1, producer_epoch=0, coordinator_epoch=0, control_type=0,
                                             timestamp_ms=NOW_MS)))
    assert log.read(3, 1 << 20, read_committed=True).slices == []
    uncommitted = log.read(0, 1 << 20)
    assert uncommitted.aborted_transactions is None and uncommitted.slices[0].size > info.slices[0].size
    marker(log, 2, commit=True)
    assert log.read(3, 1 << 20, read_committed=True).aborted_transactions == []


def test_txn_index_truncation_and_torn_tail(tmp_path):
    log = new_log(tmp_path)
    for pid in (1, 2, 3):
        log.append(txn_data(pid, 0), now_ms=NOW_MS)
        marker(log, pid, commit=False)
    path = log.active_segment.txn_index.path
    assert [e[2] for e in read_txn_index(path)] == [2, 5, 8]
    log.truncate_to(6, now_ms=NOW_MS)
    assert [e[2] for e in read_txn_index(path)] == [2, 5]
    assert log.ongoing_transactions() == []
    log.close()
    with open(path, "ab") as fh:
        fh.write(b"\0" * 10)                            # torn trailing entry: ignored by readers
    again = PartitionLog.open(str(tmp_path / "t-0"), topic_config(), topic="t", partition=0)
    assert again.collect_aborted_transactions(0, 100) == [(1, 0), (2, 3)]


def _scripted_log(tmp_path, name="t-0"):
    """Abort, commit and open transactions over several segments; returns (log dir, expected index)."""
    cfg = topic_config(segment_bytes=600)
    d = str(tmp_path / name)
    log = PartitionLog.create(d, cfg, topic="t", partition=0, now_ms=NOW_MS)
    seq = {}

    def data(pid):
        log.append(txn_data(pid, seq.get(pid, 0)), now_ms=NOW_MS)
        seq[pid] = seq.get(pid, 0) + 2

    data(1); data(2); marker(log, 1, False); data(3); data(1); marker(log, 2, True)
    data(2); marker(log, 3, False); marker(log, 1, False); data(4); data(2)
    expected = {s.base_offset: read_txn_index(s.txn_index.path) for s in log.segments}
    lso = log.last_stable_offset
    log.close()
    return d, cfg, expected, lso


@pytest.mark.parametrize("cut", ["txnindex", "snapshots", "log_tail", "all_indexes"])
def test_recovery_rebuilds_txn_index_and_lso(tmp_path, cut):
    d, cfg, expected, lso = _scripted_log(tmp_path)
    assert sum(len(v) for v in expected.values()) == 3 and lso < 20
    names = sorted(os.listdir(d))
    if cut in ("txnindex", "all_indexes"):
        for n in names:
            if n.endswith(".txnindex") or (cut == "all_indexes" and n.endswith((".index", ".timeindex"))):
                os.remove(os.path.join(d, n))
    if cut == "snapshots":
        for n in names:
            if n.endswith(".snapshot"):
                os.remove(os.path.join(d, n))
    if cut == "log_tail":
        last = max(n for n in names if n.endswith(".log"))
        size = os.path.getsize(os.path.join(d, last))
        os.truncate(os.path.join(d, last), size - 5)     # torn last batch: recovery cuts it
    log = PartitionLog.open(d, cfg, topic="t", partition=0, clean=False, recovery_point=0)
    got = {s.base_offset: read_txn_index(s.txn_index.path) for s in log.segments}
    if cut == "log_tail":
        # the last batch (producer 2's data) is gone: the aborted entries are unchanged
        assert got == expected and log.last_stable_offset == lso
    else:
        assert got == expected and log.last_stable_offset == lso
    log.close()


def test_recovery_from_snapshot_between_segments(tmp_path):
    """Unclean start with the recovery point in a later segment: the rebuild starts from the
    snapshot at or below it and still knows transactions opened earlier."""
    d, cfg, expected, lso = _scripted_log(tmp_path)
    bases = sorted(expected)
    rp = bases[-1]
    for b in bases:
        if b >= rp:
            p = os.path.join(d, f"{b:020d}.txnindex")
            if os.path.exists(p):
                os.remove(p)
    log = PartitionLog.open(d, cfg, topic="t", partition=0, clean=False, recovery_point=rp)
    assert {s.base_offset: read_txn_index(s.txn_index.path) for s in log.segments} == expected
    assert log.last_stable_offset == lso
    log.close()


def test_segment_deletion_removes_txn_index(tmp_path):
    d, cfg, expected, _ = _scripted_log(tmp_path)
    log = PartitionLog.open(d, cfg, topic="t", partition=0)
    base = min(b for b, v in expected.items() if v)
    log.truncate_fully_and_start_at(100, now_ms=NOW_MS)
    log.close()
    assert not os.path.exists(os.path.join(d, f"{base:020d}.txnindex"))


def test_transaction_summary_gauges(tmp_path):
    log = new_log(tmp_path)
    assert log.transaction_summary(NOW_MS) == {"open_transactions": 0, "last_stable_offset": 0,
                                                "last_stable_offset_lag": 0, "oldest_open_transaction_ms": 0}
    log.append(build_records(2, [SimpleRecord(NOW_MS, None, b"x")]).buffer, now_ms=NOW_MS)
    log.append(txn_data(1, 0), now_ms=NOW_MS + 100)
    log.append(txn_data(2, 0), now_ms=NOW_MS + 300)
    assert log.transaction_summary(NOW_MS + 1000) == {"open_transactions": 2, "last_stable_offset": 1,
                                                       "last_stable_offset_lag": 4, "oldest_open_transaction_ms": 900}
    marker(log, 1, commit=True)
    assert log.transaction_summary(NOW_MS + 1000) == {"open_transactions": 1, "last_stable_offset": 3,
                                                       "last_stable_offset_lag": 3, "oldest_open_transaction_ms": 700}


def test_retention_deletes_txn_index_with_its_segment(tmp_path):
    d, cfg, expected, _ = _scripted_log(tmp_path)
    log = PartitionLog.open(d, cfg, topic="t", partition=0)
    doomed = [b for b, v in expected.items() if v][0]
    nxt = min(b for b in expected if b > doomed)
    log.delete_records(nxt)
    outcome = log.delete_old_segments(NOW_MS)
    assert [s.base_offset for s in outcome.deleted][-1] == doomed
    log.delete_expired_files(NOW_MS + 1)
    log.close()
    names = os.listdir(d)
    assert not any(n.startswith(f"{doomed:020d}.txnindex") for n in names)


def test_describe_producers(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_data(5, 0, n=3, epoch=2), now_ms=NOW_MS)
    log.append(txn_data(6, 0, epoch=0, transactional=False, ts=NOW_MS + 7), now_ms=NOW_MS)
    marker(log, 6, commit=True, epoch=1, coord=4, ts=NOW_MS + 9)
    got = [tuple(p) for p in log.describe_producers()]
    assert got == [(5, 2, 2, NOW_MS, -1, 0), (6, 1, -1, NOW_MS + 9, 4, -1)]


def test_truncated_snapshot_or_txn_index_at_every_length(tmp_path):
    """Cut the newest snapshot (clean start) or a .txnindex (unclean start) at every length:
    the LSO, the open transactions and the .txnindex files come back the same."""
    import shutil

    d, cfg, expected, lso = _scripted_log(tmp_path)
    ref = PartitionLog.open(d, cfg, topic="t", partition=0)
    ongoing = [(t.producer_id, t.first_offset) for t in ref.ongoing_transactions()]
    ref.close()
    names = sorted(os.listdir(d))
    snapshot = max(n for n in names if n.endswith(".snapshot"))
    txn_file = next(n for n in names if n.endswith(".txnindex") and os.path.getsize(os.path.join(d, n)))
    for name, clean in ((snapshot, True), (txn_file, False)):
        size = os.path.getsize(os.path.join(d, name))
        for cut in range(size):
            work = str(tmp_path / f"w-{name}-{cut}")
            shutil.copytree(d, work)
            os.truncate(os.path.join(work, name), cut)
            log = PartitionLog.open(work, cfg, topic="t", partition=0, clean=clean,
                                    recovery_point=None if clean else 0)
            assert log.last_stable_offset == lso
            assert [(t.producer_id, t.first_offset) for t in log.ongoing_transactions()] == ongoing
            assert {s.base_offset: read_txn_index(s.txn_index.path) for s in log.segments} == expected
            log.close()
            shutil.rmtree(work)


def test_disk_full_never_leaves_an_abort_marker_without_its_entry(tmp_path, monkeypatch):
    import errno

    from sundial.storage import files as storage_files
    from sundial.storage.errors import KafkaStorageError

    log = new_log(tmp_path)
    log.append(txn_data(1, 0), now_ms=NOW_MS)
    real_pwrite_all = storage_files.pwrite_all
    real_pwritev_all = storage_files.pwritev_all

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    # the .txnindex write fails: nothing reaches the log
    monkeypatch.setattr(storage_files, "pwrite_all", full)
    with pytest.raises(KafkaStorageError):
        marker(log, 1, commit=False)
    assert log.log_end_offset == 2 and log.last_stable_offset == 0
    monkeypatch.setattr(storage_files, "pwrite_all", real_pwrite_all)
    # the marker's own write fails: the entry written first is removed again
    monkeypatch.setattr(storage_files, "pwritev_all", full)
    with pytest.raises(KafkaStorageError):
        marker(log, 1, commit=False)
    assert read_txn_index(log.active_segment.txn_index.path) == [] and log.last_stable_offset == 0
    monkeypatch.setattr(storage_files, "pwritev_all", real_pwritev_all)
    # space is back: the retry (the coordinator resends the marker) lands with its entry
    assert marker(log, 1, commit=False).first_offset == 2
    assert read_txn_index(log.active_segment.txn_index.path) == [(1, 0, 2, 3)]
    assert log.last_stable_offset == 3


def test_corrupt_txn_index_is_rebuilt_on_a_clean_start(tmp_path):
    d, cfg, expected, lso = _scripted_log(tmp_path)
    base = next(b for b, v in expected.items() if v)
    path = os.path.join(d, f"{base:020d}.txnindex")
    raw = bytearray(open(path, "rb").read())
    struct.pack_into(">h", raw, 0, 7)                     # an entry of an unknown version
    open(path, "wb").write(bytes(raw))
    log = PartitionLog.open(d, cfg, topic="t", partition=0)
    assert {s.base_offset: read_txn_index(s.txn_index.path) for s in log.segments} == expected
    assert log.last_stable_offset == lso
    log.close()
