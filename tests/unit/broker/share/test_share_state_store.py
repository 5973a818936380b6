"""The durable share state (``__share_group_state``): Kafka's record bytes, Kafka's batch combiner,
and write/replay equivalence.

Ground truths:
* the bytes of each record are computed by a generic encoder driven by Kafka's JSON schemas (the
  field lists below are Kafka's ``ShareSnapshotKey/Value``, ``ShareUpdateKey/Value`` 4.2, reproduced
  as data), and one record is spelled out byte by byte;
* the combiner is checked against a per-offset model (each offset keeps the batch of the higher
  delivery count, then the higher state; offsets before the start offset go);
* the store is checked against the same model applied in memory, across snapshots, replays from
  the log and pruning.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.unit_helpers import ManualClock
from support.wire_bytes import uvarint

from sundial.broker.groups.offsets import MemoryOffsetsLog
from sundial.broker.share.state_batch import RecordState, ShareStateSnapshot, StateBatch, StateChange
from sundial.broker.share.state_records import (
    SHARE_STATE_TOPIC,
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    combine_state_batches,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot_value,
    encode_update_value,
)
from sundial.broker.share.state_store import ShareStateStore, ShareStateWriteError
from sundial.config.share import ShareCoordinatorConfig

from support.state_support import FixedTopicIds

AVAILABLE, ACKNOWLEDGED, ARCHIVED = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
TOPIC_ID = bytes(range(16))
IDS = FixedTopicIds({"t": TOPIC_ID, "u": bytes([0xAB]) * 16})


# --- a generic encoder of Kafka's JSON schemas (the oracle of the byte format) ----------------

# (name, type, tag) ; tag None: not tagged. Struct arrays: ("[]", fields).
STATE_BATCH = [("FirstOffset", "int64", None), ("LastOffset", "int64", None),
               ("DeliveryState", "int8", None), ("DeliveryCount", "int16", None)]
SHARE_KEY = [("GroupId", "string", None), ("TopicId", "uuid", None), ("Partition", "int32", None)]
SHARE_SNAPSHOT_VALUE = [
    ("SnapshotEpoch", "int32", None), ("StateEpoch", "int32", None), ("LeaderEpoch", "int32", None),
    ("StartOffset", "int64", None), ("DeliveryCompleteCount", "int32", 0),
    ("CreateTimestamp", "int64", None), ("WriteTimestamp", "int64", None),
    ("StateBatches", ("[]", STATE_BATCH), None),
]
SHARE_UPDATE_VALUE = [
    ("SnapshotEpoch", "int32", None), ("LeaderEpoch", "int32", None), ("StartOffset", "int64", None),
    ("DeliveryCompleteCount", "int32", 0), ("StateBatches", ("[]", STATE_BATCH), None),
]
DEFAULTS = {"DeliveryCompleteCount": -1}
FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H"}


def encode_field(ftype, value, flexible: bool) -> bytes:
    if isinstance(ftype, tuple):
        items = b"".join(encode_struct(ftype[1], v, flexible) for v in value)
        return (uvarint(len(value) + 1) if flexible else struct.pack(">i", len(value))) + items
    if ftype in FIXED:
        return struct.pack(FIXED[ftype], value)
    if ftype == "uuid":
        assert len(value) == 16
        return value
    if ftype == "string":
        raw = value.encode()
        return (uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw
    raise AssertionError(ftype)


def encode_struct(fields, values: dict, flexible: bool) -> bytes:
    out = b""
    tagged = []
    for name, ftype, tag in fields:
        value = values.get(name, DEFAULTS.get(name))
        if tag is not None:
            if value != DEFAULTS.get(name):
                tagged.append((tag, encode_field(ftype, value, flexible)))
            continue
        out += encode_field(ftype, value, flexible)
    if flexible:
        out += uvarint(len(tagged)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in sorted(tagged))
    return out


def record_key(record_type: int, group: str, topic_id: bytes, partition: int) -> bytes:
    return struct.pack(">h", record_type) + encode_struct(
        SHARE_KEY, {"GroupId": group, "TopicId": topic_id, "Partition": partition}, flexible=False)


def record_value(fields, values: dict) -> bytes:
    return struct.pack(">h", 0) + encode_struct(fields, values, flexible=True)


def batch_dicts(batches):
    return [{"FirstOffset": b.first_offset, "LastOffset": b.last_offset, "DeliveryState": int(b.delivery_state),
             "DeliveryCount": b.delivery_count} for b in batches]


# --- bytes ------------------------------------------------------------------------------------

def test_update_record_spelled_out():
    key = encode_key(ShareStateKey(1, "g", TOPIC_ID, 2))
    assert key.hex() == "0001" + "000167" + TOPIC_ID.hex() + "00000002"
    value = encode_update_value(ShareUpdateValue(1, 0, 5, (StateBatch(5, 7, ACKNOWLEDGED, 1),), 3))
    assert value.hex() == ("0000" "00000001" "00000000" "0000000000000005"
                           "02" "0000000000000005" "0000000000000007" "02" "0001" "00"
                           "01" "00" "04" "00000003")


batches_st = st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 1000), st.sampled_from(list(RecordState)),
                                st.integers(0, 32767)), max_size=5).map(
    lambda xs: tuple(StateBatch(a, a + n, s, c) for a, n, s, c in xs))


@given(group=st.text(max_size=20), partition=st.integers(0, 2**31 - 1),
       epochs=st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1)),
       start=st.integers(-1, 2**62), stamps=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
       batches=batches_st, dcc=st.integers(-1, 2**31 - 1))
def test_records_match_kafka_schemas(group, partition, epochs, start, stamps, batches, dcc):
    for record_type in (0, 1):
        key = ShareStateKey(record_type, group, TOPIC_ID, partition)
        assert encode_key(key) == record_key(record_type, group, TOPIC_ID, partition)
        assert decode_key(encode_key(key)) == key
    snap = ShareSnapshotValue(epochs[0], epochs[1], epochs[2], start, stamps[0], stamps[1], batches, dcc)
    expected = record_value(SHARE_SNAPSHOT_VALUE, {
        "SnapshotEpoch": epochs[0], "StateEpoch": epochs[1], "LeaderEpoch": epochs[2], "StartOffset": start,
        "CreateTimestamp": stamps[0], "WriteTimestamp": stamps[1], "StateBatches": batch_dicts(batches),
        "DeliveryCompleteCount": dcc})
    assert encode_snapshot_value(snap) == expected
    assert decode_value(0, expected) == snap
    update = ShareUpdateValue(epochs[0], epochs[2], start, batches, dcc)
    expected = record_value(SHARE_UPDATE_VALUE, {
        "SnapshotEpoch": epochs[0], "LeaderEpoch": epochs[2], "StartOffset": start,
        "StateBatches": batch_dicts(batches), "DeliveryCompleteCount": dcc})
    assert encode_update_value(update) == expected
    assert decode_value(1, expected) == update


def test_bad_records_are_schema_errors():
    from sundial.broker.coordinator_schema import SchemaError
    good = encode_update_value(ShareUpdateValue(0, 0, 0, (StateBatch(0, 1, AVAILABLE, 1),)))
    for bad in (good[:-1], good + b"\x00", b"\x00\x01" + good[2:]):
        with pytest.raises(SchemaError):
            decode_value(1, bad)
    with pytest.raises(SchemaError):
        decode_key(b"\x00\x07" + encode_key(ShareStateKey(0, "g", TOPIC_ID, 0))[2:])
    bad_state = bytearray(good)
    bad_state[2 + 4 + 4 + 8 + 1 + 16] = 3  # DeliveryState 3 is not a record state
    with pytest.raises(SchemaError):
        decode_value(1, bytes(bad_state))


# --- the combiner -----------------------------------------------------------------------------

def expand(batches) -> dict[int, tuple[int, RecordState]]:
    out = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            assert o not in out, "batches overlap"
            out[o] = (b.delivery_count, b.delivery_state)
    return out


def model_merge(state: dict, new, start: int) -> dict:
    merged = dict(state)
    for b in new:
        for o in range(b.first_offset, b.last_offset + 1):
            cand = (b.delivery_count, b.delivery_state)
            cur = merged.get(o)
            if cur is None or (cand[0], int(cand[1])) > (cur[0], int(cur[1])):
                merged[o] = cand
    return {o: v for o, v in merged.items() if start == -1 or o >= start}


small_batches = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), st.sampled_from([AVAILABLE, ACKNOWLEDGED,
                                                                                          ARCHIVED]),
                                   st.integers(0, 3)), max_size=8).map(
    lambda xs: [StateBatch(a, a + n, s, c) for a, n, s, c in xs])


@given(old=small_batches, new=small_batches, start=st.integers(-1, 30))
def test_combiner_is_the_per_offset_maximum(old, new, start):
    out = combine_state_batches(old, new, start)
    assert expand(out) == model_merge(model_merge({}, old, -1), new, start)
    for a, b in zip(out, out[1:]):
        assert a.last_offset < b.first_offset
        assert not (a.last_offset + 1 == b.first_offset and a.delivery_state is b.delivery_state
                    and a.delivery_count == b.delivery_count), "neighbours of one state are merged"


def test_combiner_kafka_cases():
    # PersisterStateBatchCombinerTest-like cases: a higher count wins over a lower one, the higher
    # state wins at equal counts, the start offset cuts.
    old = [StateBatch(100, 109, AVAILABLE, 1)]
    assert combine_state_batches(old, [StateBatch(105, 106, ACKNOWLEDGED, 1)], -1) == (
        StateBatch(100, 104, AVAILABLE, 1), StateBatch(105, 106, ACKNOWLEDGED, 1), StateBatch(107, 109, AVAILABLE, 1))
    assert combine_state_batches(old, [StateBatch(105, 106, AVAILABLE, 0)], -1) == (StateBatch(100, 109, AVAILABLE, 1),)
    assert combine_state_batches(old, [StateBatch(108, 115, AVAILABLE, 1)], 103) == (StateBatch(103, 115, AVAILABLE, 1),)
    assert combine_state_batches(old, [], 110) == ()


# --- the store: write, replay, snapshots, pruning -------------------------------------------------

class Model:
    """Each share-partition's state applied in memory."""

    def __init__(self) -> None:
        self.states: dict[tuple, tuple[int, int, dict]] = {}

    def write(self, key, change: StateChange) -> None:
        epoch, _, offsets = self.states.get(key, (0, change.start_offset, {}))
        self.states[key] = (epoch, change.start_offset, model_merge(offsets, change.state_batches, change.start_offset))

    def initialize(self, key, start: int) -> None:
        old = self.states.get(key)
        self.states[key] = (0 if old is None else old[0] + 1, start, {})

    def delete(self, key) -> None:
        self.states.pop(key, None)


def state_of(snapshot: ShareStateSnapshot | None):
    if snapshot is None:
        return None
    return (snapshot.state_epoch, snapshot.start_offset, expand(snapshot.state_batches))


def new_store(log, clock, per_snapshot: int) -> ShareStateStore:
    settings_ = ShareCoordinatorConfig(snapshot_update_records_per_snapshot=per_snapshot, state_topic_prune_interval_ms=0,
                                   cold_partition_snapshot_interval_ms=50)
    store = ShareStateStore(log, IDS, now_ms=clock, settings=settings_)
    store.replay()
    store.mark_loaded()
    return store


change_st = st.builds(lambda start, batches: (start, batches), st.integers(0, 30), small_batches)
op_st = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["g1", "g2"]), st.sampled_from([("t", 0), ("t", 1), ("u", 0)]),
              change_st),
    st.tuples(st.just("initialize"), st.sampled_from(["g1", "g2"]), st.sampled_from([("t", 0), ("u", 0)]),
              st.integers(0, 30)),
    st.tuples(st.just("delete"), st.sampled_from(["g1", "g2"]), st.sampled_from([("t", 0), ("t", 1)]), st.none()),
    st.tuples(st.just("replay"), st.none(), st.none(), st.none()),
    st.tuples(st.just("maintain"), st.none(), st.none(), st.integers(0, 100)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_st, max_size=40), per_snapshot=st.integers(0, 4))
def test_replayed_state_equals_the_changes_applied_in_memory(ops, per_snapshot):
    async def run():
        clock = ManualClock(1_000)
        log = MemoryOffsetsLog()
        store = new_store(log, clock, per_snapshot)
        model = Model()
        for op, group, tp, arg in ops:
            clock.now += 10
            if op == "write":
                start, batches = arg
                change = StateChange(start, tuple(b for b in combine_state_batches((), batches, start)))
                await store.write(group, tp[0], tp[1], change)
                model.write((group, *tp), change)
            elif op == "initialize":
                await store.initialize(group, tp[0], tp[1], arg)
                model.initialize((group, *tp), arg)
            elif op == "delete":
                await store.delete(group, tp[0], tp[1])
                model.delete((group, *tp))
            elif op == "replay":
                log.crash()  # nothing acknowledged may be lost
                store = new_store(log, clock, per_snapshot)
            else:
                clock.now += arg
                await store.maintain()
            for key in {("g1", "t", 0), ("g1", "t", 1), ("g1", "u", 0), ("g2", "t", 0), ("g2", "t", 1), ("g2", "u", 0)}:
                expected = model.states.get(key)
                assert state_of(store.get(*key)) == expected, (op, key)
            for tp in (("t", 0), ("t", 1), ("u", 0)):
                assert store.start_offsets(*tp) == {g: st[1] for (g, t, p), st in model.states.items() if (t, p) == tp}
        replayed = new_store(log, clock, per_snapshot)
        for key, expected in model.states.items():
            assert state_of(replayed.get(*key)) == expected
        assert replayed.share_partition_count() == len(model.states)
    asyncio.run(run())


def test_snapshot_every_n_updates_and_pruning():
    async def run():
        clock = ManualClock(1_000)
        log = MemoryOffsetsLog()
        store = new_store(log, clock, per_snapshot=3)
        await store.initialize("g", "t", 0, 0)
        for i in range(8):
            await store.write("g", "t", 0, StateChange(i + 1, (StateBatch(i, i, ACKNOWLEDGED, 1),)))
        types = [decode_key(r.key).record_type for r in log.entries]
        # initialize: a snapshot; then 3 updates, a snapshot, 3 updates, a snapshot
        assert types == [0, 1, 1, 1, 0, 1, 1, 1, 0]
        assert store.prune() == 8  # everything before the last snapshot goes
        replayed = new_store(log, clock, 3)
        assert replayed.get("g", "t", 0) == ShareStateSnapshot(0, 8, ())
        assert replayed.start_offsets("t", 0) == {"g": 8}
    asyncio.run(run())


def test_cold_partitions_are_snapshotted_and_deleted_topics_dropped():
    async def run():
        clock = ManualClock(1_000)
        log = MemoryOffsetsLog()
        ids = FixedTopicIds(dict(IDS.ids))
        store = ShareStateStore(log, ids, now_ms=clock,
                                settings=ShareCoordinatorConfig(state_topic_prune_interval_ms=0, cold_partition_snapshot_interval_ms=100))
        store.mark_loaded()
        await store.initialize("idle", "t", 0, 5)
        await store.initialize("busy", "t", 1, 0)
        await store.initialize("gone", "u", 0, 0)
        for i in range(5):
            await store.write("busy", "t", 1, StateChange(i + 1, (StateBatch(i, i, ACKNOWLEDGED, 1),)))
        assert store.prune() is None  # the idle share-partition's snapshot is at offset 0
        del ids.ids["u"]
        clock.now += 100
        new_start = await store.maintain()
        assert new_start is not None and new_start > 0
        assert store.get("idle", "t", 0) == ShareStateSnapshot(0, 5, ())
        assert store.get("busy", "t", 1).start_offset == 5
        assert "gone" not in store.group_ids()
        replayed = ShareStateStore(log, ids, now_ms=clock)
        replayed.replay()
        assert replayed.start_offsets("t", 0) == {"idle": 5} and replayed.start_offsets("t", 1) == {"busy": 5}
        assert replayed.group_ids() == {"idle", "busy"}
    asyncio.run(run())


def test_write_failures_raise():
    async def run():
        clock = ManualClock(1_000)
        log = MemoryOffsetsLog()
        store = new_store(log, clock, 500)
        with pytest.raises(ShareStateWriteError):
            await store.write("g", "nope", 0, StateChange(0))
        log.fail_next_append = OSError("disk full")
        with pytest.raises(ShareStateWriteError):
            await store.initialize("g", "t", 0, 0)
        assert store.get("g", "t", 0) is None

        async def never(_):
            await asyncio.sleep(10)
        log.wait_durable = never
        store.settings = ShareCoordinatorConfig(write_timeout_ms=10)
        with pytest.raises(ShareStateWriteError):
            await store.initialize("g", "t", 0, 0)
    asyncio.run(run())


def test_on_real_storage(tmp_path):
    from sundial.config import BrokerConfig
    from sundial.storage import LogManager

    clock = ManualClock(1_000)

    async def run():
        config = BrokerConfig({})
        mgr = LogManager([str(tmp_path)], config.explicit, now_ms=clock)
        mgr.startup()
        mgr.create_topic("t", 2)
        store = ShareStateStore.open(mgr, config, now_ms=clock)
        await store.start()
        assert mgr.topic(SHARE_STATE_TOPIC) is not None
        await store.initialize("g", "t", 1, 3)
        await store.write("g", "t", 1, StateChange(3, (StateBatch(3, 9, ACKNOWLEDGED, 1), StateBatch(10, 12, AVAILABLE, 2))))
        await store.write("g", "t", 1, StateChange(10, ()))
        await store.stop()
        mgr.shutdown()
        mgr = LogManager([str(tmp_path)], config.explicit, now_ms=clock)
        mgr.startup()
        store = ShareStateStore.open(mgr, config, now_ms=clock)
        await store.start()
        assert store.get("g", "t", 1) == ShareStateSnapshot(0, 10, (StateBatch(10, 12, AVAILABLE, 2),))
        await store.stop()
        mgr.shutdown()
    asyncio.run(run())


def test_deleting_a_group_deletes_its_state():
    async def run():
        clock = ManualClock(1_000)
        log = MemoryOffsetsLog()
        store = new_store(log, clock, 500)
        await store.initialize("g", "t", 0, 1)
        await store.initialize("g", "u", 0, 2)
        await store.initialize("h", "t", 0, 3)
        store.on_group_deleted("g")
        store.on_group_deleted("nothing")
        await store.stop()
        assert store.group_ids() == {"h"}
        assert new_store(log, clock, 500).group_ids() == {"h"}
    asyncio.run(run())
