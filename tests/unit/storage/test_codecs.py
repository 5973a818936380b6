"""records/codecs.py: Kafka framings, bomb protection, refusals; round trips under Hypothesis."""

import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.records import codecs as C
from sundial.storage.errors import CorruptRecordError, UnsupportedCompressionTypeError

SETTINGS = settings(max_examples=60, deadline=None)
payloads = st.one_of(st.binary(max_size=2000),
                     st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=50), st.integers(1, 3000)))


@SETTINGS
@given(data=payloads, codec=st.sampled_from([1, 2, 3, 4]), magic=st.sampled_from([0, 1, 2]))
def test_round_trip(data, codec, magic):
    if codec == C.ZSTD and magic < 2:
        magic = 2
    assert bytes(C.decompress(codec, C.compress(codec, data, magic=magic), magic=magic)) == data


@SETTINGS
@given(first=payloads, second=payloads, codec=st.sampled_from([1, 2, 3, 4]))
def test_scratch_decompression_gives_the_same_bytes_and_never_resizes_a_live_view(first, second, codec):
    """``scratch=True`` (the validator's scan) reads into a reused per-thread buffer: the bytes
    equal the owned result's, and a later, larger output replaces the buffer instead of
    resizing it under a view still held (which would raise BufferError)."""
    a = C.decompress(codec, C.compress(codec, first), scratch=True)
    assert bytes(a) == first == bytes(C.decompress(codec, C.compress(codec, first)))
    big = second * 2 + bytes(len(C._scratch.buf) + 1) if hasattr(C._scratch, "buf") else second
    b = C.decompress(codec, C.compress(codec, big), scratch=True)
    assert bytes(b) == big
    assert len(a) == len(first)   # the old view is still a valid object (its bytes are not promised)


def test_known_xxh32_vectors():
    assert C.xxh32(b"") == 0x02CC5D05
    assert C.xxh32(b"a") == 0x550D7456
    assert C.xxh32(b"abc") == 0x32D153FF
    assert C.xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_gzip_is_standard_and_concatenated_members_are_read():
    data = b"kafka " * 1000
    assert gzip.decompress(C.compress(C.GZIP, data)) == data
    assert bytes(C.decompress(C.GZIP, gzip.compress(data) + gzip.compress(b"tail"))) == data + b"tail"
    assert bytes(C.decompress(C.GZIP, gzip.compress(data) + b"\x00\x00")) == data


def test_gzip_with_a_lying_size_trailer_is_corrupt_and_bounded():
    data = b"x" * 5000
    lying = bytearray(gzip.compress(data))
    lying[-4:] = struct.pack("<I", 10)
    with pytest.raises(CorruptRecordError):
        C.decompress(C.GZIP, bytes(lying))
    bomb = bytearray(gzip.compress(bytes(8 * 1024 * 1024)))
    bomb[-4:] = struct.pack("<I", 100)                 # claims 100 bytes, inflates to 8 MiB
    with pytest.raises(CorruptRecordError, match="limit"):
        C.decompress(C.GZIP, bytes(bomb), max_bytes=1024 * 1024)


def test_snappy_xerial_framing_layout():
    data = bytes(range(256)) * 300                     # 76,800 bytes: three 32 KiB blocks
    framed = C.compress(C.SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, out, blocks = 16, b"", 0
    while pos < len(framed):
        (n,) = struct.unpack_from(">i", framed, pos)
        out += bytes(cramjam.snappy.decompress_raw(framed[pos + 4:pos + 4 + n]))
        pos += 4 + n
        blocks += 1
    assert out == data and blocks == 3


def test_snappy_raw_is_decoded_too():
    data = b"raw snappy from librdkafka " * 50
    assert bytes(C.decompress(C.SNAPPY, bytes(cramjam.snappy.compress_raw(data)))) == data


def test_lz4_frame_is_standard_for_magic_1_and_2():
    data = b"lz4 " * 40000
    frame = C.compress(C.LZ4, data, magic=1)
    assert frame[:4] == C.LZ4_FRAME_MAGIC
    assert frame[4] & 0x20, "independent blocks, as Kafka's Java reader requires"
    assert bytes(cramjam.lz4.decompress(frame)) == data           # an independent frame decoder
    assert bytes(C.decompress(C.LZ4, bytes(cramjam.lz4.compress(data)))) == data


def test_lz4_magic_0_uses_the_broken_header_checksum():
    data = b"old kafka " * 100
    frame = C.compress(C.LZ4, data, magic=0)
    assert frame[6] == (C.xxh32(frame[0:6]) >> 8) & 0xFF           # hashed with the frame magic (KAFKA-1493)
    with pytest.raises(cramjam.DecompressionError):
        cramjam.lz4.decompress(frame)
    assert bytes(C.decompress(C.LZ4, frame, magic=0)) == data
    with pytest.raises(CorruptRecordError):
        C.decompress(C.LZ4, frame, magic=1)
    # a magic-0 reader ignores HC: a correct one is fine too
    assert bytes(C.decompress(C.LZ4, C.compress(C.LZ4, data, magic=1), magic=0)) == data


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bombs_are_refused_before_inflating(codec):
    zeros = bytes(4 * 1024 * 1024)
    packed = C.compress(codec, zeros)
    with pytest.raises(CorruptRecordError, match="limit"):
        C.decompress(codec, packed, max_bytes=1024 * 1024)
    assert len(C.decompress(codec, packed, max_bytes=len(zeros))) == len(zeros)


def test_uncompressed_limit_and_codec_names():
    with pytest.raises(CorruptRecordError):
        C.decompress(C.NONE, b"x" * 10, max_bytes=5)
    assert [C.codec_id(n) for n in ("uncompressed", "none", "gzip", "snappy", "lz4", "zstd")] == [0, 0, 1, 2, 3, 4]
    with pytest.raises(UnsupportedCompressionTypeError):
        C.codec_id("brotli")


def test_refusals():
    with pytest.raises(UnsupportedCompressionTypeError):
        C.compress(C.ZSTD, b"x", magic=1)
    with pytest.raises(UnsupportedCompressionTypeError):
        C.decompress(C.ZSTD, b"x", magic=0)
    with pytest.raises(UnsupportedCompressionTypeError):
        C.decompress(5, b"x")


@SETTINGS
@given(garbage=st.binary(max_size=300), codec=st.sampled_from([1, 2, 3, 4]))
def test_garbage_never_crashes(garbage, codec):
    try:
        C.decompress(codec, garbage, max_bytes=1 << 20)
    except CorruptRecordError:
        pass


@SETTINGS
@given(data=payloads, codec=st.sampled_from([1, 2, 3, 4]), cut=st.integers(1, 40))
def test_truncated_frames_are_corrupt(data, codec, cut):
    packed = C.compress(codec, data)
    truncated = packed[:max(0, len(packed) - cut)]
    try:
        out = C.decompress(codec, truncated)
    except CorruptRecordError:
        return
    assert len(out) <= len(data)


@pytest.mark.parametrize("linked", [True, False])
@pytest.mark.parametrize("checksum", [True, False])
def test_lz4_frames_from_other_writers(linked, checksum):
    """librdkafka-style frames: linked blocks, block and content checksums, several blocks."""
    data = (bytes(range(200)) * 7 + b"a" * 5000) * 120
    writer = cramjam.lz4.Compressor(content_checksum=checksum, block_linked=linked)
    writer.compress(data[:300_000])
    writer.compress(data[300_000:])
    assert bytes(C.decompress(C.LZ4, bytes(writer.finish()))) == data
