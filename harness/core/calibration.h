/*
 * The precision judgement's calibration rounding of one fp32 element, in a header usable
 * from C and CUDA so every backend rounds where the tensor lives, bit for bit alike.
 *
 * Element k of a tensor becomes x * (1 + rel * r_k) rounded to `bits` significant bits
 * (ties to even) with no exponent limits, r_k = 2 u_k - 1 and u_k the uniform double of
 * block k of `stream` (ck_rng_uniform_f64's formula); r_k = 0 when rel is 0. bits 11 is
 * fp16's significand, 8 bf16's: the rounding a correct low-precision run does at every op,
 * without its underflow, overflow or any reduction carried out in the low dtype
 * (harness/engine/executor.h, round_bits).
 */
#ifndef CK_CALIBRATION_H
#define CK_CALIBRATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness/core/rng.h"

#if defined(__CUDACC__)
#define CK_CAL_HD __host__ __device__ __forceinline__
#else
#define CK_CAL_HD static inline
#endif

/* x rounded to `bits` significant bits (1..52), ties to even, with no exponent limits.
 * Integer arithmetic on the double's bits: adding half an ulp of the kept significand
 * (less one, plus the kept last bit: ties go to even) and clearing the dropped bits gives
 * nearbyint(ldexp(frexp(x), bits)) scaled back -- a carry out of the significand bumps the
 * exponent, as the power of two it rounds to -- without three libm calls per element (the
 * calibration runs round every output and output gradient, so this is their hot loop).
 * tests/test_half.c pins it against that libm formula. Zero, inf and NaN pass through;
 * subnormal doubles (never a float times a factor near 1) take the libm formula itself. */
CK_CAL_HD double ck_round_significand(double x, int bits)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    const uint64_t exp_bits = (u >> 52) & 0x7FF;
    if (exp_bits == 0x7FF || x == 0.0) /* inf, NaN, zero */
        return x;
    if (exp_bits == 0) { /* subnormal */
        int ex;
        double m = frexp(x, &ex); /* |m| in [0.5, 1) */
        return ldexp(nearbyint(ldexp(m, bits)), ex - bits);
    }
    const int drop = 53 - bits;
    const uint64_t half_ulp = (uint64_t)1 << (drop - 1);
    u += half_ulp - 1 + ((u >> drop) & 1);
    u &= ~(((uint64_t)1 << drop) - 1);
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Element k's calibration value (see the top of this file). */
CK_CAL_HD float ck_calibration_round(float x, int bits, double rel, const ck_rng_stream *s,
                                     uint64_t k)
{
    double r = 0.0;
    if (rel > 0.0) {
        ck_philox_ctr c = ck_rng_block(s, (s->offset >> 2) + k);
        r = 2.0 * ck_u32x2_to_unit_double(c.v[0], c.v[1]) - 1.0;
    }
    return (float)ck_round_significand((double)x * (1.0 + rel * r), bits);
}

#if !defined(__CUDACC__)
#define CK_CAL_LANES CK_RNG_LANES
/* Words 0 and 1 of the Philox blocks of elements k .. k + CK_CAL_LANES - 1 (rng.h). */
static inline void ck_calibration_blocks(const ck_rng_stream *s, int64_t k, uint32_t *w0,
                                         uint32_t *w1)
{
    ck_rng_blocks_w01(s, (s->offset >> 2) + (uint64_t)k, w0, w1);
}

/* v[0 .. CK_CAL_LANES - 1] as ck_calibration_round gives them, from their blocks' words 0
 * and 1 (ck_calibration_blocks, or any routine that returns the same words). */
static inline void ck_calibration_round_lanes(float *v, const uint32_t *w0, const uint32_t *w1,
                                              int bits, double rel)
{
    for (int l = 0; l < CK_CAL_LANES; l++) {
        const double r = 2.0 * ck_u32x2_to_unit_double(w0[l], w1[l]) - 1.0;
        v[l] = (float)ck_round_significand((double)v[l] * (1.0 + rel * r), bits);
    }
}

/* Elements [k0, k0 + n) of v, each set to ck_calibration_round(v[k], bits, rel, s, k): the
 * same values, with the dither's Philox blocks drawn CK_CAL_LANES at a time (2-3x faster
 * on the host than one block at a time; integer arithmetic and the same double
 * expression, so the bits cannot differ). */
static inline void ck_calibration_round_span(float *v, int64_t k0, int64_t n, int bits,
                                             double rel, const ck_rng_stream *s)
{
    int64_t k = k0, end = k0 + n;
    if (rel > 0.0) {
        for (; k + CK_CAL_LANES <= end; k += CK_CAL_LANES) {
            uint32_t w0[CK_CAL_LANES], w1[CK_CAL_LANES];
            ck_calibration_blocks(s, k, w0, w1);
            ck_calibration_round_lanes(v + k, w0, w1, bits, rel);
        }
    }
    for (; k < end; k++)
        v[k] = ck_calibration_round(v[k], bits, rel, s, (uint64_t)k);
}
#endif

#undef CK_CAL_HD

#endif
