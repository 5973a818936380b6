"""Fixed-width, memory-mapped index files: the part shared by the offset and time indexes.

Kafka's ``AbstractIndex``. An index file is an array of fixed-size, big-endian entries
with no header and no checksum. This module knows the mechanics and nothing of what an
entry means; :mod:`storage.offset_index` and :mod:`storage.time_index` add the layout
and the lookup semantics.

Life cycle and invariants
-------------------------
* **Lazy**: constructing an index touches nothing on disk. The file is opened (and, if
  it does not exist, created) on the first operation that needs its contents — so a
  segment whose index was never used has no index file (Kafka ``LazyIndex``), and
  renaming or deleting an unloaded index does not create it.
* **Pre-allocation**: a newly created file is extended at once to ``max_index_size``
  rounded down to a multiple of the entry size (sparse; 10 MiB by default) and mapped
  read/write. ``entries`` counts the valid entries at the start of the mapping;
  everything after is free space.
* **Opening an existing file** assumes it was trimmed: ``entries = file size // entry
  size`` and the index is full until :meth:`resize` gives it room (Kafka resizes the
  last segment's indexes after loading). Because an untrimmed, zero-filled file would
  then look like a full index of garbage, the loader checks index files before
  trusting them (:meth:`segment.LogSegment.check_indexes`).
* **Trim**: :meth:`trim_to_valid_size` shrinks the file to ``entries × entry size``;
  done when a segment is rolled, closed and at the end of recovery.
* **Disk full**: the pre-allocated tail is sparse, and a store into a mapped page the
  filesystem cannot back kills the process with SIGBUS. So before an entry is written
  into a page not yet known to be backed, that page is allocated with
  ``posix_fallocate``; on ENOSPC this raises :class:`KafkaStorageError` and writes
  nothing. :meth:`reserve_next_entry` does the same ahead of time, so a segment can
  make sure its index entries will fit before it writes the batch to the ``.log``.
* **Search**: :meth:`_largest_lower_bound_slot` is the binary search of Kafka's
  ``indexSlotRangeFor``: the slot of the largest key <= target, or -1.

Not thread-safe: a segment's owner serialises all calls.

An unloaded index can report its last entry and sample entries with ``os.pread``
(:meth:`peek_entries`) so that opening thousands of partitions maps nothing.

Mapped indexes
--------------
Each mapping holds a file descriptor (CPython 3.11), so how many index files are mapped
at once is bounded by a :class:`MappedIndexes`: a least-recently-used set of mappings
with a limit (default :func:`_default_max_mapped`, from the open-files limit). Mapping an
index beyond the limit unmaps the least recently used others; their entry counts stay
known, so they are remapped transparently on their next lookup or append. There is no
process-wide instance: the :class:`~storage.log_manager.LogManager` builds one (or takes
one, ``mapped_indexes=``) and hands it through every log, segment factory and segment it
creates, opens, recovers, cleans or moves, so its limit holds across all its logs. An
index, segment, factory or log built without one (unit tests, offline tools) gets a
private one with the default limit, which bounds only the mappings of that object.
Its bookkeeping is guarded by a lock (recovery threads open indexes in parallel); the
mappings themselves are used by each segment's owner as above.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from typing import Any, Callable

import structlog

from sundial.records.layout import INT32_MAX

from .errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError

logger = structlog.get_logger(__name__)


def round_down_to_multiple(value: int, factor: int) -> int:
    return (value // factor) * factor


def _default_max_mapped() -> int:
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        unlimited = resource.RLIM_INFINITY
    except (ImportError, ValueError, OSError):
        soft, unlimited = 1024, -1
    if soft <= 0 or soft == unlimited:
        soft = 65536
    return max(64, min(8192, soft // 8))


def loaded_attribute(name: str, doc: str) -> property:
    """A read-only property of an index that loads its metadata first, then reads ``name``."""

    def get(index: "AbstractIndex"):
        if not index._loaded:
            index._load()
        return getattr(index, name)

    return property(get, doc=doc)


class MappedIndexes:
    """The least-recently-used set of mapped index files of one owner (see module doc).

    ``limit`` is the most index files mapped at once (at least 2; default
    :func:`_default_max_mapped`). Least recently used mappings beyond it are unmapped.
    """

    __slots__ = ("_limit", "_mapped", "_lock")

    def __init__(self, limit: int | None = None) -> None:
        self._limit = max(2, _default_max_mapped() if limit is None else limit)
        self._mapped: "OrderedDict[int, AbstractIndex]" = OrderedDict()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    def __len__(self) -> int:
        """How many indexes are mapped now."""
        with self._lock:
            return len(self._mapped)

    def set_limit(self, limit: int) -> None:
        """Change the limit (at least 2), unmapping the least recently used beyond it."""
        with self._lock:
            self._limit = max(2, limit)
            victims = self._over_limit(None)
        for victim in victims:
            victim._unmap()

    def used(self, index: "AbstractIndex") -> None:
        """``index`` is mapped and was just used: make it the most recent, and unmap the
        least recently used others beyond the limit."""
        key = id(index)
        try:   # the common case, on every lookup: already mapped, one C call under the interpreter lock
            self._mapped.move_to_end(key)
            return
        except KeyError:
            pass
        with self._lock:
            mapped = self._mapped
            if key in mapped:
                mapped.move_to_end(key)
                return
            mapped[key] = index
            victims = self._over_limit(index) if len(mapped) > self._limit else []
        for victim in victims:   # outside the lock: unmapping forgets, which takes it
            victim._unmap()

    def forget(self, index: "AbstractIndex") -> None:
        """``index`` is unmapped (or about to be)."""
        with self._lock:
            self._mapped.pop(id(index), None)

    def _over_limit(self, keep: "AbstractIndex | None") -> "list[AbstractIndex]":
        """Under the lock: take the least recently used beyond the limit (never ``keep``) out."""
        mapped = self._mapped
        victims = []
        while len(mapped) > self._limit:
            key, victim = next(iter(mapped.items()))
            if victim is keep:
                mapped.move_to_end(key)
                if len(mapped) <= 1:
                    break
                continue
            del mapped[key]
            victims.append(victim)
        return victims

    def __repr__(self) -> str:
        return f"MappedIndexes(limit={self._limit}, mapped={len(self)})"


class AbstractIndex:
    """Mechanics of one fixed-width index file (see module doc).

    Two levels of laziness: the *metadata* (entry count, capacity, file length, last
    entry) is loaded on first use with a stat and a pread, creating and pre-allocating
    the file if it is missing; the *mapping* is made only for lookups and appends and may
    be dropped again by the LRU of mapped indexes it is given (``mapped_indexes``; a
    private :class:`MappedIndexes` with the default limit when None).
    """

    ENTRY_SIZE = 0  # set by subclasses
    #: What messages call the file ("index", "time index"), and with its article.
    KIND = "index"
    A_KIND = "an index"
    #: Slots at the end that only an append skipping the full check may use.
    SPARE_SLOTS = 0

    __slots__ = ("path", "base_offset", "max_index_size", "_mm", "_length", "_entries", "_max_entries",
                 "_loaded", "_closed", "_backed_bytes", "_mapped_indexes", "__weakref__")

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10_485_760,
                 mapped_indexes: MappedIndexes | None = None) -> None:
        if max_index_size < self.ENTRY_SIZE:
            raise ValueError(f"index size {max_index_size} is smaller than one entry ({self.ENTRY_SIZE} bytes)")
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._mm: mmap.mmap | None = None
        self._length = 0
        self._entries = 0
        self._max_entries = 0
        self._loaded = False     # metadata known (the file exists from then on)
        self._closed = False
        self._backed_bytes = 0   # file bytes known to be allocated (no SIGBUS when stored into)
        self._mapped_indexes = mapped_indexes if mapped_indexes is not None else MappedIndexes()
        self._refresh_last()

    # -- loading ----------------------------------------------------------------------------------
    @property
    def is_loaded(self) -> bool:
        return self._loaded

    @property
    def is_mapped(self) -> bool:
        return self._mm is not None

    def _refresh_last(self) -> None:
        """Subclass hook: recompute the cached last entry from the entries, after the metadata
        was (re)loaded or the entries changed; also at construction, with no entries."""

    def _load(self) -> None:
        """Load the metadata: create and pre-allocate a missing file, else size it up."""
        if self._loaded:
            return
        if self._closed:
            raise KafkaStorageError(f"index {self.path} is closed")
        newly_created = False
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self.path, os.O_RDWR)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot open index {self.path}") from exc
        try:
            length = os.fstat(fd).st_size
            if newly_created:
                length = round_down_to_multiple(self.max_index_size, self.ENTRY_SIZE)
                os.ftruncate(fd, length)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot size index {self.path}") from exc
        finally:
            os.close(fd)
        self._length = length
        self._max_entries = length // self.ENTRY_SIZE
        self._entries = 0 if newly_created else self._max_entries
        self._backed_bytes = 0  # an untrimmed file left by a crash may have holes: check from the start
        self._loaded = True
        self._refresh_last()

    def _map(self) -> mmap.mmap | None:
        if not self._loaded:
            self._load()
        if self._mm is None and self._length > 0:
            try:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    self._mm = mmap.mmap(fd, self._length)
                finally:
                    os.close(fd)  # the mmap keeps its own duplicate
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot map index {self.path}") from exc
            self._mapped_indexes.used(self)
        elif self._mm is not None:
            self._mapped_indexes.used(self)
        return self._mm

    def _ensure(self) -> mmap.mmap | None:
        """The mapping (made if needed); metadata-only callers use :meth:`_load`."""
        return self._map()

    def _unmap(self) -> None:
        self._mapped_indexes.forget(self)
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _raw_entry(self, slot: int) -> bytes:
        """Bytes of entry ``slot`` from the mapping, or with pread when unmapped."""
        size = self.ENTRY_SIZE
        if self._mm is not None:
            return self._mm[slot * size:(slot + 1) * size]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, size, slot * size)
        finally:
            os.close(fd)

    # -- sizes ------------------------------------------------------------------------------------
    entries = loaded_attribute("_entries", "How many entries are valid.")
    max_entries = loaded_attribute("_max_entries", "How many entries the file has room for.")
    length_bytes = loaded_attribute("_length", "Current file length (including pre-allocated free space).")

    @property
    def valid_size_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        """No room for an append: fewer than ``SPARE_SLOTS + 1`` free slots."""
        if not self._loaded:
            self._load()
        return self._entries >= self._max_entries - self.SPARE_SLOTS

    def file_exists(self) -> bool:
        return self._loaded or os.path.exists(self.path)

    # -- raw access -------------------------------------------------------------------------------
    def _largest_lower_bound_slot(self, target: int, key_of: Callable[[mmap.mmap, int], int]) -> int:
        """Slot of the largest key <= target, or -1 (empty index or target below the first key)."""
        mm = self._map()
        n = self._entries
        if n == 0 or mm is None:
            return -1
        if key_of(mm, 0) > target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            key = key_of(mm, mid)
            if key > target:
                hi = mid - 1
            elif key < target:
                lo = mid
            else:
                return mid
        return lo

    def reserve_next_entry(self) -> None:
        """Make sure the next entry's bytes are backed by the filesystem (KafkaStorageError if not)."""
        if not self._loaded:
            self._load()
        end = (self._entries + 1) * self.ENTRY_SIZE
        if end <= self._backed_bytes or end > self._length:
            return
        page = mmap.PAGESIZE
        start = self._backed_bytes - self._backed_bytes % page
        stop = min(self._length, -(-end // page) * page)
        try:
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.posix_fallocate(fd, start, stop - start)
            finally:
                os.close(fd)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot extend index {self.path}") from exc
        self._backed_bytes = stop

    def _write_entry(self, data: bytes) -> None:
        self.reserve_next_entry()
        mm = self._map()
        assert mm is not None
        pos = self._entries * self.ENTRY_SIZE
        mm[pos:pos + self.ENTRY_SIZE] = data
        self._entries += 1

    def peek_entries(self, slots: list[int]) -> tuple[int, list[bytes]]:
        """(entry count, raw entry bytes for ``slots``) without mapping the file.

        Negative slots count from the end; slots outside the entries are skipped. An
        index whose metadata is not loaded counts ``file size // entry size`` entries
        (what a load would assume). Returns (0, []) for a missing file.
        """
        size = self.ENTRY_SIZE
        if self._mm is not None:
            n = self._entries
            out = []
            for s in slots:
                s = s + n if s < 0 else s
                if 0 <= s < n:
                    out.append(bytes(self._mm[s * size:(s + 1) * size]))
            return n, out
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return 0, []
        try:
            n = self._entries if self._loaded else os.fstat(fd).st_size // size
            out = []
            for s in slots:
                s = s + n if s < 0 else s
                if 0 <= s < n:
                    out.append(os.pread(fd, size, s * size))
            return n, out
        finally:
            os.close(fd)

    def file_length(self) -> int:
        """File length without loading (0 when missing)."""
        if self._loaded:
            return self._length
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def read_all_bytes(self) -> bytes:
        """Every valid entry's bytes."""
        mm = self._map()
        if mm is None:
            return b""
        return bytes(mm[:self._entries * self.ENTRY_SIZE])

    # -- entries ----------------------------------------------------------------------------------
    @staticmethod
    def _unpack_entry(buf, at: int) -> tuple[int, int]:
        """The two fields of the entry at byte ``at`` of ``buf`` (set by subclasses)."""
        raise NotImplementedError

    @staticmethod
    def _make_entry(base_offset: int, first: int, second: int) -> Any:
        """The subclass's entry tuple from the two stored fields (set by subclasses)."""
        raise NotImplementedError

    @classmethod
    def parse_entry(cls, raw: bytes, base_offset: int) -> Any:
        """The entry stored in ``raw`` (one entry's bytes) of an index with ``base_offset``."""
        return cls._make_entry(base_offset, *cls._unpack_entry(raw, 0))

    def _entry_at(self, mm: mmap.mmap, slot: int) -> Any:
        return self._make_entry(self.base_offset, *self._unpack_entry(mm, slot * self.ENTRY_SIZE))

    def entry(self, n: int) -> Any:
        """Entry ``n`` (IndexError outside the entries)."""
        mm = self._ensure()
        if n < 0 or n >= self._entries or mm is None:
            raise IndexError(f"attempt to fetch entry {n} of {self.A_KIND} with {self._entries} entries")
        return self._entry_at(mm, n)

    def _relative(self, offset: int) -> int:
        """``offset`` relative to the base offset, as stored (InvalidOffsetError if it does not fit an int32)."""
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise InvalidOffsetError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset}")
        return rel

    def _check_last_offset_and_length(self, last_offset: int) -> None:
        """Kafka's sanity checks common to both indexes: a non-empty index's last offset is
        >= the base offset, and the file length is a multiple of the entry size."""
        if self._entries != 0 and last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt {self.KIND} found, {self.KIND} file ({self.path}) has non-zero size but the last "
                f"offset is {last_offset} which is less than the base offset {self.base_offset}")
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{self.KIND} file {self.path} is corrupt, found {self._length} bytes which is neither positive "
                f"nor a multiple of {self.ENTRY_SIZE}")

    # -- mutation ---------------------------------------------------------------------------------
    def _truncate_to_entries(self, entries: int) -> None:
        if not self._loaded:
            self._load()
        self._entries = max(0, min(entries, self._entries))

    @staticmethod
    def _relative_offset_of(mm: mmap.mmap, slot: int) -> int:
        """The relative offset stored in entry ``slot`` (set by subclasses)."""
        raise NotImplementedError

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self._ensure()
        rel = offset - self.base_offset
        key_of = self._relative_offset_of
        slot = self._largest_lower_bound_slot(rel, key_of)
        if slot < 0:
            new_entries = 0
        elif key_of(self._mm, slot) == rel:
            new_entries = slot
        else:
            new_entries = slot + 1
        self._truncate_to_entries(new_entries)
        self._refresh_last()

    def truncate(self) -> None:
        """Remove every entry (the file keeps its length)."""
        self._truncate_to_entries(0)
        self._refresh_last()

    def resize(self, new_size: int) -> bool:
        """Change the file length to ``new_size`` rounded down to the entry size.

        Returns False when the rounded size equals the current length. Entries beyond
        the new length are dropped.
        """
        if not self._loaded:
            self._load()
        rounded = round_down_to_multiple(new_size, self.ENTRY_SIZE)
        if rounded == self._length:
            return False
        try:
            if self._mm is not None and rounded > 0:
                self._mm.resize(rounded)
            else:
                self._unmap()
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    os.ftruncate(fd, rounded)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot resize index {self.path}") from exc
        self._length = rounded
        self._max_entries = rounded // self.ENTRY_SIZE
        self._entries = min(self._entries, self._max_entries)
        self._backed_bytes = min(self._backed_bytes, rounded)
        self._refresh_last()
        return True

    def reset(self) -> None:
        """Zero entries and the full pre-allocated size (start of a recovery)."""
        if not self._loaded:
            self._load()
        self._entries = 0
        self._backed_bytes = 0
        self.resize(self.max_index_size)
        self._refresh_last()

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly the valid entries."""
        if not self._loaded:
            return
        self.resize(self._entries * self.ENTRY_SIZE)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        """Trim to the valid size and unmap; the object can be reopened lazily afterwards."""
        if self._loaded:
            self.trim_to_valid_size()
            self._unmap()
            self._loaded = False

    def close_handler(self) -> None:
        """Unmap without trimming (the file keeps its length); forget the metadata."""
        self._unmap()
        self._loaded = False

    def rename_to(self, new_path: str) -> None:
        """Rename the file if it exists (an unloaded, never-created index stays uncreated)."""
        try:
            os.rename(self.path, new_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot rename index {self.path}") from exc
        self.path = new_path

    def delete_if_exists(self) -> bool:
        self.close_handler()
        self._closed = True
        try:
            os.remove(self.path)
            return True
        except FileNotFoundError:
            return False

    def __repr__(self) -> str:
        state = f"entries={self._entries}" if self._loaded else "unloaded"
        return f"{type(self).__name__}({self.path!r}, base_offset={self.base_offset}, {state})"


__all__ = ["AbstractIndex", "MappedIndexes", "loaded_attribute", "round_down_to_multiple"]
