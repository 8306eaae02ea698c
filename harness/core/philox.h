/*
 * Philox4x32-10 counter-based generator (Salmon et al., SC 2011), usable from C and CUDA.
 *
 * Every random number in ckpt-harness comes from here. A draw is a pure function of a
 * 64-bit key and a 128-bit counter, so the CPU and the GPU produce the same bits, and a
 * recomputed forward can replay a draw exactly. How keys and counters are derived from
 * (seed, step, layer, purpose, element) is in rng.h.
 */
#ifndef CK_PHILOX_H
#define CK_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define CK_HD __host__ __device__ __forceinline__
#else
#define CK_HD static inline
#endif

typedef struct {
    uint32_t v[4];
} ck_philox_ctr;

typedef struct {
    uint32_t v[2];
} ck_philox_key;

#define CK_PHILOX_M0 0xD2511F53u
#define CK_PHILOX_M1 0xCD9E8D57u
#define CK_PHILOX_W0 0x9E3779B9u
#define CK_PHILOX_W1 0xBB67AE85u

CK_HD void ck_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

CK_HD ck_philox_ctr ck_philox_round(ck_philox_ctr c, ck_philox_key k)
{
    uint32_t hi0, lo0, hi1, lo1;
    ck_philox_mulhilo(CK_PHILOX_M0, c.v[0], &hi0, &lo0);
    ck_philox_mulhilo(CK_PHILOX_M1, c.v[2], &hi1, &lo1);
    ck_philox_ctr r;
    r.v[0] = hi1 ^ c.v[1] ^ k.v[0];
    r.v[1] = lo1;
    r.v[2] = hi0 ^ c.v[3] ^ k.v[1];
    r.v[3] = lo0;
    return r;
}

/* Philox4x32 with 10 rounds: 4 random 32-bit words from (counter, key). */
CK_HD ck_philox_ctr ck_philox4x32_10(ck_philox_ctr c, ck_philox_key k)
{
    for (int i = 0; i < 10; i++) {
        if (i > 0) {
            k.v[0] += CK_PHILOX_W0;
            k.v[1] += CK_PHILOX_W1;
        }
        c = ck_philox_round(c, k);
    }
    return c;
}

/* A uniform float in [0, 1) from the top 24 bits of a word: exact in fp32 and fp64. */
CK_HD float ck_u32_to_unit_float(uint32_t x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* A uniform double in [0, 1) from the top 53 bits of two words. */
CK_HD double ck_u32x2_to_unit_double(uint32_t hi, uint32_t lo)
{
    uint64_t m = ((uint64_t)hi << 21) | (uint64_t)(lo >> 11);
    return (double)m * (1.0 / 9007199254740992.0);
}

#undef CK_HD
#endif
