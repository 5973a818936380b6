"""DescribeLogDirs and DescribeTopicPartitions against the real daemon, with real clients.

* kafka-python's ``describe_log_dirs()`` on a daemon with two ``log.dirs``: every partition is
  reported in the directory that holds it on disk, with the size of its segment files as the
  test measures them (``st_size`` of ``NNNNNNNNNNNNNNNNNNNN.log``), offset lag 0, not future;
  each directory's total bytes are its volume's (``statvfs``). After a clean restart (logs not
  opened yet, measured on disk by the broker) the sizes are the same.
* ``sundial log-dirs --describe`` prints kafka-log-dirs.sh's lines and JSON, equal to the disk.
* DescribeTopicPartitions through kafka-python's ``describe_topic_partitions`` (KIP-966), paged
  with small limits, and as raw bytes written from Kafka's JSON schema (request header v2,
  compact arrays, the nullable Cursor struct), decoded by hand and by the project's codec: both
  equal the brute-force listing of the topics the test created.
* ACLs: DescribeLogDirs needs CLUSTER DESCRIBE (the tool says "not authorized" in one line),
  DescribeTopicPartitions TOPIC DESCRIBE.

confluent-kafka 2.16's AdminClient has no describe_log_dirs, and librdkafka's describe_topics
sends Metadata rather than DescribeTopicPartitions, so only kafka-python drives these APIs here.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for
from support.wire_bytes import cstr, uvarint

from .clients import producer
from .acl_support import acl_daemon
from .conftest import SundialProcess

DTP = ApiKey.DESCRIBE_TOPIC_PARTITIONS


def disk_layout(node) -> dict[str, dict[str, int]]:
    """Brute force from the file system: {log dir: {"topic-p": bytes of its .log segment files}}."""
    out = {}
    for d in node.log_dirs:
        per = {}
        for name in os.listdir(d):
            pdir = os.path.join(d, name)
            if not os.path.isdir(pdir) or "." in name.rpartition("-")[2] or not name.rpartition("-")[2].isdigit():
                continue
            per[name] = sum(os.path.getsize(os.path.join(pdir, f)) for f in os.listdir(pdir)
                            if f.endswith(".log") and len(f) == 24 and f[:20].isdigit())
        out[d] = per
    return out


def reported_layout(kp_answer, topics) -> dict[str, dict[str, int]]:
    (broker,) = kp_answer
    out = {}
    for log_dir in broker["log_dirs"]:
        assert log_dir["error_code"] == 0
        per = {}
        for t in log_dir["topics"]:
            for p in t["partitions"]:
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
                if t["name"] in topics:
                    per[f"{t['name']}-{p['partition_index']}"] = p["partition_size"]
        out[log_dir["log_dir"]] = per
    return out


def only(layout, topics):
    return {d: {k: v for k, v in per.items() if k.rpartition("-")[0] in topics} for d, per in layout.items()}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("log-dirs")
    dirs = [str(base / "broker" / "d1"), str(base / "broker" / "d2")]
    proc = SundialProcess(base / "broker", {"log.dirs": ",".join(dirs), "log.segment.bytes": "4096",
                                            "group.initial.rebalance.delay.ms": "0"})
    proc.log_dirs = dirs
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


def make_topics(bootstrap, spec: dict[str, int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(name, n, 1) for name, n in spec.items()])
    finally:
        admin.close()


def test_kafka_python_describe_log_dirs_matches_the_disk(node):
    tag = uuid.uuid4().hex[:6]
    topics = {f"ld-a-{tag}": 3, f"ld-b-{tag}": 2}
    make_topics(node.bootstrap, topics)
    p = producer(node.bootstrap, acks="all", batch_size=1024)   # batches well under a segment
    for i in range(300):     # several segments of 4 KiB in some partitions, none in others
        p.send(f"ld-a-{tag}", value=os.urandom(20 + i % 90), partition=i % 2)
    p.send(f"ld-b-{tag}", value=b"x" * 500, partition=1).get(timeout=30)
    p.flush(timeout=30)
    p.close()
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=15000)
    try:
        answer = admin.describe_log_dirs()
        assert reported_layout(answer, topics) == only(disk_layout(node), topics)
        sizes = {k: v for per in reported_layout(answer, topics).values() for k, v in per.items()}
        assert len(sizes) == 5 and sizes[f"ld-a-{tag}-0"] > 4096 and sizes[f"ld-a-{tag}-2"] == 0
        assert {len(per) for per in only(disk_layout(node), topics).values()} <= {2, 3}   # spread over both
        for log_dir in answer[0]["log_dirs"]:
            st = os.statvfs(log_dir["log_dir"])
            assert log_dir["total_bytes"] == st.f_blocks * st.f_frsize
            assert 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]
        narrowed = admin.describe_log_dirs({f"ld-a-{tag}": [1]})
        listed = [(t["name"], p["partition_index"]) for d in narrowed[0]["log_dirs"] for t in d["topics"]
                  for p in t["partitions"]]
        assert listed == [(f"ld-a-{tag}", 1)]
        assert sorted(d["log_dir"] for d in narrowed[0]["log_dirs"]) == sorted(node.log_dirs)
    finally:
        admin.close()


def test_sizes_after_a_clean_restart_and_the_tool(node):
    tag = uuid.uuid4().hex[:6]
    topic = f"ld-r-{tag}"
    make_topics(node.bootstrap, {topic: 4})
    p = producer(node.bootstrap, acks="all", batch_size=1024)   # batches well under a segment
    for i in range(120):
        p.send(topic, value=b"v" * (i + 1), partition=i % 3)
    p.flush(timeout=30)
    p.close()
    before = only(disk_layout(node), {topic})
    node.restart()                          # logs open lazily: the broker measures the files
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=15000)
    try:
        assert reported_layout(admin.describe_log_dirs(), {topic}) == before == only(disk_layout(node), {topic})
    finally:
        admin.close()
    out = subprocess.run([sys.executable, "-m", "sundial", "log-dirs", "--bootstrap-server", node.bootstrap,
                          "--describe", "--topic-list", f"{topic},no-such-topic"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 1"]
    assert lines[2].startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[')
    doc = json.loads(lines[2])
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [1]
    printed = {d["logDir"]: {p["partition"]: p["size"] for p in d["partitions"]} for d in doc["brokers"][0]["logDirs"]}
    assert printed == before
    for d in doc["brokers"][0]["logDirs"]:
        assert d["error"] is None and list(d) == ["partitions", "error", "logDir"]
        assert all(list(p) == ["partition", "size", "offsetLag", "isFuture"] and p["offsetLag"] == 0
                   and p["isFuture"] is False for p in d["partitions"])


# -- DescribeTopicPartitions ---------------------------------------------------------------------------

def brute_force(spec: dict[str, int]) -> list[tuple[str, int]]:
    return [(name, p) for name in sorted(spec) for p in range(spec[name])]


def test_kafka_python_describe_topic_partitions_pages(node):
    tag = uuid.uuid4().hex[:6]
    spec = {f"dtp-{tag}-c": 5, f"dtp-{tag}-a": 3, f"dtp-{tag}-b": 1}
    make_topics(node.bootstrap, spec)
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=15000)
    try:
        for limit in (1, 2, 3, 4, 9, 2000):
            seen, missing, cursor, pages = [], 0, None, 0
            while True:
                pages += 1
                assert pages <= 20
                answer = admin.describe_topic_partitions(list(spec) + [f"dtp-{tag}-missing"],
                                                         response_partition_limit=limit, cursor=cursor)
                assert sum(len(t["partitions"]) for t in answer["topics"]) <= limit
                for t in answer["topics"]:
                    if t["name"].endswith("-missing"):
                        assert t["error_code"] == 3
                        missing += 1
                        continue
                    assert t["error_code"] == 0 and t["is_internal"] is False
                    seen += [(t["name"], p["partition_index"]) for p in t["partitions"]]
                cursor = answer["next_cursor"]
                if cursor is None:
                    break
            assert seen == brute_force(spec), limit
            assert missing == 1, limit
            assert pages >= -(-9 // limit)
        every = admin.describe_topic_partitions([], response_partition_limit=2000)
        names = [t["name"] for t in every["topics"]]
        assert names == sorted(names) and set(spec) <= set(names) and every["next_cursor"] is None
    finally:
        admin.close()


# Raw bytes, written from Kafka's DescribeTopicPartitionsRequest/Response.json (v0, flexible).

def raw_request(correlation_id: int, topics: list[str], limit: int, cursor: tuple[str, int] | None) -> bytes:
    header = struct.pack(">hhi", 75, 0, correlation_id) + struct.pack(">h", 3) + b"raw" + b"\x00"
    body = uvarint(len(topics) + 1) + b"".join(cstr(t) + b"\x00" for t in topics)
    body += struct.pack(">i", limit)
    if cursor is None:
        body += b"\xff"
    else:
        body += b"\x01" + cstr(cursor[0]) + struct.pack(">i", cursor[1]) + b"\x00"
    body += b"\x00"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def ints(self):
        n = self.uvarint() - 1
        return None if n < 0 else [self.take(">i") for _ in range(n)]

    def no_tags(self):
        assert self.uvarint() == 0, "no tagged fields expected"


def parse_raw_response(frame: bytes) -> dict:
    r = Reader(frame)
    out = {"correlation_id": r.take(">i")}
    r.no_tags()                                  # response header v1
    out["throttle_time_ms"] = r.take(">i")
    topics = []
    for _ in range(r.uvarint() - 1):
        t = {"error_code": r.take(">h"), "name": r.string(), "topic_id": uuid.UUID(bytes=r.data[r.pos:r.pos + 16])}
        r.pos += 16
        t["is_internal"] = bool(r.take(">b"))
        parts = []
        for _ in range(r.uvarint() - 1):
            parts.append({"error_code": r.take(">h"), "partition_index": r.take(">i"), "leader_id": r.take(">i"),
                          "leader_epoch": r.take(">i"), "replica_nodes": r.ints(), "isr_nodes": r.ints(),
                          "eligible_leader_replicas": r.ints(), "last_known_elr": r.ints(),
                          "offline_replicas": r.ints()})
            r.no_tags()
        t["partitions"] = parts
        t["topic_authorized_operations"] = r.take(">i")
        r.no_tags()
        topics.append(t)
    out["topics"] = topics
    present = r.take(">b")
    if present < 0:
        out["next_cursor"] = None
    else:
        out["next_cursor"] = (r.string(), r.take(">i"))
        r.no_tags()
    r.no_tags()
    assert r.pos == len(frame), "bytes left over"
    return out


def exchange(sock, frame: bytes) -> bytes:
    sock.sendall(frame)
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    return recv_exactly(sock, size)


def recv_exactly(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return bytes(buf)


def test_raw_wire_describe_topic_partitions_against_kafka_json(node):
    tag = uuid.uuid4().hex[:6]
    spec = {f"raw-{tag}-x": 4, f"raw-{tag}-y": 2}
    make_topics(node.bootstrap, spec)
    names = list(spec)
    # the project's codec writes the same request bytes as Kafka's schema does
    assert encode_request(DTP, 0, 9, "raw", {"topics": [{"name": n} for n in names], "response_partition_limit": 3,
                                             "cursor": {"topic_name": names[0], "partition_index": 1}}) == \
        raw_request(9, names, 3, (names[0], 1))
    with socket.create_connection((node.host, node.port), timeout=30) as sock:
        seen, cursor, correlation = [], None, 100
        while True:
            correlation += 1
            frame = exchange(sock, raw_request(correlation, names, 3, cursor))
            by_hand = parse_raw_response(frame)
            _, codec = decode_response(DTP, 0, frame, has_size_prefix=False)
            assert by_hand["correlation_id"] == correlation
            assert [(t.name, t.error_code, t.is_internal, t.topic_authorized_operations,
                     [(p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes),
                       list(p.offline_replicas)) for p in t.partitions]) for t in codec.topics] == \
                [(t["name"], t["error_code"], t["is_internal"], t["topic_authorized_operations"],
                  [(p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"],
                    p["offline_replicas"]) for p in t["partitions"]]) for t in by_hand["topics"]]
            for t in by_hand["topics"]:
                assert t["error_code"] == 0 and t["topic_id"] != uuid.UUID(int=0)
                for p in t["partitions"]:
                    assert (p["leader_id"], p["replica_nodes"], p["isr_nodes"], p["eligible_leader_replicas"],
                            p["last_known_elr"], p["offline_replicas"]) == (1, [1], [1], [], [], [])
                    seen.append((t["name"], p["partition_index"]))
            assert sum(len(t["partitions"]) for t in by_hand["topics"]) <= 3
            cursor = by_hand["next_cursor"]
            assert (None if codec.next_cursor is None else
                    (codec.next_cursor.topic_name, codec.next_cursor.partition_index)) == cursor
            if cursor is None:
                break
        assert seen == brute_force(spec)
        # a cursor outside the list: INVALID_REQUEST (42) for every listed topic
        bad = parse_raw_response(exchange(sock, raw_request(500, names, 3, ("zzz", 0))))
        assert [(t["name"], t["error_code"], t["partitions"]) for t in bad["topics"]] == [(n, 42, []) for n in names]


# -- ACLs ---------------------------------------------------------------------------------------------

ALICE, ALICE_PW = "alice", "alice-pw"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    proc = acl_daemon(tmp_path_factory.mktemp("log-dirs-acl") / "broker", {ALICE: ALICE_PW},
                      {"allow.everyone.if.no.acl.found": "false"}).start()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


def alice_admin(node) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=node.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username=ALICE, sasl_plain_password=ALICE_PW,
                            request_timeout_ms=15000)


def grant(node, resource_type, name, operation) -> None:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
        ResourcePatternType, ResourceType
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    binding = AclBinding(getattr(ResourceType, resource_type), name, ResourcePatternType.LITERAL, f"User:{ALICE}",
                         "*", getattr(AclOperation, operation), AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result()


def test_acls(secured, tmp_path):
    tag = uuid.uuid4().hex[:6]
    open_topic, secret = f"open-{tag}", f"secret-{tag}"
    make_topics(secured.bootstrap, {open_topic: 2, secret: 1})
    grant(secured, "TOPIC", open_topic, "DESCRIBE")
    props = tmp_path / "alice.properties"
    props.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={ALICE}\n"
                     f"sasl.password={ALICE_PW}\n")
    cmd = [sys.executable, "-m", "sundial", "log-dirs", "--bootstrap-server", secured.sasl_bootstrap, "--describe",
           "--command-config", str(props)]
    alice = alice_admin(secured)
    try:
        answer = alice.describe_topic_partitions([open_topic, secret])
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [(open_topic, 0), (secret, 29)]
        listed = [t["name"] for t in alice.describe_topic_partitions([])["topics"]]
        assert open_topic in listed and secret not in listed
        # DescribeLogDirs without CLUSTER DESCRIBE: no directories for the client, one line from the tool
        assert alice.describe_log_dirs()[0]["log_dirs"] == []
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == [
            "sundial log-dirs: error: not authorized to describe the log dirs of broker 1: DescribeLogDirs needs "
            "DESCRIBE on the cluster (ClusterAuthorizationFailedError)"]
        grant(secured, "BROKER", "kafka-cluster", "DESCRIBE")
        dirs = wait_for(lambda: alice.describe_log_dirs()[0]["log_dirs"], 60, "CLUSTER DESCRIBE to take effect")
        assert [d["log_dir"] for d in dirs] == [secured.data_dir]
        out = subprocess.run(cmd + ["--topic-list", secret], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout.splitlines()[-1])
        assert [p["partition"] for p in doc["brokers"][0]["logDirs"][0]["partitions"]] == [f"{secret}-0"]
    finally:
        alice.close()
