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
 * a field that ends past the record's declared end is then an overrun. On failure r->error holds
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
#else
#define RECORD_INLINE static inline
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
   depth read are left unset. */
typedef struct {
    Py_ssize_t attributes_at;    /* first byte of the body */
    Py_ssize_t offset_delta_at;  /* first byte after the timestamp delta */
    Py_ssize_t end;              /* one past the record */
    int64_t ts_delta;
    int64_t offset_delta;
    Py_ssize_t key_at;
    int64_t key_len;             /* < 0: null */
    Py_ssize_t value_at;
    int64_t value_len;           /* < 0: null */
    int64_t header_count;
} v2_record;

RECORD_INLINE record_status
record_fail(reader *r, record_status status)
{
    r->error = record_messages[status];
    return status;
}

/* A length-prefixed field (key, value, header key or value) of len bytes at *p, inside the record. */
RECORD_INLINE int
skip_bytes(Py_ssize_t *p, int64_t len, Py_ssize_t record_end)
{
    if (len > 0) {
        if (len > (int64_t)(record_end - *p))
            return -1;
        *p += (Py_ssize_t)len;
    }
    return 0;
}

RECORD_INLINE record_status
parse_record(reader *r, Py_ssize_t pos, record_depth depth, v2_record *rec)
{
    int64_t length, h;
    Py_ssize_t p = pos, body, record_end;
    if (pos >= r->end)
        return record_fail(r, RECORD_MISSING);
    if (read_varint(r, &p, &length) < 0)
        return RECORD_VARINT;
    body = p;
    if (length < 0 || length > (int64_t)(r->end - body))
        return record_fail(r, RECORD_BAD_LENGTH);
    record_end = body + (Py_ssize_t)length;
    rec->end = record_end;
    rec->attributes_at = body;
    if (length < 1)
        return record_fail(r, RECORD_OVERRUN);
    p = body + 1;
    if (read_varlong(r, &p, &rec->ts_delta) < 0)
        return RECORD_VARINT;
    if (p > record_end)
        return record_fail(r, RECORD_OVERRUN);
    rec->offset_delta_at = p;
    if (read_varint(r, &p, &rec->offset_delta) < 0)
        return RECORD_VARINT;
    if (p > record_end)
        return record_fail(r, RECORD_OVERRUN);
    if (depth == RECORD_DELTAS)
        return RECORD_OK;

    if (read_varint(r, &p, &rec->key_len) < 0)
        return RECORD_VARINT;
    rec->key_at = p;
    if (p > record_end || skip_bytes(&p, rec->key_len, record_end) < 0)
        return record_fail(r, RECORD_OVERRUN);
    if (read_varint(r, &p, &rec->value_len) < 0)
        return RECORD_VARINT;
    rec->value_at = p;
    if (p > record_end || skip_bytes(&p, rec->value_len, record_end) < 0)
        return record_fail(r, RECORD_OVERRUN);
    if (depth == RECORD_KEY_VALUE)
        return RECORD_OK;

    if (read_varint(r, &p, &rec->header_count) < 0)
        return RECORD_VARINT;
    if (p > record_end)
        return record_fail(r, RECORD_OVERRUN);
    if (rec->header_count < 0)
        return record_fail(r, RECORD_HEADER_COUNT);
    for (h = 0; h < rec->header_count; h++) {
        int64_t hk_len, hv_len;
        if (read_varint(r, &p, &hk_len) < 0)
            return RECORD_VARINT;
        if (p > record_end)
            return record_fail(r, RECORD_OVERRUN);
        if (hk_len < 0)
            return record_fail(r, RECORD_HEADER_KEY);
        if (skip_bytes(&p, hk_len, record_end) < 0)
            return record_fail(r, RECORD_OVERRUN);
        if (read_varint(r, &p, &hv_len) < 0)
            return RECORD_VARINT;
        if (p > record_end || skip_bytes(&p, hv_len, record_end) < 0)
            return record_fail(r, RECORD_OVERRUN);
    }
    if (p != record_end)
        return record_fail(r, RECORD_SIZE);
    return RECORD_OK;
}

#endif /* SUNDIAL_RECORD_H */
