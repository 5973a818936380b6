"""A hanging transaction found and aborted with ``sundial transactions``, against the real daemon.

The hanging transaction is built as docs/transactions.md describes ("Produce to a partition
that was not added"): a producer initialised with a transactional id sends a transactional
batch to a partition it never added with AddPartitionsToTxn; the partition then holds an
open transaction no marker will close, and its last stable offset stays at that batch.

Checked here, against what each test wrote:

* before the abort, read_committed readers (kafka-python, confluent-kafka) stop at the
  hanging batch and ListOffsets(read_committed) answers its offset;
* ``find-hanging`` (by topic, by partition and by broker id) lists exactly the hanging
  transaction, not an ongoing transaction of a well-behaved producer on the next partition;
* ``abort --start-offset`` (and ``abort --producer-id/--producer-epoch/--coordinator-epoch``
  with the values find-hanging printed) writes the ABORT marker: the LSO reaches the high
  watermark, read_committed readers proceed past it and see none of the aborted records
  (read_uncommitted ones still see them), and find-hanging lists nothing;
* WriteTxnMarkers on the raw wire answers Kafka's codes (unknown partition, older producer
  epoch, older coordinator epoch, the KIP-1228 rule of v2), is advertised as v1-v2, and with
  the ACL authorizer on refuses a principal without ALTER/CLUSTER_ACTION on the cluster;
* the tool's states are matched in any case, an unknown one is a usage error (2), a failed
  abort is an error (1).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from sundial.protocol.api_keys import ApiKey
from sundial.records.builder import SimpleRecord, build_records

from support.waiting import wait_for

from .clients import RawConnection, create_topic
from .conftest import DAEMONS_UNAVAILABLE, SundialProcess, free_port

ck = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.skipif(DAEMONS_UNAVAILABLE is not None, reason=DAEMONS_UNAVAILABLE or "")

DEADLINE_S = 60.0


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _wire(daemon) -> RawConnection:
    return RawConnection.to(daemon.bootstrap, "abort-test")


def open_hanging_transaction(daemon, topic: str, partition: int, values: list[bytes], *, txn_id: str | None = None,
                             inits: int = 1) -> tuple[int, int, str]:
    """InitProducerId with a transactional id (``inits`` times: epoch ``inits - 1``), then a
    transactional batch to a partition never added to the transaction: (producer id, epoch, id)."""
    txn_id = txn_id or _uid("hang")
    w = _wire(daemon)
    try:
        assert w.call(ApiKey.FIND_COORDINATOR, 3, {"key": txn_id, "key_type": 1}).error_code == 0
        for _ in range(inits):
            init = w.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60_000})
            assert init.error_code == 0
        now = int(time.time() * 1000)
        batch = build_records(2, [SimpleRecord(now, None, v) for v in values], producer_id=init.producer_id,
                              producer_epoch=init.producer_epoch, base_sequence=0, is_transactional=True).buffer
        resp = w.call(ApiKey.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 30_000,
                                         "topic_data": [{"name": topic, "partition_data": [
                                             {"index": partition, "records": batch}]}]})
        assert resp.responses[0].partition_responses[0].error_code == 0
        return init.producer_id, init.producer_epoch, txn_id
    finally:
        w.close()


def offsets(daemon, topic: str, partition: int) -> tuple[int, int]:
    """(LSO, high watermark): ListOffsets LATEST under read_committed and read_uncommitted."""
    w = _wire(daemon)
    try:
        out = []
        for isolation in (1, 0):
            resp = w.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
            out.append(resp.topics[0].partitions[0].offset)
        return out[0], out[1]
    finally:
        w.close()


def write_markers(daemon, version: int, markers: list[dict]) -> dict:
    """WriteTxnMarkers → {producer id: {(topic, partition): error code}}."""
    w = _wire(daemon)
    try:
        resp = w.call(ApiKey.WRITE_TXN_MARKERS, version, {"markers": markers})
    finally:
        w.close()
    return {m.producer_id: {(t.name, p.partition_index): p.error_code for t in m.topics for p in t.partitions}
            for m in resp.markers}


def marker(pid, epoch, commit, topic, partitions, coordinator_epoch=0, tv=0) -> dict:
    return {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "topics": [{"name": topic, "partition_indexes": partitions}], "coordinator_epoch": coordinator_epoch,
            "transaction_version": tv}


def tool(daemon, *args, code: int = 0) -> str:
    out = subprocess.run([sys.executable, "-m", "sundial", "transactions", "--bootstrap-server", daemon.bootstrap,
                          *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == code, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    return out.stdout if code == 0 else out.stderr


def rows(text: str) -> list[list[str]]:
    lines = [line.split() for line in text.splitlines() if line.strip()]
    return lines[1:]


def produce_plain(daemon, topic: str, partition: int, values: list[str]) -> None:
    p = KafkaProducer(bootstrap_servers=daemon.bootstrap, acks="all")
    try:
        for v in values:
            p.send(topic, v.encode(), partition=partition)
        p.flush(30)
    finally:
        p.close()


def read_kafka_python(daemon, topic, partition, isolation, expected: int) -> list[str]:
    c = KafkaConsumer(bootstrap_servers=daemon.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=1500)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < expected and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                got.extend(r.value.decode() for r in batch)
        drain_until = time.monotonic() + 1.5          # nothing more may come
        while time.monotonic() < drain_until:
            for batch in c.poll(timeout_ms=300).values():
                got.extend(r.value.decode() for r in batch)
        return got
    finally:
        c.close()


def read_confluent(daemon, topic, partition, isolation, expected: int) -> list[str]:
    c = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": _uid("reader"), "enable.auto.commit": False,
                     "isolation.level": isolation})
    try:
        c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        got: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
        drain_until = time.monotonic() + 1.5
        while time.monotonic() < drain_until:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
        return got
    finally:
        c.close()


def node_id(daemon) -> int:
    w = _wire(daemon)
    try:
        return w.call(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False}).brokers[0].node_id
    finally:
        w.close()


# -- the acceptance path -----------------------------------------------------------------------------
def test_hanging_transaction_found_and_aborted_by_start_offset(broker):
    topic = _uid("hang")
    create_topic(broker.bootstrap, topic, 2)
    before = [f"before-{i}" for i in range(3)]
    after = [f"after-{i}" for i in range(3)]
    hung = [f"hanging-{i}".encode() for i in range(3)]
    produce_plain(broker, topic, 0, before)                        # offsets 0-2
    pid, epoch, txn_id = open_hanging_transaction(broker, topic, 0, hung)   # offsets 3-5
    produce_plain(broker, topic, 0, after)                         # offsets 6-8
    assert offsets(broker, topic, 0) == (3, 9)                     # the LSO is held at the hanging batch

    # a well-behaved transaction on partition 1, open with a long timeout: ongoing, not hanging
    good_id = _uid("good")
    good = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": good_id,
                        "transaction.timeout.ms": 600_000})
    good.init_transactions(30)
    good.begin_transaction()
    good.produce(topic, b"ongoing", partition=1)
    good.flush(30)
    try:
        # read_committed readers stop at the hanging transaction
        assert read_kafka_python(broker, topic, 0, "read_committed", 3) == before
        assert read_confluent(broker, topic, 0, "read_committed", 3) == before

        # the tool: states in any case; find-hanging lists exactly the hanging transaction
        listed = rows(tool(broker, "list", "--state", "ONGOING"))
        assert [good_id, "Ongoing"] in [[r[0], r[3]] for r in listed]
        assert txn_id not in [r[0] for r in listed]               # the hanging producer's id is Empty
        assert txn_id in [r[0] for r in rows(tool(broker, "list", "--state", "empty,ongoing"))]
        err = tool(broker, "list", "--state", "running", code=2)
        assert "unknown transaction state 'running'" in err and "PrepareCommit" in err

        expected = [topic, "0", str(pid), str(epoch), "-1", "3"]
        by_topic = rows(tool(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"))
        assert [r[:6] for r in by_topic] == [expected]
        by_partition = rows(tool(broker, "find-hanging", "--topic", topic, "--partition", "0",
                                 "--max-transaction-timeout", "0"))
        assert [r[:6] for r in by_partition] == [expected]
        by_broker = rows(tool(broker, "find-hanging", "--broker-id", str(node_id(broker)),
                              "--max-transaction-timeout", "0"))
        assert expected in [r[:6] for r in by_broker]
        assert not [r for r in by_broker if r[0] == topic and r[1] == "1"]
        # within the default 15 minutes nothing is old enough to be called hanging
        assert rows(tool(broker, "find-hanging", "--topic", topic)) == []

        # abort it by its start offset
        out = tool(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3")
        assert f"producer {pid}" in out
        assert offsets(broker, topic, 0) == (10, 10)               # the ABORT marker took offset 9
        assert read_kafka_python(broker, topic, 0, "read_committed", 6) == before + after
        assert read_confluent(broker, topic, 0, "read_committed", 6) == before + after
        assert read_kafka_python(broker, topic, 0, "read_uncommitted", 9) == before + [h.decode() for h in hung] + after
        assert rows(tool(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")) == []
        producers = rows(tool(broker, "describe-producers", "--topic", topic, "--partition", "0"))
        assert [r[-1] for r in producers if r[0] == str(pid)] == ["None"]   # no open transaction left
        # nothing opens at offset 3 any more: a one-line error, exit 1
        err = tool(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3", code=1)
        assert "no open transaction starts at offset 3" in err
    finally:
        good.commit_transaction(30)
    assert wait_for(lambda: offsets(broker, topic, 1) == (2, 2), DEADLINE_S, "the good transaction's commit marker",
                    interval_s=0.2)


def test_hanging_transaction_aborted_by_producer_id_and_epochs(broker):
    topic = _uid("hangp")
    create_topic(broker.bootstrap, topic, 1)
    pid, epoch, _ = open_hanging_transaction(broker, topic, 0, [b"x-0", b"x-1"], inits=3)   # epoch 2
    produce_plain(broker, topic, 0, ["y-0"])
    assert offsets(broker, topic, 0) == (0, 3)
    found = rows(tool(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"))
    assert [r[:6] for r in found] == [[topic, "0", str(pid), "2", "-1", "0"]]
    _, _, producer_id, producer_epoch, coordinator_epoch, _, _, _ = found[0]
    # an older epoch is refused by the partition: exit 1, nothing written
    err = tool(broker, "abort", "--topic", topic, "--partition", "0", "--producer-id", producer_id,
               "--producer-epoch", "1", "--coordinator-epoch", coordinator_epoch, code=1)
    assert "InvalidProducerEpoch" in err
    assert offsets(broker, topic, 0) == (0, 3)
    tool(broker, "abort", "--topic", topic, "--partition", "0", "--producer-id", producer_id,
         "--producer-epoch", producer_epoch, "--coordinator-epoch", coordinator_epoch)
    assert offsets(broker, topic, 0) == (4, 4)
    assert read_confluent(broker, topic, 0, "read_committed", 1) == ["y-0"]


# -- WriteTxnMarkers on the raw wire -----------------------------------------------------------------
def test_write_txn_markers_codes_on_the_wire(broker):
    topic = _uid("wtm")
    create_topic(broker.bootstrap, topic, 2)
    w = _wire(broker)
    try:
        versions = w.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    finally:
        w.close()
    assert {(k.api_key, k.min_version, k.max_version) for k in versions.api_keys} >= {(27, 1, 2)}

    pid, epoch, _ = open_hanging_transaction(broker, topic, 0, [b"a"], inits=2)          # epoch 1
    # one producer id, two markers: one answer entry; unknown topic and partition answer 3
    got = write_markers(broker, 1, [marker(pid, epoch - 1, False, topic, [0]),
                                    marker(pid, epoch, False, "no-such-topic", [0]),
                                    marker(pid, epoch, False, topic, [7])])
    assert got == {pid: {(topic, 0): 47, ("no-such-topic", 0): 3, (topic, 7): 3}}
    assert offsets(broker, topic, 0) == (0, 1)                                  # nothing written
    # v2, transaction version 2: the marker must carry a bumped epoch
    assert write_markers(broker, 2, [marker(pid, epoch, False, topic, [0], tv=2)]) == {pid: {(topic, 0): 47}}
    # the abort at coordinator epoch 7 lands; an older coordinator epoch is fenced afterwards
    assert write_markers(broker, 1, [marker(pid, epoch, False, topic, [0], coordinator_epoch=7)]) == {
        pid: {(topic, 0): 0}}
    assert offsets(broker, topic, 0) == (2, 2)
    assert write_markers(broker, 1, [marker(pid, epoch, True, topic, [0], coordinator_epoch=6)]) == {
        pid: {(topic, 0): 52}}
    # a marker for a producer with no open transaction is written anyway (Kafka); two producers, two entries
    got = write_markers(broker, 2, [marker(pid, epoch, True, topic, [0], coordinator_epoch=7),
                                    marker(pid + 1000, 0, True, topic, [1])])
    assert got == {pid: {(topic, 0): 0}, pid + 1000: {(topic, 1): 0}}
    assert offsets(broker, topic, 0) == (3, 3) and offsets(broker, topic, 1) == (1, 1)


@pytest.fixture(scope="module")
def acl_node(tmp_path_factory):
    """The ACL authorizer on, no super user; User:ANONYMOUS may do anything with topics and
    transactional ids, and nothing with the cluster but CREATE."""
    base = tmp_path_factory.mktemp("txn-acl")
    proc = SundialProcess(base / "broker", {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    for args in (["--topic", "*", "--operation", "All"], ["--transactional-id", "*", "--operation", "All"],
                 ["--cluster", "--operation", "Create"], ["--cluster", "--operation", "Describe"]):
        out = subprocess.run([sys.executable, "-m", "sundial", "acls", "add", "--allow-principal", "User:ANONYMOUS",
                              *args, "--data-dir", proc.data_dir], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


def test_write_txn_markers_needs_alter_or_cluster_action(acl_node):
    topic = _uid("acl")
    create_topic(acl_node.bootstrap, topic, 1)
    pid, epoch, _ = open_hanging_transaction(acl_node, topic, 0, [b"a"])
    got = write_markers(acl_node, 1, [marker(pid, epoch, False, topic, [0]), marker(pid, epoch, False, "zz", [3])])
    assert got == {pid: {(topic, 0): 31, ("zz", 3): 31}}
    assert offsets(acl_node, topic, 0) == (0, 1)                                # nothing written
    err = tool(acl_node, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0", code=1)
    assert "ClusterAuthorization" in err
    assert len(err.strip().splitlines()) == 1


# -- the transaction coordinator's metrics ---------------------------------------------------------
def test_transaction_coordinator_metrics(broker_factory):
    from .test_metrics import scrape, value

    port = free_port()
    daemon = broker_factory(**{"sundial.metrics.listener": f"127.0.0.1:{port}",
                               "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    daemon.start()
    topic = _uid("txm")
    create_topic(daemon.bootstrap, topic, 1)
    first = scrape(port)
    assert value(first, "sundial_transactions", state="Ongoing") == 0
    assert value(first, "sundial_transactions_committed_total") == 0

    a = ck.Producer({"bootstrap.servers": daemon.bootstrap, "transactional.id": _uid("ma")})
    a.init_transactions(30)
    for commit in (True, False, True):
        a.begin_transaction()
        a.produce(topic, b"v", partition=0)
        a.flush(30)
        (a.commit_transaction if commit else a.abort_transaction)(30)
    stalled = ck.Producer({"bootstrap.servers": daemon.bootstrap, "transactional.id": _uid("mb"),
                           "transaction.timeout.ms": 1500})
    stalled.init_transactions(30)
    stalled.begin_transaction()
    stalled.produce(topic, b"stalled", partition=0)
    stalled.flush(30)

    def settled():
        s = scrape(port)
        want = {"sundial_transactions_committed_total": 2, "sundial_transactions_aborted_total": 2,
                "sundial_transactions_timed_out_total": 1}
        return s if all(value(s, k) == v for k, v in want.items()) else None

    s = wait_for(settled, DEADLINE_S, "two commits, two aborts (one by the timeout)", interval_s=0.2)
    # a: its last transaction committed; the stalled producer's aborted by the coordinator
    assert value(s, "sundial_transactions", state="CompleteCommit") == 1
    assert value(s, "sundial_transactions", state="CompleteAbort") == 1
    assert value(s, "sundial_transactions", state="Ongoing") == 0
    assert value(s, "sundial_transactional_ids_expired_total") == 0
    a.flush(5)
