"""Wire primitives against kafka-python's codecs, and the reader's bounds checks."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.old.types import VarInt32, VarInt64
from kafka.protocol.schemas.fields.codecs.types import Bytes as KpBytes
from kafka.protocol.schemas.fields.codecs.types import String as KpString
from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32

from sundial.protocol.errors import ProtocolError
from sundial.protocol.primitives import (
    Reader,
    uvarint_bytes,
    write_array_len,
    write_bytes,
    write_string,
    write_tagged_fields,
    write_uvarint,
    write_varint,
    write_varlong,
)

FAST = settings(max_examples=200, deadline=None)


def written(write, *args) -> bytes:
    """What the primitive ``write`` appends to an empty buffer for ``args``."""
    out = bytearray()
    write(out, *args)
    return bytes(out)


@FAST
@given(st.integers(0, 2**32 - 1))
def test_uvarint_matches_kafka_python(n):
    out = written(write_uvarint, n)
    assert out == uvarint_bytes(n)
    if n < 2**31:
        assert out == UnsignedVarInt32.encode(n)
    assert Reader(out).uvarint() == n


@FAST
@given(st.integers(-(2**31), 2**31 - 1))
def test_zigzag_varint_matches_kafka_python(n):
    out = written(write_varint, n)
    assert out == VarInt32.encode(n)
    assert Reader(out).varint() == n


@FAST
@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_varlong_matches_kafka_python(n):
    out = written(write_varlong, n)
    assert out == VarInt64.encode(n)
    assert Reader(out).varlong() == n


@FAST
@given(st.one_of(st.none(), st.text(max_size=40)), st.booleans())
def test_strings_match_kafka_python(s, compact):
    out = written(write_string, s, compact)
    assert out == KpString("utf-8").encode(s, compact=compact)
    assert Reader(out).nullable_string(compact) == s


@FAST
@given(st.one_of(st.none(), st.binary(max_size=40)), st.booleans())
def test_bytes_match_kafka_python(b, compact):
    out = written(write_bytes, b, compact)
    assert out == KpBytes.encode(b, compact=compact)
    view = Reader(out).bytes_view(compact)
    assert (None if view is None else bytes(view)) == b


def test_array_lengths():
    for compact in (False, True):
        for n in (None, 0, 3):
            out = written(write_array_len, n, compact)
            assert Reader(out + b"\x00" * 3).array_count(compact) == (-1 if n is None else n)


def test_tagged_fields_round_trip():
    out = written(write_tagged_fields, {5: b"\x01\x02", 0: b""})
    assert out == b"\x02\x00\x00\x05\x02\x01\x02"
    assert {k: bytes(v) for k, v in Reader(out).tagged_fields().items()} == {0: b"", 5: b"\x01\x02"}
    assert written(write_tagged_fields, None) == b"\x00" and Reader(b"\x00").tagged_fields() is None


@pytest.mark.parametrize(("data", "call"), [
    (b"\x00", "int16"), (b"\x00\x00\x00", "int32"), (b"\x00" * 7, "int64"), (b"", "int8"),
    (b"\x00" * 15, "uuid"), (b"\x80\x80", "uvarint"), (b"\xff\xff\xff\xff\xff\x01", "uvarint"),
    (b"\xff" * 11, "varlong"), (b"\x00\x05abc", "string"), (b"\xff\xff", "string"),
    (b"\x00\x02\xc3\x28", "string"), (b"\xff\xfe", "nullable_string"), (b"\x00\x00\x00\x09abc", "bytes_view"),
    (b"\xff\xff\xff\xfe", "bytes_view"), (b"\x7f\xff\xff\xff", "array_count"), (b"\xff\xff\xff\xf0", "array_count"),
    (b"\x05\x00\x00", "tagged_fields"), (b"\x01\x00\x09ab", "tagged_fields"),
])
def test_reader_refuses_what_is_not_there(data, call):
    with pytest.raises(ProtocolError):
        getattr(Reader(data), call)()


def test_array_count_checks_bytes_left_before_allocating():
    r = Reader(b"\x00\x00\x10\x00" + b"\x00" * 100)  # 4096 elements claimed, 100 bytes left
    with pytest.raises(ProtocolError, match="cannot fit"):
        r.array_count(min_item_bytes=4)
    assert Reader(b"\x00\x00\x00\x19" + b"\x00" * 100).array_count(min_item_bytes=4) == 25


def test_compact_lengths_are_n_plus_one():
    assert Reader(b"\x00").nullable_string(True) is None
    assert Reader(b"\x01").nullable_string(True) == ""
    assert Reader(b"\x04abc").string(True) == "abc"
    with pytest.raises(ProtocolError):
        Reader(b"\x00").string(True)


def test_views_do_not_copy():
    data = b"\x00\x00\x00\x03abc"
    view = Reader(data).bytes_view()
    assert view.obj is data


def test_kafka_python_reader_agrees_on_uvarint_decoding():
    for n in (0, 1, 127, 128, 300, 2**21, 2**28 + 5, 2**31 - 1):
        encoded = uvarint_bytes(n)
        assert UnsignedVarInt32.decode(io.BytesIO(encoded)) == n
