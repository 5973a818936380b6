"""Transactional offset commits in the offsets store: pending until the COMMIT marker, dropped on
ABORT, a newer plain commit wins; replaying the log gives the live state (Hypothesis, vs a model)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.groups.offsets import CommittedOffset, MemoryOffsetsLog, OffsetStore

TP = ("t", 0)


def _c(offset):
    return CommittedOffset(offset, -1, "", 1, -1)


def test_pending_until_commit_and_dropped_on_abort():
    log = MemoryOffsetsLog()
    store = OffsetStore(log)
    store.commit_transactional("g", {TP: _c(5)}, 7, 0, 1)
    assert store.offsets_of("g") == {} and store.pending_partitions("g") == {TP}
    log.append_marker(7, True)
    store.complete_txn(7, True)
    assert store.offsets_of("g")[TP].offset == 5 and not store.has_pending("g")
    store.commit_transactional("g", {TP: _c(9)}, 7, 0, 2)
    log.append_marker(7, False)
    store.complete_txn(7, False)
    assert store.offsets_of("g")[TP].offset == 5
    again = OffsetStore(log)
    again.load()
    assert again.offsets_of("g") == store.offsets_of("g") and not again.pending_txn


def test_newer_plain_commit_wins_over_an_older_pending_one():
    log = MemoryOffsetsLog()
    store = OffsetStore(log)
    store.commit_transactional("g", {TP: _c(5)}, 7, 0, 1)
    store.commit("g", {TP: _c(8)}, 2)
    log.append_marker(7, True)
    store.complete_txn(7, True)
    assert store.offsets_of("g")[TP].offset == 8


def test_no_snapshot_while_a_commit_is_pending():
    store = OffsetStore(MemoryOffsetsLog(), snapshot_min_records=1)
    store.commit("g", {TP: _c(1)}, 1)
    store.commit("g", {TP: _c(2)}, 1)
    store.commit("g", {TP: _c(3)}, 1)
    assert store.snapshot_due()
    store.commit_transactional("g", {("t", 1): _c(4)}, 7, 0, 1)
    assert not store.snapshot_due()


OPS = st.lists(st.tuples(st.sampled_from(["plain", "txn", "commit", "abort", "delete"]),
                         st.integers(0, 2), st.integers(0, 2), st.integers(0, 100)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_store_and_replay_equal_a_model(ops):
    log = MemoryOffsetsLog()
    store = OffsetStore(log)
    model: dict[tuple, int] = {}        # (group, partition) -> offset
    order: dict[tuple, int] = {}        # (group, partition) -> sequence of the record that set it
    pending: dict[int, dict] = {}       # producer -> (group, partition) -> (offset, sequence)
    seq = 0
    for op, pid, part, value in ops:
        seq += 1
        group = f"g{part % 2}"
        tp = ("t", part)
        if op == "plain":
            store.commit(group, {tp: _c(value)}, 1)
            model[(group, part)] = value
            order[(group, part)] = seq
        elif op == "txn":
            store.commit_transactional(group, {tp: _c(value)}, pid, 0, 1)
            pending.setdefault(pid, {})[(group, part)] = (value, seq)
        elif op in ("commit", "abort"):
            log.append_marker(pid, op == "commit")
            store.complete_txn(pid, op == "commit")
            for key, (v, s) in pending.pop(pid, {}).items():
                if op == "commit" and order.get(key, -1) < s:
                    model[key] = v
                    order[key] = s
        else:
            store.delete_offsets(group, [tp], 1)
            model.pop((group, part), None)
            order.pop((group, part), None)
        live = {(g, p): c.offset for g in ("g0", "g1") for (_, p), c in store.offsets_of(g).items()}
        assert live == model
    again = OffsetStore(log)
    again.load()
    assert {g: again.offsets_of(g) for g in ("g0", "g1")} == {g: store.offsets_of(g) for g in ("g0", "g1")}
    assert {p: {g: set(e) for g, e in gs.items()} for p, gs in again.pending_txn.items()} == \
        {p: {g: set(e) for g, e in gs.items()} for p, gs in store.pending_txn.items()}


def test_real_log_transactional_batch_and_markers_replay(tmp_path):
    """On Sundial's storage: a TxnOffsetCommit batch is transactional (Kafka's bytes) and the
    markers the coordinator writes decide it again on replay, across a reopen."""
    from sundial.broker.groups.offsets import OFFSETS_TOPIC, PartitionOffsetsLog
    from sundial.config import BrokerConfig
    from sundial.records.framing import iter_batches
    from sundial.records.layout import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
    from sundial.storage import LogManager

    now = [1_700_000_000_000]

    def clock():
        now[0] += 1
        return now[0]

    config = BrokerConfig({})

    def open_store():
        mgr = LogManager([str(tmp_path)], config.explicit, now_ms=clock)
        mgr.startup()
        store = OffsetStore(PartitionOffsetsLog.open(mgr, config, now_ms=clock))
        store.load()
        return mgr, store

    mgr, store = open_store()
    store.commit("g", {TP: _c(1)}, clock())
    store.commit_transactional("g", {TP: _c(5), ("t", 1): _c(6)}, 42, 3, clock())
    store.commit_transactional("g", {("t", 2): _c(7)}, 43, 0, clock())
    log = mgr.get_log(OFFSETS_TOPIC, 0)
    log.append_txn_marker(producer_id=42, producer_epoch=3, coordinator_epoch=0, control_type=CONTROL_TYPE_COMMIT,
                          timestamp_ms=clock(), now_ms=clock())
    store.complete_txn(42, True)
    log.append_txn_marker(producer_id=43, producer_epoch=0, coordinator_epoch=0, control_type=CONTROL_TYPE_ABORT,
                          timestamp_ms=clock(), now_ms=clock())
    store.complete_txn(43, False)
    live = {tp: c.offset for tp, c in store.offsets_of("g").items()}
    assert live == {TP: 5, ("t", 1): 6}
    data = b"".join(s.read() for s in log.read(0, 1 << 20).slices)
    views = list(iter_batches(data))
    assert [(v.is_transactional, v.is_control, v.producer_id) for v in views] == [
        (False, False, -1), (True, False, 42), (True, False, 43), (True, True, 42), (True, True, 43)]
    assert views[1].producer_epoch == 3 and views[1].base_sequence == -1
    mgr.shutdown()
    mgr, again = open_store()
    assert {tp: c.offset for tp, c in again.offsets_of("g").items()} == live and not again.pending_txn
    mgr.shutdown()
