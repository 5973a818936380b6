"""The committed-offset store on Sundial's real storage (``__consumer_offsets`` in a LogManager).

Ground truth is a dict the test keeps of every acknowledged change. Checked: rebuild
after a clean shutdown and after an unclean one (no clean-shutdown marker), tombstones,
group metadata records, and that snapshots keep the log bounded while retention
removes the segments below the log start offset.
"""

from __future__ import annotations

import os
import random
import uuid

import pytest

from sundial.broker.groups.modern.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    CoordinatorRecord,
    decode_record,
    encode_record,
)
from sundial.broker.groups.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore, PartitionOffsetsLog
from sundial.broker.groups.schema import GroupValue, MemberRecord
from sundial.config import BrokerConfig
from sundial.storage import LogManager

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def open_store(data_dir, clock, snapshot_min=10_000, segment_bytes=1 << 20):
    config = BrokerConfig({"offsets.topic.segment.bytes": str(segment_bytes)})
    mgr = LogManager([str(data_dir)], config.explicit, now_ms=clock)
    mgr.startup()
    log = PartitionOffsetsLog.open(mgr, config, now_ms=clock)
    store = OffsetStore(log, snapshot_min_records=snapshot_min)
    store.load()
    return mgr, store


def snapshot_of(store):
    return {g: {tp: (c.offset, c.metadata) for tp, c in offs.items()} for g, offs in store.offsets.items() if offs}


async def test_rebuild_after_clean_and_unclean_shutdown(tmp_path):
    clock = Clock()
    mgr, store = open_store(tmp_path, clock)
    truth: dict[str, dict] = {}
    rng = random.Random(4)
    for i in range(400):
        group = f"g{rng.randrange(5)}"
        entries = {(f"t{rng.randrange(3)}", rng.randrange(4)): CommittedOffset(i, -1, f"m{i}", clock())
                   for _ in range(rng.randrange(1, 4))}
        await store.durable(store.commit(group, entries, clock()))
        for tp, c in entries.items():
            truth.setdefault(group, {})[tp] = (c.offset, c.metadata)
    await store.durable(store.delete_offsets("g1", list(truth["g1"])[:2], clock()))
    for tp in list(truth["g1"])[:2]:
        del truth["g1"][tp]
    value = GroupValue("consumer", 3, "range", "m1", 55,
                       (MemberRecord("m1", None, "c", "/h", 100, 50, b"s", b"a"),))
    await store.durable(store.store_group("g0", value, clock()))
    await store.durable(store.delete_group("g4", clock()))
    truth.pop("g4", None)
    assert snapshot_of(store) == truth
    mgr.shutdown()

    mgr, store = open_store(tmp_path, clock)
    assert snapshot_of(store) == truth
    assert store.group_values["g0"] == value
    # Unclean: more durable commits, then the process "dies" (no clean-shutdown marker).
    await store.durable(store.commit("g2", {("t9", 0): CommittedOffset(999, -1, "", clock())}, clock()))
    truth.setdefault("g2", {})[("t9", 0)] = (999, "")
    mgr.close_without_marker()
    mgr, store = open_store(tmp_path, clock)
    assert snapshot_of(store) == truth
    mgr.shutdown()


async def test_snapshots_bound_the_log_and_retention_removes_old_segments(tmp_path):
    clock = Clock()
    mgr, store = open_store(tmp_path, clock, snapshot_min=100, segment_bytes=2048)
    truth = {}
    log_dir = os.path.join(str(tmp_path), f"{OFFSETS_TOPIC}-0")
    max_records = max_segments = 0
    for i in range(1000):
        group = f"g{i % 9}"
        tp = ("t", i % 7)
        await store.durable(store.commit(group, {tp: CommittedOffset(i, -1, "", clock())}, clock()))
        truth.setdefault(group, {})[tp] = (i, "")
        await store.maybe_snapshot(clock())
        if i % 100 == 0:
            mgr.run_retention(clock(), None)
            mgr.delete_expired_files(clock() + 10**9)
        max_records = max(max_records, store.log.record_count())
        max_segments = max(max_segments, sum(1 for n in os.listdir(log_dir) if n.endswith(".log")))
    assert store.snapshots >= 10
    assert max_records <= max(100, 2 * store.live_records()) + store.live_records() + 1
    # One commit is one ~130-byte batch: without snapshots 1,000 commits fill ~65 segments of
    # 2 KiB; with them the log never holds more than ~3 x 63 live records (~20 segments).
    assert max_segments <= 25, max_segments
    assert snapshot_of(store) == truth
    mgr.shutdown()
    mgr, store = open_store(tmp_path, clock, snapshot_min=100, segment_bytes=2048)
    assert snapshot_of(store) == truth
    mgr.shutdown()


async def test_consumer_group_records_survive_snapshots_and_retention(tmp_path):
    """The KIP-848 records (types 3-8, 16) are rewritten by every snapshot: after the log was
    trimmed many times over, a reload replays exactly the live ones (latest value per key)."""
    clock = Clock()
    mgr, store = open_store(tmp_path, clock, snapshot_min=100, segment_bytes=2048)
    topic_id = uuid.UUID(int=7)
    truth: dict[bytes, bytes] = {}
    for i in range(600):
        group = f"cg{i % 5}"
        if i % 3 == 0:
            record = CoordinatorRecord(ConsumerGroupMetadataKey(group), ConsumerGroupMetadataValue(i))
        elif i % 11 == 0:   # a tombstone for one member's target
            record = CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group, f"m{i % 4}"), None)
        else:
            record = CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group, f"m{i % 4}"),
                                       ConsumerGroupTargetAssignmentMemberValue({topic_id: frozenset({i % 6})}))
        key, value = encode_record(record)
        await store.durable(store.append_coordinator_records([(key, value)], clock()))
        if value is None:
            truth.pop(key, None)
        else:
            truth[key] = value
        # classic commits too, so that snapshots are due
        await store.durable(store.commit("classic", {("t", i % 3): CommittedOffset(i, -1, "", clock())}, clock()))
        await store.maybe_snapshot(clock())
        if i % 100 == 0:
            mgr.run_retention(clock(), None)
            mgr.delete_expired_files(clock() + 10**9)
    assert store.snapshots >= 5
    assert store.coordinator_records == truth
    mgr.shutdown()

    clock2 = Clock()
    config = BrokerConfig({"offsets.topic.segment.bytes": "2048"})
    mgr = LogManager([str(tmp_path)], config.explicit, now_ms=clock2)
    mgr.startup()
    replayed: list = []
    store = OffsetStore(PartitionOffsetsLog.open(mgr, config, now_ms=clock2), replay_modern=replayed.append)
    store.load()
    assert store.coordinator_records == truth
    latest: dict = {}
    for record in replayed:     # the replayed sequence ends in exactly the live state
        latest[record.key] = record.value
    assert {k: v for k, v in latest.items() if v is not None} == \
        {decode_record(k, v).key: decode_record(k, v).value for k, v in truth.items()}
    mgr.shutdown()
