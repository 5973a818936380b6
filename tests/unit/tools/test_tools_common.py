"""Shared tool helpers: argument parsing, client settings, tables, progress, error handling."""

from __future__ import annotations

import io
import socket

import pytest

from sundial.tools import common
from sundial.tools.common import (
    EXIT_ERROR,
    ClientSettings,
    Progress,
    ToolError,
    format_table,
    parse_key_values,
    parse_partitions,
    read_client_properties,
    run_tool,
    split_names,
)


@pytest.mark.parametrize("text, expected", [
    (None, None), ("", None), ("0", [0]), ("0,1,1", [0, 1]), ("4-6,0", [0, 4, 5, 6]), (" 2 , 3 ", [2, 3]),
])
def test_parse_partitions(text, expected):
    assert parse_partitions(text) == expected


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1;2"])
def test_bad_partitions(text):
    with pytest.raises(ToolError):
        parse_partitions(text)


def test_parse_key_values():
    assert parse_key_values(["a=1,b=2", "c=x=y", "cleanup.policy=[compact,delete]"]) == {
        "a": "1", "b": "2", "c": "x=y", "cleanup.policy": "compact,delete"}
    with pytest.raises(ToolError):
        parse_key_values(["novalue"])
    with pytest.raises(ToolError):
        parse_key_values(["=1"])


def test_split_names():
    assert split_names(["a,b", "b", " c "]) == ["a", "b", "c"]
    assert split_names(None) == []


def test_format_table_pads_columns():
    text = format_table(("GROUP", "LAG"), [("g", 10), ("longer-group", None)])
    assert text.splitlines() == ["GROUP        LAG", "g            10", "longer-group -"]


def test_client_properties(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# comment\nsecurity.protocol=sasl_plaintext\nsasl.mechanism=SCRAM-SHA-256\n"
                    'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                    'username="alice" password="s3cr\\"et";\nclient.id: tools\n')
    assert read_client_properties(str(path)) == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
        "sasl_plain_password": 's3cr\\"et', "client_id": "tools"}
    (tmp_path / "bad.properties").write_text("max.poll.records=5\n")
    with pytest.raises(ToolError, match="unsupported client setting"):
        read_client_properties(str(tmp_path / "bad.properties"))
    with pytest.raises(ToolError, match="cannot read"):
        read_client_properties(str(tmp_path / "missing.properties"))


@pytest.mark.parametrize("bootstrap, fragment", [
    ("", "no address given"),
    ("garbage", "the port is missing"),
    ("kafka", "the port is missing"),
    ("host:port", "not a number"),
    ("a b:1", "not a host name"),
    ("h:123456", "not in 1-65535"),
    ("h:0", "not in 1-65535"),
    ("::1:9092", "[::1]:9092"),
    ("[::1]", "the port is missing"),
    ("a:1,b", "'b': the port is missing"),
])
def test_malformed_bootstrap_is_a_usage_error(bootstrap, fragment):
    with pytest.raises(ToolError) as info:
        ClientSettings(bootstrap, flag="--source-bootstrap")
    assert info.value.exit_code == 2
    assert str(info.value).startswith("--source-bootstrap: ")
    assert fragment in str(info.value)


def test_good_bootstrap():
    s = ClientSettings(" 127.0.0.1:9092, [::1]:9093,kafka.example.com:19092")
    assert s.servers == [("127.0.0.1", 9092), ("::1", 9093), ("kafka.example.com", 19092)]
    assert s.bootstrap == "127.0.0.1:9092,[::1]:9093,kafka.example.com:19092"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_probe_fails_at_once_when_every_address_refuses():
    first, second = _closed_port(), _closed_port()
    with pytest.raises(ToolError) as info:
        common.probe_bootstrap([("127.0.0.1", first)], 600_000, f"127.0.0.1:{first}")
    assert str(info.value) == f"cannot reach a broker at 127.0.0.1:{first}: connection refused"
    shown = f"127.0.0.1:{first},127.0.0.1:{second}"
    with pytest.raises(ToolError) as info:
        common.probe_bootstrap([("127.0.0.1", first), ("127.0.0.1", second)], 600_000, shown)
    assert str(info.value) == (f"cannot reach a broker at {shown} (127.0.0.1:{first}: connection refused; "
                               f"127.0.0.1:{second}: connection refused)")


def test_probe_succeeds_when_one_address_listens():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        common.probe_bootstrap([("127.0.0.1", _closed_port()), ("127.0.0.1", port)], 600_000, "both")


def test_run_tool_turns_errors_into_one_line(capsys):
    def fails():
        raise ToolError("unknown topic 'x'")

    assert run_tool("demo", fails) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err == "sundial demo: error: unknown topic 'x'\n"

    def kafka_fails():
        from kafka.errors import KafkaTimeoutError

        raise KafkaTimeoutError("KafkaTimeoutError: Unable to bootstrap from h:1")

    assert run_tool("demo", kafka_fails) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Unable to bootstrap" in err and "Traceback" not in err

    def bug():
        return {}["missing"]

    assert run_tool("demo", bug) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KeyError" in err

    assert run_tool("demo", lambda: 3) == 3
    assert run_tool("demo", lambda: None) == 0


def test_progress_lines():
    out = io.StringIO()
    p = Progress("dump-log x", 1000, mode="always", interval_s=0.0, stream=out)
    for done in (100, 500, 1000):
        p.update(done)
    p.finish(1000)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("dump-log x: progress  10.0% (100 B of 1000 B")
    assert lines[-1].startswith("dump-log x: done 100.0%")
    quiet = io.StringIO()
    q = Progress("small", 10, mode="auto", stream=quiet)
    q.update(10)
    q.finish(10)
    assert quiet.getvalue() == ""


def test_describe_error_strips_class_names():
    from kafka.errors import UnknownTopicOrPartitionError

    assert common.describe_error(ValueError("ValueError: bad")) == "bad"
    assert common.describe_error(UnknownTopicOrPartitionError("x")) == "x"
    assert common.describe_error(UnknownTopicOrPartitionError()) == "UnknownTopicOrPartitionError"
    assert common.describe_error(OSError("two\nlines")) == "two lines"
