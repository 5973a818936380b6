"""``sundial consumer-groups`` without a broker: the views of both group types, the tables Kafka 4's
kafka-consumer-groups.sh prints (--list --type/--state, --describe --members --verbose, --state
--verbose) and the command-line checks.

The consumer-protocol view is built from a real ConsumerGroupDescribe v1 response: the dict
the broker's handler answers, encoded by the broker's codec and decoded with Kafka's schema,
so the tool reads exactly what crosses the wire.
"""

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
from sundial.tools.consumer_groups import (
    assignment_text,
    list_rows,
    member_rows,
    parse_states,
    parse_types,
    state_rows,
)
from sundial.tools.wire import GroupView, MemberView, classic_group_view, consumer_group_view

ORDERS, AUDIT = uuid.uuid4(), uuid.uuid4()


def _tps(**topics) -> dict:
    ids = {"orders": ORDERS, "audit": AUDIT}
    return {"topic_partitions": [{"topic_id": ids[t], "topic_name": t, "partitions": ps} for t, ps in topics.items()]}


def _described(members, state="Reconciling", group_epoch=7, assignment_epoch=6):
    body = {"throttle_time_ms": 0, "groups": [{
        "error_code": 0, "error_message": None, "group_id": "billing", "group_state": state,
        "group_epoch": group_epoch, "assignment_epoch": assignment_epoch, "assignor_name": "range",
        "authorized_operations": -(2 ** 31), "members": members}]}
    wire = bytes(encode_response_body(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body))
    framed = (0).to_bytes(4, "big") + (7).to_bytes(4, "big") + b"\x00" + wire   # size (unused), correlation, tags
    _, response = decode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, framed)
    (group,) = response.groups
    return group


def _member(member_id, *, instance=None, epoch=6, assignment=None, target=None, client="c", member_type=1):
    return {"member_id": member_id, "instance_id": instance, "rack_id": None, "member_epoch": epoch,
            "client_id": client, "client_host": "/10.0.0.1", "subscribed_topic_names": ["orders", "audit"],
            "subscribed_topic_regex": None, "assignment": assignment or _tps(), "target_assignment": target or _tps(),
            "member_type": member_type}


def test_consumer_group_view_from_the_wire():
    group = _described([
        _member("m-1", instance="i-1", epoch=6, assignment=_tps(orders=[2, 0], audit=[1]),
                target=_tps(orders=[0])),
        _member("m-2", epoch=7, assignment=_tps(), target=_tps(orders=[2], audit=[1]), client="c2"),
    ])
    view = consumer_group_view(group, coordinator_id=1)
    assert (view.group_id, view.group_type, view.state, view.assignor) == ("billing", "consumer", "Reconciling",
                                                                            "range")
    assert (view.group_epoch, view.assignment_epoch, view.coordinator_id, view.exists) == (7, 6, 1, True)
    first, second = view.members
    assert first == MemberView("m-1", "i-1", "c", "/10.0.0.1", (("audit", 1), ("orders", 0), ("orders", 2)), 6,
                               (("orders", 0),), True)
    assert (second.instance_id, second.assignment, second.target_assignment, second.member_epoch) == \
        (None, (), (("audit", 1), ("orders", 2)), 7)


def test_members_verbose_is_kafkas_layout_with_epochs_and_both_assignments():
    view = consumer_group_view(_described([
        _member("m-1", instance="i-1", epoch=6, assignment=_tps(orders=[2, 0], audit=[1]), target=_tps(orders=[0])),
        _member("m-2", epoch=7, target=_tps(orders=[2], audit=[1]), client="c2"),
    ]))
    headers, rows = member_rows(view, verbose=True)
    assert headers == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                       "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    assert rows == [("billing", "m-1", "i-1", "/10.0.0.1", "c", 3, 6, "audit:1;orders:0,2", 6, "orders:0"),
                    ("billing", "m-2", "-", "/10.0.0.1", "c2", 0, 7, "-", 6, "audit:1;orders:2")]
    # Without --verbose: no epochs; without instance ids: no GROUP-INSTANCE-ID column (as Kafka).
    plain = consumer_group_view(_described([_member("m-3", assignment=_tps(orders=[1]))]))
    headers, rows = member_rows(plain, verbose=False)
    assert headers == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert rows == [("billing", "m-3", "/10.0.0.1", "c", 1)]


def test_a_group_with_classic_and_consumer_members_gets_the_upgraded_column():
    view = consumer_group_view(_described([_member("new", assignment=_tps(orders=[0])),
                                           _member("old", member_type=0, assignment=_tps(orders=[1]))]))
    headers, rows = member_rows(view, verbose=True)
    assert headers[-1] == "UPGRADED"
    assert [r[-1] for r in rows] == ["true", "false"]
    assert member_rows(view, verbose=False)[0][-1] == "#PARTITIONS"


def test_classic_group_view_and_its_rows():
    info = {"group_state": "Stable", "protocol_type": "consumer", "protocol_data": "range", "members": [
        {"member_id": "kp-1", "group_instance_id": None, "client_id": "kafka-python", "client_host": "/127.0.0.1",
         "member_assignment": {"version": 0, "assigned_partitions": [{"topic": "orders", "partitions": [3, 1]}],
                               "user_data": b""}},
        {"member_id": "kp-2", "group_instance_id": "static-2", "client_id": "kafka-python",
         "client_host": "/127.0.0.2", "member_assignment": b""}]}
    view = classic_group_view("billing", info, coordinator_id=1)
    assert (view.group_type, view.state, view.assignor, view.group_epoch, view.exists) == \
        ("classic", "Stable", "range", None, True)
    assert [m.assignment for m in view.members] == [(("orders", 1), ("orders", 3)), ()]
    headers, rows = member_rows(view, verbose=True)
    assert headers[2] == "GROUP-INSTANCE-ID"
    assert rows == [("billing", "kp-1", "-", "/127.0.0.1", "kafka-python", 2, None, "orders:1,3", None, "-"),
                    ("billing", "kp-2", "static-2", "/127.0.0.2", "kafka-python", 0, None, "-", None, "-")]
    headers, rows = state_rows(view, "h:1 (1)", verbose=True)
    assert headers == ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                       "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert rows == [("billing", "h:1 (1)", "range", "Stable", None, None, 2)]
    assert not classic_group_view("gone", {"group_state": "Dead"}).exists


def test_state_rows_of_a_consumer_group():
    view = consumer_group_view(_described([_member("m")], state="Stable", group_epoch=4, assignment_epoch=4))
    assert state_rows(view, "h:1 (1)", verbose=False) == (
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [("billing", "h:1 (1)", "range", "Stable", 1)])
    assert state_rows(view, "h:1 (1)", verbose=True)[1] == [("billing", "h:1 (1)", "range", "Stable", 4, 4, 1)]
    empty = GroupView("e", "consumer", "Empty", "")
    assert state_rows(empty, "-", verbose=False)[1] == [("e", "-", "-", "Empty", 0)]


@pytest.mark.parametrize("pairs, text", [
    ((), "-"),
    ((("b", 2), ("a", 10), ("a", 9), ("b", 0)), "a:9,10;b:0,2"),
    ((("orders", 0),), "orders:0"),
])
def test_assignment_text(pairs, text):
    assert assignment_text(pairs) == text


def test_list_rows_with_type_and_state():
    listed = [{"group_id": "z", "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"},
              {"group_id": "a", "protocol_type": "consumer", "group_state": "Empty", "group_type": "classic"},
              {"group_id": "old", "protocol_type": "", "group_state": "Empty"},          # before ListGroups v5
              {"group_id": "connect", "protocol_type": "connect", "group_state": "Stable"}]
    assert list_rows(listed, with_type=True, with_state=True) == (
        ["GROUP", "TYPE", "STATE"],
        [("a", "classic", "Empty"), ("connect", "Unknown", "Stable"), ("old", "classic", "Empty"),
         ("z", "consumer", "Stable")])
    assert list_rows(listed[:1], with_type=True, with_state=False) == (["GROUP", "TYPE"], [("z", "consumer")])
    assert list_rows(listed[:1], with_type=False, with_state=True) == (["GROUP", "STATE"], [("z", "Stable")])


def test_type_and_state_values():
    assert parse_types(None) == parse_types("") == []
    assert parse_types("Consumer, classic,consumer") == ["consumer", "classic"]
    assert parse_states("stable,ASSIGNING") == ["Stable", "Assigning"]
    with pytest.raises(ToolError) as e:
        parse_types("share")
    assert e.value.exit_code == EXIT_USAGE and "valid types are: classic, consumer" in str(e.value)
    with pytest.raises(ToolError) as e:
        parse_states("Running")
    assert e.value.exit_code == EXIT_USAGE and "Reconciling" in str(e.value)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["consumer-groups", "--bootstrap-server", "127.0.0.1:1", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv, code, fragment", [
    (("--list", "--type", "streams"), EXIT_USAGE, "invalid type 'streams'"),
    (("--list", "--state", "Sleeping"), EXIT_USAGE, "invalid state 'Sleeping'"),
    (("--describe", "--group", "g", "--type", "consumer"), 1, "--type only goes with --list"),
    (("--describe", "--group", "g", "--state", "Stable"), 1, "--state takes states only with --list"),
    (("--list", "--verbose"), 1, "--verbose only goes with --describe"),
])
def test_bad_combinations_fail_before_connecting(argv, code, fragment):
    got, out, err = _run(*argv)
    assert got == code and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sundial consumer-groups: error: ") and fragment in lines[0]
