/*
 * CPU nearest-neighbour upsampling (CK_OP_UPSAMPLE) by integer scale[] per spatial dim,
 * 1 to 3 spatial dims.
 *
 *   y[n, c, o...] = x[n, c, o / scale...]
 *
 * Backward sums dout over each scale0 x scale1 x scale2 block (in double). Every call is
 * brought to three spatial dims (missing leading dims have size 1); the kernels are
 * written once as a macro and instantiated for float and double.
 *
 * When x, y (and dout, dx) are all fp32 (or all fp64) the matching instantiation runs on
 * the tensors themselves. Otherwise (fp16/bf16, or dtypes mixed per tensor) they are
 * widened to double once per call and the fp64 kernel runs: forward copies values (exact
 * in the same dtype, rounded once into another), backward sums each block in double and
 * adds it to dx with one rounding (ref_elem.h, harness/precision.md).
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

// ----------------------------------------------------------------------------
// geometry

/* planes (N * C), in/out spatial sizes (D, H, W), scale; filled and checked by
 * ck_opc_upsample_setup (backends/check/check.h) */
typedef ck_upsample_geom upsample_geom;

// ----------------------------------------------------------------------------
// kernels, one instantiation per element type

#define UPSAMPLE_KERNELS(T, SFX)                                                               \
    static void upsample_forward_##SFX(T *out, const T *inp, const upsample_geom *g)           \
    {                                                                                          \
        /* out (N, C, I0*s0, I1*s1, I2*s2), inp (N, C, I0, I1, I2) */                          \
        const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];                               \
        const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];                           \
        const int64_t s2 = g->scale[2];                                                        \
        for (int64_t p = 0; p < g->planes; p++) {                                              \
            const T *x = inp + p * in_plane;                                                   \
            T *y = out + p * out_plane;                                                        \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++) {                                       \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++) {                                   \
                    const T *xr = x + ((o0 / g->scale[0]) * g->in[1] + o1 / g->scale[1]) *     \
                                          g->in[2];                                            \
                    T *yr = y + (o0 * g->out[1] + o1) * g->out[2];                             \
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++)                                  \
                        for (int64_t r = 0; r < s2; r++)                                       \
                            yr[i2 * s2 + r] = xr[i2];                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    static void upsample_backward_##SFX(T *dinp, const T *dout, const upsample_geom *g)        \
    {                                                                                          \
        /* dinp (N, C, I0, I1, I2) accumulated, dout (N, C, I0*s0, I1*s1, I2*s2) */            \
        const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];                               \
        const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];                           \
        for (int64_t p = 0; p < g->planes; p++) {                                              \
            T *dx = dinp + p * in_plane;                                                       \
            const T *dy = dout + p * out_plane;                                                \
            for (int64_t i0 = 0; i0 < g->in[0]; i0++) {                                        \
                for (int64_t i1 = 0; i1 < g->in[1]; i1++) {                                    \
                    T *dxr = dx + (i0 * g->in[1] + i1) * g->in[2];                             \
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++) {                                \
                        double acc = 0.0;                                                      \
                        for (int64_t r0 = 0; r0 < g->scale[0]; r0++) {                         \
                            for (int64_t r1 = 0; r1 < g->scale[1]; r1++) {                     \
                                const T *dyb = dy + ((i0 * g->scale[0] + r0) * g->out[1] +     \
                                                     i1 * g->scale[1] + r1) * g->out[2] +      \
                                               i2 * g->scale[2];                               \
                                for (int64_t r2 = 0; r2 < g->scale[2]; r2++)                   \
                                    acc += (double)dyb[r2];                                    \
                            }                                                                  \
                        }                                                                      \
                        dxr[i2] += (T)acc;                                                     \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

UPSAMPLE_KERNELS(float, f32)
UPSAMPLE_KERNELS(double, f64)

#undef UPSAMPLE_KERNELS

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

static ck_status nearest_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                               ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, io->out};
    ck_status st = ref_check_float_dtypes("upsample", all, 2, err);
    if (st != CK_OK)
        return st;
    upsample_geom g;
    if ((st = ck_opc_upsample_setup(op, x, io->out, &g, err)) != CK_OK)
        return st;
    switch (ref_common_dtype(all, 2)) {
    case CK_F32: upsample_forward_f32(io->out->data, x->data, &g); return CK_OK;
    case CK_F64: upsample_forward_f64(io->out->data, x->data, &g); return CK_OK;
    default: break;
    }
    /* low or mixed dtypes: the fp64 kernel on wide views, each output rounded once */
    ref_wide wx = {NULL, NULL}, wy = {NULL, NULL};
    if ((st = ref_wide_in("upsample", x, &wx, err)) == CK_OK &&
        (st = ref_wide_out("upsample", io->out, false, &wy, err)) == CK_OK) {
        upsample_forward_f64(wy.data, wx.data, &g);
        ref_wide_store(io->out, &wy);
    }
    ref_wide_free(&wx);
    ref_wide_free(&wy);
    return st;
}

static ck_status nearest_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, g->dout, g->din[0]};
    ck_status st = ref_check_float_dtypes("upsample", all, 3, err);
    if (st != CK_OK)
        return st;
    upsample_geom geom;
    if ((st = ck_opc_upsample_setup(op, x, g->dout, &geom, err)) != CK_OK)
        return st;
    if (!g->din[0])
        return CK_OK;
    switch (ref_common_dtype(all, 3)) {
    case CK_F32: upsample_backward_f32(g->din[0]->data, g->dout->data, &geom); return CK_OK;
    case CK_F64: upsample_backward_f64(g->din[0]->data, g->dout->data, &geom); return CK_OK;
    default: break;
    }
    /* low or mixed dtypes: dx computed from zero in double, then added with one rounding */
    ref_wide wdy = {NULL, NULL}, wdx = {NULL, NULL};
    if ((st = ref_wide_in("upsample", g->dout, &wdy, err)) == CK_OK &&
        (st = ref_wide_out("upsample", g->din[0], true, &wdx, err)) == CK_OK) {
        upsample_backward_f64(wdx.data, wdy.data, &geom);
        ref_wide_accumulate(g->din[0], &wdx);
    }
    ref_wide_free(&wdy);
    ref_wide_free(&wdx);
    return st;
}

/*
 * Linear / bilinear / trilinear upsampling (PyTorch interpolate, mode linear|bilinear|
 * trilinear, integer scale_factor), in double (wide_kernels.h). Per dim, output o reads source
 * coordinate src = o (in - 1) / (out - 1) with align_corners (0 when out == 1), else
 * max((o + 0.5) in / out - 0.5, 0); i0 = floor(src), i1 = min(i0 + 1, in - 1),
 * l1 = src - i0, l0 = 1 - l1. Forward sums the 2^3 corner products (size-1 dims give a
 * single corner of weight 1). Backward scatters into dx (a zeroed wide buffer in the entry
 * points, so each dx element is rounded once).
 */
#include "backends/ref/wide_scope.h"

#include <math.h>

typedef struct {
    int64_t i0, i1;
    double l0, l1;
} tap;

static tap src_tap(const ck_lerp_geom *g, int a, int64_t o)
{
    tap t;
    const int64_t in = g->in[a], out = g->out[a];
    double src;
    if (g->align_corners)
        src = out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0.0;
    else {
        src = ((double)o + 0.5) * (double)in / (double)out - 0.5;
        if (src < 0.0)
            src = 0.0;
    }
    t.i0 = (int64_t)src;
    if (t.i0 > in - 1)
        t.i0 = in - 1;
    t.i1 = t.i0 + 1 < in ? t.i0 + 1 : in - 1;
    t.l1 = src - (double)t.i0;
    t.l0 = 1.0 - t.l1;
    return t;
}

void f64_upsample_linear_fwd(double *y, const double *x, const ck_lerp_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    for (int64_t p = 0; p < g->planes; p++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
            tap a = src_tap(g, 0, o0);
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                tap b = src_tap(g, 1, o1);
                for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                    tap c = src_tap(g, 2, o2);
                    const double *xp = x + p * ivol;
#define X(i, j, k) xp[((i) * g->in[1] + (j)) * g->in[2] + (k)]
                    double v = a.l0 * (b.l0 * (c.l0 * X(a.i0, b.i0, c.i0) + c.l1 * X(a.i0, b.i0, c.i1)) +
                                       b.l1 * (c.l0 * X(a.i0, b.i1, c.i0) + c.l1 * X(a.i0, b.i1, c.i1))) +
                               a.l1 * (b.l0 * (c.l0 * X(a.i1, b.i0, c.i0) + c.l1 * X(a.i1, b.i0, c.i1)) +
                                       b.l1 * (c.l0 * X(a.i1, b.i1, c.i0) + c.l1 * X(a.i1, b.i1, c.i1)));
#undef X
                    y[p * ovol + (o0 * g->out[1] + o1) * g->out[2] + o2] = v;
                }
            }
        }
}

void f64_upsample_linear_bwd(double *dx, const double *dy, const ck_lerp_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    for (int64_t p = 0; p < g->planes; p++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
            tap a = src_tap(g, 0, o0);
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                tap b = src_tap(g, 1, o1);
                for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                    tap c = src_tap(g, 2, o2);
                    double gv = dy[p * ovol + (o0 * g->out[1] + o1) * g->out[2] + o2];
                    double *xp = dx + p * ivol;
                    const int64_t ii[2] = {a.i0, a.i1}, jj[2] = {b.i0, b.i1}, kk[2] = {c.i0, c.i1};
                    const double la[2] = {a.l0, a.l1}, lb[2] = {b.l0, b.l1}, lc[2] = {c.l0, c.l1};
                    for (int u = 0; u < 2; u++)
                        for (int v = 0; v < 2; v++)
                            for (int w = 0; w < 2; w++)
                                xp[(ii[u] * g->in[1] + jj[v]) * g->in[2] + kk[w]] +=
                                    gv * la[u] * lb[v] * lc[w];
                }
            }
        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_UPSAMPLE with mode linear/bilinear/trilinear

static ck_status linear_op_forward(const ck_op_params *op, const ck_fwd_args *args,
                                      ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_lerp_geom g;
    CK_TRY(ck_opc_upsample_linear(REF_BE, op, io->in[0], io->out, &g, err));
    ref_scope s;
    ref_scope_begin(&s, "upsample", err);
    const double *x = ref_scope_in(&s, io->in[0]);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_upsample_linear_fwd(y, x, &g);
    return ref_scope_end(&s, true);
}

static ck_status linear_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                       const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_lerp_geom geo;
    CK_TRY(ck_opc_upsample_linear(REF_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    ref_scope s;
    ref_scope_begin(&s, "upsample backward", err);
    const double *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]);
    if (s.st == CK_OK)
        f64_upsample_linear_bwd(dx, dy, &geo);
    return ref_scope_end(&s, true);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_UPSAMPLE:
        return ck_upsample_is_linear(op) ? (ref_op_fns){linear_op_forward, linear_op_backward}
                                              : (ref_op_fns){nearest_op_forward, nearest_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(upsample, pick)
