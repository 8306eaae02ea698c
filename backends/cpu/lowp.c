/*
 * fp16/bf16 <-> fp32 for the fast CPU backend (cpu_common.h).
 *
 * Widening is exact. Narrowing rounds to nearest even with subnormals, infinities and NaN
 * as harness/core/half.h defines them; the F16C instructions (vcvtph2ps / vcvtps2ph with
 * round-to-nearest-even) produce the same bits as half.h's integer routines for every
 * input (tests/test_cpu_backend.c checks all 65536 fp16 patterns and edge floats), and the
 * bf16 conversions are the same integer arithmetic as half.h.
 */
#include "backends/cpu/cpu_common.h"

#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_X86 1
#else
#define CPU_X86 0
#endif

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu))
        u |= 0x400000u; /* NaN comes back quiet */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN: top payload bits, quiet */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#if CPU_X86
#include <cpuid.h>

/* F16C is its own CPUID flag (leaf 1, ECX bit 29): every AVX2 CPU has it, but ask. Read
 * with cpuid.h because older clang does not know "f16c" in __builtin_cpu_supports. */
static bool use_f16c(const cpu_ctx *c)
{
    unsigned a = 0, b = 0, ecx = 0, d = 0;
    if (c->isa == CPK_ISA_PORTABLE || !__get_cpuid(1, &a, &b, &ecx, &d))
        return false;
    return (ecx & (1u << 29)) != 0;
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *s, float *d,
                                                                  int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++)
        d[i] = ck_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *s, uint16_t *d,
                                                                  int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        d[i] = ck_f32_to_f16(s[i]);
}
#endif

/* d[i] = t[i] as fp32 for i in [i0, i1) */
static void widen_range(const cpu_ctx *c, const ck_tensor *t, float *d, int64_t i0, int64_t i1)
{
    const uint16_t *s = t->data;
    if (t->dtype == CK_F16) {
#if CPU_X86
        if (use_f16c(c)) {
            f16_to_f32_f16c(s + i0, d + i0, i1 - i0);
            return;
        }
#endif
        for (int64_t i = i0; i < i1; i++)
            d[i] = ck_f16_to_f32(s[i]);
    } else if (t->dtype == CK_BF16) {
        for (int64_t i = i0; i < i1; i++)
            d[i] = bf16_to_f32(s[i]);
    } else if (t->dtype == CK_F64) {
        const double *sd = t->data;
        for (int64_t i = i0; i < i1; i++)
            d[i] = (float)sd[i];
    }
}

bool cpu_any_f64(const ck_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->dtype == CK_F64)
            return true;
    return false;
}

ck_status cpu_scratch(const char *op, int64_t n, bool zero, float **out, ck_error *err)
{
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    *out = aligned_alloc(64, bytes);
    if (!*out)
        return ck_fail(err, CK_ERR_NOMEM, "%s: no memory for %lld floats of scratch", op,
                       (long long)n);
    if (zero)
        memset(*out, 0, bytes);
    return CK_OK;
}


static void store_range(const cpu_ctx *c, ck_tensor *t, const float *v, int64_t i0, int64_t i1)
{
    switch (t->dtype) {
    case CK_F32: memcpy((float *)t->data + i0, v + i0, (size_t)(i1 - i0) * sizeof *v); break;
    case CK_F16: {
        uint16_t *d = t->data;
#if CPU_X86
        if (use_f16c(c)) {
            f32_to_f16_f16c(v + i0, d + i0, i1 - i0);
            break;
        }
#endif
        for (int64_t i = i0; i < i1; i++)
            d[i] = ck_f32_to_f16(v[i]);
        break;
    }
    case CK_BF16: {
        uint16_t *d = t->data;
        for (int64_t i = i0; i < i1; i++)
            d[i] = f32_to_bf16(v[i]);
        break;
    }
    default: break; /* fp64 calls never get here (delegated) */
    }
}
static void acc_one(ck_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case CK_F32: {
        float *d = t->data;
        d[i] = (float)((double)d[i] + v);
        break;
    }
    case CK_F16: {
        uint16_t *d = t->data;
        d[i] = ck_f64_to_f16(ck_sum_round_odd((double)ck_f16_to_f32(d[i]), v));
        break;
    }
    case CK_BF16: {
        uint16_t *d = t->data;
        d[i] = ck_f64_to_bf16(ck_sum_round_odd((double)bf16_to_f32(d[i]), v));
        break;
    }
    default: break;
    }
}

static void acc_f32_range(ck_tensor *t, const float *v, int64_t i0, int64_t i1)
{
    if (t->dtype == CK_F32) {
        /* two floats: one correctly rounded fp32 addition is the exact sum rounded once */
        float *d = t->data;
        for (int64_t i = i0; i < i1; i++)
            d[i] = d[i] + v[i];
        return;
    }
    for (int64_t i = i0; i < i1; i++)
        acc_one(t, i, (double)v[i]);
}

/* ---- element-wise passes split across the pool: every element is its own, so the split
 * cannot change a bit ---- */

#define ELEMS_PER_TASK 32768

typedef enum { PASS_WIDEN, PASS_STORE, PASS_ACC_F32, PASS_ACC_F64 } pass_kind;

typedef struct {
    const cpu_ctx *c;
    pass_kind kind;
    const ck_tensor *src;
    ck_tensor *dst;
    float *f;
    const float *cf;
    const double *cd;
    int64_t n;
} pass_job;

static void pass_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const pass_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    switch (j->kind) {
    case PASS_WIDEN: widen_range(j->c, j->src, j->f, i0, i1); break;
    case PASS_STORE: store_range(j->c, j->dst, j->cf, i0, i1); break;
    case PASS_ACC_F32: acc_f32_range(j->dst, j->cf, i0, i1); break;
    case PASS_ACC_F64:
        for (int64_t i = i0; i < i1; i++)
            acc_one(j->dst, i, j->cd[i]);
        break;
    }
}

static void run_pass(const cpu_ctx *c, pass_job *j)
{
    j->c = c;
    cpk_parallel(c->pool, (j->n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, pass_task, j);
}

void cpu_store(const cpu_ctx *c, ck_tensor *t, const float *v)
{
    if (!t || v == t->data)
        return;
    pass_job j = {.kind = PASS_STORE, .dst = t, .cf = v, .n = ck_shape_numel(&t->shape)};
    run_pass(c, &j);
}

void cpu_accumulate_f32(const cpu_ctx *c, ck_tensor *t, const float *v)
{
    if (!t)
        return;
    pass_job j = {.kind = PASS_ACC_F32, .dst = t, .cf = v, .n = ck_shape_numel(&t->shape)};
    run_pass(c, &j);
}

void cpu_accumulate_f64(const cpu_ctx *c, ck_tensor *t, const double *v)
{
    if (!t)
        return;
    pass_job j = {.kind = PASS_ACC_F64, .dst = t, .cd = v, .n = ck_shape_numel(&t->shape)};
    run_pass(c, &j);
}

ck_status cpu_view_f32(const char *op, const ck_tensor *t, const cpu_ctx *c, const float **out,
                       float **owned, ck_error *err)
{
    *owned = NULL;
    *out = NULL;
    if (!t)
        return CK_OK;
    if (t->dtype == CK_F32) {
        *out = t->data;
        return CK_OK;
    }
    const int64_t n = ck_shape_numel(&t->shape);
    CK_TRY(cpu_scratch(op, n, false, owned, err));
    pass_job j = {.kind = PASS_WIDEN, .src = t, .f = *owned, .n = n};
    run_pass(c, &j);
    *out = *owned;
    return CK_OK;
}
