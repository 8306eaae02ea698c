/*
 * The calibration rounding (backend.h's calibration_round) on the fast CPU backend: the
 * precision judgement's calibration runs round every layer output and output gradient,
 * two of them with a Philox dither per element, so this loop runs over every activation
 * twice per step. Element k's value depends on k and the stream only: split across threads
 * by element ranges, and in AVX-512 where the machine has it (the Philox rounds as integer
 * multiplies, xors and shifts; the dither and the rounding as the same IEEE double
 * operations in the same order and integer arithmetic on the bits), the values are
 * harness/core/calibration.h's, bit for bit, on every thread count and ISA.
 */
#include "backends/cpu/cpu_common.h"

#include "harness/core/calibration.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define ELEMS_PER_TASK 16384

typedef struct {
    float *v;
    int64_t n;
    int bits;
    double rel;
    const ck_rng_stream *rng;
    cpk_isa isa;
} round_job;

#if CPK_X86
_Static_assert(CK_CAL_LANES == 16, "one __m512i of 32-bit lanes");

/* hi and lo 32 bits of m * c, lane by lane (16 lanes of 32 bits) */
__attribute__((target("avx512f"))) static inline void mulhilo_avx512(__m512i m, __m512i c,
                                                                     __m512i *hi, __m512i *lo)
{
    const __m512i even = _mm512_mul_epu32(c, m);                       /* lanes 0, 2, ... */
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m); /* lanes 1, 3, ... */
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    *lo = _mm512_mullo_epi32(c, m);
}

/* ck_calibration_blocks with the 16 lanes in one register each */
__attribute__((target("avx512f"))) static void blocks_avx512(const ck_rng_stream *s, int64_t k,
                                                             uint32_t *w0, uint32_t *w1)
{
    uint32_t lo[CK_CAL_LANES], hi[CK_CAL_LANES];
    for (int l = 0; l < CK_CAL_LANES; l++) {
        const uint64_t block = (s->offset >> 2) + (uint64_t)(k + l);
        lo[l] = (uint32_t)block;
        hi[l] = (uint32_t)(block >> 32);
    }
    __m512i c0 = _mm512_loadu_si512(lo), c1 = _mm512_loadu_si512(hi);
    __m512i c2 = _mm512_set1_epi32((int)s->c2), c3 = _mm512_set1_epi32((int)s->c3);
    const __m512i m0 = _mm512_set1_epi32((int)CK_PHILOX_M0);
    const __m512i m1 = _mm512_set1_epi32((int)CK_PHILOX_M1);
    uint32_t k0 = s->key.v[0], k1 = s->key.v[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += CK_PHILOX_W0;
            k1 += CK_PHILOX_W1;
        }
        __m512i hi0, lo0, hi1, lo1;
        mulhilo_avx512(m0, c0, &hi0, &lo0);
        mulhilo_avx512(m1, c2, &hi1, &lo1);
        const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        c0 = n0;
        c2 = n2;
    }
    _mm512_storeu_si512(w0, c0);
    _mm512_storeu_si512(w1, c1);
}

/* ck_calibration_round_lanes in two halves of 8 doubles: the same IEEE operations in the
 * same order (the u32 pair widened exactly, 2u - 1, x * (1 + rel r)), the significand
 * rounding as integer arithmetic on the bits with zero, inf and NaN kept, and the rare
 * subnormal double (never a float times a factor near 1) handed to the scalar routine */
__attribute__((target("avx512f"))) static void round_lanes_avx512(float *v, const uint32_t *w0,
                                                                  const uint32_t *w1, int bits,
                                                                  double rel)
{
    const int drop = 53 - bits;
    const __m512i half_less_one = _mm512_set1_epi64((long long)(((uint64_t)1 << (drop - 1)) - 1));
    const __m512i keep = _mm512_set1_epi64((long long)~(((uint64_t)1 << drop) - 1));
    const __m512i shift = _mm512_set1_epi64(drop), one = _mm512_set1_epi64(1);
    const __m512i exp_mask = _mm512_set1_epi64(0x7FF0000000000000ll);
    const __m512i abs_mask = _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll);
    const __m512i zero = _mm512_setzero_si512();
    for (int h = 0; h < CK_CAL_LANES; h += 8) {
        /* ck_u32x2_to_unit_double: (w0 << 21 | w1 >> 11) / 2^53, exact */
        const __m512d hi = _mm512_cvtepu32_pd(_mm256_loadu_si256((const __m256i *)(w0 + h)));
        const __m512d lo = _mm512_cvtepu32_pd(
            _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(w1 + h)), 11));
        const __m512d m = _mm512_add_pd(_mm512_mul_pd(hi, _mm512_set1_pd(2097152.0)), lo);
        const __m512d u = _mm512_mul_pd(m, _mm512_set1_pd(1.0 / 9007199254740992.0));
        const __m512d r = _mm512_sub_pd(_mm512_mul_pd(_mm512_set1_pd(2.0), u), _mm512_set1_pd(1.0));
        const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(v + h));
        const __m512d d = _mm512_mul_pd(
            x, _mm512_add_pd(_mm512_set1_pd(1.0), _mm512_mul_pd(_mm512_set1_pd(rel), r)));
        /* ck_round_significand */
        const __m512i ub = _mm512_castpd_si512(d);
        const __m512i e = _mm512_and_si512(ub, exp_mask);
        const __mmask8 exp0 = _mm512_cmpeq_epi64_mask(e, zero);
        const __mmask8 kept = (__mmask8)(exp0 | _mm512_cmpeq_epi64_mask(e, exp_mask));
        const __mmask8 subnormal =
            (__mmask8)(exp0 & _mm512_cmpneq_epi64_mask(_mm512_and_si512(ub, abs_mask), zero));
        const __m512i odd = _mm512_and_si512(_mm512_srlv_epi64(ub, shift), one);
        const __m512i rounded =
            _mm512_and_si512(_mm512_add_epi64(ub, _mm512_add_epi64(half_less_one, odd)), keep);
        const __m512i out = _mm512_mask_blend_epi64(kept, rounded, ub);
        _mm256_storeu_ps(v + h, _mm512_cvtpd_ps(_mm512_castsi512_pd(out)));
        if (subnormal) {
            double dd[8];
            _mm512_storeu_pd(dd, d);
            for (int l = 0; l < 8; l++)
                if (subnormal >> l & 1)
                    v[h + l] = (float)ck_round_significand(dd[l], bits);
        }
    }
}

__attribute__((target("avx512f"))) static void span_avx512(const round_job *j, int64_t k,
                                                           int64_t end)
{
    uint32_t w0[CK_CAL_LANES] = {0}, w1[CK_CAL_LANES] = {0}; /* no dither: r is unused */
    for (; k + CK_CAL_LANES <= end; k += CK_CAL_LANES) {
        if (j->rel > 0.0)
            blocks_avx512(j->rng, k, w0, w1);
        round_lanes_avx512(j->v + k, w0, w1, j->bits, j->rel);
    }
    ck_calibration_round_span(j->v, k, end - k, j->bits, j->rel, j->rng); /* the tail */
}
#endif

static void round_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const round_job *j = vctx;
    const int64_t k0 = task * ELEMS_PER_TASK;
    const int64_t n = j->n - k0 < ELEMS_PER_TASK ? j->n - k0 : ELEMS_PER_TASK;
#if CPK_X86
    if (j->isa >= CPK_ISA_AVX512) {
        span_avx512(j, k0, k0 + n);
        return;
    }
#endif
    ck_calibration_round_span(j->v, k0, n, j->bits, j->rel, j->rng);
}

ck_status cpu_calibration_round(const cpu_ctx *c, ck_tensor *t, int bits, double rel,
                                const ck_rng_stream *rng, ck_error *err)
{
    if (t->dtype != CK_F32)
        return ck_fail(err, CK_ERR_INTERNAL, "calibration rounding of %s: fp32 tensors only",
                       t->name ? t->name : "?");
    round_job j = {.v = t->data, .n = ck_shape_numel(&t->shape), .bits = bits, .rel = rel,
                   .rng = rng, .isa = c->isa};
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, round_task, &j);
    return CK_OK;
}
