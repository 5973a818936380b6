"""Acceptance: with a slow disk, the event loop keeps serving while the broker deletes many
segments and opens a new partition.

The daemon runs with the test-only slow-disk seam (``SUNDIAL_TEST_SLOW_DISK``,
:mod:`storage.disk`): opening a partition waits 5 s (long enough for a round of requests
on a busy machine), warming a Fetch read 0.5 s, each rename and unlink 20 ms (a thousand
segments are four thousand files; 500 ms each would take many minutes even on ten threads),
each checkpoint write 1 ms. The seam logs the
start and end of every wait, so the test knows, for each answer it gets, which slow
operations were under way from before the request was sent until after the answer came:
``ended_after < started_before`` for an operation means one that had started before the
request had not ended when it was answered. No timing assertion.

While retention deletes the thousand segments of one topic (after DeleteRecords moved
its log start offset) and a new topic's partition opens, ApiVersions and Produce to
another topic must be answered during those operations; the renames come after the
log start offset checkpoint and the unlinks after the renames.

After a crash, ``num.recovery.threads.per.data.dir`` partitions recover at once, never more
(seen the same way, through the slow opens' log lines).
"""

from __future__ import annotations

import json
import os
import struct
import time

from kafka import TopicPartition

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage import files
from sundial.storage.disk import SLOW_DISK_ENV

from support.waiting import wait_for

from .clients import admin, connect_raw, create_topic, producer, read_frame
from .conftest import unique_topic

SEGMENTS = 1000
#: DeleteRecords to the log end offset leaves the last segment (it has no segment after it, as in
#: Kafka's rule for log-start-offset breaches); the 999 before it are deleted.
DELETED = SEGMENTS - 1
SLOW = "open:5000;read:500;rename,unlink:20;checkpoint:1"


class DaemonLog:
    """Reads the daemon's JSON log as it grows: counts of slow-disk waits started and ended per
    operation, and the order of those events."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.started: dict[str, int] = {}
        self.ended: dict[str, int] = {}
        self.events: list[tuple[str, str]] = []   # ("started"|"ended", op) in log order
        self.other: list[dict] = []

    def read(self) -> None:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            event = e.get("event")
            if event == "slow_disk_wait_started":
                self.started[e["op"]] = self.started.get(e["op"], 0) + 1
                self.events.append(("started", e["op"]))
            elif event == "slow_disk_wait_ended":
                self.ended[e["op"]] = self.ended.get(e["op"], 0) + 1
                self.events.append(("ended", e["op"]))
            else:
                self.other.append(e)

    def snapshot(self) -> tuple[dict, dict]:
        self.read()
        return dict(self.started), dict(self.ended)


def _api_versions(sock, corr: int) -> int:
    """ApiVersions v0; its error code (response header v0: size, correlation id, then the body)."""
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, corr, "offloop", {}))
    frame = read_frame(sock)
    assert struct.unpack_from(">i", frame, 4)[0] == corr
    return struct.unpack_from(">h", frame, 8)[0]


def _produce_one_batch_each(host: str, port: int, topic: str, count: int) -> None:
    """``count`` Produce v7 requests (acks=1) of one record batch each, pipelined on one connection."""
    sock = connect_raw(host, port)
    try:
        frames = []
        for i in range(count):
            batch = build_records(2, [SimpleRecord(int(time.time() * 1000), None, b"%d" % i)]).buffer
            frames.append(encode_request(ApiKey.PRODUCE, 7, i + 1, "offloop", {
                "transactional_id": None, "acks": 1, "timeout_ms": 30_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}))
        sock.sendall(b"".join(frames))
        for i in range(count):
            frame = read_frame(sock)
            assert struct.unpack_from(">i", frame, 4)[0] == i + 1
            body = decode_response(ApiKey.PRODUCE, 7, frame)[1]
            assert body.responses[0].partition_responses[0].error_code == 0
    finally:
        sock.close()


def _list_offsets_request(topic: str, corr: int) -> bytes:
    return encode_request(ApiKey.LIST_OFFSETS, 1, corr, "offloop", {
        "replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})


def _old_segment_files(pdir: str, below: int) -> int:
    count = 0
    for name in os.listdir(pdir):
        parsed = files.parse_segment_file_name(name)
        if parsed is not None and parsed.suffix != files.SNAPSHOT_SUFFIX and parsed.base_offset < below:
            count += 1
    return count


def test_the_loop_serves_while_a_slow_disk_deletes_segments_and_opens_a_partition(broker_factory):
    d = broker_factory(**{"log.retention.check.interval.ms": "300", "log.initial.task.delay.ms": "0",
                          "log.flush.offset.checkpoint.interval.ms": "3600000",
                          "log.flush.start.offset.checkpoint.interval.ms": "3600000",
                          "background.threads": "10"})
    d.env[SLOW_DISK_ENV] = SLOW
    d.start(timeout_s=120)
    log = DaemonLog(d.log_path)
    big, other, new = unique_topic("big"), unique_topic("other"), unique_topic("new")
    create_topic(d.bootstrap, big, configs={"segment.bytes": "100", "file.delete.delay.ms": "0",
                                            "retention.ms": "-1"})
    create_topic(d.bootstrap, other)
    p = producer(d.bootstrap, acks=1, linger_ms=0)
    try:
        p.send(other, value=b"first", partition=0).get(timeout=60)
        _produce_one_batch_each(d.host, d.port, big, SEGMENTS)     # one batch per segment (segment.bytes 100)
        pdir = os.path.join(d.data_dir, files.partition_dir_name(big, 0))
        assert _old_segment_files(pdir, DELETED) >= DELETED
        a = admin(d.bootstrap)
        try:
            a.delete_records({TopicPartition(big, 0): SEGMENTS})
        finally:
            a.close()
        create_topic(d.bootstrap, new)
        opener = connect_raw(d.host, d.port)
        opener.sendall(_list_offsets_request(new, 1))   # opens the new partition (5 s on this disk)
        sock = connect_raw(d.host, d.port)
        served: dict[str, dict[str, int]] = {"api_versions": {}, "produce": {}}
        answered = {"api_versions": 0, "produce": 0}
        corr = 100

        def during(kind: str, before: dict, after: dict) -> None:
            answered[kind] += 1
            for op, started in before[0].items():
                if after[1].get(op, 0) < started:
                    served[kind][op] = served[kind].get(op, 0) + 1

        def deleting() -> bool:
            return _old_segment_files(pdir, DELETED) > 0

        while deleting() or log.started.get("open", 0) > log.ended.get("open", 0) or answered["produce"] < 5:
            corr += 1
            before = log.snapshot()
            assert _api_versions(sock, corr) == 0
            during("api_versions", before, log.snapshot())
            before = log.snapshot()
            md = p.send(other, value=b"x", partition=0).get(timeout=60)
            assert md.offset >= 1
            during("produce", before, log.snapshot())
            assert answered["produce"] < 100_000, "the deletion never finished"
        # the new partition opened and answered its ListOffsets
        frame = read_frame(opener)
        body = decode_response(ApiKey.LIST_OFFSETS, 1, frame)[1]
        assert body.topics[0].partitions[0].error_code == 0 and body.topics[0].partitions[0].offset == 0
        opener.close()
        sock.close()
    finally:
        p.close()
    log.read()
    print("answered:", answered, "during slow operations:", served)   # shown with pytest -s
    # the loop answered both kinds of request while a partition opened and while segments were deleted
    for kind in ("api_versions", "produce"):
        assert served[kind].get("open", 0) >= 1, (kind, served, answered)
        assert served[kind].get("rename", 0) + served[kind].get("unlink", 0) >= 1, (kind, served, answered)
    # ordering: the log start offset checkpoint, then every rename, then the unlinks
    events = log.events
    first_rename = events.index(("started", "rename"))
    last_rename_end = len(events) - 1 - events[::-1].index(("ended", "rename"))
    assert ("ended", "checkpoint") in events[:first_rename]
    assert ("started", "unlink") not in events[:last_rename_end]
    assert log.started["rename"] == DELETED
    wait_for(lambda: _old_segment_files(pdir, DELETED) == 0, 120, "the old segments' files to go")
    names = os.listdir(pdir)
    assert not [n for n in names if n.endswith(files.DELETED_SUFFIX)]
    checkpoint = os.path.join(d.data_dir, files.LOG_START_OFFSET_CHECKPOINT_FILE)
    with open(checkpoint, encoding="utf-8") as fh:
        assert f"{big} 0 {SEGMENTS}" in fh.read().splitlines()
    started_at = [e for e in log.other if e.get("event") in ("protocol_schemas_loaded", "broker_started")]
    assert [e["event"] for e in started_at][:2] == ["protocol_schemas_loaded", "broker_started"]
    assert d.stop() == 0


def _most_at_once(events: list[tuple[str, str]], op: str) -> int:
    running = most = 0
    for kind, name in events:
        if name == op:
            running += 1 if kind == "started" else -1
            most = max(most, running)
    return most


def test_recovery_after_a_crash_runs_on_num_recovery_threads_per_data_dir(broker_factory):
    """Six partitions recovered after kill -9 with three recovery threads: three opens at once, never
    more (each open waits 3 s on the slow disk, so the three of a round overlap also on a busy
    machine)."""
    d = broker_factory(**{"num.recovery.threads.per.data.dir": "3"})
    d.start()
    topic = unique_topic("recover")
    create_topic(d.bootstrap, topic, partitions=6)
    p = producer(d.bootstrap, acks=1, linger_ms=0)
    try:
        for i in range(60):
            p.send(topic, value=b"%d" % i, partition=i % 6).get(timeout=60)
    finally:
        p.close()
    d.kill()                      # unclean: the next start recovers every partition of the data dir
    d.env[SLOW_DISK_ENV] = "open:3000"
    log = DaemonLog(d.log_path)
    log.read()                    # the first run's lines
    log.events.clear()
    d.start(timeout_s=120)
    log.read()
    opens_at_start = log.started.get("open", 0)
    assert opens_at_start >= 6 + 2   # the topic's six partitions and the internal topics
    assert _most_at_once(log.events, "open") == 3
    recovered = [e for e in log.other if e.get("event") == "log_recovery_finished" and e.get("topic") == topic]
    assert sorted(e["partition"] for e in recovered) == list(range(6))
    # the records are all there
    c_offsets = {}
    sock = connect_raw(d.host, d.port)
    try:
        for partition in range(6):
            sock.sendall(encode_request(ApiKey.LIST_OFFSETS, 1, partition + 1, "offloop", {
                "replica_id": -1, "topics": [{"name": topic, "partitions": [
                    {"partition_index": partition, "timestamp": -1}]}]}))
            body = decode_response(ApiKey.LIST_OFFSETS, 1, read_frame(sock))[1]
            c_offsets[partition] = body.topics[0].partitions[0].offset
    finally:
        sock.close()
    assert c_offsets == {p: 10 for p in range(6)}
    assert d.stop() == 0


def _produce_request(topic: str, corr: int, value: bytes, acks: int = 1) -> bytes:
    batch = build_records(2, [SimpleRecord(int(time.time() * 1000), None, value)]).buffer
    return encode_request(ApiKey.PRODUCE, 7, corr, "offloop", {
        "transactional_id": None, "acks": acks, "timeout_ms": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


def _latest_offset(sock, topic: str, corr: int) -> int:
    sock.sendall(_list_offsets_request(topic, corr))
    body = decode_response(ApiKey.LIST_OFFSETS, 1, read_frame(sock))[1]
    assert body.topics[0].partitions[0].error_code == 0
    return body.topics[0].partitions[0].offset


def test_the_loop_serves_while_an_append_is_written_to_a_slow_disk(broker_factory):
    """Each append's write waits 2 s on the slow disk (``write:2000``). While a Produce's write is
    under way, other connections get answers (ApiVersions, ListOffsets), the partition shows
    nothing of the append yet, a second Produce to it waits its turn, and both end with the
    offsets of one-at-a-time appends (0 and 1; acks=1 and acks=all)."""
    d = broker_factory()
    d.env[SLOW_DISK_ENV] = "write:2000"
    d.start(timeout_s=120)
    log = DaemonLog(d.log_path)
    topic = unique_topic("slowwrite")
    create_topic(d.bootstrap, topic)
    writer = connect_raw(d.host, d.port)
    second = connect_raw(d.host, d.port)
    sock = connect_raw(d.host, d.port)
    try:
        log.read()
        writes_before = log.started.get("write", 0)
        writer.sendall(_produce_request(topic, 1, b"first"))
        wait_for(lambda: log.snapshot()[0].get("write", 0) > writes_before, 120, "the first write to start")
        second.sendall(_produce_request(topic, 2, b"second", acks=-1))
        served = {"api_versions": 0, "list_offsets": 0}
        unseen = 0
        corr = 100
        while True:
            started, ended = log.snapshot()
            if ended.get("write", 0) >= writes_before + 2:
                break
            corr += 1
            assert _api_versions(sock, corr) == 0
            corr += 1
            latest = _latest_offset(sock, topic, corr)
            after = log.snapshot()
            if after[1].get("write", 0) == writes_before:       # the first write still under way
                served["api_versions"] += 1
                served["list_offsets"] += 1
                if latest == 0:
                    unseen += 1
                assert latest == 0, "an append was visible before its write ended"
            assert corr < 1_000_000
        for sock_, corr_, want in ((writer, 1, 0), (second, 2, 1)):
            frame = read_frame(sock_)
            assert struct.unpack_from(">i", frame, 4)[0] == corr_
            part = decode_response(ApiKey.PRODUCE, 7, frame)[1].responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, want)
        assert _latest_offset(sock, topic, corr + 1) == 2
    finally:
        for s in (writer, second, sock):
            s.close()
    print("served while the first write was under way:", served)   # shown with pytest -s
    assert served["api_versions"] >= 1 and unseen >= 1
    log.read()
    assert any(e.get("event") == "slow_disk_injected" for e in log.other)
    assert d.stop() == 0
