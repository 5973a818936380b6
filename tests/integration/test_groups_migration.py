"""Online migration between the classic and the consumer protocol, with real clients
(``group.consumer.migration.policy=bidirectional``, the default).

A classic group of confluent-kafka consumers (``group.protocol=classic``) consumes a topic a producer
keeps feeding; a ``group.protocol=consumer`` member joins (the group becomes a consumer group with
classic members inside), the classic members leave one by one, a classic member joins again, and
the consumer-protocol member leaves (the group becomes a classic group again). Ground truth is what
was produced and the order of every member's rebalance callbacks: no partition is ever handed to a
member while another still owns it, and every produced record is delivered (and committed).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import ConsumerGroupType, KafkaException

from support.waiting import wait_for

from .conftest import unique_topic
from .consumer_protocol_support import (  # noqa: F401  (fast_broker is a fixture)
    TIMEOUT_S,
    Member,
    ProducerThread,
    Timeline,
    all_partitions,
    assert_no_loss,
    committed_offsets,
    create_topics,
    describe,
    end_offsets,
    exclusive_ownership_violations,
    fast_broker,
    rd_admin,
    wait_delivered,
)


def _group_type(admin, group: str):
    try:
        return describe(admin, group).type
    except KafkaException:
        return None


def _covered(members, parts) -> bool:
    """Every partition owned by exactly one of ``members`` (as their callbacks left them), each
    member owning some."""
    owned = [m.owned_now() for m in members]
    for m in members:
        assert m.error is None, f"{m.name} failed: {m.error!r}"
    return (all(owned) and set().union(*owned) == parts and sum(len(o) for o in owned) == len(parts))


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_online_upgrade_and_downgrade_lose_no_record(fast_broker, strategy):
    bootstrap = fast_broker.bootstrap
    topics = {unique_topic("migrate"): 6}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    group, timeline, admin = f"mig-{uuid.uuid4().hex[:10]}", Timeline(), rd_admin(bootstrap)

    def classic(name: str) -> Member:
        return Member(bootstrap, group, name, timeline, topics=list(topics), assignor=None,
                      **{"group.protocol": "classic", "partition.assignment.strategy": strategy,
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 300})

    producer = ProducerThread(bootstrap, topics)
    producer.start()
    members: dict[str, Member] = {}
    try:
        producer.wait_batches(2)
        for name in ("c1", "c2"):
            members[name] = classic(name)
            members[name].start()
        wait_for(lambda: _covered([members["c1"], members["c2"]], parts), TIMEOUT_S,
                 "the classic group to share the partitions")
        producer.wait_batches(2)

        # upgrade: a consumer-protocol member joins the classic group with members
        members["m"] = Member(bootstrap, group, "m", timeline, topics=list(topics), assignor="uniform")
        members["m"].start()
        wait_for(lambda: _group_type(admin, group) == ConsumerGroupType.CONSUMER, TIMEOUT_S,
                 "the group to become a consumer group")
        wait_for(lambda: _covered([members["c1"], members["c2"], members["m"]], parts), TIMEOUT_S,
                 "two classic members and a consumer-protocol member sharing the partitions")
        producer.wait_batches(2)

        # the classic members leave one by one
        members["c1"].stop()
        wait_for(lambda: _covered([members["c2"], members["m"]], parts), TIMEOUT_S, "c2 and m after c1 left")
        producer.wait_batches(2)
        members["c2"].stop()
        wait_for(lambda: _covered([members["m"]], parts), TIMEOUT_S, "m alone after c2 left")
        producer.wait_batches(2)

        # a classic member joins the consumer group, then the consumer-protocol member leaves: downgrade
        members["c3"] = classic("c3")
        members["c3"].start()
        wait_for(lambda: _covered([members["c3"], members["m"]], parts), TIMEOUT_S,
                 "a classic member inside the consumer group")
        assert _group_type(admin, group) == ConsumerGroupType.CONSUMER
        producer.wait_batches(2)
        members["m"].stop()
        wait_for(lambda: _group_type(admin, group) == ConsumerGroupType.CLASSIC, TIMEOUT_S,
                 "the group to become a classic group again")
        wait_for(lambda: _covered([members["c3"]], parts), TIMEOUT_S, "c3 alone in the classic group")
        producer.wait_batches(2)
    finally:
        truth = producer.stop()
    others = [m for name, m in members.items() if name != "c3"]
    wait_delivered([members["c3"]], truth, "every produced record to be delivered",
                   extra=lambda: set().union(*(set(m.deliveries) for m in others)))
    wait_for(lambda: committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts), TIMEOUT_S,
             "the group's commits to reach the log end")
    members["c3"].stop()
    assert_no_loss(truth, list(members.values()))
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)
    log = fast_broker.log_text()
    for event in ("classic group upgraded to a consumer group", "classic member joined the consumer group",
                  "consumer group downgraded to a classic group"):
        assert any(event in line and group in line for line in log.splitlines()), f"no '{event}' logged"
