"""``sundial share-groups`` without a broker: the tables kafka-share-groups.sh prints (offsets with
lag, members, state, with and without --verbose), read from real ShareGroupDescribe and
DescribeShareGroupOffsets responses (the broker's dicts encoded by its codec, decoded with Kafka's
schemas), and the command-line checks."""

from __future__ import annotations

import contextlib
import io
import uuid

import pytest

from sundial.cli import main
from sundial.protocol import decode_response
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import encode_response_body
from sundial.tools.common import EXIT_USAGE, ToolError
from sundial.tools.share_groups import (assignment_text, member_rows, offset_rows, parse_states, state_rows)

JOBS, AUDIT = uuid.uuid4(), uuid.uuid4()


def _decoded(api_key, version, body):
    wire = bytes(encode_response_body(api_key, version, body))
    framed = (0).to_bytes(4, "big") + (7).to_bytes(4, "big") + b"\x00" + wire
    return decode_response(api_key, version, framed)[1]


def _described():
    def tps(**topics):
        ids = {"jobs": JOBS, "audit": AUDIT}
        return {"topic_partitions": [{"topic_id": ids[t], "topic_name": t, "partitions": ps}
                                     for t, ps in topics.items()]}
    members = [{"member_id": "m-2", "rack_id": None, "member_epoch": 4, "client_id": "rdkafka",
                "client_host": "/10.0.0.2", "subscribed_topic_names": ["jobs"], "assignment": tps(jobs=[1, 0])},
               {"member_id": "m-1", "rack_id": None, "member_epoch": 3, "client_id": "rdkafka",
                "client_host": "/10.0.0.1", "subscribed_topic_names": ["jobs", "audit"],
                "assignment": tps(jobs=[0], audit=[2])}]
    body = {"throttle_time_ms": 0, "groups": [{"error_code": 0, "error_message": None, "group_id": "workers",
                                               "group_state": "Stable", "group_epoch": 5, "assignment_epoch": 5,
                                               "assignor_name": "simple", "members": members,
                                               "authorized_operations": -(2 ** 31)}]}
    return _decoded(ApiKey.SHARE_GROUP_DESCRIBE, 1, body).groups[0]


def test_members_and_state_tables():
    group = _described()
    headers, rows = member_rows(group, verbose=False)
    assert headers == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert rows == [("workers", "m-1", "/10.0.0.1", "rdkafka", 2, "audit:2;jobs:0"),
                    ("workers", "m-2", "/10.0.0.2", "rdkafka", 2, "jobs:0,1")]
    headers, rows = member_rows(group, verbose=True)
    assert headers[-2:] == ["MEMBER-EPOCH", "ASSIGNMENT"] and rows[0][-2:] == (3, "audit:2;jobs:0")
    headers, rows = state_rows(group, "h:9092 (1)", verbose=False)
    assert (headers, rows) == (["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"], [("workers", "h:9092 (1)", "Stable", 2)])
    headers, rows = state_rows(group, "h:9092 (1)", verbose=True)
    assert headers == ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert rows == [("workers", "h:9092 (1)", "Stable", 5, 5, 2)]
    assert assignment_text([]) == "-"


def test_offsets_table_from_a_describe_offsets_response():
    body = {"throttle_time_ms": 0, "groups": [{"group_id": "workers", "error_code": 0, "error_message": None,
                                               "topics": [{"topic_name": "jobs", "topic_id": JOBS, "partitions": [
                                                   {"partition_index": 0, "start_offset": 40, "leader_epoch": 0,
                                                    "lag": 7, "error_code": 0, "error_message": None},
                                                   {"partition_index": 1, "start_offset": 3, "leader_epoch": -1,
                                                    "lag": -1, "error_code": 0, "error_message": None}]}]}]}
    group = _decoded(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, body).groups[0]
    offsets = sorted((t.topic_name, p.partition_index, p.start_offset, p.leader_epoch, p.lag)
                     for t in group.topics for p in t.partitions)
    headers, rows = offset_rows("workers", offsets, verbose=False)
    assert headers == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert rows == [("workers", "jobs", 0, 40, 7), ("workers", "jobs", 1, 3, "-")]
    headers, rows = offset_rows("workers", offsets, verbose=True)
    assert headers == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    assert rows == [("workers", "jobs", 0, 0, 40, 7), ("workers", "jobs", 1, "-", 3, "-")]


def test_states_are_kafkas():
    assert parse_states("stable,EMPTY") == ["Stable", "Empty"]
    assert parse_states(None) == []
    with pytest.raises(ToolError) as exc:
        parse_states("Reconciling")
    assert exc.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("argv, fragment", [
    (["--reset-offsets", "--group", "g", "--topic", "t"], "needs a scenario"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "--topic"),
    (["--reset-offsets", "--to-latest", "--topic", "t"], "exactly one --group"),
    (["--describe"], "--group"),
    (["--delete-offsets", "--group", "g"], "--topic"),
    (["--delete-offsets", "--group", "g", "--topic", "t:0"], "whole topics"),
    (["--list", "--to-latest"], "only goes with --reset-offsets"),
    (["--list", "--members"], "only go with --describe"),
    (["--describe", "--group", "g", "--state", "Stable"], "takes states only with --list"),
])
def test_command_line_checks(argv, fragment):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["share-groups", "--bootstrap-server", "127.0.0.1:1", *argv])
    assert code == EXIT_USAGE, err.getvalue()
    assert fragment in err.getvalue()
