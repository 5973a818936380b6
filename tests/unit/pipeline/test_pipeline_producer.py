"""TaskWriter against a model of a broker with transactions (no broker, no JVM).

The model keeps, per topic-partition, the records with the transaction state they were
written under, and per group the committed marker; a read_committed view and a
read_uncommitted view are computed from it. Fencing follows Kafka: initialising a
transactional id aborts the open transaction of the previous producer of that id.
"""

from dataclasses import dataclass, field

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402

from sundial.pipeline.errors import SinkError  # noqa: E402
from sundial.pipeline.producer import TaskIdentity, TaskWriter  # noqa: E402
from sundial.pipeline.sink_columns import RowPosition, SinkColumns  # noqa: E402
from sundial.pipeline.sink_options import parse_sink_options  # noqa: E402


@dataclass
class TP:
    topic: str
    partition: int
    offset: int = -1001
    metadata: str | None = None


class Msg:
    def __init__(self, topic, partition, key, value, ts):
        self._t, self._p, self._k, self._v, self._ts = topic, partition, key, value, ts

    def value(self):
        return self._v

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def key(self):
        return self._k

    def timestamp(self):
        return (0, -1)           # librdkafka reports no timestamp for a failed message


@dataclass
class Broker:
    """records: (topic, partition, key, value, ts, headers, txn) with txn None or a transaction number."""
    records: list = field(default_factory=list)
    txn_state: dict = field(default_factory=dict)          # txn number -> "open" | "committed" | "aborted"
    markers: dict = field(default_factory=dict)            # (group, topic, partition) -> offset
    open_by_id: dict = field(default_factory=dict)         # transactional id -> txn number
    refuse: object = None                                  # (topic, partition, ts, value) -> KafkaError | None
    queue_limit: int = 10**9
    created: list = field(default_factory=list)

    def committed_view(self):
        return [r[:6] for r in self.records if r[6] is None or self.txn_state[r[6]] == "committed"]

    def uncommitted_view(self):
        return [r[:6] for r in self.records]


class FakeProducer:
    def __init__(self, broker: Broker, config: dict):
        self.broker, self.config = broker, config
        self.pending = []
        self.txn = None
        self.tid = config.get("transactional.id")
        self.buffer_full_once = True
        broker.created.append(self)
        self.calls = []

    def produce(self, topic, value, key, partition, callback, on_delivery, timestamp, headers):
        callback = callback or self.config["on_delivery"]        # as confluent-kafka: per message, else the config's
        if partition == 99:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        if len(self.pending) >= self.broker.queue_limit and self.buffer_full_once:
            self.buffer_full_once = False
            raise BufferError("Local: Queue full")
        self.pending.append((topic, max(partition, 0), key, value, timestamp, headers, callback))

    def poll(self, timeout=0):
        """Everything pending goes out as one record batch per partition; like Kafka, the broker
        refuses a whole batch when one of its records is bad."""
        done, self.pending = self.pending, []
        batches: dict = {}
        for item in done:
            batches.setdefault((item[0], item[1]), []).append(item)
        for batch in batches.values():
            errors = [self.broker.refuse(t, p, ts, v) for t, p, k, v, ts, h, cb in batch] if self.broker.refuse else []
            err = next((e for e in errors if e is not None), None)
            for topic, part, key, value, ts, headers, cb in batch:
                if err is None:
                    self.broker.records.append((topic, part, key, value, ts, headers, self.txn))
                cb(err, Msg(topic, part, key, value, ts))
        return len(done)

    def flush(self, timeout=None):
        self.poll()
        return 0

    # transactions
    def init_transactions(self, timeout):
        self.calls.append("init")
        previous = self.broker.open_by_id.pop(self.tid, None)
        if previous is not None and self.broker.txn_state[previous] == "open":
            self.broker.txn_state[previous] = "aborted"            # fencing aborts the zombie's transaction

    def begin_transaction(self):
        self.calls.append("begin")
        self.txn = len(self.broker.txn_state)
        self.broker.txn_state[self.txn] = "open"
        self.broker.open_by_id[self.tid] = self.txn
        self.offsets = []

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout):
        self.calls.append("send_offsets")
        self.offsets = [(group_metadata, tp) for tp in offsets]

    def commit_transaction(self, timeout):
        self.calls.append("commit")
        self.flush()
        self.broker.txn_state[self.txn] = "committed"
        for group, tp in self.offsets:
            self.broker.markers[(group, tp.topic, tp.partition)] = tp.offset

    def abort_transaction(self, timeout):
        self.calls.append("abort")
        self.pending = []
        self.broker.txn_state[self.txn] = "aborted"


class FakeConsumer:
    def __init__(self, broker: Broker, config: dict):
        self.broker, self.group = broker, config["group.id"]
        assert config["isolation.level"] == "read_committed" and config["enable.auto.commit"] is False

    def committed(self, partitions, timeout):
        return [TP(p.topic, p.partition, self.broker.markers.get((self.group, p.topic, p.partition), -1001))
                for p in partitions]

    def consumer_group_metadata(self):
        return self.group

    def close(self):
        pass


NOW = 1_800_000_000_000
HOUR = 3_600_000


def writer(broker, *, exactly_once=False, partition=3, attempt=0, epoch=0, scope="q1", window=None, **options):
    raw = {"kafka.bootstrap.servers": "h:1", "topic": "out", **options}
    if exactly_once:
        raw["sundial.exactlyOnce"] = "true"
    opts = parse_sink_options(raw, streaming=True)
    name = f"sundial-spark-{scope}-{partition}"
    identity = TaskIdentity(RowPosition(partition, attempt), name if exactly_once else None,
                            name if exactly_once else None, epoch)
    return TaskWriter(opts, identity, producer_factory=lambda c: FakeProducer(broker, c),
                      consumer_factory=lambda c: FakeConsumer(broker, c), topic_partition=TP,
                      timestamp_window=lambda topic: window, clock_ms=lambda: NOW)


def chunks(n, *, start=0, chunk=4, topic=None, partitions=None, ts=None):
    rows = list(range(start, start + n))
    for i in range(0, n, chunk):
        part = rows[i:i + chunk]
        yield SinkColumns(values=[b"v%d" % r for r in part], keys=[b"k%d" % r for r in part],
                          topics=[topic(r) for r in part] if topic else None, topic=None if topic else "out",
                          partitions=[partitions(r) if partitions else -1 for r in part],
                          timestamps=[ts(r) if ts else 1000 + r for r in part],
                          headers=[[("h", b"%d" % r)] for r in part])


@pytest.mark.parametrize("options", [{}, {"kafka.acks": "1"}])       # idempotent, or not (one callback per row)
def test_at_least_once_writes_every_row_in_order_with_its_fields(options):
    broker = Broker(queue_limit=3)
    result = writer(broker, **options).write(chunks(10, partitions=lambda r: r % 2))
    assert result.rows == 10 and result.topics == ("out",) and not result.committed
    view = broker.committed_view()
    assert sorted(view) == sorted(("out", r % 2, b"k%d" % r, b"v%d" % r, 1000 + r, [("h", b"%d" % r)])
                                  for r in range(10))
    for p in (0, 1):                                               # in row order within each partition
        assert [r[2] for r in view if r[1] == p] == [b"k%d" % r for r in range(10) if r % 2 == p]
    config = broker.created[0].config
    assert config["enable.idempotence"] == ("false" if options else "true") and "transactional.id" not in config
    assert config["bootstrap.servers"] == "h:1"


def bounded(t, p, ts, v):
    return KafkaError(KafkaError.INVALID_TIMESTAMP) if ts and not NOW - HOUR <= ts <= NOW + HOUR else None


WHY_WINDOW = "its CreateTime is 2.0 d before the clock, and topic 'out' accepts CreateTimes from 1.0 h before"
WHY_GUESS = "of the refused rows its CreateTime is the farthest from the clock"     # DescribeConfigs failed


@pytest.mark.parametrize("window, why, partitions, failed, kept", [
    # the client partitions: each row carries its own callback; the batch of rows 4..7 is refused
    ((HOUR, HOUR), WHY_WINDOW, None, "4 of the 8 records this task sent failed (rows 4 to 7)", [0, 1, 2, 3]),
    (None, WHY_GUESS, None, "4 of the 8 records this task sent failed (rows 4 to 7)", [0, 1, 2, 3]),
    # rows name their partitions: found again by their place in the partition; partition 1's batch is refused
    ((HOUR, HOUR), WHY_WINDOW, lambda r: r % 2, "2 of the 8 records this task sent failed (rows 5 to 7)",
     [0, 1, 2, 3, 4, 6]),
])
def test_a_refused_record_fails_the_task_naming_the_row_and_the_error(window, why, partitions, failed, kept):
    broker = Broker(refuse=bounded)
    ts = lambda r: NOW - 48 * HOUR if r == 5 else NOW + r      # noqa: E731
    with pytest.raises(SinkError) as info:
        writer(broker, attempt=2, window=window).write(chunks(40, ts=ts, partitions=partitions))
    text = str(info.value)
    assert "row 5 of Spark partition 3 (task attempt 2) was refused: INVALID_TIMESTAMP" in text
    assert why in text and "key b'k5'" in text and f"timestamp {NOW - 48 * HOUR}" in text
    assert failed in text                                      # sending stopped after the chunk that failed
    assert sorted(r[2] for r in broker.committed_view()) == sorted(b"k%d" % r for r in kept)


def test_a_too_large_record_is_named_by_its_size():
    big = lambda t, p, ts, v: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if len(v) > 10 else None   # noqa: E731
    broker = Broker(refuse=big)
    rows = [SinkColumns([b"v", b"x" * 50, b"w"], [b"a", b"b", b"c"], None, "out", [-1] * 3, [0] * 3, None)]
    with pytest.raises(SinkError, match=r"row 1 of Spark partition 3 .*MSG_SIZE_TOO_LARGE .*key and value take 51 bytes"):
        writer(broker).write(rows)


def test_a_record_the_client_refuses_at_once_names_the_row():
    broker = Broker()
    with pytest.raises(SinkError, match=r"row 6 of Spark partition 3 .*topic 'out', partition 99.*_UNKNOWN_PARTITION"):
        writer(broker).write(chunks(10, partitions=lambda r: 99 if r == 6 else 0))


def test_exactly_once_commits_rows_and_marker_together():
    broker = Broker()
    result = writer(broker, exactly_once=True, epoch=7).write(chunks(9))
    assert result.committed and result.rows == 9 and result.transactional_id == "sundial-spark-q1-3"
    producer = broker.created[0]
    assert producer.config["transactional.id"] == "sundial-spark-q1-3"
    assert producer.calls == ["init", "begin", "send_offsets", "commit"]
    assert broker.markers == {("sundial-spark-q1-3", "out", 0): 7}
    assert len(broker.committed_view()) == 9


def test_exactly_once_rerun_of_a_committed_epoch_aborts_and_later_epochs_commit():
    broker = Broker()
    writer(broker, exactly_once=True, epoch=4).write(chunks(6))
    again = writer(broker, exactly_once=True, epoch=4, attempt=1).write(chunks(6))   # restarted micro-batch
    assert again.skipped_epoch == 4 and not again.committed
    assert len(broker.committed_view()) == 6 and len(broker.uncommitted_view()) == 12
    older = writer(broker, exactly_once=True, epoch=3).write(chunks(6))
    assert older.skipped_epoch == 4
    nxt = writer(broker, exactly_once=True, epoch=5).write(chunks(6, start=6))
    assert nxt.committed and len(broker.committed_view()) == 12
    # another Spark partition has its own id and marker
    other = writer(broker, exactly_once=True, epoch=4, partition=1).write(chunks(2, start=100))
    assert other.committed and broker.markers[("sundial-spark-q1-1", "out", 0)] == 4


def test_exactly_once_failure_aborts_and_nothing_is_visible_to_read_committed():
    broker = Broker(refuse=lambda t, p, ts, v: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if ts == 1010 else None)
    with pytest.raises(SinkError, match="transaction is aborted"):
        writer(broker, exactly_once=True, epoch=1).write(chunks(20))
    assert broker.created[0].calls[-1] == "abort"
    assert broker.committed_view() == [] and broker.markers == {}
    assert len(broker.uncommitted_view()) > 0                # read_uncommitted sees the aborted records


def test_exactly_once_an_error_in_the_input_aborts_the_transaction():
    broker = Broker()

    def failing():
        yield from chunks(8)
        raise RuntimeError("the upstream stage failed")

    with pytest.raises(RuntimeError, match="upstream"):
        writer(broker, exactly_once=True, epoch=2).write(failing())
    assert broker.committed_view() == [] and broker.markers == {}
    # the retry commits everything once
    assert writer(broker, exactly_once=True, epoch=2, attempt=1).write(chunks(8)).committed
    assert len(broker.committed_view()) == 8


def test_exactly_once_marker_lives_under_the_first_topic_by_name():
    broker = Broker()
    writer(broker, exactly_once=True, epoch=0).write(chunks(6, topic=lambda r: "zeta" if r % 2 else "alpha"))
    assert list(broker.markers) == [("sundial-spark-q1-3", "alpha", 0)]


def test_exactly_once_empty_task_commits_nothing():
    broker = Broker()
    result = writer(broker, exactly_once=True, epoch=0).write(iter(()))
    assert result.rows == 0 and not result.committed and broker.markers == {}
