"""The ``sundial`` tools as a user runs them: a subprocess per command against real daemons.

Also the helpers the other ``test_tools_*`` modules use (:func:`sundial`), and the
error contract of every wire tool: an unreachable broker, an unknown topic or group and
a bad time each print exactly one line on stderr (no traceback) and exit non-zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import NamedTuple

import pytest

from .conftest import free_port, unique_topic
from .clients import create_topic, producer

pytestmark = pytest.mark.integration


class Result(NamedTuple):
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def sundial(*argv: str, timeout_s: float = 120.0, check: bool = True) -> Result:
    """Run ``python -m sundial ARGV`` (the ``sundial`` command) and capture its output."""
    env = dict(os.environ)
    env.pop("SUNDIAL_TOOLS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "sundial", *argv], capture_output=True, text=True,
                          timeout=timeout_s, env=env)
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    if check:
        assert result.code == 0, f"sundial {' '.join(argv)} exited {result.code}:\n{result.err}\n{result.out}"
    return result


def sundial_in_process(*argv: str) -> Result:
    """The same command run in this process (for loops of many look-ups; no interpreter start-up)."""
    import contextlib
    import io

    from sundial.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    result = Result(code, out.getvalue(), err.getvalue())
    assert result.code == 0, f"sundial {' '.join(argv)} exited {result.code}:\n{result.err}\n{result.out}"
    return result


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.code != 0, result
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{result.err}"
    assert lines[0].startswith("sundial "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def table(result: Result) -> list[dict]:
    """Rows of a Kafka-style aligned table (header line + rows) as dicts."""
    lines = [line for line in result.lines if line.strip()]
    header = lines[0].split()
    rows = []
    for line in lines[1:]:
        cells = line.split()
        rows.append(dict(zip(header, cells)))
    return rows


def dead_address() -> str:
    return f"127.0.0.1:{free_port()}"


WIRE_COMMANDS = {
    "get-offsets": ["get-offsets", "--bootstrap-server", "{A}", "--topic", "t"],
    "topics list": ["topics", "list", "--bootstrap-server", "{A}"],
    "topics describe": ["topics", "describe", "--bootstrap-server", "{A}"],
    "topics create": ["topics", "create", "--bootstrap-server", "{A}", "--topic", "t"],
    "consumer-groups": ["consumer-groups", "--bootstrap-server", "{A}", "--list"],
    "failover": ["failover", "--source-bootstrap", "{A}", "--target-bootstrap", "{A}", "--group", "g",
                 "--safety", "15m"],
    "mirror": ["mirror", "--source-bootstrap", "{A}", "--target-bootstrap", "{A}", "--topics", "t"],
}


@pytest.mark.parametrize("name", sorted(WIRE_COMMANDS))
def test_unreachable_broker_is_one_line(name):
    address = dead_address()
    argv = [a.replace("{A}", address) for a in WIRE_COMMANDS[name]] + ["--timeout-ms", "1500"]
    # gives up (it does not hang on the clients' default timeouts): the subprocess limit is the guard
    result = sundial(*argv, check=False, timeout_s=90)
    assert_one_line_error(result, "cannot connect to", address)


@pytest.mark.parametrize("name", sorted(WIRE_COMMANDS))
def test_refused_bootstrap_fails_fast(name):
    """Every bootstrap address refuses: one line at once, not after --timeout-ms (default 15 s)."""
    address = dead_address()
    argv = [a.replace("{A}", address) for a in WIRE_COMMANDS[name]]
    result = sundial(*argv, check=False, timeout_s=60)
    assert_one_line_error(result, f"cannot connect to {address} (connection refused)")
    assert result.code == 1


def test_refused_bootstrap_returns_within_seconds():
    # A generous bound on a busy host (interpreter start-up included); the default timeout is 15 s.
    address = dead_address()
    started = time.monotonic()
    result = sundial("get-offsets", "--bootstrap-server", address, "--topic", "t", check=False, timeout_s=60)
    assert_one_line_error(result, "cannot connect to", "connection refused")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("argv, fragment", [
    (["get-offsets", "--bootstrap-server", "garbage", "--topic", "t"],
     "--bootstrap-server: bad address 'garbage': the port is missing"),
    (["topics", "list", "--bootstrap-server", "127.0.0.1:99999"], "the port 99999 is not in 1-65535"),
    (["consumer-groups", "--bootstrap-server", "::1:9092", "--list"], "[::1]:9092"),
    (["mirror", "--source-bootstrap", "127.0.0.1:1", "--target-bootstrap", "kafka", "--topics", "t"],
     "--target-bootstrap: bad address 'kafka': the port is missing"),
    (["failover", "--source-bootstrap", "a b:1", "--target-bootstrap", "127.0.0.1:1", "--group", "g",
      "--safety", "15m"], "--source-bootstrap: bad address 'a b:1'"),
])
def test_malformed_bootstrap_is_a_usage_error(argv, fragment):
    result = sundial(*argv, check=False, timeout_s=60)
    assert_one_line_error(result, fragment)
    assert result.code == 2


def test_unknown_topic_group_and_bad_time_are_one_line(broker):
    b = broker.bootstrap
    missing = unique_topic("missing")
    assert_one_line_error(sundial("get-offsets", "--bootstrap-server", b, "--topic", missing, check=False),
                          "unknown topic", missing)
    assert_one_line_error(sundial("topics", "describe", "--bootstrap-server", b, "--topic", missing, check=False),
                          "unknown topic")
    assert_one_line_error(sundial("topics", "delete", "--bootstrap-server", b, "--topic", missing, check=False),
                          "unknown topic")
    assert_one_line_error(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group",
                                  "no-such-group-" + missing, check=False), "does not exist")
    topic = unique_topic("tools-err")
    create_topic(b, topic, 1)
    assert_one_line_error(sundial("get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", "yesterday",
                                  check=False), "bad time 'yesterday'")
    assert_one_line_error(sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g",
                                  "--topic", topic, "--by-duration", "fortnight", check=False), "bad duration")
    assert_one_line_error(sundial("failover", "--source-bootstrap", b, "--target-bootstrap", b, "--group", "g",
                                  "--safety", "15 minutes", check=False), "bad duration")
    assert_one_line_error(sundial("mirror", "--source-bootstrap", b, "--target-bootstrap", b, "--topics", missing,
                                  check=False), "unknown topic")
    assert_one_line_error(sundial("get-offsets", "--bootstrap-server", b, "--topic", topic, "--partitions", "5",
                                  check=False), "no partition 5")


def test_credentials_and_acls_work_offline_and_errors_are_one_line(tmp_path):
    data = str(tmp_path / "data")
    added = sundial("credentials", "add", "alice", "--password", "s3cret", "--data-dir", data)
    assert "stored SCRAM-SHA-256, SCRAM-SHA-512 credentials for alice" in added.out
    assert sundial("credentials", "list", "--data-dir", data).out.startswith("alice\t")
    assert_one_line_error(sundial("credentials", "delete", "bob", "--data-dir", data, check=False),
                          "sundial credentials: error: no user 'bob'")
    rules = sundial("acls", "add", "--allow-principal", "User:app", "--producer", "--topic", "orders",
                    "--data-dir", data)
    assert "4 new rule(s)" in rules.out
    assert "ALLOW User:app from host * to WRITE TOPIC LITERAL:orders" in sundial("acls", "list", "--data-dir",
                                                                                   data).out
    assert_one_line_error(sundial("acls", "remove", "--allow-principal", "User:bob", "--operation", "Read",
                                  "--topic", "orders", "--data-dir", data, check=False),
                          "sundial acls: error: no matching rule")
    bad = sundial("acls", "add", "--allow-principal", "alice", "--operation", "Read", "--topic", "x",
                  "--data-dir", data, check=False)
    assert_one_line_error(bad, "sundial acls: error: principal 'alice' must look like User:<name>")
    assert bad.code == 1
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_one_line_error(sundial("credentials", "list", "--data-dir", str(blocker / "data"), check=False),
                          "sundial credentials: error: ")


def test_dump_log_missing_file_is_one_line(tmp_path):
    assert_one_line_error(sundial("dump-log", "--files", str(tmp_path / "00000000000000000000.log"), check=False),
                          "file not found")


def test_help_of_every_command_runs():
    top = sundial("--help")
    for name in ("serve", "topics", "get-offsets", "dump-log", "consumer-groups", "failover", "mirror",
                 "credentials", "acls"):
        assert name in top.out
    assert "exit codes:" in top.out and "seed 0" not in top.out
    for argv in (["topics", "--help"], ["get-offsets", "--help"], ["dump-log", "--help"],
                 ["consumer-groups", "--help"], ["failover", "--help"], ["mirror", "--help"],
                 ["credentials", "--help"], ["acls", "--help"], ["serve", "--help"],
                 ["topics", "create", "--help"]):
        result = sundial(*argv)
        assert result.out.startswith("usage: sundial"), argv
        assert "examples:" in result.out or argv[0] == "topics" and len(argv) == 3


def produce_records(bootstrap: str, topic: str, rows, **kwargs) -> list:
    """Send ``rows`` of (partition, timestamp_ms, key, value, headers); returns RecordMetadata in order."""
    p = producer(bootstrap, **kwargs)
    try:
        futures = [p.send(topic, key=k, value=v, partition=part, timestamp_ms=ts, headers=list(h or []))
                   for part, ts, k, v, h in rows]
        p.flush()
        return [f.get(timeout=30) for f in futures]
    finally:
        p.close()
