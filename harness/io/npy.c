/*
 * .npy reader and writer (format and the reader's refusals: npy.h).
 *
 * The header dict is read by a small recursive-descent parser over exactly the grammar
 * numpy writes; nothing in it is evaluated. Sizes are overflow-checked before any data
 * is touched.
 */
#include "harness/io/npy.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/text.h"
#include "harness/io/files.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensor files are read into little-endian memory; this host is big-endian"
#endif

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ---------------------------------------------------------------------------------- */
/* Header dict                                                                         */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t n, i;
    const char *path;
    ck_error *err;
} hparser;

typedef struct {
    char descr[32];
    bool fortran;
    ck_shape shape;
    bool has_descr, has_fortran, has_shape;
} npy_header;

static ck_status hfail(hparser *p, const char *what)
{
    return ck_fail(p->err, CK_ERR_INPUT, "%s: header: %s at byte %zu", p->path, what, p->i);
}

static void skip_ws(hparser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static bool peek(hparser *p, char c)
{
    skip_ws(p);
    return p->i < p->n && p->s[p->i] == c;
}

static bool eat(hparser *p, char c)
{
    if (!peek(p, c))
        return false;
    p->i++;
    return true;
}

/* A quoted string without escapes (numpy never writes any), at most cap - 1 bytes. */
static ck_status parse_str(hparser *p, char *out, size_t cap)
{
    skip_ws(p);
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
        return hfail(p, "expected a quoted string");
    char q = p->s[p->i++];
    size_t k = 0;
    while (p->i < p->n && p->s[p->i] != q) {
        char c = p->s[p->i];
        if (c == '\\' || c == '\n' || c == '\0')
            return hfail(p, "unsupported character in a string");
        if (k + 1 >= cap)
            return hfail(p, "string too long");
        out[k++] = c;
        p->i++;
    }
    if (p->i >= p->n)
        return hfail(p, "unterminated string");
    p->i++;
    out[k] = '\0';
    return CK_OK;
}

static bool eat_word(hparser *p, const char *w)
{
    size_t n = strlen(w);
    skip_ws(p);
    if (p->n - p->i < n || memcmp(p->s + p->i, w, n) != 0)
        return false;
    p->i += n;
    return true;
}

static ck_status parse_shape(hparser *p, ck_shape *shape)
{
    memset(shape, 0, sizeof *shape);
    if (!eat(p, '('))
        return hfail(p, "shape must be a tuple");
    for (;;) {
        if (eat(p, ')'))
            return CK_OK;
        if (shape->ndim == CK_MAX_DIMS)
            return ck_fail(p->err, CK_ERR_INPUT,
                           "%s: header: shape has more than %d dimensions", p->path, CK_MAX_DIMS);
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return hfail(p, "shape must hold non-negative integers");
        int64_t v = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            if (__builtin_mul_overflow(v, 10, &v) ||
                __builtin_add_overflow(v, p->s[p->i] - '0', &v))
                return hfail(p, "shape dimension too large");
            p->i++;
        }
        if (p->i < p->n && p->s[p->i] == 'L')
            p->i++; /* Python 2 long */
        shape->dim[shape->ndim++] = v;
        /* "(3)" is not a tuple in Python; a single dimension needs its comma. */
        if (eat(p, ','))
            continue;
        if (shape->ndim == 1 || !peek(p, ')'))
            return hfail(p, "malformed shape tuple");
    }
}

static ck_status parse_header_dict(hparser *p, npy_header *h)
{
    ck_status st;
    memset(h, 0, sizeof *h);
    if (!eat(p, '{'))
        return hfail(p, "expected '{'");
    for (;;) {
        if (eat(p, '}'))
            break;
        char key[32];
        if ((st = parse_str(p, key, sizeof key)) != CK_OK)
            return st;
        if (!eat(p, ':'))
            return hfail(p, "expected ':'");
        if (strcmp(key, "descr") == 0) {
            if (h->has_descr)
                return hfail(p, "duplicate key 'descr'");
            if (peek(p, '[') || peek(p, '{'))
                return ck_fail(p->err, CK_ERR_INPUT,
                               "%s: header: descr: structured dtypes are not supported", p->path);
            if ((st = parse_str(p, h->descr, sizeof h->descr)) != CK_OK)
                return st;
            h->has_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->has_fortran)
                return hfail(p, "duplicate key 'fortran_order'");
            if (eat_word(p, "True"))
                h->fortran = true;
            else if (eat_word(p, "False"))
                h->fortran = false;
            else
                return hfail(p, "fortran_order must be True or False");
            h->has_fortran = true;
        } else if (strcmp(key, "shape") == 0) {
            if (h->has_shape)
                return hfail(p, "duplicate key 'shape'");
            if ((st = parse_shape(p, &h->shape)) != CK_OK)
                return st;
            h->has_shape = true;
        } else {
            return ck_fail(p->err, CK_ERR_INPUT, "%s: header: unknown key '%s'", p->path, key);
        }
        if (eat(p, ','))
            continue;
        if (!eat(p, '}'))
            return hfail(p, "expected ',' or '}'");
        break;
    }
    skip_ws(p);
    if (p->i != p->n)
        return hfail(p, "unexpected text after the dict");
    if (!h->has_descr || !h->has_fortran || !h->has_shape)
        return ck_fail(p->err, CK_ERR_INPUT, "%s: header: missing '%s'", p->path,
                       !h->has_descr ? "descr" : !h->has_fortran ? "fortran_order" : "shape");
    return CK_OK;
}

/* Decodes a descr: sets dtype and whether the data must be byte-swapped. */
static ck_status parse_descr(const char *descr, const char *path, ck_file_dtype *dt, bool *swap,
                             ck_error *err)
{
    static const struct {
        const char *code;
        ck_file_dtype dt;
    } codes[] = {
        {"f8", CK_FT_F64}, {"f4", CK_FT_F32}, {"f2", CK_FT_F16}, {"i8", CK_FT_I64},
        {"i4", CK_FT_I32}, {"i2", CK_FT_I16}, {"i1", CK_FT_I8},  {"u8", CK_FT_U64},
        {"u4", CK_FT_U32}, {"u2", CK_FT_U16}, {"u1", CK_FT_U8},  {"b1", CK_FT_BOOL},
    };
    char order = descr[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        order = '\0';
    const char *code = order ? descr + 1 : descr;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        if (strcmp(code, codes[i].code) != 0)
            continue;
        *dt = codes[i].dt;
        size_t es = ck_file_dtype_size(*dt);
        if (order == '|' && es > 1)
            break; /* '|' (no byte order) is only for single bytes */
        *swap = order == '>' && es > 1;
        return CK_OK;
    }
    const char *why = "unknown dtype";
    if (code[0] == 'O')
        why = "object arrays (pickled data) are refused";
    else if (code[0] == 'V')
        why = "void dtypes are not supported (a bfloat16 array saved by ml_dtypes is one: "
              "use safetensors for bf16)";
    else if (code[0] == 'U' || code[0] == 'S' || code[0] == 'a')
        why = "string dtypes are not supported";
    else if (code[0] == 'c')
        why = "complex dtypes are not supported";
    else if (code[0] == 'M' || code[0] == 'm')
        why = "datetime dtypes are not supported";
    else if (code[0] == 'f' || code[0] == 'i' || code[0] == 'u' || code[0] == 'b')
        why = "unsupported width";
    return ck_fail(err, CK_ERR_INPUT, "%s: header: descr '%s': %s", path, descr, why);
}

/* ---------------------------------------------------------------------------------- */
/* Reader                                                                              */
/* ---------------------------------------------------------------------------------- */

/* dst[c-order i] = src[fortran-order i], swapping bytes if asked. */
static void to_c_order(unsigned char *dst, const unsigned char *src, const ck_shape *s,
                       size_t es, int64_t numel, bool fortran, bool swap)
{
    int64_t idx[CK_MAX_DIMS] = {0};
    int64_t fstride[CK_MAX_DIMS];
    int64_t st = 1;
    for (int d = 0; d < s->ndim; d++) {
        fstride[d] = st;
        st *= s->dim[d];
    }
    int64_t off = 0; /* source element offset of idx */
    for (int64_t i = 0; i < numel; i++) {
        const unsigned char *from = src + (size_t)(fortran ? off : i) * es;
        unsigned char *to = dst + (size_t)i * es;
        for (size_t b = 0; b < es; b++)
            to[b] = from[swap ? es - 1 - b : b];
        if (!fortran)
            continue;
        /* Advance the C-order multi-index (last dimension fastest). */
        for (int d = s->ndim - 1; d >= 0; d--) {
            if (++idx[d] < s->dim[d]) {
                off += fstride[d];
                break;
            }
            off -= fstride[d] * (s->dim[d] - 1);
            idx[d] = 0;
        }
    }
}

static ck_status npy_parse_into_impl(const void *buf, size_t len, const char *path,
                                     const char *name, ck_tensorset *set, ck_error *err)
{
    const unsigned char *b = buf;
    ck_status st;
    if (len < 10 || memcmp(b, npy_magic, sizeof npy_magic) != 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    unsigned major = b[6], minor = b[7];
    size_t hl, off;
    if (major == 1 && minor == 0) {
        hl = (size_t)b[8] | (size_t)b[9] << 8;
        off = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12)
            return ck_fail(err, CK_ERR_INPUT, "%s: truncated header", path);
        hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        off = 12;
    } else {
        return ck_fail(err, CK_ERR_INPUT, "%s: .npy version %u.%u is not supported (1.0, 2.0, 3.0)",
                       path, major, minor);
    }
    if (hl > CK_NPY_MAX_HEADER)
        return ck_fail(err, CK_ERR_INPUT, "%s: header length %zu exceeds the limit of %u bytes",
                       path, hl, CK_NPY_MAX_HEADER);
    if (hl > len - off)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: header length %zu runs past the end of the file (%zu bytes)", path, hl,
                       len);
    const char *text = (const char *)b + off;
    if (major == 3 && !ck_utf8_valid(text, hl))
        return ck_fail(err, CK_ERR_INPUT, "%s: header: not valid UTF-8", path);

    hparser p = {text, hl, 0, path, err};
    npy_header h;
    if ((st = parse_header_dict(&p, &h)) != CK_OK)
        return st;
    ck_file_dtype dt = CK_FT_F32;
    bool swap = false;
    if ((st = parse_descr(h.descr, path, &dt, &swap, err)) != CK_OK)
        return st;
    int64_t numel;
    size_t nbytes;
    char sh[200];
    if (!ck_file_shape_size(&h.shape, dt, &numel, &nbytes))
        return ck_fail(err, CK_ERR_INPUT, "%s: header: shape %s of '%s' overflows", path,
                       ck_shape_str(&h.shape, sh, sizeof sh), h.descr);
    size_t have = len - off - hl;
    if (have != nbytes)
        return ck_fail(err, CK_ERR_INPUT, "%s: %zu bytes of data, but shape %s of '%s' needs %zu%s",
                       path, have, ck_shape_str(&h.shape, sh, sizeof sh), h.descr, nbytes,
                       have < nbytes ? " (truncated)" : " (trailing bytes)");

    const char *file = ck_tensorset_keep_string(set, path);
    if (!file)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    const unsigned char *data = b + off + hl;
    bool fortran = h.fortran && h.shape.ndim > 1;
    if ((swap || fortran) && nbytes > 0) {
        unsigned char *conv = malloc(nbytes);
        if (!conv)
            return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, nbytes);
        to_c_order(conv, data, &h.shape, ck_file_dtype_size(dt), numel, fortran, swap);
        if ((st = ck_tensorset_keep(set, conv, nbytes, false, err)) != CK_OK)
            return st;
        data = conv;
    }
    return ck_tensorset_add(set, name, dt, &h.shape, data, file, err);
}

/* The one-line guarantee for every message of npy_parse_into. */
ck_status ck_npy_parse_into(const void *buf, size_t len, const char *path, const char *name,
                            ck_tensorset *set, ck_error *err)
{
    return ck_error_one_line(err, npy_parse_into_impl(buf, len, path, name, set, err));
}

ck_status ck_npy_load(const char *path, ck_tensorset *out, ck_error *err)
{
    void *p;
    size_t len;
    ck_tensorset_init(out);
    ck_status st = ck_map_file(path, &p, &len, err);
    if (st != CK_OK)
        return st;
    if ((st = ck_tensorset_keep(out, p, len, true, err)) != CK_OK)
        return st;

    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    char *stem = strndup(base, bl >= 4 && strcmp(base + bl - 4, ".npy") == 0 ? bl - 4 : bl);
    if (!stem) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    } else if (!stem[0]) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: the file name gives an empty tensor name", path);
    } else {
        st = ck_npy_parse_into(p, len, path, stem, out, err);
    }
    free(stem);
    if (st != CK_OK)
        ck_tensorset_free(out);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Writer                                                                              */
/* ---------------------------------------------------------------------------------- */

static const char *npy_descr(ck_file_dtype dt)
{
    switch (dt) {
    case CK_FT_F64: return "<f8";
    case CK_FT_F32: return "<f4";
    case CK_FT_F16: return "<f2";
    case CK_FT_I64: return "<i8";
    case CK_FT_I32: return "<i4";
    case CK_FT_I16: return "<i2";
    case CK_FT_I8: return "|i1";
    case CK_FT_U64: return "<u8";
    case CK_FT_U32: return "<u4";
    case CK_FT_U16: return "<u2";
    case CK_FT_U8: return "|u1";
    case CK_FT_BOOL: return "|b1";
    default: return NULL;
    }
}

ck_status ck_npy_write(const char *path, const ck_named_tensor *t, ck_error *err)
{
    const char *descr = npy_descr(t->dtype);
    size_t nbytes;
    if (!descr)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: tensor \"%s\": %s has no .npy dtype (use safetensors)", path,
                       t->name ? t->name : "", ck_file_dtype_name(t->dtype));
    if (!ck_file_shape_size(&t->shape, t->dtype, NULL, &nbytes))
        return ck_fail(err, CK_ERR_INPUT, "%s: invalid shape", path);

    /* The dict, padded with spaces so that magic + length + header is a multiple of 64,
     * ending in a newline, as numpy writes it. */
    char hdr[512];
    int k = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < t->shape.ndim; d++)
        k += snprintf(hdr + k, sizeof hdr - (size_t)k, "%s%" PRId64, d ? ", " : "",
                      t->shape.dim[d]);
    k += snprintf(hdr + k, sizeof hdr - (size_t)k, "%s), }", t->shape.ndim == 1 ? "," : "");
    size_t total = 10 + (size_t)k + 1;
    size_t padded = (total + 63) / 64 * 64;
    memset(hdr + k, ' ', padded - total);
    k += (int)(padded - total);
    hdr[k++] = '\n';

    unsigned char pre[10];
    memcpy(pre, npy_magic, 6);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(k & 0xff);
    pre[9] = (unsigned char)((k >> 8) & 0xff);

    ck_atomic_file af;
    ck_status st = ck_atomic_open(&af, path, err);
    if (st != CK_OK)
        return st;
    ck_atomic_write(&af, pre, sizeof pre);
    ck_atomic_write(&af, hdr, (size_t)k);
    ck_atomic_write(&af, t->data, nbytes);
    return ck_atomic_commit(&af, err);
}
