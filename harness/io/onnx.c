/*
 * A strict reader of ONNX's protobuf wire format (onnx.h). One bounded reader walks the
 * bytes; each message has one function that knows its field numbers (from onnx.proto) and
 * the wire type each must have. Everything the reader keeps is copied out of the file, so
 * the mapping is released as soon as parsing ends.
 */
#include "harness/io/onnx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/text.h"
#include "harness/io/files.h"

/* wire types */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

#define MAX_NAME_BYTES 4096
#define MAX_COUNT 1000000
/* a metadata text the reader parses (folded_from, the graph signature) */
#define MAX_META_TEXT_BYTES (64u << 20)

typedef struct {
    const uint8_t *p, *end;
    const char *path;
    ck_error *err;
} pb;

static ck_status bad(const pb *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static ck_status bad(const pb *r, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ck_error_one_line(r->err, ck_fail(r->err, CK_ERR_INPUT, "%s: onnx: %s", r->path, what));
}

static ck_status oom(const pb *r)
{
    return ck_fail(r->err, CK_ERR_NOMEM, "%s: onnx: out of memory", r->path);
}

/* ---------------------------------------------------------------------------------- */
/* Wire format                                                                         */
/* ---------------------------------------------------------------------------------- */

static ck_status rd_varint(pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return bad(r, "truncated varint");
        uint8_t b = *r->p++;
        if (i == 9 && b > 1)
            return bad(r, "varint longer than 64 bits");
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return CK_OK;
        }
    }
    return bad(r, "varint longer than 10 bytes");
}

static ck_status rd_tag(pb *r, uint32_t *field, int *wt)
{
    uint64_t t;
    CK_TRY(rd_varint(r, &t));
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    if (t >> 3 == 0 || t >> 3 > 0x1fffffff)
        return bad(r, "field number %llu out of range", (unsigned long long)(t >> 3));
    if (*wt != WT_VARINT && *wt != WT_I64 && *wt != WT_LEN && *wt != WT_I32)
        return bad(r, "field %u has wire type %d (groups and unknown types are refused)", *field,
                   *wt);
    return CK_OK;
}

/* A length-delimited field as a bounded sub-reader. */
static ck_status rd_len(pb *r, pb *sub)
{
    uint64_t n;
    CK_TRY(rd_varint(r, &n));
    if (n > (uint64_t)(r->end - r->p))
        return bad(r, "a field of %llu bytes runs past the end of its message (%zu left)",
                   (unsigned long long)n, (size_t)(r->end - r->p));
    *sub = *r;
    sub->end = r->p + n;
    r->p += n;
    return CK_OK;
}

static ck_status rd_fixed(pb *r, int bytes, uint64_t *v)
{
    if ((size_t)(r->end - r->p) < (size_t)bytes)
        return bad(r, "truncated fixed-width field");
    uint64_t x = 0;
    for (int i = 0; i < bytes; i++)
        x |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    *v = x;
    return CK_OK;
}

static ck_status skip_field(pb *r, int wt)
{
    uint64_t v = 0;
    pb sub;
    switch (wt) {
    case WT_VARINT: return rd_varint(r, &v);
    case WT_I64: return rd_fixed(r, 8, &v);
    case WT_I32: return rd_fixed(r, 4, &v);
    default: return rd_len(r, &sub);
    }
}

static ck_status want(const pb *r, const char *msg, uint32_t field, int wt, int expected)
{
    if (wt == expected)
        return CK_OK;
    return bad(r, "%s field %u has wire type %d, expected %d", msg, field, wt, expected);
}

/* A string field: valid UTF-8, no NUL, at most MAX_NAME_BYTES; *out malloc'd. */
static ck_status rd_string(pb *r, const char *what, char **out)
{
    pb s;
    CK_TRY(rd_len(r, &s));
    size_t n = (size_t)(s.end - s.p);
    if (n > MAX_NAME_BYTES)
        return bad(r, "%s of %zu bytes is longer than %d", what, n, MAX_NAME_BYTES);
    if (memchr(s.p, '\0', n))
        return bad(r, "%s holds a NUL byte", what);
    if (!ck_utf8_valid((const char *)s.p, n))
        return bad(r, "%s is not valid UTF-8", what);
    char *c = malloc(n + 1);
    if (!c)
        return oom(r);
    memcpy(c, s.p, n);
    c[n] = '\0';
    free(*out);
    *out = c;
    return CK_OK;
}

/* Appends one value to a growing int64 array (count capped). */
static ck_status push_i64(pb *r, int64_t **a, int *n, int *cap, int64_t v, int max)
{
    if (*n >= max)
        return bad(r, "more than %d values in a repeated field", max);
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        int64_t *g = realloc(*a, (size_t)nc * sizeof **a);
        if (!g)
            return oom(r);
        *a = g;
        *cap = nc;
    }
    (*a)[(*n)++] = v;
    return CK_OK;
}

static ck_status push_f64(pb *r, double **a, int *n, int *cap, double v, int max)
{
    if (*n >= max)
        return bad(r, "more than %d values in a repeated field", max);
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        double *g = realloc(*a, (size_t)nc * sizeof **a);
        if (!g)
            return oom(r);
        *a = g;
        *cap = nc;
    }
    (*a)[(*n)++] = v;
    return CK_OK;
}

static double f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

static double f64_of_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* A repeated varint field, packed (wire type 2) or one value (wire type 0). */
static ck_status rd_rep_varint(pb *r, int wt, int64_t **a, int *n, int *cap, int max)
{
    uint64_t v = 0;
    if (wt == WT_VARINT) {
        CK_TRY(rd_varint(r, &v));
        return push_i64(r, a, n, cap, (int64_t)v, max);
    }
    if (wt != WT_LEN)
        return bad(r, "a repeated integer field has wire type %d", wt);
    pb s;
    CK_TRY(rd_len(r, &s));
    while (s.p < s.end) {
        CK_TRY(rd_varint(&s, &v));
        CK_TRY(push_i64(r, a, n, cap, (int64_t)v, max));
    }
    return CK_OK;
}

/* A repeated float (bytes 4) or double (bytes 8) field, packed or one value. */
static ck_status rd_rep_fixed(pb *r, int wt, int bytes, double **a, int *n, int *cap, int max)
{
    uint64_t v = 0;
    int single = bytes == 4 ? WT_I32 : WT_I64;
    if (wt == single) {
        CK_TRY(rd_fixed(r, bytes, &v));
        return push_f64(r, a, n, cap, bytes == 4 ? f32_of_bits((uint32_t)v) : f64_of_bits(v), max);
    }
    if (wt != WT_LEN)
        return bad(r, "a repeated floating-point field has wire type %d", wt);
    pb s;
    CK_TRY(rd_len(r, &s));
    if ((size_t)(s.end - s.p) % (size_t)bytes)
        return bad(r, "a packed field of %zu bytes is not a whole number of %d-byte values",
                   (size_t)(s.end - s.p), bytes);
    while (s.p < s.end) {
        CK_TRY(rd_fixed(&s, bytes, &v));
        CK_TRY(push_f64(r, a, n, cap, bytes == 4 ? f32_of_bits((uint32_t)v) : f64_of_bits(v),
                        max));
    }
    return CK_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Types                                                                               */
/* ---------------------------------------------------------------------------------- */

size_t ck_onnx_elem_size(int t)
{
    switch (t) {
    case CK_ONNX_FLOAT: return 4;
    case CK_ONNX_UINT8: return 1;
    case CK_ONNX_INT8: return 1;
    case CK_ONNX_INT32: return 4;
    case CK_ONNX_INT64: return 8;
    case CK_ONNX_BOOL: return 1;
    case CK_ONNX_FLOAT16: return 2;
    case CK_ONNX_DOUBLE: return 8;
    case CK_ONNX_BFLOAT16: return 2;
    default: return 0;
    }
}

const char *ck_onnx_type_name(int t)
{
    switch (t) {
    case CK_ONNX_FLOAT: return "float";
    case CK_ONNX_UINT8: return "uint8";
    case CK_ONNX_INT8: return "int8";
    case CK_ONNX_INT32: return "int32";
    case CK_ONNX_INT64: return "int64";
    case CK_ONNX_BOOL: return "bool";
    case CK_ONNX_FLOAT16: return "float16";
    case CK_ONNX_DOUBLE: return "double";
    case CK_ONNX_BFLOAT16: return "bfloat16";
    case 8: return "string";
    default: return "unsupported";
    }
}

/* ---------------------------------------------------------------------------------- */
/* TensorProto                                                                         */
/* ---------------------------------------------------------------------------------- */

static void tensor_free(ck_onnx_tensor *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->data);
    free(t->ext_location);
    memset(t, 0, sizeof *t);
}

/* TensorProto.external_data: key/value entries (StringStringEntryProto: key 1, value 2). */
typedef struct {
    char *location;
    bool has_offset, has_length, any;
    uint64_t offset, length;
} ext_entries;

/* A decimal offset or length: digits only, no sign, fits 64 bits. */
static ck_status ext_number(pb *r, const ck_onnx_tensor *t, const char *key, const char *text,
                            uint64_t *out)
{
    uint64_t x = 0;
    if (!text[0])
        return bad(r, "tensor `%s`: external data %s is empty", t->name, key);
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return bad(r, "tensor `%s`: external data %s `%s` is not a decimal number", t->name,
                       key, text);
        if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return bad(r, "tensor `%s`: external data %s `%s` overflows 64 bits", t->name, key,
                       text);
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *out = x;
    return CK_OK;
}

static ck_status rd_external_entry(pb *r, const ck_onnx_tensor *t, ext_entries *e)
{
    pb s;
    char *key = NULL, *value = NULL;
    ck_status st = rd_len(r, &s);
    while (st == CK_OK && s.p < s.end) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(&s, &f, &wt)) != CK_OK)
            break;
        if (f == 1 || f == 2) {
            if ((st = want(&s, "StringStringEntryProto", f, wt, WT_LEN)) == CK_OK)
                st = rd_string(&s, f == 1 ? "an external data key" : "an external data value",
                               f == 1 ? &key : &value);
        } else {
            st = skip_field(&s, wt);
        }
    }
    if (st == CK_OK) {
        const char *k = key ? key : "", *v = value ? value : "";
        e->any = true;
        if (strcmp(k, "location") == 0) {
            if (e->location)
                st = bad(r, "tensor `%s`: external data gives two locations", t->name);
            else if (!(e->location = strdup(v)))
                st = oom(r);
        } else if (strcmp(k, "offset") == 0 || strcmp(k, "length") == 0) {
            bool off = k[0] == 'o';
            if (off ? e->has_offset : e->has_length)
                st = bad(r, "tensor `%s`: external data gives two %ss", t->name, k);
            else if ((st = ext_number(r, t, k, v, off ? &e->offset : &e->length)) == CK_OK)
                *(off ? &e->has_offset : &e->has_length) = true;
        } else if (strcmp(k, "checksum") != 0) { /* checksum: an optional SHA-1, not checked */
            st = bad(r, "tensor `%s`: external data key `%s` is not one of location, offset, "
                     "length, checksum", t->name, k);
        }
    }
    free(key);
    free(value);
    return st;
}

/* After a tensor's fields: an external one (data_location 1) names a safe location, has
 * no data inside the file, and a length (when given) equal to its dims' size. */
static ck_status check_external(pb *r, ck_onnx_tensor *t, ext_entries *e, uint64_t data_location,
                                bool has_data)
{
    if (data_location > 1)
        return bad(r, "tensor `%s`: data_location %llu is not DEFAULT (0) or EXTERNAL (1)",
                   t->name, (unsigned long long)data_location);
    if (data_location == 0) {
        if (e->any)
            return bad(r, "tensor `%s`: external_data entries without data_location EXTERNAL",
                       t->name);
        return CK_OK;
    }
    if (has_data)
        return bad(r, "tensor `%s`: data_location is EXTERNAL but data is inside the file too",
                   t->name);
    const char *why = NULL;
    if (!e->location)
        return bad(r, "tensor `%s`: external data without a location", t->name);
    if (!ck_onnx_location_ok(e->location, &why))
        return bad(r, "tensor `%s`: external data location `%s` %s", t->name, e->location, why);
    if (e->has_length && e->length != (uint64_t)t->nbytes)
        return bad(r, "tensor `%s`: external data length %llu, its dims and type need %zu",
                   t->name, (unsigned long long)e->length, t->nbytes);
    if (e->offset > UINT64_MAX - (uint64_t)t->nbytes)
        return bad(r, "tensor `%s`: external data offset %llu + %zu bytes overflows", t->name,
                   (unsigned long long)e->offset, t->nbytes);
    t->ext_location = e->location;
    e->location = NULL;
    t->ext_offset = e->offset;
    return CK_OK;
}

/* The tensor's data (allocated) from raw_data, or from float/double or integer values. */
static ck_status copy_values(pb *r, ck_onnx_tensor *t, const uint8_t *raw, size_t raw_len,
                             const double *fl, const int64_t *ints)
{
    ck_status st = CK_OK;
    bool has_raw = raw != NULL, has_fl = fl != NULL, has_ints = ints != NULL;
    int64_t numel = t->numel;
    if (has_raw) {
        if (raw_len)
            memcpy(t->data, raw, raw_len);
    } else if (has_fl || has_ints) {
        bool fl_ok = has_fl && (t->data_type == CK_ONNX_FLOAT || t->data_type == CK_ONNX_DOUBLE);
        bool int_ok = has_ints && t->data_type != CK_ONNX_FLOAT && t->data_type != CK_ONNX_DOUBLE;
        if (!fl_ok && !int_ok) {
            st = bad(r, "tensor `%s`: values stored in a field that does not match type %s",
                     t->name, ck_onnx_type_name(t->data_type));
            return st;
        }
        unsigned char *d = t->data;
        for (int64_t i = 0; i < numel; i++) {
            switch (t->data_type) {
            case CK_ONNX_FLOAT: { float x = (float)fl[i]; memcpy(d + 4 * i, &x, 4); break; }
            case CK_ONNX_DOUBLE: memcpy(d + 8 * i, &fl[i], 8); break;
            case CK_ONNX_INT64: memcpy(d + 8 * i, &ints[i], 8); break;
            case CK_ONNX_INT32: { int32_t x = (int32_t)ints[i]; memcpy(d + 4 * i, &x, 4); break; }
            case CK_ONNX_FLOAT16:
            case CK_ONNX_BFLOAT16: { uint16_t x = (uint16_t)ints[i]; memcpy(d + 2 * i, &x, 2); break; }
            default: d[i] = (unsigned char)ints[i]; break;
            }
        }
    }
    return st;
}

static ck_status rd_tensor(pb *r, ck_onnx_tensor *t)
{
    ck_status st = CK_OK;
    int64_t *dims = NULL, *ints = NULL;
    double *fl = NULL;
    int n_dims = 0, c_dims = 0, n_ints = 0, c_ints = 0, n_fl = 0, c_fl = 0;
    bool has_raw = false, has_ints = false, has_fl = false;
    const uint8_t *raw = NULL;
    size_t raw_len = 0;
    uint64_t v = 0, data_location = 0;
    ext_entries ext = {0};
    memset(t, 0, sizeof *t);
    t->name = calloc(1, 1);
    if (!t->name)
        return oom(r);
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        switch (f) {
        case 1: st = rd_rep_varint(r, wt, &dims, &n_dims, &c_dims, CK_MAX_DIMS + 1); break;
        case 2:
            if ((st = want(r, "TensorProto", f, wt, WT_VARINT)) == CK_OK &&
                (st = rd_varint(r, &v)) == CK_OK)
                t->data_type = (int)(int32_t)v;
            break;
        case 4: /* float_data */
        case 10: /* double_data */
            has_fl = true;
            st = rd_rep_fixed(r, wt, f == 4 ? 4 : 8, &fl, &n_fl, &c_fl, MAX_COUNT);
            break;
        case 5: /* int32_data (also int8, uint8, bool, float16, bfloat16 bit patterns) */
        case 7: /* int64_data */
            has_ints = true;
            st = rd_rep_varint(r, wt, &ints, &n_ints, &c_ints, MAX_COUNT);
            break;
        case 8: st = want(r, "TensorProto", f, wt, WT_LEN); if (st == CK_OK) st = rd_string(r, "a tensor name", &t->name); break;
        case 9: {
            pb s;
            if ((st = want(r, "TensorProto", f, wt, WT_LEN)) == CK_OK && (st = rd_len(r, &s)) == CK_OK) {
                has_raw = true;
                raw = s.p;
                raw_len = (size_t)(s.end - s.p);
            }
            break;
        }
        case 3: st = bad(r, "tensor `%s`: segmented tensors are not supported", t->name); break;
        case 6: st = bad(r, "tensor `%s`: string tensors are not supported", t->name); break;
        case 13: st = want(r, "TensorProto", f, wt, WT_LEN); if (st == CK_OK) st = rd_external_entry(r, t, &ext); break;
        case 14:
            if ((st = want(r, "TensorProto", f, wt, WT_VARINT)) == CK_OK &&
                (st = rd_varint(r, &v)) == CK_OK)
                data_location = v;
            break;
        default: st = skip_field(r, wt); break;
        }
    }
    if (st != CK_OK)
        goto out;
    size_t es = ck_onnx_elem_size(t->data_type);
    if (!es) {
        st = bad(r, "tensor `%s`: data type %d (%s) is not supported", t->name, t->data_type,
                 ck_onnx_type_name(t->data_type));
        goto out;
    }
    if (n_dims > CK_MAX_DIMS) {
        st = bad(r, "tensor `%s`: more than %d dims", t->name, CK_MAX_DIMS);
        goto out;
    }
    t->ndim = n_dims;
    int64_t numel = 1;
    for (int d = 0; d < n_dims; d++) {
        if (dims[d] < 0) {
            st = bad(r, "tensor `%s`: dim %d is negative (%lld)", t->name, d, (long long)dims[d]);
            goto out;
        }
        t->dims[d] = dims[d];
        if (dims[d] && numel > INT64_MAX / dims[d]) {
            st = bad(r, "tensor `%s`: element count overflows", t->name);
            goto out;
        }
        numel *= dims[d];
    }
    if ((uint64_t)numel > SIZE_MAX / es || numel > ((int64_t)1 << 40)) {
        st = bad(r, "tensor `%s`: %lld elements are too many", t->name, (long long)numel);
        goto out;
    }
    t->numel = numel;
    t->nbytes = (size_t)numel * es;
    if ((st = check_external(r, t, &ext, data_location, has_raw || has_ints || has_fl)) != CK_OK ||
        t->ext_location)
        goto out; /* external: the data is attached from its file after parsing */
    if ((int)has_raw + (int)has_ints + (int)has_fl > 1) {
        st = bad(r, "tensor `%s`: data given in more than one field", t->name);
        goto out;
    }
    /* the data must be there before anything the size of the dims is allocated */
    if (has_raw && raw_len != t->nbytes) {
        st = bad(r, "tensor `%s`: raw_data holds %zu bytes, its dims and type need %zu", t->name,
                 raw_len, t->nbytes);
        goto out;
    }
    if ((has_fl || has_ints) && (int64_t)(has_fl ? n_fl : n_ints) != numel) {
        st = bad(r, "tensor `%s`: %d values for %lld elements", t->name, has_fl ? n_fl : n_ints,
                 (long long)numel);
        goto out;
    }
    if (!has_raw && !has_fl && !has_ints && t->nbytes) {
        st = bad(r, "tensor `%s`: no data for %lld elements", t->name, (long long)numel);
        goto out;
    }
    if (t->nbytes) {
        t->data = malloc(t->nbytes);
        if (!t->data) {
            st = oom(r);
            goto out;
        }
    }
    st = copy_values(r, t, has_raw ? raw : NULL, raw_len, has_fl ? fl : NULL, has_ints ? ints : NULL);
out:
    free(dims);
    free(ints);
    free(fl);
    free(ext.location);
    if (st != CK_OK)
        tensor_free(t);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* AttributeProto, NodeProto                                                           */
/* ---------------------------------------------------------------------------------- */

static void attr_free(ck_onnx_attr *a)
{
    free(a->name);
    free(a->s);
    free(a->ints);
    free(a->floats);
    if (a->t) {
        tensor_free(a->t);
        free(a->t);
    }
    memset(a, 0, sizeof *a);
}

static ck_status rd_attr(pb *r, ck_onnx_attr *a)
{
    ck_status st = CK_OK;
    int c_ints = 0, c_fl = 0;
    uint64_t v = 0;
    memset(a, 0, sizeof *a);
    if (!(a->name = calloc(1, 1)))
        return oom(r);
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        switch (f) {
        case 1: if ((st = want(r, "AttributeProto", f, wt, WT_LEN)) == CK_OK) st = rd_string(r, "an attribute name", &a->name); break;
        case 2:
            if ((st = want(r, "AttributeProto", f, wt, WT_I32)) == CK_OK &&
                (st = rd_fixed(r, 4, &v)) == CK_OK)
                a->f = f32_of_bits((uint32_t)v);
            break;
        case 3:
            if ((st = want(r, "AttributeProto", f, wt, WT_VARINT)) == CK_OK &&
                (st = rd_varint(r, &v)) == CK_OK)
                a->i = (int64_t)v;
            break;
        case 4: if ((st = want(r, "AttributeProto", f, wt, WT_LEN)) == CK_OK) st = rd_string(r, "a string attribute", &a->s); break;
        case 5: {
            pb s;
            if ((st = want(r, "AttributeProto", f, wt, WT_LEN)) != CK_OK || (st = rd_len(r, &s)) != CK_OK)
                break;
            if (a->t) {
                st = bad(r, "attribute `%s` holds two tensors", a->name);
                break;
            }
            if (!(a->t = calloc(1, sizeof *a->t))) {
                st = oom(r);
                break;
            }
            if ((st = rd_tensor(&s, a->t)) != CK_OK) {
                free(a->t);
                a->t = NULL;
            }
            break;
        }
        case 7: st = rd_rep_fixed(r, wt, 4, &a->floats, &a->n_floats, &c_fl, CK_ONNX_MAX_ATTR_INTS); break;
        case 8: st = rd_rep_varint(r, wt, &a->ints, &a->n_ints, &c_ints, CK_ONNX_MAX_ATTR_INTS); break;
        case 6:
        case 11: st = bad(r, "attribute `%s`: subgraphs (If, Loop, Scan) are not supported", a->name); break;
        case 21: st = bad(r, "attribute `%s`: attribute references belong in functions, not the main graph", a->name); break;
        case 20:
            if ((st = want(r, "AttributeProto", f, wt, WT_VARINT)) == CK_OK &&
                (st = rd_varint(r, &v)) == CK_OK)
                a->type = (int)(int32_t)v;
            break;
        default: st = skip_field(r, wt); break; /* strings, doc_string, sparse tensors, types */
        }
    }
    if (st != CK_OK)
        attr_free(a);
    return st;
}

static ck_status push_str(pb *r, char ***a, int *n, const char *what)
{
    if (*n >= CK_ONNX_MAX_IO)
        return bad(r, "a node has more than %d %s", CK_ONNX_MAX_IO, what);
    char **g = realloc(*a, (size_t)(*n + 1) * sizeof **a);
    if (!g)
        return oom(r);
    *a = g;
    g[*n] = NULL;
    ck_status st = rd_string(r, what, &g[*n]);
    if (st == CK_OK)
        (*n)++;
    return st;
}

static void node_free(ck_onnx_node *n)
{
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->torch_scopes);
    for (int i = 0; i < n->n_in; i++)
        free(n->in[i]);
    for (int i = 0; i < n->n_out; i++)
        free(n->out[i]);
    free(n->in);
    free(n->out);
    for (int i = 0; i < n->n_attr; i++)
        attr_free(&n->attr[i]);
    free(n->attr);
    memset(n, 0, sizeof *n);
}

/* A metadata_props entry (StringStringEntryProto: key 1, value 2) as two sub-readers
 * (empty when absent). A wrong wire type is refused as everywhere. */
static ck_status rd_meta_entry(pb *r, pb *key, pb *val)
{
    *key = *val = (pb){r->p, r->p, r->path, r->err};
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        CK_TRY(rd_tag(r, &f, &wt));
        if (f == 1 || f == 2) {
            CK_TRY(want(r, "StringStringEntryProto", f, wt, WT_LEN));
            CK_TRY(rd_len(r, f == 1 ? key : val));
        } else {
            CK_TRY(skip_field(r, wt));
        }
    }
    return CK_OK;
}

static bool meta_key_is(const pb *key, const char *want_key)
{
    size_t kn = (size_t)(key->end - key->p);
    return kn == strlen(want_key) && memcmp(key->p, want_key, kn) == 0;
}

/* A metadata value that is text: no NUL, valid UTF-8, at most max bytes. */
static bool meta_text_ok(const pb *val, size_t max)
{
    size_t vn = (size_t)(val->end - val->p);
    return vn <= max && (!vn || !memchr(val->p, '\0', vn)) &&
           ck_utf8_valid((const char *)val->p, vn);
}

/* A node's metadata_props entry: the value of `pkg.torch.onnx.name_scopes` into
 * n->torch_scopes. Metadata only names things in messages, so an entry that is not a
 * well-formed string (too long, NUL, not UTF-8) is skipped, not refused. */
static ck_status rd_node_metadata(pb *r, ck_onnx_node *n)
{
    pb key, val;
    CK_TRY(rd_meta_entry(r, &key, &val));
    if (!meta_key_is(&key, "pkg.torch.onnx.name_scopes") || !meta_text_ok(&val, MAX_NAME_BYTES))
        return CK_OK;
    size_t vn = (size_t)(val.end - val.p);
    char *c = malloc(vn + 1);
    if (!c)
        return oom(r);
    if (vn)
        memcpy(c, val.p, vn);
    c[vn] = '\0';
    free(n->torch_scopes);
    n->torch_scopes = c;
    return CK_OK;
}

static ck_status rd_node(pb *r, ck_onnx_node *n)
{
    ck_status st = CK_OK;
    memset(n, 0, sizeof *n);
    if (!(n->name = calloc(1, 1)) || !(n->op_type = calloc(1, 1)) || !(n->domain = calloc(1, 1)) ||
        !(n->torch_scopes = calloc(1, 1))) {
        node_free(n);
        return oom(r);
    }
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        if ((f >= 1 && f <= 5) || f == 7 || f == 9)
            if ((st = want(r, "NodeProto", f, wt, WT_LEN)) != CK_OK)
                break;
        switch (f) {
        case 1: st = push_str(r, &n->in, &n->n_in, "inputs"); break;
        case 2: st = push_str(r, &n->out, &n->n_out, "outputs"); break;
        case 3: st = rd_string(r, "a node name", &n->name); break;
        case 4: st = rd_string(r, "an op type", &n->op_type); break;
        case 7: st = rd_string(r, "a domain", &n->domain); break;
        case 9: { /* metadata_props */
            pb s;
            if ((st = rd_len(r, &s)) == CK_OK)
                st = rd_node_metadata(&s, n);
            break;
        }
        case 5: {
            pb s;
            if ((st = rd_len(r, &s)) != CK_OK)
                break;
            if (n->n_attr >= CK_ONNX_MAX_IO) {
                st = bad(r, "node `%s` has more than %d attributes", n->name, CK_ONNX_MAX_IO);
                break;
            }
            ck_onnx_attr *g = realloc(n->attr, (size_t)(n->n_attr + 1) * sizeof *g);
            if (!g) {
                st = oom(r);
                break;
            }
            n->attr = g;
            if ((st = rd_attr(&s, &n->attr[n->n_attr])) == CK_OK)
                n->n_attr++;
            break;
        }
        default: st = skip_field(r, wt); break;
        }
    }
    if (st != CK_OK)
        node_free(n);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* ValueInfoProto, GraphProto, ModelProto                                              */
/* ---------------------------------------------------------------------------------- */

static ck_status rd_shape(pb *r, ck_onnx_value *val)
{
    ck_status st = CK_OK;
    val->ndim = 0;
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        if (f != 1) {
            st = skip_field(r, wt);
            continue;
        }
        pb d;
        if ((st = want(r, "TensorShapeProto", f, wt, WT_LEN)) != CK_OK || (st = rd_len(r, &d)) != CK_OK)
            break;
        if (val->ndim >= CK_MAX_DIMS) {
            st = bad(r, "value `%s` has more than %d dims", val->name, CK_MAX_DIMS);
            break;
        }
        int64_t dim = -1;
        while (d.p < d.end && st == CK_OK) {
            uint32_t g;
            int w2;
            uint64_t v = 0;
            if ((st = rd_tag(&d, &g, &w2)) != CK_OK)
                break;
            if (g == 1 && (st = want(&d, "Dimension", g, w2, WT_VARINT)) == CK_OK &&
                (st = rd_varint(&d, &v)) == CK_OK)
                dim = (int64_t)v < 0 ? -1 : (int64_t)v;
            else if (g != 1)
                st = skip_field(&d, w2); /* dim_param: symbolic */
        }
        val->dims[val->ndim++] = dim;
    }
    return st;
}

static ck_status rd_value(pb *r, ck_onnx_value *val)
{
    ck_status st = CK_OK;
    memset(val, 0, sizeof *val);
    val->ndim = -1;
    if (!(val->name = calloc(1, 1)))
        return oom(r);
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        if (f == 1) {
            if ((st = want(r, "ValueInfoProto", f, wt, WT_LEN)) == CK_OK)
                st = rd_string(r, "a value name", &val->name);
        } else if (f == 2) {
            pb tp;
            if ((st = want(r, "ValueInfoProto", f, wt, WT_LEN)) != CK_OK || (st = rd_len(r, &tp)) != CK_OK)
                break;
            while (tp.p < tp.end && st == CK_OK) {
                uint32_t g;
                int w2;
                if ((st = rd_tag(&tp, &g, &w2)) != CK_OK)
                    break;
                if (g != 1) { /* sequence, map, optional types: not tensors */
                    st = skip_field(&tp, w2);
                    continue;
                }
                pb tt;
                if ((st = want(&tp, "TypeProto", g, w2, WT_LEN)) != CK_OK || (st = rd_len(&tp, &tt)) != CK_OK)
                    break;
                while (tt.p < tt.end && st == CK_OK) {
                    uint32_t h;
                    int w3;
                    uint64_t v = 0;
                    if ((st = rd_tag(&tt, &h, &w3)) != CK_OK)
                        break;
                    if (h == 1) {
                        if ((st = want(&tt, "TypeProto.Tensor", h, w3, WT_VARINT)) == CK_OK &&
                            (st = rd_varint(&tt, &v)) == CK_OK)
                            val->elem_type = (int)(int32_t)v;
                    } else if (h == 2) {
                        pb sh;
                        if ((st = want(&tt, "TypeProto.Tensor", h, w3, WT_LEN)) == CK_OK &&
                            (st = rd_len(&tt, &sh)) == CK_OK)
                            st = rd_shape(&sh, val);
                    } else {
                        st = skip_field(&tt, w3);
                    }
                }
            }
        } else {
            st = skip_field(r, wt);
        }
    }
    if (st != CK_OK) {
        free(val->name);
        val->name = NULL;
    }
    return st;
}

/* A value_info entry (ValueInfoProto: name 1, metadata_props 4; its type is not kept, the
 * importer infers shapes itself): a `pkg.onnxscript.optimizer.folded_from` record into
 * m->folds (onnx_metadata.c). */
static ck_status rd_value_info(pb *r, ck_onnx_model *m)
{
    char *name = NULL;
    pb folded = {0};
    bool has_folded = false;
    ck_status st = CK_OK;
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        if (f == 1 || f == 4)
            if ((st = want(r, "ValueInfoProto", f, wt, WT_LEN)) != CK_OK)
                break;
        if (f == 1) {
            free(name);
            name = NULL;
            st = rd_string(r, "a value name", &name);
        } else if (f == 4) {
            pb s, key, val;
            if ((st = rd_len(r, &s)) == CK_OK && (st = rd_meta_entry(&s, &key, &val)) == CK_OK &&
                meta_key_is(&key, "pkg.onnxscript.optimizer.folded_from") &&
                meta_text_ok(&val, MAX_META_TEXT_BYTES)) {
                folded = val;
                has_folded = true;
            }
        } else {
            st = skip_field(r, wt);
        }
    }
    if (st == CK_OK && has_folded && name && name[0] &&
        ck_onnx_add_fold(m, name, (const char *)folded.p, (size_t)(folded.end - folded.p)) != CK_OK)
        st = oom(r);
    free(name);
    return st;
}

/* A graph's metadata_props entry: torch.export's graph signature into m->torch_params. */
static ck_status rd_graph_metadata(pb *r, ck_onnx_model *m)
{
    pb key, val;
    CK_TRY(rd_meta_entry(r, &key, &val));
    if (!meta_key_is(&key, "pkg.torch.export.ExportedProgram.graph_signature") ||
        !meta_text_ok(&val, MAX_META_TEXT_BYTES))
        return CK_OK;
    if (ck_onnx_add_signature(m, (const char *)val.p, (size_t)(val.end - val.p)) != CK_OK)
        return oom(r);
    return CK_OK;
}

/* Grows an array of `size`-byte elements by one; NULL when out of memory or over max. */
static void *grow(void **a, int n, size_t size, int max)
{
    if (n >= max)
        return NULL;
    void *g = realloc(*a, (size_t)(n + 1) * size);
    if (!g)
        return NULL;
    *a = g;
    return (char *)g + (size_t)n * size;
}

static ck_status rd_graph(pb *r, ck_onnx_model *m)
{
    ck_status st = CK_OK;
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        if (f == 1 || f == 5 || f == 11 || f == 12 || f == 13 || f == 15 || f == 16)
            if ((st = want(r, "GraphProto", f, wt, WT_LEN)) != CK_OK)
                break;
        pb s;
        switch (f) {
        case 1: {
            if ((st = rd_len(r, &s)) != CK_OK)
                break;
            ck_onnx_node *n = grow((void **)&m->nodes, m->n_nodes, sizeof *n, CK_ONNX_MAX_NODES);
            if (!n) {
                st = m->n_nodes >= CK_ONNX_MAX_NODES ? bad(r, "more than %d nodes", CK_ONNX_MAX_NODES) : oom(r);
                break;
            }
            if ((st = rd_node(&s, n)) == CK_OK)
                m->n_nodes++;
            break;
        }
        case 5: {
            if ((st = rd_len(r, &s)) != CK_OK)
                break;
            ck_onnx_tensor *t = grow((void **)&m->inits, m->n_inits, sizeof *t, CK_ONNX_MAX_NODES);
            if (!t) {
                st = m->n_inits >= CK_ONNX_MAX_NODES ? bad(r, "more than %d initializers", CK_ONNX_MAX_NODES) : oom(r);
                break;
            }
            if ((st = rd_tensor(&s, t)) == CK_OK)
                m->n_inits++;
            break;
        }
        case 11:
        case 12: {
            if ((st = rd_len(r, &s)) != CK_OK)
                break;
            ck_onnx_value **arr = f == 11 ? &m->inputs : &m->outputs;
            int *cnt = f == 11 ? &m->n_inputs : &m->n_outputs;
            ck_onnx_value *v = grow((void **)arr, *cnt, sizeof *v, CK_ONNX_MAX_NODES);
            if (!v) {
                st = oom(r);
                break;
            }
            if ((st = rd_value(&s, v)) == CK_OK)
                (*cnt)++;
            break;
        }
        case 13:
            if ((st = rd_len(r, &s)) == CK_OK)
                st = rd_value_info(&s, m);
            break;
        case 16:
            if ((st = rd_len(r, &s)) == CK_OK)
                st = rd_graph_metadata(&s, m);
            break;
        case 15: st = bad(r, "sparse initializers are not supported"); break;
        default: st = skip_field(r, wt); break;
        }
    }
    return st;
}

static ck_status rd_model(pb *r, ck_onnx_model *m)
{
    ck_status st = CK_OK;
    bool has_graph = false;
    char *producer = NULL, *version = NULL;
    while (r->p < r->end && st == CK_OK) {
        uint32_t f;
        int wt;
        uint64_t v = 0;
        if ((st = rd_tag(r, &f, &wt)) != CK_OK)
            break;
        pb s;
        switch (f) {
        case 1:
            if ((st = want(r, "ModelProto", f, wt, WT_VARINT)) == CK_OK && (st = rd_varint(r, &v)) == CK_OK)
                m->ir_version = (int64_t)v;
            break;
        case 2: if ((st = want(r, "ModelProto", f, wt, WT_LEN)) == CK_OK) st = rd_string(r, "producer_name", &producer); break;
        case 3: if ((st = want(r, "ModelProto", f, wt, WT_LEN)) == CK_OK) st = rd_string(r, "producer_version", &version); break;
        case 7:
            if ((st = want(r, "ModelProto", f, wt, WT_LEN)) != CK_OK || (st = rd_len(r, &s)) != CK_OK)
                break;
            if (has_graph) {
                st = bad(r, "the model holds two graphs");
                break;
            }
            has_graph = true;
            st = rd_graph(&s, m);
            break;
        case 8: {
            if ((st = want(r, "ModelProto", f, wt, WT_LEN)) != CK_OK || (st = rd_len(r, &s)) != CK_OK)
                break;
            char *domain = NULL;
            int64_t ver = 0;
            while (s.p < s.end && st == CK_OK) {
                uint32_t g;
                int w2;
                if ((st = rd_tag(&s, &g, &w2)) != CK_OK)
                    break;
                if (g == 1 && (st = want(&s, "OperatorSetIdProto", g, w2, WT_LEN)) == CK_OK)
                    st = rd_string(&s, "an opset domain", &domain);
                else if (g == 2 && (st = want(&s, "OperatorSetIdProto", g, w2, WT_VARINT)) == CK_OK &&
                         (st = rd_varint(&s, &v)) == CK_OK)
                    ver = (int64_t)v;
                else if (g != 1 && g != 2)
                    st = skip_field(&s, w2);
            }
            if (st == CK_OK && (!domain || !domain[0] || strcmp(domain, "ai.onnx") == 0))
                m->opset = ver;
            free(domain);
            break;
        }
        default: st = skip_field(r, wt); break;
        }
    }
    if (st == CK_OK && !has_graph)
        st = bad(r, "the model holds no graph (is this an ONNX model file?)");
    if (st == CK_OK) {
        size_t n = strlen(producer ? producer : "") + strlen(version ? version : "") + 2;
        m->producer = malloc(n);
        if (!m->producer)
            st = oom(r);
        else
            snprintf(m->producer, n, "%s%s%s", producer ? producer : "", version && version[0] ? " " : "",
                     version ? version : "");
    }
    free(producer);
    free(version);
    return st;
}

ck_status ck_onnx_parse(const void *buf, size_t len, const char *path, ck_onnx_model *out,
                        ck_error *err)
{
    memset(out, 0, sizeof *out);
    pb r = {(const uint8_t *)buf, (const uint8_t *)buf + len, path, err};
    if (len == 0)
        return bad(&r, "empty file");
    ck_status st = rd_model(&r, out);
    if (st != CK_OK)
        ck_onnx_free(out);
    return st;
}

static ck_status parse_mapped(void *obj, const char *text, size_t len, const char *path,
                              ck_error *err)
{
    return ck_onnx_parse(text, len, path, obj, err);
}

ck_status ck_onnx_load(const char *path, ck_onnx_model *out, ck_error *err)
{
    memset(out, 0, sizeof *out);
    ck_status st = ck_parse_file(path, parse_mapped, out, err);
    if (st == CK_OK && (st = ck_onnx_load_external(out, path, err)) != CK_OK)
        ck_onnx_free(out);
    return st;
}

void ck_onnx_free(ck_onnx_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_nodes; i++)
        node_free(&m->nodes[i]);
    for (int i = 0; i < m->n_inits; i++)
        tensor_free(&m->inits[i]);
    for (int i = 0; i < m->n_inputs; i++)
        free(m->inputs[i].name);
    for (int i = 0; i < m->n_outputs; i++)
        free(m->outputs[i].name);
    free(m->nodes);
    free(m->inits);
    free(m->inputs);
    free(m->outputs);
    for (int i = 0; i < m->n_folds; i++) {
        free(m->folds[i].value);
        for (int k = 0; k < m->folds[i].n_src; k++)
            free(m->folds[i].src[k]);
        free(m->folds[i].src);
    }
    free(m->folds);
    for (int i = 0; i < m->n_torch_params; i++)
        free(m->torch_params[i]);
    free(m->torch_params);
    free(m->producer);
    memset(m, 0, sizeof *m);
}

const ck_onnx_attr *ck_onnx_attr_find(const ck_onnx_node *n, const char *name)
{
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attr[i].name, name) == 0)
            return &n->attr[i];
    return NULL;
}

const ck_onnx_tensor *ck_onnx_init_find(const ck_onnx_model *m, const char *name)
{
    for (int i = 0; i < m->n_inits; i++)
        if (strcmp(m->inits[i].name, name) == 0)
            return &m->inits[i];
    return NULL;
}
