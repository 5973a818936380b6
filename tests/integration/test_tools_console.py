"""``sundial console-producer`` and ``sundial console-consumer`` against the real daemon.

Ground truth comes from elsewhere each time: the lines the test wrote, kafka-python reading
the topic, ``sundial get-offsets --time`` for where a time lands, and brute force over the
(offset, timestamp) pairs the test produced.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone

import pytest
from kafka import KafkaProducer

from sundial.tools.timeparse import format_ms

from .clients import admin, consume_all, create_topic
from .conftest import DAEMONS_UNAVAILABLE, SundialProcess, free_port, unique_topic
from .test_tools_cli import Result, assert_one_line_error, dead_address, produce_records, sundial

pytestmark = pytest.mark.integration

EVERY_FIELD = ["--property", "print.timestamp=true", "--property", "print.partition=true", "--property",
               "print.offset=true", "--property", "print.headers=true", "--property", "print.key=true"]
LANDED = re.compile(r"^from (\S+): (\S+):(\d+) (?:at offset (-?\d+)|has no record at or after it; "
                    r"starting at its end, offset (\d+))")


def run(*argv: str, stdin: str = "", timeout_s: float = 120.0) -> Result:
    env = dict(os.environ)
    env.pop("SUNDIAL_TOOLS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "sundial", *argv], input=stdin.encode(), capture_output=True,
                          timeout=timeout_s, env=env)
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


def ok(result: Result) -> Result:
    assert result.code == 0, f"exit {result.code}:\n{result.err}\n{result.out}"
    assert "Traceback" not in result.err
    return result


def minute(ms: int) -> str:
    """ISO-8601 to the minute without an offset (the tools read it as UTC), e.g. 2026-11-27T14:05."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M")


def parse_printed(out: str) -> list[tuple]:
    """Lines printed with EVERY_FIELD → (timestamp, partition, offset, headers, key, value)."""
    rows = []
    for line in out.splitlines():
        stamp, part, off, headers, key, value = line.split("\t")
        assert stamp.startswith("CreateTime:") and part.startswith("Partition:") and off.startswith("Offset:")
        rows.append((int(stamp.split(":", 1)[1]), int(part.split(":")[1]), int(off.split(":")[1]), headers, key,
                     value))
    return rows


def landed(err: str) -> dict[int, tuple[str, int]]:
    """Where --from landed per partition: {partition: ("at" | "end", offset)}."""
    out = {}
    for line in err.splitlines():
        m = LANDED.match(line)
        if m:
            out[int(m.group(3))] = ("at", int(m.group(4))) if m.group(4) is not None else ("end", int(m.group(5)))
    return out


def test_keys_headers_and_timestamps_round_trip(broker):
    topic = unique_topic("console-rt")
    create_topic(broker.bootstrap, topic, 3)
    now = int(time.time() * 1000)
    rng = random.Random(7)
    lines = []
    for i in range(40):
        ts = now - 3_600_000 + rng.randrange(3_500_000)                     # out of order, all in the past
        stamp = [str(ts), format_ms(ts), f"CreateTime:{ts}"][i % 3]          # ms, ISO-8601 and the printed form
        headers = ",".join(f"h{j}:v{i}-{j}" for j in range(i % 3)) or "NO_HEADERS"
        lines.append((ts, stamp, headers, f"key-{i}", f"value {i} \u00e9"))
    stdin = "".join(f"{stamp}\t{headers}\t{key}\t{value}\n" for _, stamp, headers, key, value in lines)
    ok(run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--property",
           "parse.timestamp=true", "--property", "parse.headers=true", "--property", "parse.key=true",
           stdin=stdin))

    # kafka-python, an independent reader, sees the records the lines describe
    records = consume_all(broker.bootstrap, topic, [0, 1, 2], len(lines))
    expected = sorted((ts, key.encode(), value.encode(), tuple(
        (h.split(":")[0], h.split(":")[1].encode()) for h in headers.split(",") if headers != "NO_HEADERS"))
        for ts, _, headers, key, value in lines)
    assert sorted((r.timestamp, r.key, r.value, tuple(r.headers)) for r in records) == expected

    # the console consumer prints them with every field, in Kafka's format
    result = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                    "--from-beginning", "--max-messages", str(len(lines)), *EVERY_FIELD))
    printed = parse_printed(result.out)
    assert sorted((ts, key, value, headers) for ts, _p, _o, headers, key, value in printed) == \
        sorted((ts, key, value, headers) for ts, _, headers, key, value in lines)
    assert sorted((p, o) for _, p, o, *_ in printed) == sorted((r.partition, r.offset) for r in records)
    assert f"Processed a total of {len(lines)} messages" in result.err

    # and its output is the producer's input: copied to a second topic, the records are the same
    copy = unique_topic("console-rt-copy")
    create_topic(broker.bootstrap, copy, 1)
    again = "".join("\t".join(line.split("\t")[:1] + line.split("\t")[3:]) + "\n" for line in result.out.splitlines())
    ok(run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", copy, "--property",
           "parse.timestamp=true", "--property", "parse.headers=true", "--property", "parse.key=true", stdin=again))
    copied = consume_all(broker.bootstrap, copy, [0], len(lines))
    assert sorted((r.timestamp, r.key, r.value, tuple(r.headers)) for r in copied) == expected


def test_null_keys_and_values_with_markers(broker):
    topic = unique_topic("console-null")
    create_topic(broker.bootstrap, topic, 1)
    ok(run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--property",
           "parse.key=true", "--property", "key.separator=:", "--property", "null.marker=<none>",
           stdin="<none>:v1\nk2:<none>\nk3:v3\n"))
    out = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
                 "--max-messages", "3", "--property", "print.key=true", "--property", "key.separator=|",
                 "--property", "null.literal=NULL")).out
    assert out.splitlines() == ["NULL|v1", "k2|NULL", "k3|v3"]


@pytest.fixture(scope="module")
def timed_topic(broker):
    """Three partitions of records with out-of-order timestamps over the last three hours, minute-spread."""
    topic = unique_topic("console-time")
    create_topic(broker.bootstrap, topic, 3)
    rng = random.Random(3)
    now = int(time.time() * 1000)
    rows = []
    for i in range(120):
        part = rng.randrange(3)
        ts = now - 3 * 3_600_000 + i * 60_000 + rng.randint(-300_000, 300_000)
        rows.append((part, ts, f"k{i}".encode(), f"v{i}".encode(), None))
    metas = produce_records(broker.bootstrap, topic, rows)
    produced: dict[int, list[tuple[int, int]]] = {p: [] for p in range(3)}
    for (part, ts, *_), md in zip(rows, metas):
        produced[part].append((md.offset, ts))
    return topic, produced, now


def test_from_equals_get_offsets_for_the_same_time(broker, timed_topic):
    topic, produced, now = timed_topic
    all_ts = sorted(ts for recs in produced.values() for _, ts in recs)
    times = [minute(all_ts[0] - 120_000), minute(all_ts[len(all_ts) // 3]), minute(all_ts[len(all_ts) // 2]),
             minute(all_ts[-1]), format_ms(all_ts[-1] + 1), str(all_ts[len(all_ts) // 4])]
    until = str(now)       # in the past by now, after every record: each partition ends at its end
    for when in times:
        offsets = {}
        for line in sundial("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--time",
                            when).lines:
            name, part, off = line.rsplit(":", 2)
            assert name == topic
            offsets[int(part)] = int(off)
        result = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from",
                        when, "--until", until, *EVERY_FIELD))
        where = landed(result.err)
        assert set(where) == {0, 1, 2}, result.err
        printed = parse_printed(result.out)
        for p in range(3):
            if offsets[p] >= 0:
                assert where[p] == ("at", offsets[p]), (when, p, result.err)
                start = offsets[p]
            else:
                assert where[p] == ("end", len(produced[p])), (when, p, result.err)
                start = len(produced[p])
            # the records printed for the partition: every one from the start offset to its end
            assert [o for _, q, o, *_ in printed if q == p] == [o for o, _ in produced[p] if o >= start], (when, p)


def test_until_ends_each_partition_at_its_first_record_at_or_after_it(broker, timed_topic):
    topic, produced, _now = timed_topic
    all_ts = sorted(ts for recs in produced.values() for _, ts in recs)
    until = all_ts[len(all_ts) // 2]
    result = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                    "--from-beginning", "--until", format_ms(until), *EVERY_FIELD))
    printed = parse_printed(result.out)
    for p in range(3):
        expected = []
        for offset, ts in produced[p]:
            if ts >= until:
                break
            expected.append(offset)
        assert [o for _, q, o, *_ in printed if q == p] == expected, p


def test_until_in_the_future_stops_at_a_record_after_it(broker):
    """The wall clock has not reached --until: only a record at or after it ends the partition."""
    topic = unique_topic("console-future")
    create_topic(broker.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    rows = [(0, now - 60_000, None, b"before-1", None), (0, now + 40 * 60_000, None, b"after", None),
            (0, now - 30_000, None, b"before-2", None)]
    produce_records(broker.bootstrap, topic, rows)
    result = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                    "--from-beginning", "--until", format_ms(now + 30 * 60_000)))
    assert result.lines == ["before-1"]
    assert "Processed a total of 1 messages" in result.err


def test_group_commits_what_it_printed_and_resumes(broker):
    topic = unique_topic("console-group")
    create_topic(broker.bootstrap, topic, 2)
    now = int(time.time() * 1000)
    produce_records(broker.bootstrap, topic, [(i % 2, now - 1000 + i, None, f"v{i}".encode(), None)
                                              for i in range(10)])
    group = "console-" + uuid.uuid4().hex[:8]
    first = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
                   "--from-beginning", "--max-messages", "3"))
    assert len(first.lines) == 3
    client = admin(broker.bootstrap)
    try:
        committed = {tp.partition: oam.offset for tp, oam in client.list_group_offsets({group: None})[group].items()}
    finally:
        client.close()
    assert sum(committed.values()) == 3                  # the printed records, not the fetched ones
    # --from-beginning counts only where the group committed nothing
    rest = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
                  "--from-beginning", "--max-messages", "7", "--timeout-ms", "60000"))
    assert sorted(first.lines + rest.lines) == sorted(f"v{i}" for i in range(10))


def test_read_committed_leaves_out_aborted_records(broker):
    topic = unique_topic("console-txn")
    create_topic(broker.bootstrap, topic, 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="console-" + uuid.uuid4().hex[:8],
                      request_timeout_ms=15000)
    try:
        p.init_transactions()
        for word, commit in (("kept-1", True), ("dropped", False), ("kept-2", True)):
            p.begin_transaction()
            p.send(topic, value=word.encode())
            p.flush()                           # in the log before the transaction ends
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()
    committed = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                       "--from-beginning", "--isolation-level", "read_committed", "--until", "now"))
    assert committed.lines == ["kept-1", "kept-2"]
    everything = ok(run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                        "--from-beginning", "--until", "now"))
    assert everything.lines == ["kept-1", "dropped", "kept-2"]


def test_bad_input_is_one_line_and_a_non_zero_exit(broker):
    b = broker.bootstrap
    topic = unique_topic("console-bad")
    create_topic(b, topic, 1)
    missing = unique_topic("missing")
    cases = [
        (["console-consumer", "--bootstrap-server", b, "--topic", topic, "--from", "yesterday"], "bad time 'yesterday'"),
        (["console-consumer", "--bootstrap-server", b, "--topic", topic, "--until", "2026-13-01"], "bad time"),
        (["console-consumer", "--bootstrap-server", b, "--topic", missing, "--from-beginning"], "unknown topic"),
        (["console-consumer", "--bootstrap-server", b, "--topic", topic, "--partition", "4"], "no partition 4"),
        (["console-consumer", "--bootstrap-server", b, "--topic", topic, "--property", "print.colour=true"],
         "'print.colour' is not a property"),
        (["console-consumer", "--bootstrap-server", b, "--topic", topic, "--offset", "5"], "--offset needs --partition"),
        (["console-producer", "--bootstrap-server", b, "--topic", topic, "--property", "parse.key=true"],
         "line 2: no key separator found in 'no-key-here'"),
        (["console-producer", "--bootstrap-server", b, "--topic", topic, "--property", "parse.timestamp=true"],
         "line 1: bad time"),
    ]
    for argv, fragment in cases:
        result = run(*argv, stdin="k\tv\nno-key-here\n")
        try:
            assert_one_line_error(result, fragment)
        except AssertionError as exc:
            raise AssertionError(f"{' '.join(argv)} (exit {result.code}):\n{result.err}") from exc
        assert result.err.startswith(f"sundial {argv[0]}: error: ")


@pytest.mark.parametrize("tool", ["console-consumer", "console-producer"])
def test_unreachable_broker_is_one_line(tool):
    address = dead_address()
    result = run(tool, "--bootstrap-server", address, "--topic", "t", stdin="v\n", timeout_s=60)
    assert_one_line_error(result, f"cannot connect to {address} (connection refused)")
    assert result.code == 1


def test_producer_to_a_topic_the_broker_does_not_create(broker_factory):
    daemon = broker_factory(**{"auto.create.topics.enable": "false"}).start()
    missing = unique_topic("missing")
    result = run("console-producer", "--bootstrap-server", daemon.bootstrap, "--topic", missing,
                 "--request-timeout-ms", "3000", stdin="v\n")
    assert_one_line_error(result, f"unknown topic '{missing}'")


def test_sigterm_stops_a_following_consumer_cleanly(broker):
    """A consumer that follows a topic is stopped by SIGTERM: exit 0, the summary, its group's offsets committed."""
    topic = unique_topic("console-follow")
    create_topic(broker.bootstrap, topic, 1)
    produce_records(broker.bootstrap, topic, [(0, int(time.time() * 1000), None, b"first", None)])
    group = "console-" + uuid.uuid4().hex[:8]
    proc = subprocess.Popen([sys.executable, "-m", "sundial", "console-consumer", "--bootstrap-server",
                             broker.bootstrap, "--topic", topic, "--group", group, "--from-beginning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"first\n"         # it consumes, and goes on waiting for more
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert err.decode().strip().splitlines()[-1] == "Processed a total of 1 messages"
    client = admin(broker.bootstrap)
    try:
        committed = client.list_group_offsets({group: None})[group]
    finally:
        client.close()
    assert {tp.partition: oam.offset for tp, oam in committed.items()} == {0: 1}


@pytest.mark.skipif(DAEMONS_UNAVAILABLE is not None, reason=DAEMONS_UNAVAILABLE or "")
def test_sasl_through_command_config(tmp_path):
    """Both tools on a SASL_PLAINTEXT listener with SCRAM-SHA-256, through --command-config as every tool takes it."""
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    daemon = SundialProcess(tmp_path / "broker", {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256"}, port=ports["PLAINTEXT"])
    added = subprocess.run([sys.executable, "-m", "sundial", "credentials", "add", "alice", "--password",
                            "alice-pw", "--data-dir", daemon.data_dir], capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    daemon.start()
    try:
        sasl = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        props = tmp_path / "alice.properties"
        props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                         "sasl.username=alice\nsasl.password=alice-pw\n")
        topic = unique_topic("console-sasl")
        create_topic(daemon.bootstrap, topic, 1)
        ok(run("console-producer", "--bootstrap-server", sasl, "--topic", topic, "--command-config", str(props),
               "--property", "parse.key=true", stdin="k1\tv1\nk2\tv2\n"))
        out = ok(run("console-consumer", "--bootstrap-server", sasl, "--topic", topic, "--command-config",
                     str(props), "--from-beginning", "--max-messages", "2", "--property", "print.key=true")).out
        assert out.splitlines() == ["k1\tv1", "k2\tv2"]
        # without the settings: one line and a non-zero exit, not a hang or a traceback
        refused = run("console-consumer", "--bootstrap-server", sasl, "--topic", topic, "--from-beginning",
                      "--request-timeout-ms", "3000", timeout_s=90)
        assert_one_line_error(refused)
    finally:
        assert daemon.stop() == 0, daemon.log_text()[-3000:]
