"""Test helpers: schema-driven Hypothesis values and independent kafka-python oracles.

* ``values(message_cls, version)``: a Hypothesis strategy of nested dicts with the
  snake_case field names of a kafka-python 3 message schema at ``version`` (only the
  fields that version has). Tagged struct fields are absent or non-default.
* ``to_kp(message_cls, value, version)``: the same value as a kafka-python object,
  built with kafka-python's own constructors (not Sundial's dict builder).
* ``old_body(old_cls, message_cls, value, version)``: the body as encoded by the
  hand-written ``kafka.protocol.old`` structs (an encoding independent of the JSON
  schemas), from the value laid out positionally in wire order.
* ``OLD_CLASSES[(api_key, version)] = (request_cls, response_cls)``.
* ``iter_frames(buffers)``: joins an ``encode_response`` result, reading payload
  objects (``Slice``) through their ``data``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import uuid

from hypothesis import strategies as st
from kafka.protocol import old as kp_old
from kafka.protocol.schemas.fields.codecs.types import UUID as UUIDCodec
from kafka.protocol.schemas.fields.codecs.types import BitField, Float64, String
from kafka.protocol.schemas.fields.codecs.types import Bytes as BytesCodec
from kafka.protocol.schemas.fields.codecs.types import Int8, Int16, Int32, Int64, UnsignedInt16
from kafka.protocol.schemas.fields.codecs.types import Boolean

from sundial.protocol.schema_codec import SCHEMA_CLASSES

INT_RANGES = {
    Int8: (-(2**7), 2**7 - 1),
    Int16: (-(2**15), 2**15 - 1),
    Int32: (-(2**31), 2**31 - 1),
    Int64: (-(2**63), 2**63 - 1),
    UnsignedInt16: (0, 2**16 - 1),
}

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


class Slice:
    """A stand-in for a storage file slice: an integer ``size`` and nothing else read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


def iter_frames(buffers) -> bytes:
    return b"".join(p.data if isinstance(p, Slice) else bytes(p) for p in buffers)


# -- strategies -------------------------------------------------------------------------

def _scalar(field, version: int):
    codec = field._type
    nullable = field.nullable_for_version_q(version)
    if codec in INT_RANGES:
        lo, hi = INT_RANGES[codec]
        return st.one_of(st.sampled_from([lo, hi, 0, -1]), st.integers(lo, hi))
    if codec is Boolean:
        return st.booleans()
    if codec is Float64:
        return st.floats(allow_nan=False)
    if codec is UUIDCodec:
        return st.one_of(st.none(), st.uuids().filter(lambda u: u.int != 0))
    if codec is BitField:
        return st.one_of(st.none(), st.sets(st.integers(0, 30), max_size=4))
    if isinstance(codec, String):
        s = TEXT
        return st.one_of(st.none(), s) if nullable else s
    if codec is BytesCodec:
        b = st.binary(max_size=24)
        return st.one_of(st.none(), b) if nullable else b
    raise NotImplementedError(f"no strategy for {field!r}")


def _is_all_default(struct_field, value: dict, version: int) -> bool:
    for f in struct_field.untagged_fields(version):
        if value.get(f.name, f.default) != f.default:
            return False
    return True


def struct_values(struct_field, version: int) -> st.SearchStrategy:
    entries = {}
    for f in struct_field._fields:
        if not f.for_version_q(version):
            continue
        tagged = f.tagged_field_q(version)
        if f.is_struct_array():
            inner = struct_values(f.array_of, version)
            s = st.lists(inner, max_size=3)
            if f.nullable_for_version_q(version):
                s = st.one_of(st.none(), s)
        elif f.is_struct():
            inner = struct_values(f, version)
            if tagged:
                s = st.one_of(st.none(), inner.filter(lambda d, f=f: not _is_all_default(f, d, version)))
            elif f.nullable_for_version_q(version):
                s = st.one_of(st.none(), inner)
            else:
                s = inner
        elif f.is_array():
            s = st.lists(_scalar(f.array_of, version), max_size=4)
            if f.nullable_for_version_q(version):
                s = st.one_of(st.none(), s)
        else:
            s = _scalar(f, version)
        entries[f.name] = s
    return st.fixed_dictionaries(entries)


def values(message_cls, version: int) -> st.SearchStrategy:
    return struct_values(message_cls._struct, version)


def default_values(message_cls, version: int) -> dict:
    """The all-defaults value (empty arrays, nulls where allowed)."""
    return {}


# -- kafka-python objects built with kafka-python's constructors ---------------------------

def _kp_struct(struct_field, make, value: dict, version: int):
    kwargs = {}
    for f in struct_field._fields:
        if not f.for_version_q(version) or f.name not in value:
            continue
        v = value[f.name]
        if f.is_struct_array() and v is not None:
            v = [_kp_struct(f.array_of, f.array_of.data_class, x, version) for x in v]
        elif f.is_struct() and not f.is_struct_array() and v is not None:
            v = _kp_struct(f, f.data_class, v, version)
        if f.tagged_field_q(version) and v is None:
            continue
        kwargs[f.name] = v
    return make(version=version, **kwargs)


def to_kp(message_cls, value: dict, version: int):
    return _kp_struct(message_cls._struct, message_cls, value, version)


# -- kafka.protocol.old oracle ------------------------------------------------------------

def _collect_old_classes() -> dict:
    table: dict = {}
    for info in pkgutil.iter_modules(kp_old.__path__):
        module = importlib.import_module(f"kafka.protocol.old.{info.name}")
        for obj in vars(module).values():
            if not isinstance(obj, type) or obj.__module__ != module.__name__:
                continue
            key = getattr(obj, "API_KEY", None)
            ver = getattr(obj, "API_VERSION", None)
            schema = getattr(obj, "SCHEMA", None)
            if not isinstance(key, int) or not isinstance(ver, int) or schema is None:
                continue
            kind = 0 if obj.__name__.split("_v")[0].endswith("Request") else 1
            slot = table.setdefault((key, ver), [None, None])
            slot[kind] = obj
    return {k: tuple(v) for k, v in table.items()}


#: Old structs that do not encode what Kafka sends: DescribeAcls v2 reuses the v1 schema,
#: but Kafka's v2 is flexible (DescribeAclsRequest.json: flexibleVersions 2+). DescribeLogDirs v0's
#: old request struct has Partitions as one int32 where Kafka's JSON has []int32.
OLD_WRONG = {(29, 2), (35, 0)}

OLD_CLASSES = {k: v for k, v in _collect_old_classes().items() if k not in OLD_WRONG}


def _old_schema(old_schema, fields_iter, value: dict, version: int) -> tuple:
    """Consume new-schema fields in wire order for each field of an old Schema."""
    from kafka.protocol.old.types import Schema, TaggedFields

    out = []
    for old_field in old_schema.fields:
        if old_field is TaggedFields:
            out.append({})
            continue
        f = next(fields_iter)
        if isinstance(old_field, Schema) and not f.is_struct():
            # an old inline group of fields (e.g. CreatePartitions' new_partitions)
            out.append(_old_schema(old_field, _chain(f, fields_iter), value, version))
            continue
        out.append(_old_value(old_field, f, value.get(f.name, f.default), version))
    return tuple(out)


def _chain(first, rest):
    yield first
    yield from rest


def _old_value(old_type, new_field, value, version: int):
    """Lay ``value`` out as the positional structure ``old_type`` encodes."""
    from kafka.protocol.old.types import Array, Schema

    if isinstance(old_type, Schema):
        fields = iter(new_field.untagged_fields(version))
        result = _old_schema(old_type, fields, value, version)
        leftover = list(fields)
        if leftover:
            raise AssertionError(f"old schema lacks new fields {[f.name for f in leftover]} at v{version}")
        return result
    if isinstance(old_type, Array):
        if value is None:
            return None
        inner = old_type.array_of
        if new_field.is_struct_array():
            if not isinstance(inner, Schema):
                # old structs spell a one-field struct array as an array of that field
                (only,) = new_field.array_of.untagged_fields(version)
                return [_old_value(inner, only, x.get(only.name, only.default) if isinstance(x, dict) else x, version)
                        for x in value]
            return [_old_value(inner, new_field.array_of, x, version) for x in value]
        return [_old_value(inner, new_field.array_of, x, version) for x in value]
    return value


def strip_tagged(struct_field, value, version: int):
    """``value`` without tagged fields (old structs never write them)."""
    if not isinstance(value, dict):
        return value
    out = {}
    for f in struct_field._fields:
        if f.name not in value or not f.for_version_q(version) or f.tagged_field_q(version):
            continue
        v = value[f.name]
        if f.is_struct_array() and v is not None:
            v = [strip_tagged(f.array_of, x, version) for x in v]
        elif f.is_struct() and v is not None:
            v = strip_tagged(f, v, version)
        out[f.name] = v
    return out


def old_body(old_cls, message_cls, value: dict, version: int) -> bytes:
    return bytes(old_cls.SCHEMA.encode(_old_value(old_cls.SCHEMA, message_cls._struct, value, version)))


def old_comparable(message_cls, value: dict, version: int) -> dict:
    return strip_tagged(message_cls._struct, value, version)


def schema_classes(api_key: int):
    return SCHEMA_CLASSES[api_key]


# -- deterministic "every field set" values (table-driven tests) ------------------------------

def _full_scalar(field, version: int, salt: int):
    codec = field._type
    if codec in INT_RANGES:
        lo, hi = INT_RANGES[codec]
        return max(lo, min(hi, 3 + salt)) if salt % 2 == 0 else max(lo, min(hi, -(5 + salt)))
    if codec is Boolean:
        return True
    if codec is Float64:
        return 1.5 + salt
    if codec is UUIDCodec:
        return uuid.UUID(int=0x1234 + salt)
    if codec is BitField:
        return {1, 3}
    if isinstance(codec, String):
        return f"n\u00e9-{salt}"
    if codec is BytesCodec:
        return bytes(range(salt % 7, salt % 7 + 5))
    raise NotImplementedError(f"no value for {field!r}")


def full_struct(struct_field, version: int, salt: int = 0) -> dict:
    out = {}
    for i, f in enumerate(struct_field._fields):
        if not f.for_version_q(version):
            continue
        s = salt * 7 + i
        if f.is_struct_array():
            out[f.name] = [full_struct(f.array_of, version, s), full_struct(f.array_of, version, s + 1)]
        elif f.is_struct():
            out[f.name] = full_struct(f, version, s)
        elif f.is_array():
            out[f.name] = [_full_scalar(f.array_of, version, s), _full_scalar(f.array_of, version, s + 2)]
        else:
            out[f.name] = _full_scalar(f, version, s)
    return out


def full_value(message_cls, version: int) -> dict:
    return full_struct(message_cls._struct, version)


def sparse_struct(struct_field, version: int) -> dict:
    """One element in every struct array, every other field left to its default."""
    out = {}
    for f in struct_field._fields:
        if not f.for_version_q(version) or f.tagged_field_q(version):
            continue
        if f.is_struct_array():
            out[f.name] = [sparse_struct(f.array_of, version)]
        elif f.is_struct():
            out[f.name] = sparse_struct(f, version)
    return out


def case_value(message_cls, version: int, case: str) -> dict:
    if case == "defaults":
        return {}
    if case == "sparse":
        return sparse_struct(message_cls._struct, version)
    return full_value(message_cls, version)


CASE_NAMES = ("defaults", "sparse", "full")


def assert_same(mine, kp, path="request"):
    """Compare a hand-written dataclass tree with kafka-python's object tree."""
    if dataclasses.is_dataclass(mine):
        for f in dataclasses.fields(mine):
            assert_same(getattr(mine, f.name), getattr(kp, f.name), f"{path}.{f.name}")
    elif isinstance(mine, tuple):
        kp = list(kp or [])
        assert len(mine) == len(kp), path
        for i, (a, b) in enumerate(zip(mine, kp)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(mine, memoryview):
        assert kp is not None and bytes(mine) == bytes(kp), path
    else:
        assert mine == kp, f"{path}: {mine!r} != {kp!r}"
