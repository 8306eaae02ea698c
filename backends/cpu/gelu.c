/*
 * Fast CPU GELU, tanh form (PyTorch's gelu(approximate='tanh')), fp32 x, y, dy and dx:
 * threaded by element ranges, vectorised in double on every ISA path (8 lanes AVX-512, 4
 * AVX2, 2 SSE2/portable), with the C library's tanh replaced by one exp:
 *     0.5 x (1 + tanh(u)) = x s,   s = 1 / (1 + e^(-2u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
 *     gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 0.044715 x^2)
 * e^v is a Taylor polynomial after the usual reduction (gelu_lanes.h): relative error
 * below 1e-14, far below fp32's 6e-8, so each result is the exactly rounded fp32 value of
 * the formula except within about 1e-14 of a rounding boundary, where it may be the
 * neighbour: NOT the reference backend's bits (which come from libm's tanh), within one
 * fp32 ulp of them. Every ISA path and thread count gives the same bits: the same IEEE
 * double operations per element, no fma (C11 with the pragma below keeps `a * b + c`
 * unfused even where a path's target has FMA), no reduction. The forward follows the
 * reference at the edges: x = -Inf gives NaN (its -Inf * 0), +Inf gives +Inf, NaN NaN.
 * Other dtypes, mixed dtypes and the exact (erf) GELU go to the reference
 * (delegate.c, split by elements).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "backends/cpu/cpu_common.h"

#include <math.h>
#include <string.h>

#define GELU_C 0.7978845608028654 /* sqrt(2 / pi), the reference's constant */
#define GELU_K 0.044715
#define GELU_EXP_MAX 708.0 /* e^v for |v| <= 708 is a normal double; 2^k for |k| <= 1022 */
#define GELU_CHUNK 32768   /* elements per task, by size alone */
#define GELU_W_MAX 8
#define GV_VECTOR_BYTES(n) __attribute__((vector_size(n))) /* a vector type of n bytes */

/* portable: 2 doubles (SSE2 on x86-64, whatever the compiler makes of them elsewhere) */
#define GV_W 2
#define GV_SUF w2
#define GV_ATTR
#include "backends/cpu/gelu_lanes.h"
#undef GV_W
#undef GV_SUF
#undef GV_ATTR

#if defined(__x86_64__) || defined(__i386__)
#define GELU_X86 1
#define GV_W 4
#define GV_SUF w4
#define GV_ATTR __attribute__((target("avx2")))
#include "backends/cpu/gelu_lanes.h"
#undef GV_W
#undef GV_SUF
#undef GV_ATTR

#define GV_W 8
#define GV_SUF w8
#define GV_ATTR __attribute__((target("avx512f")))
#include "backends/cpu/gelu_lanes.h"
#undef GV_W
#undef GV_SUF
#undef GV_ATTR
#else
#define GELU_X86 0
#endif

typedef struct {
    const float *x, *dy;
    float *y, *dx;
    int64_t n;
    bool fresh;
    cpk_isa isa;
} gelu_job;

/* elements [0, n) with n a multiple of w, on the path's vector width */
static void fwd_lanes(cpk_isa isa, const float *x, float *y, int64_t n)
{
#if GELU_X86
    if (isa == CPK_ISA_AVX512) {
        gelu_tanh_fwd_w8(x, y, n);
        return;
    }
    if (isa == CPK_ISA_AVX2) {
        gelu_tanh_fwd_w4(x, y, n);
        return;
    }
#endif
    (void)isa;
    gelu_tanh_fwd_w2(x, y, n);
}

static void bwd_lanes(cpk_isa isa, const float *x, const float *dy, float *dx, int64_t n,
                      bool fresh)
{
#if GELU_X86
    if (isa == CPK_ISA_AVX512) {
        gelu_tanh_bwd_w8(x, dy, dx, n, fresh);
        return;
    }
    if (isa == CPK_ISA_AVX2) {
        gelu_tanh_bwd_w4(x, dy, dx, n, fresh);
        return;
    }
#endif
    (void)isa;
    gelu_tanh_bwd_w2(x, dy, dx, n, fresh);
}

/* the path's doubles per vector: the portable path's is 2 (SSE2) */
static int lanes_of(cpk_isa isa)
{
    return cpu_f64_lanes(isa) > 1 ? cpu_f64_lanes(isa) : 2;
}

static void gelu_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const gelu_job *j = vctx;
    const int64_t i0 = task * GELU_CHUNK, i1 = i0 + GELU_CHUNK < j->n ? i0 + GELU_CHUNK : j->n;
    const int w = lanes_of(j->isa);
    const int64_t body = (i1 - i0) / w * w;
    fwd_lanes(j->isa, j->x + i0, j->y + i0, body);
    const int64_t tail = i1 - i0 - body;
    if (tail > 0) { /* the last few through one padded vector: the same operations */
        float xt[GELU_W_MAX] = {0}, yt[GELU_W_MAX];
        memcpy(xt, j->x + i0 + body, (size_t)tail * sizeof *xt);
        fwd_lanes(j->isa, xt, yt, w);
        memcpy(j->y + i0 + body, yt, (size_t)tail * sizeof *yt);
    }
}

static void gelu_bwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const gelu_job *j = vctx;
    const int64_t i0 = task * GELU_CHUNK, i1 = i0 + GELU_CHUNK < j->n ? i0 + GELU_CHUNK : j->n;
    const int w = lanes_of(j->isa);
    const int64_t body = (i1 - i0) / w * w;
    bwd_lanes(j->isa, j->x + i0, j->dy + i0, j->dx + i0, body, j->fresh);
    const int64_t tail = i1 - i0 - body;
    if (tail > 0) {
        float xt[GELU_W_MAX] = {0}, dyt[GELU_W_MAX] = {0}, dxt[GELU_W_MAX] = {0};
        memcpy(xt, j->x + i0 + body, (size_t)tail * sizeof *xt);
        memcpy(dyt, j->dy + i0 + body, (size_t)tail * sizeof *dyt);
        if (!j->fresh)
            memcpy(dxt, j->dx + i0 + body, (size_t)tail * sizeof *dxt);
        bwd_lanes(j->isa, xt, dyt, dxt, w, j->fresh);
        memcpy(j->dx + i0 + body, dxt, (size_t)tail * sizeof *dxt);
    }
}

/* the fast path: the tanh form, one fp32 input, and fp32 t1 (the output, or dy) and t2
 * (dx, or NULL) of its element count (the reference's checks pass: nothing is refused) */
static bool fast_gelu(const ck_op_params *op, const ck_op_io *io, const ck_tensor *t1,
                      const ck_tensor *t2)
{
    if (op->kind != CK_OP_GELU || !ck_gelu_is_tanh(op) || io->n_in != 1 || !io->in[0] || !t1 ||
        io->in[0]->dtype != CK_F32 || t1->dtype != CK_F32 || (t2 && t2->dtype != CK_F32))
        return false;
    const ck_tensor *ts[] = {t1, t2};
    return ck_opc_pointwise(CPU_BE, "gelu", io->in[0], ts, 2, NULL) == CK_OK;
}

ck_status cpu_gelu_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    if (!fast_gelu(op, io, io->out, NULL))
        return cpu_delegate_forward(c, op, args, io, err);
    gelu_job j = {.x = io->in[0]->data, .y = io->out->data,
                  .n = ck_shape_numel(&io->in[0]->shape), .isa = c->isa};
    cpk_parallel(c->pool, (j.n + GELU_CHUNK - 1) / GELU_CHUNK, gelu_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_gelu_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    if (!g->dout || !g->din[0] || !fast_gelu(op, io, g->dout, g->din[0]))
        return cpu_delegate_backward(c, op, args, io, g, err);
    gelu_job j = {.x = io->in[0]->data, .dy = g->dout->data, .dx = g->din[0]->data,
                  .n = ck_shape_numel(&io->in[0]->shape), .fresh = g->din0_fresh,
                  .isa = c->isa};
    cpk_parallel(c->pool, (j.n + GELU_CHUNK - 1) / GELU_CHUNK, gelu_bwd_task, &j);
    return CK_OK;
}
