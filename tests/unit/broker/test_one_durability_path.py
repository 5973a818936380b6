"""One durability path per log: the coordinators' internal topics wait for their writes through
the same flusher as the ReplicaManager's Produce and transaction markers, when the broker hands
them its :class:`~broker.flusher.PartitionFlushers`."""

from __future__ import annotations

import asyncio

from sundial.broker.flusher import FlushThreads, PartitionFlushers
from sundial.broker.groups.offsets import OFFSETS_TOPIC, PartitionOffsetsLog
from sundial.broker.replica_manager import ReplicaManager
from sundial.broker.share.state_records import SHARE_STATE_TOPIC
from sundial.broker.share.state_store import ShareStateStore
from sundial.config import BrokerConfig
from sundial.storage import LogManager


class _Purgatory:
    def notify(self, topic, partition):
        pass


def test_offsets_writes_and_markers_share_one_flusher(tmp_path):
    clock = [1_700_000_000_000]

    def now_ms():
        clock[0] += 1
        return clock[0]

    config = BrokerConfig({})
    logs = LogManager([str(tmp_path)], config.explicit, now_ms=now_ms)
    logs.startup()
    jobs = []

    def run_job(job):
        jobs.append(job.target_offset)
        job.run()

    flushers = PartitionFlushers(FlushThreads(2, run_job=run_job))
    offsets = PartitionOffsetsLog.open(logs, config, now_ms=now_ms, flushers=flushers)
    share = ShareStateStore.open(logs, config, now_ms=now_ms, flushers=flushers)
    rm = ReplicaManager(config, logs, purgatory=_Purgatory(), metrics=None, now_ms=now_ms, flushers=flushers)
    log = logs.get_log(OFFSETS_TOPIC, 0)

    async def scenario():
        last = offsets.append([(b"key", b"value")], now_ms())
        await offsets.wait_durable(last)
        assert log.recovery_point > last
        flusher = flushers.flusher(OFFSETS_TOPIC, 0, log)
        assert flusher.flushes == 1
        errors = await rm.write_txn_markers(producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=True,
                                            partitions=[(OFFSETS_TOPIC, 0)])
        assert errors == {(OFFSETS_TOPIC, 0): 0}
        assert log.recovery_point == log.log_end_offset == last + 2
        assert flushers.flusher(OFFSETS_TOPIC, 0, log) is flusher and flusher.flushes == 2
        share_log = logs.get_log(SHARE_STATE_TOPIC, 0)
        last = share.log.append([(b"share-key", b"value")], now_ms())
        await share.log.wait_durable(last)
        assert share_log.recovery_point > last and flushers.flusher(SHARE_STATE_TOPIC, 0, share_log).flushes == 1

    asyncio.run(scenario())
    assert len(jobs) == 3
    logs.shutdown()


def test_without_shared_flushers_each_store_keeps_its_own(tmp_path):
    """The old wiring still works (the default): the offsets log waits through flushers of its own."""
    config = BrokerConfig({})
    logs = LogManager([str(tmp_path)], config.explicit, now_ms=lambda: 1_700_000_000_000)
    logs.startup()
    offsets = PartitionOffsetsLog.open(logs, config, now_ms=lambda: 1_700_000_000_000)

    async def scenario():
        last = offsets.append([(b"key", b"value")], 1_700_000_000_000)
        await offsets.wait_durable(last)
        assert logs.get_log(OFFSETS_TOPIC, 0).recovery_point > last

    asyncio.run(scenario())
    logs.shutdown()


def test_markers_to_an_internal_topic_never_leave_an_append_in_flight_for_its_store(tmp_path):
    """The coordinators append to their internal topics on the loop; a transaction marker written
    there must not hold the log with a write in flight (the offsets store's next append would be
    refused). Every write of the append writers is held at a gate here: the marker to
    ``__consumer_offsets`` still ends at once, and the store appends right after it."""
    import threading

    from sundial.broker.appender import AppendWriters

    clock = [1_700_000_000_000]

    def now_ms():
        clock[0] += 1
        return clock[0]

    gate = threading.Event()

    def held_write(fd, position, chunks):
        gate.wait(60)
        raise OSError(5, "the held writers must not be used for internal topics")

    config = BrokerConfig({})
    logs = LogManager([str(tmp_path)], config.explicit, now_ms=now_ms)
    logs.startup()
    flushers = PartitionFlushers(FlushThreads(2))
    offsets = PartitionOffsetsLog.open(logs, config, now_ms=now_ms, flushers=flushers)
    writers = AppendWriters(1, write=held_write)
    rm = ReplicaManager(config, logs, purgatory=_Purgatory(), metrics=None, now_ms=now_ms, flushers=flushers,
                        append_writers=writers)
    log = logs.get_log(OFFSETS_TOPIC, 0)

    async def scenario():
        marker = asyncio.ensure_future(rm.write_txn_markers(
            producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=True, partitions=[(OFFSETS_TOPIC, 0)]))
        await asyncio.sleep(0)                     # the marker begins; nothing of it may be in flight now
        assert not log.append_in_flight
        last = offsets.append([(b"key", b"value")], now_ms())
        assert await marker == {(OFFSETS_TOPIC, 0): 0}
        await offsets.wait_durable(last)
        assert log.log_end_offset == last + 1 == 2

    try:
        asyncio.run(scenario())
    finally:
        gate.set()
        writers.close()
        logs.shutdown()
