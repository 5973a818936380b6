"""lz4 record data through records/codecs.py (the frame walk, then cramjam: block by block
straight into the output for the frames Kafka's producers write, its frame decoder for
the others) against python-lz4, the reference lz4 library, which writes the frames and
checks the bytes. Damaged frames are refused with CorruptRecordError or decode as
python-lz4 decodes them, and never produce more than their bound or ``max_bytes``."""

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.records import codecs as C
from sundial.storage.errors import CorruptRecordError

SETTINGS = settings(max_examples=150, deadline=None)
words = st.sampled_from([b"user", b"event", b"click", b'{"ts":', b"17000000", b"}", b",", b"price", b"0.5"])
payloads = st.one_of(st.binary(max_size=3000),
                     st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=120), st.integers(1, 6000)),
                     # text: many short matches at many offsets
                     st.builds(b"".join, st.lists(st.one_of(words, st.binary(max_size=6)), max_size=3000)))
frame_options = st.fixed_dictionaries({
    "block_size": st.sampled_from([lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB,
                                   lz4.frame.BLOCKSIZE_MAX1MB]),
    "block_linked": st.booleans(), "block_checksum": st.booleans(), "content_checksum": st.booleans(),
    "store_size": st.booleans(), "compression_level": st.sampled_from([0, 3, 9])})
#: What Kafka's producers write: independent 64 KiB blocks, no checksums, no content size.
KAFKA_FRAME = {"block_size": lz4.frame.BLOCKSIZE_MAX64KB, "block_linked": False, "block_checksum": False,
               "content_checksum": False, "store_size": False}


def decode(data: bytes, **kwargs) -> bytes:
    return bytes(C.decompress(C.LZ4, data, **kwargs))


def reference(data: bytes) -> bytes | None:
    try:
        return lz4.frame.decompress(data)
    except RuntimeError:
        return None


@SETTINGS
@given(data=payloads, options=frame_options, scratch=st.booleans())
def test_frames_of_the_reference_library_decode_to_their_data(data, options, scratch):
    frame = lz4.frame.compress(data, **options)
    assert decode(frame, scratch=scratch) == data


@SETTINGS
@given(data=payloads, level=st.sampled_from([0, 3, 9]))
def test_kafka_frames_take_the_block_path(data, level):
    frame = lz4.frame.compress(data, compression_level=level, **KAFKA_FRAME)
    found = C._lz4_walk(memoryview(frame), check_header_checksum=True)
    assert found.blocks is not None and len(found.blocks) == -(-len(data) // (64 << 10))
    assert decode(frame) == data
    assert decode(C.compress(C.LZ4, data)) == data


@SETTINGS
@given(data=payloads.filter(len), options=frame_options)
def test_max_bytes_below_the_bound_is_refused_before_decoding(data, options):
    frame = lz4.frame.compress(data, **options)
    bound = C._lz4_walk(memoryview(frame), check_header_checksum=True).bound
    assert bound >= len(data)
    with pytest.raises(CorruptRecordError, match="limit"):
        decode(frame, max_bytes=bound - 1)
    assert decode(frame, max_bytes=bound) == data


@SETTINGS
@given(parts=st.lists(payloads, min_size=1, max_size=4), options=st.lists(frame_options, min_size=4, max_size=4),
       skippable=st.binary(max_size=20), padding=st.integers(0, 12))
def test_concatenated_and_skippable_frames_then_zero_padding(parts, options, skippable, padding):
    frames = [lz4.frame.compress(p, **o) for p, o in zip(parts, options)]
    skip = (0x184D2A5A).to_bytes(4, "little") + len(skippable).to_bytes(4, "little") + skippable
    assert decode(frames[0] + skip + b"".join(frames[1:]) + bytes(padding)) == b"".join(parts)


@SETTINGS
@given(data=payloads, options=frame_options,
       damage=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 30))
def test_damaged_frames_are_refused_or_decode_as_the_reference_does(data, options, damage, cut):
    frame = bytearray(lz4.frame.compress(data, **options))
    for at, value in damage:
        frame[at % len(frame)] = value
    frame = bytes(frame[:len(frame) - cut])
    try:
        ours = decode(frame, max_bytes=1 << 22)
    except CorruptRecordError:
        return
    # python-lz4 may refuse what a lenient reader accepts (for example trailing zero bytes);
    # whatever both accept must be the same bytes.
    theirs = reference(frame)
    if theirs is not None:
        assert ours == theirs


@SETTINGS
@given(garbage=st.binary(max_size=400), scratch=st.booleans())
def test_garbage_is_refused_or_bounded(garbage, scratch):
    data = lz4.frame.compress(b"")[:4] + garbage
    try:
        out = C.decompress(C.LZ4, data, max_bytes=1 << 20, scratch=scratch)
    except CorruptRecordError:
        return
    assert len(out) <= C._lz4_walk(memoryview(data), check_header_checksum=True).bound


def test_overlapping_matches_repeat_their_pattern():
    """Offsets shorter than the match: runs of one byte, a 3-byte motif, a 110-byte record."""
    for data in (b"a" * 100_000, b"abc" * 40_000, bytes(range(110)) * 5_000):
        for options in (KAFKA_FRAME, {"block_linked": True}):
            assert decode(lz4.frame.compress(data, **options)) == data


def test_a_block_that_inflates_past_its_frame_maximum_is_refused():
    """A plain frame's compressed block gets at most 64 KiB of room, even when the output
    buffer (sized for the other blocks) would hold more."""
    big = lz4.frame.compress(b"x" * 200_000, block_size=lz4.frame.BLOCKSIZE_MAX256KB, **{
        k: v for k, v in KAFKA_FRAME.items() if k != "block_size"})
    bd = bytearray(big)
    bd[5] = 0x40                                                 # claim 64 KiB blocks
    bd[6] = C._lz4_hc(bytes(bd[4:6]))
    padding = lz4.frame.compress(b"y" * 200_000, **KAFKA_FRAME)  # more room in the buffer
    with pytest.raises(CorruptRecordError):
        decode(bytes(bd) + padding)


def test_refusals_say_what_is_wrong():
    frame = lz4.frame.compress(b"kafka" * 1000, **KAFKA_FRAME)
    checked = lz4.frame.compress(b"kafka" * 1000, content_checksum=True)
    cases = {
        "not an lz4 frame": b"\x00\x01\x02\x03\x04\x05\x06",
        "header checksum": frame[:6] + bytes([frame[6] ^ 0xFF]) + frame[7:],
        "block is truncated": frame[:-9],
        "block header is truncated": frame[:-2],
        "frame header is truncated": frame[:6],
        "frame header is invalid": frame[:4] + bytes([frame[4] | 0x02]) + frame[5:],
        "dictionary": frame[:4] + bytes([frame[4] | 0x01]) + frame[5:],
        "no lz4 frame": (0x184D2A50).to_bytes(4, "little") + bytes(4),
        "cannot decompress": checked[:-1] + bytes([checked[-1] ^ 0xFF]),   # content checksum (cramjam)
    }
    for words, bad in cases.items():
        with pytest.raises(CorruptRecordError, match=words):
            decode(bad)
    with pytest.raises(CorruptRecordError, match="no lz4 frame"):
        decode(b"")


def test_magic_0_header_checksum_is_ignored_on_both_paths():
    """KAFKA-1493: magic 0 readers ignore HC, on plain frames and on frames cramjam decodes whole."""
    data = b"old kafka " * 10_000
    for options in (KAFKA_FRAME, {"content_checksum": True, "block_linked": True}):
        frame = bytearray(lz4.frame.compress(data, **options))
        hc_at = 6 + (8 if frame[4] & 0x08 else 0)
        frame[hc_at] ^= 0x5A
        assert decode(bytes(frame), magic=0) == data
        with pytest.raises(CorruptRecordError, match="header checksum"):
            decode(bytes(frame), magic=1)
