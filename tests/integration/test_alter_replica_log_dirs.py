"""AlterReplicaLogDirs against the real daemon with two ``log.dirs``, driven by real clients.

* A partition moves from one directory to the other under continuous acks=all produce load
  (confluent-kafka, idempotent) while a kafka-python consumer reads it: kafka-python's admin
  ``alter_replica_log_dirs`` answers NoError, ``describe_log_dirs`` shows the future replica
  (``is_future_key``) in the target directory during the copy, then the partition only there;
  on disk the partition's live directory is in the target only; the consumer, and a fresh one
  reading from the start, get every acknowledged record (the set the delivery reports built).
* A kill -9 in the middle of a move (the test sees the ``-future`` directory on disk, with the
  current one still live, then kills), under the same load: after the restart the partition is
  in exactly one directory, no ``-future`` is left, and every acknowledged record is read back.
* Errors as Kafka answers them: LOG_DIR_NOT_FOUND for a path that is not a configured log dir,
  UNKNOWN_TOPIC_OR_PARTITION for a partition the broker does not have; ApiVersions advertises
  the API (v1-v2); v1 sent as raw bytes through the project's codec.
* ``sundial log-dirs --execute --reassignment-json-file`` with kafka-reassign-partitions.sh's JSON
  moves the partition; a bad directory is reported with Kafka's error name and exit 1, a replica
  on another broker is refused.

The move is made slow enough to be seen and interrupted with the test-only environment variable
``SUNDIAL_TEST_SLOW_DISK=move:<ms>`` (storage/disk.py): each copy step of a move waits that long.
confluent-kafka 2.16's AdminClient has no alter_replica_log_dirs; kafka-python 3's admin sends it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient, TopicPartition, TopicPartitionReplica
from kafka import errors as kerrors
from kafka.admin import NewTopic

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .clients import connect_raw, consumer, read_frame
from .conftest import DAEMONS_UNAVAILABLE, SundialProcess

pytestmark = pytest.mark.skipif(bool(DAEMONS_UNAVAILABLE), reason=str(DAEMONS_UNAVAILABLE))


def start_node(base, slow_move_ms: int) -> SundialProcess:
    dirs = [str(base / "d1"), str(base / "d2")]
    proc = SundialProcess(base, {"log.dirs": ",".join(dirs), "group.initial.rebalance.delay.ms": "0"})
    proc.log_dirs = dirs
    proc.env["SUNDIAL_TEST_SLOW_DISK"] = f"move:{slow_move_ms}"
    proc.start()
    return proc


def live_dirs(node, topic: str, partition: int = 0) -> list[str]:
    """Brute force from the file system: the log dirs holding ``<topic>-<p>`` itself."""
    name = f"{topic}-{partition}"
    return [d for d in node.log_dirs if os.path.isdir(os.path.join(d, name))]


def future_dirs(node, topic: str, partition: int = 0) -> list[str]:
    prefix = f"{topic}-{partition}."
    return [os.path.join(d, n) for d in node.log_dirs for n in os.listdir(d)
            if n.startswith(prefix) and n.endswith("-future")]


class Load:
    """acks=all produce load from a thread: unique values, the acknowledged ones collected from
    the delivery reports."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 20000, "retry.backoff.ms": 100})
        self.acked: set[bytes] = set()
        self.failed = 0
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.failed += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(100):
                try:
                    self.producer.produce(self.topic, value=f"v-{self.sent:09d}".encode() + b"." * 90,
                                          partition=0, on_delivery=self._report)
                    self.sent += 1
                except BufferError:
                    break
            self.producer.poll(0.01)   # serves delivery reports; paces the load

    def start(self) -> "Load":
        self._thread.start()
        return self

    def stop(self, flush_timeout_s: float = 30.0) -> set[bytes]:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(flush_timeout_s)
        return set(self.acked)


def preload(bootstrap: str, topic: str, megabytes: int) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 262144})
    chunk = os.urandom(1000)
    count = megabytes * 1000
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=b"pre-%08d" % i + chunk, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    return count


def read_all(bootstrap: str, topic: str, wanted: set[bytes], timeout_s: float = 90.0) -> set[bytes]:
    """Every value of partition 0 from the beginning until ``wanted`` are all seen (or the deadline)."""
    c = consumer(bootstrap, fetch_max_bytes=4 * 1024 * 1024, max_partition_fetch_bytes=4 * 1024 * 1024)
    seen: set[bytes] = set()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout_s
        expected_next = None
        while not wanted <= seen and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                for r in records:
                    if expected_next is not None:
                        assert r.offset == expected_next, "a gap in the offsets read"
                    expected_next = r.offset + 1
                    seen.add(r.value)
        return seen
    finally:
        c.close()


def admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def create(bootstrap: str, topic: str) -> None:
    a = admin(bootstrap)
    try:
        a.create_topics([NewTopic(topic, 1, 1)])
    finally:
        a.close()


def describe(a: KafkaAdminClient, topic: str) -> dict[str, list[dict]]:
    """{log dir: [partition entries of ``topic``]} from kafka-python's describe_log_dirs."""
    (broker,) = a.describe_log_dirs()
    out = {}
    for d in broker["log_dirs"]:
        assert d["error_code"] == 0
        out[d["log_dir"]] = [p for t in d["topics"] if t["name"] == topic for p in t["partitions"]]
    return out


def node_id(a: KafkaAdminClient) -> int:
    return a.describe_log_dirs()[0]["broker"]


def test_move_under_produce_load_loses_nothing(tmp_path):
    node = start_node(tmp_path / "node", slow_move_ms=150)
    try:
        topic = f"move-{uuid.uuid4().hex[:8]}"
        create(node.bootstrap, topic)
        (source,) = live_dirs(node, topic)
        target = next(d for d in node.log_dirs if d != source)
        preload(node.bootstrap, topic, 8)

        consumed: set[bytes] = set()
        stop_consumer = threading.Event()
        consumer_errors: list[BaseException] = []

        def consume() -> None:
            try:
                c = consumer(node.bootstrap)
                tp = TopicPartition(topic, 0)
                c.assign([tp])
                c.seek_to_beginning(tp)
                while not stop_consumer.is_set():
                    for records in c.poll(timeout_ms=200).values():
                        consumed.update(r.value for r in records)
                c.close()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                consumer_errors.append(exc)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        load = Load(node.bootstrap, topic).start()
        wait_for(lambda: len(load.acked) > 500, 60, "acknowledged records before the move")

        a = admin(node.bootstrap)
        try:
            answer = a.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, node_id(a)): target})
            assert answer == {TopicPartitionReplica(topic, 0, node_id(a)): kerrors.NoError}
            during = wait_for(lambda: (lambda v: v if any(p["is_future_key"] for p in v[target]) else None)(
                describe(a, topic)), 60, "the future replica in DescribeLogDirs", interval_s=0.01)
            (current,) = during[source]
            (future,) = [p for p in during[target] if p["is_future_key"]]
            assert current["is_future_key"] is False and current["offset_lag"] == 0
            assert future["offset_lag"] >= 0 and future["partition_index"] == 0
            assert future_dirs(node, topic) and live_dirs(node, topic) == [source]
            acked_at_move = len(load.acked)
            wait_for(lambda: (lambda v: not v[source] and [p["is_future_key"] for p in v[target]] == [False])(
                describe(a, topic)), 60, "the move to end")
        finally:
            a.close()
        assert live_dirs(node, topic) == [target] and future_dirs(node, topic) == []
        # produce goes on in the new directory
        wait_for(lambda: len(load.acked) > acked_at_move + 500, 60, "acknowledged records after the move")
        acked = load.stop()
        assert load.failed == 0
        wait_for(lambda: acked <= consumed, 60, "the running consumer to read every acknowledged record")
        stop_consumer.set()
        reader.join(30)
        assert not consumer_errors
        assert acked <= read_all(node.bootstrap, topic, acked)
        assert any(e.get("event") == "log_move_completed" for e in node.log_lines())
    finally:
        assert node.stop() == 0, node.log_text()[-3000:]


def test_kill_mid_move_leaves_one_directory_and_every_acked_record(tmp_path):
    node = start_node(tmp_path / "node", slow_move_ms=400)
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    try:
        create(node.bootstrap, topic)
        (source,) = live_dirs(node, topic)
        target = next(d for d in node.log_dirs if d != source)
        preload(node.bootstrap, topic, 6)
        load = Load(node.bootstrap, topic).start()
        wait_for(lambda: len(load.acked) > 500, 60, "acknowledged records before the move")
        a = admin(node.bootstrap)
        try:
            broker_id = node_id(a)
            answer = a.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, broker_id): target})
            assert answer[TopicPartitionReplica(topic, 0, broker_id)] is kerrors.NoError
        finally:
            a.close()
        wait_for(lambda: future_dirs(node, topic), 60, "the -future directory on disk", interval_s=0.01)
        assert live_dirs(node, topic) == [source]   # mid-move: the current copy still serves
        node.kill()
        acked = load.stop(flush_timeout_s=25)
        assert acked
        node.restart()
        assert len(live_dirs(node, topic)) == 1
        assert future_dirs(node, topic) == []
        assert acked <= read_all(node.bootstrap, topic, acked)
        events = [e.get("event") for e in node.log_lines()]
        assert "log_move_abandoned" in events
        # a move asked again after the restart completes
        a = admin(node.bootstrap)
        try:
            (where,) = live_dirs(node, topic)
            other = next(d for d in node.log_dirs if d != where)
            answer = a.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, node_id(a)): other})
            assert set(answer.values()) == {kerrors.NoError}
            wait_for(lambda: live_dirs(node, topic) == [other] and not future_dirs(node, topic), 60, "the move to end")
        finally:
            a.close()
        assert acked <= read_all(node.bootstrap, topic, acked)
    finally:
        if node.running:
            assert node.stop() == 0, node.log_text()[-3000:]


def raw(node, api_key: int, version: int, body: dict):
    host, port = node.bootstrap.rsplit(":", 1)
    s = connect_raw(host, int(port))
    try:
        s.sendall(encode_request(api_key, version, 7, "raw", body))
        correlation_id, answer = decode_response(api_key, version, read_frame(s))
    finally:
        s.close()
    assert correlation_id == 7
    return answer


def test_errors_and_api_versions(tmp_path):
    node = start_node(tmp_path / "node", slow_move_ms=0)
    try:
        topic = f"err-{uuid.uuid4().hex[:8]}"
        create(node.bootstrap, topic)
        a = admin(node.bootstrap)
        try:
            nid = node_id(a)
            answer = a.alter_replica_log_dirs({
                TopicPartitionReplica(topic, 0, nid): str(tmp_path / "not-a-log-dir"),
                TopicPartitionReplica(topic, 7, nid): node.log_dirs[0],
                TopicPartitionReplica("no-such-topic", 0, nid): node.log_dirs[0],
            })
            assert answer == {
                TopicPartitionReplica(topic, 0, nid): kerrors.LogDirNotFoundError,
                TopicPartitionReplica(topic, 7, nid): kerrors.UnknownTopicOrPartitionError,
                TopicPartitionReplica("no-such-topic", 0, nid): kerrors.UnknownTopicOrPartitionError,
            }
            (where,) = live_dirs(node, topic)
            # already there: nothing to do
            assert a.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, nid): where}) == {
                TopicPartitionReplica(topic, 0, nid): kerrors.NoError}
            assert live_dirs(node, topic) == [where] and future_dirs(node, topic) == []
        finally:
            a.close()
        versions = raw(node, ApiKey.API_VERSIONS, 3, {"client_software_name": "probe",
                                                       "client_software_version": "1"})
        served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert served[ApiKey.ALTER_REPLICA_LOG_DIRS] == (1, 2)
        # v1 (not flexible), as Kafka's JSON lays it out, through the project's codec
        other = next(d for d in node.log_dirs if d != where)
        answer = raw(node, ApiKey.ALTER_REPLICA_LOG_DIRS, 1, {"dirs": [
            {"path": "relative/dir", "topics": [{"name": topic, "partitions": [0]}]}]})
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.results] \
            == [(topic, [(0, 57)])]
        answer = raw(node, ApiKey.ALTER_REPLICA_LOG_DIRS, 1, {"dirs": [
            {"path": other, "topics": [{"name": topic, "partitions": [0]}]}]})
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.results] \
            == [(topic, [(0, 0)])]
        wait_for(lambda: live_dirs(node, topic) == [other] and not future_dirs(node, topic), 60, "the move to end")
        # the tool, from kafka-reassign-partitions.sh's JSON
        plan = tmp_path / "plan.json"

        def tool(target: str, replicas=(1,)):
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": topic, "partition": 0, "replicas": list(replicas), "log_dirs": [target] * len(replicas)}]}))
            return subprocess.run([sys.executable, "-m", "sundial", "log-dirs", "--bootstrap-server", node.bootstrap,
                                   "--execute", "--reassignment-json-file", str(plan)],
                                  capture_output=True, text=True, timeout=60)

        out = tool(where)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [f"Successfully started log directory move for: {topic}-0-1 to {where}"]
        wait_for(lambda: live_dirs(node, topic) == [where] and not future_dirs(node, topic), 60, "the move to end")
        out = tool("/nowhere")
        assert out.returncode == 1
        assert out.stdout.splitlines() == [f"Error moving {topic}-0-1 to /nowhere: LogDirNotFoundError"]
        out = tool(other, replicas=(5,))
        assert out.returncode == 1 and "moving replicas between brokers is not served" in out.stderr
        assert live_dirs(node, topic) == [where]
    finally:
        assert node.stop() == 0, node.log_text()[-3000:]
