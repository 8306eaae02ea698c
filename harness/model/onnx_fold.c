/*
 * Constant folding of ONNX shape arithmetic (onnx_fold.h). Every op reads its inputs as
 * doubles with their dims, computes with NumPy's broadcasting where ONNX uses it, and
 * writes one tensor.
 */
#include "harness/model/onnx_fold.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"

/* A constant as doubles. */
typedef struct {
    int ndim;
    int64_t dims[CK_MAX_DIMS];
    int64_t numel;
    double *v;
} dval;

static double rd(const ck_onnx_tensor *t, int64_t i)
{
    const unsigned char *d = t->data;
    switch (t->data_type) {
    case CK_ONNX_FLOAT: { float x; memcpy(&x, d + 4 * i, 4); return x; }
    case CK_ONNX_DOUBLE: { double x; memcpy(&x, d + 8 * i, 8); return x; }
    case CK_ONNX_FLOAT16: { uint16_t h; memcpy(&h, d + 2 * i, 2); return ck_f16_to_f32(h); }
    case CK_ONNX_BFLOAT16: { uint16_t h; memcpy(&h, d + 2 * i, 2); return ck_bf16_to_f32(h); }
    case CK_ONNX_INT64: { int64_t x; memcpy(&x, d + 8 * i, 8); return (double)x; }
    case CK_ONNX_INT32: { int32_t x; memcpy(&x, d + 4 * i, 4); return x; }
    case CK_ONNX_INT8: return (double)(int8_t)d[i];
    default: return (double)d[i];
    }
}

/* A double as an integer without undefined behaviour: NaN is 0, values beyond 2^62 are
 * clamped (every fold checks the sizes it uses; Slice's INT64_MAX ends clamp anyway). */
static int64_t iv(double v)
{
    const double lim = 4611686018427387904.0; /* 2^62 */
    return v != v ? 0 : v > lim ? (int64_t)lim : v < -lim ? -(int64_t)lim : (int64_t)v;
}

static void wr(int type, void *data, int64_t i, double v)
{
    unsigned char *d = data;
    switch (type) {
    case CK_ONNX_FLOAT: { float x = (float)v; memcpy(d + 4 * i, &x, 4); break; }
    case CK_ONNX_DOUBLE: memcpy(d + 8 * i, &v, 8); break;
    case CK_ONNX_FLOAT16: { uint16_t h = ck_f32_to_f16((float)v); memcpy(d + 2 * i, &h, 2); break; }
    case CK_ONNX_BFLOAT16: { uint16_t h = ck_f32_to_bf16((float)v); memcpy(d + 2 * i, &h, 2); break; }
    case CK_ONNX_INT64: { int64_t x = iv(v); memcpy(d + 8 * i, &x, 8); break; }
    case CK_ONNX_INT32: { int32_t x = (int32_t)(iv(v) > INT32_MAX ? INT32_MAX : iv(v) < INT32_MIN ? INT32_MIN : iv(v)); memcpy(d + 4 * i, &x, 4); break; }
    case CK_ONNX_BOOL: d[i] = v != 0.0; break;
    case CK_ONNX_INT8: d[i] = (unsigned char)(int8_t)(iv(v) & 0xff); break;
    default: d[i] = (unsigned char)(iv(v) & 0xff); break;
    }
}

static bool is_int_type(int t)
{
    return t == CK_ONNX_INT64 || t == CK_ONNX_INT32 || t == CK_ONNX_INT8 || t == CK_ONNX_UINT8 ||
           t == CK_ONNX_BOOL;
}

void ck_onnx_tensor_release(ck_onnx_tensor *t)
{
    free(t->name);
    free(t->data);
    free(t->ext_location);
    memset(t, 0, sizeof *t);
}

ck_status ck_onnx_tensor_from_f64(const char *name, int data_type, int ndim, const int64_t *dims,
                                  const double *v, ck_onnx_tensor *out)
{
    memset(out, 0, sizeof *out);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= dims[d];
    size_t es = ck_onnx_elem_size(data_type);
    out->name = strdup(name);
    out->data = malloc((size_t)n * es + 1);
    if (!out->name || !out->data) {
        ck_onnx_tensor_release(out);
        return CK_ERR_NOMEM;
    }
    out->data_type = data_type;
    out->ndim = ndim;
    memcpy(out->dims, dims, (size_t)ndim * sizeof *dims);
    out->numel = n;
    out->nbytes = (size_t)n * es;
    for (int64_t i = 0; i < n; i++)
        wr(data_type, out->data, i, v[i]);
    return CK_OK;
}

/* ---------------------------------------------------------------------------------- */

typedef struct {
    char *why;
    size_t why_n;
} fctx;

static ck_status nope(fctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static ck_status nope(fctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->why_n, fmt, ap);
    va_end(ap);
    return CK_ERR_INPUT;
}

static ck_status load(fctx *c, const ck_onnx_tensor *t, dval *d)
{
    memset(d, 0, sizeof *d);
    if (t->numel > CK_ONNX_FOLD_MAX_ELEMS)
        return nope(c, "constant `%s` of %lld elements is too large to fold", t->name,
                    (long long)t->numel);
    d->ndim = t->ndim;
    memcpy(d->dims, t->dims, sizeof d->dims);
    d->numel = t->numel;
    d->v = malloc((size_t)t->numel * sizeof *d->v + 1);
    if (!d->v)
        return CK_ERR_NOMEM;
    for (int64_t i = 0; i < t->numel; i++)
        d->v[i] = rd(t, i);
    return CK_OK;
}

static ck_status make(fctx *c, dval *o, int ndim, const int64_t *dims)
{
    int64_t n = 1;
    if (ndim > CK_MAX_DIMS)
        return nope(c, "a result of %d dims", ndim);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] && n > CK_ONNX_FOLD_MAX_ELEMS / dims[d]))
            return nope(c, "a result of more than %d elements (or a negative dim)",
                        CK_ONNX_FOLD_MAX_ELEMS);
        n *= dims[d];
    }
    o->ndim = ndim;
    memcpy(o->dims, dims, (size_t)ndim * sizeof *dims);
    o->numel = n;
    o->v = calloc((size_t)n + 1, sizeof *o->v);
    return o->v ? CK_OK : CK_ERR_NOMEM;
}

/* Flat index into `d` of the multi-index `idx` of a result of rank r, broadcasting. */
static int64_t bidx(const dval *d, const int64_t *idx, int r)
{
    int64_t off = 0;
    for (int k = 0; k < d->ndim; k++) {
        int64_t i = idx[r - d->ndim + k];
        off = off * d->dims[k] + (d->dims[k] == 1 ? 0 : i);
    }
    return off;
}

static void unflat(int64_t f, const dval *o, int64_t *idx)
{
    for (int k = o->ndim - 1; k >= 0; k--) {
        idx[k] = o->dims[k] ? f % o->dims[k] : 0;
        f = o->dims[k] ? f / o->dims[k] : 0;
    }
}

static ck_status bshape(fctx *c, const dval *const *in, int n, int *r, int64_t *dims)
{
    *r = 0;
    for (int i = 0; i < n; i++)
        *r = in[i]->ndim > *r ? in[i]->ndim : *r;
    for (int k = 0; k < *r; k++)
        dims[k] = 1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < in[i]->ndim; k++) {
            int64_t *o = &dims[*r - in[i]->ndim + k], x = in[i]->dims[k];
            if (x != 1 && *o != 1 && x != *o)
                return nope(c, "shapes do not broadcast");
            if (x != 1)
                *o = x;
        }
    return CK_OK;
}

static double apply(const char *op, double a, double b, double w, bool ints)
{
    if (!strcmp(op, "Add")) return a + b;
    if (!strcmp(op, "Sub")) return a - b;
    if (!strcmp(op, "Mul")) return a * b;
    if (!strcmp(op, "Div")) return ints ? (b != 0 ? trunc(a / b) : 0) : a / b;
    if (!strcmp(op, "Pow")) return pow(a, b);
    if (!strcmp(op, "Max")) return a > b ? a : b;
    if (!strcmp(op, "Min")) return a < b ? a : b;
    if (!strcmp(op, "Equal")) return a == b;
    if (!strcmp(op, "Less")) return a < b;
    if (!strcmp(op, "Greater")) return a > b;
    if (!strcmp(op, "LessOrEqual")) return a <= b;
    if (!strcmp(op, "GreaterOrEqual")) return a >= b;
    if (!strcmp(op, "And")) return a != 0 && b != 0;
    if (!strcmp(op, "Or")) return a != 0 || b != 0;
    if (!strcmp(op, "Mod")) return b == 0 ? 0 : ints ? a - b * floor(a / b) : fmod(a, b);
    if (!strcmp(op, "Where")) return a != 0 ? b : w;
    return NAN;
}

static ck_status elementwise(fctx *c, const char *op, const dval *const *in, int n, bool ints,
                             dval *o)
{
    int r;
    int64_t dims[CK_MAX_DIMS], idx[CK_MAX_DIMS];
    CK_TRY(bshape(c, in, n, &r, dims));
    CK_TRY(make(c, o, r, dims));
    for (int64_t f = 0; f < o->numel; f++) {
        unflat(f, o, idx);
        double a = in[0]->v[bidx(in[0], idx, r)];
        double b = n > 1 ? in[1]->v[bidx(in[1], idx, r)] : 0;
        double w = n > 2 ? in[2]->v[bidx(in[2], idx, r)] : 0;
        o->v[f] = apply(op, a, b, w, ints);
    }
    return CK_OK;
}

static double unary(const char *op, double a)
{
    if (!strcmp(op, "Neg")) return -a;
    if (!strcmp(op, "Sqrt")) return sqrt(a);
    if (!strcmp(op, "Reciprocal")) return 1.0 / a;
    if (!strcmp(op, "Abs")) return fabs(a);
    if (!strcmp(op, "Floor")) return floor(a);
    if (!strcmp(op, "Ceil")) return ceil(a);
    if (!strcmp(op, "Not")) return a == 0;
    if (!strcmp(op, "Exp")) return exp(a);
    if (!strcmp(op, "Log")) return log(a);
    return NAN;
}

/* ---------------------------------------------------------------------------------- */
/* Shape ops                                                                           */
/* ---------------------------------------------------------------------------------- */

static int64_t axis_of(int64_t a, int r)
{
    return a < 0 ? a + r : a;
}

static const ck_onnx_attr *attr(const ck_onnx_node *n, const char *name)
{
    return ck_onnx_attr_find(n, name);
}

static int64_t attr_i(const ck_onnx_node *n, const char *name, int64_t dflt)
{
    const ck_onnx_attr *a = attr(n, name);
    return a ? a->i : dflt;
}

/* axes from an ints attribute or a constant input */
static int get_axes(const ck_onnx_node *n, const dval *in, int64_t *axes)
{
    const ck_onnx_attr *a = attr(n, "axes");
    int k = 0;
    if (a)
        for (; k < a->n_ints && k < CK_MAX_DIMS; k++)
            axes[k] = a->ints[k];
    else if (in)
        for (; k < in->numel && k < CK_MAX_DIMS; k++)
            axes[k] = iv(in->v[k]);
    return k;
}

static ck_status fold_unsqueeze(fctx *c, const ck_onnx_node *n, const dval *x, const dval *ax,
                                dval *o)
{
    int64_t axes[CK_MAX_DIMS];
    int k = get_axes(n, ax, axes), r = x->ndim + k;
    if (!k || r > CK_MAX_DIMS)
        return nope(c, "Unsqueeze without axes or to more than %d dims", CK_MAX_DIMS);
    bool ins[CK_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int64_t a = axis_of(axes[i], r);
        if (a < 0 || a >= r || ins[a])
            return nope(c, "Unsqueeze axis %lld is out of range or repeated", (long long)axes[i]);
        ins[a] = true;
    }
    int64_t dims[CK_MAX_DIMS];
    for (int d = 0, s = 0; d < r; d++)
        dims[d] = ins[d] ? 1 : x->dims[s++];
    CK_TRY(make(c, o, r, dims));
    memcpy(o->v, x->v, (size_t)x->numel * sizeof *o->v);
    return CK_OK;
}

static ck_status fold_squeeze(fctx *c, const ck_onnx_node *n, const dval *x, const dval *ax,
                              dval *o)
{
    int64_t axes[CK_MAX_DIMS], dims[CK_MAX_DIMS];
    int k = get_axes(n, ax, axes), r = 0;
    bool drop[CK_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int64_t a = axis_of(axes[i], x->ndim);
        if (a < 0 || a >= x->ndim || x->dims[a] != 1)
            return nope(c, "Squeeze axis %lld is not a dim of size 1", (long long)axes[i]);
        drop[a] = true;
    }
    for (int d = 0; d < x->ndim; d++)
        if (!(k ? drop[d] : x->dims[d] == 1))
            dims[r++] = x->dims[d];
    CK_TRY(make(c, o, r, dims));
    memcpy(o->v, x->v, (size_t)x->numel * sizeof *o->v);
    return CK_OK;
}

static ck_status fold_concat(fctx *c, const ck_onnx_node *n, const dval *const *in, int k,
                             dval *o)
{
    int r = in[0]->ndim;
    int64_t axis = axis_of(attr_i(n, "axis", 0), r);
    if (axis < 0 || axis >= r)
        return nope(c, "Concat axis out of range");
    int64_t dims[CK_MAX_DIMS];
    memcpy(dims, in[0]->dims, sizeof dims);
    dims[axis] = 0;
    for (int i = 0; i < k; i++) {
        if (in[i]->ndim != r)
            return nope(c, "Concat of constants of different ranks");
        for (int d = 0; d < r; d++)
            if (d != axis && in[i]->dims[d] != in[0]->dims[d])
                return nope(c, "Concat of constants of different shapes");
        dims[axis] += in[i]->dims[axis];
    }
    CK_TRY(make(c, o, r, dims));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= dims[d];
    for (int d = (int)axis + 1; d < r; d++)
        inner *= dims[d];
    int64_t f = 0;
    for (int64_t a = 0; a < outer; a++)
        for (int i = 0; i < k; i++) {
            int64_t len = in[i]->dims[axis] * inner;
            memcpy(o->v + f, in[i]->v + a * len, (size_t)len * sizeof *o->v);
            f += len;
        }
    return CK_OK;
}

static ck_status fold_gather(fctx *c, const ck_onnx_node *n, const dval *x, const dval *ix,
                             dval *o)
{
    int64_t axis = axis_of(attr_i(n, "axis", 0), x->ndim);
    if (axis < 0 || axis >= x->ndim)
        return nope(c, "Gather axis out of range");
    int r = x->ndim - 1 + ix->ndim;
    if (r > CK_MAX_DIMS)
        return nope(c, "Gather result of more than %d dims", CK_MAX_DIMS);
    int64_t dims[CK_MAX_DIMS], outer = 1, inner = 1, na = x->dims[axis];
    int k = 0;
    for (int d = 0; d < axis; d++)
        outer *= (dims[k++] = x->dims[d]);
    for (int d = 0; d < ix->ndim; d++)
        dims[k++] = ix->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++)
        inner *= (dims[k++] = x->dims[d]);
    CK_TRY(make(c, o, r, dims));
    int64_t f = 0;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < ix->numel; j++) {
            int64_t i = iv(ix->v[j]);
            i = i < 0 ? i + na : i;
            if (i < 0 || i >= na)
                return nope(c, "Gather index %lld is outside [0, %lld)", (long long)ix->v[j],
                            (long long)na);
            memcpy(o->v + f, x->v + (a * na + i) * inner, (size_t)inner * sizeof *o->v);
            f += inner;
        }
    return CK_OK;
}

static ck_status fold_slice(fctx *c, const ck_onnx_node *n, int64_t opset, const dval *const *in,
                            int k, dval *o)
{
    const dval *x = in[0];
    int64_t st[CK_MAX_DIMS], en[CK_MAX_DIMS], step[CK_MAX_DIMS], dims[CK_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        st[d] = 0;
        en[d] = x->dims[d];
        step[d] = 1;
    }
    int m;
    double sv[CK_MAX_DIMS], ev[CK_MAX_DIMS], av[CK_MAX_DIMS], pv[CK_MAX_DIMS];
    if (opset < 10) {
        const ck_onnx_attr *as = attr(n, "starts"), *ae = attr(n, "ends"), *aa = attr(n, "axes");
        if (!as || !ae || as->n_ints != ae->n_ints || as->n_ints > CK_MAX_DIMS)
            return nope(c, "Slice needs starts and ends of one length");
        m = as->n_ints;
        for (int i = 0; i < m; i++) {
            sv[i] = (double)as->ints[i];
            ev[i] = (double)ae->ints[i];
            av[i] = aa && i < aa->n_ints ? (double)aa->ints[i] : i;
            pv[i] = 1;
        }
    } else {
        if (k < 3 || !in[1] || !in[2] || in[1]->numel != in[2]->numel ||
            in[1]->numel > CK_MAX_DIMS)
            return nope(c, "Slice needs constant starts and ends of one length");
        m = (int)in[1]->numel;
        for (int i = 0; i < m; i++) {
            sv[i] = in[1]->v[i];
            ev[i] = in[2]->v[i];
            av[i] = k > 3 && in[3] ? in[3]->v[i] : i;
            pv[i] = k > 4 && in[4] ? in[4]->v[i] : 1;
        }
    }
    for (int i = 0; i < m; i++) {
        int64_t a = axis_of(iv(av[i]), x->ndim), len;
        if (a < 0 || a >= x->ndim || pv[i] == 0)
            return nope(c, "Slice axis or step out of range");
        len = x->dims[a];
        double s = sv[i] < 0 ? sv[i] + (double)len : sv[i];
        double e = ev[i] < 0 ? ev[i] + (double)len : ev[i];
        step[a] = iv(pv[i]);
        if (step[a] > 0) {
            s = s < 0 ? 0 : s > len ? (double)len : s;
            e = e < 0 ? 0 : e > len ? (double)len : e;
        } else {
            s = s < 0 ? -1 : s > len - 1 ? (double)(len - 1) : s;
            e = e < -1 ? -1 : e > len - 1 ? (double)(len - 1) : e;
        }
        st[a] = iv(s);
        en[a] = iv(e);
    }
    for (int d = 0; d < x->ndim; d++) {
        int64_t span = step[d] > 0 ? en[d] - st[d] : st[d] - en[d];
        int64_t as = step[d] > 0 ? step[d] : -step[d];
        dims[d] = span > 0 ? (span + as - 1) / as : 0;
    }
    CK_TRY(make(c, o, x->ndim, dims));
    int64_t idx[CK_MAX_DIMS];
    for (int64_t f = 0; f < o->numel; f++) {
        unflat(f, o, idx);
        int64_t off = 0;
        for (int d = 0; d < x->ndim; d++)
            off = off * x->dims[d] + st[d] + idx[d] * step[d];
        o->v[f] = x->v[off];
    }
    return CK_OK;
}

static ck_status fold_transpose(fctx *c, const ck_onnx_node *n, const dval *x, dval *o)
{
    int64_t perm[CK_MAX_DIMS], dims[CK_MAX_DIMS], idx[CK_MAX_DIMS];
    const ck_onnx_attr *p = attr(n, "perm");
    if (p && p->n_ints != x->ndim)
        return nope(c, "Transpose perm of %d values for %d dims", p->n_ints, x->ndim);
    unsigned seen = 0;
    for (int d = 0; d < x->ndim; d++) {
        perm[d] = p ? p->ints[d] : x->ndim - 1 - d;
        if (perm[d] < 0 || perm[d] >= x->ndim)
            return nope(c, "Transpose perm out of range");
        if (seen & (1u << perm[d]))
            return nope(c, "Transpose perm repeats dim %d", (int)perm[d]);
        seen |= 1u << perm[d];
        dims[d] = x->dims[perm[d]];
    }
    CK_TRY(make(c, o, x->ndim, dims));
    for (int64_t f = 0; f < o->numel; f++) {
        unflat(f, o, idx);
        int64_t src[CK_MAX_DIMS], off = 0;
        for (int d = 0; d < x->ndim; d++)
            src[perm[d]] = idx[d];
        for (int d = 0; d < x->ndim; d++)
            off = off * x->dims[d] + src[d];
        o->v[f] = x->v[off];
    }
    return CK_OK;
}

static ck_status fold_reshape(fctx *c, const ck_onnx_node *n, const dval *x, const dval *s,
                              dval *o)
{
    int64_t dims[CK_MAX_DIMS], known = 1;
    int neg = -1;
    if (s->numel > CK_MAX_DIMS)
        return nope(c, "Reshape to more than %d dims", CK_MAX_DIMS);
    bool allowzero = attr_i(n, "allowzero", 0) != 0;
    for (int d = 0; d < s->numel; d++) {
        dims[d] = iv(s->v[d]);
        if (dims[d] == 0 && !allowzero) {
            if (d >= x->ndim)
                return nope(c, "Reshape dim %d is 0 beyond the input's rank", d);
            dims[d] = x->dims[d];
        }
        if (dims[d] == -1) {
            if (neg >= 0)
                return nope(c, "Reshape with two -1 dims");
            neg = d;
        } else if (dims[d] < 0) {
            return nope(c, "Reshape dim %lld", (long long)dims[d]);
        } else if (__builtin_mul_overflow(known, dims[d], &known)) {
            return nope(c, "Reshape dims whose product overflows");
        }
    }
    if (neg >= 0)
        dims[neg] = known ? x->numel / known : 0;
    CK_TRY(make(c, o, (int)s->numel, dims));
    if (o->numel != x->numel)
        return nope(c, "Reshape of %lld elements to %lld", (long long)x->numel,
                    (long long)o->numel);
    memcpy(o->v, x->v, (size_t)x->numel * sizeof *o->v);
    return CK_OK;
}

static ck_status fold_trilu(fctx *c, const ck_onnx_node *n, const dval *x, const dval *kk,
                            dval *o)
{
    if (x->ndim < 2)
        return nope(c, "Trilu of a constant of rank < 2");
    int64_t k = kk ? iv(kk->v[0]) : 0, R = x->dims[x->ndim - 2], C = x->dims[x->ndim - 1];
    bool upper = attr_i(n, "upper", 1) != 0;
    CK_TRY(make(c, o, x->ndim, x->dims));
    for (int64_t f = 0; f < o->numel; f++) {
        int64_t j = f % C, i = (f / C) % R;
        bool keep = upper ? j - i >= k : j - i <= k;
        o->v[f] = keep ? x->v[f] : 0;
    }
    return CK_OK;
}

/* The result's element type. */
static int out_type(const ck_onnx_node *n, const char *op, const ck_onnx_tensor *const *in)
{
    static const char *const cmp[] = {"Equal", "Less", "Greater", "LessOrEqual",
                                      "GreaterOrEqual", "And", "Or", "Not"};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (!strcmp(op, cmp[i]))
            return CK_ONNX_BOOL;
    if (!strcmp(op, "Shape") || !strcmp(op, "Size"))
        return CK_ONNX_INT64;
    if (!strcmp(op, "Cast"))
        return (int)attr_i(n, "to", 0);
    if (!strcmp(op, "ConstantOfShape")) {
        const ck_onnx_attr *v = attr(n, "value");
        return v && v->t ? v->t->data_type : CK_ONNX_FLOAT;
    }
    if (!strcmp(op, "Where"))
        return in[1]->data_type;
    return in[0]->data_type;
}

static ck_status eval(fctx *c, const ck_onnx_node *n, int64_t opset, const char *op,
                      const dval *const *d, int k, bool ints, dval *o)
{
    static const char *const bin[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal",
                                      "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                                      "Or", "Where", "Mod"};
    static const char *const un[] = {"Neg", "Sqrt", "Reciprocal", "Abs", "Floor", "Ceil",
                                     "Not", "Exp", "Log"};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (!strcmp(op, bin[i])) {
            int need = !strcmp(op, "Where") ? 3 : 2;
            if (k != need && !(k > 2 && (!strcmp(op, "Max") || !strcmp(op, "Min"))))
                return nope(c, "%s of %d inputs", op, k);
            return elementwise(c, op, d, need, ints, o);
        }
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (!strcmp(op, un[i])) {
            CK_TRY(make(c, o, d[0]->ndim, d[0]->dims));
            for (int64_t f = 0; f < o->numel; f++)
                o->v[f] = unary(op, d[0]->v[f]);
            return CK_OK;
        }
    if (!strcmp(op, "Identity") || !strcmp(op, "Cast")) {
        CK_TRY(make(c, o, d[0]->ndim, d[0]->dims));
        memcpy(o->v, d[0]->v, (size_t)d[0]->numel * sizeof *o->v);
        return CK_OK;
    }
    if (!strcmp(op, "Shape") || !strcmp(op, "Size")) {
        int64_t r = d[0]->ndim, s = axis_of(attr_i(n, "start", 0), (int)r),
                e = axis_of(attr_i(n, "end", r), (int)r);
        s = s < 0 ? 0 : s > r ? r : s;
        e = e < 0 ? 0 : e > r ? r : e;
        int64_t len = op[1] == 'i' ? 1 : (e > s ? e - s : 0);
        CK_TRY(make(c, o, op[1] == 'i' ? 0 : 1, &len));
        if (op[1] == 'i')
            o->v[0] = (double)d[0]->numel;
        for (int64_t i = 0; op[1] != 'i' && i < len; i++)
            o->v[i] = (double)d[0]->dims[s + i];
        return CK_OK;
    }
    if (!strcmp(op, "Unsqueeze"))
        return fold_unsqueeze(c, n, d[0], k > 1 ? d[1] : NULL, o);
    if (!strcmp(op, "Squeeze"))
        return fold_squeeze(c, n, d[0], k > 1 ? d[1] : NULL, o);
    if (!strcmp(op, "Concat"))
        return fold_concat(c, n, d, k, o);
    if (!strcmp(op, "Gather") && k == 2)
        return fold_gather(c, n, d[0], d[1], o);
    if (!strcmp(op, "Slice"))
        return fold_slice(c, n, opset, d, k, o);
    if (!strcmp(op, "Transpose"))
        return fold_transpose(c, n, d[0], o);
    if (!strcmp(op, "Reshape") && k == 2)
        return fold_reshape(c, n, d[0], d[1], o);
    if (!strcmp(op, "Trilu"))
        return fold_trilu(c, n, d[0], k > 1 ? d[1] : NULL, o);
    if (!strcmp(op, "Range") && k == 3) {
        double s = d[0]->v[0], l = d[1]->v[0], step = d[2]->v[0];
        if (step == 0 || d[0]->numel != 1 || d[1]->numel != 1 || d[2]->numel != 1)
            return nope(c, "Range needs scalar start, limit and a non-zero delta");
        double cnt = ceil((l - s) / step);
        if (!(cnt <= CK_ONNX_FOLD_MAX_ELEMS))
            return nope(c, "Range of more than %d elements", CK_ONNX_FOLD_MAX_ELEMS);
        int64_t len = cnt > 0 ? (int64_t)cnt : 0;
        CK_TRY(make(c, o, 1, &len));
        for (int64_t i = 0; i < len; i++)
            o->v[i] = s + (double)i * step;
        return CK_OK;
    }
    if (!strcmp(op, "ConstantOfShape")) {
        int64_t dims[CK_MAX_DIMS];
        if (d[0]->numel > CK_MAX_DIMS)
            return nope(c, "ConstantOfShape of more than %d dims", CK_MAX_DIMS);
        for (int i = 0; i < d[0]->numel; i++)
            dims[i] = iv(d[0]->v[i]);
        CK_TRY(make(c, o, (int)d[0]->numel, dims));
        const ck_onnx_attr *v = attr(n, "value");
        double fill = v && v->t && v->t->numel == 1 ? rd(v->t, 0) : 0.0;
        for (int64_t f = 0; f < o->numel; f++)
            o->v[f] = fill;
        return CK_OK;
    }
    if (!strcmp(op, "Expand") && k == 2) {
        dval sh;
        memset(&sh, 0, sizeof sh);
        if (d[1]->numel > CK_MAX_DIMS)
            return nope(c, "Expand to more than %d dims", CK_MAX_DIMS);
        sh.ndim = (int)d[1]->numel;
        for (int i = 0; i < sh.ndim; i++)
            sh.dims[i] = iv(d[1]->v[i]);
        const dval *two[2] = {d[0], &sh};
        int r;
        int64_t dims[CK_MAX_DIMS], idx[CK_MAX_DIMS];
        CK_TRY(bshape(c, two, 2, &r, dims));
        CK_TRY(make(c, o, r, dims));
        for (int64_t f = 0; f < o->numel; f++) {
            unflat(f, o, idx);
            o->v[f] = d[0]->v[bidx(d[0], idx, r)];
        }
        return CK_OK;
    }
    return CK_ERR_UNSUPPORTED;
}

ck_status ck_onnx_fold_eval(const ck_onnx_node *n, int64_t opset, const ck_onnx_tensor *const *in,
                            int n_in, ck_onnx_tensor *out, bool *handled, char *why,
                            size_t why_n)
{
    static const char *const ops[] = {
        "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "Greater",
        "LessOrEqual", "GreaterOrEqual", "And", "Or", "Where", "Mod", "Neg", "Sqrt", "Reciprocal",
        "Abs", "Floor", "Ceil", "Not", "Exp", "Log", "Identity", "Cast", "Shape", "Size",
        "Unsqueeze", "Squeeze", "Concat", "Gather", "Slice", "Transpose", "Reshape", "Trilu",
        "Range", "ConstantOfShape", "Expand"};
    fctx c = {why, why_n};
    const char *op = n->op_type;
    *handled = false;
    bool known = false;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0] && !known; i++)
        known = strcmp(op, ops[i]) == 0;
    if (!known || n_in < 1 || n_in > 8 || !in[0] || n->n_out < 1 || n->domain[0])
        return CK_OK;
    bool optional_inputs = !strcmp(op, "Slice") || !strcmp(op, "Squeeze") ||
                           !strcmp(op, "Unsqueeze") || !strcmp(op, "Trilu");
    for (int i = 1; i < n_in; i++)
        if (!in[i] && !optional_inputs)
            return CK_OK; /* an omitted input where the op needs one: not folded here */
    if (!strcmp(op, "Where") && n_in != 3)
        return CK_OK;
    int type = out_type(n, op, in);
    if (!ck_onnx_elem_size(type))
        return CK_OK;
    dval d[8], o;
    const dval *dp[8];
    memset(d, 0, sizeof d);
    memset(&o, 0, sizeof o);
    ck_status st = CK_OK;
    for (int i = 0; i < n_in && st == CK_OK; i++) {
        dp[i] = in[i] ? &d[i] : NULL;
        if (in[i])
            st = load(&c, in[i], &d[i]);
    }
    bool ints = is_int_type(in[0]->data_type);
    if (st == CK_OK)
        st = eval(&c, n, opset, op, dp, n_in, ints, &o);
    if (st == CK_ERR_UNSUPPORTED) {
        st = CK_OK; /* e.g. a Gather with a missing input: not folded here */
    } else if (st == CK_OK) {
        if (ck_onnx_tensor_from_f64(n->out[0], type, o.ndim, o.dims, o.v, out) != CK_OK)
            st = CK_ERR_NOMEM;
        else
            *handled = true;
    }
    for (int i = 0; i < n_in; i++)
        free(d[i].v);
    free(o.v);
    return st;
}
