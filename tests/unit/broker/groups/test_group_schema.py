"""__consumer_offsets key/value schemas and the consumer subscription reader.

Byte layouts are checked against hand-assembled bytes of Kafka's JSON schemas, every
version reads, and random bytes only ever raise the module's own error."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.groups.consumer_protocol import SubscriptionError, encode_subscription, subscription_topics
from sundial.broker.groups.schema import (
    GroupKey,
    GroupValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
    SchemaError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_offset_key_bytes():
    assert encode_offset_key("g", "topic", 7) == struct.pack(">h", 1) + s16("g") + s16("topic") + struct.pack(">i", 7)
    assert decode_key(encode_offset_key("g", "topic", 7)) == OffsetKey("g", "topic", 7)
    v0 = struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 1)
    assert decode_key(v0) == OffsetKey("g", "t", 1)


def test_group_key_bytes():
    assert encode_group_key("grp") == struct.pack(">h", 2) + s16("grp")
    assert decode_key(encode_group_key("grp")) == GroupKey("grp")


def test_offset_value_v3_and_v1_bytes():
    v = OffsetValue(42, 5, "meta", 1000)
    assert encode_offset_value(v) == struct.pack(">hqi", 3, 42, 5) + s16("meta") + struct.pack(">q", 1000)
    assert decode_offset_value(encode_offset_value(v)) == v
    v1 = OffsetValue(42, -1, "", 1000, 2000)
    assert encode_offset_value(v1) == struct.pack(">hq", 1, 42) + s16("") + struct.pack(">qq", 1000, 2000)
    assert decode_offset_value(encode_offset_value(v1)) == v1


def test_offset_value_other_versions_read():
    v0 = struct.pack(">hq", 0, 9) + s16("m") + struct.pack(">q", 77)
    assert decode_offset_value(v0) == OffsetValue(9, -1, "m", 77, -1)
    v2 = struct.pack(">hq", 2, 9) + s16("m") + struct.pack(">q", 77)
    assert decode_offset_value(v2) == OffsetValue(9, -1, "m", 77, -1)
    # v4: flexible (compact string = uvarint len+1), tagged fields at the end
    v4 = struct.pack(">hqi", 4, 9, 3) + bytes([2]) + b"m" + struct.pack(">q", 77) + bytes([0])
    assert decode_offset_value(v4) == OffsetValue(9, 3, "m", 77, -1)


def test_group_value_v3_round_trip_and_layout():
    members = (MemberRecord("m1", "inst", "cid", "/1.2.3.4", 30000, 10000, b"sub", b"asg"),
               MemberRecord("m2", None, "cid2", "/h", 5000, 6000, b"", b""))
    v = GroupValue("consumer", 4, "range", "m1", 123, members)
    raw = encode_group_value(v)
    expected = (struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m1")
                + struct.pack(">q", 123) + struct.pack(">i", 2)
                + s16("m1") + s16("inst") + s16("cid") + s16("/1.2.3.4") + struct.pack(">ii", 30000, 10000)
                + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 3) + b"asg"
                + s16("m2") + s16(None) + s16("cid2") + s16("/h") + struct.pack(">ii", 5000, 6000)
                + struct.pack(">i", 0) + struct.pack(">i", 0))
    assert raw == expected
    assert decode_group_value(raw) == v


def test_group_value_v0_reads_with_rebalance_timeout_from_session():
    raw = (struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 1) + s16(None) + s16(None)
           + struct.pack(">i", 1) + s16("m") + s16("c") + s16("h") + struct.pack(">i", 6000)
           + struct.pack(">i", 0) + struct.pack(">i", 0))
    v = decode_group_value(raw)
    assert v.protocol is None and v.leader is None and v.current_state_timestamp_ms == -1
    assert v.members[0].rebalance_timeout_ms == 6000 and v.members[0].group_instance_id is None


def test_subscription_topics():
    assert subscription_topics(encode_subscription(["a", "bb"], b"ud")) == ["a", "bb"]
    # v1+ adds fields after user data; only the topics are read.
    v1 = encode_subscription(["x"], None, version=1) + struct.pack(">i", 0)
    assert subscription_topics(v1) == ["x"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_only_raise_schema_error(data):
    for fn in (decode_key, decode_offset_value, decode_group_value):
        try:
            fn(data)
        except SchemaError:
            pass
    try:
        subscription_topics(data)
    except SubscriptionError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=20), st.text(max_size=20), st.integers(-2**31, 2**31 - 1),
       st.integers(-2**63, 2**63 - 1), st.text(max_size=30), st.integers(-1, 2**40))
def test_offset_records_round_trip(group, topic, partition, offset, metadata, ts):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    v = OffsetValue(offset, -1, metadata, ts)
    assert decode_offset_value(encode_offset_value(v)) == v


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), max_size=8))
def test_subscription_round_trip(topics):
    assert subscription_topics(encode_subscription(topics)) == topics
