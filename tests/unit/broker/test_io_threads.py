"""``num.io.threads`` sizes the threads that write Produce appends into their segments: with a
disk that holds every write at a gate, appends to more partitions than there are threads write
at most ``num.io.threads`` at once, and exactly that many once enough are queued; every append
ends once the gate opens. (The fsync threads take the same size, ``PartitionFlushers(thread_count=)``:
tests/unit/broker/test_flusher.py.)"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sundial.broker.metrics import BrokerMetrics
from sundial.broker.replica_manager import ReplicaManager
from sundial.config import BrokerConfig
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage import disk
from sundial.storage.log_manager import LogManager

UNBOUNDED = {"message.timestamp.after.max.ms": "9223372036854775807"}


class CountingDisk(disk.Disk):
    """Every append write waits at ``gate``; counts the writes waiting at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.waiting = 0
        self.most_waiting = 0

    def is_slow(self, op: str) -> bool:
        return op == "write"

    def pause(self, op: str) -> None:
        if op != "write":
            return
        with self.lock:
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            assert self.gate.wait(60)
        finally:
            with self.lock:
                self.waiting -= 1


class _Purgatory:
    def notify(self, topic, partition):
        pass


@pytest.mark.parametrize("io_threads", [1, 3])
def test_num_io_threads_bounds_the_append_writes_in_flight(tmp_path, io_threads):
    held = CountingDisk()
    previous = disk.install(held)
    partitions = io_threads + 3
    logs = LogManager([str(tmp_path)], {})
    logs.startup()
    rm = ReplicaManager(BrokerConfig({"num.io.threads": str(io_threads)}), logs, purgatory=_Purgatory(),
                        metrics=BrokerMetrics(), now_ms=lambda: int(time.time() * 1000))
    try:
        logs.create_topic("t", partitions, UNBOUNDED)
        now = int(time.time() * 1000)

        async def main():
            try:
                futures = [rm.append("t", p, build_records(2, [SimpleRecord(now, b"k", b"v")]).buffer, now)
                           for p in range(partitions)]
                deadline = time.monotonic() + 60
                while held.waiting < io_threads:          # the pool fills up ...
                    assert time.monotonic() < deadline, f"only {held.waiting} writes started"
                    await asyncio.sleep(0.01)
                assert held.most_waiting == io_threads    # ... and no further
                held.gate.set()
                outcomes = await asyncio.wait_for(asyncio.gather(*futures), 60)
                assert [o.error_code for o in outcomes] == [0] * partitions
            finally:
                held.gate.set()
                await rm.close()

        asyncio.run(main())
        assert held.most_waiting == io_threads
        assert [logs.get_log("t", p).log_end_offset for p in range(partitions)] == [1] * partitions
    finally:
        held.gate.set()
        logs.shutdown()
        disk.install(previous)
