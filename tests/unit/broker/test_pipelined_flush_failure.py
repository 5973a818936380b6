"""An fsync that fails while pipelined acks=all requests wait answers every one of them
KAFKA_STORAGE_ERROR, in request order, and loses nothing acknowledged before.

The broker runs in process (real BrokerServer, storage in a temporary directory, real
sockets on loopback) so the failure can be injected: either as the ``run_job`` of the
Python fsync threads handed to the server (``BrokerServer(flush_threads=...)``) or, on
the replica manager's own fsync threads (native where built), as a pipe among the job's
descriptors, which fdatasync refuses. Ground truth is what the test sent and read back.
"""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import threading
import time

import pytest

from sundial.broker.flusher import FlushThreads
from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey
from sundial.storage import log as storage_log
from sundial.records.builder import SimpleRecord, build_records

PRODUCE_VERSION = 7
FETCH_VERSION = 4
KAFKA_STORAGE_ERROR = 56
REQUEST_TIMED_OUT = 7


def produce(corr: int, topic: str, value: bytes, timeout_ms: int = 30_000) -> bytes:
    batch = build_records(2, [SimpleRecord(int(time.time() * 1000), None, value)]).buffer
    return encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, corr, "t", {
        "transactional_id": None, "acks": -1, "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    return head + await reader.readexactly(struct.unpack(">i", head)[0])


async def produce_answers(reader, count: int) -> list[tuple[int, int, int]]:
    """(correlation id, error code, base offset) of the next ``count`` Produce answers."""
    out = []
    for _ in range(count):
        corr, body = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, await asyncio.wait_for(read_frame(reader), 60))
        part = body.responses[0].partition_responses[0]
        out.append((corr, part.error_code, part.base_offset))
    return out


class InjectedDisk:
    """The ``run_job`` of fsync threads handed to the server: syncs for real, unless told to
    fail every flush (``failing``) or to hold each one until ``gate`` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.gate: threading.Event | None = None

    def run(self, job) -> None:
        if self.gate is not None:
            self.gate.wait(120)  # the disk "hangs" until the test has its answers
        if self.failing:
            job.discard()
            raise storage_log.KafkaStorageError.from_os_error(OSError(errno.EIO, "injected"), "flush failed")
        job.run()


def fail_every_fsync(monkeypatch, how: str, disk: InjectedDisk):
    """Make every flush fail from now on; returns the undo."""
    if how == "run_job":
        disk.failing = True

        def undo() -> None:
            disk.failing = False

        return undo
    real_prepare = storage_log.PartitionLog.prepare_flush

    def prepare_with_pipe(self, up_to_offset=None):
        job = real_prepare(self, up_to_offset)
        if job is not None:
            r, w = os.pipe()
            os.close(w)
            job.fds.append(r)
        return job

    monkeypatch.setattr(storage_log.PartitionLog, "prepare_flush", prepare_with_pipe)
    return lambda: monkeypatch.setattr(storage_log.PartitionLog, "prepare_flush", real_prepare)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["run_job", "bad_descriptor"])
async def test_failed_fsync_answers_every_waiting_request_in_order(tmp_path, monkeypatch, how):
    from sundial.broker.server import BrokerServer
    from sundial.broker.topics import create_topic
    from sundial.config import BrokerConfig

    disk = InjectedDisk()
    server = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                                        "group.initial.rebalance.delay.ms": "0"}),
                          flush_threads=FlushThreads(4, run_job=disk.run) if how == "run_job" else None)
    await server.start()
    try:
        create_topic(server.broker, "dur", 1, -1, {})
        port = server.bound_ports[server.config.listeners[0].name]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        # Acknowledged before the fault.
        writer.write(b"".join(produce(i, "dur", b"ok%d" % i) for i in range(5)))
        assert await produce_answers(reader, 5) == [(i, 0, i) for i in range(5)]

        # Every fsync fails from now on; 30 requests are in flight at once.
        undo = fail_every_fsync(monkeypatch, how, disk)
        writer.write(b"".join(produce(100 + i, "dur", b"bad%d" % i) for i in range(30)))
        answers = await produce_answers(reader, 30)
        assert [a[0] for a in answers] == [100 + i for i in range(30)], "answers must stay in request order"
        assert [a[1] for a in answers] == [KAFKA_STORAGE_ERROR] * 30

        # The disk recovers: new requests are acknowledged again, and the five acknowledged
        # before the fault are still the first records of the log.
        undo()
        writer.write(produce(200, "dur", b"after"))
        [(corr, code, offset)] = await produce_answers(reader, 1)
        assert (corr, code) == (200, 0) and offset >= 5
        log = server.broker.logs.get_log("dur", 0)
        assert log.recovery_point > offset
        writer.write(encode_request(ApiKey.FETCH, FETCH_VERSION, 300, "t", {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": "dur", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                         "partition_max_bytes": 1 << 20}]}]}))
        _, body = decode_response(ApiKey.FETCH, FETCH_VERSION, await asyncio.wait_for(read_frame(reader), 60))
        from sundial.records import iter_records

        values = [r.value for r in iter_records(body.responses[0].partitions[0].records)]
        assert values[:5] == [b"ok%d" % i for i in range(5)]
        writer.close()
    finally:
        await server.shutdown()


@pytest.mark.asyncio
async def test_fsync_slower_than_timeout_answers_request_timed_out(tmp_path, monkeypatch):
    """acks=all waits at most the request's timeout_ms for its fsync: past it the answer is
    REQUEST_TIMED_OUT (the data stays appended), in order, and the connection goes on."""
    from sundial.broker.server import BrokerServer
    from sundial.broker.topics import create_topic
    from sundial.config import BrokerConfig
    disk = InjectedDisk()
    server = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                                        "group.initial.rebalance.delay.ms": "0"}),
                          flush_threads=FlushThreads(4, run_job=disk.run))
    await server.start()
    gate = threading.Event()
    try:
        create_topic(server.broker, "slow", 1, -1, {})
        port = server.bound_ports[server.config.listeners[0].name]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        disk.gate = gate
        writer.write(b"".join(produce(10 + i, "slow", b"v%d" % i, timeout_ms=200) for i in range(3)))
        answers = await produce_answers(reader, 3)
        assert [(a[0], a[1]) for a in answers] == [(10 + i, REQUEST_TIMED_OUT) for i in range(3)]
        gate.set()
        writer.write(produce(20, "slow", b"after"))
        [(corr, code, offset)] = await produce_answers(reader, 1)
        assert (corr, code, offset) == (20, 0, 3)  # the timed-out records were appended
        assert server.broker.logs.get_log("slow", 0).recovery_point > offset
        writer.close()
    finally:
        gate.set()
        await server.shutdown()
