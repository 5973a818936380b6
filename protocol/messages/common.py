"""Helpers shared by the hand-written data-plane codecs.

``field(obj, name, default)`` reads a response field from either a ``dict`` (what
the broker's handlers build) or an object with attributes (the dataclasses here),
falling back to the schema default. ``BufferList`` accumulates an encoded frame as
a list of buffers: small writes go into a growing ``bytearray``; big payloads
(bytes/memoryviews of ``INLINE_MAX_BYTES`` or more, and payload objects with an
integer ``size``) are appended as their own elements so they are never copied.
The first element starts with a 4-byte placeholder for the frame size, filled in
by ``finish()``.
"""

from __future__ import annotations

import struct

from ..primitives import read_count, read_string, skip_tags, write_array_len, write_string

_SIZE = struct.Struct(">i")

#: Record payloads at least this big are not copied into the prefix buffer.
INLINE_MAX_BYTES = 4096

_MISSING = object()


def field(obj, name: str, default):
    if type(obj) is dict:
        return obj.get(name, default)
    return getattr(obj, name, default)


def read_topics(buf, pos: int, flex: bool, partition_min_bytes: int, read_partition, make_topic) -> tuple[tuple, int]:
    """The topics array of a data-plane request: each topic's name and its partitions array, every
    partition read by ``read_partition(buf, pos) -> (partition, pos)`` (at least ``partition_min_bytes``
    each); flexible versions end each partition and topic with a tag section. Returns (topics, pos)
    with each topic ``make_topic(name, partitions)``."""
    topics = []
    n_topics, pos = read_count(buf, pos, flex, 3 if flex else 6)
    for _ in range(n_topics):
        name, pos = read_string(buf, pos, flex)
        parts = []
        n_parts, pos = read_count(buf, pos, flex, partition_min_bytes)
        for _ in range(n_parts):
            part, pos = read_partition(buf, pos)
            if flex:
                pos = skip_tags(buf, pos)
            parts.append(part)
        if flex:
            pos = skip_tags(buf, pos)
        topics.append(make_topic(name, tuple(parts)))
    return tuple(topics), pos


def write_topics(out: bytearray, topics, flex: bool, name: str, partitions: str, write_partition, *,
                 partition_tags: bool = True) -> bytearray:
    """The topics array of a data-plane message: each topic's ``name`` field and its ``partitions``
    array, every partition written by ``write_partition(out, partition)``, which may return the
    bytearray to go on writing in (:meth:`BufferList.records`); flexible versions end each topic, and
    each partition unless its writer writes its own tags (``partition_tags=False``), with an empty tag
    section. Returns the bytearray written last."""
    write_array_len(out, len(topics), flex)
    for t in topics:
        write_string(out, field(t, name, ""), flex)
        parts = field(t, partitions, ())
        write_array_len(out, len(parts), flex)
        for p in parts:
            went_on = write_partition(out, p)
            if went_on is not None:
                out = went_on
            if flex and partition_tags:
                out.append(0)
        if flex:
            out.append(0)
    return out


def payload_size(payload) -> int:
    """Length of a records value: bytes-like, or an object with an integer ``size``."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return payload.nbytes if isinstance(payload, memoryview) else len(payload)
    size = getattr(payload, "size", None)
    if not isinstance(size, int) or size < 0:
        raise TypeError(f"records payload {type(payload).__name__} has no non-negative integer 'size'")
    return size


class BufferList:
    """Frame under construction: ``cur`` is the bytearray being written."""

    __slots__ = ("parts", "cur", "extra", "flushed")

    def __init__(self, header_bytes: bytes) -> None:
        self.cur = bytearray(b"\x00\x00\x00\x00")
        self.cur += header_bytes
        self.parts: list = []
        self.extra = 0  # bytes held by payload parts
        self.flushed = 0  # bytes of prefix buffers already moved to ``parts``

    def records(self, records, compact: bool) -> bytearray:
        """A nullable records field: its length, then the payload (see :meth:`payload`). Returns the
        bytearray to go on writing in (a new one when the payload became its own element)."""
        if records is None:
            write_array_len(self.cur, None, compact)
        else:
            size = payload_size(records)
            write_array_len(self.cur, size, compact)
            self.payload(records, size)
        return self.cur

    def payload(self, data, size: int) -> None:
        """Append a record payload: inline when small bytes, else as its own element."""
        if size == 0:
            return
        if isinstance(data, (bytes, bytearray, memoryview)):
            if size < INLINE_MAX_BYTES:
                self.cur += data
                return
            if isinstance(data, memoryview) and (data.ndim != 1 or data.itemsize != 1):
                data = data.cast("B")
        self.parts.append(self.cur)
        self.flushed += len(self.cur)
        self.parts.append(data)
        self.extra += size
        self.cur = bytearray()

    def finish(self) -> list:
        parts = self.parts
        flushed = self.flushed
        if self.cur or not parts:
            parts.append(self.cur)
            flushed += len(self.cur)
        _SIZE.pack_into(parts[0], 0, flushed + self.extra - 4)
        return parts
