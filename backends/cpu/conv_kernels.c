/*
 * Convolutions (NC + 3 spatial dims, fp32 buffers), deterministic by construction (kernels.h).
 *
 * Forward and backward-data run on a zero-padded copy of their input, so no kernel ever
 * tests a bound, and every tap - padding zeros included - is one term of its output's
 * fma chain:
 *   forward       y[n,f,o]  = init + sum_{c, k} w[f,c,k] * xp[n,c, o*s + k*dil]
 *   backward data dx[n,c,i] = init + sum_{f, k'} w[f,c,flip(k')] * dyp[n,f, i + k'*dil]
 *                 (stride 1: a stride-1 convolution of the padded dy with the flipped,
 *                 transposed kernel; other strides: an implicit GEMM whose B holds zero
 *                 for the taps that fall between strided outputs)
 * with (c, k) / (f, k') ascending. The direct kernel (small channel counts: outputs
 * register-blocked 4 channels x up to 24 positions on AVX2, 4 channels x up to 4 rows x
 * up to 64 positions on AVX-512, vectorised along the innermost spatial dim) and the
 * implicit GEMM (large ones: B packed straight from the padded input) evaluate exactly
 * that chain, so the choice between them never changes a bit.
 *
 * Weight gradient: dW[f,c,k] = sum_{n, o} dy[n,f,o] * xp[n,c, o*s + k*dil]. Positions are
 * grouped into planes (n, o0); within a plane, lane l (of 8) sums, as one fp32 fma chain,
 * the positions with o2 % 8 == l in (o1, o2) order; a plane's 8 lanes are added in double
 * in lane order and the planes' totals in double in (n, o0) order. The portable path
 * emulates the 8 lanes.
 */
#include "backends/cpu/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define LANES 8

static int64_t vol3(const int64_t *d)
{
    return d[0] * d[1] * d[2];
}

// ----------------------------------------------------------------------------
// padding: dst (N, C, P) from src (N, C, S): dst[p] = src[p - lo] inside, else 0

typedef struct {
    const float *src;
    float *dst;
    int64_t S[3], P[3], lo[3];
    cpk_isa isa;
} pad_ctx;

/* dr[0, a0) = 0, dr[a0, a1) = sr[0, a1 - a0), dr[a1, P2) = 0: rows are short (a 3-D
 * volume's are tens of floats), so inline loops instead of memset/memcpy calls */
static void pad_row_portable(float *dr, const float *sr, int64_t a0, int64_t a1, int64_t P2)
{
    int64_t k = 0;
    for (; k < a0; k++)
        dr[k] = 0.0f;
    for (; k < a1; k++)
        dr[k] = sr[k - a0];
    for (; k < P2; k++)
        dr[k] = 0.0f;
}

#if CPK_X86
__attribute__((target("avx2"))) static void pad_row_avx2(float *dr, const float *sr, int64_t a0,
                                                         int64_t a1, int64_t P2)
{
    const __m256 z = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= a0; k += 8)
        _mm256_storeu_ps(dr + k, z);
    for (; k < a0; k++)
        dr[k] = 0.0f;
    for (; k + 8 <= a1; k += 8)
        _mm256_storeu_ps(dr + k, _mm256_loadu_ps(sr + (k - a0)));
    for (; k < a1; k++)
        dr[k] = sr[k - a0];
    for (; k + 8 <= P2; k += 8)
        _mm256_storeu_ps(dr + k, z);
    for (; k < P2; k++)
        dr[k] = 0.0f;
}
#endif

/* one task: depth slice p0 of one plane (a 2-D plane is one slice) */
static void pad_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const pad_ctx *c = vctx;
    const int64_t plane = task / c->P[0], p0 = task % c->P[0];
    const float *s = c->src + plane * vol3(c->S);
    float *d = c->dst + plane * vol3(c->P);
    void (*row)(float *, const float *, int64_t, int64_t, int64_t) = pad_row_portable;
#if CPK_X86
    if (c->isa != CPK_ISA_PORTABLE)
        row = pad_row_avx2;
#endif
    const int64_t i0 = p0 - c->lo[0];
    /* the part of a row inside the source, [a0, a1) (it may be cut at either end when the
     * padding is negative or the output stops short) */
    int64_t a0 = c->lo[2] > 0 ? c->lo[2] : 0, a1 = c->lo[2] + c->S[2];
    a0 = a0 < c->P[2] ? a0 : c->P[2];
    a1 = a1 < c->P[2] ? a1 : c->P[2];
    a1 = a1 > a0 ? a1 : a0;
    for (int64_t p1 = 0; p1 < c->P[1]; p1++) {
        const int64_t i1 = p1 - c->lo[1];
        float *dr = d + (p0 * c->P[1] + p1) * c->P[2];
        if (i0 < 0 || i0 >= c->S[0] || i1 < 0 || i1 >= c->S[1])
            row(dr, NULL, c->P[2], c->P[2], c->P[2]);
        else
            row(dr, s + (i0 * c->S[1] + i1) * c->S[2] + (a0 - c->lo[2]), a0, a1, c->P[2]);
    }
}

static size_t pad_bytes(int64_t planes, const int64_t P[3])
{
    return (size_t)(planes * vol3(P)) * sizeof(float);
}

/* a padded copy in the pool's scratch buffer: hand it back with cpk_scratch_give */
static float *pad_copy(cpk_pool *p, cpk_isa isa, const float *src, int64_t planes,
                       const int64_t S[3], const int64_t P[3], const int64_t lo[3])
{
    float *dst = cpk_scratch_take(p, pad_bytes(planes, P));
    if (!dst)
        return NULL;
    pad_ctx c = {.src = src, .dst = dst, .isa = isa};
    for (int a = 0; a < 3; a++) {
        c.S[a] = S[a];
        c.P[a] = P[a];
        c.lo[a] = lo[a];
    }
    cpk_parallel(p, planes * P[0], pad_task, &c);
    return dst;
}

// ----------------------------------------------------------------------------
// the direct kernel: out[n,f,o] = init + sum_{c,k} w[f,c,k] * xp[n,c,o*s + k*dil], s2 == 1

typedef struct {
    int64_t N, C, F;            /* input channels C, output channels F */
    int64_t P[3], O[3];         /* padded input, output */
    int64_t K[3], s[3], dil[3]; /* kernel, stride (s[2] == 1 for the direct kernel), dil */
    const float *xp, *w, *bias; /* w (F, C, kvol); bias (F) or NULL */
    float *out;
    bool accumulate;
    int path; /* cpk_conv_geom.path */
} core_args;

static void core_portable_row(const core_args *a, int64_t n, int64_t f, int64_t o0,
                              int64_t o1)
{
    const int64_t kvol = vol3(a->K);
    float *y = a->out + ((n * a->F + f) * a->O[0] + o0) * a->O[1] * a->O[2] + o1 * a->O[2];
    for (int64_t o2 = 0; o2 < a->O[2]; o2++) {
        float acc = a->accumulate ? y[o2] : a->bias ? a->bias[f] : 0.0f;
        for (int64_t c = 0; c < a->C; c++) {
            const float *x = a->xp + (n * a->C + c) * vol3(a->P);
            const float *w = a->w + (f * a->C + c) * kvol;
            for (int64_t k0 = 0; k0 < a->K[0]; k0++)
                for (int64_t k1 = 0; k1 < a->K[1]; k1++)
                    for (int64_t k2 = 0; k2 < a->K[2]; k2++) {
                        const int64_t q0 = o0 * a->s[0] + k0 * a->dil[0];
                        const int64_t q1 = o1 * a->s[1] + k1 * a->dil[1];
                        const int64_t q2 = o2 * a->s[2] + k2 * a->dil[2];
                        acc = fmaf(w[(k0 * a->K[1] + k1) * a->K[2] + k2],
                                   x[(q0 * a->P[1] + q1) * a->P[2] + q2], acc);
                    }
        }
        y[o2] = acc;
    }
}

#if CPK_X86
/* outputs f0..f0+4 x positions o2 in [ow, ow + 8*NV) of row (o0, o1); the last vector
 * holds `tail` (1..8) valid lanes; only the first fb channels are stored (the weights are
 * padded with zero channels up to a multiple of 4) */
#define CORE_TILE(NV)                                                                      \
    __attribute__((target("avx2,fma"))) static void core_avx2_nv##NV(                      \
        const core_args *a, int64_t n, int64_t f0, int fb, int64_t o0, int64_t o1,         \
        int64_t ow, int tail)                                                              \
    {                                                                                      \
        const int64_t kvol = vol3(a->K);                                                   \
        const int64_t oplane = vol3(a->O), pplane = vol3(a->P);                            \
        static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1,              \
                                             0,  0,  0,  0,  0,  0,  0,  0};               \
        const __m256i mask = _mm256_loadu_si256((const __m256i *)(mask_src + 8 - tail));  \
        const bool full = tail == 8;                                                       \
        __m256 acc[4][NV];                                                                 \
        _Pragma("GCC unroll 4") for (int f = 0; f < 4; f++)                                \
        {                                                                                  \
            const int fs = f < fb ? f : 0;                                                 \
            const float *y = a->out + (n * a->F + f0 + fs) * oplane +                     \
                             (o0 * a->O[1] + o1) * a->O[2] + ow;                           \
            const float b = a->bias && f < fb ? a->bias[f0 + f] : 0.0f;                    \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                           \
            {                                                                              \
                if (a->accumulate)                                                         \
                    acc[f][v] = v < NV - 1 || full ? _mm256_loadu_ps(y + 8 * v)            \
                                                   : _mm256_maskload_ps(y + 8 * v, mask);  \
                else                                                                       \
                    acc[f][v] = _mm256_set1_ps(b);                                         \
            }                                                                              \
        }                                                                                  \
        const int64_t wstride = a->C * kvol; /* between output channels */                 \
        for (int64_t c = 0; c < a->C; c++) {                                               \
            const float *xc = a->xp + (n * a->C + c) * pplane;                             \
            const float *wc = a->w + (f0 * a->C + c) * kvol;                               \
            for (int64_t k0 = 0; k0 < a->K[0]; k0++) {                                     \
                for (int64_t k1 = 0; k1 < a->K[1]; k1++) {                                 \
                    const float *xr = xc + ((o0 * a->s[0] + k0 * a->dil[0]) * a->P[1] +    \
                                            o1 * a->s[1] + k1 * a->dil[1]) * a->P[2] + ow; \
                    const float *wk = wc + (k0 * a->K[1] + k1) * a->K[2];                  \
                    for (int64_t k2 = 0; k2 < a->K[2]; k2++) {                             \
                        const float *xs = xr + k2 * a->dil[2];                             \
                        __m256 xv[NV];                                                     \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)               \
                            xv[v] = v < NV - 1 || full                                     \
                                        ? _mm256_loadu_ps(xs + 8 * v)                      \
                                        : _mm256_maskload_ps(xs + 8 * v, mask);            \
                        _Pragma("GCC unroll 4") for (int f = 0; f < 4; f++)                \
                        {                                                                  \
                            const __m256 wv = _mm256_broadcast_ss(wk + f * wstride + k2);  \
                            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)           \
                                acc[f][v] = _mm256_fmadd_ps(wv, xv[v], acc[f][v]);         \
                        }                                                                  \
                    }                                                                      \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
        _Pragma("GCC unroll 4") for (int f = 0; f < 4; f++)                                \
        {                                                                                  \
            if (f >= fb)                                                                   \
                break;                                                                     \
            float *y = a->out + (n * a->F + f0 + f) * oplane + (o0 * a->O[1] + o1) * a->O[2] + ow; \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                           \
            {                                                                              \
                if (v < NV - 1 || full)                                                    \
                    _mm256_storeu_ps(y + 8 * v, acc[f][v]);                                \
                else                                                                       \
                    _mm256_maskstore_ps(y + 8 * v, mask, acc[f][v]);                       \
            }                                                                              \
        }                                                                                  \
    }

CORE_TILE(1)
CORE_TILE(2)
CORE_TILE(3)
#undef CORE_TILE

static void core_avx2_row(const core_args *a, int64_t n, int64_t f0, int fb, int64_t o0,
                          int64_t o1)
{
    const int64_t O2 = a->O[2];
    const int64_t nvec = (O2 + 7) / 8;
    const int64_t groups = (nvec + 2) / 3; /* at most 3 vectors per tile, evenly split */
    int64_t v0 = 0;
    for (int64_t gi = 0; gi < groups; gi++) {
        const int64_t v1 = nvec * (gi + 1) / groups;
        const int nv = (int)(v1 - v0);
        const int64_t ow = v0 * 8;
        const int64_t end = v1 * 8 < O2 ? v1 * 8 : O2;
        const int tail = (int)(end - ow - 8 * (nv - 1));
        if (nv == 1)
            core_avx2_nv1(a, n, f0, fb, o0, o1, ow, tail);
        else if (nv == 2)
            core_avx2_nv2(a, n, f0, fb, o0, o1, ow, tail);
        else
            core_avx2_nv3(a, n, f0, fb, o0, o1, ow, tail);
        v0 = v1;
    }
}

/* The AVX-512 tile: outputs f0..f0+4 x R rows (o1 .. o1+R-1) x positions [ow, ow + 16*NV)
 * of slice o0, 4 * R * NV (<= 16) accumulators of 16 lanes; the last vector of a row holds
 * `tail` (1..16) valid lanes. Every output is the same fma chain as in the AVX2 tile (init,
 * then (c, k0, k1, k2) ascending): only the blocking differs. */
#define CORE512_TILE(NV, R)                                                                \
    __attribute__((target("avx512f"))) static void core512_nv##NV##_r##R(                  \
        const core_args *a, int64_t n, int64_t f0, int fb, int64_t o0, int64_t o1,         \
        int64_t ow, int tail)                                                              \
    {                                                                                      \
        const int64_t kvol = vol3(a->K);                                                   \
        const int64_t oplane = vol3(a->O), pplane = vol3(a->P);                            \
        const __mmask16 m = (__mmask16)((1u << tail) - 1u);                                \
        __m512 acc[4][R][NV];                                                              \
        _Pragma("GCC unroll 4") for (int f = 0; f < 4; f++)                                \
        {                                                                                  \
            const int fs = f < fb ? f : 0;                                                 \
            const float b = a->bias && f < fb ? a->bias[f0 + f] : 0.0f;                    \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                            \
            {                                                                              \
                const float *y = a->out + (n * a->F + f0 + fs) * oplane +                  \
                                 (o0 * a->O[1] + o1 + r) * a->O[2] + ow;                   \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                       \
                {                                                                          \
                    if (a->accumulate)                                                     \
                        acc[f][r][v] = v < NV - 1 ? _mm512_loadu_ps(y + 16 * v)            \
                                                  : _mm512_maskz_loadu_ps(m, y + 16 * v);  \
                    else                                                                   \
                        acc[f][r][v] = _mm512_set1_ps(b);                                  \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
        const int64_t wstride = a->C * kvol; /* between output channels */                 \
        const int64_t rstride = a->s[1] * a->P[2]; /* between the rows of o1, o1 + 1 */    \
        for (int64_t c = 0; c < a->C; c++) {                                               \
            const float *xc = a->xp + (n * a->C + c) * pplane;                             \
            const float *wc = a->w + (f0 * a->C + c) * kvol;                               \
            for (int64_t k0 = 0; k0 < a->K[0]; k0++) {                                     \
                for (int64_t k1 = 0; k1 < a->K[1]; k1++) {                                 \
                    const float *xr = xc + ((o0 * a->s[0] + k0 * a->dil[0]) * a->P[1] +    \
                                            o1 * a->s[1] + k1 * a->dil[1]) * a->P[2] + ow; \
                    const float *wk = wc + (k0 * a->K[1] + k1) * a->K[2];                  \
                    for (int64_t k2 = 0; k2 < a->K[2]; k2++) {                             \
                        const float *xs = xr + k2 * a->dil[2];                             \
                        __m512 xv[R][NV];                                                  \
                        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                \
                            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)           \
                                xv[r][v] = v < NV - 1                                      \
                                    ? _mm512_loadu_ps(xs + r * rstride + 16 * v)           \
                                    : _mm512_maskz_loadu_ps(m, xs + r * rstride + 16 * v); \
                        _Pragma("GCC unroll 4") for (int f = 0; f < 4; f++)                \
                        {                                                                  \
                            const __m512 wv = _mm512_set1_ps(wk[f * wstride + k2]);        \
                            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)            \
                                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)       \
                                    acc[f][r][v] = _mm512_fmadd_ps(wv, xv[r][v], acc[f][r][v]); \
                        }                                                                  \
                    }                                                                      \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
        _Pragma("GCC unroll 4") for (int f = 0; f < 4; f++)                                \
        {                                                                                  \
            if (f >= fb)                                                                   \
                break;                                                                     \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                            \
            {                                                                              \
                float *y = a->out + (n * a->F + f0 + f) * oplane +                         \
                           (o0 * a->O[1] + o1 + r) * a->O[2] + ow;                         \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                       \
                {                                                                          \
                    if (v < NV - 1)                                                        \
                        _mm512_storeu_ps(y + 16 * v, acc[f][r][v]);                        \
                    else                                                                   \
                        _mm512_mask_storeu_ps(y + 16 * v, m, acc[f][r][v]);                \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
    }

CORE512_TILE(1, 1)
CORE512_TILE(1, 2)
CORE512_TILE(1, 3)
CORE512_TILE(1, 4)
CORE512_TILE(2, 1)
CORE512_TILE(2, 2)
CORE512_TILE(3, 1)
CORE512_TILE(4, 1)
#undef CORE512_TILE

/* rows of NV vectors: R = 4 / NV rows at a time (16 accumulators), then the rows left */
static void core512_rows(const core_args *a, int64_t n, int64_t f0, int fb, int64_t o0,
                         int nv, int64_t ow, int tail)
{
    const int64_t O1 = a->O[1];
    const int R = nv == 1 ? 4 : nv == 2 ? 2 : 1;
    int64_t o1 = 0;
    for (; o1 + R <= O1; o1 += R) {
        if (nv == 1)
            core512_nv1_r4(a, n, f0, fb, o0, o1, ow, tail);
        else if (nv == 2)
            core512_nv2_r2(a, n, f0, fb, o0, o1, ow, tail);
        else if (nv == 3)
            core512_nv3_r1(a, n, f0, fb, o0, o1, ow, tail);
        else
            core512_nv4_r1(a, n, f0, fb, o0, o1, ow, tail);
    }
    const int64_t left = O1 - o1; /* fewer than R */
    if (left == 3)
        core512_nv1_r3(a, n, f0, fb, o0, o1, ow, tail);
    else if (left == 2 && nv == 1)
        core512_nv1_r2(a, n, f0, fb, o0, o1, ow, tail);
    else
        for (; o1 < O1; o1++) {
            if (nv == 1)
                core512_nv1_r1(a, n, f0, fb, o0, o1, ow, tail);
            else
                core512_nv2_r1(a, n, f0, fb, o0, o1, ow, tail);
        }
}

/* every row of slice o0 for 4 output channels: each row split into groups of at most 4
 * vectors of 16, evenly */
static void core512_slice(const core_args *a, int64_t n, int64_t f0, int fb, int64_t o0)
{
    const int64_t O2 = a->O[2];
    const int64_t nvec = (O2 + 15) / 16;
    const int64_t groups = (nvec + 3) / 4;
    int64_t v0 = 0;
    for (int64_t gi = 0; gi < groups; gi++) {
        const int64_t v1 = nvec * (gi + 1) / groups;
        const int nv = (int)(v1 - v0);
        const int64_t ow = v0 * 16;
        const int64_t end = v1 * 16 < O2 ? v1 * 16 : O2;
        core512_rows(a, n, f0, fb, o0, nv, ow, (int)(end - ow - 16 * (nv - 1)));
        v0 = v1;
    }
}
#endif

typedef struct {
    const core_args *a;
    cpk_isa isa;
    int64_t fblocks;
} core_job;

static void core_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const core_job *j = vctx;
    const core_args *a = j->a;
    const int64_t o0 = task % a->O[0];
    const int64_t fbk = (task / a->O[0]) % j->fblocks;
    const int64_t n = task / a->O[0] / j->fblocks;
    const int64_t f0 = fbk * 4;
    const int fb = (int)(a->F - f0 < 4 ? a->F - f0 : 4);
#if CPK_X86
    if (j->isa >= CPK_ISA_AVX512 && a->s[2] == 1) {
        core512_slice(a, n, f0, fb, o0);
        return;
    }
#endif
    for (int64_t o1 = 0; o1 < a->O[1]; o1++) {
#if CPK_X86
        if (j->isa != CPK_ISA_PORTABLE && a->s[2] == 1) {
            core_avx2_row(a, n, f0, fb, o0, o1);
            continue;
        }
#endif
        for (int f = 0; f < fb; f++)
            core_portable_row(a, n, f0 + f, o0, o1);
    }
}

/* implicit GEMM for one sample: B(k = (c, kk), j = position) read from the padded input */
typedef struct {
    const core_args *a;
    int64_t n;
} igemm_ctx;

/* B's columns [j0, j0 + NR) where they lie in the padded input: NR positions along one
 * output row with stride 1 are NR consecutive floats for every k, at the offsets
 * igemm_koff gives; NULL when the panel runs past the row's end (it is packed instead) */
static const float *igemm_bpanel(const void *vctx, int64_t j0, int64_t NR)
{
    const igemm_ctx *ic = vctx;
    const core_args *a = ic->a;
    const int64_t o2 = j0 % a->O[2], o1 = j0 / a->O[2] % a->O[1], o0 = j0 / a->O[2] / a->O[1];
    if (a->s[2] != 1 || o2 + NR > a->O[2])
        return NULL;
    return a->xp + ic->n * a->C * vol3(a->P) +
           ((o0 * a->s[0]) * a->P[1] + o1 * a->s[1]) * a->P[2] + o2;
}

/* koff[k] for k = (c, q0, q1, q2): the offset of B's row k from a panel's base */
static int64_t *igemm_koff(const core_args *a)
{
    const int64_t kvol = vol3(a->K);
    int64_t *koff = malloc((size_t)(a->C * kvol) * sizeof *koff);
    if (!koff)
        return NULL;
    int64_t k = 0;
    for (int64_t c = 0; c < a->C; c++)
        for (int64_t q0 = 0; q0 < a->K[0]; q0++)
            for (int64_t q1 = 0; q1 < a->K[1]; q1++)
                for (int64_t q2 = 0; q2 < a->K[2]; q2++)
                    koff[k++] = c * vol3(a->P) +
                                (q0 * a->dil[0] * a->P[1] + q1 * a->dil[1]) * a->P[2] +
                                q2 * a->dil[2];
    return koff;
}

/* The panel's nr positions as runs that are contiguous in the padded input (positions
 * along the innermost axis with stride 1): then each k row of the panel is a few block
 * copies instead of nr gathers. A pure copy: the packed values are the same either way. */
typedef struct {
    int n;
    int64_t dst[CPK_NR_MAX], src[CPK_NR_MAX], len[CPK_NR_MAX];
} igemm_runs;

static void igemm_packB(const void *vctx, int64_t k0, int64_t kc, int64_t j0, int64_t nr,
                        int64_t NR, float *dst)
{
    const igemm_ctx *ic = vctx;
    const core_args *a = ic->a;
    igemm_runs runs = {0};
    for (int64_t j = 0; j < nr; j++) {
        const int64_t pos = j0 + j;
        const int64_t o2 = pos % a->O[2], o1 = pos / a->O[2] % a->O[1],
                      o0 = pos / a->O[2] / a->O[1];
        const int64_t off = ((o0 * a->s[0]) * a->P[1] + o1 * a->s[1]) * a->P[2] + o2 * a->s[2];
        if (runs.n > 0 && a->s[2] == 1 && runs.src[runs.n - 1] + runs.len[runs.n - 1] == off) {
            runs.len[runs.n - 1]++;
        } else {
            runs.dst[runs.n] = j;
            runs.src[runs.n] = off;
            runs.len[runs.n] = 1;
            runs.n++;
        }
    }
    /* k = (c, q0, q1, q2) counted up without divisions */
    const int64_t kvol = vol3(a->K), kk = k0 % kvol;
    int64_t c = k0 / kvol, q2 = kk % a->K[2], q1 = kk / a->K[2] % a->K[1],
            q0 = kk / a->K[2] / a->K[1];
    for (int64_t k = 0; k < kc; k++) {
        const float *src = a->xp + (ic->n * a->C + c) * vol3(a->P) +
                           (q0 * a->dil[0] * a->P[1] + q1 * a->dil[1]) * a->P[2] +
                           q2 * a->dil[2];
        float *d = dst + k * NR;
        if (runs.n == 1 && nr == 32) {
            memcpy(d, src + runs.src[0], 32 * sizeof *d);
        } else {
            for (int r = 0; r < runs.n; r++)
                memcpy(d + runs.dst[r], src + runs.src[r], (size_t)runs.len[r] * sizeof *d);
            for (int64_t j = nr; j < NR; j++)
                d[j] = 0.0f;
        }
        if (++q2 == a->K[2]) {
            q2 = 0;
            if (++q1 == a->K[1]) {
                q1 = 0;
                if (++q0 == a->K[0]) {
                    q0 = 0;
                    c++;
                }
            }
        }
    }
}

static bool run_core(cpk_pool *p, cpk_isa isa, core_args *a)
{
    const int64_t oplane = vol3(a->O);
    bool gemm = a->C >= 16 && a->F >= 16;
    if (a->path)
        gemm = a->path == 2;
    if (gemm || a->s[2] != 1) {
        /* implicit GEMM per sample: C = out[n] (F x positions), A = w (F x C*kvol) */
        int64_t *koff = a->s[2] == 1 ? igemm_koff(a) : NULL;
        if (a->s[2] == 1 && !koff)
            return false;
        for (int64_t n = 0; n < a->N; n++) {
            float *y = a->out + n * a->F * oplane;
            /* each chain starts from the bias (or 0), or from y when accumulating */
            igemm_ctx ic = {a, n};
            cpk_gemm_src s = {.a = a->w, .a_rs = a->C * vol3(a->K), .a_cs = 1,
                             .packB = igemm_packB, .packB_ctx = &ic,
                             .bpanel = koff ? igemm_bpanel : NULL, .b_koff = koff,
                             .row_init = a->accumulate ? NULL : a->bias};
            if (!cpk_sgemm(p, isa, a->F, oplane, a->C * vol3(a->K), &s, y, oplane,
                           a->accumulate)) {
                free(koff);
                return false;
            }
        }
        free(koff);
        return true;
    }
    /* the direct kernel computes 4 output channels at a time: pad W with zero channels */
    const int64_t fpad = (a->F + 3) / 4 * 4, wrow = a->C * vol3(a->K);
    float *wpad = NULL;
    if (fpad != a->F) {
        if (!(wpad = calloc((size_t)(fpad * wrow), sizeof *wpad)))
            return false;
        memcpy(wpad, a->w, (size_t)(a->F * wrow) * sizeof *wpad);
    }
    core_args ap = *a;
    if (wpad)
        ap.w = wpad;
    core_job j = {&ap, isa, fpad / 4};
    cpk_parallel(p, a->N * j.fblocks * a->O[0], core_task, &j);
    free(wpad);
    return true;
}

// ----------------------------------------------------------------------------
// entry points

bool cpk_conv_forward(cpk_pool *p, cpk_isa isa, const cpk_conv_geom *g, const float *x,
                     const float *w, const float *bias, float *y, bool accumulate)
{
    int64_t P[3];
    for (int a = 0; a < 3; a++)
        P[a] = (g->out[a] - 1) * g->stride[a] + g->dil[a] * (g->k[a] - 1) + 1;
    float *xp = pad_copy(p, isa, x, g->N * g->C, g->in, P, g->pad);
    if (!xp)
        return false;
    core_args a = {.N = g->N, .C = g->C, .F = g->F, .xp = xp, .w = w, .bias = bias,
                   .out = y, .accumulate = accumulate, .path = g->path};
    for (int i = 0; i < 3; i++) {
        a.P[i] = P[i];
        a.O[i] = g->out[i];
        a.K[i] = g->k[i];
        a.s[i] = g->stride[i];
        a.dil[i] = g->dil[i];
    }
    bool ok = run_core(p, isa, &a);
    cpk_scratch_give(p, xp, pad_bytes(g->N * g->C, P));
    return ok;
}

/* strided backward data: B((f, k'), i) = dy[f][(i + pad - k*dil) / s] when that divides
 * and lies inside, else 0 */
typedef struct {
    const cpk_conv_geom *g;
    const float *dy;
    int64_t n;
} bstride_ctx;

static void bstride_packB(const void *vctx, int64_t k0, int64_t kc, int64_t j0, int64_t nr,
                          int64_t NR, float *dst)
{
    const bstride_ctx *bc = vctx;
    const cpk_conv_geom *g = bc->g;
    const int64_t kvol = g->k[0] * g->k[1] * g->k[2];
    const int64_t oplane = vol3(g->out);
    for (int64_t k = 0; k < kc; k++) {
        const int64_t kf = (k0 + k) % kvol, f = (k0 + k) / kvol;
        const int64_t kq[3] = {kf / g->k[2] / g->k[1], kf / g->k[2] % g->k[1], kf % g->k[2]};
        const float *dyf = bc->dy + (bc->n * g->F + f) * oplane;
        float *d = dst + k * NR;
        int64_t j = 0;
        for (; j < nr; j++) {
            const int64_t pos = j0 + j;
            const int64_t i[3] = {pos / g->in[2] / g->in[1], pos / g->in[2] % g->in[1],
                                  pos % g->in[2]};
            int64_t off = 0;
            bool ok = true;
            for (int ax = 0; ax < 3 && ok; ax++) {
                const int64_t kk = g->k[ax] - 1 - kq[ax]; /* flipped */
                const int64_t q = i[ax] + g->pad[ax] - kk * g->dil[ax];
                ok = q >= 0 && q % g->stride[ax] == 0 && q / g->stride[ax] < g->out[ax];
                off = off * g->out[ax] + (ok ? q / g->stride[ax] : 0);
            }
            d[j] = ok ? dyf[off] : 0.0f;
        }
        for (; j < NR; j++)
            d[j] = 0.0f;
    }
}

/* wt[c][f][k'] = w[f][c][flip(k')] */
static float *flip_transpose(const cpk_conv_geom *g, const float *w)
{
    const int64_t kvol = g->k[0] * g->k[1] * g->k[2];
    float *wt = malloc((size_t)(g->F * g->C * kvol) * sizeof *wt);
    if (!wt)
        return NULL;
    for (int64_t f = 0; f < g->F; f++)
        for (int64_t c = 0; c < g->C; c++)
            for (int64_t k = 0; k < kvol; k++)
                wt[(c * g->F + f) * kvol + (kvol - 1 - k)] = w[(f * g->C + c) * kvol + k];
    return wt;
}

bool cpk_conv_backward_data(cpk_pool *p, cpk_isa isa, const cpk_conv_geom *g, const float *dy,
                           const float *w, float *dx, bool accumulate)
{
    float *wt = flip_transpose(g, w);
    if (!wt)
        return false;
    const int64_t kvol = g->k[0] * g->k[1] * g->k[2];
    bool ok = true;
    if (g->stride[0] == 1 && g->stride[1] == 1 && g->stride[2] == 1) {
        int64_t P[3], lo[3];
        for (int a = 0; a < 3; a++) {
            P[a] = g->in[a] + g->dil[a] * (g->k[a] - 1);
            lo[a] = g->dil[a] * (g->k[a] - 1) - g->pad[a];
        }
        float *dyp = pad_copy(p, isa, dy, g->N * g->F, g->out, P, lo);
        if (!dyp) {
            free(wt);
            return false;
        }
        core_args a = {.N = g->N, .C = g->F, .F = g->C, .xp = dyp, .w = wt, .bias = NULL,
                       .out = dx, .accumulate = accumulate, .path = g->path};
        for (int i = 0; i < 3; i++) {
            a.P[i] = P[i];
            a.O[i] = g->in[i];
            a.K[i] = g->k[i];
            a.s[i] = 1;
            a.dil[i] = g->dil[i];
        }
        ok = run_core(p, isa, &a);
        cpk_scratch_give(p, dyp, pad_bytes(g->N * g->F, P));
    } else {
        const int64_t iplane = vol3(g->in);
        for (int64_t n = 0; n < g->N && ok; n++) {
            float *out = dx + n * g->C * iplane;
            if (!accumulate)
                memset(out, 0, (size_t)(g->C * iplane) * sizeof *out);
            bstride_ctx bc = {g, dy, n};
            cpk_gemm_src s = {.a = wt, .a_rs = g->F * kvol, .a_cs = 1,
                             .packB = bstride_packB, .packB_ctx = &bc};
            ok = cpk_sgemm(p, isa, g->C, iplane, g->F * kvol, &s, out, iplane, true);
        }
    }
    free(wt);
    return ok;
}

// ----------------------------------------------------------------------------
// weight gradient

typedef struct {
    const cpk_conv_geom *g;
    cpk_isa isa;
    const float *dy, *xp;
    int64_t P[3];
    int64_t fblocks;
    int64_t taps_per_task; /* kh taps one task computes: 3 for the 4x3x3 kernel, else 1 */
    double *dw;
} dw_job;

/* lanes[f][kw][l] += over row o1 of plane (n, o0): dy[f][o2] * xrow[o2*s2 + kw*d2] */
static void dw_row_portable(const dw_job *j, const float *const *dyr, int fb,
                            const float *xr, int64_t kw0, int kwb, float lanes[4][3][LANES])
{
    const cpk_conv_geom *g = j->g;
    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
        const int l = (int)(o2 % LANES);
        for (int f = 0; f < fb; f++)
            for (int q = 0; q < kwb; q++)
                lanes[f][q][l] = fmaf(dyr[f][o2],
                                      xr[o2 * g->stride[2] + (kw0 + q) * g->dil[2]],
                                      lanes[f][q][l]);
    }
}

#if CPK_X86
/* the 4 x 3 fast case of one plane: lanes[f][q] (zero on entry) accumulate every row */
__attribute__((target("avx2,fma"))) static void dw_plane_avx2_4x3(const dw_job *j,
                                                                  const float *const *dy0,
                                                                  const float *x0,
                                                                  int64_t xrow, int64_t kw0,
                                                                  float lanes[4][3][LANES])
{
    const cpk_conv_geom *g = j->g;
    static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t O1 = g->out[1], O2 = g->out[2], d2 = g->dil[2];
    const int64_t full = O2 / 8 * 8;
    const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_src + 8 - (O2 - full)));
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
    __m256 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
#define DW_STEP(LOADX, LOADD)                                                              \
    do {                                                                                   \
        const __m256 x0v = LOADX(xr + o2 + kw0 * d2);                                      \
        const __m256 x1v = LOADX(xr + o2 + (kw0 + 1) * d2);                                \
        const __m256 x2v = LOADX(xr + o2 + (kw0 + 2) * d2);                                \
        __m256 dv = LOADD(dy0[0] + r + o2);                                                \
        a00 = _mm256_fmadd_ps(dv, x0v, a00);                                               \
        a01 = _mm256_fmadd_ps(dv, x1v, a01);                                               \
        a02 = _mm256_fmadd_ps(dv, x2v, a02);                                               \
        dv = LOADD(dy0[1] + r + o2);                                                       \
        a10 = _mm256_fmadd_ps(dv, x0v, a10);                                               \
        a11 = _mm256_fmadd_ps(dv, x1v, a11);                                               \
        a12 = _mm256_fmadd_ps(dv, x2v, a12);                                               \
        dv = LOADD(dy0[2] + r + o2);                                                       \
        a20 = _mm256_fmadd_ps(dv, x0v, a20);                                               \
        a21 = _mm256_fmadd_ps(dv, x1v, a21);                                               \
        a22 = _mm256_fmadd_ps(dv, x2v, a22);                                               \
        dv = LOADD(dy0[3] + r + o2);                                                       \
        a30 = _mm256_fmadd_ps(dv, x0v, a30);                                               \
        a31 = _mm256_fmadd_ps(dv, x1v, a31);                                               \
        a32 = _mm256_fmadd_ps(dv, x2v, a32);                                               \
    } while (0)
#define LD_FULL(p) _mm256_loadu_ps(p)
#define LD_MASK(p) _mm256_maskload_ps((p), m)
    for (int64_t o1 = 0; o1 < O1; o1++) {
        const int64_t r = o1 * O2;
        const float *xr = x0 + o1 * xrow;
        int64_t o2 = 0;
        for (; o2 < full; o2 += 8)
            DW_STEP(LD_FULL, LD_FULL);
        if (o2 < O2)
            DW_STEP(LD_MASK, LD_MASK);
    }
#undef LD_FULL
#undef LD_MASK
#undef DW_STEP
    _mm256_storeu_ps(lanes[0][0], a00); _mm256_storeu_ps(lanes[0][1], a01); _mm256_storeu_ps(lanes[0][2], a02);
    _mm256_storeu_ps(lanes[1][0], a10); _mm256_storeu_ps(lanes[1][1], a11); _mm256_storeu_ps(lanes[1][2], a12);
    _mm256_storeu_ps(lanes[2][0], a20); _mm256_storeu_ps(lanes[2][1], a21); _mm256_storeu_ps(lanes[2][2], a22);
    _mm256_storeu_ps(lanes[3][0], a30); _mm256_storeu_ps(lanes[3][1], a31); _mm256_storeu_ps(lanes[3][2], a32);
}

/* 4 f x 3 kw x 3 kh taps: the 4x3 kernel's accumulators for kh tap t live in acc[t]
 * between rows; per output row o1 the three taps run one after the other over the same
 * dy rows (then in L1) and their own x rows. Each accumulator still sees the plane's
 * positions in (o1, o2) order, so lanes[t] equals what the 4x3 kernel gives for tap t;
 * what changes is that a large plane's dy is read from L2 once instead of three times. */
__attribute__((target("avx2,fma"))) static void dw_plane_avx2_4x3_taps3(
    const dw_job *j, const float *const *dy0, const float *x0, int64_t xrow, int64_t tapstep,
    float lanes[3][4][3][LANES])
{
    const cpk_conv_geom *g = j->g;
    static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t O1 = g->out[1], O2 = g->out[2], d2 = g->dil[2];
    const int64_t full = O2 / 8 * 8;
    const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_src + 8 - (O2 - full)));
    __m256 acc[3][12];
    for (int t = 0; t < 3; t++)
        for (int q = 0; q < 12; q++)
            acc[t][q] = _mm256_setzero_ps();
#define DW_STEP3(LOADX, LOADD)                                                             \
    do {                                                                                   \
        const __m256 x0v = LOADX(xr + o2), x1v = LOADX(xr + o2 + d2);                      \
        const __m256 x2v = LOADX(xr + o2 + 2 * d2);                                        \
        __m256 dv = LOADD(dy0[0] + r + o2);                                                \
        a00 = _mm256_fmadd_ps(dv, x0v, a00);                                               \
        a01 = _mm256_fmadd_ps(dv, x1v, a01);                                               \
        a02 = _mm256_fmadd_ps(dv, x2v, a02);                                               \
        dv = LOADD(dy0[1] + r + o2);                                                       \
        a10 = _mm256_fmadd_ps(dv, x0v, a10);                                               \
        a11 = _mm256_fmadd_ps(dv, x1v, a11);                                               \
        a12 = _mm256_fmadd_ps(dv, x2v, a12);                                               \
        dv = LOADD(dy0[2] + r + o2);                                                       \
        a20 = _mm256_fmadd_ps(dv, x0v, a20);                                               \
        a21 = _mm256_fmadd_ps(dv, x1v, a21);                                               \
        a22 = _mm256_fmadd_ps(dv, x2v, a22);                                               \
        dv = LOADD(dy0[3] + r + o2);                                                       \
        a30 = _mm256_fmadd_ps(dv, x0v, a30);                                               \
        a31 = _mm256_fmadd_ps(dv, x1v, a31);                                               \
        a32 = _mm256_fmadd_ps(dv, x2v, a32);                                               \
    } while (0)
#define LD_FULL(p) _mm256_loadu_ps(p)
#define LD_MASK(p) _mm256_maskload_ps((p), m)
    for (int64_t o1 = 0; o1 < O1; o1++) {
        const int64_t r = o1 * O2;
        for (int t = 0; t < 3; t++) {
            const float *xr = x0 + o1 * xrow + t * tapstep;
            __m256 a00 = acc[t][0], a01 = acc[t][1], a02 = acc[t][2], a10 = acc[t][3];
            __m256 a11 = acc[t][4], a12 = acc[t][5], a20 = acc[t][6], a21 = acc[t][7];
            __m256 a22 = acc[t][8], a30 = acc[t][9], a31 = acc[t][10], a32 = acc[t][11];
            int64_t o2 = 0;
            for (; o2 < full; o2 += 8)
                DW_STEP3(LD_FULL, LD_FULL);
            if (o2 < O2)
                DW_STEP3(LD_MASK, LD_MASK);
            acc[t][0] = a00, acc[t][1] = a01, acc[t][2] = a02, acc[t][3] = a10;
            acc[t][4] = a11, acc[t][5] = a12, acc[t][6] = a20, acc[t][7] = a21;
            acc[t][8] = a22, acc[t][9] = a30, acc[t][10] = a31, acc[t][11] = a32;
        }
    }
#undef LD_FULL
#undef LD_MASK
#undef DW_STEP3
    for (int t = 0; t < 3; t++)
        for (int f = 0; f < 4; f++)
            for (int q = 0; q < 3; q++)
                _mm256_storeu_ps(lanes[t][f][q], acc[t][f * 3 + q]);
}

/* any fb <= 4, kwb <= 3: lanes accumulate every row of the plane */
__attribute__((target("avx2,fma"))) static void dw_plane_avx2(const dw_job *j,
                                                              const float *const *dy0, int fb,
                                                              const float *x0, int64_t xrow,
                                                              int64_t kw0, int kwb,
                                                              float lanes[4][3][LANES])
{
    const cpk_conv_geom *g = j->g;
    static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t O1 = g->out[1], O2 = g->out[2], d2 = g->dil[2];
    __m256 acc[4][3];
    for (int f = 0; f < fb; f++)
        for (int q = 0; q < kwb; q++)
            acc[f][q] = _mm256_setzero_ps();
    for (int64_t o1 = 0; o1 < O1; o1++) {
        const float *xr = x0 + o1 * xrow;
        for (int64_t o2 = 0; o2 < O2; o2 += 8) {
            const int64_t left = O2 - o2 < 8 ? O2 - o2 : 8;
            const __m256i m = _mm256_loadu_si256((const __m256i *)(mask_src + 8 - left));
            for (int q = 0; q < kwb; q++) {
                const __m256 xv = _mm256_maskload_ps(xr + o2 + (kw0 + q) * d2, m);
                for (int f = 0; f < fb; f++) {
                    const __m256 dv = _mm256_maskload_ps(dy0[f] + o1 * O2 + o2, m);
                    acc[f][q] = _mm256_fmadd_ps(dv, xv, acc[f][q]);
                }
            }
        }
    }
    for (int f = 0; f < fb; f++)
        for (int q = 0; q < kwb; q++)
            _mm256_storeu_ps(lanes[f][q], acc[f][q]);
}
#endif

static void dw_task_tap(const dw_job *j, int64_t f0, int fb, int64_t c, int64_t k0, int64_t k1,
                        int64_t oplane, int64_t pplane, int64_t xrow);

static void dw_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const dw_job *j = vctx;
    const cpk_conv_geom *g = j->g;
    const int64_t K0 = g->k[0], K1 = g->k[1], K2 = g->k[2], kvol = K0 * K1 * K2;
    const int64_t tk = K1 / j->taps_per_task; /* tasks along kh */
    /* consecutive tasks share c and take the next block of F: the x plane of c stays in L2
     * while the dy blocks (F planes, fewer than C x planes in a decoder) come from L3 */
    const int64_t k1s = task % tk * j->taps_per_task, k0 = task / tk % K0;
    const int64_t f0 = task / tk / K0 % j->fblocks * 4, c = task / tk / K0 / j->fblocks;
    const int fb = (int)(g->F - f0 < 4 ? g->F - f0 : 4);
    const int64_t oplane = vol3(g->out), pplane = vol3(j->P);
    const int64_t xrow = g->stride[1] * j->P[2]; /* between the input rows of o1, o1 + 1 */
#if CPK_X86
    if (j->taps_per_task == 3 && j->isa != CPK_ISA_PORTABLE && fb == 4) {
        double tot[3][4][3] = {{{0}}};
        for (int64_t n = 0; n < g->N; n++)
            for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
                float lanes[3][4][3][LANES];
                const float *dy0[4];
                for (int f = 0; f < 4; f++)
                    dy0[f] = j->dy + (n * g->F + f0 + f) * oplane + o0 * g->out[1] * g->out[2];
                const float *x0 = j->xp + (n * g->C + c) * pplane +
                                  (o0 * g->stride[0] + k0 * g->dil[0]) * j->P[1] * j->P[2];
                dw_plane_avx2_4x3_taps3(j, dy0, x0, xrow, g->dil[1] * j->P[2], lanes);
                for (int t = 0; t < 3; t++)
                    for (int f = 0; f < 4; f++)
                        for (int q = 0; q < 3; q++) {
                            double sum = 0.0;
                            for (int l = 0; l < LANES; l++)
                                sum += (double)lanes[t][f][q][l];
                            tot[t][f][q] += sum;
                        }
            }
        for (int t = 0; t < 3; t++)
            for (int f = 0; f < 4; f++)
                for (int q = 0; q < 3; q++)
                    j->dw[((f0 + f) * g->C + c) * kvol + (k0 * K1 + t) * K2 + q] = tot[t][f][q];
        return;
    }
#endif
    for (int64_t k1 = k1s; k1 < k1s + j->taps_per_task; k1++)
        dw_task_tap(j, f0, fb, c, k0, k1, oplane, pplane, xrow);
}

/* one kh tap k1 of a (4-channel block of F, c, kd) task: the general lane kernels */
static void dw_task_tap(const dw_job *j, int64_t f0, int fb, int64_t c, int64_t k0, int64_t k1,
                        int64_t oplane, int64_t pplane, int64_t xrow)
{
    const cpk_conv_geom *g = j->g;
    const int64_t K1 = g->k[1], K2 = g->k[2], kvol = g->k[0] * K1 * K2;
    for (int64_t kw0 = 0; kw0 < K2; kw0 += 3) {
        const int kwb = (int)(K2 - kw0 < 3 ? K2 - kw0 : 3);
        double acc_tot[4][3] = {{0}};
        for (int64_t n = 0; n < g->N; n++) {
            for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
                float lanes[4][3][LANES];
                memset(lanes, 0, sizeof lanes);
                const float *dy0[4];
                for (int f = 0; f < fb; f++)
                    dy0[f] = j->dy + (n * g->F + f0 + f) * oplane + o0 * g->out[1] * g->out[2];
                const float *x0 = j->xp + (n * g->C + c) * pplane +
                                  ((o0 * g->stride[0] + k0 * g->dil[0]) * j->P[1] +
                                   k1 * g->dil[1]) * j->P[2];
#if CPK_X86
                if (j->isa != CPK_ISA_PORTABLE && g->stride[2] == 1) {
                    if (fb == 4 && kwb == 3)
                        dw_plane_avx2_4x3(j, dy0, x0, xrow, kw0, lanes);
                    else
                        dw_plane_avx2(j, dy0, fb, x0, xrow, kw0, kwb, lanes);
                } else
#endif
                {
                    for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                        const float *dyr[4];
                        for (int f = 0; f < fb; f++)
                            dyr[f] = dy0[f] + o1 * g->out[2];
                        dw_row_portable(j, dyr, fb, x0 + o1 * xrow, kw0, kwb, lanes);
                    }
                }
                for (int f = 0; f < fb; f++)
                    for (int q = 0; q < kwb; q++) {
                        double s = 0.0;
                        for (int l = 0; l < LANES; l++)
                            s += (double)lanes[f][q][l];
                        acc_tot[f][q] += s;
                    }
            }
        }
        for (int f = 0; f < fb; f++)
            for (int q = 0; q < kwb; q++)
                j->dw[((f0 + f) * g->C + c) * kvol + (k0 * K1 + k1) * K2 + kw0 + q] =
                    acc_tot[f][q];
    }
}

/* planes (output positions per sample and output depth) up to this size run tap by tap: their four
 * dy planes stay in L1, and the 4x3 kernel's 12 accumulators stay in registers, where the
 * three taps' 36 would be stored and reloaded per row */
#define DW_TAP_BY_TAP_MAX_PLANE 1024

bool cpk_conv_backward_weight(cpk_pool *p, cpk_isa isa, const cpk_conv_geom *g, const float *dy,
                             const float *x, double *dw_total)
{
    /* all three kh taps in one task where the 4x3x3 kernel applies (by shape alone; the
     * portable path runs the same tasks tap by tap, with the same bits) */
    const bool taps3 = g->k[1] == 3 && g->k[2] == 3 && g->stride[2] == 1 && g->F % 4 == 0 &&
                       g->out[1] * g->out[2] > DW_TAP_BY_TAP_MAX_PLANE;
    dw_job j = {.g = g, .isa = isa, .dy = dy, .dw = dw_total, .fblocks = (g->F + 3) / 4,
                .taps_per_task = taps3 ? 3 : 1};
    for (int a = 0; a < 3; a++)
        j.P[a] = (g->out[a] - 1) * g->stride[a] + g->dil[a] * (g->k[a] - 1) + 1;
    float *xp = pad_copy(p, isa, x, g->N * g->C, g->in, j.P, g->pad);
    if (!xp)
        return false;
    j.xp = xp;
    cpk_parallel(p, j.fblocks * g->C * g->k[0] * (g->k[1] / j.taps_per_task), dw_task, &j);
    cpk_scratch_give(p, xp, pad_bytes(g->N * g->C, j.P));
    return true;
}

typedef struct {
    const float *t;
    int64_t N, Cn, P;
    double *out;
} csum_job;

#define CSUM_GROUP 8 /* channels per task: their chains interleave, hiding the add latency */

static void csum_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const csum_job *j = vctx;
    const int64_t c0 = task * CSUM_GROUP;
    const int cb = (int)(j->Cn - c0 < CSUM_GROUP ? j->Cn - c0 : CSUM_GROUP);
    double acc[CSUM_GROUP] = {0};
    for (int64_t n = 0; n < j->N; n++) {
        const float *r = j->t + (n * j->Cn + c0) * j->P;
        if (cb == CSUM_GROUP) { /* eight named chains: an array stayed in memory at -O2 */
            const int64_t P = j->P;
            double a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
            double a4 = acc[4], a5 = acc[5], a6 = acc[6], a7 = acc[7];
            for (int64_t i = 0; i < P; i++) {
                a0 += (double)r[i];
                a1 += (double)r[P + i];
                a2 += (double)r[2 * P + i];
                a3 += (double)r[3 * P + i];
                a4 += (double)r[4 * P + i];
                a5 += (double)r[5 * P + i];
                a6 += (double)r[6 * P + i];
                a7 += (double)r[7 * P + i];
            }
            acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
            acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
            continue;
        }
        for (int c = 0; c < cb; c++)
            for (int64_t i = 0; i < j->P; i++)
                acc[c] += (double)r[c * j->P + i];
    }
    for (int c = 0; c < cb; c++)
        j->out[c0 + c] = acc[c];
}

void cpk_channel_sums(cpk_pool *p, cpk_isa isa, const float *t, int64_t N, int64_t Cn, int64_t P,
                      double *out)
{
    (void)isa;
    csum_job j = {t, N, Cn, P, out};
    cpk_parallel(p, (Cn + CSUM_GROUP - 1) / CSUM_GROUP, csum_task, &j);
}
