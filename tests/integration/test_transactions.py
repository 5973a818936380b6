"""Transactions against the real daemon with real clients (issue 14).

confluent-kafka (librdkafka) transactional producers: commit and abort across several
partitions of two topics, read by read_committed and read_uncommitted consumers;
consume-transform-produce with ``send_offsets_to_transaction``; fencing by a second
producer with the same transactional.id; a stalled transaction aborted by the
coordinator's timer; kill -9 in the middle of a transaction and after a commit.
kafka-python 3 and aiokafka transactional producers commit and abort too.

Each test computes what each isolation level must show from what it produced.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from .clients import create_topic, require_kafkajs, run_js

ck = pytest.importorskip("confluent_kafka")

DEADLINE_S = 60.0


def _tid(prefix="txn") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _producer(bootstrap, txn_id, **extra):
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
            "transaction.timeout.ms": 60_000}
    conf.update(extra)
    return ck.Producer(conf)


def _in_transaction(bootstrap, txn_id, **extra):
    """A transactional producer (see ``_producer``), initialised, with a transaction begun."""
    p = _producer(bootstrap, txn_id, **extra)
    p.init_transactions(30)
    p.begin_transaction()
    return p


def _source_and_sink(bootstrap: str, sink_partitions: int) -> tuple[str, str]:
    """A new source topic of 2 partitions holding in-0 .. in-19 (even ones in partition 0, odd ones in 1)
    and a new empty sink topic: their names."""
    source, sink = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, sink_partitions)
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        plain.produce(source, value=f"in-{i}".encode(), partition=i % 2)
    plain.flush(30)
    return source, sink


def _read(bootstrap, topics_parts, isolation, expected, *, timeout_s=DEADLINE_S, group=None):
    """Every record of the partitions from the beginning until ``expected`` arrived (then a short drain)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group or _tid("reader"), "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": isolation}
    c = ck.Consumer(conf)
    try:
        c.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t, p in topics_parts])
        got = []
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.topic(), m.partition(), m.value().decode()))
        # Nothing more may arrive: drain for a moment past the expected count.
        drain_until = time.monotonic() + 1.5
        while time.monotonic() < drain_until:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append((m.topic(), m.partition(), m.value().decode()))
        return got
    finally:
        c.close()


def _high_watermark(bootstrap, topic, partition):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": _tid("hw")})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=15)[1]
    finally:
        c.close()


def _wait_committed(bootstrap, group, topic, partition, expected):
    """The group's committed offset once it equals ``expected`` (or the last seen after the deadline):
    EndTxn is answered before its markers complete the group's pending offsets."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + DEADLINE_S
        offset = None
        while offset != expected and time.monotonic() < deadline:
            try:
                offset = c.committed([ck.TopicPartition(topic, partition)], 5)[0].offset
            except ck.KafkaException:
                time.sleep(0.2)
        return offset
    finally:
        c.close()


def _produce(p, topic, partition, values):
    for v in values:
        p.produce(topic, value=v.encode(), partition=partition)
    p.flush(30)


def test_confluent_commit_and_abort_across_partitions_and_topics(broker):
    a, b = f"txa-{uuid.uuid4().hex[:8]}", f"txb-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, a, 3)
    create_topic(broker.bootstrap, b, 2)
    p = _producer(broker.bootstrap, _tid())
    p.init_transactions(30)
    committed, aborted = [], []
    for round_no, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        batch = []
        for i in range(12):
            topic, part = (a, (i // 2) % 3) if i % 2 == 0 else (b, (i // 2) % 2)
            v = f"r{round_no}-{i}"
            p.produce(topic, value=v.encode(), partition=part)
            batch.append((topic, part, v))
        p.flush(30)
        if commit:
            p.commit_transaction(30)
            committed += batch
        else:
            p.abort_transaction(30)
            aborted += batch
    parts = [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1)]
    ru = _read(broker.bootstrap, parts, "read_uncommitted", len(committed) + len(aborted))
    assert sorted(ru) == sorted(committed + aborted)
    # Markers take offsets: each partition got one marker per transaction that touched it.
    for topic, part in parts:
        data = sum(1 for t, q, _ in committed + aborted if (t, q) == (topic, part))
        assert _high_watermark(broker.bootstrap, topic, part) == data + 5
    rc = _read(broker.bootstrap, parts, "read_committed", len(committed))
    assert sorted(rc) == sorted(committed)
    p.flush(5)


def test_confluent_consume_transform_produce_with_offsets(broker):
    src, dst = _source_and_sink(broker.bootstrap, 2)
    group = _tid("ctp")
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([src])
    p = _producer(broker.bootstrap, _tid())
    p.init_transactions(30)
    seen = 0
    deadline = time.monotonic() + DEADLINE_S
    round_no = 0
    while seen < 20 and time.monotonic() < deadline:
        msgs = consumer.consume(10, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, value=("out-" + m.value().decode()).encode(), partition=m.partition())
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                      consumer.consumer_group_metadata(), 30)
        if round_no == 0:
            # The first transaction is aborted: its output disappears and its offsets are not committed.
            p.abort_transaction(30)
            for tp in consumer.assignment():
                committed = consumer.committed([tp], 15)[0].offset
                consumer.seek(ck.TopicPartition(tp.topic, tp.partition, committed if committed >= 0 else 0))
        else:
            p.commit_transaction(30)
            seen += len(msgs)
        round_no += 1
    consumer.close()
    assert seen == 20
    out = _read(broker.bootstrap, [(dst, 0), (dst, 1)], "read_committed", 20)
    assert sorted(v for _, _, v in out) == sorted(f"out-in-{i}" for i in range(20))
    assert [_wait_committed(broker.bootstrap, group, src, p, 10) for p in (0, 1)] == [10, 10]


def test_confluent_second_producer_fences_the_first(broker):
    topic = f"fence-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    txn_id = _tid()
    p1 = _producer(broker.bootstrap, txn_id)
    p1.init_transactions(30)
    p1.begin_transaction()
    _produce(p1, topic, 0, ["zombie-1"])
    p2 = _producer(broker.bootstrap, txn_id)
    p2.init_transactions(60)  # fences p1 and aborts its open transaction
    p2.begin_transaction()
    _produce(p2, topic, 0, ["fresh-1"])
    p2.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as exc:
        p1.produce(topic, value=b"zombie-2", partition=0)
        p1.flush(10)
        p1.commit_transaction(30)
    err = exc.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    rc = _read(broker.bootstrap, [(topic, 0)], "read_committed", 1)
    assert [v for _, _, v in rc] == ["fresh-1"]


@pytest.fixture
def sweeping_daemon(broker_factory):
    """A started daemon of the test's own that looks for timed-out transactions every 200 ms."""
    return broker_factory(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}).start()


def test_stalled_transaction_is_aborted_after_its_timeout(sweeping_daemon):
    d = sweeping_daemon
    topic = f"stall-{uuid.uuid4().hex[:8]}"
    create_topic(d.bootstrap, topic, 1)
    p = _in_transaction(d.bootstrap, _tid(), **{"transaction.timeout.ms": 1500})
    _produce(p, topic, 0, ["stalled-1", "stalled-2"])
    # The coordinator aborts: an ABORT marker lands after the two records.
    deadline = time.monotonic() + DEADLINE_S
    while _high_watermark(d.bootstrap, topic, 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _high_watermark(d.bootstrap, topic, 0) == 3
    assert _read(d.bootstrap, [(topic, 0)], "read_committed", 0, timeout_s=2) == []
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(30)
    events = [e.get("event") for e in d.log_lines()]
    assert "transaction_timed_out" in events


@pytest.mark.parametrize("stage", ["open", "committed"])
def test_kill_9_mid_transaction_and_after_commit(sweeping_daemon, stage):
    d = sweeping_daemon
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    create_topic(d.bootstrap, topic, 2)
    p = _in_transaction(d.bootstrap, _tid(), **{"transaction.timeout.ms": 3000})
    _produce(p, topic, 0, ["k-0", "k-1"])
    _produce(p, topic, 1, ["k-2"])
    group = _tid("killgrp")
    meta = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group})
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 2)], meta.consumer_group_metadata(), 30)
    meta.close()
    if stage == "committed":
        p.commit_transaction(30)
    d.kill()
    d.start()
    parts = [(topic, 0), (topic, 1)]
    if stage == "committed":
        rc = _read(d.bootstrap, parts, "read_committed", 3)
        assert sorted(v for _, _, v in rc) == ["k-0", "k-1", "k-2"]
    else:
        # The open transaction resumes after the restart and times out: aborted, markers in both partitions.
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and (_high_watermark(d.bootstrap, topic, 0) < 3
                                               or _high_watermark(d.bootstrap, topic, 1) < 2):
            time.sleep(0.2)
        assert (_high_watermark(d.bootstrap, topic, 0), _high_watermark(d.bootstrap, topic, 1)) == (3, 2)
        assert _read(d.bootstrap, parts, "read_committed", 0, timeout_s=2) == []
        assert len(_read(d.bootstrap, parts, "read_uncommitted", 3)) == 3
    # The transaction's group offset is committed exactly when the transaction is.
    check = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + DEADLINE_S
        offset = None
        while offset is None and time.monotonic() < deadline:
            try:
                offset = check.committed([ck.TopicPartition(topic, 0)], 5)[0].offset
            except ck.KafkaException:
                time.sleep(0.2)
        assert offset == (2 if stage == "committed" else ck.OFFSET_INVALID)
    finally:
        check.close()
    # A new producer with a fresh id works on the restarted broker.
    p2 = _producer(d.bootstrap, _tid())
    p2.init_transactions(30)
    p2.begin_transaction()
    _produce(p2, topic, 0, ["after"])
    p2.commit_transaction(30)


def test_invalid_transaction_timeout_is_refused(broker):
    p = _producer(broker.bootstrap, _tid(), **{"transaction.timeout.ms": 900_001})
    with pytest.raises(ck.KafkaException) as exc:
        p.init_transactions(30)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_kafka_python_transactional_producer(broker):
    from kafka import KafkaProducer, OffsetAndMetadata, TopicPartition

    topic = f"kp-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_tid("kp"), request_timeout_ms=15000)
    p.init_transactions()
    p.begin_transaction()
    for i in range(6):
        p.send(topic, value=f"kc-{i}".encode(), partition=i % 2)
    group = _tid("kpgrp")
    p.send_offsets_to_transaction({TopicPartition(topic, 1): OffsetAndMetadata(5, "", -1)}, group)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(4):
        p.send(topic, value=f"ka-{i}".encode(), partition=i % 2)
    p.flush()  # kafka-python drops unsent records on abort; sent ones must be aborted by markers
    p.abort_transaction()
    p.close()
    rc = _read(broker.bootstrap, [(topic, 0), (topic, 1)], "read_committed", 6)
    assert sorted(v for _, _, v in rc) == sorted(f"kc-{i}" for i in range(6))
    ru = _read(broker.bootstrap, [(topic, 0), (topic, 1)], "read_uncommitted", 10)
    assert len(ru) == 10
    assert _wait_committed(broker.bootstrap, group, topic, 1, 5) == 5


def test_aiokafka_transactional_producer(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"aio-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)

    async def go():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_tid("aio"))
        await p.start()
        try:
            async with p.transaction():
                for i in range(6):
                    await p.send(topic, value=f"ac-{i}".encode(), partition=i % 2)
                await p.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 3}, group)
            await p.begin_transaction()
            for i in range(4):
                await p.send(topic, value=f"aa-{i}".encode(), partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()

    group = _tid("aiogrp")
    asyncio.run(go())
    rc = _read(broker.bootstrap, [(topic, 0), (topic, 1)], "read_committed", 6)
    assert sorted(v for _, _, v in rc) == sorted(f"ac-{i}" for i in range(6))
    assert _wait_committed(broker.bootstrap, group, topic, 0, 3) == 3
    ru = _read(broker.bootstrap, [(topic, 0), (topic, 1)], "read_uncommitted", 10)
    assert len(ru) == 10


def test_kafkajs_transactional_producer(broker):
    require_kafkajs()
    topic = f"js-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    run_js("txn_produce.js", broker.bootstrap, topic, _tid("js"), "2", "6", "4", timeout_s=120)
    rc = _read(broker.bootstrap, [(topic, 0), (topic, 1)], "read_committed", 6)
    assert sorted(v for _, _, v in rc) == sorted(f"jc-{i}" for i in range(6))
    ru = _read(broker.bootstrap, [(topic, 0), (topic, 1)], "read_uncommitted", 10)
    assert sorted(v for _, _, v in ru) == sorted([f"jc-{i}" for i in range(6)] + [f"ja-{i}" for i in range(4)])


def test_transactions_tool_lists_and_describes(broker):
    import subprocess
    import sys

    topic = f"tool-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    txn_id = _tid("tool")
    p = _in_transaction(broker.bootstrap, txn_id)
    _produce(p, topic, 1, ["open-1"])

    def tool(*args):
        out = subprocess.run([sys.executable, "-m", "sundial", "transactions", "--bootstrap-server", broker.bootstrap,
                              *args], capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
        return out.stdout.decode()

    listed = [line.split() for line in tool("list", "--state", "Ongoing").splitlines()]
    assert ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"] == listed[0]
    assert [row for row in listed if row[0] == txn_id][0][3] == "Ongoing"
    described = tool("describe", "--transactional-id", txn_id).splitlines()
    row = described[1].split()
    assert row[1] == txn_id and row[4] == "Ongoing" and row[-1] == f"{topic}-1"
    producers = tool("describe-producers", "--topic", topic, "--partition", "1").splitlines()
    pid = int(row[2])
    prow = [line.split() for line in producers[1:] if line.split()[0] == str(pid)][0]
    assert prow[-1] == "0"  # CurrentTransactionStartOffset: the open transaction starts at offset 0
    p.commit_transaction(30)

    def state():  # EndTxn is answered at PrepareCommit; the markers and CompleteCommit follow
        return [r for r in (line.split() for line in tool("list").splitlines()) if r[0] == txn_id][0][3]

    deadline = time.monotonic() + DEADLINE_S
    while state() != "CompleteCommit" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state() == "CompleteCommit"


def test_pending_transactional_offsets_are_unstable_until_commit(broker):
    """OffsetFetch with require_stable (librdkafka sends it under read_committed) answers
    UNSTABLE_OFFSET_COMMIT while the transaction is open; after the commit the offset is there."""
    src = f"stable-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, src, 1)
    group = _tid("stable")
    p = _in_transaction(broker.bootstrap, _tid())
    meta = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    p.send_offsets_to_transaction([ck.TopicPartition(src, 0, 7)], meta.consumer_group_metadata(), 30)
    meta.close()
    reader = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "isolation.level": "read_committed"})
    plain = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "isolation.level": "read_uncommitted"})
    try:
        with pytest.raises(ck.KafkaException):  # retried on UNSTABLE_OFFSET_COMMIT until the timeout
            reader.committed([ck.TopicPartition(src, 0)], 3)
        assert plain.committed([ck.TopicPartition(src, 0)], 15)[0].offset < 0  # pending: not committed yet
        p.commit_transaction(30)
        deadline = time.monotonic() + DEADLINE_S
        offset = -1
        while offset != 7 and time.monotonic() < deadline:
            try:
                offset = reader.committed([ck.TopicPartition(src, 0)], 5)[0].offset
            except ck.KafkaException:
                time.sleep(0.2)
        assert offset == 7
    finally:
        reader.close()
        plain.close()


def test_produce_of_transactional_batches_as_kafka_3(broker):
    """Kafka 3.x without KIP-890 verification: a transactional batch needs a transactional id
    (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and one sent to a partition never added to the
    transaction is appended: it opens a transaction there that holds the LSO back."""
    from sundial.protocol import decode_response, encode_request
    from sundial.protocol.api_keys import ApiKey
    from sundial.records.builder import SimpleRecord, build_records

    from .clients import connect_raw, read_frame

    topic = f"hang-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    host, port = broker.bootstrap.split(":")
    s = connect_raw(host, int(port))
    try:
        def ask(api_key, version, body, corr):
            s.sendall(encode_request(api_key, version, corr, "hang-test", body))
            return decode_response(api_key, version, read_frame(s))[1]

        txn_id = _tid("raw")
        found = ask(ApiKey.FIND_COORDINATOR, 3, {"key": txn_id, "key_type": 1}, 1)
        assert found.error_code == 0
        init = ask(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60_000}, 2)
        assert init.error_code == 0
        batch = build_records(2, [SimpleRecord(int(time.time() * 1000), None, b"hanging")],
                              producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0,
                              is_transactional=True).buffer

        def produce(transactional_id, corr):
            return ask(ApiKey.PRODUCE, 9, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 30_000,
                                           "topic_data": [{"name": topic, "partition_data": [
                                               {"index": 0, "records": batch}]}]}, corr)

        refused = produce(None, 3)
        assert refused.responses[0].partition_responses[0].error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        accepted = produce(txn_id, 4)  # never added with AddPartitionsToTxn: appended anyway (Kafka 3.x)
        assert accepted.responses[0].partition_responses[0].error_code == 0
        latest = ask(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, 5)
        assert latest.topics[0].partitions[0].offset == 0  # the LSO stays at the open batch
    finally:
        s.close()


def test_consume_transform_produce_with_a_consumer_protocol_group(broker_factory):
    """Exactly-once with a Kafka 4 consumer group (KIP-848): TxnOffsetCommit carries the member's id
    and epoch (``consumer_group_metadata()``), the broker checks them against the group, and the
    offsets commit with the transaction."""
    d = broker_factory(**{"group.consumer.heartbeat.interval.ms": "500",
                          "group.consumer.min.heartbeat.interval.ms": "500"}).start()
    source, sink = _source_and_sink(d.bootstrap, 1)
    group = _tid("eos848")
    consumer = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group, "group.protocol": "consumer",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    p = _producer(d.bootstrap, _tid())
    p.init_transactions(30)
    try:
        consumer.subscribe([source])
        seen: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 20 and time.monotonic() < deadline:
            batch = consumer.consume(20, 0.5)
            batch = [m for m in batch if m.error() is None]
            if not batch:
                continue
            p.begin_transaction()
            for m in batch:
                p.produce(sink, value=m.value().upper(), partition=0)
                seen.append(m.value().decode())
            p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                          consumer.consumer_group_metadata(), 30)
            p.commit_transaction(30)
        assert sorted(seen) == sorted(f"in-{i}" for i in range(20))
    finally:
        consumer.close()
    out = _read(d.bootstrap, [(sink, 0)], "read_committed", 20)
    assert sorted(v for _, _, v in out) == sorted(f"IN-{i}" for i in range(20))
    check = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group})
    try:
        committed = check.committed([ck.TopicPartition(source, 0), ck.TopicPartition(source, 1)], 10)
        assert [tp.offset for tp in committed] == [10, 10]
    finally:
        check.close()
