/*
 * records._lz4: an LZ4 frame decoder that writes straight into the caller's buffer.
 *
 * records/codecs.py uses it for the record data of lz4 batches when the module is built
 * (else cramjam's decoder, which inflates into a buffer of its own and copies the result
 * out: for a 1 MB batch that copy is a second pass over the output). Both must agree on
 * every valid frame (tests/unit/storage/test_lz4_decoder.py checks it with Hypothesis).
 *
 * decode_frames(src, dst) -> int
 *     Decodes the LZ4 frames of `src` one after another into `dst` (a writable
 *     contiguous buffer) and returns the number of bytes written. ValueError when the
 *     data is not valid LZ4 frames or would need more than len(dst) bytes. Nothing is
 *     allocated; the GIL is released while decoding.
 *
 * LZ4 frame format (lz4 spec, "LZ4 Frame Format Description" 1.6.x), little endian:
 *   magic 0x184D2204 | FLG | BD | [content size u64] | [dict id u32] | HC
 *   then blocks: size u32 (0 ends the blocks; high bit set = stored uncompressed),
 *   the block's bytes, [block checksum u32 = xxh32(block bytes)] when FLG bit 4;
 *   then [content checksum u32 = xxh32(content)] when FLG bit 2.
 *   FLG: version (bits 7-6) = 01, bit 5 independent blocks, bit 4 block checksums,
 *   bit 3 content size, bit 2 content checksum, bit 1 reserved (0), bit 0 dict id.
 *   BD: bits 6-4 block maximum size (4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB), the
 *   other bits reserved (0). HC = (xxh32(FLG..last optional field) >> 8) & 0xFF.
 *   Skippable frames (magic 0x184D2A50..5F, then size u32, then that many bytes) are
 *   skipped. After at least one frame, bytes that are all zero end the data (padding).
 *   Frames with a dictionary id are refused (Kafka never writes them).
 *   Callers that must accept Kafka's pre-KIP-57 header checksum (magic 0 batches, which
 *   hashed the magic too) fix the HC byte before calling, as codecs.py does.
 *
 * LZ4 block: sequences of token (literal length << 4 | match length - 4), extra
 *   literal-length bytes while 255, literals, offset u16 (1..65535, back from the
 *   current output position), extra match-length bytes while 255. The last sequence
 *   has literals only. A match may reach back into earlier blocks of the same frame
 *   unless the blocks are independent; never before the start of its frame.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_MAGIC 0x184D2204u
#define SKIPPABLE_MASK 0xFFFFFFF0u
#define SKIPPABLE_MAGIC 0x184D2A50u

/* ------------------------------------------------------------------ xxh32 */

#define P1 2654435761u
#define P2 2246822519u
#define P3 3266489917u
#define P4 668265263u
#define P5 374761393u

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint32_t xxh32(const unsigned char *p, size_t n, uint32_t seed)
{
    const unsigned char *end = p + n;
    uint32_t h;
    if (n >= 16) {
        uint32_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const unsigned char *limit = end - 16;
        do {
            v1 = rotl32(v1 + le32(p) * P2, 13) * P1; p += 4;
            v2 = rotl32(v2 + le32(p) * P2, 13) * P1; p += 4;
            v3 = rotl32(v3 + le32(p) * P2, 13) * P1; p += 4;
            v4 = rotl32(v4 + le32(p) * P2, 13) * P1; p += 4;
        } while (p <= limit);
        h = rotl32(v1, 1) + rotl32(v2, 7) + rotl32(v3, 12) + rotl32(v4, 18);
    } else {
        h = seed + P5;
    }
    h += (uint32_t)n;
    while (p + 4 <= end) {
        h = rotl32(h + le32(p) * P3, 17) * P4;
        p += 4;
    }
    while (p < end) {
        h = rotl32(h + (*p) * P5, 11) * P1;
        p++;
    }
    h ^= h >> 15; h *= P2; h ^= h >> 13; h *= P3; h ^= h >> 16;
    return h;
}

/* ------------------------------------------------------------------ block */

static inline void copy16(unsigned char *dst, const unsigned char *src)
{
    memcpy(dst, src, 16);   /* a fixed size: one unaligned vector load and store */
}

/* A length field's extra bytes: each adds its value, 255 means another follows.
 * 0, or -1 when the block ends first. */
static inline int add_length_bytes(const unsigned char **ip, const unsigned char *iend, size_t *len)
{
    unsigned b;
    do {
        if (*ip >= iend)
            return -1;
        b = *(*ip)++;
        *len += b;
    } while (b == 255);
    return 0;
}

/* Decode one block src[0..n) to out[0..cap); matches may start at `low` or later
 * (low <= out). Returns the bytes written, or -1 with *err set.
 *
 * Fast path (most sequences of real data): literal length < 15 with at least 18 input
 * bytes and 32 output bytes left, then match length < 15 with an offset of 8 or more
 * and 18 output bytes left: fixed-size copies (16 literal bytes, 8 + 8 + 2 match bytes)
 * that may write a few bytes past the sequence, inside the output, where the next
 * sequence writes. Everything else takes the checked path. */
static Py_ssize_t decode_block(const unsigned char *src, size_t n, unsigned char *out, size_t cap,
                               const unsigned char *low, const char **err)
{
    const unsigned char *ip = src, *iend = src + n;
    unsigned char *op = out, *oend = out + cap;
    for (;;) {
        if (ip >= iend) {
            *err = "lz4 block ends inside a sequence";
            return -1;
        }
        unsigned token = *ip++;
        size_t lit = token >> 4, len = token & 15, offset;
        if (lit < 15 && iend - ip >= 18 && oend - op >= 32) {
            copy16(op, ip);
            op += lit;
            ip += lit;                          /* at least 4 input bytes are left */
            offset = (size_t)ip[0] | ((size_t)ip[1] << 8);
            ip += 2;
            if (len < 15 && offset >= 8 && offset <= (size_t)(op - low) && oend - op >= 18) {
                const unsigned char *match = op - offset;
                memcpy(op, match, 8);
                memcpy(op + 8, match + 8, 8);
                memcpy(op + 16, match + 16, 2);
                op += len + 4;
                continue;
            }
        } else {
            if (lit == 15 && add_length_bytes(&ip, iend, &lit) < 0) {
                *err = "lz4 literal length is truncated";
                return -1;
            }
            if (lit > (size_t)(iend - ip)) {
                *err = "lz4 literals overrun the block";
                return -1;
            }
            if (lit > (size_t)(oend - op)) {
                *err = "lz4 block inflates beyond its maximum size";
                return -1;
            }
            if (lit <= 32 && iend - ip >= 32 && oend - op >= 32) {
                copy16(op, ip);
                copy16(op + 16, ip + 16);
            } else {
                memcpy(op, ip, lit);
            }
            op += lit;
            ip += lit;
            if (ip == iend)
                break;                           /* the last sequence: literals only */
            if (iend - ip < 2) {
                *err = "lz4 match offset is truncated";
                return -1;
            }
            offset = (size_t)ip[0] | ((size_t)ip[1] << 8);
            ip += 2;
        }
        if (offset == 0 || offset > (size_t)(op - low)) {
            *err = "lz4 match offset points before the data";
            return -1;
        }
        if (len == 15 && add_length_bytes(&ip, iend, &len) < 0) {
            *err = "lz4 match length is truncated";
            return -1;
        }
        len += 4;
        if (len > (size_t)(oend - op)) {
            *err = "lz4 block inflates beyond its maximum size";
            return -1;
        }
        const unsigned char *match = op - offset;
        if (offset >= 16 && (size_t)(oend - op) >= len + 16) {
            /* 16-byte steps, possibly writing up to 15 bytes past the match (still inside
             * the output, and overwritten by what follows): each step reads bytes at least
             * 16 back, all written already. */
            for (size_t k = 0; k < len; k += 16)
                copy16(op + k, match + k);
            op += len;
        } else if (offset >= 8 && (size_t)(oend - op) >= len + 8) {
            for (size_t k = 0; k < len; k += 8)   /* the same with 8-byte steps */
                memcpy(op + k, match + k, 8);
            op += len;
        } else if (offset < len && len <= 32) {
            for (size_t k = 0; k < len; k++)      /* a short run of a short pattern */
                op[k] = match[k];
            op += len;
        } else if (offset >= len) {
            memcpy(op, match, len);
            op += len;
        } else {
            /* Overlapping: the pattern of `offset` bytes repeats. Each step copies bytes
             * already written, and the distance doubles, so the steps stay few. */
            size_t step = offset;
            while (len > 0) {
                size_t k = len < step ? len : step;
                memcpy(op, match, k);
                op += k;
                len -= k;
                step = (size_t)(op - match);
            }
        }
    }
    return op - out;
}

/* ------------------------------------------------------------------ frames */

static const size_t block_max_bytes[8] = {0, 0, 0, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20};

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Returns bytes written to dst, or -1 with *err set. */
static Py_ssize_t decode_frames_impl(const unsigned char *src, size_t n, unsigned char *dst, size_t cap,
                                     const char **err)
{
    size_t pos = 0, out = 0;
    int frames = 0;
    while (pos < n) {
        if (frames && all_zero(src + pos, n - pos))
            break;                               /* zero padding after the frames */
        if (n - pos < 4) {
            *err = "lz4 frame is truncated";
            return -1;
        }
        uint32_t magic = le32(src + pos);
        if ((magic & SKIPPABLE_MASK) == SKIPPABLE_MAGIC) {
            if (n - pos < 8) {
                *err = "lz4 skippable frame is truncated";
                return -1;
            }
            size_t size = le32(src + pos + 4);
            if (size > n - pos - 8) {
                *err = "lz4 skippable frame is truncated";
                return -1;
            }
            pos += 8 + size;
            continue;
        }
        if (magic != FRAME_MAGIC) {
            *err = "not an lz4 frame";
            return -1;
        }
        if (n - pos < 7) {
            *err = "lz4 frame header is truncated";
            return -1;
        }
        unsigned flg = src[pos + 4], bd = src[pos + 5];
        if ((flg >> 6) != 1 || (flg & 0x02) || (bd & 0x8F) || block_max_bytes[(bd >> 4) & 7] == 0) {
            *err = "lz4 frame header is invalid";
            return -1;
        }
        if (flg & 0x01) {
            *err = "lz4 frames with a dictionary are not supported";
            return -1;
        }
        size_t desc_len = 2 + ((flg & 0x08) ? 8 : 0);
        if (n - pos - 4 < desc_len + 1) {
            *err = "lz4 frame header is truncated";
            return -1;
        }
        if (((xxh32(src + pos + 4, desc_len, 0) >> 8) & 0xFF) != src[pos + 4 + desc_len]) {
            *err = "lz4 frame header checksum is wrong";
            return -1;
        }
        uint64_t content_size = 0;
        if (flg & 0x08)
            content_size = (uint64_t)le32(src + pos + 6) | ((uint64_t)le32(src + pos + 10) << 32);
        size_t block_max = block_max_bytes[(bd >> 4) & 7];
        int independent = (flg & 0x20) != 0, block_sums = (flg & 0x10) != 0;
        size_t frame_start = out;
        pos += 4 + desc_len + 1;
        for (;;) {
            if (n - pos < 4) {
                *err = "lz4 block header is truncated";
                return -1;
            }
            uint32_t word = le32(src + pos);
            pos += 4;
            if (word == 0)
                break;
            size_t size = word & 0x7FFFFFFFu;
            if (size > block_max) {
                *err = "lz4 block is larger than the frame's maximum";
                return -1;
            }
            if (size + (block_sums ? 4 : 0) > n - pos) {
                *err = "lz4 block is truncated";
                return -1;
            }
            if (block_sums && xxh32(src + pos, size, 0) != le32(src + pos + size)) {
                *err = "lz4 block checksum is wrong";
                return -1;
            }
            size_t room = cap - out < block_max ? cap - out : block_max;
            if (word & 0x80000000u) {
                if (size > cap - out) {
                    *err = "lz4 data inflates beyond the output buffer";
                    return -1;
                }
                memcpy(dst + out, src + pos, size);
                out += size;
            } else {
                const unsigned char *low = dst + (independent ? out : frame_start);
                Py_ssize_t got = decode_block(src + pos, size, dst + out, room, low, err);
                if (got < 0) {
                    if (room < block_max && strcmp(*err, "lz4 block inflates beyond its maximum size") == 0)
                        *err = "lz4 data inflates beyond the output buffer";
                    return -1;
                }
                out += (size_t)got;
            }
            pos += size + (block_sums ? 4 : 0);
        }
        if ((flg & 0x08) && content_size != (uint64_t)(out - frame_start)) {
            *err = "lz4 frame content size is wrong";
            return -1;
        }
        if (flg & 0x04) {
            if (n - pos < 4) {
                *err = "lz4 content checksum is truncated";
                return -1;
            }
            if (xxh32(dst + frame_start, out - frame_start, 0) != le32(src + pos)) {
                *err = "lz4 content checksum is wrong";
                return -1;
            }
            pos += 4;
        }
        frames++;
    }
    if (!frames) {
        *err = "no lz4 frame";
        return -1;
    }
    return (Py_ssize_t)out;
}

static PyObject *
decode_frames(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer src, dst;
    const char *err = NULL;
    Py_ssize_t got;
    if (!PyArg_ParseTuple(args, "y*w*", &src, &dst))
        return NULL;
    if (!PyBuffer_IsContiguous(&dst, 'C')) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError, "the output buffer must be contiguous");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    got = decode_frames_impl((const unsigned char *)src.buf, (size_t)src.len, (unsigned char *)dst.buf,
                             (size_t)dst.len, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (got < 0) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return PyLong_FromSsize_t(got);
}

static PyMethodDef methods[] = {
    {"decode_frames", decode_frames, METH_VARARGS, "Decode LZ4 frames into a writable buffer; bytes written."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_lz4",
    .m_doc = "LZ4 frame decoding into a caller's buffer (see records/codecs.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__lz4(void)
{
    return PyModule_Create(&module);
}
