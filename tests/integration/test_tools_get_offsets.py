"""``sundial get-offsets`` equals brute force over what was produced.

Records go to several partitions (and several segments) with CreateTimes out of order;
for earliest, latest, max-timestamp and many times (every produced timestamp, its
neighbours, before everything and after everything, in ms and ISO-8601) the tool's
``topic:partition:offset:timestamp`` lines must equal a brute-force search: the lowest
offset whose timestamp is at or after the time, -1 when none is.
"""

from __future__ import annotations

import random
import time

import pytest

from sundial.tools.timeparse import format_ms

from .clients import create_topic
from .conftest import unique_topic
from .test_tools_cli import produce_records, sundial, sundial_in_process

pytestmark = pytest.mark.integration

PARTITIONS = 3


def brute_force(records: dict[int, list[tuple[int, int]]], partition: int, target: int) -> tuple[int, int]:
    best = None
    for offset, ts in records[partition]:
        if ts >= target and (best is None or offset < best[0]):
            best = (offset, ts)
    return best or (-1, -1)


def parse(out: str) -> dict[tuple[str, int], tuple[int, int | None]]:
    result = {}
    for line in out.splitlines():
        parts = line.split(":")
        topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
        ts = int(parts[3]) if len(parts) > 3 else None
        result[(topic, partition)] = (offset, ts)
    return result


@pytest.fixture(scope="module")
def offsets_topic(broker):
    topic = unique_topic("getoff")
    create_topic(broker.bootstrap, topic, PARTITIONS, {"segment.bytes": "1500", "index.interval.bytes": "100"})
    rng = random.Random(11)
    now = int(time.time() * 1000)
    rows = []
    for i in range(150):
        part = rng.randrange(PARTITIONS)
        ts = now - 3_600_000 + i * 10_000 + rng.randint(-25_000, 25_000)   # out of order
        rows.append((part, ts, f"k{i}".encode(), f"value-{i}".encode(), None))
    metas = produce_records(broker.bootstrap, topic, rows)
    records: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    for (part, ts, *_), md in zip(rows, metas):
        records[part].append((md.offset, ts))
    return topic, records


def test_special_times(broker, offsets_topic):
    topic, records = offsets_topic
    latest = parse(sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic).out)
    earliest = parse(sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                             "--time", "earliest", "--with-timestamp").out)
    maxts = parse(sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                          "--time", "max-timestamp", "--with-timestamp").out)
    for p in range(PARTITIONS):
        assert latest[(topic, p)] == (len(records[p]), None)
        assert earliest[(topic, p)] == (0, -1)
        top = max(ts for _, ts in records[p])
        first_with_top = min(o for o, ts in records[p] if ts == top)
        assert maxts[(topic, p)] == (first_with_top, top)
    # -1/-2/-3 spelled as in kafka-get-offsets.sh
    assert parse(sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--time",
                         "-2").out) == {k: (0, None) for k in earliest}


def test_times_equal_brute_force(broker, offsets_topic):
    topic, records = offsets_topic
    all_ts = sorted({ts for recs in records.values() for _, ts in recs})
    rng = random.Random(5)
    targets = [0, all_ts[0] - 1, all_ts[0], all_ts[-1], all_ts[-1] + 1, all_ts[-1] + 10_000_000]
    targets += rng.sample(all_ts, 12) + [t + 1 for t in rng.sample(all_ts, 6)] + [t - 1 for t in rng.sample(all_ts, 6)]
    for target in targets:
        got = parse(sundial_in_process("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                            "--time", str(target), "--with-timestamp").out)
        for p in range(PARTITIONS):
            assert got[(topic, p)] == brute_force(records, p, target), (target, p)


def test_iso_times_and_partition_selection(broker, offsets_topic):
    topic, records = offsets_topic
    sample = sorted(ts for _, ts in records[1])[len(records[1]) // 2]
    iso = format_ms(sample)                    # 2026-...Z
    got = parse(sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                        "--partitions", "1,2", "--time", iso, "--with-timestamp").out)
    assert set(got) == {(topic, 1), (topic, 2)}
    for p in (1, 2):
        assert got[(topic, p)] == brute_force(records, p, sample)
    # a regular expression selects topics; lines are sorted by topic then partition number
    result = sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic[:8] + ".*",
                     "--time", "latest")
    ours = [line for line in result.lines if line.startswith(topic + ":")]
    assert ours == [f"{topic}:{p}:{len(records[p])}" for p in range(PARTITIONS)]


def test_no_match_is_minus_one(broker):
    topic = unique_topic("getoff-empty")
    create_topic(broker.bootstrap, topic, 2)
    result = sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--time", "now-1h",
                     "--with-timestamp")
    assert result.lines == [f"{topic}:0:-1:-1", f"{topic}:1:-1:-1"]
