"""Kafka 4 group APIs on the wire: consumer groups (KIP-848) and share groups (KIP-932).

Every request and response version is checked against bytes written out by hand in this
file from the field layout of Kafka's JSON (``protocol/schemas/*.json``, and kafka-python's
bundled schemas for the older APIs): Sundial must decode those bytes to the same values
and encode the same values to those bytes, through the whole frame (size, header, body).
"""

from __future__ import annotations

import uuid

import pytest

from sundial.protocol import decode_request, decode_response, encode_request, encode_response
from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from sundial.protocol.errors import ErrorCode, ProtocolError
from sundial.protocol.header import RequestHeader, encode_response_header, parse_request_header
from sundial.protocol.schema_codec import (
    decode_request_body,
    decode_response_body,
    encode_request_body,
    encode_response_body,
)
from support.wire_bytes import (
    NULL,
    TAGS,
    boolean,
    carray,
    cbytes,
    cstr,
    frame,
    i8,
    i16,
    i32,
    i64,
    nullable_struct,
    request_header_v2,
    uid,
)

T1 = uuid.UUID("7b1e8f4a-2c3d-4e5f-8a9b-0c1d2e3f4a5b")
T2 = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)


def assert_fields(obj, expected, path="body"):
    """``obj`` (a decoded schema object) holds ``expected`` (nested dicts and lists)."""
    if isinstance(expected, dict):
        for name, want in expected.items():
            assert_fields(getattr(obj, name), want, f"{path}.{name}")
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        assert obj is not None and len(obj) == len(expected), path
        for i, (got, want) in enumerate(zip(obj, expected)):
            assert_fields(got, want, f"{path}[{i}]")
    else:
        got = list(obj) if isinstance(obj, (list, tuple)) else obj
        assert got == expected, f"{path}: {got!r} != {expected!r}"


def check_request(api_key, version, value, golden_body):
    """Sundial encodes ``value`` to ``golden_body`` and decodes it (in a whole frame) back."""
    assert encode_request_body(api_key, version, value) == golden_body
    wire = frame(request_header_v2(api_key, version, 77, "client-1") + golden_body)
    assert encode_request(api_key, version, 77, "client-1", value) == wire
    body = wire[4:]
    header = parse_request_header(body)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key, version, 77, "client-1")
    decoded = decode_request(header, body)
    assert_fields(decoded, value)
    assert_fields(decode_request_body(api_key, version, golden_body, 0), value)
    return decoded


def check_response(api_key, version, value, golden_body, expected=None):
    """Sundial's response frame for ``value`` is header v1 + ``golden_body``; it decodes back."""
    assert encode_response_body(api_key, version, value) == golden_body
    got = b"".join(bytes(b) for b in encode_response(RequestHeader(api_key, version, 5, "c", 0), value))
    assert got == frame(encode_response_header(api_key, version, 5) + golden_body)
    assert encode_response_header(api_key, version, 5) == i32(5) + TAGS  # every version is flexible
    correlation_id, back = decode_response(api_key, version, got)
    assert correlation_id == 5
    assert_fields(back, value if expected is None else expected)
    assert_fields(decode_response_body(api_key, version, golden_body), value if expected is None else expected)


def test_served_versions():
    assert {k.name: SUPPORTED_VERSIONS[k] for k in (
        ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_HEARTBEAT,
        ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        ApiKey.DELETE_SHARE_GROUP_OFFSETS)} == {
        "CONSUMER_GROUP_HEARTBEAT": (0, 1), "CONSUMER_GROUP_DESCRIBE": (0, 1), "SHARE_GROUP_HEARTBEAT": (1, 1),
        "SHARE_GROUP_DESCRIBE": (1, 1), "SHARE_FETCH": (1, 2), "SHARE_ACKNOWLEDGE": (1, 2),
        "DESCRIBE_SHARE_GROUP_OFFSETS": (0, 1), "ALTER_SHARE_GROUP_OFFSETS": (0, 0),
        "DELETE_SHARE_GROUP_OFFSETS": (0, 0)}


# -- ConsumerGroupHeartbeat (68) ----------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_heartbeat_request_join(version):
    value = {"group_id": "orders", "member_id": "mLHCFK0hR9a2xQy5sJm0Ww", "member_epoch": 0,
             "instance_id": None, "rack_id": "rack-a", "rebalance_timeout_ms": 300000,
             "subscribed_topic_names": ["payments", "orders"], "server_assignor": "uniform",
             "topic_partitions": []}
    if version >= 1:
        value["subscribed_topic_regex"] = None
    golden = (cstr("orders") + cstr("mLHCFK0hR9a2xQy5sJm0Ww") + i32(0) + NULL + cstr("rack-a") + i32(300000)
              + carray(["payments", "orders"], cstr)
              + (NULL if version >= 1 else b"")
              + cstr("uniform") + carray([]) + TAGS)
    check_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, value, golden)


def test_consumer_group_heartbeat_request_v1_regex_and_owned_partitions():
    value = {"group_id": "g", "member_id": "m", "member_epoch": 7, "instance_id": "static-1", "rack_id": None,
             "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": "^orders-.*",
             "server_assignor": None,
             "topic_partitions": [{"topic_id": T1, "partitions": [0, 2]}, {"topic_id": T2, "partitions": []}]}
    golden = (cstr("g") + cstr("m") + i32(7) + cstr("static-1") + NULL + i32(-1) + NULL + cstr("^orders-.*")
              + NULL
              + carray([uid(T1) + carray([0, 2], i32) + TAGS, uid(T2) + carray([], i32) + TAGS]) + TAGS)
    check_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, value, golden)


def test_consumer_group_heartbeat_request_defaults_of_the_schema():
    # only the required fields: the nullable ones are null, the rebalance timeout -1
    golden = cstr("g") + cstr("m") + i32(-1) + NULL + NULL + i32(-1) + NULL + NULL + NULL + NULL + TAGS
    decoded = decode_request_body(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, golden, 0)
    assert (decoded.instance_id, decoded.rack_id, decoded.rebalance_timeout_ms, decoded.subscribed_topic_names,
            decoded.subscribed_topic_regex, decoded.server_assignor, decoded.topic_partitions) == (
        None, None, -1, None, None, None, None)
    assert encode_request_body(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1,
                               {"group_id": "g", "member_id": "m", "member_epoch": -1}) == golden
    # v0 has no regex: the same fields without it
    v0 = decode_request_body(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, golden[:-2] + TAGS, 0)
    assert v0.subscribed_topic_regex is None and v0.server_assignor is None


def test_consumer_group_heartbeat_request_null_group_id_is_refused():
    golden = NULL + cstr("m") + i32(0) + NULL + NULL + i32(-1) + NULL + NULL + NULL + NULL + TAGS
    with pytest.raises(ProtocolError, match="group_id"):
        decode_request_body(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, golden, 0)


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_heartbeat_response_with_assignment(version):
    value = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m-1",
             "member_epoch": 12, "heartbeat_interval_ms": 5000,
             "assignment": {"topic_partitions": [{"topic_id": T1, "partitions": [3, 1]}]}}
    golden = (i32(0) + i16(0) + NULL + cstr("m-1") + i32(12) + i32(5000)
              + nullable_struct(carray([uid(T1) + carray([3, 1], i32) + TAGS]) + TAGS) + TAGS)
    check_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, value, golden)


def test_consumer_group_heartbeat_response_without_assignment_is_null_not_empty():
    # Kafka: Assignment is "null if not provided"; a missing field must not become an empty assignment
    golden = i32(0) + i16(ErrorCode.FENCED_MEMBER_EPOCH) + cstr("fenced") + NULL + i32(-1) + i32(0) + b"\xff" + TAGS
    value = {"error_code": ErrorCode.FENCED_MEMBER_EPOCH, "error_message": "fenced", "member_epoch": -1}
    check_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, value, golden,
                   expected=dict(value, member_id=None, assignment=None))
    assert encode_response_body(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, dict(value, assignment=None)) == golden
    # an empty assignment is a different answer ("you own nothing")
    empty = encode_response_body(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, dict(value, assignment={"topic_partitions": []}))
    assert empty == golden[:-2] + b"\x01" + carray([]) + TAGS + TAGS


# -- ConsumerGroupDescribe (69) -----------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_request(version):
    value = {"group_ids": ["a", "b"], "include_authorized_operations": True}
    check_request(ApiKey.CONSUMER_GROUP_DESCRIBE, version, value, carray(["a", "b"], cstr) + boolean(True) + TAGS)


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_response(version):
    assignment = {"topic_partitions": [{"topic_id": T1, "topic_name": "orders", "partitions": [0, 1]}]}
    target = {"topic_partitions": [{"topic_id": T1, "topic_name": "orders", "partitions": [0, 1, 2]}]}
    member = {"member_id": "m-1", "instance_id": None, "rack_id": "r1", "member_epoch": 4, "client_id": "rdkafka",
              "client_host": "/10.0.0.7", "subscribed_topic_names": ["orders"], "subscribed_topic_regex": None,
              "assignment": assignment, "target_assignment": target}
    if version >= 1:
        member["member_type"] = 1
    group = {"error_code": 0, "error_message": None, "group_id": "g", "group_state": "Reconciling",
             "group_epoch": 5, "assignment_epoch": 5, "assignor_name": "uniform", "members": [member],
             "authorized_operations": (1 << 3) | (1 << 8)}
    missing = {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": "Group nope not found.",
               "group_id": "nope", "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
               "members": [], "authorized_operations": -(2**31)}
    value = {"throttle_time_ms": 0, "groups": [group, missing]}

    def tps(a):
        return carray([uid(t["topic_id"]) + cstr(t["topic_name"]) + carray(t["partitions"], i32) + TAGS
                       for t in a["topic_partitions"]]) + TAGS

    member_bytes = (cstr("m-1") + NULL + cstr("r1") + i32(4) + cstr("rdkafka") + cstr("/10.0.0.7")
                    + carray(["orders"], cstr) + NULL + tps(assignment) + tps(target)
                    + (i8(1) if version >= 1 else b"") + TAGS)
    golden = (i32(0) + carray([
        i16(0) + NULL + cstr("g") + cstr("Reconciling") + i32(5) + i32(5) + cstr("uniform")
        + carray([member_bytes]) + i32((1 << 3) | (1 << 8)) + TAGS,
        i16(69) + cstr("Group nope not found.") + cstr("nope") + cstr("") + i32(0) + i32(0) + cstr("")
        + carray([]) + i32(-(2**31)) + TAGS]) + TAGS)
    check_response(ApiKey.CONSUMER_GROUP_DESCRIBE, version, value, golden)


def test_consumer_group_describe_member_type_defaults_to_unknown():
    member = {"member_id": "m", "member_epoch": 1, "client_id": "c", "client_host": "h",
              "subscribed_topic_names": [], "assignment": {"topic_partitions": []},
              "target_assignment": {"topic_partitions": []}}
    body = encode_response_body(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"groups": [
        {"group_id": "g", "group_state": "Stable", "assignor_name": "range", "members": [member]}]})
    back = decode_response_body(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)
    assert back.groups[0].members[0].member_type == -1
    assert back.groups[0].authorized_operations == -(2**31)


# -- ShareGroupHeartbeat (76) and ShareGroupDescribe (77) ---------------------------------------

def test_share_group_heartbeat_request_v1():
    value = {"group_id": "sg", "member_id": "XyZ0123456789abcdefghi", "member_epoch": 0, "rack_id": None,
             "subscribed_topic_names": ["jobs"]}
    golden = cstr("sg") + cstr("XyZ0123456789abcdefghi") + i32(0) + NULL + carray(["jobs"], cstr) + TAGS
    check_request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, value, golden)
    unchanged = cstr("sg") + cstr("m") + i32(3) + NULL + NULL + TAGS
    assert decode_request_body(ApiKey.SHARE_GROUP_HEARTBEAT, 1, unchanged, 0).subscribed_topic_names is None


def test_share_group_heartbeat_response_v1():
    value = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m", "member_epoch": 2,
             "heartbeat_interval_ms": 5000,
             "assignment": {"topic_partitions": [{"topic_id": T2, "partitions": [0]}]}}
    golden = (i32(0) + i16(0) + NULL + cstr("m") + i32(2) + i32(5000)
              + nullable_struct(carray([uid(T2) + carray([0], i32) + TAGS]) + TAGS) + TAGS)
    check_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, value, golden)
    no_assignment = i32(0) + i16(0) + NULL + cstr("m") + i32(2) + i32(5000) + b"\xff" + TAGS
    assert encode_response_body(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "member_id": "m", "member_epoch": 2, "heartbeat_interval_ms": 5000}) == no_assignment


def test_share_group_describe_v1():
    check_request(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["sg"], "include_authorized_operations": False},
                  carray(["sg"], cstr) + boolean(False) + TAGS)
    member = {"member_id": "m", "rack_id": None, "member_epoch": 3, "client_id": "c", "client_host": "/1.2.3.4",
              "subscribed_topic_names": ["jobs"],
              "assignment": {"topic_partitions": [{"topic_id": T1, "topic_name": "jobs", "partitions": [0]}]}}
    value = {"throttle_time_ms": 0, "groups": [
        {"error_code": 0, "error_message": None, "group_id": "sg", "group_state": "Stable", "group_epoch": 3,
         "assignment_epoch": 3, "assignor_name": "simple", "members": [member], "authorized_operations": 8}]}
    golden = i32(0) + carray([
        i16(0) + NULL + cstr("sg") + cstr("Stable") + i32(3) + i32(3) + cstr("simple") + carray([
            cstr("m") + NULL + i32(3) + cstr("c") + cstr("/1.2.3.4") + carray(["jobs"], cstr)
            + carray([uid(T1) + cstr("jobs") + carray([0], i32) + TAGS]) + TAGS + TAGS])
        + i32(8) + TAGS]) + TAGS
    check_response(ApiKey.SHARE_GROUP_DESCRIBE, 1, value, golden)


# -- ShareFetch (78) and ShareAcknowledge (79) ---------------------------------------------------

def _ack_batch(first, last, types):
    return i64(first) + i64(last) + carray(types, i8) + TAGS


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_request(version):
    value = {"group_id": "sg", "member_id": "m", "share_session_epoch": 0, "max_wait_ms": 500, "min_bytes": 1,
             "max_bytes": 52428800, "max_records": 500, "batch_size": 500,
             "topics": [{"topic_id": T1, "partitions": [
                 {"partition_index": 0, "acknowledgement_batches": [
                     {"first_offset": 10, "last_offset": 12, "acknowledge_types": [1, 0, 2]},
                     {"first_offset": 13, "last_offset": 13, "acknowledge_types": [3]}]},
                 {"partition_index": 1, "acknowledgement_batches": []}]}],
             "forgotten_topics_data": [{"topic_id": T2, "partitions": [4]}]}
    if version >= 2:
        value.update(share_acquire_mode=1, is_renew_ack=False)
    golden = (cstr("sg") + cstr("m") + i32(0) + i32(500) + i32(1) + i32(52428800) + i32(500) + i32(500)
              + (i8(1) + boolean(False) if version >= 2 else b"")
              + carray([uid(T1) + carray([
                  i32(0) + carray([_ack_batch(10, 12, [1, 0, 2]), _ack_batch(13, 13, [3])]) + TAGS,
                  i32(1) + carray([]) + TAGS]) + TAGS])
              + carray([uid(T2) + carray([4], i32) + TAGS]) + TAGS)
    decoded = check_request(ApiKey.SHARE_FETCH, version, value, golden)
    if version == 1:  # v2 fields read as their defaults
        assert (decoded.share_acquire_mode, decoded.is_renew_ack) == (0, False)


def test_share_fetch_request_v2_renew_and_session_close():
    value = {"group_id": "sg", "member_id": "m", "share_session_epoch": -1, "max_wait_ms": 0, "min_bytes": 0,
             "max_bytes": 0, "max_records": 0, "batch_size": 0, "share_acquire_mode": 0, "is_renew_ack": True,
             "topics": [{"topic_id": T1, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                 {"first_offset": 5, "last_offset": 6, "acknowledge_types": [4]}]}]}],
             "forgotten_topics_data": []}
    golden = (cstr("sg") + cstr("m") + i32(-1) + i32(0) * 5 + i8(0) + boolean(True)
              + carray([uid(T1) + carray([i32(0) + carray([_ack_batch(5, 6, [4])]) + TAGS]) + TAGS])
              + carray([]) + TAGS)
    check_request(ApiKey.SHARE_FETCH, 2, value, golden)


@pytest.mark.parametrize("version", [1, 2])
def test_share_acknowledge_request(version):
    value = {"group_id": "sg", "member_id": "m", "share_session_epoch": 3,
             "topics": [{"topic_id": T1, "partitions": [{"partition_index": 2, "acknowledgement_batches": [
                 {"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}]}]}]}
    if version >= 2:
        value["is_renew_ack"] = True
    golden = (cstr("sg") + cstr("m") + i32(3) + (boolean(True) if version >= 2 else b"")
              + carray([uid(T1) + carray([i32(2) + carray([_ack_batch(0, 4, [1])]) + TAGS]) + TAGS]) + TAGS)
    check_request(ApiKey.SHARE_ACKNOWLEDGE, version, value, golden)


@pytest.mark.parametrize("version", [1, 2])
def test_share_acknowledge_response(version):
    value = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
             "responses": [{"topic_id": T1, "partitions": [
                 {"partition_index": 2, "error_code": ErrorCode.INVALID_RECORD_STATE, "error_message": "state",
                  "current_leader": {"leader_id": 1, "leader_epoch": 0}}]}],
             "node_endpoints": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}]}
    if version >= 2:
        value["acquisition_lock_timeout_ms"] = 30000
    golden = (i32(0) + i16(0) + NULL + (i32(30000) if version >= 2 else b"")
              + carray([uid(T1) + carray([i32(2) + i16(121) + cstr("state") + i32(1) + i32(0) + TAGS + TAGS])
                        + TAGS])
              + carray([i32(1) + cstr("localhost") + i32(9092) + NULL + TAGS]) + TAGS)
    check_response(ApiKey.SHARE_ACKNOWLEDGE, version, value, golden)


# -- Describe/Alter/DeleteShareGroupOffsets (90, 91, 92) --------------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_describe_share_group_offsets(version):
    request = {"groups": [{"group_id": "sg", "topics": [{"topic_name": "jobs", "partitions": [0, 1]}]},
                          {"group_id": "all", "topics": None}]}
    check_request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, request, carray([
        cstr("sg") + carray([cstr("jobs") + carray([0, 1], i32) + TAGS]) + TAGS,
        cstr("all") + NULL + TAGS]) + TAGS)
    part = {"partition_index": 0, "start_offset": 42, "leader_epoch": 0, "error_code": 0, "error_message": None}
    if version >= 1:
        part["lag"] = 7
    response = {"throttle_time_ms": 0, "groups": [
        {"group_id": "sg", "topics": [{"topic_name": "jobs", "topic_id": T1, "partitions": [part]}],
         "error_code": 0, "error_message": None}]}
    golden = i32(0) + carray([cstr("sg") + carray([cstr("jobs") + uid(T1) + carray([
        i32(0) + i64(42) + i32(0) + (i64(7) if version >= 1 else b"") + i16(0) + NULL + TAGS]) + TAGS])
        + i16(0) + NULL + TAGS]) + TAGS
    check_response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, response, golden)


def test_describe_share_group_offsets_lag_defaults_to_unknown():
    body = encode_response_body(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{"group_id": "g", "topics": [
        {"topic_name": "t", "topic_id": T1, "partitions": [{"partition_index": 0, "start_offset": 1}]}]}]})
    assert decode_response_body(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, body).groups[0].topics[0] \
        .partitions[0].lag == -1


def test_alter_share_group_offsets_v0():
    request = {"group_id": "sg", "topics": [{"topic_name": "jobs", "partitions": [
        {"partition_index": 0, "start_offset": 100}, {"partition_index": 1, "start_offset": -1}]}]}
    check_request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, request, cstr("sg") + carray([cstr("jobs") + carray([
        i32(0) + i64(100) + TAGS, i32(1) + i64(-1) + TAGS]) + TAGS]) + TAGS)
    response = {"throttle_time_ms": 0, "error_code": ErrorCode.NON_EMPTY_GROUP, "error_message": "not empty",
                "responses": [{"topic_name": "jobs", "topic_id": T1, "partitions": [
                    {"partition_index": 0, "error_code": 0, "error_message": None}]}]}
    check_response(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, response,
                   i32(0) + i16(68) + cstr("not empty") + carray([cstr("jobs") + uid(T1) + carray([
                       i32(0) + i16(0) + NULL + TAGS]) + TAGS]) + TAGS)


def test_delete_share_group_offsets_v0():
    check_request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "sg", "topics": [{"topic_name": "jobs"}]},
                  cstr("sg") + carray([cstr("jobs") + TAGS]) + TAGS)
    response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
        {"topic_name": "jobs", "topic_id": T1, "error_code": 0, "error_message": None},
        {"topic_name": "gone", "topic_id": None, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         "error_message": "unknown"}]}
    golden = i32(0) + i16(0) + NULL + carray([cstr("jobs") + uid(T1) + i16(0) + NULL + TAGS,
                                              cstr("gone") + bytes(16) + i16(3) + cstr("unknown") + TAGS]) + TAGS
    check_response(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, response, golden,
                   expected=dict(response, responses=[response["responses"][0],
                                                      dict(response["responses"][1], topic_id=None)]))


# -- versions this package does not serve ---------------------------------------------------------

@pytest.mark.parametrize(("api_key", "version"), [(76, 0), (77, 0), (78, 0), (79, 0), (78, 3), (68, 2), (90, 2)])
def test_versions_kafka_4_2_does_not_serve_are_refused(api_key, version):
    from sundial.protocol.errors import UnsupportedVersionError

    with pytest.raises(UnsupportedVersionError):
        decode_request(RequestHeader(api_key, version, 1, None, 10), b"\x00" * 64)


# -- ShareFetch responses: hand-written, records never copied -------------------------------------

def _share_fetch_golden(version, records_field: bytes) -> bytes:
    return (i32(0) + i16(0) + NULL + i32(30000)
            + carray([uid(T1) + carray([
                i32(0) + i16(0) + NULL + i16(0) + NULL + i32(1) + i32(0) + TAGS + records_field
                + carray([i64(10) + i64(12) + i16(1) + TAGS, i64(14) + i64(14) + i16(3) + TAGS]) + TAGS,
                i32(1) + i16(ErrorCode.NOT_LEADER_OR_FOLLOWER) + cstr("moved") + i16(ErrorCode.INVALID_RECORD_STATE)
                + cstr("bad ack") + i32(2) + i32(7) + TAGS + NULL + carray([]) + TAGS]) + TAGS])
            + carray([i32(2) + cstr("b2") + i32(9093) + cstr("r2") + TAGS]) + TAGS)


def _share_fetch_value(records):
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 30000,
            "responses": [{"topic_id": T1, "partitions": [
                {"partition_index": 0, "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
                 "acknowledge_error_message": None, "current_leader": {"leader_id": 1, "leader_epoch": 0},
                 "records": records,
                 "acquired_records": [{"first_offset": 10, "last_offset": 12, "delivery_count": 1},
                                      (14, 14, 3)]},
                {"partition_index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "error_message": "moved",
                 "acknowledge_error_code": ErrorCode.INVALID_RECORD_STATE, "acknowledge_error_message": "bad ack",
                 "current_leader": {"leader_id": 2, "leader_epoch": 7}, "records": None, "acquired_records": []}]}],
            "node_endpoints": [{"node_id": 2, "host": "b2", "port": 9093, "rack": "r2"}]}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("size", [0, 61, 5000])
def test_share_fetch_response_golden_and_zero_copy(version, size):
    from support.protocol_cases import Slice, iter_frames

    from sundial.protocol.messages.common import INLINE_MAX_BYTES

    records = bytes((i * 7) & 0xFF for i in range(size))
    golden = _share_fetch_golden(version, cbytes(records))
    header = encode_response_header(ApiKey.SHARE_FETCH, version, 5)
    want = frame(header + golden)
    for payload in (records, memoryview(records), Slice(records)):
        buffers = encode_response(RequestHeader(ApiKey.SHARE_FETCH, version, 5, "c", 0), _share_fetch_value(payload))
        assert iter_frames(buffers) == want
        if isinstance(payload, Slice) and size:
            assert any(b is payload for b in buffers)  # handed to the connection as it is, never read here
        if isinstance(payload, bytes) and size >= INLINE_MAX_BYTES:
            assert any(b is payload for b in buffers)
    # the schema codec (kafka-python's generated encoder over Kafka's JSON) agrees byte for byte
    value = _share_fetch_value(records)
    value["responses"][0]["partitions"][0]["acquired_records"][1] = {
        "first_offset": 14, "last_offset": 14, "delivery_count": 3}
    assert encode_response_body(ApiKey.SHARE_FETCH, version, value) == golden
    _, back = decode_response(ApiKey.SHARE_FETCH, version, want)
    assert bytes(back.responses[0].partitions[0].records) == records
    assert back.responses[0].partitions[1].records is None
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in back.responses[0].partitions[0].acquired_records] \
        == [(10, 12, 1), (14, 14, 3)]


def test_share_fetch_response_defaults_match_the_schema_codec():
    sparse = {"responses": [{"topic_id": T2, "partitions": [{"partition_index": 3}]}]}
    hand = b"".join(bytes(b) for b in encode_response(RequestHeader(ApiKey.SHARE_FETCH, 1, 5, "c", 0), sparse))
    header = encode_response_header(ApiKey.SHARE_FETCH, 1, 5)
    assert hand == frame(header + encode_response_body(ApiKey.SHARE_FETCH, 1, sparse))
    assert hand.endswith(uid(T2) + carray([i32(3) + i16(0) + NULL + i16(0) + NULL + i32(0) + i32(0) + TAGS
                                          + cbytes(b"") + carray([]) + TAGS]) + TAGS + carray([]) + TAGS)
    with pytest.raises(ValueError, match="16 bytes"):
        encode_response(RequestHeader(ApiKey.SHARE_FETCH, 1, 5, "c", 0),
                        {"responses": [{"topic_id": b"short", "partitions": []}]})


# -- the older group APIs at their Kafka 4 versions --------------------------------------------

def check_body_only(api_key, version, request, request_golden, response, response_golden):
    """Codec-level checks for a version the broker does not advertise yet (no frame decode)."""
    assert encode_request_body(api_key, version, request) == request_golden
    assert_fields(decode_request_body(api_key, version, request_golden, 0), request)
    assert encode_response_body(api_key, version, response) == response_golden
    assert_fields(decode_response_body(api_key, version, response_golden), response)


def test_list_groups_v5_types_filter_and_group_type():
    check_request(ApiKey.LIST_GROUPS, 5, {"states_filter": ["Stable"], "types_filter": ["consumer", "share"]},
                  carray(["Stable"], cstr) + carray(["consumer", "share"], cstr) + TAGS)
    response = {"throttle_time_ms": 0, "error_code": 0, "groups": [
        {"group_id": "g1", "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"},
        {"group_id": "q", "protocol_type": "share", "group_state": "Empty", "group_type": "share"},
        {"group_id": "old", "protocol_type": "consumer", "group_state": "Empty", "group_type": "classic"}]}
    check_response(ApiKey.LIST_GROUPS, 5, response, i32(0) + i16(0) + carray([
        cstr(g["group_id"]) + cstr(g["protocol_type"]) + cstr(g["group_state"]) + cstr(g["group_type"]) + TAGS
        for g in response["groups"]]) + TAGS)


def test_describe_groups_v6_error_message():
    response = {"throttle_time_ms": 0, "groups": [
        {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": "Group nope not found.", "group_id": "nope",
         "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
         "authorized_operations": -(2**31)},
        {"error_code": 0, "error_message": None, "group_id": "g", "group_state": "Stable",
         "protocol_type": "consumer", "protocol_data": "range", "members": [
             {"member_id": "m", "group_instance_id": None, "client_id": "c", "client_host": "/h",
              "member_metadata": b"\x00\x01", "member_assignment": b""}],
         "authorized_operations": 1 << 3}]}
    golden = i32(0) + carray([
        i16(69) + cstr("Group nope not found.") + cstr("nope") + cstr("Dead") + cstr("") + cstr("") + carray([])
        + i32(-(2**31)) + TAGS,
        i16(0) + NULL + cstr("g") + cstr("Stable") + cstr("consumer") + cstr("range") + carray([
            cstr("m") + NULL + cstr("c") + cstr("/h") + cbytes(b"\x00\x01") + cbytes(b"") + TAGS])
        + i32(8) + TAGS]) + TAGS
    expected = {"groups": [dict(response["groups"][0], authorized_operations=None),
                           dict(response["groups"][1], authorized_operations={3})]}
    assert encode_response_body(ApiKey.DESCRIBE_GROUPS, 6, response) == golden
    assert_fields(decode_response_body(ApiKey.DESCRIBE_GROUPS, 6, golden), expected)  # kafka-python: a bit set
    request = {"groups": ["nope", "g"], "include_authorized_operations": True}
    request_golden = carray(["nope", "g"], cstr) + boolean(True) + TAGS
    assert encode_request_body(ApiKey.DESCRIBE_GROUPS, 6, request) == request_golden
    assert_fields(decode_request_body(ApiKey.DESCRIBE_GROUPS, 6, request_golden, 0), request)


@pytest.mark.parametrize("version", [9, 10])
def test_offset_commit_v9_member_epoch_and_v10_topic_ids(version):
    topic = {"topic_id": T1} if version >= 10 else {"name": "orders"}
    topic_key = uid(T1) if version >= 10 else cstr("orders")
    request = {"group_id": "g", "generation_id_or_member_epoch": 17, "member_id": "m-1", "group_instance_id": None,
               "topics": [dict(topic, partitions=[
                   {"partition_index": 0, "committed_offset": 1000, "committed_leader_epoch": -1,
                    "committed_metadata": None},
                   {"partition_index": 1, "committed_offset": 5, "committed_leader_epoch": 3,
                    "committed_metadata": "meta"}])]}
    check_request(ApiKey.OFFSET_COMMIT, version, request, cstr("g") + i32(17) + cstr("m-1") + NULL + carray([
        topic_key + carray([i32(0) + i64(1000) + i32(-1) + NULL + TAGS, i32(1) + i64(5) + i32(3) + cstr("meta") + TAGS])
        + TAGS]) + TAGS)
    response = {"throttle_time_ms": 0, "topics": [dict(topic, partitions=[
        {"partition_index": 0, "error_code": ErrorCode.STALE_MEMBER_EPOCH},
        {"partition_index": 1, "error_code": 0}])]}
    check_response(ApiKey.OFFSET_COMMIT, version, response, i32(0) + carray([
        topic_key + carray([i32(0) + i16(113) + TAGS, i32(1) + i16(0) + TAGS]) + TAGS]) + TAGS)


@pytest.mark.parametrize("version", [9, 10])
def test_offset_fetch_v9_member_and_v10_topic_ids(version):
    topic = {"topic_id": T1} if version >= 10 else {"name": "orders"}
    topic_key = uid(T1) if version >= 10 else cstr("orders")
    request = {"groups": [{"group_id": "g", "member_id": "m-1", "member_epoch": 17,
                           "topics": [dict(topic, partition_indexes=[0, 1])]},
                          {"group_id": "all", "member_id": None, "member_epoch": -1, "topics": None}],
               "require_stable": True}
    check_request(ApiKey.OFFSET_FETCH, version, request, carray([
        cstr("g") + cstr("m-1") + i32(17) + carray([topic_key + carray([0, 1], i32) + TAGS]) + TAGS,
        cstr("all") + NULL + i32(-1) + NULL + TAGS]) + boolean(True) + TAGS)
    response = {"throttle_time_ms": 0, "groups": [{"group_id": "g", "topics": [dict(topic, partitions=[
        {"partition_index": 0, "committed_offset": 1000, "committed_leader_epoch": 2, "metadata": "",
         "error_code": 0}])], "error_code": ErrorCode.STALE_MEMBER_EPOCH}]}
    check_response(ApiKey.OFFSET_FETCH, version, response, i32(0) + carray([
        cstr("g") + carray([topic_key + carray([i32(0) + i64(1000) + i32(2) + cstr("") + i16(0) + TAGS]) + TAGS])
        + i16(113) + TAGS]) + TAGS)


def test_txn_offset_commit_v3_carries_the_member_epoch():
    request = {"transactional_id": "tx", "group_id": "g", "producer_id": 4000, "producer_epoch": 2,
               "generation_id": 9, "member_id": "m-1", "group_instance_id": None,
               "topics": [{"name": "orders", "partitions": [
                   {"partition_index": 0, "committed_offset": 77, "committed_leader_epoch": -1,
                    "committed_metadata": ""}]}]}
    check_request(ApiKey.TXN_OFFSET_COMMIT, 3, request,
                  cstr("tx") + cstr("g") + i64(4000) + i16(2) + i32(9) + cstr("m-1") + NULL + carray([
                      cstr("orders") + carray([i32(0) + i64(77) + i32(-1) + cstr("") + TAGS]) + TAGS]) + TAGS)


def test_error_codes_of_the_kafka_4_group_protocols():
    # Kafka's Errors.java (4.2): the codes KIP-848 and KIP-932 answer with
    assert {e.name: int(e) for e in ErrorCode if 110 <= e <= 133} == {
        "FENCED_MEMBER_EPOCH": 110, "UNRELEASED_INSTANCE_ID": 111, "UNSUPPORTED_ASSIGNOR": 112,
        "STALE_MEMBER_EPOCH": 113, "MISMATCHED_ENDPOINT_TYPE": 114, "UNSUPPORTED_ENDPOINT_TYPE": 115,
        "UNKNOWN_CONTROLLER_ID": 116, "UNKNOWN_SUBSCRIPTION_ID": 117, "TELEMETRY_TOO_LARGE": 118,
        "INVALID_REGISTRATION": 119, "TRANSACTION_ABORTABLE": 120, "INVALID_RECORD_STATE": 121,
        "SHARE_SESSION_NOT_FOUND": 122, "INVALID_SHARE_SESSION_EPOCH": 123, "FENCED_STATE_EPOCH": 124,
        "INVALID_VOTER_KEY": 125, "DUPLICATE_VOTER": 126, "VOTER_NOT_FOUND": 127, "INVALID_REGULAR_EXPRESSION": 128,
        "REBOOTSTRAP_REQUIRED": 129, "STREAMS_INVALID_TOPOLOGY": 130, "STREAMS_INVALID_TOPOLOGY_EPOCH": 131,
        "STREAMS_TOPOLOGY_FENCED": 132, "SHARE_SESSION_LIMIT_REACHED": 133}
