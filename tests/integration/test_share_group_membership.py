"""Share-group membership (KIP-932) with the real daemon: confluent-kafka's ShareConsumer joins,
heartbeats, is assigned by the ``simple`` assignor and leaves; ShareGroupDescribe and ListGroups are
sent on the wire with the project's codec (confluent-kafka 2.16.1 has no share-group admin calls);
the membership survives kill -9, and a silent member is fenced after its session timeout.

Ground truth is computed here: the members the test started, the topic's partitions, and the
``simple`` assignor's rule that every partition is read and two members' counts differ by at most
one. Waits end on conditions with generous deadlines, never on sleeps alone.
"""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from sundial.protocol.api_keys import ApiKey  # noqa: E402
from sundial.protocol.codec import decode_response, encode_request  # noqa: E402

from .clients import RawConnection  # noqa: E402
from .conftest import unique_topic  # noqa: E402

DEADLINE_S = 60
#: group.share.enable: share groups are on even where this build does not serve ShareFetch yet (then
#: share.version is not finalized); a no-op once it does.
FAST = {"group.share.enable": "true", "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000",
        "group.share.session.timeout.ms": "6000", "group.share.min.session.timeout.ms": "6000"}


class Wire(RawConnection):
    """One raw connection speaking the share-group APIs with the project's codec."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        super().__init__(host, int(port), "wire-test")

    def describe(self, group: str):
        response = self.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                             "include_authorized_operations": False})
        (described,) = response.groups
        return described

    def list_groups(self, types=("share",), states=()):
        response = self.call(ApiKey.LIST_GROUPS, 5, {"states_filter": list(states), "types_filter": list(types)})
        return response

    def heartbeat(self, group: str, member: str, epoch: int, topics=None):
        return self.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": group, "member_id": member,
                                                          "member_epoch": epoch, "rack_id": None,
                                                          "subscribed_topic_names": topics})

    def close(self) -> None:
        self.sock.close()


def wait_for(check, what: str, consumers=(), timeout_s: float = DEADLINE_S):
    """Poll the consumers (their heartbeats run on their own thread; poll serves callbacks) until
    ``check()`` returns a true value."""
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        for c in consumers:
            try:
                c.poll(0.1)
            except Exception:       # the fetch side may not be served; membership is what is tested
                pass
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def make_topic(bootstrap: str, partitions: int) -> str:
    topic = unique_topic("share")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def share_consumer(bootstrap: str, group: str, client_id: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                          "log_level": 3})


def balanced(described, members: int, partitions: int) -> bool:
    """Every partition read, counts within one, everyone at the group's assignment epoch."""
    if described.error_code != 0 or len(described.members) != members:
        return False
    counts = [sum(len(tp.partitions) for tp in m.assignment.topic_partitions) for m in described.members]
    read = {(tp.topic_name, p) for m in described.members for tp in m.assignment.topic_partitions
            for p in tp.partitions}
    return (len(read) == partitions and max(counts) - min(counts) <= 1
            and all(m.member_epoch == described.assignment_epoch for m in described.members)
            and described.assignment_epoch == described.group_epoch)


def test_share_consumers_join_are_assigned_described_listed_and_leave(broker_factory):
    daemon = broker_factory(**FAST).start()
    topic = make_topic(daemon.bootstrap, 3)
    group = unique_topic("sg")
    wire = Wire(daemon.bootstrap)
    consumers = []
    try:
        for i in range(2):
            c = share_consumer(daemon.bootstrap, group, f"share-client-{i}")
            c.subscribe([topic])
            consumers.append(c)
        described = wait_for(lambda: (d := wire.describe(group)) and balanced(d, 2, 3) and d, "two balanced members",
                             consumers)
        assert described.group_state == "Stable" and described.assignor_name == "simple"
        assert sorted(m.client_id for m in described.members) == ["share-client-0", "share-client-1"]
        assert all(m.subscribed_topic_names == [topic] and m.client_host.startswith("/") for m in described.members)
        listed = wire.list_groups()
        assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed.groups
                if g.group_id == group] == [(group, "share", "Stable", "share")]
        assert all(g.group_id != group for g in wire.list_groups(types=("consumer", "classic")).groups)

        # a third member: four... members on three partitions share one of them
        c = share_consumer(daemon.bootstrap, group, "share-client-2")
        c.subscribe([topic])
        consumers.append(c)
        c4 = share_consumer(daemon.bootstrap, group, "share-client-3")
        c4.subscribe([topic])
        consumers.append(c4)
        wait_for(lambda: balanced(wire.describe(group), 4, 3), "four members sharing three partitions", consumers)

        # members that close leave the group at once (epoch -1); the others take their partitions
        for c in consumers[2:]:
            c.close()
        consumers = consumers[:2]
        wait_for(lambda: balanced(wire.describe(group), 2, 3), "two members again", consumers)
        for c in consumers:
            c.close()
        consumers = []
        empty = wait_for(lambda: (d := wire.describe(group)) and d.group_state == "Empty" and d, "an empty group")
        assert empty.members == []
        assert [g.group_state for g in wire.list_groups(states=("Empty",)).groups if g.group_id == group] == ["Empty"]

        # an empty share group is deleted by DeleteGroups
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.delete_consumer_groups([group])[group].result(30)
        gone = wire.describe(group)
        assert gone.error_code == 69        # GROUP_ID_NOT_FOUND
    finally:
        for c in consumers:
            c.close()
        wire.close()
    assert '"share group member left"' in daemon.log_text()


def test_membership_survives_kill_9(broker_factory):
    daemon = broker_factory(**{k: v for k, v in FAST.items() if "session" not in k}).start()
    topic = make_topic(daemon.bootstrap, 2)
    group = unique_topic("sg")
    wire = Wire(daemon.bootstrap)
    joined = wire.heartbeat(group, "member-a", 0, [topic])
    assert joined.error_code == 0 and joined.member_epoch == 1
    wire.heartbeat(group, "member-b", 0, [topic])
    before = wait_for(lambda: (r := wire.heartbeat(group, "member-a", 1)) and r.error_code == 0 and r.member_epoch == 2
                      and wire.describe(group), "member-a at epoch 2")
    wire.close()
    daemon.kill()
    daemon.start()
    wire = Wire(daemon.bootstrap)
    try:
        after = wire.describe(group)
        assert after.error_code == 0
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == (before.group_epoch,
                                                                               before.assignment_epoch, "Stable")
        assert [(m.member_id, m.member_epoch, [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions])
                for m in after.members] == \
               [(m.member_id, m.member_epoch, [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions])
                for m in before.members]
        # the members carry on with their epochs after the restart
        assert wire.heartbeat(group, "member-b", 2).error_code == 0
        stale = wire.heartbeat(group, "member-a", 7)
        assert stale.error_code == 110      # FENCED_MEMBER_EPOCH
    finally:
        wire.close()


def test_a_silent_member_is_fenced_after_its_session_timeout(broker_factory):
    daemon = broker_factory(**FAST).start()
    topic = make_topic(daemon.bootstrap, 1)
    group = unique_topic("sg")
    wire = Wire(daemon.bootstrap)
    try:
        assert wire.heartbeat(group, "silent", 0, [topic]).error_code == 0
        started = time.monotonic()
        empty = wait_for(lambda: (d := wire.describe(group)) and d.group_state == "Empty" and d, "the fencing")
        assert time.monotonic() - started >= 6.0 - 0.5     # not before the session timeout (6 s)
        assert empty.group_epoch == 2
        refused = wire.heartbeat(group, "silent", 1)
        assert refused.error_code == 25     # UNKNOWN_MEMBER_ID: it must rejoin with epoch 0
        assert wire.heartbeat(group, "silent", 0, [topic]).member_epoch == 3
    finally:
        wire.close()
    assert '"share group member fenced"' in daemon.log_text()
