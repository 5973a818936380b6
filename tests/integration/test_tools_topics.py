"""``sundial topics`` against a real daemon: create, list, describe (configs with their
source: topic, broker, default), alter-config, add-partitions, delete."""

from __future__ import annotations

import pytest

from .clients import admin
from .conftest import unique_topic
from .test_tools_cli import assert_one_line_error, sundial

pytestmark = pytest.mark.integration


def config_rows(out: str) -> dict[str, tuple[str, str]]:
    """{name: (value, source)} from describe's CONFIG VALUE SOURCE block."""
    rows = {}
    in_table = False
    for line in out.splitlines():
        stripped = line.strip()
        if stripped.startswith("CONFIG "):
            in_table = True
            continue
        if in_table and stripped:
            name, value, source = stripped.split(None, 2)
            rows[name] = (value, source)
    return rows


def test_topic_life_cycle_with_config_sources(broker_factory):
    node = broker_factory(**{"log.retention.ms": "7200000", "num.partitions": "2"}).start()
    b = node.bootstrap
    topic = unique_topic("tools-topics")

    out = sundial("topics", "create", "--bootstrap-server", b, "--topic", topic, "--partitions", "3",
                  "--config", "message.timestamp.type=LogAppendTime", "--config", "segment.ms=600000").out
    assert out.strip() == f"Created topic {topic}."
    assert topic in sundial("topics", "list", "--bootstrap-server", b).lines
    # created for real, as a client sees it
    client = admin(b)
    try:
        info = client.describe_topics([topic])[0]
        assert len(info["partitions"]) == 3
    finally:
        client.close()

    described = sundial("topics", "describe", "--bootstrap-server", b, "--topic", topic, "--all-configs").out
    first = described.splitlines()[0]
    assert first.startswith(f"Topic: {topic}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\t" in first
    assert first.endswith("Configs: message.timestamp.type=LogAppendTime,segment.ms=600000")
    partition_lines = [line for line in described.splitlines() if line.startswith(f"\tTopic: {topic}\tPartition:")]
    assert [line.split("\t")[2] for line in partition_lines] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    configs = config_rows(described)
    assert configs["message.timestamp.type"] == ("LogAppendTime", "topic")
    assert configs["segment.ms"] == ("600000", "topic")
    assert configs["retention.ms"] == ("7200000", "broker (log.retention.ms)")
    assert configs["cleanup.policy"] == ("delete", "default")
    # without --all-configs only the non-default ones
    short = config_rows(sundial("topics", "describe", "--bootstrap-server", b, "--topic", topic).out)
    assert set(short) == {"message.timestamp.type", "segment.ms", "retention.ms"}

    out = sundial("topics", "alter-config", "--bootstrap-server", b, "--topic", topic,
                  "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]",
                  "--delete-config", "segment.ms").out
    assert out.strip() == f"Completed updating config for topic {topic}."
    configs = config_rows(sundial("topics", "describe", "--bootstrap-server", b, "--topic", topic,
                                  "--all-configs").out)
    assert configs["retention.ms"] == ("60000", "topic")
    assert configs["cleanup.policy"] == ("compact,delete", "topic")
    assert configs["segment.ms"][1] == "default"

    sundial("topics", "add-partitions", "--bootstrap-server", b, "--topic", topic, "--partitions", "5")
    described = sundial("topics", "describe", "--bootstrap-server", b, "--topic", topic).out
    assert "\tPartitionCount: 5\t" in described.splitlines()[0]

    # the broker's num.partitions applies when --partitions is left out
    other = unique_topic("tools-topics-default")
    sundial("topics", "create", "--bootstrap-server", b, "--topic", other)
    assert "\tPartitionCount: 2\t" in sundial("topics", "describe", "--bootstrap-server", b, "--topic",
                                              other).out.splitlines()[0]

    # errors a user can fix: one line, non-zero
    assert_one_line_error(sundial("topics", "create", "--bootstrap-server", b, "--topic", topic, check=False),
                          "already exists")
    assert sundial("topics", "create", "--bootstrap-server", b, "--topic", topic, "--if-not-exists").code == 0
    assert_one_line_error(sundial("topics", "create", "--bootstrap-server", b, "--topic", unique_topic(),
                                  "--config", "message.timestamp.type=Sometimes", check=False),
                          "message.timestamp.type")
    assert_one_line_error(sundial("topics", "alter-config", "--bootstrap-server", b, "--topic", topic,
                                  "--add-config", "no.such.config=1", check=False), "no.such.config")
    assert_one_line_error(sundial("topics", "add-partitions", "--bootstrap-server", b, "--topic", topic,
                                  "--partitions", "2", check=False), "InvalidPartitionsError")

    out = sundial("topics", "delete", "--bootstrap-server", b, "--topic", f"{topic},{other}").out
    assert out.splitlines() == [f"Deleted topic {topic}.", f"Deleted topic {other}."]
    remaining = sundial("topics", "list", "--bootstrap-server", b, "--exclude-internal").lines
    assert topic not in remaining and other not in remaining
    assert sundial("topics", "delete", "--bootstrap-server", b, "--topic", topic, "--if-exists").code == 0
