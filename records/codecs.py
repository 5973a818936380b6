"""Record compression codecs: gzip, snappy, lz4 and zstd, as Kafka frames them.

Codec ids are the low three bits of the batch (v2) or message (v0/v1) attributes:

====  ======  ==============================================================  ========
 id   name    framing                                                         magics
====  ======  ==============================================================  ========
 0    none    --                                                              0, 1, 2
 1    gzip    RFC 1952 gzip stream; concatenated members are accepted          0, 1, 2
 2    snappy  xerial ``SnappyOutputStream`` framing (what Java Kafka writes):  0, 1, 2
              ``82 'SNAPPY' 00`` + int32 version 1 + int32 compatible 1, then
              blocks of ``[int32 BE compressed length][raw snappy]`` each
              holding up to 32 KiB of input. Raw (unframed) snappy is also
              decoded, as the xerial reader does (librdkafka may send it).
 3    lz4     LZ4 frame (magic ``04 22 4D 18``), independent 64 KiB blocks,    0, 1, 2
              no content size or checksums (Kafka's ``Lz4BlockOutputStream``).
              Magic 0 uses Kafka's broken header checksum (KAFKA-1493): the
              HC byte is computed over the 4 magic bytes plus the descriptor
              instead of the descriptor alone; magic 0 readers ignore HC.
 4    zstd    zstd frame(s)                                                    2 only
====  ======  ==============================================================  ========

The compression work is done by cramjam (C/Rust). This module adds only framing and a
**decompressed-size limit**: before anything is inflated, the output size is bounded
from the input's own structure (snappy length headers, lz4 and zstd block headers, the
gzip ISIZE trailer) and the decoder writes into a buffer of exactly that size, so a
"compression bomb" never allocates more than ``max_bytes``. gzip, whose trailer can lie,
falls back to a streaming inflate that stops at the limit.

lz4: the frame walk here checks each frame's header (version, reserved bits, block size,
the header checksum unless magic 0) and block sizes. Frames as Kafka's producers write
them (independent blocks, no checksums, no content size) are then decoded block by block
by cramjam's block decoder straight into the output buffer, each block given at most its
frame's block maximum of room; any other frame (linked blocks, block or content
checksums, a content size) goes whole to cramjam's frame decoder, which checks them.
Skippable frames are skipped and zero bytes after the last frame are ignored. (A
hand-written C decoder was removed: decoding block by block into the buffer was as fast
at broker level; benchmarks/README.md, "lz4 decoding".)

Errors: a codec id outside 0..4, or zstd with magic < 2 ->
:class:`UnsupportedCompressionTypeError`; undecodable input or output above the limit
-> :class:`CorruptRecordError`.
"""

from __future__ import annotations

import functools
import struct
import threading
import zlib

import cramjam

from .errors import CorruptRecordError, UnsupportedCompressionTypeError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_CODEC_BY_NAME = {"none": NONE, "uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}

#: Largest decompressed record payload accepted from one batch (bomb protection).
DEFAULT_MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024

LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_FLG = 0x60          # version 01, block independence; no checksums, no content size
_LZ4_BD = 0x40           # block maximum size 64 KiB
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DEFAULT_LEVEL = 3  # Kafka's default compression.zstd.level

_GZIP_DEFAULT_LEVEL = 6

_I32 = struct.Struct(">i")
_U32LE = struct.Struct("<I")


def codec_id(name: str) -> int:
    """Codec id for a ``compression.type`` value (``uncompressed``/``none`` -> 0)."""
    try:
        return _CODEC_BY_NAME[name.lower()]
    except KeyError:
        raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


def check_codec(codec: int, magic: int) -> None:
    """Raise :class:`UnsupportedCompressionTypeError` unless ``codec`` exists for ``magic``."""
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
    if codec == ZSTD and magic < 2:
        raise UnsupportedCompressionTypeError(f"zstd compression is not allowed with message format v{magic}")


# --------------------------------------------------------------------------- xxHash32
# Only used for the LZ4 frame header checksum (a handful of bytes).

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of ``data`` (reference algorithm)."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (k,) = _U32LE.unpack_from(data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_hc(descriptor: bytes) -> int:
    return (xxh32(descriptor) >> 8) & 0xFF


_LZ4_HEADER = LZ4_FRAME_MAGIC + bytes([_LZ4_FLG, _LZ4_BD, _lz4_hc(bytes([_LZ4_FLG, _LZ4_BD]))])
# KAFKA-1493: magic-0 writers hashed the frame magic too.
_LZ4_HEADER_BROKEN = LZ4_FRAME_MAGIC + bytes(
    [_LZ4_FLG, _LZ4_BD, _lz4_hc(LZ4_FRAME_MAGIC + bytes([_LZ4_FLG, _LZ4_BD]))])


# --------------------------------------------------------------------------- compress

def compress(codec: int, data, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress ``data`` (bytes-like) with Kafka's framing for ``codec`` and ``magic``."""
    check_codec(codec, magic)
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=_GZIP_DEFAULT_LEVEL if level is None else level))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return _lz4_compress(data, broken_header_checksum=(magic == 0))
    return bytes(cramjam.zstd.compress(data, level=_ZSTD_DEFAULT_LEVEL if level is None else level))


def _xerial_compress(data) -> bytes:
    mv = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(mv), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(mv[start:start + XERIAL_BLOCK_BYTES]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data, *, broken_header_checksum: bool) -> bytes:
    mv = memoryview(data)
    parts = [_LZ4_HEADER_BROKEN if broken_header_checksum else _LZ4_HEADER]
    for start in range(0, len(mv), LZ4_BLOCK_BYTES):
        chunk = mv[start:start + LZ4_BLOCK_BYTES]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            parts.append(_U32LE.pack(len(chunk) | 0x80000000))
            parts.append(bytes(chunk))
        else:
            parts.append(_U32LE.pack(len(block)))
            parts.append(block)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


# --------------------------------------------------------------------------- decompress

def decompress(codec: int, data, *, magic: int = 2,
               max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES, scratch: bool = False):
    """Inflate ``data``; never produces (or allocates for) more than ``max_bytes``.

    Returns a bytearray the caller owns, or with ``scratch=True`` possibly a memoryview of
    this thread's scratch buffer (:func:`_into`): valid only until the next ``scratch``
    call on the same thread, for a caller that reads the records and drops them (the
    validator's structural scan), sparing a fresh zero-filled buffer per batch."""
    check_codec(codec, magic)
    if codec == NONE:
        if len(data) > max_bytes:
            raise _too_large(codec, len(data), max_bytes)
        return bytearray(data)
    try:
        if codec == GZIP:
            return _gzip_decompress(data, max_bytes, scratch)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_bytes, scratch)
        if codec == LZ4:
            return _lz4_decompress(data, max_bytes, scratch, ignore_header_checksum=(magic == 0))
        return _zstd_decompress(data, max_bytes, scratch)
    except (cramjam.DecompressionError, zlib.error, struct.error, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"cannot decompress {CODEC_NAMES[codec]} record data: {exc}") from None


def _too_large(codec: int, size: int, max_bytes: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{CODEC_NAMES[codec]} record data inflates to {size} bytes or more, above the limit of {max_bytes} bytes")


#: Largest scratch buffer a thread keeps between calls (larger outputs get a buffer of their own).
SCRATCH_KEEP_BYTES = 16 << 20
_scratch = threading.local()


def _into(fn, data, bound: int, scratch: bool = False):
    """Run a decoder ``fn(data, out) -> bytes written`` with an output buffer of ``bound`` bytes.

    ``scratch``: write into this thread's reusable buffer and return a memoryview of the
    output. A buffer too small is replaced (never resized: a view of it may still be
    alive), so an earlier view stays a valid object, though its bytes are overwritten."""
    if scratch and bound <= SCRATCH_KEEP_BYTES:
        buf = getattr(_scratch, "buf", None)
        if buf is None or len(buf) < bound:
            buf = _scratch.buf = bytearray(max(bound, 1 << 20))
        n = fn(data, memoryview(buf)[:bound])
        return memoryview(buf)[:n]
    out = bytearray(bound)
    n = fn(data, out)
    del out[n:]
    return out


def _gzip_decompress(data, max_bytes: int, scratch: bool = False):
    n = len(data)
    if n < 18:
        raise CorruptRecordError(f"gzip record data too short ({n} bytes)")
    (claimed,) = _U32LE.unpack_from(data, n - 4)
    if claimed < max_bytes:
        # Honest single-member streams fill exactly `claimed` bytes; the extra byte
        # detects a stream that inflates to more than its trailer says.
        try:
            out = _into(cramjam.gzip.decompress_into, data, claimed + 1, scratch)
            if len(out) == claimed:
                return out
        except cramjam.DecompressionError:
            pass
    return _gzip_stream(data, max_bytes)


def _gzip_stream(data, max_bytes: int) -> bytearray:
    out = bytearray()
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(31)
        out += d.decompress(rest, max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_large(GZIP, len(out), max_bytes)
        if not d.eof:
            if d.unconsumed_tail:
                raise _too_large(GZIP, len(out) + 1, max_bytes)
            raise CorruptRecordError("gzip record data is truncated")
        rest = d.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            return out  # like java.util.zip.GZIPInputStream: trailing garbage ends the stream


def _snappy_decompress(data, max_bytes: int, scratch: bool = False):
    mv = memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC or len(mv) < 16:
        size = cramjam.snappy.decompress_raw_len(mv)
        if size > max_bytes:
            raise _too_large(SNAPPY, size, max_bytes)
        return _into(cramjam.snappy.decompress_raw_into, mv, size, scratch)
    blocks = []
    total = 0
    pos = 16
    end = len(mv)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("snappy (xerial) block header is truncated")
        (length,) = _I32.unpack_from(mv, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"snappy (xerial) block of {length} bytes overruns the data")
        block = mv[pos:pos + length]
        pos += length
        total += cramjam.snappy.decompress_raw_len(block)
        if total > max_bytes:
            raise _too_large(SNAPPY, total, max_bytes)
        blocks.append(block)
    out = bytearray(total)
    at = 0
    for block in blocks:
        at += cramjam.snappy.decompress_raw_into(block, memoryview(out)[at:])
    if at != total:
        raise CorruptRecordError("snappy (xerial) blocks inflate to fewer bytes than their headers say")
    return out


#: FLG of the frames Kafka's producers write (version 01, independent blocks, nothing
#: else): such a frame is decoded block by block straight into the output buffer.
_LZ4_FLG_PLAIN = 0x60


@functools.lru_cache(maxsize=64)
def _lz4_descriptor_hc(descriptor: bytes) -> int:
    return _lz4_hc(descriptor)


class _Lz4Frames:
    """What one walk over lz4 record data found: the output bound, and either the blocks
    to decode one by one (every frame plain) or None (some frame has linked blocks,
    checksums or a content size: cramjam's frame decoder decodes ``data[:end]``, whose
    header checksums ``hc_positions`` locate)."""

    __slots__ = ("bound", "blocks", "end", "hc_positions")

    def __init__(self) -> None:
        self.bound = 0
        #: (start, size, room): room 0 = stored block, else the frame's block maximum.
        self.blocks: list[tuple[int, int, int]] | None = []
        self.end = 0
        self.hc_positions: list[tuple[int, int]] = []   # (descriptor start, HC position)


def _lz4_walk(mv: memoryview, check_header_checksum: bool) -> _Lz4Frames:
    """Walk the frames of ``mv`` without decoding: sizes, header rules and the HC byte
    (checked unless ``check_header_checksum`` is false, for magic 0: KAFKA-1493).
    Raises CorruptRecordError for what no decoder would accept."""
    found = _Lz4Frames()
    frames = 0
    pos = 0
    end = len(mv)
    while pos < end:
        if frames and not any(mv[pos:]):
            break                                         # zero padding after the frames
        if end - pos < 4:
            raise CorruptRecordError("lz4 frame is truncated")
        (magic,) = _U32LE.unpack_from(mv, pos)
        if 0x184D2A50 <= magic <= 0x184D2A5F:            # skippable frame
            if end - pos < 8:
                raise CorruptRecordError("lz4 skippable frame is truncated")
            (size,) = _U32LE.unpack_from(mv, pos + 4)
            if size > end - pos - 8:
                raise CorruptRecordError("lz4 skippable frame is truncated")
            pos += 8 + size
            found.end = pos
            continue
        if magic != 0x184D2204:
            raise CorruptRecordError(f"not an lz4 frame (magic {magic:#010x})")
        if end - pos < 7:
            raise CorruptRecordError("lz4 frame header is truncated")
        flg, bd = mv[pos + 4], mv[pos + 5]
        block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x7)
        if flg >> 6 != 1 or flg & 0x02 or bd & 0x8F or block_max is None:
            raise CorruptRecordError("lz4 frame header is invalid")
        if flg & 0x01:
            raise CorruptRecordError("lz4 frames with a dictionary are not supported")
        hc_at = pos + 6 + (8 if flg & 0x08 else 0)
        if hc_at >= end:
            raise CorruptRecordError("lz4 frame header is truncated")
        if check_header_checksum and mv[hc_at] != _lz4_descriptor_hc(bytes(mv[pos + 4:hc_at])):
            raise CorruptRecordError("lz4 frame header checksum is wrong")
        found.hc_positions.append((pos + 4, hc_at))
        if flg != _LZ4_FLG_PLAIN:
            found.blocks = None
        blocks = found.blocks
        pos = hc_at + 1
        block_checksum = 4 if flg & 0x10 else 0
        while True:
            if end - pos < 4:
                raise CorruptRecordError("lz4 block header is truncated")
            (size,) = _U32LE.unpack_from(mv, pos)
            pos += 4
            if size == 0:
                break
            stored = size & 0x80000000
            size &= 0x7FFFFFFF
            if size > block_max:
                raise CorruptRecordError("lz4 block is larger than the frame's maximum")
            if size + block_checksum > end - pos:
                raise CorruptRecordError("lz4 block is truncated")
            found.bound += size if stored else block_max
            if blocks is not None:
                blocks.append((pos, size, 0 if stored else block_max))
            pos += size + block_checksum
        if flg & 0x04:
            if end - pos < 4:
                raise CorruptRecordError("lz4 content checksum is truncated")
            pos += 4
        frames += 1
        found.end = pos
    if not frames:
        raise CorruptRecordError("no lz4 frame")
    return found


def _lz4_decode_blocks(blocks: list[tuple[int, int, int]], src: memoryview, out) -> int:
    """Decode plain frames' blocks into ``out`` (sized by the walk); bytes written. Each
    compressed block gets at most its frame's block maximum of room."""
    at = 0
    with memoryview(out) as dst:
        for start, size, room in blocks:
            if room:
                at += cramjam.lz4.decompress_block_into(src[start:start + size], dst[at:at + room])
            else:
                dst[at:at + size] = src[start:start + size]
                at += size
    return at


def _lz4_decompress(data, max_bytes: int, scratch: bool = False, *, ignore_header_checksum: bool):
    mv = memoryview(data).cast("B")
    found = _lz4_walk(mv, check_header_checksum=not ignore_header_checksum)
    if found.bound > max_bytes:
        raise _too_large(LZ4, found.bound, max_bytes)
    if found.blocks is not None:
        return _into(functools.partial(_lz4_decode_blocks, found.blocks), mv, found.bound, scratch)
    frames = mv[:found.end]
    if ignore_header_checksum:                  # magic 0: give cramjam a frame whose HC is right
        frames = bytearray(frames)
        for descriptor, hc_at in found.hc_positions:
            frames[hc_at] = _lz4_descriptor_hc(bytes(frames[descriptor:hc_at]))
    return _into(cramjam.lz4.decompress_into, frames, found.bound, scratch)


def _zstd_frame_bound(mv: memoryview) -> int:
    bound = 0
    pos = 0
    end = len(mv)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("zstd frame is truncated")
        (magic,) = _U32LE.unpack_from(mv, pos)
        if 0x184D2A50 <= magic <= 0x184D2A5F:
            (size,) = _U32LE.unpack_from(mv, pos + 4)
            pos += 8 + size
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"not a zstd frame (magic {magic:#010x})")
        fhd = mv[pos + 4]
        single_segment = fhd & 0x20
        fcs_size = (0 if not single_segment else 1, 2, 4, 8)[fhd >> 6]
        did_size = (0, 1, 2, 4)[fhd & 0x3]
        pos += 5 + (0 if single_segment else 1) + did_size + fcs_size
        while True:
            if end - pos < 3:
                raise CorruptRecordError("zstd block header is truncated")
            header = mv[pos] | (mv[pos + 1] << 8) | (mv[pos + 2] << 16)
            pos += 3
            last = header & 1
            block_type = (header >> 1) & 3
            size = header >> 3
            if block_type == 0:        # raw
                bound += size
                pos += size
            elif block_type == 1:      # RLE: one byte repeated `size` times
                bound += size
                pos += 1
            elif block_type == 2:      # compressed: inflates to at most 128 KiB
                bound += _ZSTD_BLOCK_MAX
                pos += size
            else:
                raise CorruptRecordError("zstd block type 3 is reserved")
            if last:
                break
        if fhd & 0x04:
            pos += 4
    return bound


def _zstd_decompress(data, max_bytes: int, scratch: bool = False):
    mv = memoryview(data)
    bound = _zstd_frame_bound(mv)
    if bound > max_bytes:
        raise _too_large(ZSTD, bound, max_bytes)
    return _into(cramjam.zstd.decompress_into, mv, bound, scratch)


__all__ = [
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODEC_NAMES", "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "codec_id", "check_codec", "compress", "decompress", "xxh32",
]
