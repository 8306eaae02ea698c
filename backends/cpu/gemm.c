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

#define MR 6
#define KC 256
#define MC 96
#define NC 2048

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
// micro-kernels: C[MR x NR] = (load ? C : 0) + Apanel * Bpanel, A panel kc x MR (k-major),
// B panel kc x NR (k-major)

typedef void (*ukernel_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                           bool load);

static void uk_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                        bool load)
{
    float acc[MR][16];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 16; j++)
            acc[i][j] = load ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * MR, *bk = b + k * 16;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < 16; j++)
                acc[i][j] = fmaf(ak[i], bk[j], acc[i][j]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 16; j++)
            c[i * ldc + j] = acc[i][j];
}

#if CPK_X86
__attribute__((target("avx2,fma"))) static void uk_avx2(int64_t kc, const float *a,
                                                         const float *b, float *c,
                                                         int64_t ldc, bool load)
{
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (load) {
        c00 = _mm256_loadu_ps(c + 0 * ldc); c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
        c10 = _mm256_loadu_ps(c + 1 * ldc); c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
        c20 = _mm256_loadu_ps(c + 2 * ldc); c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
        c30 = _mm256_loadu_ps(c + 3 * ldc); c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
        c40 = _mm256_loadu_ps(c + 4 * ldc); c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
        c50 = _mm256_loadu_ps(c + 5 * ldc); c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = _mm256_setzero_ps();
        c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 av;
        av = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
        a += MR;
        b += 16;
    }
    _mm256_storeu_ps(c + 0 * ldc, c00); _mm256_storeu_ps(c + 0 * ldc + 8, c01);
    _mm256_storeu_ps(c + 1 * ldc, c10); _mm256_storeu_ps(c + 1 * ldc + 8, c11);
    _mm256_storeu_ps(c + 2 * ldc, c20); _mm256_storeu_ps(c + 2 * ldc + 8, c21);
    _mm256_storeu_ps(c + 3 * ldc, c30); _mm256_storeu_ps(c + 3 * ldc + 8, c31);
    _mm256_storeu_ps(c + 4 * ldc, c40); _mm256_storeu_ps(c + 4 * ldc + 8, c41);
    _mm256_storeu_ps(c + 5 * ldc, c50); _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

__attribute__((target("avx512f"))) static void uk_avx512(int64_t kc, const float *a,
                                                          const float *b, float *c,
                                                          int64_t ldc, bool load)
{
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++) {
        acc[i][0] = load ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
        acc[i][1] = load ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        for (int i = 0; i < MR; i++) {
            const __m512 av = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
        a += MR;
        b += 32;
    }
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(c + i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }
}
#endif

typedef struct {
    ukernel_fn fn;
    int nr;
} ukernel;

static ukernel pick_kernel(cpk_isa isa)
{
#if CPK_X86
    if (isa == CPK_ISA_AVX512)
        return (ukernel){uk_avx512, 32};
    if (isa == CPK_ISA_AVX2)
        return (ukernel){uk_avx2, 16};
#endif
    (void)isa;
    return (ukernel){uk_portable, 16};
}

// ----------------------------------------------------------------------------
// packing

/* A block rows [i0, i0+mb), k [k0, k0+kc) into MR-row panels, k-major, zero rows past mb */
static void pack_A(const cpk_gemm_src *s, int64_t i0, int64_t mb, int64_t k0, int64_t kc,
                   float *dst)
{
    for (int64_t ip = 0; ip < mb; ip += MR) {
        float *d = dst + ip * kc;
        const int64_t rows = mb - ip < MR ? mb - ip : MR;
        if (s->a_cs == 1 && rows == MR) {
            const float *r[MR];
            for (int64_t q = 0; q < MR; q++)
                r[q] = s->a + (i0 + ip + q) * s->a_rs + k0;
            for (int64_t k = 0; k < kc; k++)
                for (int64_t q = 0; q < MR; q++)
                    d[k * MR + q] = r[q][k];
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const float *src = s->a + (k0 + k) * s->a_cs + (i0 + ip) * s->a_rs;
                for (int64_t q = 0; q < MR; q++)
                    d[k * MR + q] = q < rows ? src[q * s->a_rs] : 0.0f;
            }
        }
    }
}

/* one NR-column panel of B: k [k0, k0+kc), cols [j0, j0+cols), zero cols up to NR */
static void pack_B_panel(const cpk_gemm_src *s, int64_t k0, int64_t kc, int64_t j0,
                         int64_t cols, int NR, float *d)
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
// across threads), then tasks (an M block x a range of B panels) pack their A block and
// run the micro-kernel. Blocks are visited in increasing pc, so every C element still sees
// its k terms in ascending order.

typedef struct {
    const cpk_gemm_src *s;
    int64_t M, N, K;
    float *C;
    int64_t ldc;
    bool accumulate;
    ukernel uk;
    /* current block */
    int64_t j0, nc, k0, kc;
    float *bpack;
    int64_t mb, mblocks, pspan, nspans; /* task = (M block, span of pspan panels) */
    float **apack; /* per thread */
} gemm_job;

static void packB_task(void *vctx, int64_t panel, int tid)
{
    (void)tid;
    gemm_job *j = vctx;
    const int NR = j->uk.nr;
    const int64_t jp = panel * NR;
    const int64_t cols = j->nc - jp < NR ? j->nc - jp : NR;
    pack_B_panel(j->s, j->k0, j->kc, j->j0 + jp, cols, NR, j->bpack + jp * j->kc);
}

static void gemm_task(void *vctx, int64_t task, int tid)
{
    gemm_job *j = vctx;
    const int NR = j->uk.nr;
    const int64_t bi = task / j->nspans, sp = task % j->nspans;
    const int64_t i0 = bi * j->mb;
    const int64_t mb = j->M - i0 < j->mb ? j->M - i0 : j->mb;
    const int64_t npanels = (j->nc + NR - 1) / NR;
    const int64_t p0 = sp * j->pspan, p1 = p0 + j->pspan < npanels ? p0 + j->pspan : npanels;
    const bool load = j->accumulate || j->k0 > 0;
    float *ap = j->apack[tid];
    float tile[MR * CPK_NR_MAX];
    pack_A(j->s, i0, mb, j->k0, j->kc, ap);
    for (int64_t pn = p0; pn < p1; pn++) {
        const int64_t jp = pn * NR;
        const int64_t cols = j->nc - jp < NR ? j->nc - jp : NR;
        const float *bpanel = j->bpack + jp * j->kc;
        for (int64_t ip = 0; ip < mb; ip += MR) {
            const int64_t rows = mb - ip < MR ? mb - ip : MR;
            const float *apanel = ap + ip * j->kc;
            float *c = j->C + (i0 + ip) * j->ldc + j->j0 + jp;
            if (rows == MR && cols == NR) {
                j->uk.fn(j->kc, apanel, bpanel, c, j->ldc, load);
            } else {
                if (load)
                    for (int64_t r = 0; r < rows; r++)
                        memcpy(tile + r * NR, c + r * j->ldc, (size_t)cols * sizeof *c);
                j->uk.fn(j->kc, apanel, bpanel, tile, NR, load);
                for (int64_t r = 0; r < rows; r++)
                    memcpy(c + r * j->ldc, tile + r * NR, (size_t)cols * sizeof *c);
            }
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
                memset(C + i * ldc, 0, (size_t)N * sizeof *C);
        return true;
    }
    gemm_job j = {.s = s, .M = M, .N = N, .K = K, .C = C, .ldc = ldc,
                  .accumulate = accumulate, .uk = pick_kernel(isa)};
    const int NR = j.uk.nr;
    const int T = cpk_pool_threads(p);
    if (T > 256)
        return false;
    j.mblocks = (M + MC - 1) / MC;
    j.mb = ((M + j.mblocks - 1) / j.mblocks + MR - 1) / MR * MR;
    j.mblocks = (M + j.mb - 1) / j.mb;
    const int64_t ncmax = N < NC ? N : NC, kcmax = K < KC ? K : KC;
    float *apack[256];
    j.apack = apack;
    j.bpack = alloc_floats((ncmax + NR) * kcmax);
    bool ok = j.bpack != NULL;
    for (int t = 0; t < T; t++)
        ok = (apack[t] = ok ? alloc_floats(j.mb * kcmax) : NULL) != NULL && ok;
    for (int64_t j0 = 0; ok && j0 < N; j0 += NC) {
        j.j0 = j0;
        j.nc = N - j0 < NC ? N - j0 : NC;
        const int64_t npanels = (j.nc + NR - 1) / NR;
        /* enough tasks to keep every thread busy: split the panels into spans */
        j.nspans = 1;
        while (j.mblocks * j.nspans < 4 * T && j.nspans < npanels)
            j.nspans++;
        j.pspan = (npanels + j.nspans - 1) / j.nspans;
        j.nspans = (npanels + j.pspan - 1) / j.pspan;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            j.k0 = k0;
            j.kc = K - k0 < KC ? K - k0 : KC;
            cpk_parallel(p, npanels, packB_task, &j);
            cpk_parallel(p, j.mblocks * j.nspans, gemm_task, &j);
        }
    }
    for (int t = 0; t < T; t++)
        free(apack[t]);
    free(j.bpack);
    return ok;
}
