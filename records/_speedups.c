/*
 * records._speedups: C versions of the per-record walks of records/walks.py.
 *
 * The pure-Python functions in records/walks.py are the reference; these must give
 * identical answers (tests/property/test_records_property.py checks it). Setting
 * SUNDIAL_NO_EXTENSIONS=1 makes records/walks.py ignore this module.
 *
 * Every walk reads records through parse_record (records/_record.h: the layout, the checks
 * and their order, the messages), the tokenizer the cleaner's walks share; it only keeps
 * what it needs of each record. A negative count is refused by every walk.
 *
 * scan_v2(buffer, pos, end, count, base_ts) -> (min_ts | None, max_ts | None,
 *     sequential_offsets: bool, first_null_key: int)
 *     Full structural walk of `count` records in buffer[pos:end]; timestamps are
 *     base_ts + delta (64-bit wrap), -1 excluded from min/max. ValueError on any
 *     structural problem.
 * find_v2(buffer, pos, end, count, base_ts, target, min_offset_delta, exact)
 *     -> (offset_delta, timestamp) | None
 *     First record with offset_delta >= min_offset_delta and timestamp >= target
 *     (== target when exact); reads only length, timestamp and offset deltas
 *     (RECORD_DELTAS), up to the record it answers with.
 * index_v2(buffer, pos, end, count, base_ts) -> (offset_deltas: bytes, running_max: bytes)
 *     Native int64 arrays over the records, for BatchTimestampIndex; same reads as find_v2.
 * read_varints(buffer, pos, end, max_bytes) -> list[int]
 *     Every zig-zag varint (max_bytes 5) or varlong (max_bytes 10) of buffer[pos:end], in
 *     order, through the readers the walks use; ValueError on the first bad one. For the
 *     differential fuzz target of the varint readers (tests/fuzz).
 * crc32c_extend(value, nbytes) -> int
 *     The linear CRC-32C of (message || nbytes zero bytes) given the linear CRC of
 *     the message: used to patch a batch CRC after a header change in O(log n).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_record.h"   /* parse_record, and _varint.h's readers */

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(base, at, end) do { if ((at) < (end)) __builtin_prefetch((base) + (at)); } while (0)
#else
#define PREFETCH(base, at, end) do { } while (0)
#endif


/* Raises the walk's error (r->error) as ValueError; NULL. */
static PyObject *
walk_error(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

static PyObject *
scan_v2(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj;
    Py_ssize_t pos, end;
    long long count_ll, base_ts_ll;
    Py_buffer view;
    reader r;
    int64_t min_ts = 0, max_ts = 0;
    int have_ts = 0, sequential = 1;
    long long first_null_key = -1;
    long long index;
    uint64_t base_ts;

    if (!PyArg_ParseTuple(args, "OnnLL", &obj, &pos, &end, &count_ll, &base_ts_ll))
        return NULL;
    if (open_walk(obj, &view, &r, pos, end, count_ll) < 0)
        return NULL;
    base_ts = (uint64_t)base_ts_ll;

    Py_BEGIN_ALLOW_THREADS
    for (index = 0; index < count_ll; index++) {
        v2_record rec;
        int64_t ts;
        if (parse_record(&r, pos, RECORD_FULL, &rec) != RECORD_OK)
            break;
        if (rec.offset_delta != index)
            sequential = 0;
        if (rec.key_len < 0 && first_null_key < 0)
            first_null_key = index;
        ts = (int64_t)(base_ts + (uint64_t)rec.ts_delta);
        if (ts != -1) {
            if (!have_ts) {
                min_ts = max_ts = ts;
                have_ts = 1;
            } else if (ts < min_ts) {
                min_ts = ts;
            } else if (ts > max_ts) {
                max_ts = ts;
            }
        }
        pos = rec.end;
        PREFETCH(r.p, pos + 384, end);
    }
    if (!r.error && pos != end)
        r.error = record_messages[RECORD_TRAILING];
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (r.error)
        return walk_error(r.error);
    if (!have_ts)
        return Py_BuildValue("OOOL", Py_None, Py_None, sequential ? Py_True : Py_False, first_null_key);
    return Py_BuildValue("LLOL", (long long)min_ts, (long long)max_ts, sequential ? Py_True : Py_False,
                         first_null_key);
}

static PyObject *
find_v2(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj;
    Py_ssize_t pos, end;
    long long count_ll, base_ts_ll, target, min_offset_delta;
    int exact;
    Py_buffer view;
    reader r;
    long long index;
    int found = 0;
    int64_t found_delta = 0, found_ts = 0;
    uint64_t base_ts;

    if (!PyArg_ParseTuple(args, "OnnLLLLp", &obj, &pos, &end, &count_ll, &base_ts_ll, &target,
                          &min_offset_delta, &exact))
        return NULL;
    if (open_walk(obj, &view, &r, pos, end, count_ll) < 0)
        return NULL;
    base_ts = (uint64_t)base_ts_ll;

    Py_BEGIN_ALLOW_THREADS
    for (index = 0; index < count_ll; index++) {
        v2_record rec;
        if (parse_record(&r, pos, RECORD_DELTAS, &rec) != RECORD_OK)
            break;
        if (rec.offset_delta >= min_offset_delta) {
            int64_t ts = (int64_t)(base_ts + (uint64_t)rec.ts_delta);
            if (exact ? (ts == target) : (ts >= target)) {
                found = 1;
                found_delta = rec.offset_delta;
                found_ts = ts;
                break;
            }
        }
        pos = rec.end;
        PREFETCH(r.p, pos + 384, end);
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (r.error)
        return walk_error(r.error);
    if (!found)
        Py_RETURN_NONE;
    return Py_BuildValue("LL", (long long)found_delta, (long long)found_ts);
}

static PyObject *
index_v2(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj, *offsets = NULL, *maxes = NULL, *result = NULL;
    Py_ssize_t pos, end, room;
    long long count_ll, base_ts_ll;
    Py_buffer view;
    reader r;
    long long index;
    int64_t running = INT64_MIN;
    int64_t *off_out, *max_out;
    uint64_t base_ts;

    if (!PyArg_ParseTuple(args, "OnnLL", &obj, &pos, &end, &count_ll, &base_ts_ll))
        return NULL;
    if (open_walk(obj, &view, &r, pos, end, count_ll) < 0)
        return NULL;
    /* No more records than the section can hold: a larger declared count fails in the walk
       (RECORD_MISSING or the record that does not fit) before it would need more room. */
    room = (end - pos) / RECORD_MIN_BYTES;
    if ((long long)room > count_ll)
        room = (Py_ssize_t)count_ll;
    offsets = PyBytes_FromStringAndSize(NULL, room * 8);
    maxes = PyBytes_FromStringAndSize(NULL, room * 8);
    if (!offsets || !maxes)
        goto done;
    off_out = (int64_t *)PyBytes_AS_STRING(offsets);
    max_out = (int64_t *)PyBytes_AS_STRING(maxes);
    base_ts = (uint64_t)base_ts_ll;

    Py_BEGIN_ALLOW_THREADS
    for (index = 0; index < count_ll; index++) {
        v2_record rec;
        int64_t ts;
        if (parse_record(&r, pos, RECORD_DELTAS, &rec) != RECORD_OK)
            break;
        if (index >= (long long)room) {     /* unreachable: each record takes RECORD_MIN_BYTES */
            r.error = record_messages[RECORD_MISSING];
            break;
        }
        pos = rec.end;
        ts = (int64_t)(base_ts + (uint64_t)rec.ts_delta);
        if (ts > running)
            running = ts;
        off_out[index] = rec.offset_delta;
        max_out[index] = running;
    }
    Py_END_ALLOW_THREADS

    if (r.error) {
        walk_error(r.error);
        goto done;
    }
    result = PyTuple_Pack(2, offsets, maxes);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(maxes);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
read_varints(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj, *values, *item;
    Py_ssize_t pos, end;
    int max_bytes;
    Py_buffer view;
    reader r;
    int64_t value;

    if (!PyArg_ParseTuple(args, "Onni", &obj, &pos, &end, &max_bytes))
        return NULL;
    if (max_bytes != 5 && max_bytes != 10) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be 5 (varint) or 10 (varlong)");
        return NULL;
    }
    if (get_record_region(obj, &view, pos, end) < 0)
        return NULL;
    values = PyList_New(0);
    if (values == NULL)
        goto done;
    r.p = (const unsigned char *)view.buf;
    r.end = end;
    r.error = NULL;
    while (pos < end) {
        if (read_zigzag(&r, &pos, max_bytes, &value) < 0) {
            PyErr_SetString(PyExc_ValueError, r.error);
            Py_CLEAR(values);
            break;
        }
        item = PyLong_FromLongLong((long long)value);
        if (item == NULL || PyList_Append(values, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(values);
            break;
        }
        Py_DECREF(item);
    }
done:
    PyBuffer_Release(&view);
    return values;
}

/* ---- CRC-32C zero extension (GF(2) polynomial arithmetic, reflected, as zlib's crc32_combine) ---- */

#define CRC32C_POLY 0x82F63B78u
static uint32_t x2n_table[32];

static uint32_t
multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

static uint32_t
x2nmodp(uint64_t n, unsigned k)
{
    uint32_t p = 1u << 31;
    while (n) {
        if (n & 1)
            p = multmodp(x2n_table[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

static PyObject *
crc32c_extend(PyObject *Py_UNUSED(self), PyObject *args)
{
    unsigned long long value, nbytes;
    if (!PyArg_ParseTuple(args, "KK", &value, &nbytes))
        return NULL;
    if (nbytes == 0)
        return PyLong_FromUnsignedLong((unsigned long)(value & 0xFFFFFFFFu));
    return PyLong_FromUnsignedLong((unsigned long)multmodp(x2nmodp(nbytes, 3), (uint32_t)value));
}

static PyMethodDef methods[] = {
    {"scan_v2", scan_v2, METH_VARARGS, "Structural walk of v2 records: (min_ts, max_ts, sequential, first_null_key)."},
    {"find_v2", find_v2, METH_VARARGS, "First v2 record at/after a timestamp: (offset_delta, ts) or None."},
    {"index_v2", index_v2, METH_VARARGS, "Offset deltas and running-max timestamps of v2 records (int64 arrays)."},
    {"read_varints", read_varints, METH_VARARGS, "Every varint (5) or varlong (10) of a region, in order."},
    {"crc32c_extend", crc32c_extend, METH_VARARGS, "Linear CRC-32C of a message followed by n zero bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_speedups",
    .m_doc = "C walks over Kafka v2 records (see records/walks.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    uint32_t p = 1u << 30;   /* x^1 */
    int n;
    x2n_table[0] = p;
    for (n = 1; n < 32; n++)
        x2n_table[n] = p = multmodp(p, p);
    return PyModule_Create(&module);
}
