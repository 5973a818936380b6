"""Transaction metadata state machine against a model of Kafka's transition table, and the
``__transaction_state`` key/value codec against a hand-built byte layout."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire_bytes import uvarint

from sundial.broker.txn.schema import (
    SchemaError,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)
from sundial.broker.txn.state import (
    COMPLETED,
    IllegalTransition,
    TransactionMetadata,
    TxnError,
    TxnState,
)

S = TxnState

#: Kafka's table, written out independently of broker.txn.state.VALID_PREVIOUS.
MODEL_PREVIOUS = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}
STATE_BYTES = {"Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4,
               "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7}


def test_state_ids_and_names_are_kafkas():
    for name, byte in STATE_BYTES.items():
        assert TxnState(byte).kafka_name == name
        assert TxnState.from_kafka_name(name) == TxnState(byte)


OPS = ["bump", "add", "commit", "abort", "complete", "fence", "fence_abort", "dead", "fail"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3)), max_size=40))
def test_random_transitions_follow_the_table(ops):
    md = TransactionMetadata.new("t", 1000, 60_000, 0)
    md.complete_transition(md.prepare_increment_producer_epoch(60_000, None, 0))
    model_state, model_epoch, model_parts = "Empty", 0, set()
    now = 1
    for op, arg in ops:
        now += 1
        before = md.state.kafka_name
        pending_before = md.pending_state
        try:
            if op == "bump":
                transit = md.prepare_increment_producer_epoch(60_000, None, now)
            elif op == "add":
                transit = md.prepare_add_partitions({("a", arg)}, now)
            elif op == "commit":
                transit = md.prepare_abort_or_commit(S.PREPARE_COMMIT, now)
            elif op == "abort":
                transit = md.prepare_abort_or_commit(S.PREPARE_ABORT, now)
            elif op == "complete":
                if md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    raise IllegalTransition("complete needs a prepare state")
                transit = md.prepare_complete(now)
            elif op == "fence":
                transit = md.prepare_fence_producer_epoch()
                assert transit.producer_epoch == model_epoch + 1
                # A fence is never completed: it becomes a PrepareAbort at the fenced epoch.
                transit = md.begin_abort_after_fence(now)
            elif op == "fence_abort":
                raise IllegalTransition("no fence pending")
            elif op == "dead":
                transit = md.prepare_dead()
            else:
                raise IllegalTransition("fail is a write failure")
        except IllegalTransition:
            if op == "fail" and md.pending_state is not None:
                md.abort_transition()
            else:
                assert md.state.kafka_name == before and md.pending_state == pending_before
            continue
        target = transit.state.kafka_name
        if op == "fence":
            assert before in MODEL_PREVIOUS["PrepareEpochFence"]
            model_epoch += 1
        else:
            assert before in MODEL_PREVIOUS[target], (before, target)
        if op == "dead":
            md.abort_transition()  # a tombstone write is not applied to the metadata
            continue
        md.complete_transition(transit)
        model_state = target
        if op == "bump":
            model_epoch += 1
            model_parts = set()
        elif op == "add":
            model_parts.add(("a", arg))
        elif op == "complete":
            model_parts = set()
        assert md.state.kafka_name == model_state
        assert md.producer_epoch == model_epoch
        assert md.partitions == model_parts
        if md.state in COMPLETED:
            assert not md.partitions
        if md.state == S.EMPTY:
            assert md.txn_start_timestamp_ms == -1


def test_pending_transition_blocks_another():
    md = TransactionMetadata.new("t", 1, 1000, 0)
    md.complete_transition(md.prepare_increment_producer_epoch(1000, None, 0))
    md.prepare_add_partitions({("a", 0)}, 1)
    with pytest.raises(IllegalTransition):
        md.prepare_add_partitions({("a", 1)}, 2)
    md.abort_transition()
    assert md.state == S.EMPTY and md.pending_state is None


def test_kip360_epoch_rules():
    md = TransactionMetadata.new("t", 7, 1000, 0)
    md.complete_transition(md.prepare_increment_producer_epoch(1000, None, 0))  # epoch 0
    md.complete_transition(md.prepare_increment_producer_epoch(1000, 0, 1))     # expected current: bump
    assert (md.producer_epoch, md.last_producer_epoch) == (1, 0)
    retry = md.prepare_increment_producer_epoch(1000, 0, 2)                      # retry of that bump
    assert (retry.producer_epoch, retry.last_producer_epoch) == (1, 0)
    md.abort_transition()
    with pytest.raises(TxnError) as exc:
        md.prepare_increment_producer_epoch(1000, 5, 3)
    assert exc.value.error == "PRODUCER_FENCED"


def test_rotation_when_epoch_is_exhausted():
    md = TransactionMetadata.new("t", 7, 1000, 0)
    md.producer_epoch = 32766
    md.state = S.COMPLETE_COMMIT
    assert md.is_producer_epoch_exhausted
    t = md.prepare_producer_id_rotation(8, 1000, 5, True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch) == (8, 0, 7, 32766)


# -- codec ------------------------------------------------------------------------------------

def _kafka_value_v0(pid, epoch, timeout, status, groups, last, start) -> bytes:
    out = struct.pack(">hqhib", 0, pid, epoch, timeout, status)
    if groups is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(groups))
        for topic, ids in groups:
            raw = topic.encode()
            out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(ids))
            out += b"".join(struct.pack(">i", p) for p in ids)
    return out + struct.pack(">qq", last, start)


def test_value_v0_bytes():
    v = TxnLogValue(5, 2, 60_000, S.ONGOING, frozenset({("b", 1), ("a", 3), ("a", 0)}), 1_700_000_000_123,
                    1_700_000_000_000)
    assert encode_value(v) == _kafka_value_v0(5, 2, 60_000, 1, [("a", [0, 3]), ("b", [1])],
                                              1_700_000_000_123, 1_700_000_000_000)
    assert decode_value(encode_value(v)) == v
    empty = TxnLogValue(5, 0, 60_000, S.EMPTY, frozenset(), 9, -1)
    assert encode_value(empty) == _kafka_value_v0(5, 0, 60_000, 0, None, 9, -1)
    assert decode_value(encode_value(empty)) == empty


def test_value_v1_flexible_is_read():
    body = (struct.pack(">hqhib", 1, 9, 3, 1000, 2) + uvarint(2) + uvarint(2) + b"t" + uvarint(2)
            + struct.pack(">i", 4) + uvarint(0))
    body += struct.pack(">qq", 50, 40)
    body += uvarint(2) + uvarint(0) + uvarint(8) + struct.pack(">q", 8) + uvarint(7) + uvarint(1) + b"\x00"
    v = decode_value(body)
    assert (v.producer_id, v.producer_epoch, v.state, v.partitions, v.previous_producer_id) == (
        9, 3, S.PREPARE_COMMIT, frozenset({("t", 4)}), 8)


def test_every_cut_of_a_value_is_refused_with_schema_error():
    v = TxnLogValue(5, 2, 60_000, S.ONGOING, frozenset({("b", 1), ("a", 3)}), 1_700_000_000_123, 1_700_000_000_000)
    raw = encode_value(v)
    for cut in range(len(raw)):
        with pytest.raises(SchemaError):
            decode_value(raw[:cut])


def test_key_bytes_and_other_key_versions():
    assert encode_key("tx-é") == b"\x00\x00\x00\x05tx-\xc3\xa9"
    assert decode_key(encode_key("tx-é")) == "tx-é"
    assert decode_key(b"\x00\x01\x00\x01a") is None
    with pytest.raises(SchemaError):
        decode_key(b"\x00\x00\x00\x09ab")
    with pytest.raises(SchemaError):
        decode_value(b"\x00\x07")


@given(st.text(max_size=30))
def test_java_hash_and_partition(text):
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (h * 31 + unit) % (1 << 32)
    assert java_string_hash(text) == (h - (1 << 32) if h >= 1 << 31 else h)
    assert 0 <= partition_for(text, 50) < 50


def test_java_hash_known_values():
    assert java_string_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
