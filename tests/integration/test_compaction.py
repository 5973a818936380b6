"""Log compaction against the real daemon with kafka-python and confluent-kafka (issue 13).

Ground truth is what each test produced: the expected log after cleaning is computed by brute
force (the last record of every key below the active segment, everything in the active segment).
Cleaning is observed through ``cleaner-offset-checkpoint`` in the data directory (the end offset of
the last completed pass), never through sleeps. A segment rolls when a record's CreateTime is more
than ``segment.ms`` after the segment's first one, so each test ends its data with a *sentinel*
record stamped "now": it rolls the data into cleanable segments and stays in the active segment.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from kafka.admin import ConfigResource, ConfigResourceType

from support.waiting import wait_for

from .clients import admin, consumer, create_topic, producer
from .conftest import SundialProcess, free_port, unique_topic
from .groups_support import FAST_GROUPS
from .test_metrics import scrape

CLEANER = {
    "log.cleaner.backoff.ms": "100",
    "log.segment.delete.delay.ms": "0",
    "log.retention.check.interval.ms": "300",
    "log.initial.task.delay.ms": "0",
    **FAST_GROUPS,
}
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "8192", "segment.ms": "1000",
           "min.cleanable.dirty.ratio": "0.01"}
HOUR = 3_600_000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    port = free_port()
    proc = SundialProcess(tmp_path_factory.mktemp("compaction"),
                          {**CLEANER, "sundial.metrics.listener": f"127.0.0.1:{port}"}).start()
    proc.metrics_port = port
    yield proc
    assert proc.running, proc.log_text()[-3000:]
    assert proc.stop() == 0, proc.log_text()[-3000:]


def now_ms() -> int:
    return int(time.time() * 1000)


def checkpoint(proc, topic: str, partition: int = 0) -> int | None:
    path = os.path.join(proc.data_dir, "cleaner-offset-checkpoint")
    try:
        lines = open(path).read().split("\n")[2:]
    except FileNotFoundError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) == 3 and fields[0] == topic and int(fields[1]) == partition:
            return int(fields[2])
    return None


def wait_cleaned(proc, topic: str, offset: int, timeout_s: float = 90.0) -> None:
    wait_for(lambda: (checkpoint(proc, topic) or -1) >= offset, timeout_s, f"{topic} cleaned up to {offset}")


def send_all(bootstrap: str, topic: str, records, **kwargs) -> list[tuple]:
    """kafka-python; ``records`` of (key, value, timestamp, headers) -> (offset, ts, key, value, headers)."""
    kwargs.setdefault("batch_size", 2048)
    kwargs.setdefault("enable_idempotence", False)
    p = producer(bootstrap, **kwargs)
    try:
        futures = [(p.send(topic, key=k, value=v, timestamp_ms=ts, headers=list(h)), k, v, ts, tuple(h))
                   for k, v, ts, h in records]
        p.flush(30)
        return [(f.get(30).offset, ts, k, v, h) for f, k, v, ts, h in futures]
    finally:
        p.close()


def read_all(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[tuple]:
    """Every record of partition 0 from the beginning, up to the end offset at the time of the call."""
    c = consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + timeout_s
        while c.position(tp) < end and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=300).values():
                out += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
        return out
    finally:
        c.close()


def model(produced: list[tuple], end_offset: int, drop_tombstones: bool = False) -> list[tuple]:
    last = {r[2]: r[0] for r in produced if r[0] < end_offset}
    return [r for r in produced if r[0] >= end_offset
            or (last[r[2]] == r[0] and not (drop_tombstones and r[3] is None))]


def segment_layout(proc, topic: str) -> list[tuple[int, int]]:
    """(base offset, mtime ms) of the partition's segments, from the data directory."""
    d = os.path.join(proc.data_dir, f"{topic}-0")
    out = []
    for name in os.listdir(d):
        if name.endswith(".log") and len(name) == 24:
            out.append((int(name[:20]), os.stat(os.path.join(d, name)).st_mtime_ns // 1_000_000))
    return sorted(out)


def kafka_search(records, layout, target: int, log_start: int = 0):
    """Kafka's offsetsForTimes by brute force: the first segment whose largest timestamp (max record
    timestamp, else mtime) is >= target, then the first record >= target in it."""
    for i, (base, mtime) in enumerate(layout):
        upper = layout[i + 1][0] if i + 1 < len(layout) else 1 << 62
        seg = [r for r in records if base <= r[0] < upper]
        largest = max((r[1] for r in seg), default=-1)
        if largest < 0:
            largest = mtime
        if largest >= target:
            for r in seg:
                if r[1] >= target and r[0] >= log_start:
                    return r[0], r[1]
            return None
    return None


def keyed_data(keys: int, rounds: int, t0: int, *, tombstone_every: int = 0, rng=None, pad: int = 0) -> list[tuple]:
    """``rounds`` overwrites of ``keys`` keys (shuffled per round with ``rng``), CreateTimes 20 ms apart;
    with ``tombstone_every`` the last round deletes every n-th key."""
    out = []
    n = 0
    for r in range(rounds):
        order = list(range(keys))
        if rng is not None:
            rng.shuffle(order)
        for k in order:
            value = (None if tombstone_every and r == rounds - 1 and k % tombstone_every == 0
                     else b"v%d-%d" % (k, r) + b"." * pad)
            out.append((b"key-%03d" % k, value, t0 + n * 20, (("round", str(r).encode()), ("k", b"%d" % k))))
            n += 1
    return out



# The two tests below act in the middle of a cleaning pass: the daemon's test hook
# SUNDIAL_TEST_CLEANER_PAUSE_AFTER_FIRST_SWAP_MS holds the cleaner thread after the first swap
# of each daemon start (until the pass is aborted), so the test acts mid-pass on any host, however fast it cleans.
def paused_cleaner(base_dir) -> SundialProcess:
    proc = SundialProcess(base_dir, CLEANER)
    proc.env["SUNDIAL_TEST_CLEANER_PAUSE_AFTER_FIRST_SWAP_MS"] = "600000"
    return proc


def compact_when_written(proc, prefix: str, segment_bytes: int, data: list) -> tuple[str, list]:
    """A new topic of ``proc`` written with ``data`` and a newer sentinel while its cleanup.policy is
    delete, then made compacted, so that every pass runs over all of it: (topic, what was produced)."""
    topic = unique_topic(prefix)
    configs = {**COMPACT, "segment.bytes": str(segment_bytes), "cleanup.policy": "delete"}
    create_topic(proc.bootstrap, topic, 1, configs)
    produced = send_all(proc.bootstrap, topic, data, batch_size=4096)
    produced += send_all(proc.bootstrap, topic, [(b"zz", b"s", now_ms(), ())])
    client = admin(proc.bootstrap)
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                             configs={**configs, "cleanup.policy": "compact"})])
    finally:
        client.close()
    return topic, produced


def test_kafka_python_latest_value_per_key_survives_with_offset_timestamp_headers(daemon):
    topic = unique_topic("cmp")
    create_topic(daemon.bootstrap, topic, 1, COMPACT)
    t0 = now_ms() - HOUR
    produced = send_all(daemon.bootstrap, topic, keyed_data(40, 12, t0, rng=random.Random(5)))
    sentinel = send_all(daemon.bootstrap, topic, [(b"zz-sentinel", b"s", now_ms(), ())])
    produced += sentinel
    wait_cleaned(daemon, topic, sentinel[0][0])
    got = read_all(daemon.bootstrap, topic)
    assert got == model(produced, sentinel[0][0])
    assert len(got) == 41
    c = consumer(daemon.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert c.beginning_offsets([tp])[tp] == 0                      # earliest unchanged
        assert c.end_offsets([tp])[tp] == sentinel[0][0] + 1           # latest unchanged
        layout = segment_layout(daemon, topic)
        assert layout[0][0] == 0
        targets = [t0 - 1, t0, t0 + 5_000, t0 + 9_000, t0 + 9_590, got[-2][1], got[-2][1] + 1, now_ms() + 10]
        targets += random.Random(1).sample(range(t0, t0 + 12 * 40 * 20), 25)
        from confluent_kafka import Consumer as CkConsumer, TopicPartition as CkTopicPartition
        ck = CkConsumer({"bootstrap.servers": daemon.bootstrap, "group.id": "lookup-" + topic})
        try:
            for target in targets:
                # the first surviving record at or after the target, by brute force over the full read
                expected = next(((r[0], r[1]) for r in got if r[1] >= target), None)
                answer = c.offsets_for_times({tp: target})[tp]
                assert (None if answer is None else (answer.offset, answer.timestamp)) == expected, target
                (ck_answer,) = ck.offsets_for_times([CkTopicPartition(topic, 0, target)], 30)
                assert (ck_answer.offset if ck_answer.offset >= 0 else None) == \
                    (None if expected is None else expected[0]), target
        finally:
            ck.close()
    finally:
        c.close()
    # the pass is in the log and in the metrics
    passes = [e for e in daemon.log_lines() if e.get("event") == "log_cleaned" and e.get("topic") == topic]
    assert passes and passes[-1]["dirty_section"][1] == sentinel[0][0]
    assert passes[-1]["records_kept"] <= passes[-1]["records_read"] and passes[-1]["bytes_read"] > 0
    samples = scrape(daemon.metrics_port)
    for name in ("sundial_log_cleaner_passes_total", "sundial_log_cleaner_bytes_read_total",
                 "sundial_log_cleaner_bytes_written_total"):
        assert samples[name][0][1] > 0, name
    for name in ("sundial_log_cleaner_max_dirty_percent", "sundial_log_cleaner_last_pass_seconds",
                 "sundial_log_cleaner_buffer_utilization_percent", "sundial_log_cleaner_uncleanable_partitions"):
        assert name in samples, name
    assert samples["sundial_log_cleaner_uncleanable_partitions"][0][1] == 0


def test_offsets_for_times_answers_past_segments_that_cleaning_emptied(daemon):
    """Every record of the first round is overwritten by the second, so cleaning leaves the first
    round's segments empty, their largest timestamp their mtime (now). Kafka's two-step search
    stops there and answers "none" for any target up to now (KAFKA-9157); Sundial answers the first
    surviving record at or after the target, with kafka-python and confluent-kafka alike."""
    from confluent_kafka import Consumer as CkConsumer, TopicPartition as CkTopicPartition

    topic = unique_topic("cmp-empty")
    create_topic(daemon.bootstrap, topic, 1, COMPACT)
    t0 = now_ms() - HOUR
    produced = send_all(daemon.bootstrap, topic, keyed_data(20, 2, t0, pad=900))
    sentinel = send_all(daemon.bootstrap, topic, [(b"zz-sentinel", b"s", now_ms(), ())])
    wait_cleaned(daemon, topic, sentinel[0][0])
    got = read_all(daemon.bootstrap, topic)
    assert got == model(produced + sentinel, sentinel[0][0])
    layout = segment_layout(daemon, topic)
    targets = sorted({t0, t0 + 100, t0 + 390, got[0][1] - 1, got[0][1], got[0][1] + 1, got[-2][1], got[-1][1]})
    misses = [t for t in targets if kafka_search(got, layout, t) is None
              and next((r for r in got if r[1] >= t), None) is not None]
    assert misses, f"the scenario must leave an emptied segment first: {layout}"
    c = consumer(daemon.bootstrap)
    ck = CkConsumer({"bootstrap.servers": daemon.bootstrap, "group.id": "lookup-" + topic})
    try:
        tp = TopicPartition(topic, 0)
        for target in targets:
            expected = next(((r[0], r[1]) for r in got if r[1] >= target), None)
            answer = c.offsets_for_times({tp: target})[tp]
            assert (None if answer is None else (answer.offset, answer.timestamp)) == expected, target
            (ck_answer,) = ck.offsets_for_times([CkTopicPartition(topic, 0, target)], 30)
            assert ck_answer.offset == (expected[0] if expected else -1), target
    finally:
        c.close()
        ck.close()


def test_confluent_kafka_tombstones_disappear_after_delete_retention(daemon):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTP

    topic = unique_topic("cmpck")
    create_topic(daemon.bootstrap, topic, 1, {**COMPACT, "delete.retention.ms": "1000"})
    produced, errors = [], []

    def on_delivery(err, msg, headers=()):
        if err is not None:
            errors.append(err)
        else:
            produced.append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), headers))

    p = Producer({"bootstrap.servers": daemon.bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": "zstd", "linger.ms": 5, "batch.size": 2048})
    for key, value, ts, headers in keyed_data(30, 6, now_ms() - HOUR, tombstone_every=3):
        p.produce(topic, key=key, value=value, timestamp=ts, headers=list(headers),
                  on_delivery=lambda err, msg, h=tuple(headers): on_delivery(err, msg, h))
        p.poll(0)
    assert p.flush(30) == 0 and not errors

    last_ts = [0]

    def sentinel(i: int) -> int:
        """A record that rolls the segment: its CreateTime is over segment.ms after the previous one's."""
        before = len(produced)
        last_ts[0] = max(now_ms(), last_ts[0] + 1001)
        p.produce(topic, key=b"zz-sentinel-%d" % i, value=b"s", timestamp=last_ts[0], on_delivery=on_delivery)
        assert p.flush(30) == 0 and not errors and len(produced) == before + 1
        return produced[-1][0]

    c = Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})

    def consume() -> list[tuple]:
        c.assign([CTP(topic, 0, 0)])
        _, high = c.get_watermark_offsets(CTP(topic, 0), timeout=10)
        got, last = [], -1
        deadline = time.monotonic() + 30
        while last < high - 1 and time.monotonic() < deadline:
            for msg in c.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), tuple(msg.headers() or ())))
                last = msg.offset()
        return got

    try:
        first = sentinel(0)
        wait_cleaned(daemon, topic, first)
        produced.sort()
        got = consume()
        assert got == model(produced, first)                          # tombstones kept by the first clean
        tombstones = [r for r in got if r[3] is None]
        by_offset = {r[0]: r for r in produced}
        assert len(tombstones) == 10 and all(by_offset[r[0]] == r for r in tombstones)
        # later passes, once delete.retention.ms has passed since the first one, drop them
        i = 1

        def tombstones_gone():
            nonlocal i
            s = sentinel(i)
            i += 1
            wait_cleaned(daemon, topic, s)
            return not [r for r in consume() if r[3] is None]

        wait_for(tombstones_gone, 60, "tombstones to disappear", interval_s=0.3)
        produced.sort()
        end = checkpoint(daemon, topic)
        assert consume() == model(produced, end, drop_tombstones=True)
        assert c.get_watermark_offsets(CTP(topic, 0), timeout=10) == (0, produced[-1][0] + 1)
    finally:
        c.close()
        p.flush(5)


def test_min_compaction_lag_holds_back_and_uses_record_timestamps(daemon):
    held, old, control = unique_topic("lag-held"), unique_topic("lag-old"), unique_topic("lag-ctl")
    create_topic(daemon.bootstrap, held, 1, {**COMPACT, "min.compaction.lag.ms": str(HOUR)})
    create_topic(daemon.bootstrap, old, 1, {**COMPACT, "min.compaction.lag.ms": str(HOUR)})
    create_topic(daemon.bootstrap, control, 1, COMPACT)
    recent = send_all(daemon.bootstrap, held, keyed_data(10, 5, now_ms() - 60_000))
    recent += send_all(daemon.bootstrap, held, [(b"zz", b"s", now_ms(), ())])
    aged = send_all(daemon.bootstrap, old, keyed_data(10, 5, now_ms() - 2 * HOUR))
    aged += send_all(daemon.bootstrap, old, [(b"zz", b"s", now_ms(), ())])
    ctl = send_all(daemon.bootstrap, control, keyed_data(10, 5, now_ms() - 60_000))
    ctl += send_all(daemon.bootstrap, control, [(b"zz", b"s", now_ms(), ())])
    wait_cleaned(daemon, control, ctl[-1][0])
    wait_cleaned(daemon, old, aged[-1][0])          # CreateTimes older than the lag: cleanable at once
    assert read_all(daemon.bootstrap, old) == model(aged, aged[-1][0])
    # the cleaner has looked at every log several times since `held` got its data: still untouched
    assert (checkpoint(daemon, held) or 0) == 0
    assert read_all(daemon.bootstrap, held) == recent


def test_max_compaction_lag_forces_cleaning_below_the_dirty_ratio(daemon):
    forced, idle = unique_topic("maxlag"), unique_topic("nomaxlag")
    # Segments roll on the records' timestamps (Kafka's segment.ms rule), here at each of the records an hour or
    # more apart: never inside the first 80 records, however kafka-python splits them into batches.
    cfg = {**COMPACT, "min.cleanable.dirty.ratio": "0.9", "segment.ms": "60000"}
    create_topic(daemon.bootstrap, idle, 1, cfg)
    create_topic(daemon.bootstrap, forced, 1, {**cfg, "max.compaction.lag.ms": "60000"})
    results = {}
    for topic in (idle, forced):
        first = send_all(daemon.bootstrap, topic, keyed_data(20, 4, now_ms() - 2 * HOUR))
        first += send_all(daemon.bootstrap, topic, [(b"zz1", b"s", now_ms() - HOUR, ())])
        wait_cleaned(daemon, topic, first[-1][0])    # first pass: everything is dirty (ratio 1.0)
        results[topic] = first
    for topic in (idle, forced):                     # a little dirt, 10 minutes old: ratio far below 0.9
        more = send_all(daemon.bootstrap, topic, [(b"key-000", b"again", now_ms() - 600_000, ())])
        more += send_all(daemon.bootstrap, topic, [(b"zz2", b"s", now_ms(), ())])
        results[topic] += more
    wait_cleaned(daemon, forced, results[forced][-1][0])
    assert [r[3] for r in read_all(daemon.bootstrap, forced) if r[2] == b"key-000"] == [b"again"]
    assert checkpoint(daemon, idle) == results[idle][-3][0]
    assert [r[3] for r in read_all(daemon.bootstrap, idle) if r[2] == b"key-000"] == [b"v0-3", b"again"]


def test_compact_delete_applies_time_retention_too(daemon):
    topic = unique_topic("cmpdel")
    create_topic(daemon.bootstrap, topic, 1, {**COMPACT, "cleanup.policy": "compact,delete",
                                              "retention.ms": str(HOUR)})
    old = send_all(daemon.bootstrap, topic, keyed_data(10, 3, now_ms() - 3 * HOUR))
    # a recent record rolls the old ones into segments that time retention deletes whole
    recent = send_all(daemon.bootstrap, topic, [(b"key-000", b"recent", now_ms() - 10 * 60_000, ())])
    c = consumer(daemon.bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        wait_for(lambda: c.beginning_offsets([tp])[tp] >= recent[0][0], 60, "old segments deleted by time")
    finally:
        c.close()
    recent += send_all(daemon.bootstrap, topic, keyed_data(5, 3, now_ms() - 9 * 60_000))
    recent += send_all(daemon.bootstrap, topic, [(b"zz", b"s", now_ms(), ())])
    wait_cleaned(daemon, topic, recent[-1][0])
    got = read_all(daemon.bootstrap, topic)
    assert got == model(recent, recent[-1][0])          # the expired keys went entirely, the rest compacted
    assert not any(r[0] < recent[0][0] for r in got) and len(old) == 30


def test_group_consumer_resumes_at_the_first_surviving_offset_after_its_commit(daemon):
    topic, group = unique_topic("cmpgrp"), unique_topic("g")
    create_topic(daemon.bootstrap, topic, 1, {**COMPACT, "cleanup.policy": "delete"})   # compacted after the commit
    produced = send_all(daemon.bootstrap, topic, keyed_data(10, 6, now_ms() - HOUR))
    c = KafkaConsumer(topic, bootstrap_servers=daemon.bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", max_poll_records=25)
    try:
        seen = []
        wait_for(lambda: seen.extend(r for b in c.poll(timeout_ms=300).values() for r in b) or len(seen) >= 25,
                 30, "the first records")
        committed = seen[24].offset + 1
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(committed, "", -1)})
    finally:
        c.close()
    produced += send_all(daemon.bootstrap, topic, [(b"zz", b"s", now_ms(), ())])
    client = admin(daemon.bootstrap)
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=COMPACT)])
    finally:
        client.close()
    wait_cleaned(daemon, topic, produced[-1][0])
    survivors = [r[0] for r in model(produced, produced[-1][0])]
    assert committed not in survivors                      # the committed position was cleaned away
    c = KafkaConsumer(topic, bootstrap_servers=daemon.bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="none")
    try:
        got = []
        wait_for(lambda: got.extend(r for b in c.poll(timeout_ms=300).values() for r in b) or got, 30,
                 "records after the commit")
        assert got[0].offset == min(o for o in survivors if o >= committed)
    finally:
        c.close()


def test_kill_9_during_cleaning_loses_nothing_and_resurrects_nothing(tmp_path):
    proc = paused_cleaner(tmp_path / "kill9")
    proc.start()
    try:
        # all the data is there before the topic is compacted, so every pass is a long (throttled) one
        topic, produced = compact_when_written(proc, "cmpkill", 16384, keyed_data(
            120, 5, now_ms() - HOUR, tombstone_every=7, rng=random.Random(3), pad=250))
        end = produced[-1][0]
        expected_final = model(produced, end)
        by_offset = {r[0]: r for r in produced}
        must_keep = set(expected_final)

        def swaps():
            return sum(1 for e in proc.log_lines() if e.get("event") == "cleaned_segment_swapped_in"
                       and e.get("topic") == topic)

        target = 1                                 # the daemon's log file spans its restarts
        for _ in range(2):
            # kill -9 right after a cleaned segment is swapped in, in the middle of a pass
            wait_for(lambda: swaps() >= target, 180, "a swap")
            assert (checkpoint(proc, topic) or 0) < end, "the pass ended before the kill"
            proc.kill()
            target = swaps() + 1
            proc.start()
            got = read_all(proc.bootstrap, topic)
            offsets = [r[0] for r in got]
            assert offsets == sorted(set(offsets)), "offsets out of order or repeated after recovery"
            assert all(by_offset[r[0]] == r for r in got), "a record that was never produced"
            assert must_keep <= set(got), "a latest value was lost"
        proc.stop()
        proc.env.clear()                      # the last pass runs through
        proc.start()
        wait_cleaned(proc, topic, end, timeout_s=180)
        assert read_all(proc.bootstrap, topic) == expected_final
    finally:
        if proc.running:
            assert proc.stop() == 0, proc.log_text()[-3000:]


def test_deleting_a_topic_during_a_pass_is_not_an_error(tmp_path):
    proc = paused_cleaner(tmp_path / "del")
    proc.start()
    client = admin(proc.bootstrap)
    try:
        # all the data is there before the topic is compacted, so one long (throttled) pass begins
        topic, _ = compact_when_written(proc, "cmpdelete", 65536, keyed_data(300, 2, now_ms() - HOUR, pad=250))
        wait_for(lambda: any(e.get("event") == "cleaned_segment_swapped_in" and e.get("topic") == topic
                             for e in proc.log_lines()), 60, "a pass to swap in its first segment")
        client.delete_topics([topic])
        wait_for(lambda: any(e.get("event") == "log_cleaning_aborted" and e.get("topic") == topic
                             for e in proc.log_lines()), 60, "the pass to end")
        assert not [e for e in proc.log_lines() if e.get("level") == "error"]
        topic2 = unique_topic("cmpafter")                  # the cleaner goes on with other logs
        create_topic(proc.bootstrap, topic2, 1, COMPACT)
        produced = send_all(proc.bootstrap, topic2, keyed_data(5, 3, now_ms() - HOUR))
        produced += send_all(proc.bootstrap, topic2, [(b"zz", b"s", now_ms(), ())])
        wait_cleaned(proc, topic2, produced[-1][0])
        assert read_all(proc.bootstrap, topic2) == model(produced, produced[-1][0])
        assert not any(e.get("event") == "log_cleaned" and e.get("topic") == topic for e in proc.log_lines())
    finally:
        client.close()
        if proc.running:
            assert proc.stop() == 0, proc.log_text()[-3000:]


def test_two_cleaner_threads_clean_two_logs_at_once(tmp_path):
    """With log.cleaner.threads=2, a pass held on one thread does not stop the other log's pass."""
    proc = paused_cleaner(tmp_path / "threads")
    proc.overrides["log.cleaner.threads"] = "2"
    proc.start()
    topics = [unique_topic("cmpthr"), unique_topic("cmpthr")]
    configs = {**COMPACT, "segment.bytes": "16384", "cleanup.policy": "delete"}
    client = admin(proc.bootstrap)
    try:
        produced = {}
        for i, topic in enumerate(topics):
            create_topic(proc.bootstrap, topic, 1, configs)
            produced[topic] = send_all(proc.bootstrap, topic, keyed_data(60, 4, now_ms() - HOUR, tombstone_every=5,
                                                                          rng=random.Random(i), pad=200))
            produced[topic] += send_all(proc.bootstrap, topic, [(b"zz", b"s", now_ms(), ())])
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs={**configs, "cleanup.policy": "compact"})
                              for t in topics])

        def cleaned():
            return [t for t in topics if (checkpoint(proc, t) or -1) >= produced[t][-1][0]]

        # one pass is held after its first swap (the hook); the other thread cleans the other log
        wait_for(lambda: len(cleaned()) == 1, 120, "one log cleaned while the other pass is held")
        held = next(t for t in topics if t not in cleaned())
        assert any(e.get("event") == "cleaned_segment_swapped_in" and e.get("topic") == held
                   for e in proc.log_lines())
        done = cleaned()[0]
        assert read_all(proc.bootstrap, done) == model(produced[done], produced[done][-1][0])
        threads = {e.get("cleaner_thread") for e in proc.log_lines() if e.get("event") == "log_cleaning_started"}
        assert threads == {0, 1}
    finally:
        client.close()
        if proc.running:
            assert proc.stop() == 0, proc.log_text()[-3000:]
