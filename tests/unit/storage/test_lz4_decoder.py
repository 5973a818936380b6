"""records._lz4 (the C lz4 frame decoder) against two independent decoders: python-lz4
(the reference lz4 library) writes the frames and checks the bytes, and cramjam's decoder
(what records/codecs.py uses without the accelerator) must agree on every frame it accepts.
Damaged frames are refused with ValueError or decode as cramjam decodes them, never past
the output buffer."""

import cramjam
import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.records import codecs as C

if C._lz4 is None:
    pytest.skip("the C accelerators are not built or are turned off", allow_module_level=True)
_lz4 = C._lz4

SETTINGS = settings(max_examples=150, deadline=None)
words = st.sampled_from([b"user", b"event", b"click", b'{"ts":', b"17000000", b"}", b",", b"price", b"0.5"])
payloads = st.one_of(st.binary(max_size=3000),
                     st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=120), st.integers(1, 6000)),
                     # text: many short matches at many offsets (the decoder's fast path)
                     st.builds(b"".join, st.lists(st.one_of(words, st.binary(max_size=6)), max_size=3000)))
frame_options = st.fixed_dictionaries({
    "block_size": st.sampled_from([lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB,
                                   lz4.frame.BLOCKSIZE_MAX1MB]),
    "block_linked": st.booleans(), "block_checksum": st.booleans(), "content_checksum": st.booleans(),
    "store_size": st.booleans(), "compression_level": st.sampled_from([0, 3, 9])})


def decode(frame: bytes, room: int) -> bytes:
    out = bytearray(room)
    n = _lz4.decode_frames(frame, out)
    assert 0 <= n <= room
    return bytes(out[:n])


def cramjam_decode(frame: bytes) -> bytes:
    return bytes(cramjam.lz4.decompress(frame))


@SETTINGS
@given(data=payloads, options=frame_options)
def test_frames_of_the_reference_library_decode_to_their_data(data, options):
    frame = lz4.frame.compress(data, **options)
    assert decode(frame, len(data)) == data
    assert decode(frame, len(data) + 100) == data


@SETTINGS
@given(data=payloads.filter(len), options=frame_options)
def test_an_output_buffer_one_byte_short_is_refused(data, options):
    frame = lz4.frame.compress(data, **options)
    with pytest.raises(ValueError):
        decode(frame, len(data) - 1)


@SETTINGS
@given(parts=st.lists(payloads, min_size=1, max_size=4), options=frame_options,
       skippable=st.binary(max_size=20), padding=st.integers(0, 12))
def test_concatenated_and_skippable_frames_then_zero_padding(parts, options, skippable, padding):
    frames = [lz4.frame.compress(p, **options) for p in parts]
    skip = (0x184D2A5A).to_bytes(4, "little") + len(skippable).to_bytes(4, "little") + skippable
    data = frames[0] + skip + b"".join(frames[1:]) + bytes(padding)
    assert decode(data, sum(map(len, parts))) == b"".join(parts)
    assert bytes(C.decompress(C.LZ4, data)) == b"".join(parts)   # the frame walk sizing the buffer agrees


@SETTINGS
@given(data=payloads, options=frame_options,
       damage=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 30))
def test_damaged_frames_are_refused_or_decode_as_cramjam_decodes_them(data, options, damage, cut):
    frame = bytearray(lz4.frame.compress(data, **options))
    for at, value in damage:
        frame[at % len(frame)] = value
    frame = bytes(frame[:len(frame) - cut])
    room = len(data) + 64
    try:
        ours = decode(frame, room)
    except ValueError:
        ours = None
    try:
        theirs = cramjam_decode(frame)
    except cramjam.DecompressionError:
        theirs = None
    if theirs is not None and len(theirs) <= room:
        assert ours == theirs


@SETTINGS
@given(garbage=st.binary(max_size=400))
def test_garbage_is_refused_without_writing_past_the_buffer(garbage):
    out = bytearray(256)
    try:
        n = _lz4.decode_frames(lz4.frame.compress(b"")[:4] + garbage, out)
    except ValueError:
        return
    assert 0 <= n <= len(out)


def test_overlapping_matches_repeat_their_pattern():
    """Offsets shorter than the match (runs of one byte, a 3-byte motif, a 110-byte record
    repeated): the copy doubles its step and must reproduce the pattern exactly."""
    for data in (b"a" * 100_000, b"abc" * 40_000, bytes(range(110)) * 5_000):
        frame = lz4.frame.compress(data, block_linked=True)
        assert decode(frame, len(data)) == data


def test_refusals_say_what_is_wrong():
    frame = bytearray(lz4.frame.compress(b"kafka" * 1000, content_checksum=True))
    cases = {
        "not an lz4 frame": b"\x00\x01\x02\x03\x04\x05\x06",
        "header checksum": bytes(frame[:6]) + bytes([frame[6] ^ 0xFF]) + bytes(frame[7:]),
        "content checksum": bytes(frame[:-1]) + bytes([frame[-1] ^ 0xFF]),
        "truncated": bytes(frame[:-9]),
    }
    for words, bad in cases.items():
        with pytest.raises(ValueError, match=words):
            decode(bad, 10_000)
    with_dict = bytearray(frame)
    with_dict[4] |= 0x01
    with pytest.raises(ValueError):
        decode(bytes(with_dict), 10_000)


def test_codecs_uses_it_for_lz4_batches():
    assert C._lz4_decode_into is _lz4.decode_frames
