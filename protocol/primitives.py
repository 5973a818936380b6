"""Kafka wire primitives: a bounds-checked reader and append-style writers.

Types (all big-endian; Kafka ``protocol/types/Type.java``):

* ``int8/int16/int32/int64``, ``uint16``, ``bool`` (one byte, non-zero = true),
  ``uuid`` (16 bytes; all zero = "no id").
* ``uvarint``: unsigned LEB128, at most 5 bytes for 32 bits. Used for compact
  lengths (``N + 1``, 0 = null) and the tagged-field section.
* ``varint``/``varlong``: zig-zag LEB128 (record fields; never compact lengths).
* non-flexible ("classic") string: int16 length (-1 = null) + UTF-8; bytes and
  records: int32 length (-1 = null); array: int32 count (-1 = null).
* flexible ("compact") string/bytes/records/array: uvarint ``N + 1`` (0 = null).
* tagged-field section (flexible versions, end of every struct): uvarint count,
  then per field uvarint tag, uvarint size, ``size`` bytes. Tags ascend.

Invariants of ``Reader``: every read checks that the bytes exist and raises
``ProtocolError`` otherwise (struct.error is never left to escape from methods
here); a length or count is checked against the bytes that remain *before*
anything is sliced or allocated (``min_item_bytes`` per array element), so a
lying count costs nothing. Strings must be valid UTF-8. ``bytes_view`` returns a
``memoryview`` into the frame (no copy): callers keep the frame alive.
"""

from __future__ import annotations

import struct

from .errors import ProtocolError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")

_pack_i16 = INT16.pack
_pack_i32 = INT32.pack


class Reader:
    """Cursor over a frame. ``pos`` advances; ``end`` is exclusive."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None) -> None:
        if not isinstance(buf, memoryview):
            buf = memoryview(buf)
        if buf.ndim != 1 or buf.itemsize != 1:
            buf = buf.cast("B")
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    # -- fixed width --------------------------------------------------------------
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        """The position of the next ``n`` bytes, which the cursor moves past."""
        pos = self.pos
        if pos + n > self.end:
            raise ProtocolError(f"truncated: need {n} bytes at offset {pos}, have {self.end - pos}")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return INT8.unpack_from(self.buf, self._take(1))[0]

    def boolean(self) -> bool:
        return self.buf[self._take(1)] != 0

    def int16(self) -> int:
        return INT16.unpack_from(self.buf, self._take(2))[0]

    def uint16(self) -> int:
        return UINT16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return INT32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return INT64.unpack_from(self.buf, self._take(8))[0]

    def float64(self) -> float:
        return FLOAT64.unpack_from(self.buf, self._take(8))[0]

    def uuid(self) -> bytes:
        pos = self._take(16)
        return bytes(self.buf[pos:pos + 16])

    def unpack(self, st: struct.Struct) -> tuple:
        """Several fixed-width fields at once (hot paths)."""
        return st.unpack_from(self.buf, self._take(st.size))

    # -- varints ------------------------------------------------------------------
    def _leb128(self, kind: str, max_bytes: int, bits: int, what: str) -> int:
        """Unsigned LEB128 of at most ``max_bytes`` bytes and ``bits`` bits (``kind`` and ``what`` name it
        in the errors)."""
        buf, pos, end = self.buf, self.pos, self.end
        result = 0
        shift = 0
        while True:
            if pos >= end:
                raise ProtocolError(f"truncated {kind} at offset {self.pos}")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 7 * (max_bytes - 1):
                raise ProtocolError(f"{kind} longer than {max_bytes} bytes at offset {self.pos}")
        if result >> bits:
            raise ProtocolError(f"{what} out of range at offset {self.pos}")
        self.pos = pos
        return result

    def uvarint(self) -> int:
        """Unsigned LEB128 of at most 32 bits (5 bytes)."""
        return self._leb128("varint", 5, 32, "unsigned varint")

    def varint(self) -> int:
        """Zig-zag signed 32-bit varint."""
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        """Zig-zag signed 64-bit varint (at most 10 bytes)."""
        v = self._leb128("varlong", 10, 64, "varlong")
        return (v >> 1) ^ -(v & 1)

    # -- lengths ------------------------------------------------------------------
    def _length(self, compact: bool, wide: bool) -> int:
        """Length prefix → -1 for null or the length; classic strings use int16."""
        if compact:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def _text(self, n: int) -> str:
        if n > self.end - self.pos:
            raise ProtocolError(f"string of {n} bytes at offset {self.pos} overruns the frame "
                                f"({self.end - self.pos} bytes left)")
        start = self.pos
        self.pos = start + n
        try:
            return str(self.buf[start:start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"invalid UTF-8 in string at offset {start}: {exc.reason}") from None

    def string(self, compact: bool = False) -> str:
        """Non-nullable string; a null length is a ProtocolError."""
        n = self._length(compact, False)
        if n < 0:
            raise ProtocolError(f"null string where a value is required (offset {self.pos})")
        return self._text(n)

    def nullable_string(self, compact: bool = False) -> str | None:
        n = self._length(compact, False)
        if n < 0:
            if n != -1:
                raise ProtocolError(f"negative string length {n} at offset {self.pos}")
            return None
        return self._text(n)

    def bytes_view(self, compact: bool = False, nullable: bool = True) -> memoryview | None:
        """Bytes or records field as a view into the frame (no copy)."""
        n = self._length(compact, True)
        if n < 0:
            if n != -1 or not nullable:
                raise ProtocolError(f"invalid bytes length {n} at offset {self.pos}")
            return None
        if n > self.end - self.pos:
            raise ProtocolError(f"bytes field of {n} bytes at offset {self.pos} overruns the frame "
                                f"({self.end - self.pos} bytes left)")
        start = self.pos
        self.pos = start + n
        return self.buf[start:start + n]

    def array_count(self, compact: bool = False, min_item_bytes: int = 1, nullable: bool = True) -> int:
        """Element count (-1 = null), refused when the frame cannot hold that many."""
        n = self._length(compact, True)
        if n < 0:
            if n != -1 or not nullable:
                raise ProtocolError(f"invalid array length {n} at offset {self.pos}")
            return -1
        if n * min_item_bytes > self.end - self.pos:
            raise ProtocolError(f"array of {n} elements at offset {self.pos} cannot fit in the "
                                f"{self.end - self.pos} bytes left")
        return n

    # -- tagged fields ------------------------------------------------------------
    def tagged_fields(self) -> dict[int, memoryview] | None:
        """Read a tagged-field section; returns {tag: raw bytes} or None when empty."""
        count = self.uvarint()
        if count == 0:
            return None
        if count > self.end - self.pos:
            raise ProtocolError(f"{count} tagged fields cannot fit at offset {self.pos}")
        out: dict[int, memoryview] = {}
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise ProtocolError(f"tagged fields out of order or repeated (tag {tag}) at offset {self.pos}")
            last = tag
            size = self.uvarint()
            if size > self.end - self.pos:
                raise ProtocolError(f"tagged field {tag} of {size} bytes overruns the frame")
            out[tag] = self.buf[self.pos:self.pos + size]
            self.pos += size
        return out

    def skip_tagged_fields(self) -> None:
        if self.pos < self.end and self.buf[self.pos] == 0:
            self.pos += 1
            return
        self.tagged_fields()


# -- writers (append to a bytearray) ----------------------------------------------

def uvarint_bytes(value: int) -> bytes:
    """Unsigned LEB128 of a non-negative int < 2**32."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        out.append(value)
        return
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def write_string(out: bytearray, value: str | None, compact: bool = False) -> None:
    """(Nullable) string; classic strings carry an int16 length."""
    if value is None:
        if compact:
            out.append(0)
        else:
            out += b"\xff\xff"
        return
    data = value.encode("utf-8")
    if compact:
        write_uvarint(out, len(data) + 1)
    else:
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        out += _pack_i16(len(data))
    out += data


def write_bytes(out: bytearray, value, compact: bool = False) -> None:
    """(Nullable) bytes: int32 or compact length, then the bytes (copied into ``out``)."""
    if value is None:
        write_array_len(out, None, compact)
    else:
        write_array_len(out, len(value), compact)
        out += value


def write_array_len(out: bytearray, count: int | None, compact: bool = False) -> None:
    """Array count, or the length of bytes (the same encoding); ``None`` writes null."""
    if count is None:
        if compact:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
    elif compact:
        write_uvarint(out, count + 1)
    else:
        out += _pack_i32(count)


def write_tagged_fields(out: bytearray, fields: dict[int, bytes] | None) -> None:
    """Tagged-field section from {tag: encoded value}; empty → a single 0 byte."""
    if not fields:
        out.append(0)
        return
    write_uvarint(out, len(fields))
    for tag in sorted(fields):
        data = fields[tag]
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


# -- flat readers for the hot decoders ----------------------------------------------
#
# (value, new_pos) functions over a memoryview of format "B". Fixed-width fields are
# read inline by the callers with ``Struct.unpack_from``; its ``struct.error`` and
# the ``IndexError`` of reading a byte past the end both mean "truncated" and are
# turned into ProtocolError by ``protocol.codec``. Everything variable-length is
# bounds-checked here explicitly (slicing a memoryview past its end would not fail).

_unpack_i16 = INT16.unpack_from
_unpack_i32 = INT32.unpack_from


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise ProtocolError(f"varint longer than 5 bytes at offset {pos}")
    if result > 0xFFFFFFFF:
        raise ProtocolError(f"unsigned varint out of range at offset {pos}")
    return result, pos + 1


def _read_compact_len(buf, pos: int) -> tuple[int, int]:
    """A compact length: uvarint N+1 -> N; -1 = null."""
    b = buf[pos]
    if b < 0x80:
        return b - 1, pos + 1
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def read_len16(buf, pos: int, flex: bool) -> tuple[int, int]:
    """String length: int16, or compact uvarint N+1; -1 = null."""
    if flex:
        return _read_compact_len(buf, pos)
    return _unpack_i16(buf, pos)[0], pos + 2


def read_len32(buf, pos: int, flex: bool) -> tuple[int, int]:
    """Bytes/records length or array count: int32, or compact uvarint N+1; -1 = null."""
    if flex:
        return _read_compact_len(buf, pos)
    return _unpack_i32(buf, pos)[0], pos + 4


def read_text(buf, pos: int, n: int) -> tuple[str, int]:
    """``n`` bytes of UTF-8 at ``pos`` (n >= 0 checked by the caller)."""
    end = pos + n
    if end > len(buf):
        raise ProtocolError(f"string of {n} bytes at offset {pos} overruns the frame ({len(buf) - pos} bytes left)")
    try:
        return str(buf[pos:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"invalid UTF-8 in string at offset {pos}: {exc.reason}") from None


def read_string(buf, pos: int, flex: bool) -> tuple[str, int]:
    """Non-nullable string."""
    n, pos = read_len16(buf, pos, flex)
    if n < 0:
        raise ProtocolError(f"null or negative-length string where a value is required (offset {pos})")
    return read_text(buf, pos, n)


def _refuse_negative(n: int, pos: int, what: str) -> None:
    """A negative length read before ``pos`` must be -1 (null)."""
    if n != -1:
        raise ProtocolError(f"negative {what} length {n} at offset {pos}")


def read_nullable_string(buf, pos: int, flex: bool) -> tuple[str | None, int]:
    n, pos = read_len16(buf, pos, flex)
    if n < 0:
        _refuse_negative(n, pos, "string")
        return None, pos
    return read_text(buf, pos, n)


def read_bytes_view(buf, pos: int, flex: bool) -> tuple[memoryview | None, int]:
    """Nullable bytes/records as a view into ``buf`` (no copy)."""
    n, pos = read_len32(buf, pos, flex)
    if n < 0:
        _refuse_negative(n, pos, "bytes")
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ProtocolError(f"bytes field of {n} bytes at offset {pos} overruns the frame "
                            f"({len(buf) - pos} bytes left)")
    return buf[pos:end], end


def read_count(buf, pos: int, flex: bool, min_item_bytes: int) -> tuple[int, int]:
    """Non-nullable array count, refused when the frame cannot hold that many items."""
    n, pos = read_len32(buf, pos, flex)
    if n < 0:
        raise ProtocolError(f"invalid array length {n} at offset {pos}")
    if n * min_item_bytes > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements at offset {pos} cannot fit in the {len(buf) - pos} bytes left")
    return n, pos


def skip_tags(buf, pos: int) -> int:
    """Skip a tagged-field section (the common empty one is a single 0 byte)."""
    if buf[pos] == 0:
        return pos + 1
    reader = Reader(buf, pos)
    reader.tagged_fields()
    return reader.pos


def as_byte_view(frame) -> memoryview:
    """``frame`` as a 1-D memoryview of unsigned bytes (no copy)."""
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    if frame.format != "B" or frame.ndim != 1:
        frame = frame.cast("B")
    return frame
