/*
 * .npz reader (format and refusals: npz.h): a zip central-directory walker with every
 * offset bounds-checked, zip64 support, and zlib for deflated members.
 */
#include "harness/io/npz.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "harness/core/text.h"
#include "harness/io/npy.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define EOCD_LEN 22u
#define CENTRAL_LEN 46u
#define LOCAL_LEN 30u
#define LOCATOR64_LEN 20u
#define EOCD64_LEN 56u
/* deflate cannot expand data by more than about 1032:1 */
#define MAX_DEFLATE_RATIO 1032u

typedef struct {
    const unsigned char *b;
    size_t len;
    const char *path;
    ck_error *err;
} zip;

typedef struct {
    char *name; /* NUL-terminated copy */
    uint16_t flags, method;
    uint32_t crc;
    uint64_t csize, usize, local;
} member;

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* [off, off + n) lies within [0, limit). */
static bool within(uint64_t off, uint64_t n, uint64_t limit)
{
    return off <= limit && n <= limit - off;
}

/* ---------------------------------------------------------------------------------- */
/* Directory                                                                           */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    uint64_t entries, cd_size, cd_off, cd_limit; /* the directory must end by cd_limit */
} directory;

static ck_status find_directory(const zip *z, directory *d)
{
    if (z->len < EOCD_LEN)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: %zu bytes, too short for a zip archive", z->path,
                       z->len);
    /* The record is 22 bytes plus a comment of at most 65535; it must end the file. */
    size_t pos = SIZE_MAX;
    size_t lowest = z->len - EOCD_LEN > 65535 ? z->len - EOCD_LEN - 65535 : 0;
    for (size_t p = z->len - EOCD_LEN + 1; p-- > lowest;) {
        if (rd32(z->b + p) == SIG_EOCD && p + EOCD_LEN + rd16(z->b + p + 20) == z->len) {
            pos = p;
            break;
        }
    }
    if (pos == SIZE_MAX)
        return ck_fail(z->err, CK_ERR_INPUT,
                       "%s: not a zip archive (no end-of-central-directory record at its end)",
                       z->path);
    const unsigned char *e = z->b + pos;
    uint16_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_disk = rd16(e + 8),
             n_total = rd16(e + 10);
    uint32_t cd_size = rd32(e + 12), cd_off = rd32(e + 16);
    if (disk != 0 || cd_disk != 0 || n_disk != n_total)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: multi-disk zip archives are not supported",
                       z->path);
    d->entries = n_total;
    d->cd_size = cd_size;
    d->cd_off = cd_off;
    d->cd_limit = pos;
    if (n_total != 0xffff && cd_size != 0xffffffffu && cd_off != 0xffffffffu)
        return CK_OK;

    /* zip64: a locator right before the record points at the zip64 record. */
    if (pos < LOCATOR64_LEN || rd32(z->b + pos - LOCATOR64_LEN) != SIG_LOCATOR64)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: zip64 fields without a zip64 locator", z->path);
    const unsigned char *l = z->b + pos - LOCATOR64_LEN;
    uint64_t rec = rd64(l + 8);
    if (rd32(l + 4) != 0 || rd32(l + 16) != 1)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: multi-disk zip archives are not supported",
                       z->path);
    if (!within(rec, EOCD64_LEN, pos - LOCATOR64_LEN) || rd32(z->b + rec) != SIG_EOCD64)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: zip64 locator points outside the archive",
                       z->path);
    const unsigned char *r = z->b + rec;
    if (rd32(r + 16) != 0 || rd32(r + 20) != 0 || rd64(r + 24) != rd64(r + 32))
        return ck_fail(z->err, CK_ERR_INPUT, "%s: multi-disk zip archives are not supported",
                       z->path);
    d->entries = rd64(r + 32);
    d->cd_size = rd64(r + 40);
    d->cd_off = rd64(r + 48);
    d->cd_limit = rec;
    return CK_OK;
}

/* Reads the zip64 extra field (id 1) for the fields whose 32-bit value is saturated. */
static ck_status read_zip64_extra(const zip *z, const unsigned char *x, size_t xlen, member *m,
                                  bool need_u, bool need_c, bool need_o, const char *name)
{
    size_t i = 0;
    while (i + 4 <= xlen) {
        uint16_t id = rd16(x + i), sz = rd16(x + i + 2);
        if (sz > xlen - i - 4)
            break;
        if (id == 1) {
            const unsigned char *f = x + i + 4;
            size_t need = 8u * ((size_t)need_u + need_c + need_o);
            if (sz < need)
                break;
            if (need_u)
                m->usize = rd64(f), f += 8;
            if (need_c)
                m->csize = rd64(f), f += 8;
            if (need_o)
                m->local = rd64(f);
            return CK_OK;
        }
        i += 4u + sz;
    }
    return ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s: missing or short zip64 extra field",
                   z->path, name);
}

static ck_status read_directory(const zip *z, const directory *d, member **out, int *n_out)
{
    ck_status st = CK_OK;
    if (!within(d->cd_off, d->cd_size, d->cd_limit))
        return ck_fail(z->err, CK_ERR_INPUT,
                       "%s: central directory [%" PRIu64 ", +%" PRIu64 ") lies outside the archive",
                       z->path, d->cd_off, d->cd_size);
    /* Every record is at least 46 bytes, which bounds the count before allocating. */
    if (d->entries > d->cd_size / CENTRAL_LEN || d->entries > INT_MAX / 2)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: %" PRIu64 " entries cannot fit in a %" PRIu64
                       "-byte central directory", z->path, d->entries, d->cd_size);
    member *ms = calloc((size_t)d->entries + 1, sizeof *ms);
    if (!ms)
        return ck_fail(z->err, CK_ERR_NOMEM, "%s: out of memory", z->path);
    int n = 0;
    uint64_t p = d->cd_off, end = d->cd_off + d->cd_size;
    for (uint64_t k = 0; k < d->entries; k++) {
        if (!within(p, CENTRAL_LEN, end) || rd32(z->b + p) != SIG_CENTRAL) {
            st = ck_fail(z->err, CK_ERR_INPUT,
                         "%s: central directory entry %" PRIu64 " is malformed", z->path, k);
            goto fail;
        }
        const unsigned char *c = z->b + p;
        uint16_t nl = rd16(c + 28), xl = rd16(c + 30), cl = rd16(c + 32);
        uint64_t rec_len = CENTRAL_LEN + (uint64_t)nl + xl + cl;
        if (!within(p, rec_len, end)) {
            st = ck_fail(z->err, CK_ERR_INPUT, "%s: central directory entry %" PRIu64
                         " runs past the directory", z->path, k);
            goto fail;
        }
        member *m = &ms[n];
        const char *nm = (const char *)c + CENTRAL_LEN;
        if (nl == 0 || memchr(nm, '\0', nl) || !ck_utf8_valid(nm, nl)) {
            st = ck_fail(z->err, CK_ERR_INPUT,
                         "%s: entry %" PRIu64 ": empty or invalid member name", z->path, k);
            goto fail;
        }
        if (!(m->name = strndup(nm, nl))) {
            st = ck_fail(z->err, CK_ERR_NOMEM, "%s: out of memory", z->path);
            goto fail;
        }
        n++;
        m->flags = rd16(c + 8);
        m->method = rd16(c + 10);
        m->crc = rd32(c + 16);
        m->csize = rd32(c + 20);
        m->usize = rd32(c + 24);
        m->local = rd32(c + 42);
        bool nu = m->usize == 0xffffffffu, nc = m->csize == 0xffffffffu,
             no = m->local == 0xffffffffu;
        if ((nu || nc || no) &&
            (st = read_zip64_extra(z, c + CENTRAL_LEN + nl, xl, m, nu, nc, no, m->name)) != CK_OK)
            goto fail;
        p += rec_len;
    }
    if (p != end) {
        st =
            ck_fail(z->err, CK_ERR_INPUT,
                    "%s: %" PRIu64 " unexplained bytes in the central directory", z->path, end - p);
        goto fail;
    }
    *out = ms;
    *n_out = n;
    return CK_OK;
fail:
    for (int i = 0; i < n; i++)
        free(ms[i].name);
    free(ms);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Members                                                                             */
/* ---------------------------------------------------------------------------------- */

static ck_status inflate_member(const zip *z, const member *m, const unsigned char *src,
                                unsigned char *dst)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        return ck_fail(z->err, CK_ERR_NOMEM, "%s: member %.200s: cannot start zlib", z->path,
                       m->name);
    uint64_t in_left = m->csize, out_left = m->usize;
    unsigned char probe;
    ck_status st = CK_OK;
    for (;;) {
        if (zs.avail_in == 0 && in_left) {
            uInt chunk = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
            zs.next_in = (Bytef *)src;
            zs.avail_in = chunk;
            src += chunk;
            in_left -= chunk;
        }
        if (zs.avail_out == 0) {
            if (out_left) {
                uInt chunk = out_left > UINT_MAX ? UINT_MAX : (uInt)out_left;
                zs.next_out = dst;
                zs.avail_out = chunk;
                dst += chunk;
                out_left -= chunk;
            } else {
                zs.next_out = &probe; /* room for one byte too many: detects overlong data */
                zs.avail_out = 1;
            }
        }
        int ret = inflate(&zs, Z_NO_FLUSH);
        if (zs.total_out > m->usize) {
            st = ck_fail(z->err, CK_ERR_INPUT,
                         "%s: member %.200s: inflates to more than its declared %" PRIu64 " bytes",
                         z->path, m->name, m->usize);
            break;
        }
        if (ret == Z_STREAM_END)
            break;
        if (ret == Z_OK)
            continue;
        if (ret == Z_BUF_ERROR && zs.avail_in == 0 && in_left == 0)
            st = ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s: deflate stream is truncated",
                         z->path, m->name);
        else
            st = ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s: corrupt deflate stream (%s)",
                         z->path, m->name, zs.msg ? zs.msg : "zlib error");
        break;
    }
    if (st == CK_OK && zs.total_out != m->usize)
        st = ck_fail(z->err, CK_ERR_INPUT,
                     "%s: member %.200s: inflates to %lu bytes, %" PRIu64 " declared", z->path,
                     m->name, (unsigned long)zs.total_out, m->usize);
    if (st == CK_OK && (zs.avail_in || in_left))
        st = ck_fail(z->err, CK_ERR_INPUT,
                     "%s: member %.200s: bytes after the end of the deflate stream", z->path,
                     m->name);
    inflateEnd(&zs);
    return st;
}

static uint32_t crc_of(const unsigned char *p, uint64_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n) {
        uInt chunk = n > UINT_MAX ? UINT_MAX : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

static ck_status load_member(const zip *z, const member *m, uint64_t data_limit,
                             ck_tensorset *set)
{
    ck_status st;
    if (m->flags & 1)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s is encrypted", z->path, m->name);
    if (m->method != 0 && m->method != 8)
        return ck_fail(
            z->err, CK_ERR_INPUT,
            "%s: member %.200s: compression method %u is not supported (stored or deflate)",
            z->path, m->name, m->method);
    size_t nl = strlen(m->name);
    if (nl <= 4 || strcmp(m->name + nl - 4, ".npy") != 0)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s is not a .npy file", z->path,
                       m->name);

    /* The local header: only its name and extra lengths are used, to find the data. */
    if (!within(m->local, LOCAL_LEN, data_limit) || rd32(z->b + m->local) != SIG_LOCAL)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s: bad local header offset %" PRIu64,
                       z->path, m->name, m->local);
    const unsigned char *lh = z->b + m->local;
    uint16_t lnl = rd16(lh + 26), lxl = rd16(lh + 28);
    uint64_t data = m->local + LOCAL_LEN + lnl + lxl;
    if (lnl != nl || !within(m->local + LOCAL_LEN, lnl, data_limit) ||
        memcmp(lh + LOCAL_LEN, m->name, nl) != 0)
        return ck_fail(z->err, CK_ERR_INPUT,
                       "%s: member %.200s: local header names a different file", z->path, m->name);
    if (!within(data, m->csize, data_limit))
        return ck_fail(z->err, CK_ERR_INPUT,
                       "%s: member %.200s: %" PRIu64 " bytes at offset %" PRIu64
                       " run past the archive's data",
                       z->path, m->name, m->csize, data);

    /* Sizes are checked before anything is allocated or inflated. */
    if (m->method == 0 && m->csize != m->usize)
        return ck_fail(z->err, CK_ERR_INPUT,
                       "%s: member %.200s: stored with %" PRIu64 " bytes but declares %" PRIu64,
                       z->path, m->name, m->csize, m->usize);
    if (m->method == 8 && m->usize / MAX_DEFLATE_RATIO > m->csize + 1)
        return ck_fail(z->err, CK_ERR_INPUT,
                       "%s: member %.200s: declares %" PRIu64 " bytes from %" PRIu64
                       " compressed, more than deflate can produce",
                       z->path, m->name, m->usize, m->csize);
    if (m->usize > SIZE_MAX - 1)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s: too large", z->path, m->name);

    const unsigned char *bytes = z->b + data;
    if (m->method == 8) {
        unsigned char *buf = malloc(m->usize ? (size_t)m->usize : 1);
        if (!buf)
            return ck_fail(z->err, CK_ERR_NOMEM,
                           "%s: member %.200s: out of memory (%" PRIu64 " bytes)", z->path, m->name,
                           m->usize);
        if ((st = inflate_member(z, m, bytes, buf)) != CK_OK) {
            free(buf);
            return st;
        }
        if ((st = ck_tensorset_keep(set, buf, (size_t)m->usize, false, z->err)) != CK_OK)
            return st;
        bytes = buf;
    }
    if (crc_of(bytes, m->usize) != m->crc)
        return ck_fail(z->err, CK_ERR_INPUT, "%s: member %.200s: CRC-32 mismatch", z->path,
                       m->name);

    size_t plen = strlen(z->path) + nl + 3;
    char *where = malloc(plen);
    char *stem = strndup(m->name, nl - 4);
    if (!where || !stem) {
        free(where);
        free(stem);
        return ck_fail(z->err, CK_ERR_NOMEM, "%s: out of memory", z->path);
    }
    snprintf(where, plen, "%s[%s]", z->path, m->name);
    st = ck_npy_parse_into(bytes, (size_t)m->usize, where, stem, set, z->err);
    free(where);
    free(stem);
    return st;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const member *)a)->name, ((const member *)b)->name);
}

static ck_status npz_parse_impl(const void *buf, size_t len, const char *path, ck_tensorset *out,
                       ck_error *err)
{
    zip z = {buf, len, path, err};
    directory d = {0, 0, 0, 0};
    member *ms = NULL, *sorted = NULL;
    int n = 0;
    ck_tensorset_init(out);
    ck_status st = find_directory(&z, &d);
    if (st == CK_OK)
        st = read_directory(&z, &d, &ms, &n);
    if (st != CK_OK)
        return st;
    if (n == 0) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: the archive holds no members", path);
        goto cleanup;
    }
    /* Duplicates would make a name mean two tensors. */
    sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    memcpy(sorted, ms, (size_t)n * sizeof *ms);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_name);
    for (int i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) {
            st =
                ck_fail(err, CK_ERR_INPUT, "%s: member %.200s appears twice", path, sorted[i].name);
            goto cleanup;
        }
    }
    for (int i = 0; i < n && st == CK_OK; i++)
        st = load_member(&z, &ms[i], d.cd_off, out);
cleanup:
    free(sorted);
    for (int i = 0; i < n; i++)
        free(ms[i].name);
    free(ms);
    if (st != CK_OK)
        ck_tensorset_free(out);
    return st;
}

/* The one-line guarantee for every message of npz_parse. */
ck_status ck_npz_parse(const void *buf, size_t len, const char *path, ck_tensorset *out,
                       ck_error *err)
{
    return ck_error_one_line(err, npz_parse_impl(buf, len, path, out, err));
}

ck_status ck_npz_load(const char *path, ck_tensorset *out, ck_error *err)
{
    return ck_tensorset_load_mapped(path, ck_npz_parse, out, err);
}
