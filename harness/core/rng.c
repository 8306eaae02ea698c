/* Host-side double-precision draws from seed streams (see rng.h for the key scheme). */
#include "harness/core/rng.h"

#include <math.h>

double ck_rng_uniform_f64(const ck_rng_stream *s, uint64_t i)
{
    ck_philox_ctr r = ck_rng_block(s, (s->offset >> 2) + i);
    return ck_u32x2_to_unit_double(r.v[0], r.v[1]);
}

double ck_rng_normal_f64(const ck_rng_stream *s, uint64_t i)
{
    ck_philox_ctr r = ck_rng_block(s, (s->offset >> 2) + i);
    double u1 = 1.0 - ck_u32x2_to_unit_double(r.v[0], r.v[1]); /* (0, 1] */
    double u2 = ck_u32x2_to_unit_double(r.v[2], r.v[3]);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint32_t ck_rng_below(const ck_rng_stream *s, uint64_t i, uint32_t n)
{
    return (uint32_t)(((uint64_t)ck_rng_u32(s, i) * (uint64_t)n) >> 32);
}
