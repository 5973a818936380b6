"""Shared tool helpers: argument parsing, client settings, tables, progress, error handling."""

from __future__ import annotations

import io
import socket
import time

import pytest

from sundial.tools import common
from sundial.tools.preflight import PreflightError, connect_any, preflight
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
    with pytest.raises(PreflightError) as info:
        preflight([("127.0.0.1", first)], 600_000, {})
    assert str(info.value) == f"cannot connect to 127.0.0.1:{first} (connection refused)"
    with pytest.raises(PreflightError) as info:
        preflight([("127.0.0.1", first), ("127.0.0.1", second)], 600_000, {})
    assert str(info.value) == (f"cannot connect to 127.0.0.1:{first} (connection refused), "
                               f"127.0.0.1:{second} (connection refused)")


def test_probe_connects_to_the_address_that_listens():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        sock, host, got = connect_any([("127.0.0.1", _closed_port()), ("127.0.0.1", port)], 600_000,
                                      time.monotonic() + 600)
        sock.close()
        assert (host, got) == ("127.0.0.1", port)


def test_probe_times_out_when_the_broker_does_not_answer():
    with socket.socket() as listening:   # accepts the connection (backlog), never answers ApiVersions
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        with pytest.raises(PreflightError) as info:
            preflight([("127.0.0.1", port)], 300, {})
    assert str(info.value) == f"timed out after 0.3 s (no answer to ApiVersions from 127.0.0.1:{port})"


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


@pytest.mark.parametrize("error, line", [
    ("TopicAuthorizationFailedError", "not authorized (topic: detail)"),
    ("GroupAuthorizationFailedError", "not authorized (group: detail)"),
    ("ClusterAuthorizationFailedError", "not authorized (cluster: detail)"),
    ("SaslAuthenticationFailedError", "connected but authentication failed: detail"),
    ("IncompatibleBrokerVersion", "unsupported version (detail)"),
    ("UnsupportedVersionError", "unsupported version (detail)"),
    ("KafkaTimeoutError", "timed out after 2.5 s (detail)"),
    ("RequestTimedOutError", "timed out after 2.5 s (detail)"),
    ("KafkaConnectionError", "cannot connect to h:1 (detail)"),
    ("NodeNotReadyError", "cannot connect to h:1 (detail)"),
    ("UnknownTopicOrPartitionError", "UnknownTopicOrPartitionError: detail"),
])
def test_kafka_errors_get_one_of_the_five_lines(error, line):
    import kafka.errors

    exc = getattr(kafka.errors, error)("detail")
    assert common.kafka_error_line(exc, timeout_ms=2500, where="h:1") == line


def test_run_tool_names_the_timeout(capsys):
    from kafka.errors import KafkaTimeoutError

    def slow():
        raise KafkaTimeoutError("no answer")

    assert run_tool("demo", slow, timeout_ms=15_000) == EXIT_ERROR
    assert capsys.readouterr().err == "sundial demo: error: timed out after 15 s (no answer)\n"


def test_refusal_words_authorization_and_version_codes():
    import kafka.errors as ke

    assert str(common.refusal(29, operation="Describe", resource="topic 't'", doing="describe topic 't'")) == \
        "not authorized (Describe on topic 't')"
    assert str(common.refusal(ke.GroupAuthorizationFailedError("x"), operation="Read", resource="group 'g'",
                              doing="commit")) == "not authorized (Read on group 'g')"
    assert str(common.refusal(35, operation="Describe", resource="x", doing="describe log dirs")) == \
        "unsupported version (describe log dirs: UnsupportedVersionError)"
    assert str(common.refusal(37, operation="Create", resource="topic 't'", doing="create topic 't'",
                              message="bad count")) == "cannot create topic 't': InvalidPartitionsError: bad count"


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
