/*
 * Seed streams: how every draw's Philox key and counter are derived.
 *
 * Key     = the case seed (low 32 bits, high 32 bits).
 * Counter = (block low 32, block high 32, c2, c3) where, for a keyed stream,
 *           c2 = layer index (CK_RNG_NO_LAYER for the model input and targets),
 *           c3 = purpose << 24 | (step & 0xFFFFFF).
 * Backend draws (dropout masks, class targets): element i of a uniform word draw uses
 * word (offset + i) % 4 of block (offset + i) / 4. Element i of a normal draw (noise) uses
 * the whole block offset / 4 + i (Box-Muller on its first two words): 4 words.
 * Host draws in double (init, input, mse targets): element i uses the whole block i.
 *
 * Under the `counter` RNG policy a draw's offset is 0 and its key depends only on
 * (seed, step, layer, purpose): recomputation replays it. Under `stateful` and `stash` the
 * dropout/noise draws come from one global stream (c2 = CK_RNG_NO_LAYER,
 * c3 = CK_PURPOSE_GLOBAL << 24) whose offset advances with every draw; see runner.c.
 *
 * Parameter init, input and targets are always keyed streams (never the global one) and
 * are drawn on the host in double precision, so every backend starts from the same bits.
 */
#ifndef CK_RNG_H
#define CK_RNG_H

#include "harness/core/philox.h"

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CK_RNG_HD __host__ __device__ __forceinline__
#else
#define CK_RNG_HD static inline
#endif

typedef enum {
    CK_PURPOSE_INIT = 1,    /* parameter init; step field = parameter slot (0 weight, 1 bias) */
    CK_PURPOSE_INPUT = 2,   /* model input for a step */
    CK_PURPOSE_TARGET = 3,  /* loss targets for a step */
    CK_PURPOSE_DROPOUT = 4, /* dropout mask */
    CK_PURPOSE_NOISE = 5,   /* gaussian noise */
    CK_PURPOSE_GLOBAL = 6,  /* the one global stream of the stateful/stash policies */
    CK_PURPOSE_TEST = 7,    /* test-only draws (gradcheck projections, sampled indices) */
    CK_PURPOSE_CALIBRATION = 8 /* the precision judgement's rounding-sized perturbations */
} ck_rng_purpose;

#define CK_RNG_NO_LAYER 0xFFFFFFFFu

typedef struct {
    ck_philox_key key;
    uint32_t c2, c3;
    uint64_t offset; /* in 32-bit words */
} ck_rng_stream;

CK_RNG_HD ck_rng_stream ck_rng_keyed(uint64_t seed, uint32_t layer, ck_rng_purpose purpose,
                                     uint32_t step)
{
    ck_rng_stream s;
    s.key.v[0] = (uint32_t)seed;
    s.key.v[1] = (uint32_t)(seed >> 32);
    s.c2 = layer;
    s.c3 = ((uint32_t)purpose << 24) | (step & 0xFFFFFFu);
    s.offset = 0;
    return s;
}

CK_RNG_HD ck_philox_ctr ck_rng_block(const ck_rng_stream *s, uint64_t block)
{
    ck_philox_ctr c;
    c.v[0] = (uint32_t)block;
    c.v[1] = (uint32_t)(block >> 32);
    c.v[2] = s->c2;
    c.v[3] = s->c3;
    return ck_philox4x32_10(c, s->key);
}

/* Word i of a uniform draw. */
CK_RNG_HD uint32_t ck_rng_u32(const ck_rng_stream *s, uint64_t i)
{
    uint64_t w = s->offset + i;
    ck_philox_ctr r = ck_rng_block(s, w >> 2);
    return r.v[w & 3];
}

/* Dropout keep decision for element i: dropped iff the word is below rate * 2^32.
 * Integer comparison only, so every backend draws the same mask. */
CK_RNG_HD uint32_t ck_dropout_threshold(double rate)
{
    double t = rate * 4294967296.0;
    if (t <= 0.0)
        return 0u;
    if (t >= 4294967295.0)
        return 0xFFFFFFFFu;
    return (uint32_t)t;
}

/* Words a draw of n elements consumes from a global stream. */
CK_RNG_HD uint64_t ck_rng_uniform_words(uint64_t n) { return (n + 3) & ~(uint64_t)3; }
CK_RNG_HD uint64_t ck_rng_normal_words(uint64_t n) { return 4 * n; }

/* Element i of a normal draw in float: the formula every backend's noise op uses.
 * Box-Muller on block offset/4 + i; u1 in (0, 1] so the log is finite. */
CK_RNG_HD float ck_rng_normal_f32(const ck_rng_stream *s, uint64_t i)
{
    ck_philox_ctr r = ck_rng_block(s, (s->offset >> 2) + i);
    float u1 = ((float)(r.v[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = ck_u32_to_unit_float(r.v[1]);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

#undef CK_RNG_HD

#if !defined(__CUDACC__)
#define CK_RNG_LANES 16
/* The four words of the CK_RNG_LANES consecutive Philox blocks block0, block0 + 1, ... of s
 * (ck_rng_block for each), lane by lane in plain arrays that the compiler keeps in
 * vectors: 2-3x faster on the host than one block at a time, the same words. */
static inline void ck_rng_blocks_w0123(const ck_rng_stream *s, uint64_t block0, uint32_t *c0,
                                       uint32_t *c1, uint32_t *c2, uint32_t *c3)
{
    for (int l = 0; l < CK_RNG_LANES; l++) {
        const uint64_t block = block0 + (uint64_t)l;
        c0[l] = (uint32_t)block;
        c1[l] = (uint32_t)(block >> 32);
        c2[l] = s->c2;
        c3[l] = s->c3;
    }
    uint32_t k0 = s->key.v[0], k1 = s->key.v[1];
    for (int round = 0; round < 10; round++) { /* ck_philox4x32_10's rounds */
        if (round > 0) {
            k0 += CK_PHILOX_W0;
            k1 += CK_PHILOX_W1;
        }
        for (int l = 0; l < CK_RNG_LANES; l++) {
            const uint64_t p0 = (uint64_t)CK_PHILOX_M0 * c0[l];
            const uint64_t p1 = (uint64_t)CK_PHILOX_M1 * c2[l];
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
            const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
            c1[l] = (uint32_t)p1;
            c3[l] = (uint32_t)p0;
            c0[l] = n0;
            c2[l] = n2;
        }
    }
}

/* Words 0 and 1 of those blocks. */
static inline void ck_rng_blocks_w01(const ck_rng_stream *s, uint64_t block0, uint32_t *w0,
                                     uint32_t *w1)
{
    uint32_t c2[CK_RNG_LANES], c3[CK_RNG_LANES];
    ck_rng_blocks_w0123(s, block0, w0, w1, c2, c3);
}
#endif

/* Host-side draws in double precision (parameter init, input and target data). */
double ck_rng_uniform_f64(const ck_rng_stream *s, uint64_t i); /* [0, 1) from block i */
/* out[k] = ck_rng_uniform_f64(s, i0 + k) for k < n, many blocks at a time (the same values) */
void ck_rng_uniform_f64_span(const ck_rng_stream *s, uint64_t i0, int64_t n, double *out);
double ck_rng_normal_f64(const ck_rng_stream *s, uint64_t i);  /* N(0, 1) from block i */
/* out[k] = ck_rng_normal_f64(s, i0 + k) for k < n, many blocks at a time (the same values) */
void ck_rng_normal_f64_span(const ck_rng_stream *s, uint64_t i0, int64_t n, double *out);
/* An integer in [0, n) from word i (multiply-shift; n < 2^32). */
uint32_t ck_rng_below(const ck_rng_stream *s, uint64_t i, uint32_t n);

#endif
