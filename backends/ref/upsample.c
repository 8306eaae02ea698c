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
#include "backends/ref/ref_elem.h"

// ----------------------------------------------------------------------------
// geometry

/* planes (N * C), in/out spatial sizes (D, H, W), scale; filled and checked by
 * ck_opc_upsample_setup (backends/op_check.h) */
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

ck_status ref_upsample_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
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

ck_status ref_upsample_backward(const ck_op_params *op, const ck_fwd_args *args,
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
