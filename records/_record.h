/* The one tokenizer of a v2 record inside a batch's records section, shared by the C walks
 * (records/_speedups.c: scan_v2, find_v2, index_v2; storage/_cleaner_speedups.c: map_put_v2,
 * filter_v2). The Python tokenizer is records/tokenizer.py (record_spans); the two apply the
 * same checks in the same order and report the same message for each failure
 * (tests/unit/records/test_tokenizer_contract.py holds every walk to it).
 *
 * Layout (records/layout.py): length varint, attributes int8, timestamp delta varlong, offset
 * delta varint, key length varint + key, value length varint + value, header count varint,
 * headers (key length varint + key, value length varint + value). A length, key or value of
 * -1 (any negative key or value length) is null.
 *
 * parse_record(r, pos, depth, rec) reads the record at pos of r->p[0..r->end) (r->end is the
 * end of the records section) as deep as the caller needs:
 *   RECORD_DELTAS     length, attributes, timestamp delta, offset delta (the timestamp searches);
 *   RECORD_KEY_VALUE  ... and the key and value (the cleaner: it copies the rest unread);
 *   RECORD_FULL       ... and the headers, and the fields must fill the declared length exactly.
 * Checks, in order (the first failure is the answer):
 *   pos at or past the end          RECORD_MISSING (the batch declares more records than it holds)
 *   a varint that cannot be read    RECORD_VARINT  (the reader's message: longer than 5/10 bytes,
 *                                                   does not fit in 32/64 bits, runs past the end)
 *   length < 0 or past the end      RECORD_BAD_LENGTH
 *   a field read past the record's declared end (a zero-length record: its attributes)
 *                                   RECORD_OVERRUN
 *   a negative header count         RECORD_HEADER_COUNT
 *   a header key length < 0         RECORD_HEADER_KEY
 *   (full) fields end before the declared end    RECORD_SIZE
 * Varints are read up to the end of the section (as Kafka reads them from the batch buffer) and
 * a field that ends past the record's declared end is then an overrun. (parse_record reads the
 * usual record with fewer checks and hands any failure to parse_record_checked, which applies
 * these in order: see there.) On failure r->error holds
 * the message; the walk raises it as ValueError.
 *
 * RECORD_TRAILING and RECORD_NEGATIVE_COUNT are not parse_record's: they are the walks' own
 * batch-level refusals, kept here so each message has one home.
 */
#ifndef SUNDIAL_RECORD_H
#define SUNDIAL_RECORD_H

#include "_varint.h"

#if defined(__GNUC__) || defined(__clang__)
#define RECORD_INLINE static inline __attribute__((always_inline))
#define RECORD_COLD static __attribute__((noinline, cold))
#define RECORD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define RECORD_INLINE static inline
#define RECORD_COLD static
#define RECORD_UNLIKELY(x) (x)
#endif

typedef enum {
    RECORD_OK = 0,
    RECORD_MISSING,
    RECORD_VARINT,
    RECORD_BAD_LENGTH,
    RECORD_OVERRUN,
    RECORD_HEADER_COUNT,
    RECORD_HEADER_KEY,
    RECORD_SIZE,
    RECORD_TRAILING,
    RECORD_NEGATIVE_COUNT,
} record_status;

/* Indexed by record_status; RECORD_VARINT's message is the reader's. */
static const char *const record_messages[] = {
    [RECORD_OK] = "",
    [RECORD_MISSING] = "batch declares more records than its data holds",
    [RECORD_VARINT] = "",
    [RECORD_BAD_LENGTH] = "record length runs past the end of its batch",
    [RECORD_OVERRUN] = "invalid record size: the record's fields run past its declared length",
    [RECORD_HEADER_COUNT] = "record has a negative header count",
    [RECORD_HEADER_KEY] = "record has a header with a negative key size",
    [RECORD_SIZE] = "invalid record size: the record's fields do not fill its declared length",
    [RECORD_TRAILING] = "incorrect declared batch size: bytes remain after the declared records",
    [RECORD_NEGATIVE_COUNT] = "negative record count",
};

typedef enum { RECORD_DELTAS, RECORD_KEY_VALUE, RECORD_FULL } record_depth;

/* The smallest record RECORD_DELTAS accepts, in bytes (length, attributes, two deltas): a
   section of n bytes holds at most n / RECORD_MIN_BYTES records, which bounds what a walk
   allocates for a declared count. */
#define RECORD_MIN_BYTES 4

/* One v2 record: where its parts are (offsets into the buffer) and its deltas. Fields past the
   depth read are -1 (lengths) or 0; a record refused leaves them unset. */
typedef struct {
    Py_ssize_t attributes_at;    /* first byte of the body */
    Py_ssize_t offset_delta_at;  /* first byte after the timestamp delta */
    Py_ssize_t end;              /* one past the record */
    int64_t ts_delta;
    int64_t offset_delta;
    Py_ssize_t key_at;
    int64_t key_len;             /* < 0: null */
    int64_t value_len;           /* < 0: null (the value follows its length varint, after the key) */
} v2_record;                     /* 64 bytes: the cleaner keeps one per record of a batch */

RECORD_INLINE record_status
record_fail(reader *r, record_status status)
{
    r->error = record_messages[status];
    return status;
}

/* The bytes of a length-prefixed field (key, value, header key or value) whose length varint
   ended at *p: 0 and *p past them, or -1 when the varint or the bytes end past the record (one
   comparison for both: a null or empty field needs no bytes, and then fails only when *p is
   already past the end). */
RECORD_INLINE int
skip_field(Py_ssize_t *p, int64_t len, Py_ssize_t record_end)
{
    int64_t need = len > 0 ? len : 0;
    if (RECORD_UNLIKELY(need > (int64_t)(record_end - *p)))
        return -1;
    *p += (Py_ssize_t)need;
    return 0;
}

/* The checks of the module doc, one after the other: the first failure is the answer (r->error
   set). Only the status: it runs for records parse_record could not read. */
RECORD_COLD record_status
parse_record_checked(reader *r, Py_ssize_t pos, record_depth depth)
{
    int64_t length, ts_delta, offset_delta, key_len, value_len, header_count, h;
    Py_ssize_t p = pos, body, record_end;
    if (pos >= r->end)
        return record_fail(r, RECORD_MISSING);
    if (read_varint(r, &p, &length) < 0)
        return RECORD_VARINT;
    body = p;
    if (length < 0 || length > (int64_t)(r->end - body))
        return record_fail(r, RECORD_BAD_LENGTH);
    record_end = body + (Py_ssize_t)length;
    if (length < 1)
        return record_fail(r, RECORD_OVERRUN);
    p = body + 1;
    if (read_varlong(r, &p, &ts_delta) < 0)
        return RECORD_VARINT;
    if (p > record_end)
        return record_fail(r, RECORD_OVERRUN);
    if (read_varint(r, &p, &offset_delta) < 0)
        return RECORD_VARINT;
    if (p > record_end)
        return record_fail(r, RECORD_OVERRUN);
    if (depth == RECORD_DELTAS)
        return RECORD_OK;

    if (read_varint(r, &p, &key_len) < 0)
        return RECORD_VARINT;
    if (skip_field(&p, key_len, record_end) < 0)
        return record_fail(r, RECORD_OVERRUN);
    if (read_varint(r, &p, &value_len) < 0)
        return RECORD_VARINT;
    if (skip_field(&p, value_len, record_end) < 0)
        return record_fail(r, RECORD_OVERRUN);
    if (depth == RECORD_KEY_VALUE)
        return RECORD_OK;

    if (read_varint(r, &p, &header_count) < 0)
        return RECORD_VARINT;
    if (p > record_end)
        return record_fail(r, RECORD_OVERRUN);
    if (header_count < 0)
        return record_fail(r, RECORD_HEADER_COUNT);
    for (h = 0; h < header_count; h++) {
        int64_t hk_len, hv_len;
        if (read_varint(r, &p, &hk_len) < 0)
            return RECORD_VARINT;
        if (skip_field(&p, hk_len, record_end) < 0)
            return record_fail(r, RECORD_OVERRUN);
        if (hk_len < 0)
            return record_fail(r, RECORD_HEADER_KEY);
        if (read_varint(r, &p, &hv_len) < 0)
            return RECORD_VARINT;
        if (skip_field(&p, hv_len, record_end) < 0)
            return record_fail(r, RECORD_OVERRUN);
    }
    if (p != record_end)
        return record_fail(r, RECORD_SIZE);
    return RECORD_OK;
}

/* The record at pos, read to depth; RECORD_OK, or the status of the first failed check (module
   doc) with r->error set. The usual case runs the reads with the few checks that keep them inside
   the section and one bound check at the end: positions only grow, so a record whose fields end
   where they should (FULL), or not past its end (the other depths), has no field past its end
   before that either. Whatever fails there is read again by parse_record_checked, which applies
   the checks in their order, so the answer is the same either way. */
RECORD_INLINE record_status
parse_record(reader *r, Py_ssize_t pos, record_depth depth, v2_record *rec)
{
    int64_t length, ts_delta, offset_delta, key_len = -1, value_len = -1, header_count, h;
    record_status status;
    Py_ssize_t p = pos, end = r->end, body, record_end, offset_delta_at, key_at = 0;
    if (RECORD_UNLIKELY(pos >= end || read_varint(r, &p, &length) < 0 || length < 0
                        || length > (int64_t)(end - p)))
        goto checked;
    body = p;
    record_end = body + (Py_ssize_t)length;
    p = body + 1;
    if (RECORD_UNLIKELY(read_varlong(r, &p, &ts_delta) < 0))
        goto checked;
    offset_delta_at = p;
    if (RECORD_UNLIKELY(read_varint(r, &p, &offset_delta) < 0))
        goto checked;
    if (depth != RECORD_DELTAS) {
        if (RECORD_UNLIKELY(read_varint(r, &p, &key_len) < 0))
            goto checked;
        key_at = p;
        if (key_len > 0) {
            if (RECORD_UNLIKELY(key_len > (int64_t)(end - p)))
                goto checked;
            p += (Py_ssize_t)key_len;
        }
        if (RECORD_UNLIKELY(read_varint(r, &p, &value_len) < 0))
            goto checked;
        if (value_len > 0) {
            if (RECORD_UNLIKELY(value_len > (int64_t)(end - p)))
                goto checked;
            p += (Py_ssize_t)value_len;
        }
    }
    if (depth == RECORD_FULL) {
        if (RECORD_UNLIKELY(read_varint(r, &p, &header_count) < 0 || header_count < 0))
            goto checked;
        for (h = 0; h < header_count; h++) {
            int64_t hk_len, hv_len;
            if (RECORD_UNLIKELY(read_varint(r, &p, &hk_len) < 0 || hk_len < 0 || hk_len > (int64_t)(end - p)))
                goto checked;
            p += (Py_ssize_t)hk_len;
            if (RECORD_UNLIKELY(read_varint(r, &p, &hv_len) < 0))
                goto checked;
            if (hv_len > 0) {
                if (RECORD_UNLIKELY(hv_len > (int64_t)(end - p)))
                    goto checked;
                p += (Py_ssize_t)hv_len;
            }
        }
        if (RECORD_UNLIKELY(p != record_end))
            goto checked;
    } else if (RECORD_UNLIKELY(p > record_end)) {
        goto checked;
    }
    rec->attributes_at = body;
    rec->offset_delta_at = offset_delta_at;
    rec->end = record_end;
    rec->ts_delta = ts_delta;
    rec->offset_delta = offset_delta;
    rec->key_at = key_at;
    rec->key_len = key_len;
    rec->value_len = value_len;
    return RECORD_OK;
checked:
    r->error = NULL;
    status = parse_record_checked(r, pos, depth);
    if (status == RECORD_OK)       /* unreachable: both read the same fields at the same places */
        status = record_fail(r, RECORD_SIZE);
    return status;
}

/* Opens a walk over `count` records of obj's [pos, end): refuses a negative count, takes the
   buffer (released by the caller) and readies r. 0, or -1 with ValueError set. */
RECORD_INLINE int
open_walk(PyObject *obj, Py_buffer *view, reader *r, Py_ssize_t pos, Py_ssize_t end, long long count)
{
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, record_messages[RECORD_NEGATIVE_COUNT]);
        return -1;
    }
    if (get_record_region(obj, view, pos, end) < 0)
        return -1;
    r->p = (const unsigned char *)view->buf;
    r->end = end;
    r->error = NULL;
    return 0;
}

#endif /* SUNDIAL_RECORD_H */
