/* Zig-zag LEB128 varints of Kafka's v2 records, shared by the C accelerators
 * records/_speedups.c and storage/_cleaner_speedups.c (the Python reference is
 * records/varint.py). Varints are at most 5 bytes and must fit in 32 bits; varlongs at
 * most 10 bytes and 64 bits (Kafka ByteUtils). A reader reads p[0..end); on failure it
 * returns -1 and leaves a message in r->error. get_record_region opens the buffer a walk
 * reads (both accelerators take a buffer and a [pos, end) records region).
 */
#ifndef SUNDIAL_VARINT_H
#define SUNDIAL_VARINT_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    const unsigned char *p;
    Py_ssize_t end;
    const char *error;
} reader;

static inline int
read_uvarint(reader *r, Py_ssize_t *pos, int max_bytes, uint64_t *out)
{
    const unsigned char *p = r->p + *pos;
    Py_ssize_t avail = r->end - *pos;
    int limit = avail < max_bytes ? (int)avail : max_bytes;
    uint64_t result = 0;
    int i;
    for (i = 0; i < limit; i++) {
        unsigned char b = p[i];
        if (i == max_bytes - 1) {
            /* last allowed byte: no continuation, and the value must fit */
            if (b >= 0x80) {
                r->error = max_bytes == 5 ? "varint is longer than 5 bytes" : "varlong is longer than 10 bytes";
                return -1;
            }
            if ((max_bytes == 5 && b > 0x0F) || (max_bytes == 10 && b > 1)) {
                r->error = max_bytes == 5 ? "varint does not fit in 32 bits" : "varlong does not fit in 64 bits";
                return -1;
            }
        }
        result |= ((uint64_t)(b & 0x7F)) << (7 * i);
        if (b < 0x80) {
            *pos += i + 1;
            *out = result;
            return 0;
        }
    }
    r->error = "record runs past the end of its batch";
    return -1;
}

/* Zig-zag varints (max_bytes 5) and varlongs (max_bytes 10). One- and two-byte encodings
   (the usual case) are decoded inline; longer ones go through read_uvarint, which enforces
   the length and range limits. */
static inline int
read_zigzag(reader *r, Py_ssize_t *pos, int max_bytes, int64_t *out)
{
    uint64_t u;
    Py_ssize_t at = *pos;
    if (at + 1 < r->end) {
        unsigned char b0 = r->p[at];
        if (b0 < 0x80) {
            *pos = at + 1;
            *out = (int64_t)(b0 >> 1) ^ -(int64_t)(b0 & 1);
            return 0;
        }
        if (r->p[at + 1] < 0x80) {
            u = (uint64_t)(b0 & 0x7F) | ((uint64_t)r->p[at + 1] << 7);
            *pos = at + 2;
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 0;
        }
    }
    if (read_uvarint(r, pos, max_bytes, &u) < 0)
        return -1;
    *out = (int64_t)((u >> 1) ^ (~(u & 1) + 1));
    return 0;
}

#define read_varint(r, pos, out) read_zigzag((r), (pos), 5, (out))
#define read_varlong(r, pos, out) read_zigzag((r), (pos), 10, (out))

static inline int
write_zigzag(unsigned char *out, int64_t value)
{
    uint64_t u = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 0;
    while (u >= 0x80) {
        out[n++] = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    out[n++] = (unsigned char)u;
    return n;
}

static inline int
zigzag_size(int64_t value)
{
    uint64_t u = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

/* A read-only view of obj with [pos, end) inside it, else -1 with ValueError set. */
static int
get_record_region(PyObject *obj, Py_buffer *view, Py_ssize_t pos, Py_ssize_t end)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (pos < 0 || end < pos || end > view->len) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "record region is outside the buffer");
        return -1;
    }
    return 0;
}

#endif /* SUNDIAL_VARINT_H */
