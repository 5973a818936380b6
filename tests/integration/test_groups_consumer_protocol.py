"""Kafka 4 consumer groups on the wire: what clients of the "consumer" protocol (KIP-848) send.

The first test is the regression confluent-kafka-python's suite found in its KIP-848
mode: librdkafka carries a member id it generated itself before it joins, and commits
with it (generation -1) into a group that is still empty. Kafka accepts such a commit
(``ClassicGroup.validateOffsetCommit``: generation < 0 on an Empty group returns before
any member check); Sundial refused it with UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

import uuid

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from .clients import connect_raw, create_topic, read_frame
from .conftest import unique_topic


def _ask(sock, api_key, version, body, correlation_id=7):
    sock.sendall(encode_request(api_key, version, correlation_id, "raw-client", body))
    corr, response = decode_response(api_key, version, read_frame(sock))
    assert corr == correlation_id
    return response


def test_a_commit_with_generation_minus_one_and_a_member_id_into_an_empty_group_is_accepted(broker):
    topic = unique_topic("commit-empty")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    member_id = f"rdkafka-{uuid.uuid4()}"   # pre-generated, never joined
    sock = connect_raw(broker.host, broker.port)
    try:
        committed = _ask(sock, ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": "m"},
                {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]})
        assert [p.error_code for t in committed.topics for p in t.partitions] == [0, 0]
        fetched = _ask(sock, ApiKey.OFFSET_FETCH, 8, {
            "groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}],
            "require_stable": False})
        (g,) = fetched.groups
        assert g.error_code == 0
        assert {(p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions} == {(0, 5), (1, 9)}
        # a generation >= 0 from a member the group does not know is still refused
        refused = _ask(sock, ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": 1, "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 6, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert [p.error_code for t in refused.topics for p in t.partitions] == [25]  # UNKNOWN_MEMBER_ID
    finally:
        sock.close()
