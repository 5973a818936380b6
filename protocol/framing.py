"""Length-prefixed framing: bytes in, complete frames out (sans-I/O).

Wire format (Kafka ``NetworkReceive``): every request is ``[size int32][size bytes]``.
``FrameDecoder.feed`` returns the complete frames with the size prefix stripped, as
``memoryview`` objects that own their bytes (a frame's view stays valid after later
``feed`` calls).

Invariants:

* A size prefix above ``max_frame_bytes`` (``socket.request.max.bytes``) raises
  ``FrameTooLargeError`` as soon as the 4 prefix bytes are seen, before any of the
  body is buffered; a negative size raises ``InvalidFrameError``. After either the
  decoder is unusable (the connection must close; the stream cannot be resynchronised).
* Buffering is O(n) in the bytes fed: a frame being assembled is collected as a
  list of chunks and joined once when complete, so a 100 MiB frame arriving in
  64 KiB pieces costs one copy, not a quadratic series of copies. Small frames
  packed into one chunk are sliced out of that chunk without copying.
* ``buffered_bytes`` and ``frame_length_needed()`` tell the caller how much is held
  and how much more the current frame needs (back-pressure accounting).
"""

from __future__ import annotations

import struct

from .errors import FrameTooLargeError, InvalidFrameError

_SIZE = struct.Struct(">i")


class FrameDecoder:
    """Incremental splitter of a byte stream into Kafka frames."""

    __slots__ = ("max_frame_bytes", "_chunks", "_buffered", "_need", "_failed")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._chunks: list = []  # pieces of the frame (or size prefix) being assembled
        self._buffered = 0  # bytes in _chunks
        self._need = -1  # body size of the frame in progress, or -1 while reading its prefix
        self._failed = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for an incomplete frame (prefix included)."""
        return self._buffered

    def frame_length_needed(self) -> int:
        """Bytes still missing to complete the frame in progress (4 - have, before a prefix)."""
        if self._need < 0:
            return 4 - self._buffered
        return 4 + self._need - self._buffered

    def _check_size(self, size: int) -> None:
        if size < 0:
            self._failed = True
            raise InvalidFrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            self._failed = True
            raise FrameTooLargeError(size, self.max_frame_bytes)

    def feed(self, data) -> list[memoryview]:
        """Add received bytes; return every frame completed by them (maybe none)."""
        if self._failed:
            raise InvalidFrameError("frame decoder already failed; the connection must be closed")
        frames: list[memoryview] = []
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        n = len(view)
        if n == 0:
            return frames
        pos = 0
        if self._chunks:
            # Finish the partial prefix or frame first.
            if self._need < 0:
                take = min(4 - self._buffered, n)
                self._chunks.append(bytes(view[:take]))
                self._buffered += take
                pos = take
                if self._buffered < 4:
                    return frames
                prefix = b"".join(self._chunks)
                size = _SIZE.unpack(prefix)[0]
                self._check_size(size)
                self._need = size
                self._chunks = []
                self._buffered = 0
                if size == 0:
                    frames.append(memoryview(b""))
                    self._need = -1
                else:
                    self._chunks = [b""]  # marker: body in progress (prefix already consumed)
                    self._buffered = 4
            if self._need >= 0:
                missing = 4 + self._need - self._buffered
                take = min(missing, n - pos)
                # Copy: the caller may reuse ``data``'s buffer after feed returns.
                self._chunks.append(bytes(view[pos:pos + take]))
                self._buffered += take
                pos += take
                if take < missing:
                    return frames
                frames.append(memoryview(b"".join(self._chunks)))
                self._chunks = []
                self._buffered = 0
                self._need = -1
        # Whole frames inside this chunk: find them, then slice them out of one
        # owned copy (``bytes`` input is immutable and is not copied at all).
        spans = []
        first = pos
        while n - pos >= 4:
            size = _SIZE.unpack_from(view, pos)[0]
            self._check_size(size)
            if n - pos - 4 < size:
                break
            spans.append((pos + 4, size))
            pos += 4 + size
        if spans:
            if isinstance(data, bytes):
                owned, base = view, 0
            else:
                owned, base = memoryview(bytes(view[first:pos])), first
            for start, size in spans:
                start -= base
                frames.append(owned[start:start + size])
        if pos < n:
            rest = bytes(view[pos:])
            if len(rest) < 4:
                self._chunks = [rest]
                self._buffered = len(rest)
                self._need = -1
            else:
                size = _SIZE.unpack_from(rest, 0)[0]
                self._need = size
                self._chunks = [b"", rest[4:]]
                self._buffered = len(rest)
        return frames
