/*
 * CPU pooling (CK_OP_MAXPOOL, CK_OP_AVGPOOL) over 1 to 3 spatial dims.
 *
 * Windows are kernel[] wide, step stride[], never padded, and the output size is floored
 * (the graph builder computed it; it is taken from the output tensor). Max pooling keeps
 * the first maximum in the window's row-major scan; a NaN in the window wins over any
 * number (the first NaN, as scanned), so NaN propagates as in PyTorch. Backward recomputes
 * the winner from the input: nothing is saved. Every call is brought to three spatial
 * dims (missing leading dims have size 1); the kernels are written once as a macro and
 * instantiated for float and double.
 *
 * When x, y (and dout, dx) are all fp32 (or all fp64) the matching instantiation runs on
 * the tensors themselves. Otherwise (fp16/bf16, or dtypes mixed per tensor) they are
 * widened to double once per call and the fp64 kernel runs: a max pool output is the
 * winning input value (exact in any dtype), an average is summed in double and rounded
 * once; dx is computed from zero in double (overlapping windows add up there) and then
 * added to the existing values with one rounding (ref_elem.h, harness/precision.md).
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <math.h>

// ----------------------------------------------------------------------------
// geometry

/* planes (N * C), in/out spatial sizes (D, H, W), kernel, stride; filled and checked by
 * ck_opc_pool_setup (backends/check/check.h) */
typedef ck_pool_geom pool_geom;

/* Offset in an input plane of the window of output (o0, o1, o2). */
static inline int64_t window_origin(const pool_geom *g, int64_t o0, int64_t o1, int64_t o2)
{
    return (o0 * g->stride[0] * g->in[1] + o1 * g->stride[1]) * g->in[2] + o2 * g->stride[2];
}

// ----------------------------------------------------------------------------
// kernels, one instantiation per element type

#define POOL_KERNELS(T, SFX)                                                                   \
    /* Offset (from the window origin xw) of the first maximum, or of the first NaN. */        \
    static int64_t max_window_##SFX(const T *xw, const pool_geom *g)                           \
    {                                                                                          \
        int64_t best_off = 0;                                                                  \
        T best = xw[0];                                                                        \
        for (int64_t k0 = 0; k0 < g->kernel[0]; k0++) {                                        \
            for (int64_t k1 = 0; k1 < g->kernel[1]; k1++) {                                    \
                for (int64_t k2 = 0; k2 < g->kernel[2]; k2++) {                                \
                    const int64_t off = (k0 * g->in[1] + k1) * g->in[2] + k2;                  \
                    const T v = xw[off];                                                       \
                    if (!isnan(best) && (v > best || isnan(v))) {                              \
                        best = v;                                                              \
                        best_off = off;                                                        \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        return best_off;                                                                       \
    }                                                                                          \
                                                                                               \
    /* Sum over the window at xw, in the element type, row-major. */                           \
    static T sum_window_##SFX(const T *xw, const pool_geom *g)                                 \
    {                                                                                          \
        T acc = 0;                                                                             \
        for (int64_t k0 = 0; k0 < g->kernel[0]; k0++)                                          \
            for (int64_t k1 = 0; k1 < g->kernel[1]; k1++)                                      \
                for (int64_t k2 = 0; k2 < g->kernel[2]; k2++)                                  \
                    acc += xw[(k0 * g->in[1] + k1) * g->in[2] + k2];                           \
        return acc;                                                                            \
    }                                                                                          \
                                                                                               \
    static void pool_forward_##SFX(T *out, const T *inp, bool is_max, const pool_geom *g)      \
    {                                                                                          \
        /* out (N, C, O0, O1, O2), inp (N, C, I0, I1, I2) */                                   \
        const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];                               \
        const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];                           \
        const T kvol = (T)(g->kernel[0] * g->kernel[1] * g->kernel[2]);                        \
        for (int64_t p = 0; p < g->planes; p++) {                                              \
            const T *x = inp + p * in_plane;                                                   \
            T *y = out + p * out_plane;                                                        \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++) {                                       \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++) {                                   \
                    T *yr = y + (o0 * g->out[1] + o1) * g->out[2];                             \
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {                               \
                        const T *xw = x + window_origin(g, o0, o1, o2);                        \
                        yr[o2] = is_max ? xw[max_window_##SFX(xw, g)]                          \
                                        : sum_window_##SFX(xw, g) / kvol;                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    static void pool_backward_##SFX(T *dinp, const T *dout, const T *inp, bool is_max,         \
                                    const pool_geom *g)                                        \
    {                                                                                          \
        /* dinp (N, C, I0, I1, I2) accumulated, dout (N, C, O0, O1, O2), inp like dinp */      \
        const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];                               \
        const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];                           \
        const T kvol = (T)(g->kernel[0] * g->kernel[1] * g->kernel[2]);                        \
        for (int64_t p = 0; p < g->planes; p++) {                                              \
            const T *x = inp + p * in_plane;                                                   \
            T *dx = dinp + p * in_plane;                                                       \
            const T *dy = dout + p * out_plane;                                                \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++) {                                       \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++) {                                   \
                    const T *dyr = dy + (o0 * g->out[1] + o1) * g->out[2];                     \
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {                               \
                        const int64_t origin = window_origin(g, o0, o1, o2);                   \
                        if (is_max) {                                                          \
                            dx[origin + max_window_##SFX(x + origin, g)] += dyr[o2];           \
                            continue;                                                          \
                        }                                                                      \
                        const T d = dyr[o2] / kvol;                                            \
                        T *dxw = dx + origin;                                                  \
                        for (int64_t k0 = 0; k0 < g->kernel[0]; k0++)                          \
                            for (int64_t k1 = 0; k1 < g->kernel[1]; k1++)                      \
                                for (int64_t k2 = 0; k2 < g->kernel[2]; k2++)                  \
                                    dxw[(k0 * g->in[1] + k1) * g->in[2] + k2] += d;            \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

POOL_KERNELS(float, f32)
POOL_KERNELS(double, f64)

#undef POOL_KERNELS

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

static ck_status pool_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                           ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, io->out};
    const char *what = ck_opc_pool_name(op);
    ck_status st = ref_check_float_dtypes(what, all, 2, err);
    if (st != CK_OK)
        return st;
    bool is_max;
    pool_geom g;
    if ((st = ck_opc_pool_setup(op, x, io->out, &is_max, &g, err)) != CK_OK)
        return st;
    switch (ref_common_dtype(all, 2)) {
    case CK_F32: pool_forward_f32(io->out->data, x->data, is_max, &g); return CK_OK;
    case CK_F64: pool_forward_f64(io->out->data, x->data, is_max, &g); return CK_OK;
    default: break;
    }
    /* low or mixed dtypes: the fp64 kernel on wide views, each output rounded once */
    ref_wide wx = {NULL, NULL}, wy = {NULL, NULL};
    if ((st = ref_wide_in(what, x, &wx, err)) == CK_OK &&
        (st = ref_wide_out(what, io->out, false, &wy, err)) == CK_OK) {
        pool_forward_f64(wy.data, wx.data, is_max, &g);
        ref_wide_store(io->out, &wy);
    }
    ref_wide_free(&wx);
    ref_wide_free(&wy);
    return st;
}

static ck_status pool_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, g->dout, g->din[0]};
    const char *what = ck_opc_pool_name(op);
    ck_status st = ref_check_float_dtypes(what, all, 3, err);
    if (st != CK_OK)
        return st;
    bool is_max;
    pool_geom geom;
    if ((st = ck_opc_pool_setup(op, x, g->dout, &is_max, &geom, err)) != CK_OK)
        return st;
    if (!g->din[0])
        return CK_OK;
    switch (ref_common_dtype(all, 3)) {
    case CK_F32:
        pool_backward_f32(g->din[0]->data, g->dout->data, x->data, is_max, &geom);
        return CK_OK;
    case CK_F64:
        pool_backward_f64(g->din[0]->data, g->dout->data, x->data, is_max, &geom);
        return CK_OK;
    default:
        break;
    }
    /* low or mixed dtypes: dx computed from zero in double, then added with one rounding */
    ref_wide wx = {NULL, NULL}, wdy = {NULL, NULL}, wdx = {NULL, NULL};
    /* avgpool's backward reads no value of x (its row: backward reads nothing) */
    if ((!is_max || (st = ref_wide_in(what, x, &wx, err)) == CK_OK) &&
        (st = ref_wide_in(what, g->dout, &wdy, err)) == CK_OK &&
        (st = ref_wide_out(what, g->din[0], true, &wdx, err)) == CK_OK) {
        pool_backward_f64(wdx.data, wdy.data, wx.data, is_max, &geom);
        ref_wide_accumulate(g->din[0], &wdx);
    }
    ref_wide_free(&wx);
    ref_wide_free(&wdy);
    ref_wide_free(&wdx);
    return st;
}

/*
 * Pooling with symmetric padding (PyTorch MaxPool/AvgPool{1,2,3}d, floor mode), in double
 * (wide_kernels.h). Max: padded positions are -inf (never chosen: PyTorch requires pad <= k / 2, so
 * every window holds a real element); the first maximum in the row-major scan wins, a NaN
 * wins over any number. Avg: the window sum of real elements over the divisor
 * (count_include_pad: the window clipped to the padded input; else the real elements).
 * Backward recomputes the winner from x; dx is a zeroed wide buffer in the entry points.
 */
#include "backends/ref/wide_scope.h"

#include <math.h>

typedef struct {
    int64_t lo[3], hi[3]; /* real input range [lo, hi) of the window */
    int64_t div;          /* avg divisor */
} window;

static window window_at(const ck_pool_pad_geom *g, const int64_t *o)
{
    window w;
    int64_t padded = 1, real = 1;
    for (int a = 0; a < 3; a++) {
        int64_t start = o[a] * g->stride[a] - g->pad[a];
        int64_t end = start + g->k[a];
        int64_t pend = end < g->in[a] + g->pad[a] ? end : g->in[a] + g->pad[a];
        padded *= pend - start;
        w.lo[a] = start < 0 ? 0 : start;
        w.hi[a] = end < g->in[a] ? end : g->in[a];
        real *= w.hi[a] - w.lo[a];
    }
    w.div = g->count_include_pad ? padded : real;
    return w;
}

/* flat in-plane index of the window's winner (max) */
static int64_t argmax(const double *xp, const ck_pool_pad_geom *g, const window *w)
{
    int64_t best = -1;
    double bv = -INFINITY;
    for (int64_t i0 = w->lo[0]; i0 < w->hi[0]; i0++)
        for (int64_t i1 = w->lo[1]; i1 < w->hi[1]; i1++)
            for (int64_t i2 = w->lo[2]; i2 < w->hi[2]; i2++) {
                int64_t idx = (i0 * g->in[1] + i1) * g->in[2] + i2;
                double v = xp[idx];
                if (best < 0 || (!isnan(bv) && (v > bv || isnan(v)))) {
                    bv = v;
                    best = idx;
                }
            }
    return best;
}

void f64_pool_fwd(double *y, const double *x, const ck_pool_pad_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    int64_t o[3];
    for (int64_t p = 0; p < g->planes; p++) {
        const double *xp = x + p * ivol;
        for (o[0] = 0; o[0] < g->out[0]; o[0]++)
            for (o[1] = 0; o[1] < g->out[1]; o[1]++)
                for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
                    window w = window_at(g, o);
                    double v;
                    if (g->is_max) {
                        v = xp[argmax(xp, g, &w)];
                    } else {
                        double s = 0.0;
                        for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0++)
                            for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1++)
                                for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2++)
                                    s += xp[(i0 * g->in[1] + i1) * g->in[2] + i2];
                        v = s / (double)w.div;
                    }
                    y[p * ovol + (o[0] * g->out[1] + o[1]) * g->out[2] + o[2]] = v;
                }
    }
}

void f64_pool_bwd(double *dx, const double *dy, const double *x, const ck_pool_pad_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    int64_t o[3];
    for (int64_t p = 0; p < g->planes; p++) {
        const double *xp = x + p * ivol;
        double *dp = dx + p * ivol;
        for (o[0] = 0; o[0] < g->out[0]; o[0]++)
            for (o[1] = 0; o[1] < g->out[1]; o[1]++)
                for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
                    window w = window_at(g, o);
                    double gv = dy[p * ovol + (o[0] * g->out[1] + o[1]) * g->out[2] + o[2]];
                    if (g->is_max) {
                        dp[argmax(xp, g, &w)] += gv;
                        continue;
                    }
                    double share = gv / (double)w.div;
                    for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0++)
                        for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1++)
                            for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2++)
                                dp[(i0 * g->in[1] + i1) * g->in[2] + i2] += share;
                }
    }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_MAXPOOL, CK_OP_AVGPOOL with padding (the dispatcher
// sends unpadded pools to pool.c, whose results are unchanged)

static ck_status pool_pad_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                               ck_error *err)
{
    (void)args;
    ck_pool_pad_geom g;
    CK_TRY(ck_opc_pool_pad(REF_BE, op, io->in[0], io->out, &g, err));
    ref_scope s;
    ref_scope_begin(&s, g.is_max ? "maxpool" : "avgpool", err);
    const double *x = ref_scope_in(&s, io->in[0]);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_pool_fwd(y, x, &g);
    return ref_scope_end(&s, true);
}

static ck_status pool_pad_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_pool_pad_geom geo;
    CK_TRY(ck_opc_pool_pad(REF_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    ref_scope s;
    ref_scope_begin(&s, geo.is_max ? "maxpool backward" : "avgpool backward", err);
    /* avgpool's backward reads no value of x (its row: backward reads nothing) */
    const double *x = geo.is_max ? ref_scope_in(&s, io->in[0]) : NULL;
    const double *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]);
    if (s.st == CK_OK)
        f64_pool_bwd(dx, dy, x, &geo);
    return ref_scope_end(&s, true);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL:
        /* padded windows (or count_include_pad false) take the padded kernel */
        return ck_pool_is_padded(op) ? (ref_op_fns){pool_pad_op_forward, pool_pad_op_backward}
                                      : (ref_op_fns){pool_op_forward, pool_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(pool, pick)
