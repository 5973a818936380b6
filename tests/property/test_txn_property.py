"""Hypothesis: random interleavings of transactional and non-transactional producers with
commits and aborts appended directly to a PartitionLog.

* What a read_committed reader sees — fetching below the last stable offset and dropping
  aborted batches with the aborted-transactions list exactly as Kafka's consumer does
  (``CompletedFetch``: per fetch, a queue of aborted transactions by first offset, a
  producer joins the aborted set once a batch reaches its first offset and leaves it at
  its ABORT marker) — equals a model of the script.
* Every segment's ``.txnindex`` (read by a reader written here) equals the entries the
  model derives, and an unclean restart that rebuilds them gives the same files and LSO.
* ListOffsets by timestamp under both isolation levels equals brute force over every
  record (markers included): Kafka's segment-then-record search, then "none" when the
  answer is at or past the last fetchable offset.
* A crash that tears the last segment at a random byte (and may lose the ``.txnindex``
  and snapshot files) recovers to the LSO, ``.txnindex`` files and read_committed view of
  a replay of the batches that survived.
* Compaction with transactions equals a model: aborted records never mapped nor kept
  below the cleanable end, the last committed record per key kept, nothing at or past
  the LSO touched; aborted records left on disk stay covered by ``.txnindex`` entries.
"""

import os
import shutil
import struct
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.log_helpers import NOW_MS, brute_force_search_segments, topic_config

from sundial.config import BrokerConfig
from sundial.broker.replica_manager import READ_COMMITTED, READ_UNCOMMITTED, ReplicaManager
from sundial.records import iter_batches, iter_records
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.control import build_end_txn_marker
from sundial.storage.log import PartitionLog
from sundial.storage.origin import AppendOrigin

TXN_PIDS = (1, 2, 3)
PLAIN_PIDS = (7, 8)      # idempotent, never transactional

op = st.one_of(
    st.tuples(st.just("data"), st.sampled_from(TXN_PIDS + PLAIN_PIDS + (-1,)), st.integers(1, 3),
              st.integers(-50, 50)),
    st.tuples(st.just("end"), st.sampled_from(TXN_PIDS), st.booleans(), st.integers(-50, 50)),
    st.tuples(st.just("roll"), st.just(0), st.just(0), st.just(0)),
)


def read_txn_index(path):
    if not os.path.exists(path):
        return []
    raw = open(path, "rb").read()
    return [struct.unpack_from(">hqqqq", raw, p)[1:] for p in range(0, len(raw) - 33, 34)]


class _Metrics:
    def time_index_lookup(self):
        pass


class _Logs:
    def __init__(self, log):
        self.log = log

    def get_log(self, topic, partition):
        return self.log


def replica_manager(log) -> ReplicaManager:
    """A ReplicaManager over one real log; list_offset reads logs, metrics and the clock."""
    return ReplicaManager(BrokerConfig({}), _Logs(log), purgatory=None, metrics=_Metrics(), now_ms=lambda: NOW_MS)


def run_script(log, ops, ends=None):
    """Append ``ops``; returns the model: records [(offset, ts, pid, txn id or None)], markers,
    transaction outcomes, expected .txnindex entries keyed by marker offset."""
    ends = {} if ends is None else ends    # txn id -> (first offset, marker offset)
    seq = {}
    open_txn = {}            # pid -> (txn id, first offset)
    outcome = {}             # txn id -> "commit" / "abort"
    records, control = [], []
    aborted = []             # (pid, first, marker offset, lso)
    next_txn = 0
    ends.clear()
    for kind, pid, arg, dt in ops:
        ts = NOW_MS + dt
        if kind == "roll":
            if log.active_segment.size_bytes:
                log.roll(NOW_MS)
            continue
        if kind == "data":
            n = arg
            txn = pid in TXN_PIDS
            recs = [SimpleRecord(ts + i, b"k", b"v") for i in range(n)]
            if pid < 0:
                raw = build_records(2, recs).buffer
            else:
                raw = build_records(2, recs, producer_id=pid, producer_epoch=0, base_sequence=seq.get(pid, 0),
                                    is_transactional=txn).buffer
                seq[pid] = seq.get(pid, 0) + n
            r = log.append(raw, now_ms=NOW_MS)
            txn_id = None
            if txn:
                if pid not in open_txn:
                    open_txn[pid] = (next_txn, r.first_offset)
                    next_txn += 1
                txn_id = open_txn[pid][0]
            records.extend((r.first_offset + i, ts + i, pid, txn_id) for i in range(n))
            continue
        commit = arg
        r = log.append_txn_marker(producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                  control_type=1 if commit else 0, timestamp_ms=ts, now_ms=NOW_MS)
        control.append((r.first_offset, ts))
        if pid in open_txn:
            txn_id, first = open_txn.pop(pid)
            outcome[txn_id] = "commit" if commit else "abort"
            ends[txn_id] = (first, r.first_offset)
            if not commit:
                others = [f for p, (_, f) in open_txn.items()]
                aborted.append((pid, first, r.first_offset, min(others) if others else r.first_offset + 1))
    lso = min((f for _, f in open_txn.values()), default=log.high_watermark)
    return records, control, outcome, aborted, lso


def read_committed_view(log, max_bytes):
    """Kafka's consumer over read_committed fetches: [(offset, ts)] of the records it returns."""
    out = []
    pos = log.log_start_offset
    while True:
        info = log.read(pos, max_bytes, read_committed=True)
        if not info.slices or info.slices[0].size == 0:
            return out, pos
        queue = sorted(info.aborted_transactions, key=lambda a: a[1])
        aborted_pids = set()
        data = info.slices[0].read()
        for view in iter_batches(data):
            if view.last_offset < pos:
                continue
            if view.magic >= 2 and view.producer_id >= 0:
                while queue and queue[0][1] <= view.last_offset:
                    aborted_pids.add(queue.pop(0)[0])
                if view.is_control:
                    key = next(iter_records(view)).key
                    if struct.unpack(">hh", key)[1] == 0:
                        aborted_pids.discard(view.producer_id)
                elif view.is_transactional and view.producer_id in aborted_pids:
                    pos = view.last_offset + 1
                    continue
            if not view.is_control:
                out.extend((r.offset, r.timestamp) for r in iter_records(view) if r.offset >= pos)
            pos = view.last_offset + 1


def expected_txn_indexes(log, aborted):
    bases = [s.base_offset for s in log.segments]
    want = {b: [] for b in bases}
    for entry in aborted:
        want[max(b for b in bases if b <= entry[2])].append(entry)
    return want


def check_list_offsets(log, records, control):
    rm = replica_manager(log)
    everything = sorted([(o, t) for o, t, _, _ in records] + control)
    segments = [[(o, t) for o, t in everything if s.base_offset <= o < s.next_offset] for s in log.segments]
    targets = sorted({NOW_MS - 100, NOW_MS + 100} | {t + d for _, t in everything for d in (-1, 0, 1)})
    for isolation, limit in ((READ_UNCOMMITTED, log.high_watermark), (READ_COMMITTED, log.last_stable_offset)):
        latest = rm.list_offset("t", 0, -1, api_version=7, isolation_level=isolation)
        assert latest.offset == limit
        earliest = rm.list_offset("t", 0, -2, api_version=7, isolation_level=isolation)
        assert earliest.offset == log.log_start_offset
        for target in targets:
            found = brute_force_search_segments(segments, target, log.log_start_offset)
            expect = (found[0], found[1]) if found and found[0] < limit else (-1, -1)
            got = rm.list_offset("t", 0, target, api_version=7, isolation_level=isolation)
            assert (got.offset, got.timestamp) == expect, (isolation, target)
        mx = max(everything, key=lambda ot: ot[1], default=None)
        if mx is not None:
            first_max = next(o for o, t in everything if t == mx[1])
            got = rm.list_offset("t", 0, -3, api_version=7, isolation_level=isolation)
            assert got.offset == (first_max if first_max < limit else -1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=40), max_bytes=st.sampled_from([1, 150, 400, 1 << 20]))
def test_read_committed_matches_model(ops, max_bytes):
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, "t-0")
        cfg = topic_config(segment_bytes=1000, index_interval_bytes=100)
        log = PartitionLog.create(d, cfg, topic="t", partition=0, now_ms=NOW_MS)
        records, control, outcome, aborted, lso = run_script(log, ops)
        assert log.last_stable_offset == lso
        seen, end = read_committed_view(log, max_bytes)
        assert end == lso
        visible = [(o, t) for o, t, _, txn in records if o < lso and (txn is None or outcome.get(txn) == "commit")]
        assert seen == visible
        want = expected_txn_indexes(log, aborted)
        assert {s.base_offset: read_txn_index(s.txn_index.path) for s in log.segments} == want
        check_list_offsets(log, records, control)
        # crash (no close), lose every .txnindex and snapshot, recover: the same files and LSO
        log.close_handles()
        for name in os.listdir(d):
            if name.endswith((".txnindex", ".snapshot")):
                os.remove(os.path.join(d, name))
        again = PartitionLog.open(d, cfg, topic="t", partition=0, clean=False, recovery_point=0)
        assert {s.base_offset: read_txn_index(s.txn_index.path) for s in again.segments} == want
        assert again.last_stable_offset == lso
        assert read_committed_view(again, max_bytes)[0] == visible
        again.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_marker_is_a_record_for_time_lookups(tmp_path):
    """A marker takes an offset and its timestamp is searchable (Kafka's offsetsForTimes scans it)."""
    log = PartitionLog.create(str(tmp_path / "t-0"), topic_config(), topic="t", partition=0, now_ms=NOW_MS)
    log.append(build_records(2, [SimpleRecord(NOW_MS, b"k", b"v")], producer_id=1, producer_epoch=0,
                             base_sequence=0, is_transactional=True).buffer, now_ms=NOW_MS)
    log.append(build_end_txn_marker(producer_id=1, producer_epoch=0, coordinator_epoch=0, control_type=1,
                                    timestamp_ms=NOW_MS + 10), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR)
    found = log.fetch_offset_by_timestamp(NOW_MS + 5)
    assert (found.offset, found.timestamp_ms) == (1, NOW_MS + 10)


def replay_survivors(log):
    """The model over the batches that survived, read from the segment files in offset order:
    (LSO, read_committed view, expected .txnindex entries per segment)."""
    batches = []
    for seg in log.segments:
        with open(seg.log_path, "rb") as fh:
            batches.extend((seg.base_offset, v) for v in iter_batches(fh.read()))
    open_first, closed_commit, records, want = {}, set(), [], {s.base_offset: [] for s in log.segments}
    txn_of = {}                           # data offset -> (pid, first offset of its transaction)
    for base, view in batches:
        pid = view.producer_id
        if view.is_control:
            ctype = struct.unpack(">hh", next(iter_records(view)).key)[1]
            first = open_first.pop(pid, None)
            if first is not None:
                if ctype == 0:
                    others = list(open_first.values())
                    want[base].append((pid, first, view.base_offset, min(others) if others else view.base_offset + 1))
                else:
                    closed_commit.add((pid, first))
            continue
        if view.is_transactional and pid not in open_first:
            open_first[pid] = view.base_offset
        for r in iter_records(view):
            records.append((r.offset, r.timestamp))
            if view.is_transactional:
                txn_of[r.offset] = (pid, open_first[pid])
    lso = min(open_first.values(), default=log.log_end_offset)
    visible = [(o, t) for o, t in records if o < lso and (o not in txn_of or txn_of[o] in closed_commit)]
    return lso, visible, want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=40), cut=st.floats(0, 1), lose=st.sampled_from(["none", "txnindex",
                                                                                              "snapshots", "both"]))
def test_torn_tail_recovery_matches_model(ops, cut, lose):
    """Crash, cut the last non-empty segment at a random byte, maybe lose the .txnindex and snapshot
    files, recover: LSO, .txnindex files and the read_committed view equal the model of what survived."""
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, "t-0")
        cfg = topic_config(segment_bytes=1000, index_interval_bytes=100)
        log = PartitionLog.create(d, cfg, topic="t", partition=0, now_ms=NOW_MS)
        run_script(log, ops)
        log.close_handles()
        sizes = {n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log")}
        nonempty = sorted(n for n, size in sizes.items() if size)
        if nonempty:
            last = os.path.join(d, nonempty[-1])
            os.truncate(last, int(sizes[nonempty[-1]] * cut))
        for name in os.listdir(d):
            if (lose in ("txnindex", "both") and name.endswith(".txnindex")) or (
                    lose in ("snapshots", "both") and name.endswith(".snapshot")):
                os.remove(os.path.join(d, name))
        again = PartitionLog.open(d, cfg, topic="t", partition=0, clean=False, recovery_point=0)
        lso, visible, want = replay_survivors(again)
        assert again.last_stable_offset == lso
        assert read_committed_view(again, 1 << 20)[0] == visible
        assert {s.base_offset: read_txn_index(s.txn_index.path) for s in again.segments} == want
        again.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


keyed_op = st.one_of(
    st.tuples(st.just("data"), st.sampled_from(TXN_PIDS + PLAIN_PIDS + (-1,)),
              st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", None]),
                                 st.one_of(st.none(), st.binary(min_size=1, max_size=4))), min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from(TXN_PIDS), st.booleans()),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(keyed_op, min_size=1, max_size=40), slots=st.sampled_from([3, 9, 4096]))
def test_compaction_with_transactions_matches_model(ops, slots):
    """Compaction never maps or keeps aborted records below the cleanable end, keeps the last
    committed (or non-transactional) record of each key, leaves everything from the first
    uncleanable offset (the LSO at most) alone; a read_committed reader of the cleaned log sees
    exactly the model, and every aborted record still on disk is covered by a .txnindex entry."""
    from support.cleaner_helpers import append as raw_append
    from support.cleaner_helpers import batches_on_disk, clean_until_done, compact_log
    from sundial.storage.cleaner_manager import LogCleanerManager, cleanable_bytes, cleanable_offsets
    from sundial.storage.offset_map import SkimpyOffsetMap

    tmp = tempfile.mkdtemp()
    log = compact_log(os.path.join(tmp, "t-0"), segment_bytes=400, index_interval_bytes=50,
                      delete_retention_ms=86_400_000)
    try:
        seq, open_txn, state, records, next_txn = {}, {}, {}, [], 0
        for kind, pid, arg in ops:
            if kind == "roll":
                if log.active_segment.size_bytes:
                    log.roll(NOW_MS)
            elif kind == "data":
                txn = pid in TXN_PIDS
                kwargs = {} if pid < 0 else dict(producer_id=pid, producer_epoch=0, base_sequence=seq.get(pid, 0),
                                                 is_transactional=txn)
                recs = raw_append(log, [(k, v, NOW_MS) for k, v in arg], **kwargs)
                if pid >= 0:
                    seq[pid] = seq.get(pid, 0) + len(arg)
                tid = None
                if txn:
                    if pid not in open_txn:
                        open_txn[pid] = next_txn
                        next_txn += 1
                    tid = open_txn[pid]
                records += [(r, tid) for r in recs]
            else:
                log.append_txn_marker(producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                      control_type=int(arg), timestamp_ms=NOW_MS, now_ms=NOW_MS)
                if pid in open_txn:
                    state[open_txn.pop(pid)] = "commit" if arg else "abort"
        log.roll(NOW_MS)
        lso = log.last_stable_offset
        mgr = LogCleanerManager([tmp])
        clean_until_done(log, mgr, SkimpyOffsetMap(24 * slots), NOW_MS, load_factor=0.9 if slots > 3 else 1.0)
        first_dirty, uncleanable, _ = cleanable_offsets(log, mgr.all_checkpoints().get(("t", 0)), NOW_MS)
        end = cleanable_bytes(log, first_dirty, uncleanable)[0]
        assert end <= lso

        def good(tid):
            return tid is None or state.get(tid) == "commit"

        last = {}
        for r, tid in records:
            if r.offset < end and r.key is not None and good(tid):
                last[r.key] = r.offset
        kept = [(r, tid) for r, tid in records
                if r.offset >= end or (r.key is not None and good(tid) and last[r.key] == r.offset)]
        on_disk = [(r.offset, r.key, r.value) for _, v in batches_on_disk(log) if not v.is_control
                   for r in iter_records(v)]
        assert on_disk == [(r.offset, r.key, r.value) for r, _ in kept]
        assert log.last_stable_offset == lso
        visible = [(r.offset, r.timestamp) for r, tid in kept if r.offset < lso and good(tid)]
        assert read_committed_view(log, 1 << 20)[0] == visible
        aborted_left = {r.offset for r, tid in kept if tid is not None and state.get(tid) == "abort"}
        covered = set()
        for seg in log.segments:
            for pid, first, last_off, _ in read_txn_index(seg.txn_index.path):
                covered |= {o for o in aborted_left if first <= o < last_off}
        assert covered == aborted_left
    finally:
        log.close_handles()
        shutil.rmtree(tmp, ignore_errors=True)
