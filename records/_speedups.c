/*
 * records._speedups: C versions of the per-record walks of records/walks.py.
 *
 * The pure-Python functions in records/walks.py are the reference; these must give
 * identical answers (tests/property/test_records_property.py checks it). Setting
 * SUNDIAL_NO_EXTENSIONS=1 makes records/walks.py ignore this module.
 *
 * v2 record layout (see records/layout.py): length varint, attributes int8,
 * timestamp_delta varlong, offset_delta varint, key_length varint + key,
 * value_length varint + value, header_count varint, headers (key_length varint +
 * key, value_length varint + value). Varints are zig-zag LEB128, at most 5 bytes
 * (value < 2^32 before zig-zag) and varlongs at most 10 (value < 2^64).
 *
 * scan_v2(buffer, pos, end, count, base_ts) -> (min_ts | None, max_ts | None,
 *     sequential_offsets: bool, first_null_key: int)
 *     Full structural walk of `count` records in buffer[pos:end]; timestamps are
 *     base_ts + delta (64-bit wrap), -1 excluded from min/max. ValueError on any
 *     structural problem.
 * find_v2(buffer, pos, end, count, base_ts, target, min_offset_delta, exact)
 *     -> (offset_delta, timestamp) | None
 *     First record with offset_delta >= min_offset_delta and timestamp >= target
 *     (== target when exact); reads only length, timestamp and offset deltas.
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

#include "_varint.h"

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(base, at, end) do { if ((at) < (end)) __builtin_prefetch((base) + (at)); } while (0)
#else
#define PREFETCH(base, at, end) do { } while (0)
#endif


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
    if (get_record_region(obj, &view, pos, end) < 0)
        return NULL;
    r.p = (const unsigned char *)view.buf;
    r.end = end;
    r.error = NULL;
    base_ts = (uint64_t)base_ts_ll;

    Py_BEGIN_ALLOW_THREADS
    for (index = 0; index < count_ll; index++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, header_count, h;
        Py_ssize_t body, record_end, p;
        int64_t ts;
        if (pos >= end) {
            r.error = "batch declares more records than its data holds";
            break;
        }
        p = pos;
        if (read_varint(&r, &p, &length) < 0)
            break;
        body = p;
        if (length < 0 || length > (int64_t)(end - body)) {
            r.error = "record length runs past the end of its batch";
            break;
        }
        record_end = body + (Py_ssize_t)length;
        p = body + 1;
        if (read_varlong(&r, &p, &ts_delta) < 0 || read_varint(&r, &p, &offset_delta) < 0
            || read_varint(&r, &p, &key_len) < 0)
            break;
        if (key_len > 0) {
            if (key_len > (int64_t)(end - p)) { r.error = "record key runs past the end of its batch"; break; }
            p += (Py_ssize_t)key_len;
        }
        if (read_varint(&r, &p, &value_len) < 0)
            break;
        if (value_len > 0) {
            if (value_len > (int64_t)(end - p)) { r.error = "record value runs past the end of its batch"; break; }
            p += (Py_ssize_t)value_len;
        }
        if (read_varint(&r, &p, &header_count) < 0)
            break;
        if (header_count < 0) {
            r.error = "record has a negative header count";
            break;
        }
        for (h = 0; h < header_count; h++) {
            int64_t hk_len, hv_len;
            if (read_varint(&r, &p, &hk_len) < 0)
                break;
            if (hk_len < 0) {
                r.error = "record has a header with a negative key size";
                break;
            }
            if (hk_len > (int64_t)(end - p)) { r.error = "header key runs past the end of its batch"; break; }
            p += (Py_ssize_t)hk_len;
            if (read_varint(&r, &p, &hv_len) < 0)
                break;
            if (hv_len > 0) {
                if (hv_len > (int64_t)(end - p)) { r.error = "header value runs past the end of its batch"; break; }
                p += (Py_ssize_t)hv_len;
            }
            if (p > record_end)
                break;
        }
        if (r.error)
            break;
        if (p != record_end) {
            r.error = "invalid record size: the record's fields do not fill its declared length";
            break;
        }
        if (offset_delta != index)
            sequential = 0;
        if (key_len < 0 && first_null_key < 0)
            first_null_key = index;
        ts = (int64_t)(base_ts + (uint64_t)ts_delta);
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
        pos = record_end;
        PREFETCH(r.p, pos + 384, end);
    }
    if (!r.error && pos != end)
        r.error = "incorrect declared batch size: bytes remain after the declared records";
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (r.error) {
        PyErr_SetString(PyExc_ValueError, r.error);
        return NULL;
    }
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
    if (get_record_region(obj, &view, pos, end) < 0)
        return NULL;
    r.p = (const unsigned char *)view.buf;
    r.end = end;
    r.error = NULL;
    base_ts = (uint64_t)base_ts_ll;

    Py_BEGIN_ALLOW_THREADS
    for (index = 0; index < count_ll; index++) {
        int64_t length, ts_delta, offset_delta, ts;
        Py_ssize_t p = pos, record_end;
        if (pos >= end) {
            r.error = "batch declares more records than its data holds";
            break;
        }
        if (read_varint(&r, &p, &length) < 0)
            break;
        if (length < 0 || length > (int64_t)(end - p)) {
            r.error = "record length runs past the end of its batch";
            break;
        }
        record_end = p + (Py_ssize_t)length;
        p += 1;
        if (read_varlong(&r, &p, &ts_delta) < 0 || read_varint(&r, &p, &offset_delta) < 0)
            break;
        if (offset_delta >= min_offset_delta) {
            ts = (int64_t)(base_ts + (uint64_t)ts_delta);
            if (exact ? (ts == target) : (ts >= target)) {
                found = 1;
                found_delta = offset_delta;
                found_ts = ts;
                break;
            }
        }
        pos = record_end;
        PREFETCH(r.p, pos + 384, end);
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (r.error) {
        PyErr_SetString(PyExc_ValueError, r.error);
        return NULL;
    }
    if (!found)
        Py_RETURN_NONE;
    return Py_BuildValue("LL", (long long)found_delta, (long long)found_ts);
}

static PyObject *
index_v2(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj, *offsets = NULL, *maxes = NULL, *result = NULL;
    Py_ssize_t pos, end;
    long long count_ll, base_ts_ll;
    Py_buffer view;
    reader r;
    long long index;
    int64_t running = INT64_MIN;
    int64_t *off_out, *max_out;
    uint64_t base_ts;

    if (!PyArg_ParseTuple(args, "OnnLL", &obj, &pos, &end, &count_ll, &base_ts_ll))
        return NULL;
    if (count_ll < 0 || count_ll > (long long)((end - pos) + 1)) {
        PyErr_SetString(PyExc_ValueError, "batch declares more records than its data holds");
        return NULL;
    }
    if (get_record_region(obj, &view, pos, end) < 0)
        return NULL;
    offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count_ll * 8));
    maxes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count_ll * 8));
    if (!offsets || !maxes)
        goto done;
    off_out = (int64_t *)PyBytes_AS_STRING(offsets);
    max_out = (int64_t *)PyBytes_AS_STRING(maxes);
    r.p = (const unsigned char *)view.buf;
    r.end = end;
    r.error = NULL;
    base_ts = (uint64_t)base_ts_ll;

    Py_BEGIN_ALLOW_THREADS
    for (index = 0; index < count_ll; index++) {
        int64_t length, ts_delta, offset_delta, ts;
        Py_ssize_t p = pos;
        if (pos >= end) {
            r.error = "batch declares more records than its data holds";
            break;
        }
        if (read_varint(&r, &p, &length) < 0)
            break;
        if (length < 0 || length > (int64_t)(end - p)) {
            r.error = "record length runs past the end of its batch";
            break;
        }
        pos = p + (Py_ssize_t)length;
        p += 1;
        if (read_varlong(&r, &p, &ts_delta) < 0 || read_varint(&r, &p, &offset_delta) < 0)
            break;
        ts = (int64_t)(base_ts + (uint64_t)ts_delta);
        if (ts > running)
            running = ts;
        off_out[index] = offset_delta;
        max_out[index] = running;
    }
    Py_END_ALLOW_THREADS

    if (r.error) {
        PyErr_SetString(PyExc_ValueError, r.error);
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
