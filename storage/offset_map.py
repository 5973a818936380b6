"""The cleaner's key -> last offset map (Kafka ``SkimpyOffsetMap``) and its per-record walks.

Layout
------
One buffer of ``memory`` bytes (a private anonymous mapping) holds ``slots = memory // 24`` entries: a 16-byte
hash of the key followed by the offset (int64, native byte order); 24 zero bytes is an
empty slot. The map stores hashes, never keys, so its memory is fixed whatever the keys:
the cleaner's resident memory is bounded by ``log.cleaner.dedupe.buffer.size`` plus a
constant. A hash stands for its key: two keys with the same 128-bit hash would be taken
for one (as in Kafka, whose map compares digests).

* Hash: MurmurHash3 x64-128 with a fixed seed (Kafka hashes with a message digest, MD5
  then SHA-256; the digest is private to one pass and only its width matters). A 16-byte
  hash gives 24-byte entries: 5,592,405 slots in the default 128 MiB.
* Probing (Kafka ``positionOf``): attempt ``i`` reads the big-endian int32 at byte
  ``min(i, 12)`` of the hash and adds ``max(0, i - 12)`` (Java int arithmetic), then
  ``Utils.abs`` (MIN_VALUE -> 0) modulo ``slots``. A lookup gives up after
  ``slots + 12`` attempts.
* ``put`` overwrites the offset of a hash already present (the size does not grow) and
  sets ``latest_offset``; ``update_latest_offset`` moves it without a put; ``clear``
  zeroes the buffer.

Walks over a v2 records section (layout in :mod:`records.layout`), each written twice:
here in Python (the reference) and in ``storage/_cleaner_speedups.c`` (identical answers
and bytes, without the GIL; ``SUNDIAL_NO_EXTENSIONS=1`` keeps the reference). Both read
the records through the one tokenizer of their language, to the value
(:func:`records.tokenizer.record_spans`, ``parse_record`` of ``records/_record.h``):

* :func:`put_v2` — Kafka ``buildOffsetMapForSegment`` for one batch: put every keyed
  record at or after ``start_offset`` while the map holds fewer than ``max_entries``;
  stop at the first such record once it does (the map is "full").
* :func:`filter_v2` — Kafka ``Cleaner.shouldRetainRecord`` for every record of a batch,
  then the records section ``MemoryRecords.buildRetainedRecordsInto`` writes: records
  keep their bytes except the timestamp delta, re-encoded against the new base
  timestamp (the delete horizon, when the batch has or gets one, else the first kept
  record's timestamp).

Not thread-safe: one cleaner thread owns a map.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

from sundial.records.errors import CorruptRecordError, InvalidRecordError
from sundial.records.extensions import extensions_enabled
from sundial.records.tokenizer import KEY_VALUE, record_spans
from sundial.records.varint import encode_varint

ENTRY_BYTES = 24
HASH_BYTES = 16
SEED = 0x2545F491
_M64 = (1 << 64) - 1
_OFFSET = struct.Struct("=q")
_PROBE = struct.Struct(">i")
_EMPTY = bytes(ENTRY_BYTES)
_ZERO_CHUNK = bytes(1 << 20)


class MapPutResult(NamedTuple):
    entries: int
    last_put_offset: int     # -1 when nothing was put
    full: bool
    records_read: int


class FilterResult(NamedTuple):
    """What :func:`filter_v2` decided for one batch (see the module doc)."""

    kept: int
    invalid: int                 # records without a key (dropped, Kafka's "invalid messages")
    tombstones_kept: int
    max_kept_offset: int
    records: bytes | None        # None: write the batch as it is; b"": nothing kept
    new_base_timestamp: int
    new_max_timestamp: int
    with_horizon: bool


# -- reference implementation ------------------------------------------------------------------------
def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def _hash_py(key) -> bytes:
    """MurmurHash3 x64-128 (Austin Appleby's public-domain algorithm), seed :data:`SEED`."""
    data = bytes(key)
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = SEED
    n = len(data)
    nblocks = n // 16
    for i in range(nblocks):
        k1 = int.from_bytes(data[16 * i:16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8:16 * i + 16], "little")
        k1 = (_rotl((k1 * c1) & _M64, 31) * c2) & _M64
        h1 ^= k1
        h1 = (_rotl(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        k2 = (_rotl((k2 * c2) & _M64, 33) * c1) & _M64
        h2 ^= k2
        h2 = (_rotl(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[nblocks * 16:]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= (_rotl((k2 * c2) & _M64, 33) * c1) & _M64
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= (_rotl((k1 * c1) & _M64, 31) * c2) & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return h1.to_bytes(8, "little") + h2.to_bytes(8, "little")


def _position(digest: bytes, attempt: int, slots: int) -> int:
    probe = _PROBE.unpack_from(digest, min(attempt, HASH_BYTES - 4))[0] + max(0, attempt - HASH_BYTES + 4)
    probe = (probe + (1 << 31)) % (1 << 32) - (1 << 31)          # Java int addition wraps
    return (0 if probe == -(1 << 31) else abs(probe)) % slots * ENTRY_BYTES


def _get_py(buf, slots: int, key) -> int:
    digest = _hash_py(key)
    for attempt in range(slots + HASH_BYTES - 4):
        pos = _position(digest, attempt, slots)
        if buf[pos:pos + ENTRY_BYTES] == _EMPTY:
            return -1
        if buf[pos:pos + HASH_BYTES] == digest:
            return _OFFSET.unpack_from(buf, pos + HASH_BYTES)[0]
    return -1


def _put_py(buf, slots: int, key, offset: int) -> int:
    digest = _hash_py(key)
    attempt = 0
    pos = _position(digest, 0, slots)
    while buf[pos:pos + ENTRY_BYTES] != _EMPTY:
        if buf[pos:pos + HASH_BYTES] == digest:
            _OFFSET.pack_into(buf, pos + HASH_BYTES, offset)
            return 0
        attempt += 1
        pos = _position(digest, attempt, slots)
    buf[pos:pos + HASH_BYTES] = digest
    _OFFSET.pack_into(buf, pos + HASH_BYTES, offset)
    return 1


def _records(b, pos: int, end: int, count: int):
    """(attributes_at, offset_delta_at, record_end, ts_delta, offset_delta, key_at, key_len, value_len) per
    record, read to the value by the records tokenizer (as the C walks read them); its refusals as ValueError,
    as the C functions raise them."""
    try:
        for attr_at, rest, record_end, ts_delta, offset_delta, key_at, key_len, _va, value_len, _h in record_spans(
                b, pos, end, count, KEY_VALUE, to_end=True):
            yield attr_at, rest, record_end, ts_delta, offset_delta, key_at, key_len, value_len
    except InvalidRecordError as exc:
        raise ValueError(str(exc)) from None


def _wrap64(x: int) -> int:
    return ((x + (1 << 63)) & _M64) - (1 << 63)


def _put_v2_py(buf, slots, entries, max_entries, b, pos, end, count, base_offset, start_offset) -> tuple:
    mv = memoryview(b)
    last_put = -1
    index = 0
    for index, (_a, _r, _e, _t, offset_delta, key_at, key_len, _v) in enumerate(_records(mv, pos, end, count)):
        offset = _wrap64(base_offset + offset_delta)            # Java long arithmetic wraps
        if key_len >= 0 and offset >= start_offset:
            if entries >= max_entries:
                return entries, last_put, True, index
            entries += _put_py(buf, slots, mv[key_at:key_at + key_len], offset)
            last_put = offset
    else:
        index = count
    return entries, last_put, False, index


def _filter_v2_py(buf, slots, b, pos, end, count, base_offset, base_ts, log_append_time, max_ts, latest_offset,
                  retain_deletes, has_horizon, horizon, new_horizon) -> tuple:
    mv = memoryview(b)
    parsed = list(_records(mv, pos, end, count))
    kept: list[tuple] = []
    invalid = tombstones = 0
    max_kept_offset = -1
    kept_max_ts = -1
    for rec in parsed:
        _attr_at, _rest, _end, ts_delta, offset_delta, key_at, key_len, value_len = rec
        offset = _wrap64(base_offset + offset_delta)
        ts = max_ts if log_append_time else _wrap64(base_ts + ts_delta)
        if offset > latest_offset:
            retain = True
        elif key_len >= 0:
            retain = offset >= _get_py(buf, slots, mv[key_at:key_at + key_len]) and (value_len >= 0 or retain_deletes)
        else:
            retain = False
            invalid += 1
        if retain:
            kept.append((rec, ts))
            tombstones += value_len < 0
            max_kept_offset = max(max_kept_offset, offset)
            kept_max_ts = max(kept_max_ts, ts)
    new_max = max_ts if log_append_time else kept_max_ts
    if not kept:
        return 0, invalid, 0, -1, b"", 0, new_max, False
    need_horizon = tombstones > 0 and not has_horizon
    if len(kept) == len(parsed) and not need_horizon:
        return len(kept), invalid, tombstones, max_kept_offset, None, base_ts, new_max, bool(has_horizon)
    new_base = horizon if has_horizon else (new_horizon if need_horizon else kept[0][1])
    out = []
    for (attr_at, rest, record_end, *_), ts in kept:
        body = mv[attr_at:attr_at + 1].tobytes() + encode_varint(_wrap64(ts - new_base)) + mv[rest:record_end].tobytes()
        out.append(encode_varint(len(body)))
        out.append(body)
    return (len(kept), invalid, tombstones, max_kept_offset, b"".join(out), new_base, new_max,
            bool(has_horizon or need_horizon))


# -- dispatch: C when built ------------------------------------------------------------------------
_hash, _get, _put, _put_v2, _filter_v2 = _hash_py, _get_py, _put_py, _put_v2_py, _filter_v2_py
IMPLEMENTATION = "python"
if extensions_enabled():
    try:
        from . import _cleaner_speedups as _c  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - depends on the build
        _c = None
    if _c is not None:
        _hash, _get, _put, _put_v2, _filter_v2 = _c.hash, _c.map_get, _c.map_put, _c.map_put_v2, _c.filter_v2
        IMPLEMENTATION = "c"


def _allocate(memory: int):
    """The map's memory: a private anonymous mapping (zero-filled, huge pages asked for: the map is
    probed at random, so fewer TLB misses matter), or a bytearray where mappings are not available."""
    try:
        buf = mmap.mmap(-1, memory, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, OSError, ValueError):
        return bytearray(memory)
    try:
        buf.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError, ValueError):
        pass
    return buf


def key_hash(key) -> bytes:
    """The 16-byte hash the map stores for ``key``."""
    return _hash(key)


class SkimpyOffsetMap:
    """Key hash -> last offset in a fixed buffer (see the module doc)."""

    __slots__ = ("memory", "slots", "buffer", "entries", "latest_offset", "_impl", "_dirty")

    def __init__(self, memory: int, *, implementation: str | None = None) -> None:
        if memory < ENTRY_BYTES:
            raise ValueError(f"an offset map needs at least {ENTRY_BYTES} bytes, got {memory}")
        self.slots = memory // ENTRY_BYTES
        self.memory = self.slots * ENTRY_BYTES
        self.buffer = _allocate(self.memory)
        self.entries = 0
        self.latest_offset = -1
        self._dirty = False
        use_c = (implementation or IMPLEMENTATION) == "c" and IMPLEMENTATION == "c"
        self._impl = ((_c.map_get, _c.map_put, _c.map_put_v2, _c.filter_v2) if use_c
                      else (_get_py, _put_py, _put_v2_py, _filter_v2_py))

    @property
    def implementation(self) -> str:
        return "python" if self._impl[0] is _get_py else "c"

    def clear(self) -> None:
        """Empty the map (Kafka zeroes the buffer). A private anonymous mapping is handed back to
        the kernel (``MADV_DONTNEED``: it reads as zeros again and leaves the resident set);
        otherwise it is zeroed in place, a MiB at a time."""
        if self.entries or self._dirty:
            buf = self.buffer
            try:
                buf.madvise(mmap.MADV_DONTNEED)
            except (AttributeError, OSError, ValueError):
                for start in range(0, self.memory, len(_ZERO_CHUNK)):
                    end = min(start + len(_ZERO_CHUNK), self.memory)
                    buf[start:end] = _ZERO_CHUNK[:end - start]
        self._dirty = False
        self.entries = 0
        self.latest_offset = -1

    def put(self, key, offset: int) -> None:
        if self.entries >= self.slots:
            raise ValueError(f"attempted to add a new entry to a full offset map, entries: {self.entries}, "
                             f"slots: {self.slots}")
        self.entries += self._impl[1](self.buffer, self.slots, key, offset)
        self._dirty = True
        self.latest_offset = offset

    def get(self, key) -> int:
        """The offset stored for ``key``, or -1."""
        return self._impl[0](self.buffer, self.slots, key)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    @property
    def utilization(self) -> float:
        return self.entries / self.slots

    def put_v2(self, b, pos: int, end: int, count: int, base_offset: int, start_offset: int,
               max_entries: int) -> MapPutResult:
        """Put the keyed records of one v2 records section ``b[pos:end]`` (see :func:`put_v2` in the module doc)."""
        try:
            entries, last, full, read = self._impl[2](self.buffer, self.slots, self.entries, max_entries, b, pos, end,
                                                      count, base_offset, start_offset)
        except ValueError as exc:
            raise CorruptRecordError(f"cannot read the records of the batch at offset {base_offset}: {exc}") from None
        self.entries = entries
        self._dirty = True
        if last >= 0:
            self.latest_offset = last
        return MapPutResult(entries, last, full, read)

    def filter_v2(self, b, pos: int, end: int, count: int, *, base_offset: int, base_timestamp: int,
                  log_append_time: bool, max_timestamp: int, retain_deletes: bool, horizon: int | None,
                  new_horizon: int) -> FilterResult:
        """Decide every record of one v2 records section (see the module doc); ``horizon`` is the
        batch's delete horizon (None when it has none), ``new_horizon`` the one to set if needed."""
        try:
            out = self._impl[3](self.buffer, self.slots, b, pos, end, count, base_offset, base_timestamp,
                                log_append_time, max_timestamp, self.latest_offset, retain_deletes,
                                horizon is not None, 0 if horizon is None else horizon, new_horizon)
        except ValueError as exc:
            raise CorruptRecordError(f"cannot read the records of the batch at offset {base_offset}: {exc}") from None
        return FilterResult(*out)


__all__ = ["SkimpyOffsetMap", "MapPutResult", "FilterResult", "key_hash", "IMPLEMENTATION", "ENTRY_BYTES"]
