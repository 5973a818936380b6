/*
 * storage._cleaner_speedups: the log cleaner's per-record work in C.
 *
 * The pure-Python functions of storage/offset_map.py are the reference; these must give
 * identical answers and write identical bytes (tests/property/test_cleaner_property.py
 * checks it). SUNDIAL_NO_EXTENSIONS=1 makes storage/offset_map.py ignore this module.
 *
 * Offset map (Kafka SkimpyOffsetMap): a caller-owned writable buffer of `slots` entries
 * of 24 bytes: a 16-byte key hash followed by the offset (int64, native byte order). An
 * entry of 24 zero bytes is empty. The key hash is MurmurHash3 x64-128 with the seed
 * below (the map is private to one cleaning pass; Kafka hashes with a digest). Probing is
 * Kafka's: attempt i reads the big-endian int32 at byte min(i, 12) of the hash, adds
 * max(0, i - 12), takes Utils.abs (MIN_VALUE -> 0) and the remainder by `slots`.
 *
 * v2 records are read by parse_record (records/_record.h, the tokenizer every C walk shares) to
 * the value (RECORD_KEY_VALUE): the headers are copied as they are, unread.
 *
 * hash(key) -> 16 bytes
 * map_put(map, slots, key, offset) -> 1 if a new entry was added, 0 if one was overwritten
 * map_get(map, slots, key) -> offset or -1
 * map_put_v2(map, slots, entries, max_entries, buf, pos, end, count, base_offset, start_offset)
 *     -> (entries, last_put_offset (-1: none), full, records_read)
 *     Puts every keyed record with offset >= start_offset while entries < max_entries (Kafka
 *     buildOffsetMapForSegment); stops at the first such record when the map is full.
 * filter_v2(map, slots, buf, pos, end, count, base_offset, base_ts, log_append_time, max_ts,
 *           latest_offset, retain_deletes, has_horizon, horizon, new_horizon)
 *     -> (kept, invalid, tombstones_kept, max_kept_offset, records, new_base_ts, new_max_ts, with_horizon)
 *     Kafka's Cleaner.shouldRetainRecord over the records of one batch, then the records
 *     section of MemoryRecords.buildRetainedRecordsInto: `records` is None when the batch
 *     may be written as it is (every record kept, no delete horizon to set), b"" when
 *     nothing is kept, else the kept records re-encoded against the new base timestamp.
 *
 * The record walks run without the GIL.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_record.h"   /* records/_record.h: parse_record (and _varint.h's readers and writer) */
#include <string.h>

#define ENTRY_BYTES 24
#define PUT_WINDOW 32

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 1)
#else
#define PREFETCH(p) do { } while (0)
#endif
#define HASH_BYTES 16
#define SEED 0x2545F491u

/* ------------------------------------------------------------------ MurmurHash3 x64-128 */
static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t le64(const unsigned char *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24)
        | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void murmur3_128(const unsigned char *data, Py_ssize_t len, unsigned char out[HASH_BYTES])
{
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = SEED, h2 = SEED, k1, k2;
    Py_ssize_t nblocks = len / 16, i;
    const unsigned char *tail;
    int rest, j;
    for (i = 0; i < nblocks; i++) {
        k1 = le64(data + 16 * i);
        k2 = le64(data + 16 * i + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    tail = data + nblocks * 16;
    rest = (int)(len & 15);
    k1 = 0;
    k2 = 0;
    for (j = rest; j > 8; j--)                      /* the reference's switch, bytes 15..9 */
        k2 ^= (uint64_t)tail[j - 1] << (8 * (j - 9));
    if (rest > 8) {
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
    }
    for (j = rest < 8 ? rest : 8; j > 0; j--)       /* bytes 8..1 */
        k1 ^= (uint64_t)tail[j - 1] << (8 * (j - 1));
    if (rest > 0) {
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    put_le64(out, h1);
    put_le64(out + 8, h2);
}

/* ------------------------------------------------------------------ the offset map */
typedef struct {
    unsigned char *bytes;
    int64_t slots;
} offset_map;

static inline int64_t slot_position(const unsigned char *hash, int64_t attempt, int64_t slots)
{
    int64_t at = attempt < HASH_BYTES - 4 ? attempt : HASH_BYTES - 4;
    int64_t extra = attempt - (HASH_BYTES - 4);
    uint32_t u = ((uint32_t)hash[at] << 24) | ((uint32_t)hash[at + 1] << 16) | ((uint32_t)hash[at + 2] << 8)
        | (uint32_t)hash[at + 3];
    int32_t probe;
    int64_t absval;
    if (extra > 0)
        u += (uint32_t)extra;          /* Java int addition wraps */
    probe = (int32_t)u;
    absval = probe == INT32_MIN ? 0 : (probe < 0 ? -(int64_t)probe : probe);
    return (absval % slots) * ENTRY_BYTES;
}

static inline int slot_is_empty(const unsigned char *p)
{
    static const unsigned char zero[ENTRY_BYTES] = {0};
    return memcmp(p, zero, ENTRY_BYTES) == 0;
}

static int64_t map_lookup(const offset_map *m, const unsigned char *hash)
{
    int64_t attempt = 0, max_attempts = m->slots + HASH_BYTES - 4, pos;
    for (;;) {
        if (attempt >= max_attempts)
            return -1;
        pos = slot_position(hash, attempt, m->slots);
        if (slot_is_empty(m->bytes + pos))
            return -1;
        if (memcmp(m->bytes + pos, hash, HASH_BYTES) == 0) {
            int64_t offset;
            memcpy(&offset, m->bytes + pos + HASH_BYTES, 8);
            return offset;
        }
        attempt++;
    }
}

/* 1: new entry, 0: overwritten */
static int map_store(offset_map *m, const unsigned char *hash, int64_t offset)
{
    int64_t attempt = 0, pos = slot_position(hash, 0, m->slots);
    while (!slot_is_empty(m->bytes + pos)) {
        if (memcmp(m->bytes + pos, hash, HASH_BYTES) == 0) {
            memcpy(m->bytes + pos + HASH_BYTES, &offset, 8);
            return 0;
        }
        attempt++;
        pos = slot_position(hash, attempt, m->slots);
    }
    memcpy(m->bytes + pos, hash, HASH_BYTES);
    memcpy(m->bytes + pos + HASH_BYTES, &offset, 8);
    return 1;
}

static int get_map(PyObject *obj, Py_buffer *view, long long slots, offset_map *m)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) < 0)
        return -1;
    if (slots <= 0 || view->len < slots * ENTRY_BYTES) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "offset map buffer is smaller than its slots");
        return -1;
    }
    m->bytes = (unsigned char *)view->buf;
    m->slots = slots;
    return 0;
}

/* The map's buffer (get_map) and a walk over the records of buf[pos:end] (open_walk), both
   held on success (the caller releases both); on failure neither is held. 0, or -1 with an
   exception set. */
static int open_map_and_walk(PyObject *map_obj, Py_buffer *map_view, long long slots, offset_map *m,
                             PyObject *buf_obj, Py_buffer *view, reader *r, Py_ssize_t pos, Py_ssize_t end,
                             long long count)
{
    if (get_map(map_obj, map_view, slots, m) < 0)
        return -1;
    if (open_walk(buf_obj, view, r, pos, end, count) < 0) {
        PyBuffer_Release(map_view);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ Python functions */
static PyObject *py_hash(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer key;
    unsigned char out[HASH_BYTES];
    if (!PyArg_ParseTuple(args, "y*", &key))
        return NULL;
    murmur3_128((const unsigned char *)key.buf, key.len, out);
    PyBuffer_Release(&key);
    return PyBytes_FromStringAndSize((const char *)out, HASH_BYTES);
}

static PyObject *py_map_put(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *map_obj;
    long long slots, offset;
    Py_buffer map_view, key;
    offset_map m;
    unsigned char hash[HASH_BYTES];
    int added;
    if (!PyArg_ParseTuple(args, "OLy*L", &map_obj, &slots, &key, &offset))
        return NULL;
    if (get_map(map_obj, &map_view, slots, &m) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    murmur3_128((const unsigned char *)key.buf, key.len, hash);
    added = map_store(&m, hash, offset);
    PyBuffer_Release(&key);
    PyBuffer_Release(&map_view);
    return PyLong_FromLong(added);
}

static PyObject *py_map_get(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *map_obj;
    long long slots;
    Py_buffer map_view, key;
    offset_map m;
    unsigned char hash[HASH_BYTES];
    int64_t found;
    if (!PyArg_ParseTuple(args, "OLy*", &map_obj, &slots, &key))
        return NULL;
    if (get_map(map_obj, &map_view, slots, &m) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    murmur3_128((const unsigned char *)key.buf, key.len, hash);
    found = map_lookup(&m, hash);
    PyBuffer_Release(&key);
    PyBuffer_Release(&map_view);
    return PyLong_FromLongLong(found);
}

static PyObject *py_map_put_v2(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *map_obj, *buf_obj;
    long long slots, entries, max_entries, count, base_offset, start_offset;
    Py_ssize_t pos, end;
    Py_buffer map_view, view;
    offset_map m;
    reader r;
    long long index = 0, last_put = -1;
    int full = 0;
    if (!PyArg_ParseTuple(args, "OLLLOnnLLL", &map_obj, &slots, &entries, &max_entries, &buf_obj, &pos, &end,
                          &count, &base_offset, &start_offset))
        return NULL;
    if (open_map_and_walk(map_obj, &map_view, slots, &m, buf_obj, &view, &r, pos, end, count) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    /* Windows of records: parse and hash them, prefetch their first probe slots (the map is
       probed at random, so its cache misses overlap), then put them in order. A parse error is
       reported only when the puts reach it, as the one-record-at-a-time reference does. */
    while (index < count && !full) {
        v2_record recs[PUT_WINDOW];
        unsigned char hashes[PUT_WINDOW][HASH_BYTES];
        int64_t offsets[PUT_WINDOW];
        int wanted[PUT_WINDOW];
        int n = 0, i;
        while (n < PUT_WINDOW && index + n < count) {
            if (parse_record(&r, pos, RECORD_KEY_VALUE, &recs[n]) != RECORD_OK)
                break;
            pos = recs[n].end;
            offsets[n] = (int64_t)((uint64_t)base_offset + (uint64_t)recs[n].offset_delta);   /* Java long: wraps */
            wanted[n] = recs[n].key_len >= 0 && offsets[n] >= start_offset;
            if (wanted[n]) {
                murmur3_128(r.p + recs[n].key_at, (Py_ssize_t)recs[n].key_len, hashes[n]);
                PREFETCH(m.bytes + slot_position(hashes[n], 0, m.slots));
            }
            n++;
        }
        for (i = 0; i < n; i++) {
            if (wanted[i]) {
                if (entries >= max_entries) {
                    full = 1;
                    break;
                }
                entries += map_store(&m, hashes[i], offsets[i]);
                last_put = offsets[i];
            }
            index++;
        }
        if (r.error != NULL)
            break;
    }
    if (full)
        r.error = NULL;
    else if (r.error == NULL && pos != end)
        r.error = record_messages[RECORD_TRAILING];
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&map_view);
    if (r.error != NULL) {
        PyErr_SetString(PyExc_ValueError, r.error);
        return NULL;
    }
    return Py_BuildValue("LLOL", entries, last_put, full ? Py_True : Py_False, index);
}

static PyObject *py_filter_v2(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *map_obj, *buf_obj, *out = NULL, *result = NULL;
    long long slots, count, base_offset, base_ts, max_ts, latest_offset, horizon, new_horizon;
    int log_append_time, retain_deletes, has_horizon;
    Py_ssize_t pos, end, room;
    Py_buffer map_view, view;
    offset_map m;
    reader r;
    v2_record *recs = NULL, spare;
    unsigned char *keep = NULL;
    int64_t *stamps = NULL, *offsets = NULL;
    unsigned char *hashes = NULL;
    long long index, kept = 0, invalid = 0, tombstones = 0, max_kept_offset = -1;
    int64_t first_ts = 0, kept_max_ts = -1, new_base = 0, new_max;
    int with_horizon = 0, rewrite;
    Py_ssize_t out_size = 0;

    if (!PyArg_ParseTuple(args, "OLOnnLLLpLLppLL", &map_obj, &slots, &buf_obj, &pos, &end, &count, &base_offset,
                          &base_ts, &log_append_time, &max_ts, &latest_offset, &retain_deletes, &has_horizon,
                          &horizon, &new_horizon))
        return NULL;
    if (open_map_and_walk(map_obj, &map_view, slots, &m, buf_obj, &view, &r, pos, end, count) < 0)
        return NULL;
    /* The arrays below are sized by the records the section can hold, not by the declared
       count (a header's count times their entry sizes could overflow size_t): a larger count
       fails in the walk, at RECORD_MISSING or at the record that does not fit, before it would
       need more room. */
    room = (end - pos) / RECORD_MIN_BYTES;
    if ((long long)room > count)
        room = (Py_ssize_t)count;
    recs = PyMem_RawMalloc(sizeof(v2_record) * (size_t)(room ? room : 1));
    keep = PyMem_RawMalloc((size_t)(room ? room : 1));
    stamps = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(room ? room : 1));
    offsets = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(room ? room : 1));
    hashes = PyMem_RawMalloc((size_t)HASH_BYTES * (size_t)(room ? room : 1));
    if (recs == NULL || keep == NULL || stamps == NULL || offsets == NULL || hashes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* parse every record, hash the keys that need a lookup and prefetch their first slots ... */
    for (index = 0; index < count; index++) {
        v2_record *rec = index < (long long)room ? &recs[index] : &spare;
        if (parse_record(&r, pos, RECORD_KEY_VALUE, rec) != RECORD_OK)
            break;
        if (rec == &spare) {                /* unreachable: each record takes RECORD_MIN_BYTES */
            r.error = record_messages[RECORD_MISSING];
            break;
        }
        pos = rec->end;
        offsets[index] = (int64_t)((uint64_t)base_offset + (uint64_t)rec->offset_delta);   /* wraps */
        if (offsets[index] <= latest_offset && rec->key_len >= 0) {
            murmur3_128(r.p + rec->key_at, (Py_ssize_t)rec->key_len, hashes + HASH_BYTES * index);
            PREFETCH(m.bytes + slot_position(hashes + HASH_BYTES * index, 0, m.slots));
        }
    }
    /* ... then decide, in order (Kafka Cleaner.shouldRetainRecord) */
    for (index = 0; r.error == NULL && index < count; index++) {
        v2_record *rec = &recs[index];
        int64_t offset = offsets[index], ts;
        int retain;
        ts = log_append_time ? (int64_t)max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)rec->ts_delta);
        stamps[index] = ts;
        if (offset > latest_offset) {
            retain = 1;
        } else if (rec->key_len >= 0) {
            int64_t found = map_lookup(&m, hashes + HASH_BYTES * index);
            retain = offset >= found && (rec->value_len >= 0 || retain_deletes);
        } else {
            retain = 0;
            invalid++;
        }
        keep[index] = (unsigned char)retain;
        if (retain) {
            if (kept == 0)
                first_ts = ts;
            kept++;
            if (rec->value_len < 0)
                tombstones++;
            if (offset > max_kept_offset)
                max_kept_offset = offset;
            if (ts > kept_max_ts)
                kept_max_ts = ts;
        }
    }
    if (r.error == NULL && pos != end)
        r.error = record_messages[RECORD_TRAILING];
    rewrite = 0;
    if (r.error == NULL && kept > 0) {
        int need_horizon = tombstones > 0 && !has_horizon;
        if (kept < count || need_horizon) {
            rewrite = 1;
            with_horizon = has_horizon || need_horizon;
            new_base = has_horizon ? (int64_t)horizon : (need_horizon ? (int64_t)new_horizon : first_ts);
            for (index = 0; index < count; index++) {
                if (keep[index]) {
                    v2_record *rec = &recs[index];
                    int64_t delta = (int64_t)((uint64_t)stamps[index] - (uint64_t)new_base);
                    Py_ssize_t body = 1 + zigzag_size(delta) + (rec->end - rec->offset_delta_at);
                    out_size += zigzag_size((int64_t)body) + body;
                }
            }
        } else {
            with_horizon = has_horizon;
            new_base = base_ts;
        }
    }
    Py_END_ALLOW_THREADS
    if (r.error != NULL) {
        PyErr_SetString(PyExc_ValueError, r.error);
        goto done;
    }
    new_max = log_append_time ? (int64_t)max_ts : kept_max_ts;
    if (kept == 0) {
        out = PyBytes_FromStringAndSize(NULL, 0);
    } else if (!rewrite) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = PyBytes_FromStringAndSize(NULL, out_size);
        if (out != NULL) {
            unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
            Py_BEGIN_ALLOW_THREADS
            for (index = 0; index < count; index++) {
                if (keep[index]) {
                    v2_record *rec = &recs[index];
                    int64_t delta = (int64_t)((uint64_t)stamps[index] - (uint64_t)new_base);
                    Py_ssize_t rest = rec->end - rec->offset_delta_at;
                    Py_ssize_t body = 1 + zigzag_size(delta) + rest;
                    w += write_zigzag(w, (int64_t)body);
                    *w++ = r.p[rec->attributes_at];
                    w += write_zigzag(w, delta);
                    memcpy(w, r.p + rec->offset_delta_at, (size_t)rest);
                    w += rest;
                }
            }
            Py_END_ALLOW_THREADS
        }
    }
    if (out != NULL)
        result = Py_BuildValue("LLLLNLLO", kept, invalid, tombstones, max_kept_offset, out, (long long)new_base,
                               (long long)new_max, with_horizon ? Py_True : Py_False);
done:
    PyMem_RawFree(recs);
    PyMem_RawFree(keep);
    PyMem_RawFree(stamps);
    PyMem_RawFree(offsets);
    PyMem_RawFree(hashes);
    PyBuffer_Release(&view);
    PyBuffer_Release(&map_view);
    return result;
}

static PyMethodDef methods[] = {
    {"hash", py_hash, METH_VARARGS, "MurmurHash3 x64-128 of a key (16 bytes)."},
    {"map_put", py_map_put, METH_VARARGS, "Store key -> offset; 1 if a new entry was added."},
    {"map_get", py_map_get, METH_VARARGS, "The offset stored for a key, or -1."},
    {"map_put_v2", py_map_put_v2, METH_VARARGS, "Put the keyed records of a v2 records section."},
    {"filter_v2", py_filter_v2, METH_VARARGS, "Keep the latest record of each key of a v2 records section."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_cleaner_speedups",
    .m_doc = "The log cleaner's per-record work (see storage/offset_map.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__cleaner_speedups(void)
{
    return PyModule_Create(&module);
}
