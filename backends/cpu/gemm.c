/*
 * Packed, cache-blocked SGEMM with run-time selected micro-kernels.
 *
 * Each C element is one fma chain over k ascending (kernels.h), whatever the kernel: the
 * micro-kernels keep one output per vector lane and never reassociate, so the AVX-512
 * (6x32), AVX2+FMA (6x16) and portable fmaf (6x16) kernels give identical bits, and so do
 * all thread counts (the output is split into tiles; one task computes a tile over all k).
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

/* Blocking. KC: the k block (an A micro-panel MR x KC stays in L1 while B panels stream
 * past it); SPAN_COLS: the columns of packed B one task sweeps per A micro-panel (KC x
 * SPAN_COLS floats, 512 KiB, stay in a 1 MiB L2); MC: rows of A per task; NC: columns of B
 * packed at once (KC x NC floats, 2 MiB, shared by the threads in L3). None of them
 * changes a bit: each C element sees its k terms in ascending order whatever the blocks. */
#ifndef KC
#define KC 256
#endif
#ifndef MC
#define MC 96
#endif
#define NC 2048
/* fused (one M block: most convolutions): each B panel is used by every A micro-panel right
 * after it is packed or found in place, so no span of B need stay in L2, and a longer k
 * block loads and stores every C tile fewer times (the U-Net's 32-filter 3x3 convolutions,
 * K = 288 and 864, went from 86-92 to 90-94 GFLOP/s on one Zen 4 core) */
#ifndef KC_FUSED
#define KC_FUSED 384
#endif
#ifndef SPAN_COLS
#define SPAN_COLS 512
#endif
#define MR_MAX 8
/* the largest B (floats, all k blocks of a column block) packed in one phase: 8 MiB */
#define ALL_K_FLOATS (2 * 1024 * 1024)

// ----------------------------------------------------------------------------
// ISA detection

cpk_isa cpk_isa_detect(void)
{
#if CPK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return CPK_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return CPK_ISA_AVX2;
#endif
    return CPK_ISA_PORTABLE;
}

const char *cpk_isa_name(cpk_isa isa)
{
    switch (isa) {
    case CPK_ISA_AVX512: return "avx512f";
    case CPK_ISA_AVX2: return "avx2+fma";
    default: return "portable";
    }
}

// ----------------------------------------------------------------------------
// micro-kernels: C[mr x nr] = (load ? C : rinit ? rinit[row] : cinit ? cinit[col] : 0) +
// Apanel * Bpanel, A panel kc x mr (k-major), B panel kc x nr (k-major). Each lane of each
// accumulator is one output's fma chain.

typedef void (*ukernel_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                           bool load, const float *rinit, const float *cinit);
/* the same with B's k row at b + koff[k] (NR contiguous floats) instead of a packed panel */
typedef void (*ukernel_rows_fn)(int64_t kc, const float *a, const float *b, const int64_t *koff,
                                float *c, int64_t ldc, bool load, const float *rinit,
                                const float *cinit);

#define PORTABLE_MR 6
#define PORTABLE_NR 16
static void uk_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                        bool load, const float *rinit, const float *cinit)
{
    float acc[PORTABLE_MR][PORTABLE_NR];
    for (int i = 0; i < PORTABLE_MR; i++)
        for (int j = 0; j < PORTABLE_NR; j++)
            acc[i][j] = load ? c[i * ldc + j] : rinit ? rinit[i] : cinit ? cinit[j] : 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * PORTABLE_MR, *bk = b + k * PORTABLE_NR;
        for (int i = 0; i < PORTABLE_MR; i++)
            for (int j = 0; j < PORTABLE_NR; j++)
                acc[i][j] = fmaf(ak[i], bk[j], acc[i][j]);
    }
    for (int i = 0; i < PORTABLE_MR; i++)
        for (int j = 0; j < PORTABLE_NR; j++)
            c[i * ldc + j] = acc[i][j];
}

static void uk_portable_rows(int64_t kc, const float *a, const float *b, const int64_t *koff,
                             float *c, int64_t ldc, bool load, const float *rinit,
                             const float *cinit)
{
    float acc[PORTABLE_MR][PORTABLE_NR];
    for (int i = 0; i < PORTABLE_MR; i++)
        for (int j = 0; j < PORTABLE_NR; j++)
            acc[i][j] = load ? c[i * ldc + j] : rinit ? rinit[i] : cinit ? cinit[j] : 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * PORTABLE_MR, *bk = b + koff[k];
        for (int i = 0; i < PORTABLE_MR; i++)
            for (int j = 0; j < PORTABLE_NR; j++)
                acc[i][j] = fmaf(ak[i], bk[j], acc[i][j]);
    }
    for (int i = 0; i < PORTABLE_MR; i++)
        for (int j = 0; j < PORTABLE_NR; j++)
            c[i * ldc + j] = acc[i][j];
}

#if CPK_X86
/* 6 x 16: 12 ymm accumulators, 2 B vectors, 1 broadcast (15 of 16 registers) */
__attribute__((target("avx2,fma"))) static void uk_avx2(int64_t kc, const float *a,
                                                         const float *b, float *c,
                                                         int64_t ldc, bool load, const float *rinit,
                                                         const float *cinit)
{
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (load) {
        c00 = _mm256_loadu_ps(c + 0 * ldc); c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
        c10 = _mm256_loadu_ps(c + 1 * ldc); c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
        c20 = _mm256_loadu_ps(c + 2 * ldc); c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
        c30 = _mm256_loadu_ps(c + 3 * ldc); c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
        c40 = _mm256_loadu_ps(c + 4 * ldc); c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
        c50 = _mm256_loadu_ps(c + 5 * ldc); c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
    } else if (rinit) {
        c00 = c01 = _mm256_set1_ps(rinit[0]); c10 = c11 = _mm256_set1_ps(rinit[1]);
        c20 = c21 = _mm256_set1_ps(rinit[2]); c30 = c31 = _mm256_set1_ps(rinit[3]);
        c40 = c41 = _mm256_set1_ps(rinit[4]); c50 = c51 = _mm256_set1_ps(rinit[5]);
    } else if (cinit) {
        c00 = c10 = c20 = c30 = c40 = c50 = _mm256_loadu_ps(cinit);
        c01 = c11 = c21 = c31 = c41 = c51 = _mm256_loadu_ps(cinit + 8);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = _mm256_setzero_ps();
        c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 av;
        av = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
        a += 6;
        b += 16;
    }
    _mm256_storeu_ps(c + 0 * ldc, c00); _mm256_storeu_ps(c + 0 * ldc + 8, c01);
    _mm256_storeu_ps(c + 1 * ldc, c10); _mm256_storeu_ps(c + 1 * ldc + 8, c11);
    _mm256_storeu_ps(c + 2 * ldc, c20); _mm256_storeu_ps(c + 2 * ldc + 8, c21);
    _mm256_storeu_ps(c + 3 * ldc, c30); _mm256_storeu_ps(c + 3 * ldc + 8, c31);
    _mm256_storeu_ps(c + 4 * ldc, c40); _mm256_storeu_ps(c + 4 * ldc + 8, c41);
    _mm256_storeu_ps(c + 5 * ldc, c50); _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

/* uk_avx2 with B's k row at b + koff[k] */
__attribute__((target("avx2,fma"))) static void uk_avx2_rows(int64_t kc, const float *a,
                                                              const float *b,
                                                              const int64_t *koff, float *c,
                                                              int64_t ldc, bool load, const float *rinit,
                                                              const float *cinit)
{
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (load) {
        c00 = _mm256_loadu_ps(c + 0 * ldc); c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
        c10 = _mm256_loadu_ps(c + 1 * ldc); c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
        c20 = _mm256_loadu_ps(c + 2 * ldc); c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
        c30 = _mm256_loadu_ps(c + 3 * ldc); c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
        c40 = _mm256_loadu_ps(c + 4 * ldc); c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
        c50 = _mm256_loadu_ps(c + 5 * ldc); c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
    } else if (rinit) {
        c00 = c01 = _mm256_set1_ps(rinit[0]); c10 = c11 = _mm256_set1_ps(rinit[1]);
        c20 = c21 = _mm256_set1_ps(rinit[2]); c30 = c31 = _mm256_set1_ps(rinit[3]);
        c40 = c41 = _mm256_set1_ps(rinit[4]); c50 = c51 = _mm256_set1_ps(rinit[5]);
    } else if (cinit) {
        c00 = c10 = c20 = c30 = c40 = c50 = _mm256_loadu_ps(cinit);
        c01 = c11 = c21 = c31 = c41 = c51 = _mm256_loadu_ps(cinit + 8);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = _mm256_setzero_ps();
        c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        const float *bk = b + koff[k];
        const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        __m256 av;
        av = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
        a += 6;
    }
    _mm256_storeu_ps(c + 0 * ldc, c00); _mm256_storeu_ps(c + 0 * ldc + 8, c01);
    _mm256_storeu_ps(c + 1 * ldc, c10); _mm256_storeu_ps(c + 1 * ldc + 8, c11);
    _mm256_storeu_ps(c + 2 * ldc, c20); _mm256_storeu_ps(c + 2 * ldc + 8, c21);
    _mm256_storeu_ps(c + 3 * ldc, c30); _mm256_storeu_ps(c + 3 * ldc + 8, c31);
    _mm256_storeu_ps(c + 4 * ldc, c40); _mm256_storeu_ps(c + 4 * ldc + 8, c41);
    _mm256_storeu_ps(c + 5 * ldc, c50); _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

/* 8 x 32: 16 zmm accumulators, every one a named variable (an array indexed in a loop
 * kept them in memory at -O2: one load and one store per fma). The k loop is unrolled
 * twice; the order of the fmas into one accumulator is still k ascending. */
#define AVX512_MR 8
#define R512_LOAD(i)                                                                       \
    c##i##0 = load    ? _mm512_loadu_ps(c + (i) * ldc)                                     \
              : rinit ? _mm512_set1_ps(rinit[i])                                           \
              : cinit ? _mm512_loadu_ps(cinit)                                             \
                      : _mm512_setzero_ps();                                               \
    c##i##1 = load    ? _mm512_loadu_ps(c + (i) * ldc + 16)                                \
              : rinit ? c##i##0                                                            \
              : cinit ? _mm512_loadu_ps(cinit + 16)                                        \
                      : _mm512_setzero_ps();
#define R512_FMA(i, ak)                                                                    \
    {                                                                                      \
        const __m512 av = _mm512_set1_ps((ak)[i]);                                         \
        c##i##0 = _mm512_fmadd_ps(av, b0, c##i##0);                                        \
        c##i##1 = _mm512_fmadd_ps(av, b1, c##i##1);                                        \
    }
#define R512_STORE(i)                                                                      \
    _mm512_storeu_ps(c + (i) * ldc, c##i##0);                                              \
    _mm512_storeu_ps(c + (i) * ldc + 16, c##i##1);
#define R512_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define R512_STEP(ak, bk)                                                                  \
    {                                                                                      \
        const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps((bk) + 16);              \
        R512_FMA(0, ak) R512_FMA(1, ak) R512_FMA(2, ak) R512_FMA(3, ak)                    \
        R512_FMA(4, ak) R512_FMA(5, ak) R512_FMA(6, ak) R512_FMA(7, ak)                    \
    }

__attribute__((target("avx512f"))) static void uk_avx512(int64_t kc, const float *a,
                                                          const float *b, float *c,
                                                          int64_t ldc, bool load, const float *rinit,
                                                          const float *cinit)
{
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
    R512_ALL(R512_LOAD)
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
        R512_STEP(a, b)
        R512_STEP(a + AVX512_MR, b + 32)
        a += 2 * AVX512_MR;
        b += 64;
    }
    if (k < kc)
        R512_STEP(a, b)
    R512_ALL(R512_STORE)
}

/* uk_avx512 with B's k row at b + koff[k] (unaligned loads) */
#define R512_STEP_ROW(ak, bk)                                                              \
    {                                                                                      \
        const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps((bk) + 16);            \
        R512_FMA(0, ak) R512_FMA(1, ak) R512_FMA(2, ak) R512_FMA(3, ak)                    \
        R512_FMA(4, ak) R512_FMA(5, ak) R512_FMA(6, ak) R512_FMA(7, ak)                    \
    }
__attribute__((target("avx512f"))) static void uk_avx512_rows(int64_t kc, const float *a,
                                                               const float *b,
                                                               const int64_t *koff, float *c,
                                                               int64_t ldc, bool load, const float *rinit,
                                                               const float *cinit)
{
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
    R512_ALL(R512_LOAD)
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
        R512_STEP_ROW(a, b + koff[k])
        R512_STEP_ROW(a + AVX512_MR, b + koff[k + 1])
        a += 2 * AVX512_MR;
    }
    if (k < kc)
        R512_STEP_ROW(a, b + koff[k])
    R512_ALL(R512_STORE)
}
#endif

typedef struct {
    ukernel_fn fn;
    ukernel_rows_fn rows;
    int mr, nr;
} ukernel;

static ukernel pick_kernel(cpk_isa isa)
{
#if CPK_X86
    if (isa == CPK_ISA_AVX512)
        return (ukernel){uk_avx512, uk_avx512_rows, AVX512_MR, 32};
    if (isa == CPK_ISA_AVX2)
        return (ukernel){uk_avx2, uk_avx2_rows, 6, 16};
#endif
    (void)isa;
    return (ukernel){uk_portable, uk_portable_rows, PORTABLE_MR, PORTABLE_NR};
}

// ----------------------------------------------------------------------------
// packing

#if CPK_X86
/* B^T stored row-major (a linear weight's x W^T): d[k * NR + j] = r_j[k] for NR rows r_j,
 * by 8 x 8 transposes in ymm registers (a pure copy: no arithmetic, so no bit can change) */
__attribute__((target("avx2"))) static void pack_Bt_avx2(const float *b, int64_t ldb,
                                                           int64_t kc, int NR, float *d)
{
    for (int jb = 0; jb < NR; jb += 8) {
        const float *r = b + jb * ldb;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            const __m256 r0 = _mm256_loadu_ps(r + 0 * ldb + k), r1 = _mm256_loadu_ps(r + 1 * ldb + k);
            const __m256 r2 = _mm256_loadu_ps(r + 2 * ldb + k), r3 = _mm256_loadu_ps(r + 3 * ldb + k);
            const __m256 r4 = _mm256_loadu_ps(r + 4 * ldb + k), r5 = _mm256_loadu_ps(r + 5 * ldb + k);
            const __m256 r6 = _mm256_loadu_ps(r + 6 * ldb + k), r7 = _mm256_loadu_ps(r + 7 * ldb + k);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *o = d + k * NR + jb;
            _mm256_storeu_ps(o + 0 * NR, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(o + 1 * NR, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(o + 2 * NR, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(o + 3 * NR, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(o + 4 * NR, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(o + 5 * NR, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(o + 6 * NR, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(o + 7 * NR, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; k < kc; k++)
            for (int j = 0; j < 8; j++)
                d[k * NR + jb + j] = r[j * ldb + k];
    }
}
#endif

/* A block rows [i0, i0+mb), k [k0, k0+kc) into mr-row panels, k-major, zero rows past mb
 * (inlined into pack_A once per micro-kernel height, so that the per-k copies of mr floats
 * are unrolled moves rather than loops and memcpy calls) */
static inline __attribute__((always_inline)) void pack_A_mr(const cpk_gemm_src *s, cpk_isa isa,
                                                            int64_t i0, int64_t mb, int64_t k0,
                                                            int64_t kc, const int mr,
                                                            float *dst)
{
    for (int64_t ip = 0; ip < mb; ip += mr) {
        float *d = dst + ip * kc;
        const int64_t rows = mb - ip < mr ? mb - ip : mr;
#if CPK_X86
        /* row-major A, mr a multiple of 8: the same transposes as B^T's panels */
        if (s->a_cs == 1 && rows == mr && mr % 8 == 0 && isa != CPK_ISA_PORTABLE) {
            pack_Bt_avx2(s->a + (i0 + ip) * s->a_rs + k0, s->a_rs, kc, mr, d);
            continue;
        }
#endif
        (void)isa;
        if (s->a_cs == 1 && rows == mr) {
            const float *r[MR_MAX];
            for (int64_t q = 0; q < mr; q++)
                r[q] = s->a + (i0 + ip + q) * s->a_rs + k0;
            for (int64_t k = 0; k < kc; k++)
                for (int64_t q = 0; q < mr; q++)
                    d[k * mr + q] = r[q][k];
        } else if (s->a_rs == 1 && rows == mr) {
            for (int64_t k = 0; k < kc; k++)
                memcpy(d + k * mr, s->a + (k0 + k) * s->a_cs + i0 + ip,
                       (size_t)mr * sizeof *d);
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const float *src = s->a + (k0 + k) * s->a_cs + (i0 + ip) * s->a_rs;
                for (int64_t q = 0; q < mr; q++)
                    d[k * mr + q] = q < rows ? src[q * s->a_rs] : 0.0f;
            }
        }
    }
}

static void pack_A(const cpk_gemm_src *s, cpk_isa isa, int64_t i0, int64_t mb, int64_t k0,
                   int64_t kc, int mr, float *dst)
{
    if (mr == 6)
        pack_A_mr(s, isa, i0, mb, k0, kc, 6, dst);
    else if (mr == 8)
        pack_A_mr(s, isa, i0, mb, k0, kc, 8, dst);
    else
        pack_A_mr(s, isa, i0, mb, k0, kc, mr, dst);
}

/* one NR-column panel of B: k [k0, k0+kc), cols [j0, j0+cols), zero cols up to NR */
static void pack_B_panel(const cpk_gemm_src *s, cpk_isa isa, int64_t k0, int64_t kc,
                         int64_t j0, int64_t cols, int NR, float *d)
{
    if (s->packB) {
        s->packB(s->packB_ctx, k0, kc, j0, cols, NR, d);
        return;
    }
    if (s->b_cs == 1) {
        for (int64_t k = 0; k < kc; k++) {
            const float *src = s->b + (k0 + k) * s->b_rs + j0;
            float *dk = d + k * NR;
            int64_t j = 0;
            for (; j < cols; j++)
                dk[j] = src[j];
            for (; j < NR; j++)
                dk[j] = 0.0f;
        }
    } else if (s->b_rs == 1 && cols == NR) {
#if CPK_X86
        if (isa != CPK_ISA_PORTABLE) {
            pack_Bt_avx2(s->b + j0 * s->b_cs + k0, s->b_cs, kc, NR, d);
            return;
        }
#endif
        /* B^T stored row-major (a linear weight): NR source rows read side by side */
        const float *r[CPK_NR_MAX];
        for (int64_t j = 0; j < NR; j++)
            r[j] = s->b + (j0 + j) * s->b_cs + k0;
        for (int64_t k = 0; k < kc; k++)
            for (int64_t j = 0; j < NR; j++)
                d[k * NR + j] = r[j][k];
    } else {
        for (int64_t j = 0; j < NR; j++) {
            if (j < cols) {
                const float *src = s->b + (j0 + j) * s->b_cs + k0 * s->b_rs;
                for (int64_t k = 0; k < kc; k++)
                    d[k * NR + j] = src[k * s->b_rs];
            } else {
                for (int64_t k = 0; k < kc; k++)
                    d[k * NR + j] = 0.0f;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// driver: for each column block jc and k block pc, B[pc, jc] is packed once (panels split
// across threads), then tasks (an M block x a span of B panels) pack their A block and,
// per A micro-panel (kept in L1), run the micro-kernel over the span's B panels (streamed
// from L2). Blocks are visited in increasing pc, so every C element still sees its k terms
// in ascending order.

typedef struct {
    const cpk_gemm_src *s;
    int64_t M, N, K;
    float *C;
    int64_t ldc;
    bool accumulate;
    ukernel uk;
    cpk_isa isa;
    /* current block */
    int64_t j0, nc, k0, kc;
    int64_t kcb;       /* the k block size */
    const float *afull; /* fused: A packed once for every k block (block at k0: Mr * k0) */
    float *bpack;
    int64_t bstride;   /* all_k: floats from one k block's packed B to the next's */
    int64_t mb, mblocks, pspan, nspans; /* task = (M block, span of pspan panels) */
    float **apack; /* per thread */
    bool fused;    /* one M block: every task packs its own B panels (no shared B) */
    float **bpanel; /* per thread, fused only: one KC x NR panel */
} gemm_job;

/* a group of PACKB_GROUP panels per task: a row-major B is then read PACKB_GROUP * NR
 * floats at a time along each row (one panel alone reads NR floats per row at a stride of
 * the row length, which for power-of-two lengths maps every row to the same cache sets) */
#define PACKB_GROUP 8
static void packB_task(void *vctx, int64_t group, int tid)
{
    (void)tid;
    gemm_job *j = vctx;
    const int NR = j->uk.nr;
    const int64_t npanels = (j->nc + NR - 1) / NR;
    const int64_t q0 = group * PACKB_GROUP;
    const int64_t q1 = q0 + PACKB_GROUP < npanels ? q0 + PACKB_GROUP : npanels;
    const cpk_gemm_src *s = j->s;
    if (!s->packB && s->b_cs == 1 && q1 * NR <= j->nc) {
        for (int64_t k = 0; k < j->kc; k++) {
            const float *src = s->b + (j->k0 + k) * s->b_rs + j->j0;
            for (int64_t q = q0; q < q1; q++)
                memcpy(j->bpack + q * NR * j->kc + k * NR, src + q * NR,
                       (size_t)NR * sizeof *src);
        }
        return;
    }
    for (int64_t q = q0; q < q1; q++) {
        const int64_t jp = q * NR;
        const int64_t cols = j->nc - jp < NR ? j->nc - jp : NR;
        pack_B_panel(s, j->isa, j->k0, j->kc, j->j0 + jp, cols, NR, j->bpack + jp * j->kc);
    }
}

/* one micro-tile, through a bounce buffer where it sticks out of C; B is the packed panel
 * bpanel, or, when brows is set, the rows at brows + koff[k] */
static void run_tile(const gemm_job *j, const float *apanel, const float *bpanel,
                     const float *brows, float *c, int64_t row0, int64_t col0, int64_t rows,
                     int64_t cols, bool load)
{
    const int NR = j->uk.nr, MR = j->uk.mr;
    const int64_t *koff = brows ? j->s->b_koff + j->k0 : NULL;
    /* the rows' initial values when C is not loaded (the bias of a convolution) */
    float rbuf[MR_MAX];
    const float *rinit = NULL;
    if (!load && j->s->row_init) {
        rinit = rbuf;
        for (int64_t r = 0; r < MR; r++)
            rbuf[r] = r < rows ? j->s->row_init[row0 + r] : 0.0f;
    }
    /* the columns' initial values when C is not loaded (the bias of a linear layer), NR of
     * them (zeros past the tile's last column) */
    float cbuf[CPK_NR_MAX];
    const float *cinit = NULL;
    if (!load && j->s->col_init) {
        cinit = j->s->col_init + col0;
        if (cols < NR) {
            memcpy(cbuf, cinit, (size_t)cols * sizeof *cbuf);
            memset(cbuf + cols, 0, (size_t)(NR - cols) * sizeof *cbuf);
            cinit = cbuf;
        }
    }
    if (rows == MR && cols == NR) {
        if (brows)
            j->uk.rows(j->kc, apanel, brows, koff, c, j->ldc, load, rinit, cinit);
        else
            j->uk.fn(j->kc, apanel, bpanel, c, j->ldc, load, rinit, cinit);
        return;
    }
    float tile[MR_MAX * CPK_NR_MAX];
    if (load)
        for (int64_t r = 0; r < rows; r++)
            memcpy(tile + r * NR, c + r * j->ldc, (size_t)cols * sizeof *c);
    if (brows)
        j->uk.rows(j->kc, apanel, brows, koff, tile, NR, load, rinit, cinit);
    else
        j->uk.fn(j->kc, apanel, bpanel, tile, NR, load, rinit, cinit);
    for (int64_t r = 0; r < rows; r++)
        memcpy(c + r * j->ldc, tile + r * NR, (size_t)cols * sizeof *c);
}

/* fused (one M block): the B panels p0..p1 of the current column and k block, each packed
 * (or read in place) by this task right before use, where it stays in L1 for the A
 * micro-panels that follow, instead of in a shared pass through L3 */
static void fused_panels(const gemm_job *j, const float *ap, int64_t p0, int64_t p1, int tid)
{
    const int NR = j->uk.nr, MR = j->uk.mr;
    const bool load = j->accumulate || j->k0 > 0;
    float *bp = j->bpanel[tid];
    for (int64_t pn = p0; pn < p1; pn++) {
        const int64_t jp = pn * NR;
        const int64_t cols = j->nc - jp < NR ? j->nc - jp : NR;
        /* B read where it lies when the source can say so, else packed here */
        const float *brows = j->s->bpanel && cols == NR
                                 ? j->s->bpanel(j->s->packB_ctx, j->j0 + jp, NR)
                                 : NULL;
        if (!brows)
            pack_B_panel(j->s, j->isa, j->k0, j->kc, j->j0 + jp, cols, NR, bp);
        for (int64_t ip = 0; ip < j->M; ip += MR) {
            const int64_t rows = j->M - ip < MR ? j->M - ip : MR;
            run_tile(j, ap + ip * j->kc, bp, brows, j->C + ip * j->ldc + j->j0 + jp, ip,
                     j->j0 + jp, rows, cols, load);
        }
    }
}

/* fused: one task is a span of B panels over the whole of N and runs every k block over it
 * in order (one parallel phase per call instead of one per column and k block: a phase's
 * last task no longer leaves the other threads waiting dozens of times per convolution) */
static void fused_task(void *vctx, int64_t task, int tid)
{
    const gemm_job *j = vctx;
    const int64_t npanels = (j->N + j->uk.nr - 1) / j->uk.nr;
    const int64_t p0 = task * j->pspan, p1 = p0 + j->pspan < npanels ? p0 + j->pspan : npanels;
    const int64_t Mr = (j->M + j->uk.mr - 1) / j->uk.mr * j->uk.mr;
    gemm_job jk = *j;
    for (int64_t k0 = 0; k0 < j->K; k0 += j->kcb) {
        jk.k0 = k0;
        jk.kc = j->K - k0 < j->kcb ? j->K - k0 : j->kcb;
        fused_panels(&jk, j->afull + Mr * k0, p0, p1, tid);
    }
}

/* task (M block bi, span sp) of the current column block, over the k block at j->k0 whose
 * packed B is j->bpack */
static void gemm_block(const gemm_job *j, int64_t bi, int64_t sp, int tid)
{
    const int NR = j->uk.nr, MR = j->uk.mr;
    const int64_t i0 = bi * j->mb;
    const int64_t mb = j->M - i0 < j->mb ? j->M - i0 : j->mb;
    const int64_t npanels = (j->nc + NR - 1) / NR;
    const int64_t p0 = sp * j->pspan, p1 = p0 + j->pspan < npanels ? p0 + j->pspan : npanels;
    const bool load = j->accumulate || j->k0 > 0;
    float *ap = j->apack[tid];
    pack_A(j->s, j->isa, i0, mb, j->k0, j->kc, MR, ap);
    for (int64_t ip = 0; ip < mb; ip += MR) {
        const int64_t rows = mb - ip < MR ? mb - ip : MR;
        const float *apanel = ap + ip * j->kc;
        float *crow = j->C + (i0 + ip) * j->ldc + j->j0;
        for (int64_t pn = p0; pn < p1; pn++) {
            const int64_t jp = pn * NR;
            const int64_t cols = j->nc - jp < NR ? j->nc - jp : NR;
            run_tile(j, apanel, j->bpack + jp * j->kc, NULL, crow + jp, i0 + ip, j->j0 + jp,
                     rows, cols, load);
        }
    }
}

/* one k block: the task's M block and span */
static void gemm_task(void *vctx, int64_t task, int tid)
{
    const gemm_job *j = vctx;
    gemm_block(j, task / j->nspans, task % j->nspans, tid);
}

/* all_k: jk at k block q, whose packed B is at bpack + q * bstride */
static void at_k_block(const gemm_job *j, int64_t q, gemm_job *jk)
{
    jk->k0 = q * j->kcb;
    jk->kc = j->K - jk->k0 < j->kcb ? j->K - jk->k0 : j->kcb;
    jk->bpack = j->bpack + q * j->bstride;
}

/* B packed for every k block at once (all_k) */
static void packB_all_task(void *vctx, int64_t task, int tid)
{
    const gemm_job *j = vctx;
    const int64_t ngroups = (j->nc + j->uk.nr * PACKB_GROUP - 1) / (j->uk.nr * PACKB_GROUP);
    gemm_job jk = *j;
    at_k_block(j, task / ngroups, &jk);
    packB_task(&jk, task % ngroups, tid);
}

/* all_k: the task's M block and span over every k block in order (one parallel phase for
 * the whole product instead of one per k block) */
static void gemm_all_k_task(void *vctx, int64_t task, int tid)
{
    const gemm_job *j = vctx;
    gemm_job jk = *j;
    for (int64_t q = 0; q * j->kcb < j->K; q++) {
        at_k_block(j, q, &jk);
        gemm_block(&jk, task / j->nspans, task % j->nspans, tid);
    }
}

/* spans of at most SPAN_COLS columns over npanels panels, and enough tasks (with mblocks M
 * blocks) to keep every thread busy: sets j->nspans and j->pspan */
static void plan_spans(gemm_job *j, int64_t npanels, int T)
{
    const int NR = j->uk.nr;
    j->nspans = (npanels * NR + SPAN_COLS - 1) / SPAN_COLS;
    while (j->mblocks * j->nspans < 4 * T && j->nspans < npanels)
        j->nspans++;
    j->pspan = (npanels + j->nspans - 1) / j->nspans;
    j->nspans = (npanels + j->pspan - 1) / j->pspan;
    /* a task count that is a multiple of T where a few more spans give one (9 tasks on 2
     * threads left one thread idle for a ninth of the phase) */
    for (int64_t ns = j->nspans; ns <= 2 * j->nspans && ns <= npanels; ns++) {
        const int64_t ps = (npanels + ns - 1) / ns, nn = (npanels + ps - 1) / ps;
        if ((j->mblocks * nn) % T == 0) {
            j->pspan = ps;
            j->nspans = nn;
            break;
        }
    }
}

static float *alloc_floats(int64_t n)
{
    return aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
}

bool cpk_sgemm(cpk_pool *p, cpk_isa isa, int64_t M, int64_t N, int64_t K, const cpk_gemm_src *s,
               float *C, int64_t ldc, bool accumulate)
{
    if (M <= 0 || N <= 0)
        return true;
    if (K <= 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++)
                for (int64_t jj = 0; jj < N; jj++)
                    C[i * ldc + jj] = s->row_init   ? s->row_init[i]
                                      : s->col_init ? s->col_init[jj]
                                                    : 0.0f;
        return true;
    }
    gemm_job j = {.s = s, .M = M, .N = N, .K = K, .C = C, .ldc = ldc,
                  .accumulate = accumulate, .uk = pick_kernel(isa), .isa = isa};
    const int NR = j.uk.nr, MR = j.uk.mr;
    const int T = cpk_pool_threads(p);
    if (T > 256)
        return false;
    j.mblocks = (M + MC - 1) / MC;
    j.mb = ((M + j.mblocks - 1) / j.mblocks + MR - 1) / MR * MR;
    j.mblocks = (M + j.mb - 1) / j.mb;
    j.fused = j.mblocks == 1;
    /* k blocks of equal size (at most KC, KC_FUSED when fused): a short last block would
     * load and store every C tile once more for a few k terms */
    const int64_t kmax = j.fused ? KC_FUSED : KC;
    const int64_t kblocks = (K + kmax - 1) / kmax, kcb = (K + kblocks - 1) / kblocks;
    const int64_t ncmax = N < NC ? N : NC, kcmax = kcb;
    float *apack[256], *bpanel[256];
    j.apack = apack;
    j.bpanel = bpanel;
    /* all_k: a column block's B packed for every k block in one phase, then one phase of
     * tasks that each run every k block over their tile: two phases per column block
     * instead of two per k block (a phase ends when its last task does, and the small
     * products of a transformer layer took a dozen per call); only where that B fits
     * ALL_K_FLOATS (it is read from L3 either way) */
    j.bstride = (ncmax + NR - 1) / NR * NR * kcb;
    const bool all_k = !j.fused && kblocks > 1 && kblocks * j.bstride <= ALL_K_FLOATS;
    j.bpack = alloc_floats(j.fused ? 1 : all_k ? kblocks * j.bstride : (ncmax + NR) * kcmax);
    bool ok = j.bpack != NULL;
    for (int t = 0; t < T; t++) {
        apack[t] = bpanel[t] = NULL; /* fused: A is packed once (afull below) */
        if (!j.fused)
            ok = (apack[t] = ok ? alloc_floats(j.mb * kcmax) : NULL) != NULL && ok;
        else
            ok = (bpanel[t] = ok ? alloc_floats(NR * kcmax) : NULL) != NULL && ok;
    }
    j.kcb = kcb;
    if (ok && j.fused) {
        /* A (at most MC rows) packed once, by the caller, for every task and k block */
        const int64_t Mr = (M + MR - 1) / MR * MR;
        float *afull = alloc_floats(Mr * K);
        ok = afull != NULL;
        for (int64_t k0 = 0; ok && k0 < K; k0 += kcb)
            pack_A(s, isa, 0, M, k0, K - k0 < kcb ? K - k0 : kcb, MR, afull + Mr * k0);
        j.afull = afull;
        j.j0 = 0;
        j.nc = N;
        plan_spans(&j, (N + NR - 1) / NR, T);
        if (ok)
            cpk_parallel(p, j.nspans, fused_task, &j);
        free(afull);
    }
    for (int64_t j0 = 0; ok && !j.fused && j0 < N; j0 += NC) {
        j.j0 = j0;
        j.nc = N - j0 < NC ? N - j0 : NC;
        const int64_t npanels = (j.nc + NR - 1) / NR;
        plan_spans(&j, npanels, T);
        if (all_k) {
            cpk_parallel(p, kblocks * ((npanels + PACKB_GROUP - 1) / PACKB_GROUP),
                         packB_all_task, &j);
            cpk_parallel(p, j.mblocks * j.nspans, gemm_all_k_task, &j);
            continue;
        }
        for (int64_t k0 = 0; k0 < K; k0 += kcb) {
            j.k0 = k0;
            j.kc = K - k0 < kcb ? K - k0 : kcb;
            cpk_parallel(p, (npanels + PACKB_GROUP - 1) / PACKB_GROUP, packB_task, &j);
            cpk_parallel(p, j.mblocks * j.nspans, gemm_task, &j);
        }
    }
    for (int t = 0; t < T; t++) {
        free(apack[t]);
        free(bpanel[t]);
    }
    free(j.bpack);
    return ok;
}
