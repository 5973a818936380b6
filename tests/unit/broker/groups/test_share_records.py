"""Share-group records (types 9-15 of ``__consumer_offsets``): Kafka's bytes, round trips, hostile input."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from sundial.broker.coordinator_schema import SchemaError
from sundial.broker.groups.share import records as r

names = st.text(min_size=0, max_size=20)
ids = st.uuids()
assignments = st.dictionaries(ids, st.frozensets(st.integers(0, 2**31 - 1), max_size=5), max_size=4)


def _key(t, *strings):
    out = struct.pack(">h", t)
    for s in strings:
        b = s.encode()
        out += struct.pack(">h", len(b)) + b
    return out


def test_metadata_record_bytes_as_kafka_writes_them():
    key, value = r.encode_record(r.ShareRecord(r.ShareGroupMetadataKey("g"), r.ShareGroupMetadataValue(5, 7)))
    assert key == _key(11, "g")
    # value version 0, Epoch int32, MetadataHash int64, empty tagged fields
    assert value == b"\x00\x00" + struct.pack(">iq", 5, 7) + b"\x00"


def test_member_and_assignment_bytes():
    tid = uuid.UUID(int=1)
    key, value = r.encode_record(r.ShareRecord(r.ShareGroupMemberMetadataKey("g", "m"),
                                               r.ShareGroupMemberMetadataValue(None, "c", "/h", ("b", "a"))))
    assert key == _key(10, "g", "m")
    # RackId null (0), ClientId "c", ClientHost "/h", names sorted [a, b], tags
    assert value == b"\x00\x00" + b"\x00" + b"\x02c" + b"\x03/h" + b"\x03" + b"\x02a" + b"\x02b" + b"\x00"
    key, value = r.encode_record(r.ShareRecord(r.ShareGroupCurrentMemberAssignmentKey("g", "m"),
                                               r.ShareGroupCurrentMemberAssignmentValue(3, 2, 0, {tid: frozenset({1, 0})})))
    assert key == _key(14, "g", "m")
    assert value == (b"\x00\x00" + struct.pack(">iib", 3, 2, 0) + b"\x02" + tid.bytes + b"\x03"
                     + struct.pack(">ii", 0, 1) + b"\x00" + b"\x00")


def test_kafka_4_0_metadata_layout_reads_with_hash_zero():
    value = b"\x00\x00" + struct.pack(">i", 9) + b"\x00"
    rec = r.decode_record(_key(11, "g"), value)
    assert rec.value == r.ShareGroupMetadataValue(9, 0)


def test_opaque_types_keep_their_bytes():
    raw = b"\x00\x00" + b"\x01\x01\x01\x00"
    rec = r.decode_record(_key(15, "g"), raw)
    assert rec.value == r.OpaqueValue(b"\x01\x01\x01\x00")
    assert r.encode_record(rec) == (_key(15, "g"), raw)
    assert r.decode_record(_key(9, "g"), None) == r.ShareRecord(r.ShareGroupPartitionMetadataKey("g"), None)


records = st.one_of(
    st.builds(lambda g, e, h: r.ShareRecord(r.ShareGroupMetadataKey(g), r.ShareGroupMetadataValue(e, h)),
              names, st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)),
    st.builds(lambda g, m, rack, c, h, t: r.ShareRecord(r.ShareGroupMemberMetadataKey(g, m),
                                                        r.ShareGroupMemberMetadataValue(rack, c, h, tuple(sorted(t)))),
              names, names, st.none() | names, names, names, st.lists(names, max_size=4)),
    st.builds(lambda g, e: r.ShareRecord(r.ShareGroupTargetAssignmentMetadataKey(g),
                                         r.ShareGroupTargetAssignmentMetadataValue(e)), names, st.integers(0, 2**31 - 1)),
    st.builds(lambda g, m, a: r.ShareRecord(r.ShareGroupTargetAssignmentMemberKey(g, m),
                                            r.ShareGroupTargetAssignmentMemberValue(a)), names, names, assignments),
    st.builds(lambda g, m, e, p, s, a: r.ShareRecord(r.ShareGroupCurrentMemberAssignmentKey(g, m),
                                                     r.ShareGroupCurrentMemberAssignmentValue(e, p, s, a)),
              names, names, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(-128, 127), assignments),
    st.builds(lambda g, b: r.ShareRecord(r.ShareGroupStatePartitionMetadataKey(g), r.OpaqueValue(b)),
              names, st.binary(max_size=20)),
)


@given(records)
def test_round_trip(record):
    key, value = r.encode_record(record)
    assert r.is_share_group_key(key)
    assert r.decode_record(key, value) == record
    tomb = r.decode_record(key, None)
    assert tomb.key == record.key and tomb.value is None


@settings(max_examples=300)
@given(records, st.data())
def test_truncated_or_garbled_values_raise_schema_error_only(record, data):
    key, value = r.encode_record(record)
    if isinstance(record.value, r.OpaqueValue):
        return
    cut = data.draw(st.integers(0, len(value) - 1))
    if isinstance(record.value, r.ShareGroupMetadataValue) and cut == 7:
        return      # Kafka 4.0's layout is exactly this long (epoch then the tagged fields)
    with pytest.raises(SchemaError):
        r.decode_record(key, value[:cut])
    garbled = bytearray(value)
    i = data.draw(st.integers(0, len(garbled) - 1))
    garbled[i] = data.draw(st.integers(0, 255))
    try:
        r.decode_record(key, bytes(garbled))
    except SchemaError:
        pass


def test_not_share_types():
    assert not r.is_share_group_key(_key(3, "g"))
    with pytest.raises(SchemaError):
        r.decode_record(_key(3, "g"), None)
    with pytest.raises(SchemaError):
        r.decode_record(_key(11, "g") + b"x", None)
