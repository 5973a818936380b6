"""ReplicaManager.write_txn_markers: the coordinator's single-node WriteTxnMarkers over real logs.

Checks: one COMMIT/ABORT control batch per partition (Kafka's bytes, read back from the
log), per-partition error codes (unknown partition, older producer epoch, older
coordinator epoch), the call returns only once every written marker is fsynced (below
the recovery point), parked fetches are woken, and the LSO moves.
"""

from __future__ import annotations

import time

import pytest
from support.unit_helpers import LogsByPartition, RecordingPurgatory

from sundial.broker.replica_manager import ReplicaManager
from sundial.config import BrokerConfig
from sundial.config.topic import TopicConfig
from sundial.protocol.errors import ErrorCode
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.control import EndTxnMarker, read_end_txn_marker
from sundial.records.framing import iter_batches
from sundial.storage.log import PartitionLog


def replica_manager(logs) -> ReplicaManager:
    """A ReplicaManager over real logs; write_txn_markers reads logs, the purgatory and the clock."""
    return ReplicaManager(BrokerConfig({}), LogsByPartition(logs), purgatory=RecordingPurgatory(), metrics=None,
                          now_ms=lambda: int(time.time() * 1000))


@pytest.fixture
def logs(tmp_path):
    out = {("a", p): PartitionLog.create(str(tmp_path / f"a-{p}"), TopicConfig(), topic="a", partition=p)
           for p in range(2)}
    yield out
    for log in out.values():
        log.close()


def txn_batch(pid, epoch=0, seq=0):
    now = int(time.time() * 1000)
    return build_records(2, [SimpleRecord(now, b"k", b"v")] * 2, producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq, is_transactional=True).buffer


@pytest.mark.asyncio
async def test_markers_written_durably_with_per_partition_errors(logs):
    rm = replica_manager(logs)
    now = int(time.time() * 1000)
    for log in logs.values():
        log.append(txn_batch(9, epoch=2), now_ms=now)
        assert log.last_stable_offset == 0
    codes = await rm.write_txn_markers(producer_id=9, producer_epoch=2, coordinator_epoch=5, commit=False,
                                       partitions=[("a", 0), ("a", 1), ("b", 0)], timestamp_ms=now + 1)
    assert codes == {("a", 0): ErrorCode.NONE, ("a", 1): ErrorCode.NONE,
                     ("b", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    for log in logs.values():
        assert log.recovery_point > 2                      # the marker at offset 2 is fsynced
        assert log.last_stable_offset == log.high_watermark == 3
        data = log.read(0, 1 << 20).slices[0].read()
        views = list(iter_batches(data))
        assert [v.is_control for v in views] == [False, True]
        assert read_end_txn_marker(views[1]) == EndTxnMarker(0, 5)
        assert (views[1].producer_id, views[1].producer_epoch, views[1].max_timestamp) == (9, 2, now + 1)
        assert log.collect_aborted_transactions(0, 3) == [(9, 0)]
    assert rm.purgatory.woken == [("a", 0), ("a", 1)]
    # older producer epoch, then older coordinator epoch
    codes = await rm.write_txn_markers(producer_id=9, producer_epoch=1, coordinator_epoch=5, commit=True,
                                       partitions=[("a", 0)])
    assert codes == {("a", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    codes = await rm.write_txn_markers(producer_id=9, producer_epoch=2, coordinator_epoch=4, commit=True,
                                       partitions=[("a", 0)])
    assert codes == {("a", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    # a marker for a producer without an open transaction is still written
    codes = await rm.write_txn_markers(producer_id=77, producer_epoch=0, coordinator_epoch=0, commit=True,
                                       partitions=[("a", 1)])
    assert codes == {("a", 1): ErrorCode.NONE} and logs[("a", 1)].log_end_offset == 4
