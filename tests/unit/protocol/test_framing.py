"""FrameDecoder: frames out of a byte stream, limits enforced before buffering."""

from __future__ import annotations

import struct

import pytest

from sundial.protocol.errors import FrameTooLargeError, InvalidFrameError, ProtocolError
from sundial.protocol.framing import FrameDecoder
from support.unit_helpers import feed_in_pieces
from support.wire_bytes import frame


BODIES = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"x" * 70000]
STREAM = b"".join(frame(b) for b in BODIES)


@pytest.mark.parametrize("sizes", [[len(STREAM)], [1], [2, 3], [4], [5, 1, 7], [4096], [65536, 3]])
def test_any_chunking_yields_the_same_frames(sizes):
    decoder = FrameDecoder(1 << 20)
    assert feed_in_pieces(decoder, STREAM, sizes) == BODIES
    assert decoder.buffered_bytes == 0
    assert decoder.frame_length_needed() == 4


def test_partial_frame_is_kept_and_accounted():
    decoder = FrameDecoder(1000)
    data = frame(b"0123456789")
    assert decoder.feed(data[:2]) == []
    assert decoder.buffered_bytes == 2 and decoder.frame_length_needed() == 2
    assert decoder.feed(data[2:7]) == []
    assert decoder.buffered_bytes == 7 and decoder.frame_length_needed() == 7
    assert [bytes(f) for f in decoder.feed(data[7:])] == [b"0123456789"]
    assert decoder.buffered_bytes == 0


def test_frames_survive_reuse_of_the_input_buffer():
    decoder = FrameDecoder(1000)
    buf = bytearray(frame(b"first") + frame(b"second")[:3])
    frames = decoder.feed(buf)
    buf[:] = b"\x00" * len(buf)  # the caller reuses its receive buffer
    assert [bytes(f) for f in frames] == [b"first"]
    rest = bytearray(frame(b"second")[3:])
    frames = decoder.feed(memoryview(rest))
    rest[:] = b"\xff" * len(rest)
    assert [bytes(f) for f in frames] == [b"second"]


def test_oversized_frame_refused_before_its_body_is_buffered():
    decoder = FrameDecoder(100)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", 101))  # only the prefix has arrived
    assert info.value.size_bytes == 101
    assert decoder.buffered_bytes <= 4
    with pytest.raises(ProtocolError):
        decoder.feed(b"more")  # the stream cannot be resynchronised


def test_oversized_prefix_split_across_feeds():
    decoder = FrameDecoder(100)
    assert decoder.feed(b"\x7f\xff") == []
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\xff\xff")


def test_limit_is_inclusive():
    decoder = FrameDecoder(10)
    assert [bytes(f) for f in decoder.feed(frame(b"0123456789"))] == [b"0123456789"]


def test_negative_size_is_invalid():
    decoder = FrameDecoder(100)
    with pytest.raises(InvalidFrameError):
        decoder.feed(frame(b"ok") + b"\xff\xff\xff\xfe")


def test_oversized_frame_after_good_ones_in_one_chunk():
    decoder = FrameDecoder(100)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(frame(b"ok") + struct.pack(">i", 1 << 30) + b"junk")


def test_big_frame_in_small_pieces_is_joined_once():
    """O(n): pieces are collected and joined when the frame completes."""
    body = bytes(range(256)) * 4096  # 1 MiB
    data = frame(body)
    decoder = FrameDecoder(2 << 20)
    got = []
    for pos in range(0, len(data), 1000):
        got += decoder.feed(data[pos:pos + 1000])
        if not got:
            assert decoder.buffered_bytes == pos + 1000
            assert decoder.frame_length_needed() == len(data) - pos - 1000
    assert len(got) == 1 and got[0] == body
    assert decoder.buffered_bytes == 0


def test_small_frames_in_one_bytes_chunk_are_not_copied():
    data = frame(b"abc") + frame(b"defg")
    frames = FrameDecoder(100).feed(data)
    assert all(f.obj is data for f in frames)
