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

#include "harness/core/rng.h"

#if defined(__CUDACC__)
#define CK_CAL_HD __host__ __device__ __forceinline__
#else
#define CK_CAL_HD static inline
#endif

/* x rounded to `bits` significant bits, ties to even, with no exponent limits. */
CK_CAL_HD double ck_round_significand(double x, int bits)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int ex;
    double m = frexp(x, &ex); /* |m| in [0.5, 1) */
    return ldexp(nearbyint(ldexp(m, bits)), ex - bits);
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

#undef CK_CAL_HD

#endif
