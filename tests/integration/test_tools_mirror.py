"""``sundial mirror`` between two daemons (seed 002's mirror-maker case).

Records copied to a CreateTime topic on B keep key, value (null too), headers,
partition, order and CreateTime; a LogAppendTime topic on B re-stamps them with B's
append time, which is what the reported end-to-end latency measures from. A second run
with the same ``--group`` copies only what is new.
"""

from __future__ import annotations

import re
import time

import pytest

from support.waiting import wait_for

from .clients import consume_all, create_topic
from .conftest import unique_topic
from .test_tools_cli import produce_records, sundial

pytestmark = pytest.mark.integration

PARTITIONS = 3


def rows_for(start: int, count: int, now: int) -> list:
    rows = []
    for i in range(start, start + count):
        headers = [("origin", b"cluster-a"), ("seq", str(i).encode())] if i % 4 else []
        if i % 9 == 0:
            headers.append(("origin", b"again"))           # repeated header keys keep their order
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 10 == 3 else f"value-{i}".encode() * (1 + i % 3)
        rows.append((i % PARTITIONS, now - 7_200_000 + i * 37_000, key, value, headers))
    return rows


def as_tuple(rec) -> tuple:
    return (rec.partition, rec.offset, rec.key, rec.value, [(k, bytes(v) if v is not None else None)
                                                           for k, v in rec.headers])


def read_all(bootstrap: str, topic: str, expected: int) -> list:
    records = consume_all(bootstrap, topic, list(range(PARTITIONS)), expected)
    return sorted(records, key=lambda r: (r.partition, r.offset))


def test_mirror_keeps_create_time_and_a_log_append_time_target_restamps(broker_factory):
    a = broker_factory().start()
    b = broker_factory().start()
    topic = unique_topic("tools-mirror")
    create_topic(a.bootstrap, topic, PARTITIONS)
    now = int(time.time() * 1000)
    first = rows_for(0, 60, now)
    produce_records(a.bootstrap, topic, first)
    source = read_all(a.bootstrap, topic, len(first))
    assert len(source) == len(first)

    # CreateTime target, created by the mirror, resumable through its group.
    out = sundial("mirror", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap, "--topics", topic,
                  "--group", "mirror-ab", "--stop-at-end")
    assert out.out.startswith(f"Mirrored {len(first)} records")
    assert f"Created target topic {topic} with {PARTITIONS} partitions." in out.err
    copied = read_all(b.bootstrap, topic, len(first))
    assert [as_tuple(r) for r in copied] == [as_tuple(r) for r in source]
    assert [(r.timestamp, r.timestamp_type) for r in copied] == [(r.timestamp, 0) for r in source]

    # New records on A: a second run copies only those.
    second = rows_for(60, 21, now)
    produce_records(a.bootstrap, topic, second)
    out = sundial("mirror", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap, "--topics", topic,
                  "--group", "mirror-ab", "--stop-at-end")
    assert out.out.startswith(f"Mirrored {len(second)} records")
    source = read_all(a.bootstrap, topic, len(first) + len(second))
    copied = read_all(b.bootstrap, topic, len(first) + len(second))
    assert [as_tuple(r) + (r.timestamp,) for r in copied] == [as_tuple(r) + (r.timestamp,) for r in source]

    # LogAppendTime target: B re-stamps with its own clock; everything else is kept.
    create_topic(b.bootstrap, "lat." + topic, PARTITIONS, {"message.timestamp.type": "LogAppendTime"})
    started = int(time.time() * 1000)
    out = sundial("mirror", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap, "--topics", topic,
                  "--target-prefix", "lat.", "--stop-at-end", "--progress-interval-s", "0")
    finished = int(time.time() * 1000)
    assert f"{topic} -> lat.{topic} (LogAppendTime)" in out.out
    restamped = read_all(b.bootstrap, "lat." + topic, len(source))
    assert [as_tuple(r) for r in restamped] == [as_tuple(r) for r in source]
    assert all(r.timestamp_type == 1 and started <= r.timestamp <= finished for r in restamped)
    # The reported latency is B's append time minus the CreateTime, record by record.
    latencies = sorted(r.timestamp - s.timestamp for r, s in zip(restamped, source))
    m = re.search(r"min (\d+) p50 (\d+) p95 (\d+) p99 (\d+) max (\d+) over (\d+) records", out.out)
    assert m, out.out
    assert int(m.group(1)) == latencies[0]
    assert int(m.group(5)) == latencies[-1]
    assert int(m.group(6)) == len(source)


def test_mirror_refuses_a_target_with_fewer_partitions(broker_factory, broker):
    b = broker_factory().start()
    topic = unique_topic("tools-mirror-small")
    create_topic(broker.bootstrap, topic, 3)
    create_topic(b.bootstrap, topic, 1)
    result = sundial("mirror", "--source-bootstrap", broker.bootstrap, "--target-bootstrap", b.bootstrap,
                     "--topics", topic, "--stop-at-end", check=False)
    assert result.code == 1
    assert "has 1 partitions, fewer than the 3" in result.err
    missing = sundial("mirror", "--source-bootstrap", broker.bootstrap, "--target-bootstrap", b.bootstrap,
                      "--topics", topic, "--target-prefix", "x.", "--no-create-topics", check=False)
    assert missing.code == 1 and "does not exist on B" in missing.err


TIME_CONFIGS = {"message.timestamp.type": "LogAppendTime", "retention.ms": "86400000", "segment.bytes": "1048576",
                "segment.ms": "3600000", "cleanup.policy": "compact,delete", "min.compaction.lag.ms": "60000"}


def _topic_overrides(bootstrap: str, topic: str) -> dict[str, str]:
    """Configs set on the topic itself, as `sundial topics describe` shows them."""
    out = sundial("topics", "describe", "--bootstrap-server", bootstrap, "--topic", topic)
    configs = out.lines[0].split("Configs: ", 1)[1]
    return dict(pair.split("=", 1) for pair in re.split(r",(?=[a-z.]+=)", configs) if pair)


def test_mirror_creates_targets_with_the_source_time_configs_unless_told_not_to(broker_factory):
    a = broker_factory(**{"log.retention.hours": "48"}).start()   # a broker-level setting counts too
    b = broker_factory().start()
    topic = unique_topic("tools-mirror-cfg")
    create_topic(a.bootstrap, topic, PARTITIONS, {**TIME_CONFIGS, "message.timestamp.after.max.ms": "60000"})
    bare = unique_topic("tools-mirror-bare")
    create_topic(a.bootstrap, bare, 1)
    now = int(time.time() * 1000)
    produce_records(a.bootstrap, topic, [(i % PARTITIONS, now, f"k{i}".encode(), b"v", []) for i in range(9)])

    out = sundial("mirror", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap,
                  "--topics", f"{topic},{bare}", "--stop-at-end", "--progress-interval-s", "0")
    assert _topic_overrides(b.bootstrap, topic) == TIME_CONFIGS        # the bound is not copied
    assert _topic_overrides(b.bootstrap, bare) == {"retention.ms": "172800000"}
    assert f"Created target topic {topic} with {PARTITIONS} partitions and the source topic's configs " in out.err
    assert f"{topic} -> {topic} (LogAppendTime)" in out.out            # B stamps its own append time
    assert out.out.startswith("Mirrored 9 records")

    off = sundial("mirror", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap,
                  "--topics", topic, "--target-prefix", "plain.", "--no-copy-configs", "--stop-at-end",
                  "--progress-interval-s", "0")
    assert _topic_overrides(b.bootstrap, "plain." + topic) == {}
    assert f"Created target topic plain.{topic} with {PARTITIONS} partitions." in off.err
    assert f"{topic} -> plain.{topic}" in off.out and "(LogAppendTime)" not in off.out


def test_mirror_stopped_by_sigint_commits_and_exits_zero(broker_factory, tmp_path):
    """Ctrl-C is how a continuous mirror ends: what B acknowledged is committed, the summary
    says why it stopped, and the exit code is 0 (docs/tools.md, exit codes)."""
    import os
    import signal
    import subprocess
    import sys

    from kafka import KafkaAdminClient, TopicPartition

    a = broker_factory().start()
    b = broker_factory().start()
    topic = unique_topic("tools-mirror-int")
    create_topic(a.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    produce_records(a.bootstrap, topic, [(0, now, f"k{i}".encode(), b"v", []) for i in range(25)])
    err_path = tmp_path / "mirror.err"
    env = dict(os.environ)
    env.pop("SUNDIAL_TOOLS_DEBUG", None)
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sundial", "mirror", "--source-bootstrap", a.bootstrap,
                                 "--target-bootstrap", b.bootstrap, "--topics", topic, "--group", "mirror-int",
                                 "--progress-interval-s", "0.2"], stdout=subprocess.PIPE, stderr=err, text=True,
                                env=env)
        try:
            # Copying: a progress line that counts all 25 records acknowledged by B.
            wait_for(lambda: "mirror: copied 25 of 25" in err_path.read_text(), 120, "the mirror to copy")
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err_path.read_text()
    assert out.startswith("Mirrored 25 records") and "(stopped by SIGINT)" in out, out
    assert "Traceback" not in err_path.read_text()
    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap)
    try:
        committed = admin.list_group_offsets({"mirror-int": [TopicPartition(topic, 0)]})["mirror-int"]
    finally:
        admin.close()
    assert committed[TopicPartition(topic, 0)].offset == 25
