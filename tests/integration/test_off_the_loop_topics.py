"""Topic creation and deletion do their file work off the event loop, in order.

The daemon runs with the test-only slow-disk seam (``SUNDIAL_TEST_SLOW_DISK``,
:mod:`storage.disk`): each write of the topic list (``metadata``) waits 1.5 s. As in
``test_off_the_loop.py``, the seam logs the start and end of every wait, so for each answer
the test knows which slow operations were under way from before the request was sent until
after the answer came. No timing assertion.

* While a CreateTopics waits for its topic list to be written, ApiVersions and Produce to
  another topic are answered; the new topic is not served before that write ended, and
  the CreateTopics answer comes after it (a topic is reported created once durable).
* A DeleteTopics and a CreateTopics of the same name sent back to back: the new topic's
  directory is made after the old one was renamed for deletion, so the new topic takes
  records and reads them back.
* Auto-creation by Metadata waits for the write the same way.
"""

from __future__ import annotations

import json
import os

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey
from sundial.storage import files
from sundial.storage.disk import SLOW_DISK_ENV

from .clients import connect_raw, create_topic, producer, read_frame
from .conftest import unique_topic
from .test_off_the_loop import DaemonLog, _api_versions

SLOW = "metadata:1500"


def _create_request(topic: str, corr: int) -> bytes:
    return encode_request(ApiKey.CREATE_TOPICS, 4, corr, "offloop", {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 30_000, "validate_only": False})


def _delete_request(topic: str, corr: int) -> bytes:
    return encode_request(ApiKey.DELETE_TOPICS, 4, corr, "offloop", {"topic_names": [topic], "timeout_ms": 30_000})


def _metadata(sock, topic: str, corr: int, *, auto_create: bool = False):
    sock.sendall(encode_request(ApiKey.METADATA, 4, corr, "offloop", {
        "topics": [{"name": topic}], "allow_auto_topic_creation": auto_create}))
    return decode_response(ApiKey.METADATA, 4, read_frame(sock))[1].topics[0]


def _topics_on_disk(data_dir: str) -> list[str]:
    with open(os.path.join(data_dir, "sundial-topics.json"), encoding="utf-8") as fh:
        return [t["name"] for t in json.load(fh)["topics"]]


def test_the_loop_serves_while_a_slow_disk_writes_the_topic_list(broker_factory):
    d = broker_factory()
    d.env[SLOW_DISK_ENV] = SLOW
    d.start(timeout_s=120)
    log = DaemonLog(d.log_path)
    other, new = unique_topic("other"), unique_topic("new")
    create_topic(d.bootstrap, other)      # waits for its own slow write
    p = producer(d.bootstrap, acks=1, linger_ms=0)
    try:
        p.send(other, value=b"first", partition=0).get(timeout=60)
        log.read()
        written_before = log.ended.get("metadata", 0)
        creator = connect_raw(d.host, d.port)
        creator.sendall(_create_request(new, 1))
        sock = connect_raw(d.host, d.port)
        answered = {"api_versions": 0, "produce": 0, "metadata": 0}
        served_during_write = {"api_versions": 0, "produce": 0}
        corr = 100

        def writing(before: tuple[dict, dict], after: tuple[dict, dict]) -> bool:
            return after[1].get("metadata", 0) < before[0].get("metadata", 0)

        while True:
            log.read()
            if log.ended.get("metadata", 0) > written_before:
                break
            corr += 1
            before = log.snapshot()
            assert _api_versions(sock, corr) == 0
            answered["api_versions"] += 1
            served_during_write["api_versions"] += writing(before, log.snapshot())
            before = log.snapshot()
            assert p.send(other, value=b"x", partition=0).get(timeout=60).offset >= 1
            answered["produce"] += 1
            served_during_write["produce"] += writing(before, log.snapshot())
            corr += 1
            before = log.snapshot()
            seen = _metadata(sock, new, corr)
            answered["metadata"] += 1
            if log.snapshot()[1].get("metadata", 0) == written_before:
                # the topic list holding the new topic was not written yet: not served
                assert seen.error_code != 0, seen
            assert answered["produce"] < 100_000, "the topic list was never written"
        frame = read_frame(creator)
        body = decode_response(ApiKey.CREATE_TOPICS, 4, frame)[1]
        assert body.topics[0].error_code == 0, body
        assert new in _topics_on_disk(d.data_dir)
        # answered after the write had ended
        assert log.ended.get("metadata", 0) > written_before
        creator.close()
        corr += 1
        assert _metadata(sock, new, corr).error_code == 0
        sock.close()
    finally:
        p.close()
    print("answered:", answered, "during the slow topic-list write:", served_during_write)   # pytest -s
    for kind in ("api_versions", "produce"):
        assert served_during_write[kind] >= 1, (kind, served_during_write, answered)
    assert d.stop() == 0


def test_delete_and_create_of_the_same_name_back_to_back(broker_factory):
    d = broker_factory()
    d.env[SLOW_DISK_ENV] = "metadata:300"
    d.start(timeout_s=120)
    topic = unique_topic("again")
    create_topic(d.bootstrap, topic, configs={"file.delete.delay.ms": "60000"})
    p = producer(d.bootstrap, acks=-1, linger_ms=0)
    try:
        for i in range(3):
            p.send(topic, value=b"old-%d" % i, partition=0).get(timeout=60)
    finally:
        p.close()
    sock = connect_raw(d.host, d.port)
    try:
        sock.sendall(_delete_request(topic, 1) + _create_request(topic, 2))   # pipelined on one connection
        deleted = decode_response(ApiKey.DELETE_TOPICS, 4, read_frame(sock))[1]
        assert deleted.responses[0].error_code == 0, deleted
        created = decode_response(ApiKey.CREATE_TOPICS, 4, read_frame(sock))[1]
        assert created.topics[0].error_code == 0, created
    finally:
        sock.close()
    names = os.listdir(d.data_dir)
    assert files.partition_dir_name(topic, 0) in names
    assert [n for n in names if files.is_delete_dir(n) and n.startswith(topic + "-0.")]
    assert _topics_on_disk(d.data_dir).count(topic) == 1
    p = producer(d.bootstrap, acks=-1, linger_ms=0)
    try:
        md = p.send(topic, value=b"new", partition=0).get(timeout=60)
        assert md.offset == 0          # a new, empty log: not the old one's offsets
    finally:
        p.close()
    assert d.stop() == 0
    d.env.pop(SLOW_DISK_ENV)
    d.start(timeout_s=120)           # after a restart the topic is the new one, with its record
    sock = connect_raw(d.host, d.port)
    try:
        sock.sendall(encode_request(ApiKey.LIST_OFFSETS, 1, 1, "offloop", {
            "replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}))
        body = decode_response(ApiKey.LIST_OFFSETS, 1, read_frame(sock))[1]
        assert body.topics[0].partitions[0].offset == 1
    finally:
        sock.close()
    assert d.stop() == 0


def test_metadata_auto_creation_answers_once_the_topic_list_is_written(broker_factory):
    d = broker_factory(**{"auto.create.topics.enable": "true"})
    d.env[SLOW_DISK_ENV] = "metadata:300"
    d.start(timeout_s=120)
    log = DaemonLog(d.log_path)
    topic = unique_topic("auto")
    log.read()
    written_before = log.ended.get("metadata", 0)
    sock = connect_raw(d.host, d.port)
    try:
        seen = _metadata(sock, topic, 1, auto_create=True)
        log.read()
        assert log.ended.get("metadata", 0) > written_before   # the write ended before the answer
        assert topic in _topics_on_disk(d.data_dir)
        assert seen.error_code in (0, 5), seen   # none, or LEADER_NOT_AVAILABLE as Kafka answers at first
        assert _metadata(sock, topic, 2).error_code == 0
    finally:
        sock.close()
    assert d.stop() == 0
