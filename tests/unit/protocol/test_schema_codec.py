"""Control-plane APIs: Sundial's schema codec against kafka-python 3, version by version.

For every (API, version) in SUPPORTED_VERSIONS that goes through the schema codec,
with an all-defaults value and an every-field-set value:

* a request kafka-python encodes is decoded by Sundial (header + body) to the same
  values, and Sundial's own request encoding is the same bytes;
* Sundial's response encoding of the dict equals kafka-python's encoding of the same
  response built with kafka-python's constructors, and decodes back to it;
* where ``kafka.protocol.old`` has hand-written structs for that version (an
  encoding independent of the JSON schemas), they produce the same body bytes.
"""

from __future__ import annotations

import pytest

from sundial.protocol import FrameDecoder, decode_request, decode_response, encode_request, encode_response
from sundial.protocol.header import RequestHeader, parse_request_header
from sundial.protocol.messages import HAND_WRITTEN
from support.kp_frames import kp_case, kp_framed, supported_cases
from support.protocol_cases import OLD_CLASSES, case_value, old_body, old_comparable, schema_classes, to_kp

CASES = supported_cases(lambda key: key not in HAND_WRITTEN)
IDS = [f"{schema_classes(k)[0].__name__[:-7]}-v{v}-{case}" for k, v, case in CASES]


@pytest.mark.parametrize(("api_key", "version", "case"), CASES, ids=IDS)
def test_request_from_kafka_python_decodes_and_reencodes(api_key, version, case):
    value, kp, wire = kp_case(api_key, version, case, response=False, correlation_id=12345, client_id="client-\u00e9")
    frames = FrameDecoder(1 << 20).feed(wire)
    assert len(frames) == 1
    header = parse_request_header(frames[0])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key, version, 12345, "client-\u00e9")
    decoded = decode_request(header, frames[0])
    assert decoded == kp
    assert encode_request(api_key, version, 12345, "client-\u00e9", value) == wire


@pytest.mark.parametrize(("api_key", "version", "case"), CASES, ids=IDS)
def test_response_matches_kafka_python_bytes(api_key, version, case):
    value, kp, expected = kp_case(api_key, version, case, response=True, correlation_id=-7)
    buffers = encode_response(RequestHeader(api_key, version, -7, "c", 0), value)
    assert len(buffers) == 1
    assert bytes(buffers[0]) == expected
    if api_key == 18 and value.get("error_code", 0) != 0:
        return  # an ApiVersions answer carrying an error is read as v0 by clients
    correlation_id, back = decode_response(api_key, version, expected)
    assert correlation_id == -7
    assert back == kp


OLD = [(k, v, case) for k, v, case in CASES if (k, v) in OLD_CLASSES]


@pytest.mark.parametrize(("api_key", "version", "case"), OLD,
                         ids=[f"{schema_classes(k)[0].__name__[:-7]}-v{v}-{c}" for k, v, c in OLD])
def test_old_hand_written_structs_agree(api_key, version, case):
    old_req, old_resp = OLD_CLASSES[(api_key, version)]
    req_cls, resp_cls = schema_classes(api_key)
    for old_cls, cls in ((old_req, req_cls), (old_resp, resp_cls)):
        if old_cls is None:
            continue
        value = old_comparable(cls, case_value(cls, version, case), version)
        assert old_body(old_cls, cls, value, version) == bytes(to_kp(cls, value, version).encode())


# -- specific encodings -------------------------------------------------------------------

def _frame(api_key, version, value):
    return b"".join(bytes(b) for b in encode_response(RequestHeader(api_key, version, 1, None, 0), value))


def _kp_frame(api_key, version, value):
    return kp_framed(schema_classes(api_key)[1], value, version, correlation_id=1)[1]


@pytest.mark.parametrize("version", range(8, 13))
def test_metadata_authorized_operations_by_kafka_names_and_ints(version):
    node = {"node_id": 1, "host": "h", "port": 9092, "rack": None}
    topic = {"error_code": 0, "name": "t", "is_internal": False, "partitions": []}
    kafka_style = {"brokers": [node], "cluster_id": "c", "controller_id": 1,
                   "topics": [dict(topic, topic_authorized_operations=(1 << 3) | (1 << 4))],
                   "cluster_authorized_operations": -(2**31)}
    kp_style = {"brokers": [node], "cluster_id": "c", "controller_id": 1,
                "topics": [dict(topic, authorized_operations={3, 4})], "authorized_operations": None}
    assert _frame(3, version, kafka_style) == _kp_frame(3, version, kp_style)


def test_describe_groups_operations_int():
    group = {"error_code": 0, "group_id": "g", "group_state": "Stable", "protocol_type": "consumer",
             "protocol_data": "range", "members": []}
    ops = (1 << 3) | (1 << 6) | (1 << 8)
    assert _frame(15, 3, {"groups": [dict(group, authorized_operations=ops)]}) == \
        _kp_frame(15, 3, {"groups": [dict(group, authorized_operations={3, 6, 8})]})


def test_unknown_response_field_is_a_broker_bug():
    with pytest.raises(ValueError, match="no field 'nmae'"):
        _frame(3, 1, {"brokers": [], "topics": [{"nmae": "t"}]})


def test_fields_outside_the_version_are_dropped():
    full = {"throttle_time_ms": 5, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [],
            "cluster_authorized_operations": -(2**31)}
    assert _frame(3, 0, full) == _kp_frame(3, 0, {"brokers": [], "topics": []})


def test_topic_id_as_raw_bytes_or_uuid():
    import uuid

    tid = uuid.UUID(int=0xABCDEF)
    topic = {"error_code": 0, "name": "t", "partitions": []}
    as_bytes = {"brokers": [], "topics": [dict(topic, topic_id=tid.bytes)]}
    as_uuid = {"brokers": [], "topics": [dict(topic, topic_id=tid)]}
    assert _frame(3, 12, as_bytes) == _frame(3, 12, as_uuid) == _kp_frame(3, 12, as_uuid)


def test_tagged_fields_holding_their_default_are_omitted():
    empty = _frame(18, 3, {"api_keys": []})
    assert _frame(18, 3, {"api_keys": [], "supported_features": [], "zk_migration_ready": False}) == empty
    # a tagged *struct* equal to its default-constructed value (ProduceResponse v10 current_leader)
    from sundial.protocol.schema_codec import encode_response_body

    partition = {"index": 0, "error_code": 6, "base_offset": -1}
    plain = {"responses": [{"name": "t", "partition_responses": [partition]}]}
    default = {"responses": [{"name": "t", "partition_responses": [
        dict(partition, current_leader={"leader_id": -1, "leader_epoch": -1})]}]}
    real = {"responses": [{"name": "t", "partition_responses": [
        dict(partition, current_leader={"leader_id": 1, "leader_epoch": 0})]}]}
    assert encode_response_body(0, 10, default) == encode_response_body(0, 10, plain)
    assert encode_response_body(0, 10, real) != encode_response_body(0, 10, plain)
