"""Readers and writers of the internal topics' record schemas (``__consumer_offsets``,
``__transaction_state``): Kafka's generated message encoding, without the wire framing.

Classic versions: int16-length UTF-8 strings (-1 = null), int32-length bytes, int32 array
counts. Flexible versions: unsigned-varint ``N+1`` lengths and counts (0 = null) and a
tagged-field section (count, then tag, size, bytes per field) after each struct.
Decoding raises :class:`SchemaError`, never anything else, on malformed input.
"""

from __future__ import annotations

import struct

from sundial.protocol.primitives import INT8, INT16, INT32, INT64


class SchemaError(ValueError):
    """Bytes that are not a valid key or value of an internal topic."""


def encode_string(value: str | None) -> bytes:
    """A classic (int16-length) string; None is null."""
    if value is None:
        return INT16.pack(-1)
    raw = value.encode("utf-8")
    if len(raw) > 32767:
        raise SchemaError("string longer than 32767 bytes")
    return INT16.pack(len(raw)) + raw


class MessageReader:
    """Reads one key or value from ``pos``; ``flexible`` selects the compact encodings."""

    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, pos: int = 0, flexible: bool = False) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise SchemaError("record runs past its end")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return INT8.unpack(self._take(1))[0]

    def i16(self) -> int:
        return INT16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return INT32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return INT64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise SchemaError("unsigned varint too long")

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.i32() if wide else self.i16()

    def string(self, nullable: bool = False) -> str | None:
        n = self._length(False)
        if n < 0:
            if nullable:
                return None
            raise SchemaError("null in a non-nullable string")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"string is not UTF-8: {exc}") from None

    def bytes_(self) -> bytes:
        n = self._length(True)
        if n < 0:
            raise SchemaError("null in a non-nullable bytes field")
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self._length(True)
        if n < 0 or n > len(self.buf):
            raise SchemaError(f"impossible array length {n}")
        return n

    def tags(self) -> dict[int, bytes]:
        """The tagged-field section of a flexible struct: tag -> raw bytes (empty when classic)."""
        found: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                found[tag] = bytes(self._take(self.uvarint()))
        return found

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise SchemaError(f"{len(self.buf) - self.pos} trailing bytes")


__all__ = ["MessageReader", "SchemaError", "encode_string"]
