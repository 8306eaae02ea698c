/*
 * The CUDA backend's own fp64 convolution (conv1d/2d/3d, stride, padding, dilation,
 * groups 1): what runs instead of cuDNN when a call's tensors are all fp64 (gradient
 * checks) or of mixed dtypes (then on fp64 copies, cuda_forward_wide/cuda_backward_wide).
 * cuDNN may offer no deterministic DOUBLE algorithm for a 3-D backward pass; these need none.
 *
 * Gather formulation, one GPU thread per element written, no atomics: each function below
 * computes one output element from its inputs with a fixed-order sum, and the order is the
 * one backends/ref/conv.c uses for that element, so the results are bitwise the CPU
 * reference's (fp64 products and sums, no fused multiply-add: device code is compiled with
 * -fmad=false):
 *   forward          y[n,f,o]  = b[f] (or 0), then + W[f,c,k]·x[n,c,o·s+k·d−p] for c, then k
 *   backward data    dx[n,c,p] = dx (its old value), then + W[f,c,k]·dy[n,f,o] for f, then k,
 *                    where o·s + k·d − p_lo = p
 *   backward filter  dW[f,c,k] += Σ_{o2} ( Σ_{n, o0, o1} dy[n,f,o]·x[n,c,o·s+k·d−p] )
 *                    (a tap that reads no input leaves dW unchanged, as the CPU skips it)
 *   bias             db[f] += Σ_{n, o} dy[n,f,o], in (n, o) order
 *
 * The element functions are plain C marked CK_CD_HD, so the same code is compiled by nvcc for
 * the device (conv.cu launches them) and by the C compiler for the host, where
 * tests/test_cuda_cpu.c runs them over every element and compares them bit for bit with the
 * CPU backend. Geometry setup is in conv_direct.c.
 */
#ifndef CK_CUDA_CONV_DIRECT_H
#define CK_CUDA_CONV_DIRECT_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/check/check.h" /* C linkage from C++ too; numerics.h's CK_HD */

#define CK_CD_HD CK_HD

#ifdef __cplusplus
extern "C" {
#endif

/* A call's shapes brought to three spatial dims (backends/check/geometry.h). */
typedef ck_conv_geom3 ck_conv_direct_geom;

/* Checks x (N, C, s...), W (F, C, k...), b (F) and y (N, F, o...) against op (the shared
 * checks of backends/check/check.h) and fills g. */
static inline ck_status ck_conv_direct_setup(const ck_op_params *op, const ck_tensor *x,
                                             const ck_tensor *w, const ck_tensor *b,
                                             const ck_tensor *y, ck_conv_direct_geom *g,
                                             ck_error *err)
{
    return ck_opc_conv_geom3(op, x, w, b, y, g, err);
}

static inline CK_CD_HD int64_t ck_cd_kvol(const ck_conv_direct_geom *g)
{
    return g->k[0] * g->k[1] * g->k[2];
}

static inline CK_CD_HD int64_t ck_cd_ivol(const ck_conv_direct_geom *g)
{
    return g->in[0] * g->in[1] * g->in[2];
}

static inline CK_CD_HD int64_t ck_cd_ovol(const ck_conv_direct_geom *g)
{
    return g->out[0] * g->out[1] * g->out[2];
}

/* y element i (row-major over (N, F, O0, O1, O2)); b may be NULL */
static inline CK_CD_HD double ck_conv_direct_forward_at(const ck_conv_direct_geom *g,
                                                     const double *x, const double *w,
                                                     const double *b, int64_t i)
{
    int64_t o[3], t = i;
    o[2] = t % g->out[2];
    t /= g->out[2];
    o[1] = t % g->out[1];
    t /= g->out[1];
    o[0] = t % g->out[0];
    t /= g->out[0];
    const int64_t f = t % g->F, n = t / g->F;
    const int64_t kvol = ck_cd_kvol(g), ivol = ck_cd_ivol(g);
    double y = b ? b[f] : 0.0;
    for (int64_t c = 0; c < g->C; c++) {
        const double *xp = x + (n * g->C + c) * ivol;
        const double *wp = w + (f * g->C + c) * kvol;
        int64_t kk = 0;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
            const int64_t p0 = o[0] * g->stride[0] + k0 * g->dil[0] - g->pad_lo[0];
            for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                const int64_t p1 = o[1] * g->stride[1] + k1 * g->dil[1] - g->pad_lo[1];
                for (int64_t k2 = 0; k2 < g->k[2]; k2++, kk++) {
                    const int64_t p2 = o[2] * g->stride[2] + k2 * g->dil[2] - g->pad_lo[2];
                    if (p0 < 0 || p0 >= g->in[0] || p1 < 0 || p1 >= g->in[1] || p2 < 0 ||
                        p2 >= g->in[2])
                        continue;
                    const double prod = wp[kk] * xp[(p0 * g->in[1] + p1) * g->in[2] + p2];
                    y = y + prod;
                }
            }
        }
    }
    return y;
}

/* o on one axis with o·stride + base = p, 0 <= o < out; false when there is none */
static inline CK_CD_HD bool ck_cd_out_pos(int64_t p, int64_t base, int64_t stride, int64_t out,
                                       int64_t *o)
{
    const int64_t d = p - base;
    if (d < 0 || d % stride != 0)
        return false;
    *o = d / stride;
    return *o < out;
}

/* the new value of dx element i (row-major over (N, C, I0, I1, I2)), old its value now */
static inline CK_CD_HD double ck_conv_direct_backward_data_at(const ck_conv_direct_geom *g,
                                                           const double *dy, const double *w,
                                                           double old, int64_t i)
{
    int64_t p[3], t = i;
    p[2] = t % g->in[2];
    t /= g->in[2];
    p[1] = t % g->in[1];
    t /= g->in[1];
    p[0] = t % g->in[0];
    t /= g->in[0];
    const int64_t c = t % g->C, n = t / g->C;
    const int64_t kvol = ck_cd_kvol(g), ovol = ck_cd_ovol(g);
    double acc = old;
    for (int64_t f = 0; f < g->F; f++) {
        const double *dyp = dy + (n * g->F + f) * ovol;
        const double *wp = w + (f * g->C + c) * kvol;
        int64_t kk = 0;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
            int64_t o0 = 0;
            const bool v0 = ck_cd_out_pos(p[0], k0 * g->dil[0] - g->pad_lo[0], g->stride[0],
                                          g->out[0], &o0);
            for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                int64_t o1 = 0;
                const bool v1 = v0 && ck_cd_out_pos(p[1], k1 * g->dil[1] - g->pad_lo[1],
                                                    g->stride[1], g->out[1], &o1);
                for (int64_t k2 = 0; k2 < g->k[2]; k2++, kk++) {
                    int64_t o2 = 0;
                    if (!v1 || !ck_cd_out_pos(p[2], k2 * g->dil[2] - g->pad_lo[2],
                                              g->stride[2], g->out[2], &o2))
                        continue;
                    const double prod = wp[kk] * dyp[(o0 * g->out[1] + o1) * g->out[2] + o2];
                    acc = acc + prod;
                }
            }
        }
    }
    return acc;
}

/* [*lo, *hi): the output positions on one axis whose input o·stride + base lies in [0, in) */
static inline CK_CD_HD void ck_cd_valid_range(int64_t base, int64_t stride, int64_t in, int64_t out,
                                           int64_t *lo, int64_t *hi)
{
    const int64_t l = base >= 0 ? 0 : (-base + stride - 1) / stride;
    int64_t h = in - 1 - base < 0 ? 0 : (in - 1 - base) / stride + 1;
    if (h > out)
        h = out;
    *lo = l < h ? l : h;
    *hi = h;
}

/* the new value of dW element i (row-major over (F, C, K0, K1, K2)), old its value now */
static inline CK_CD_HD double ck_conv_direct_backward_filter_at(const ck_conv_direct_geom *g,
                                                             const double *x, const double *dy,
                                                             double old, int64_t i)
{
    int64_t k[3], t = i;
    k[2] = t % g->k[2];
    t /= g->k[2];
    k[1] = t % g->k[1];
    t /= g->k[1];
    k[0] = t % g->k[0];
    t /= g->k[0];
    const int64_t c = t % g->C, f = t / g->C;
    int64_t base[3], lo[3], hi[3];
    for (int a = 0; a < 3; a++) {
        base[a] = k[a] * g->dil[a] - g->pad_lo[a];
        ck_cd_valid_range(base[a], g->stride[a], g->in[a], g->out[a], &lo[a], &hi[a]);
        if (lo[a] == hi[a])
            return old; /* the tap reads no input: the CPU skips it */
    }
    const int64_t ivol = ck_cd_ivol(g), ovol = ck_cd_ovol(g);
    double acc = 0.0;
    for (int64_t o2 = lo[2]; o2 < hi[2]; o2++) {
        const int64_t p2 = o2 * g->stride[2] + base[2];
        double col = 0.0;
        for (int64_t n = 0; n < g->N; n++) {
            const double *xp = x + (n * g->C + c) * ivol;
            const double *dyp = dy + (n * g->F + f) * ovol;
            for (int64_t o0 = lo[0]; o0 < hi[0]; o0++) {
                const int64_t p0 = o0 * g->stride[0] + base[0];
                for (int64_t o1 = lo[1]; o1 < hi[1]; o1++) {
                    const int64_t p1 = o1 * g->stride[1] + base[1];
                    const double prod = dyp[(o0 * g->out[1] + o1) * g->out[2] + o2] *
                                        xp[(p0 * g->in[1] + p1) * g->in[2] + p2];
                    col = col + prod;
                }
            }
        }
        acc = acc + col;
    }
    return old + acc;
}

/* the new value of db[f], old its value now */
static inline CK_CD_HD double ck_conv_direct_backward_bias_at(const ck_conv_direct_geom *g,
                                                           const double *dy, double old,
                                                           int64_t f)
{
    const int64_t ovol = ck_cd_ovol(g);
    double acc = 0.0;
    for (int64_t n = 0; n < g->N; n++) {
        const double *dyp = dy + (n * g->F + f) * ovol;
        for (int64_t j = 0; j < ovol; j++)
            acc = acc + dyp[j];
    }
    return old + acc;
}

#ifdef __cplusplus
}
#endif

#endif
