"""AlterReplicaLogDirs' handler and the broker's mover, on a real LogManager with two log dirs.

Answers go through the wire codec (v1 and v2, encoded by Sundial, decoded with kafka-python's
classes). The oracle for a move is the file system: the partition's live directory, read by the
test, and the bytes of the log before and after.
"""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace

import pytest

from sundial.broker.authorizer import CLUSTER_NAME, AclRule, AclStore, Authorizer, ResourceType
from sundial.broker.handlers.alter_replica_log_dirs import handle_alter_replica_log_dirs
from sundial.broker.log_mover import LogMover
from sundial.protocol.api_keys import ApiKey
from sundial.records.builder import SimpleRecord, build_records
from sundial.protocol.errors import ErrorCode
from sundial.protocol.schema_codec import SCHEMA_CLASSES, build_message, decode_response_body, \
    encode_response_body
from sundial.storage import files
from sundial.storage.log_manager import LogManager

ARLD = ApiKey.ALTER_REPLICA_LOG_DIRS
NOW_MS = 1_700_000_000_000


def batch(timestamps, value_size: int = 10) -> bytes:
    return build_records(2, [SimpleRecord(ts, None, b"v" * value_size) for ts in timestamps]).buffer


class Replicas:
    """What the mover uses of the ReplicaManager: the logs, opening, checkpoints, and whether
    appends are in flight (none here: the test appends on the log itself)."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        self.checkpoints = 0

    def open_logs(self, partitions):
        for tp in partitions:
            self.logs.get_log(*tp)
        return None

    async def write_checkpoints(self, **which) -> None:
        self.checkpoints += 1
        self.logs.checkpoint()

    def appends_idle(self, topic: str, partition: int) -> bool:
        return True

    async def wait_appends(self, topic: str, partition: int) -> None:
        return None


@pytest.fixture
def mgr(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    logs = LogManager(dirs, {"log.segment.delete.delay.ms": 0, "log.segment.bytes": 4096,
                             "message.timestamp.after.max.ms": "9223372036854775807"})
    logs.startup()
    logs.create_topic("orders", 2)
    yield logs
    logs.shutdown()


def make_ctx(logs, mover, authorizer=None, version=2):
    broker = SimpleNamespace(logs=logs, authorizer=authorizer, node_id=1,
                             replica_manager=SimpleNamespace(log_mover=mover))
    return SimpleNamespace(broker=broker, principal="User:alice", client_host="127.0.0.1", api_version=version,
                           client_id="test")


def request(version, dirs: dict[str, dict[str, list[int]]]):
    value = {"dirs": [{"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                      for path, topics in dirs.items()]}
    return build_message(SCHEMA_CLASSES[ARLD][0], version, value)


async def alter(ctx, version, dirs) -> dict[tuple[str, int], int]:
    resp = await handle_alter_replica_log_dirs(ctx, request(version, dirs))
    wire = decode_response_body(ARLD, version, encode_response_body(ARLD, version, resp))
    codes = {}
    for t in wire.results:
        for p in t.partitions:
            assert (t.topic_name, p.partition_index) not in codes   # each partition once
            codes[(t.topic_name, p.partition_index)] = p.error_code
    return codes


def where(logs, topic, partition) -> list[str]:
    name = files.partition_dir_name(topic, partition)
    return [d for d in logs.log_dirs if os.path.isdir(os.path.join(d, name))]


async def until(condition, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def content(logs, topic, partition) -> bytes:
    log = logs.get_log(topic, partition)
    return b"".join(bytes(data) for _v, data in log.batches_from(log.log_start_offset, 1 << 20))


@pytest.mark.parametrize("version", [1, 2])
def test_errors_and_a_move_through_the_handler(mgr, version):
    async def scenario():
        mover = LogMover(Replicas(mgr), lambda: NOW_MS)
        ctx = make_ctx(mgr, mover, version=version)
        log = mgr.get_log("orders", 0)
        for i in range(60):
            log.append(batch([NOW_MS + i] * 3, value_size=80), now_ms=NOW_MS)
        before = content(mgr, "orders", 0)
        (source,) = where(mgr, "orders", 0)
        target = next(d for d in mgr.log_dirs if d != source)
        codes = await alter(ctx, version, {
            "/not/a/log/dir": {"orders": [1]},
            source + "/": {"audit": [0]},
            target: {"orders": [0, 5], "missing": [0]},
        })
        assert codes == {("orders", 1): ErrorCode.LOG_DIR_NOT_FOUND,
                         ("audit", 0): ErrorCode.LOG_DIR_NOT_FOUND,          # the path is compared exactly
                         ("orders", 0): ErrorCode.NONE,
                         ("orders", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        await until(lambda: where(mgr, "orders", 0) == [target] and mover.moves_completed == 1, "the move")
        assert content(mgr, "orders", 0) == before
        assert not [n for d in mgr.log_dirs for n in os.listdir(d) if n.endswith("-future")]
        # listed under two directories: the last one wins, and the partition is answered once
        (p1_dir,) = where(mgr, "orders", 1)
        other = next(d for d in mgr.log_dirs if d != p1_dir)
        codes = await alter(ctx, version, {other: {"orders": [1]}, p1_dir: {"orders": [1]}})
        assert codes == {("orders", 1): ErrorCode.NONE}
        assert where(mgr, "orders", 1) == [p1_dir]
        await mover.close()

    asyncio.run(scenario())


def test_needs_alter_on_the_cluster(mgr, tmp_path):
    async def scenario():
        mover = LogMover(Replicas(mgr), lambda: NOW_MS)
        store = AclStore(str(tmp_path / "acls.json"))
        store.add([AclRule.make("User:alice", ResourceType.CLUSTER, CLUSTER_NAME, "DESCRIBE", "ALLOW", "*",
                                "LITERAL")])
        ctx = make_ctx(mgr, mover, authorizer=Authorizer(store))
        (source,) = where(mgr, "orders", 0)
        target = next(d for d in mgr.log_dirs if d != source)
        codes = await alter(ctx, 2, {target: {"orders": [0], "missing": [3]}})
        assert codes == {("orders", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                         ("missing", 3): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        assert where(mgr, "orders", 0) == [source]
        store.add([AclRule.make("User:alice", ResourceType.CLUSTER, CLUSTER_NAME, "ALTER", "ALLOW", "*",
                                "LITERAL")])
        codes = await alter(ctx, 2, {target: {"orders": [0]}})
        assert codes == {("orders", 0): ErrorCode.NONE}
        await until(lambda: where(mgr, "orders", 0) == [target], "the move")
        await mover.close()

    asyncio.run(scenario())


def test_a_move_stopped_by_the_broker_stopping_leaves_no_future(mgr):
    async def scenario():
        from sundial.storage import disk
        previous = disk.install(disk.SlowDisk({"move": 600}))
        try:
            mover = LogMover(Replicas(mgr), lambda: NOW_MS)
            ctx = make_ctx(mgr, mover)
            mgr.create_topic("big", 1, {"segment.bytes": 1 << 22})
            log = mgr.get_log("big", 0)
            for i in range(200):
                log.append(batch([NOW_MS + i], value_size=1500), now_ms=NOW_MS)
            (source,) = where(mgr, "big", 0)
            target = next(d for d in mgr.log_dirs if d != source)
            assert await alter(ctx, 2, {target: {"big": [0]}}) == {("big", 0): 0}
            await until(lambda: any(n.endswith("-future") for n in os.listdir(target)), "the future on disk")
            await mover.close()
        finally:
            disk.install(previous)
        assert where(mgr, "big", 0) == [source]
        assert not [n for n in os.listdir(target) if n.endswith("-future")]

    asyncio.run(scenario())
