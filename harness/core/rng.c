/* Host-side double-precision draws from seed streams (see rng.h for the key scheme). */
#include "harness/core/rng.h"

#include <math.h>

double ck_rng_uniform_f64(const ck_rng_stream *s, uint64_t i)
{
    ck_philox_ctr r = ck_rng_block(s, (s->offset >> 2) + i);
    return ck_u32x2_to_unit_double(r.v[0], r.v[1]);
}

void ck_rng_uniform_f64_span(const ck_rng_stream *s, uint64_t i0, int64_t n, double *out)
{
    int64_t k = 0;
    for (; k + CK_RNG_LANES <= n; k += CK_RNG_LANES) {
        uint32_t w0[CK_RNG_LANES], w1[CK_RNG_LANES];
        ck_rng_blocks_w01(s, (s->offset >> 2) + i0 + (uint64_t)k, w0, w1);
        for (int l = 0; l < CK_RNG_LANES; l++)
            out[k + l] = ck_u32x2_to_unit_double(w0[l], w1[l]);
    }
    for (; k < n; k++)
        out[k] = ck_rng_uniform_f64(s, i0 + (uint64_t)k);
}

/* Box-Muller on the four words of one block */
static inline double normal_of_words(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3)
{
    double u1 = 1.0 - ck_u32x2_to_unit_double(w0, w1); /* (0, 1] */
    double u2 = ck_u32x2_to_unit_double(w2, w3);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double ck_rng_normal_f64(const ck_rng_stream *s, uint64_t i)
{
    ck_philox_ctr r = ck_rng_block(s, (s->offset >> 2) + i);
    return normal_of_words(r.v[0], r.v[1], r.v[2], r.v[3]);
}

void ck_rng_normal_f64_span(const ck_rng_stream *s, uint64_t i0, int64_t n, double *out)
{
    int64_t k = 0;
    for (; k + CK_RNG_LANES <= n; k += CK_RNG_LANES) {
        uint32_t w0[CK_RNG_LANES], w1[CK_RNG_LANES], w2[CK_RNG_LANES], w3[CK_RNG_LANES];
        ck_rng_blocks_w0123(s, (s->offset >> 2) + i0 + (uint64_t)k, w0, w1, w2, w3);
        for (int l = 0; l < CK_RNG_LANES; l++)
            out[k + l] = normal_of_words(w0[l], w1[l], w2[l], w3[l]);
    }
    for (; k < n; k++)
        out[k] = ck_rng_normal_f64(s, i0 + (uint64_t)k);
}

uint32_t ck_rng_below(const ck_rng_stream *s, uint64_t i, uint32_t n)
{
    return (uint32_t)(((uint64_t)ck_rng_u32(s, i) * (uint64_t)n) >> 32);
}
