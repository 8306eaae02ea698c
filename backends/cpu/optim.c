/*
 * The optimizer step on the fast CPU backend: sgd, sgd with momentum, adam and adamw on
 * fp32 parameters, gradients and state, split into element ranges across the pool's
 * threads. Each element is updated by the reference's own arithmetic (backends/ref/optim.c),
 * operation for operation in double and rounded once into each fp32 tensor, so the bits are
 * the reference's whatever the thread count: the update is element-wise, and every
 * expression below is the reference's, written in the same order (C11 keeps `a * b + c`
 * unfused, so vector and scalar code round the same). On AVX2 and AVX-512 machines four
 * or eight elements run at a time, each lane the scalar expressions (optim_lanes.h).
 * Other dtypes (fp64 gradient checks, a low-precision gradient) and refused arguments go
 * to the reference as one call.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "backends/cpu/cpu_common.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define OPTIM_CHUNK 32768 /* elements per task, by size alone */

typedef struct {
    const ck_optimizer *opt;
    int64_t step, n;
    double grad_scale, bias_corr1, bias_corr2;
    float *p, *s0, *s1;
    const float *g;
    cpk_isa isa;
} optim_job;

#if CPK_X86
#define OV_VECTOR_BYTES(n) __attribute__((vector_size(n))) /* a vector type of n bytes */
#define OV_W 4
#define OV_SUF w4
#define OV_ATTR __attribute__((target("avx2")))
#define OV_SQRT(v) ((ov_vd_w4)_mm256_sqrt_pd((__m256d)(v)))
#include "backends/cpu/optim_lanes.h"
#undef OV_W
#undef OV_SUF
#undef OV_ATTR
#undef OV_SQRT

#define OV_W 8
#define OV_SUF w8
#define OV_ATTR __attribute__((target("avx512f")))
#define OV_SQRT(v) ((ov_vd_w8)_mm512_sqrt_pd((__m512d)(v)))
#include "backends/cpu/optim_lanes.h"
#undef OV_W
#undef OV_SUF
#undef OV_ATTR
#undef OV_SQRT
#endif

/* g: the gradient scaled, plus the coupled weight decay (the reference's expression) */
static inline double scaled_grad(const optim_job *j, int64_t i, bool decoupled)
{
    return (double)j->g[i] * j->grad_scale +
           (decoupled ? 0.0 : j->opt->weight_decay * (double)j->p[i]);
}

static void sgd_range(const optim_job *j, int64_t lo, int64_t hi)
{
    const double lr = j->opt->lr;
    for (int64_t i = lo; i < hi; i++) {
        const double g = scaled_grad(j, i, false);
        j->p[i] = (float)((double)j->p[i] - lr * g);
    }
}

static void momentum_range(const optim_job *j, int64_t lo, int64_t hi)
{
    const ck_optimizer *opt = j->opt;
    for (int64_t i = lo; i < hi; i++) {
        const double g = scaled_grad(j, i, false);
        const double v = j->step == 1 ? g : opt->momentum * (double)j->s0[i] + g;
        j->s0[i] = (float)v;
        j->p[i] = (float)((double)j->p[i] - opt->lr * v);
    }
}

static void adam_range(const optim_job *j, int64_t lo, int64_t hi, bool decoupled)
{
    const ck_optimizer *opt = j->opt;
    const double decay = decoupled ? 1.0 - opt->lr * opt->weight_decay : 1.0;
    for (int64_t i = lo; i < hi; i++) {
        const double g = scaled_grad(j, i, decoupled);
        const double m_prev = j->step == 1 ? 0.0 : (double)j->s0[i];
        const double v_prev = j->step == 1 ? 0.0 : (double)j->s1[i];
        const double m = opt->beta1 * m_prev + (1.0 - opt->beta1) * g;
        const double v = opt->beta2 * v_prev + (1.0 - opt->beta2) * g * g;
        j->s0[i] = (float)m;
        j->s1[i] = (float)v;
        const double mhat = m / j->bias_corr1, vhat = v / j->bias_corr2;
        j->p[i] = (float)((double)j->p[i] * decay - opt->lr * mhat / (sqrt(vhat) + opt->eps));
    }
}

/* elements [lo, lo + n) on the machine's vector width (n a multiple of cpu_f64_lanes) */
static void optim_lanes(const optim_job *j, int64_t lo, int64_t n)
{
#if CPK_X86
    const bool w8 = j->isa == CPK_ISA_AVX512;
    switch (j->opt->kind) {
    case CK_OPT_SGD: (w8 ? sgd_lanes_w8 : sgd_lanes_w4)(j, lo, n); break;
    case CK_OPT_MOMENTUM: (w8 ? momentum_lanes_w8 : momentum_lanes_w4)(j, lo, n); break;
    case CK_OPT_ADAM: (w8 ? adam_lanes_w8 : adam_lanes_w4)(j, lo, n, false); break;
    case CK_OPT_ADAMW: (w8 ? adam_lanes_w8 : adam_lanes_w4)(j, lo, n, true); break;
    default: break;
    }
#else
    (void)j, (void)lo, (void)n;
#endif
}

static void optim_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const optim_job *j = vctx;
    int64_t lo = task * OPTIM_CHUNK;
    const int64_t hi = lo + OPTIM_CHUNK < j->n ? lo + OPTIM_CHUNK : j->n;
    const int w = cpu_f64_lanes(j->isa);
    if (w > 1) {
        const int64_t body = (hi - lo) / w * w;
        optim_lanes(j, lo, body);
        lo += body;
    }
    switch (j->opt->kind) {
    case CK_OPT_SGD: sgd_range(j, lo, hi); break;
    case CK_OPT_MOMENTUM: momentum_range(j, lo, hi); break;
    case CK_OPT_ADAM: adam_range(j, lo, hi, false); break;
    case CK_OPT_ADAMW: adam_range(j, lo, hi, true); break;
    default: break;
    }
}

static bool f32_or_absent(const ck_tensor *t)
{
    return !t || t->dtype == CK_F32;
}

ck_status cpu_optimizer_step(const cpu_ctx *c, const ck_optimizer *opt, int64_t step,
                             double grad_scale, ck_tensor *param, const ck_tensor *grad,
                             ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    const bool known = (unsigned)opt->kind < CK_OPT_KIND_COUNT;
    const bool uses0 = known && opt->kind != CK_OPT_SGD;
    const bool uses1 = known && (opt->kind == CK_OPT_ADAM || opt->kind == CK_OPT_ADAMW);
    /* anything else, and every argument the reference's checks refuse, goes to the
     * reference itself (its messages; nothing written) */
    if (!known || param->dtype != CK_F32 || !f32_or_absent(grad) ||
        (uses0 && !f32_or_absent(state0)) || (uses1 && !f32_or_absent(state1)) ||
        ck_opc_optimizer_args("ref", ck_optimizer_kind_name(opt->kind), opt, step, param, grad,
                              state0, state1, NULL) != CK_OK)
        return ref_optimizer_step(opt, step, grad_scale, param, grad, state0, state1, err);
    optim_job j = {
        .opt = opt,
        .step = step,
        .n = ck_shape_numel(&param->shape),
        .grad_scale = grad_scale,
        .bias_corr1 = 1.0 - pow(opt->beta1, (double)step),
        .bias_corr2 = 1.0 - pow(opt->beta2, (double)step),
        .p = param->data,
        .g = grad->data,
        .s0 = uses0 ? state0->data : NULL,
        .s1 = uses1 ? state1->data : NULL,
        .isa = c->isa,
    };
    cpk_parallel(c->pool, (j.n + OPTIM_CHUNK - 1) / OPTIM_CHUNK, optim_task, &j);
    return CK_OK;
}
