"""The consumer-group (KIP-848) records of ``__consumer_offsets``: record types 3-8 and 16.

Ground truth is computed here, independently of the codec: an oracle assembles the bytes
from Kafka's JSON field layouts with ``struct.pack`` (keys: int16 type + int16-length
strings; values: int16 version 0 + flexible struct, uvarint ``N + 1`` lengths, a
tagged-field section after every struct). A few records are also pinned to the hex that
Kafka's own generated serializer produces for them. Hypothesis checks that encoding
gives the oracle's bytes, that decoding them gives the record back (so decode then encode
gives the same bytes), and that malformed input only ever raises ``SchemaError``.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.groups.modern.records import (
    RECORD_TYPES,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CoordinatorRecord,
    MemberState,
    PartitionMetadata,
    SchemaError,
    TopicMetadata,
    decode_record,
    encode_record,
    is_consumer_group_key,
)
from sundial.broker.groups.offsets import CommittedOffset, MemoryOffsetsLog, OffsetStore
from sundial.broker.groups.schema import GroupValue

# --- the oracle: Kafka's JSON layouts, by hand ----------------------------------------------------

KEY_TYPE = {ConsumerGroupMetadataKey: 3, ConsumerGroupPartitionMetadataKey: 4, ConsumerGroupMemberMetadataKey: 5,
            ConsumerGroupTargetAssignmentMetadataKey: 6, ConsumerGroupTargetAssignmentMemberKey: 7,
            ConsumerGroupCurrentMemberAssignmentKey: 8, ConsumerGroupRegularExpressionKey: 16}


def uv(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def cstr(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return uv(len(raw) + 1) + raw


def carr(items: list[bytes]) -> bytes:
    return uv(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def tags(fields: dict[int, bytes]) -> bytes:
    return uv(len(fields)) + b"".join(uv(t) + uv(len(fields[t])) + fields[t] for t in sorted(fields))


def oracle_key(key) -> bytes:
    parts = {3: ("group_id",), 4: ("group_id",), 6: ("group_id",), 5: ("group_id", "member_id"),
             7: ("group_id", "member_id"), 8: ("group_id", "member_id"), 16: ("group_id", "regular_expression")}
    t = KEY_TYPE[type(key)]
    return struct.pack(">h", t) + b"".join(s16(getattr(key, f)) for f in parts[t])


def oracle_assignment(a) -> bytes:
    return carr([t.bytes + carr([struct.pack(">i", p) for p in sorted(a[t])]) + NO_TAGS for t in sorted(a)])


def oracle_value(v) -> bytes:
    head = struct.pack(">h", 0)
    if isinstance(v, ConsumerGroupMetadataValue):
        hashed = {0: struct.pack(">q", v.metadata_hash)} if v.metadata_hash else {}
        return head + struct.pack(">i", v.epoch) + tags(hashed)
    if isinstance(v, ConsumerGroupPartitionMetadataValue):
        return head + carr([t.topic_id.bytes + cstr(t.topic_name) + struct.pack(">i", t.num_partitions)
                            + carr([struct.pack(">i", pm.partition) + carr([cstr(r) for r in pm.racks]) + NO_TAGS
                                    for pm in t.partition_metadata]) + NO_TAGS
                            for t in v.topics]) + NO_TAGS
    if isinstance(v, ConsumerGroupMemberMetadataValue):
        c = v.classic_member_metadata
        if c is None:
            tagged = {0: b"\x00"}
        elif c == ClassicMemberMetadata(0, ()):
            tagged = {}
        else:
            tagged = {0: b"\x01" + struct.pack(">i", c.session_timeout_ms)
                      + carr([cstr(p.name) + uv(len(p.metadata) + 1) + p.metadata + NO_TAGS
                              for p in c.supported_protocols]) + NO_TAGS}
        return (head + cstr(v.instance_id) + cstr(v.rack_id) + cstr(v.client_id) + cstr(v.client_host)
                + carr([cstr(n) for n in v.subscribed_topic_names]) + cstr(v.subscribed_topic_regex)
                + struct.pack(">i", v.rebalance_timeout_ms) + cstr(v.server_assignor) + tags(tagged))
    if isinstance(v, ConsumerGroupTargetAssignmentMetadataValue):
        return head + struct.pack(">i", v.assignment_epoch) + NO_TAGS
    if isinstance(v, ConsumerGroupTargetAssignmentMemberValue):
        return head + oracle_assignment(v.topic_partitions) + NO_TAGS
    if isinstance(v, ConsumerGroupCurrentMemberAssignmentValue):
        return (head + struct.pack(">iib", v.member_epoch, v.previous_member_epoch, v.state)
                + oracle_assignment(v.assigned_partitions) + oracle_assignment(v.partitions_pending_revocation)
                + NO_TAGS)
    assert isinstance(v, ConsumerGroupRegularExpressionValue)
    return head + carr([cstr(t) for t in v.topics]) + struct.pack(">qq", v.version, v.timestamp_ms) + NO_TAGS


# --- golden records, one of each type --------------------------------------------------------------

T1 = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
T2 = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")
GOLDEN = [
    (CoordinatorRecord(ConsumerGroupMetadataKey("grp"), ConsumerGroupMetadataValue(5, -3)),
     struct.pack(">h", 3) + struct.pack(">h", 3) + b"grp",
     struct.pack(">hi", 0, 5) + b"\x01\x00\x08" + struct.pack(">q", -3)),
    (CoordinatorRecord(ConsumerGroupPartitionMetadataKey("grp"), ConsumerGroupPartitionMetadataValue((
        TopicMetadata(T1, "orders", 3, (PartitionMetadata(0, ("r1", "r2")),)), TopicMetadata(T2, "x", 1)))),
     struct.pack(">hh", 4, 3) + b"grp",
     struct.pack(">h", 0) + b"\x03" + T1.bytes + b"\x07orders" + struct.pack(">i", 3)
     + b"\x02" + struct.pack(">i", 0) + b"\x03\x03r1\x03r2" + b"\x00" + b"\x00"
     + T2.bytes + b"\x02x" + struct.pack(">i", 1) + b"\x01" + b"\x00" + b"\x00"),
    (CoordinatorRecord(ConsumerGroupMemberMetadataKey("grp", "m-1"), ConsumerGroupMemberMetadataValue(
        "inst", None, "cid", "/10.0.0.1", ("a", "bb"), None, "uniform", 45000)),
     struct.pack(">hh", 5, 3) + b"grp" + struct.pack(">h", 3) + b"m-1",
     struct.pack(">h", 0) + b"\x05inst" + b"\x00" + b"\x04cid" + b"\x0a/10.0.0.1" + b"\x03\x02a\x03bb" + b"\x00"
     + struct.pack(">i", 45000) + b"\x08uniform" + b"\x01\x00\x01\x00"),
    (CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey("grp"), ConsumerGroupTargetAssignmentMetadataValue(9)),
     struct.pack(">hh", 6, 3) + b"grp", struct.pack(">hi", 0, 9) + b"\x00"),
    (CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"), ConsumerGroupTargetAssignmentMemberValue(
        {T2: frozenset({4, 1}), T1: frozenset()})),
     struct.pack(">hh", 7, 3) + b"grp" + struct.pack(">h", 3) + b"m-1",
     struct.pack(">h", 0) + b"\x03" + T1.bytes + b"\x01\x00" + T2.bytes + b"\x03" + struct.pack(">ii", 1, 4)
     + b"\x00" + b"\x00"),
    (CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"), ConsumerGroupCurrentMemberAssignmentValue(
        7, 6, MemberState.UNREVOKED_PARTITIONS, {T1: frozenset({2})}, {T2: frozenset({0})})),
     struct.pack(">hh", 8, 3) + b"grp" + struct.pack(">h", 3) + b"m-1",
     struct.pack(">hiib", 0, 7, 6, 1) + b"\x02" + T1.bytes + b"\x02" + struct.pack(">i", 2) + b"\x00"
     + b"\x02" + T2.bytes + b"\x02" + struct.pack(">i", 0) + b"\x00" + b"\x00"),
    (CoordinatorRecord(ConsumerGroupRegularExpressionKey("grp", "ord.*"), ConsumerGroupRegularExpressionValue(
        ("orders", "ordx"), 42, 1_700_000_000_000)),
     struct.pack(">hh", 16, 3) + b"grp" + struct.pack(">h", 5) + b"ord.*",
     struct.pack(">h", 0) + b"\x03\x07orders\x05ordx" + struct.pack(">qq", 42, 1_700_000_000_000) + b"\x00"),
]


@pytest.mark.parametrize("record,key_bytes,value_bytes", GOLDEN, ids=lambda x: type(x).__name__)
def test_golden_bytes_of_each_type(record, key_bytes, value_bytes):
    assert encode_record(record) == (key_bytes, value_bytes)
    assert decode_record(key_bytes, value_bytes) == record
    assert (oracle_key(record.key), oracle_value(record.value)) == (key_bytes, value_bytes)


def test_every_record_type_has_a_golden_record():
    assert {KEY_TYPE[type(r.key)] for r, _, _ in GOLDEN} == set(RECORD_TYPES) == {3, 4, 5, 6, 7, 8, 16}


# Hex that Kafka's generated serializer (MessageUtil.toVersionPrefixedBytes) writes for these records.
KAFKA_VECTORS = [
    (CoordinatorRecord(ConsumerGroupMetadataKey("g1"), ConsumerGroupMetadataValue(7)),
     "000300026731", "00000000000700"),
    (CoordinatorRecord(ConsumerGroupMetadataKey("g1"), ConsumerGroupMetadataValue(7, 0x1122334455667788)),
     "000300026731", "0000000000070100081122334455667788"),
    (CoordinatorRecord(ConsumerGroupMemberMetadataKey("g1", "m1"),
                       ConsumerGroupMemberMetadataValue(None, None, "c", "h", ("t",), None, None, 1000, None)),
     "00050002673100026d31", "000000000263026802027400000003e80001000100"),
    (CoordinatorRecord(ConsumerGroupMemberMetadataKey("g1", "m1"), ConsumerGroupMemberMetadataValue(
        None, None, "c", "h", ("t",), None, None, 1000,
        ClassicMemberMetadata(30000, (ClassicProtocol("range", b"\x01\x02"),)))),
     "00050002673100026d31", "000000000263026802027400000003e8000100110100007530020672616e67650301020000"),
    (CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey("g1"), ConsumerGroupTargetAssignmentMetadataValue(3)),
     "000600026731", "00000000000300"),
    (CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey("g1", "m1"),
                       ConsumerGroupTargetAssignmentMemberValue({T1: frozenset({0})})),
     "00070002673100026d31", "0000020102030405060708090a0b0c0d0e0f1002000000000000"),
    (CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey("g1", "m1"),
                       ConsumerGroupCurrentMemberAssignmentValue(1, 0, MemberState.STABLE, {T1: frozenset({0})}, {})),
     "00080002673100026d31", "0000000000010000000000020102030405060708090a0b0c0d0e0f100200000000000100"),
]


@pytest.mark.parametrize("record,key_hex,value_hex", KAFKA_VECTORS)
def test_kafka_serializer_vectors(record, key_hex, value_hex):
    assert encode_record(record) == (bytes.fromhex(key_hex), bytes.fromhex(value_hex))
    assert decode_record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == record


def test_tombstones():
    for record, key_bytes, _ in GOLDEN:
        tomb = CoordinatorRecord(record.key, None)
        assert encode_record(tomb) == (key_bytes, None)
        assert decode_record(key_bytes, None) == tomb


# --- what other Kafka versions wrote ---------------------------------------------------------------

def test_absent_tags_read_as_kafka_defaults():
    # Kafka before 4.1 wrote no MetadataHash; an absent ClassicMemberMetadata tag is the empty struct.
    assert decode_record(oracle_key(ConsumerGroupMetadataKey("g")), struct.pack(">hi", 0, 4) + NO_TAGS).value == \
        ConsumerGroupMetadataValue(4, 0)
    member = (struct.pack(">h", 0) + cstr(None) + cstr(None) + cstr("c") + cstr("h") + carr([]) + cstr("^t.*")
              + struct.pack(">i", -1) + cstr(None) + NO_TAGS)
    value = decode_record(oracle_key(ConsumerGroupMemberMetadataKey("g", "m")), member).value
    assert value == ConsumerGroupMemberMetadataValue(None, None, "c", "h", (), "^t.*", None, -1,
                                                     ClassicMemberMetadata(0, ()))
    assert encode_record(CoordinatorRecord(ConsumerGroupMemberMetadataKey("g", "m"), value))[1] == member


def test_kafka_4_3_tags_are_skipped_as_kafka_4_2_skips_them():
    # AssignmentTimestamp: tag 0 of the target assignment metadata value.
    raw = struct.pack(">hi", 0, 3) + tags({0: struct.pack(">q", 1_700_000_000_000)})
    assert decode_record(oracle_key(ConsumerGroupTargetAssignmentMetadataKey("g")), raw).value == \
        ConsumerGroupTargetAssignmentMetadataValue(3)
    # AssignmentEpochs: tag 0 of each TopicPartitions struct (Kafka's serializer output).
    raw = bytes.fromhex("0000000000010000000000020102030405060708090a0b0c0d0e0f10020000000501000502000000090100")
    assert decode_record(oracle_key(ConsumerGroupCurrentMemberAssignmentKey("g1", "m1")), raw).value == \
        ConsumerGroupCurrentMemberAssignmentValue(1, 0, 0, {T1: frozenset({5})}, {})
    # An unknown top-level tag beside a known one.
    raw = struct.pack(">hi", 0, 1) + tags({0: struct.pack(">q", 9), 5: b"xyz"})
    assert decode_record(oracle_key(ConsumerGroupMetadataKey("g")), raw).value == ConsumerGroupMetadataValue(1, 9)


def test_unordered_and_repeated_partitions_read_as_sets():
    raw = (struct.pack(">h", 0) + carr([T2.bytes + carr([struct.pack(">i", p) for p in (3, 1, 3)]) + NO_TAGS,
                                        T1.bytes + carr([]) + NO_TAGS]) + NO_TAGS)
    value = decode_record(oracle_key(ConsumerGroupTargetAssignmentMemberKey("g", "m")), raw).value
    assert value == ConsumerGroupTargetAssignmentMemberValue({T1: frozenset(), T2: frozenset({1, 3})})


def test_is_consumer_group_key():
    assert all(is_consumer_group_key(k) for _, k, _ in GOLDEN)
    for other in (None, b"", b"\x00", struct.pack(">h", 0) + s16("g"), struct.pack(">h", 1), struct.pack(">h", 2),
                  struct.pack(">h", 9), struct.pack(">h", 17), struct.pack(">h", -1)):
        assert not is_consumer_group_key(other)


# --- refusals --------------------------------------------------------------------------------------

def refused(key, value) -> bool:
    with pytest.raises(SchemaError):
        decode_record(key, value)
    return True


def test_every_truncation_is_refused():
    vectors = [(r, bytes.fromhex(k), bytes.fromhex(v)) for r, k, v in KAFKA_VECTORS]
    for record, key_bytes, value_bytes in GOLDEN + vectors:
        for n in range(len(key_bytes)):
            assert refused(key_bytes[:n], None)
        for n in range(len(value_bytes)):
            assert refused(key_bytes, value_bytes[:n])


def test_malformed_records_are_refused():
    key = oracle_key(ConsumerGroupMetadataKey("g"))
    assert refused(None, b"")
    assert refused(struct.pack(">h", 2) + s16("g"), None)  # classic group metadata: not this module's
    assert refused(struct.pack(">h", 9) + s16("g"), None)  # share-group types are not read here
    assert refused(key + b"\x00", None)  # trailing key bytes
    assert refused(struct.pack(">hh", 3, -1), None)  # null group id
    assert refused(key, struct.pack(">hi", 1, 4) + NO_TAGS)  # value version 1 does not exist
    assert refused(key, struct.pack(">hi", 0, 4) + NO_TAGS + b"\x00")  # trailing value bytes
    assert refused(key, struct.pack(">hi", 0, 4) + tags({0: b"\x00" * 4}))  # MetadataHash not 8 bytes
    member_key = oracle_key(ConsumerGroupMemberMetadataKey("g", "m"))
    base = struct.pack(">h", 0) + cstr(None) + cstr(None)
    tail = carr([]) + cstr(None) + struct.pack(">i", 1) + cstr(None)
    assert refused(member_key, base + cstr(None) + cstr("h") + tail + NO_TAGS)  # null client id
    assert refused(member_key, base + cstr("c") + cstr("h") + b"\x00" + cstr(None) + struct.pack(">i", 1)
                   + cstr(None) + NO_TAGS)  # null topic names array
    assert refused(member_key, base + cstr("c") + cstr("h") + tail + tags({0: b"\x00\x00"}))  # struct too long
    assert refused(member_key, base + cstr("c" * 0x8000) + cstr("h") + tail + NO_TAGS)  # string too long
    assert refused(member_key, base + b"\x03\xff\xfe" + cstr("h") + tail + NO_TAGS)  # not UTF-8
    assert refused(member_key, base + cstr("c") + cstr("h") + b"\xff\xff\xff\xff\x0f" + NO_TAGS)  # huge count
    twice = struct.pack(">h", 0) + carr([T1.bytes + carr([]) + NO_TAGS] * 2) + NO_TAGS
    assert refused(oracle_key(ConsumerGroupTargetAssignmentMemberKey("g", "m")), twice)  # Kafka's loader fails too


def test_encoding_refuses_values_that_do_not_fit():
    key = ConsumerGroupMetadataKey("g")
    for bad in (CoordinatorRecord(key, ConsumerGroupMetadataValue(2**31)),
                CoordinatorRecord(key, ConsumerGroupMetadataValue(1, 2**63)),
                CoordinatorRecord(key, ConsumerGroupTargetAssignmentMetadataValue(1)),  # wrong value type
                CoordinatorRecord(ConsumerGroupMetadataKey("g" * 0x8000), None),
                CoordinatorRecord(ConsumerGroupMetadataKey("\ud800"), None),
                CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
                                  ConsumerGroupCurrentMemberAssignmentValue(1, 0, 128, {}, {})),
                CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey("g", "m"),
                                  ConsumerGroupTargetAssignmentMemberValue({T1: frozenset({2**31})})),
                CoordinatorRecord(ConsumerGroupRegularExpressionKey("g", "r"),
                                  ConsumerGroupRegularExpressionValue(("x" * 0x8000,), 1, 1))):
        with pytest.raises(SchemaError):
            encode_record(bad)
    with pytest.raises(SchemaError):
        encode_record(CoordinatorRecord(object(), None))  # type: ignore[arg-type]


# --- Hypothesis: every type round-trips against the oracle ---------------------------------------

INT8 = st.integers(-2**7, 2**7 - 1)
INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
TEXT = st.text(max_size=12)
NTEXT = st.none() | TEXT
UUIDS = st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b))
ASSIGNMENTS = st.dictionaries(UUIDS, st.frozensets(INT32, max_size=6), max_size=4)
CLASSIC = st.none() | st.builds(ClassicMemberMetadata, INT32, st.lists(
    st.builds(ClassicProtocol, TEXT, st.binary(max_size=20)), max_size=3).map(tuple))

RECORDS = st.one_of(
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupMetadataKey, TEXT),
              st.builds(ConsumerGroupMetadataValue, INT32, INT64)),
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupPartitionMetadataKey, TEXT),
              st.builds(ConsumerGroupPartitionMetadataValue, st.lists(st.builds(
                  TopicMetadata, UUIDS, TEXT, INT32, st.lists(st.builds(
                      PartitionMetadata, INT32, st.lists(TEXT, max_size=3).map(tuple)), max_size=3).map(tuple)),
                  max_size=3).map(tuple))),
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupMemberMetadataKey, TEXT, TEXT),
              st.builds(ConsumerGroupMemberMetadataValue, NTEXT, NTEXT, TEXT, TEXT,
                        st.lists(TEXT, max_size=4).map(tuple), NTEXT, NTEXT, INT32, CLASSIC)),
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupTargetAssignmentMetadataKey, TEXT),
              st.builds(ConsumerGroupTargetAssignmentMetadataValue, INT32)),
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupTargetAssignmentMemberKey, TEXT, TEXT),
              st.builds(ConsumerGroupTargetAssignmentMemberValue, ASSIGNMENTS)),
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupCurrentMemberAssignmentKey, TEXT, TEXT),
              st.builds(ConsumerGroupCurrentMemberAssignmentValue, INT32, INT32, INT8, ASSIGNMENTS, ASSIGNMENTS)),
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupRegularExpressionKey, TEXT, TEXT),
              st.builds(ConsumerGroupRegularExpressionValue, st.lists(TEXT, max_size=4).map(tuple), INT64, INT64)),
)


@settings(max_examples=400, deadline=None)
@given(RECORDS)
def test_every_type_round_trips_against_the_oracle(record):
    expected = (oracle_key(record.key), oracle_value(record.value))
    assert encode_record(record) == expected  # encode gives Kafka's layout
    assert decode_record(*expected) == record  # decode then encode gives the same bytes
    tomb = CoordinatorRecord(record.key, None)
    assert decode_record(*encode_record(tomb)) == tomb


@settings(max_examples=300, deadline=None)
@given(RECORDS, st.data())
def test_corrupted_records_only_raise_schema_error(record, data):
    key_bytes, value_bytes = encode_record(record)
    buf = bytearray(value_bytes)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for value in (bytes(buf), bytes(buf[:cut]), bytes(buf) + data.draw(st.binary(max_size=4))):
        try:
            decode_record(key_bytes, value)
        except SchemaError:
            pass


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(RECORD_TYPES)), st.binary(max_size=40), st.binary(max_size=80))
def test_random_bytes_only_raise_schema_error(record_type, key_tail, value):
    for key in (struct.pack(">h", record_type) + key_tail, key_tail):
        for v in (None, value, b"\x00\x00" + value):
            try:
                decode_record(key, v)
            except SchemaError:
                pass


# --- replay through the offsets store -------------------------------------------------------------

def test_offsets_store_hands_consumer_group_records_to_its_replay_hook():
    log = MemoryOffsetsLog()
    OffsetStore(log).commit("g", {("t", 0): CommittedOffset(5, 1, "m", 10)}, now_ms=1)
    records = [r for r, _, _ in GOLDEN] + [CoordinatorRecord(GOLDEN[0][0].key, None)]
    log.append([encode_record(r) for r in records[:4]], now_ms=2)
    log.append([(GOLDEN[1][1], b"\x00\x00\x02")], now_ms=3)  # truncated: skipped with a warning
    log.append([(struct.pack(">h", 11) + s16("share"), b"\x00\x00")], now_ms=3)  # share groups: not read here
    log.append([encode_record(r) for r in records[4:]], now_ms=4)
    OffsetStore(log).store_group("classic", GroupValue("consumer", 1, "range", None), now_ms=5)

    seen: list[CoordinatorRecord] = []
    store = OffsetStore(log, replay_modern=seen.append)
    store.load()
    assert seen == records
    assert store.offsets_of("g") == {("t", 0): CommittedOffset(5, 1, "m", 10)}
    assert store.group_values == {"classic": GroupValue("consumer", 1, "range", None)}

    ignoring = OffsetStore(log)  # no hook: consumer-group records are ignored, the rest replays as before
    ignoring.load()
    assert ignoring.offsets == store.offsets and ignoring.group_values == store.group_values
