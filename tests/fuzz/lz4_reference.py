"""A pure-Python LZ4 frame decoder with the acceptance rules records/_lz4.c documents.

The oracle of the lz4 fuzz target (tests/fuzz/differential.py): written from the LZ4
frame and block format descriptions, one plain loop per rule, no fast paths. It accepts
exactly what the C decoder's header comment promises to accept (concatenated frames,
skippable frames, zero padding after at least one frame, no dictionary ids, matches
reaching back into earlier blocks of the frame unless the blocks are independent, output
bounded by the caller's room and each block's maximum size) and returns the bytes, or
raises ``ValueError``.
"""

from __future__ import annotations

from sundial.records.codecs import xxh32

FRAME_MAGIC = 0x184D2204
BLOCK_MAX_BYTES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _le32(b: bytes, at: int) -> int:
    return int.from_bytes(b[at:at + 4], "little")


def _decode_block(src: bytes, out: bytearray, room: int, low: int) -> None:
    """Append the block's output to ``out`` (at most ``room`` bytes); matches may reach
    back to ``low`` (an index into ``out``) and no further."""
    start = len(out)
    ip, n = 0, len(src)
    while True:
        if ip >= n:
            raise ValueError("lz4 block ends inside a sequence")
        token = src[ip]
        ip += 1
        lit = token >> 4
        if lit == 15:
            while True:
                if ip >= n:
                    raise ValueError("lz4 literal length is truncated")
                b = src[ip]
                ip += 1
                lit += b
                if b != 255:
                    break
        if lit > n - ip:
            raise ValueError("lz4 literals overrun the block")
        if lit > room - (len(out) - start):
            raise ValueError("lz4 block inflates beyond its maximum size")
        out += src[ip:ip + lit]
        ip += lit
        if ip == n:
            return                                    # the last sequence: literals only
        if n - ip < 2:
            raise ValueError("lz4 match offset is truncated")
        offset = src[ip] | (src[ip + 1] << 8)
        ip += 2
        if offset == 0 or offset > len(out) - low:
            raise ValueError("lz4 match offset points before the data")
        length = token & 15
        if length == 15:
            while True:
                if ip >= n:
                    raise ValueError("lz4 match length is truncated")
                b = src[ip]
                ip += 1
                length += b
                if b != 255:
                    break
        length += 4
        if length > room - (len(out) - start):
            raise ValueError("lz4 block inflates beyond its maximum size")
        at = len(out) - offset
        while length:                                 # an overlapping copy repeats its pattern
            chunk = out[at:at + min(length, len(out) - at)]
            out += chunk
            at += len(chunk)
            length -= len(chunk)


def decode_frames(src: bytes, cap: int) -> bytes:
    """The output of the LZ4 frames of ``src``, at most ``cap`` bytes, or ValueError."""
    src = bytes(src)
    n = len(src)
    pos = 0
    frames = 0
    out = bytearray()
    while pos < n:
        if frames and not any(src[pos:]):
            break                                     # zero padding after the frames
        if n - pos < 4:
            raise ValueError("lz4 frame is truncated")
        magic = _le32(src, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:
            if n - pos < 8:
                raise ValueError("lz4 skippable frame is truncated")
            size = _le32(src, pos + 4)
            if size > n - pos - 8:
                raise ValueError("lz4 skippable frame is truncated")
            pos += 8 + size
            continue
        if magic != FRAME_MAGIC:
            raise ValueError("not an lz4 frame")
        if n - pos < 7:
            raise ValueError("lz4 frame header is truncated")
        flg, bd = src[pos + 4], src[pos + 5]
        if flg >> 6 != 1 or flg & 0x02 or bd & 0x8F or (bd >> 4) & 7 not in BLOCK_MAX_BYTES:
            raise ValueError("lz4 frame header is invalid")
        if flg & 0x01:
            raise ValueError("lz4 frames with a dictionary are not supported")
        desc_len = 2 + (8 if flg & 0x08 else 0)
        if n - pos - 4 < desc_len + 1:
            raise ValueError("lz4 frame header is truncated")
        if (xxh32(src[pos + 4:pos + 4 + desc_len]) >> 8) & 0xFF != src[pos + 4 + desc_len]:
            raise ValueError("lz4 frame header checksum is wrong")
        content_size = int.from_bytes(src[pos + 6:pos + 14], "little") if flg & 0x08 else None
        block_max = BLOCK_MAX_BYTES[(bd >> 4) & 7]
        independent = bool(flg & 0x20)
        block_sums = 4 if flg & 0x10 else 0
        frame_start = len(out)
        pos += 4 + desc_len + 1
        while True:
            if n - pos < 4:
                raise ValueError("lz4 block header is truncated")
            word = _le32(src, pos)
            pos += 4
            if word == 0:
                break
            size = word & 0x7FFFFFFF
            if size > block_max:
                raise ValueError("lz4 block is larger than the frame's maximum")
            if size + block_sums > n - pos:
                raise ValueError("lz4 block is truncated")
            block = src[pos:pos + size]
            if block_sums and xxh32(block) != _le32(src, pos + size):
                raise ValueError("lz4 block checksum is wrong")
            if word & 0x80000000:
                if size > cap - len(out):
                    raise ValueError("lz4 data inflates beyond the output buffer")
                out += block
            else:
                room = min(cap - len(out), block_max)
                _decode_block(block, out, room, len(out) if independent else frame_start)
            pos += size + block_sums
        if content_size is not None and content_size != len(out) - frame_start:
            raise ValueError("lz4 frame content size is wrong")
        if flg & 0x04:
            if n - pos < 4:
                raise ValueError("lz4 content checksum is truncated")
            if xxh32(bytes(out[frame_start:])) != _le32(src, pos):
                raise ValueError("lz4 content checksum is wrong")
            pos += 4
        frames += 1
    if not frames:
        raise ValueError("no lz4 frame")
    return bytes(out)
