/*
 * Fast CPU attention in fp32 GEMMs (CK_OP_ATTENTION, fp32 q, k, v, no dropout, values in
 * range: cpu_attention_gemm_fits). NOT the reference's bits: the scores and every product
 * with a matrix are fp32 fused multiply-add chains (the packed SGEMM, kernels.h); the
 * softmax runs in double. Per (sample, head), one task, in blocks of AG_ROWS query rows:
 *
 *   S  = Q K^T                      (fp32 GEMM, only the keys the block's rows can see)
 *   p  = softmax(scale S) per row   (double: max, e^(x - max) by exp_lanes.h, sum in key
 *                                    order, one division; rounded once to fp32 as P)
 *   Y  = P V                        (fp32 GEMM)
 * and backward, with P recomputed by the same code (so the same bits):
 *   dP = dY V^T                     (fp32 GEMM)
 *   dS = p (dP - sum_j p_j dP_j) scale   (double, rounded once to fp32)
 *   dV += P^T dY,  dQ += dS K,  dK += dS^T Q   (fp32 GEMMs accumulating into the gradients)
 *
 * The GEMMs run on the task's thread (no pool), and each gradient row of dK and dV is one
 * fma chain over the query rows in increasing order whatever the block size, continued
 * from block to block (kernels.h: a chain starts from the existing value when it
 * accumulates). So every result is the same on every ISA path (the SGEMM's contract; the
 * softmax's lanes run the same operations at every vector width) and for every thread
 * count (a task writes only its head's rows). Causal: keys past the block's last row are
 * skipped; inside a block, the keys a row cannot see have P = 0 and dS = 0 exactly, whose
 * products with the (finite, range-checked) values add nothing.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "backends/cpu/attention_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AG_ROWS 64           /* query rows per block: a block's scores are AG_ROWS x Lk */
#define AG_EXP_MIN (-708.0)  /* e^u below this is taken as 0: under 1e-307 of the row's
                              * largest term (1), which no fp32 probability can show */

/* the softmax's e^u in double lanes (exp_lanes.h): 2, 4 or 8 to a vector (SSE2 or the
 * portable build, AVX2, AVX-512), the same operations on every lane of every width */
#define GV_VECTOR_BYTES(n) __attribute__((vector_size(n)))
#define GV_CAT2(a, b) a##b
#define GV_CAT(a, b) GV_CAT2(a, b)
#define GV_VD GV_CAT(ag_vd_, GV_SUF)
#define GV_VL GV_CAT(ag_vl_, GV_SUF)

/* e[t] = e^(x[t] - m) for t < n (0 where x[t] - m < AG_EXP_MIN); x[t] <= m, all finite */
#define AG_EXPS_BODY                                                                     \
    GV_ATTR static void GV_CAT(exps_below_max_, GV_SUF)(const double *x, double m,       \
                                                        int64_t n, double *e)            \
    {                                                                                    \
        const GV_VD zero = {0}, lo = zero + AG_EXP_MIN;                                 \
        for (int64_t t = 0; t < n; t += GV_W) {                                          \
            GV_VD u = zero;                                                              \
            if (t + GV_W <= n)                                                           \
                memcpy(&u, x + t, sizeof u);                                             \
            else                                                                         \
                for (int64_t l = 0; t + l < n; l++)                                      \
                    u[l] = x[t + l];                                                     \
            u = u - m;                                                                   \
            const GV_VL under = u < lo;                                                  \
            u = GV_CAT(gv_select_, GV_SUF)(under, zero, u); /* in the polynomial's range */ \
            const GV_VD r = GV_CAT(gv_select_, GV_SUF)(under, zero, GV_CAT(gv_exp_, GV_SUF)(u)); \
            if (t + GV_W <= n)                                                           \
                memcpy(e + t, &r, sizeof r);                                             \
            else                                                                         \
                for (int64_t l = 0; t + l < n; l++)                                      \
                    e[t + l] = r[l];                                                     \
        }                                                                                \
    }

#define GV_W 2
#define GV_SUF w2
#define GV_ATTR
#include "backends/cpu/exp_lanes.h"
AG_EXPS_BODY
#undef GV_W
#undef GV_SUF
#undef GV_ATTR

#if defined(__x86_64__) || defined(__i386__)
#define AG_X86 1
#define GV_W 4
#define GV_SUF w4
#define GV_ATTR __attribute__((target("avx2")))
#include "backends/cpu/exp_lanes.h"
AG_EXPS_BODY
#undef GV_W
#undef GV_SUF
#undef GV_ATTR

#define GV_W 8
#define GV_SUF w8
#define GV_ATTR __attribute__((target("avx512f")))
#include "backends/cpu/exp_lanes.h"
AG_EXPS_BODY
#undef GV_W
#undef GV_SUF
#undef GV_ATTR
#else
#define AG_X86 0
#endif

/* the path's width; every width gives the same bits */
static void exps_below_max(cpk_isa isa, const double *x, double m, int64_t n, double *e)
{
#if AG_X86
    if (isa == CPK_ISA_AVX512) {
        exps_below_max_w8(x, m, n, e);
        return;
    }
    if (isa == CPK_ISA_AVX2) {
        exps_below_max_w4(x, m, n, e);
        return;
    }
#endif
    (void)isa;
    exps_below_max_w2(x, m, n, e);
}

/* |values| at most these, and the sizes below: no fp32 product or sum of the op's terms can
 * overflow (a score is at most Dk 2^40, dP at most Dv 2^60, a dQ or dK term at most
 * 2 Dv 2^60 |scale| 2^20, and a sum of Lk of them stays below 2^127) */
#define AG_MAX_QKV 0x1p20f
#define AG_MAX_DY 0x1p40f
#define AG_MAX_DIM 4096       /* Dk, Dv */
#define AG_MAX_LEN (1 << 20)  /* Lq, Lk */
#define AG_MAX_SCALE 1024.0

/* the largest magnitude's bits among t's n values: NaN and Inf have larger bits than any
 * finite value, and for the rest the bits order as the magnitudes do */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint32_t max_abs_bits_avx2(const float *t, int64_t n,
                                                                  int64_t *done)
{
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(t + i)), mask));
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, m);
    uint32_t r = 0;
    for (int l = 0; l < 8; l++)
        r = lanes[l] > r ? lanes[l] : r;
    *done = i;
    return r;
}
#endif

static uint32_t max_abs_bits(cpk_isa isa, const float *t, int64_t n)
{
    uint32_t r = 0;
    int64_t i = 0;
#if AG_X86
    if (isa != CPK_ISA_PORTABLE)
        r = max_abs_bits_avx2(t, n, &i);
#endif
    (void)isa;
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, t + i, sizeof b);
        b &= 0x7fffffffu;
        r = b > r ? b : r;
    }
    return r;
}

/* every value of t finite and at most lim in magnitude */
static bool all_within(cpk_isa isa, const float *t, int64_t n, float lim)
{
    uint32_t lim_bits;
    memcpy(&lim_bits, &lim, sizeof lim_bits);
    return max_abs_bits(isa, t, n) <= lim_bits;
}

bool cpu_attention_gemm_fits(const cpu_ctx *c, const ck_attn_geom *g, const float *q,
                             const float *k, const float *v, const float *dy)
{
    if (g->rate > 0.0 || g->Lq <= 0 || g->Lk <= 0 || g->Dk <= 0 || g->Dv <= 0 ||
        g->Lq > AG_MAX_LEN || g->Lk > AG_MAX_LEN || g->Dk > AG_MAX_DIM ||
        g->Dv > AG_MAX_DIM || !(fabs(g->scale) <= AG_MAX_SCALE))
        return false;
    const int64_t nq = g->N * g->Lq * g->H, nk = g->N * g->Lk * g->H;
    return all_within(c->isa, q, nq * g->Dk, AG_MAX_QKV) &&
           all_within(c->isa, k, nk * g->Dk, AG_MAX_QKV) &&
           all_within(c->isa, v, nk * g->Dv, AG_MAX_QKV) &&
           (!dy || all_within(c->isa, dy, nq * g->Dv, AG_MAX_DY));
}

typedef struct {
    const ck_attn_geom *g;
    cpk_isa isa;
    const float *q, *k, *v, *dy;
    float *y, *dq, *dk, *dv;
    bool *failed; /* per task */
} ag_job;

/* one head's tensors: bases and row strides */
typedef struct {
    const float *q, *k, *v, *dy;
    float *y, *dq, *dk, *dv;
    int64_t lq, lv; /* row strides of q/k/dq/dk (H Dk) and v/y/dy/dv (H Dv) */
} ag_head;

static ag_head head_of(const ag_job *j, int64_t n, int64_t h)
{
    const ck_attn_geom *g = j->g;
    const int64_t lq = g->H * g->Dk, lv = g->H * g->Dv;
    const int64_t oq = n * g->Lq * lq + h * g->Dk, ok = n * g->Lk * lq + h * g->Dk;
    const int64_t oy = n * g->Lq * lv + h * g->Dv, ov = n * g->Lk * lv + h * g->Dv;
    return (ag_head){.q = j->q + oq, .k = j->k + ok, .v = j->v + ov,
                     .dy = j->dy ? j->dy + oy : NULL, .y = j->y ? j->y + oy : NULL,
                     .dq = j->dq ? j->dq + oq : NULL, .dk = j->dk ? j->dk + ok : NULL,
                     .dv = j->dv ? j->dv + ov : NULL, .lq = lq, .lv = lv};
}

/* C (M x N, ldc) (+)= A B with A(i, t) = a[i ars + t acs], B(t, c) = b[t brs + c bcs] */
static bool gemm(cpk_isa isa, int64_t M, int64_t N, int64_t K, const float *a, int64_t ars,
                 int64_t acs, const float *b, int64_t brs, int64_t bcs, float *C, int64_t ldc,
                 bool accumulate)
{
    const cpk_gemm_src s = {.a = a, .a_rs = ars, .a_cs = acs, .b = b, .b_rs = brs, .b_cs = bcs};
    return cpk_sgemm(NULL, isa, M, N, K, &s, C, ldc, accumulate);
}

/* the keys query row i sees: t < row_end */
static int64_t row_end(const ck_attn_geom *g, int64_t i)
{
    return g->causal ? (i + 1 < g->Lk ? i + 1 : g->Lk) : g->Lk;
}

/* Row r (query i) of a block whose scores s have nk columns: the probabilities p (double,
 * the row's visible keys), P (fp32, 0 beyond them); returns the visible key count. */
static int64_t row_softmax(const ag_job *j, int64_t i, const float *s, int64_t nk, double *x,
                           double *p, float *P)
{
    const ck_attn_geom *g = j->g;
    const int64_t jend = row_end(g, i);
    double m = -INFINITY;
    for (int64_t t = 0; t < jend; t++) {
        x[t] = (double)s[t] * g->scale;
        m = x[t] > m ? x[t] : m; /* all finite: fmax's value */
    }
    exps_below_max(j->isa, x, m, jend, p);
    double sum = 0.0;
    for (int64_t t = 0; t < jend; t++)
        sum += p[t];
    for (int64_t t = 0; t < jend; t++) {
        p[t] /= sum;
        P[t] = (float)p[t];
    }
    for (int64_t t = jend; t < nk; t++)
        P[t] = 0.0f;
    return jend;
}

/* the block's scores S (rows x nk) = Q[i0 .. i0 + rows) K[0 .. nk)^T */
static bool scores(const ag_job *j, const ag_head *hd, int64_t i0, int64_t rows, int64_t nk,
                   float *S)
{
    return gemm(j->isa, rows, nk, j->g->Dk, hd->q + i0 * hd->lq, hd->lq, 1, hd->k, 1, hd->lq,
                S, nk, false);
}

static bool forward_block(const ag_job *j, const ag_head *hd, int64_t i0, int64_t rows,
                          int64_t nk, float *S, float *P, double *x, double *p)
{
    if (!scores(j, hd, i0, rows, nk, S))
        return false;
    for (int64_t r = 0; r < rows; r++)
        row_softmax(j, i0 + r, S + r * nk, nk, x, p, P + r * nk);
    return gemm(j->isa, rows, j->g->Dv, nk, P, nk, 1, hd->v, hd->lv, 1, hd->y + i0 * hd->lv,
                hd->lv, false);
}

static bool backward_block(const ag_job *j, const ag_head *hd, int64_t i0, int64_t rows,
                           int64_t nk, float *S, float *P, float *dP, double *x, double *p)
{
    const ck_attn_geom *g = j->g;
    if (!scores(j, hd, i0, rows, nk, S) || /* dP = dY V^T */
        !gemm(j->isa, rows, nk, g->Dv, hd->dy + i0 * hd->lv, hd->lv, 1, hd->v, 1, hd->lv, dP,
              nk, false))
        return false;
    float *dS = S; /* each row's scores are read before its dS is written */
    for (int64_t r = 0; r < rows; r++) {
        const int64_t jend = row_softmax(j, i0 + r, S + r * nk, nk, x, p, P + r * nk);
        const float *dpr = dP + r * nk;
        double dot = 0.0;
        for (int64_t t = 0; t < jend; t++)
            dot += p[t] * (double)dpr[t];
        float *dsr = dS + r * nk;
        for (int64_t t = 0; t < jend; t++)
            dsr[t] = (float)(p[t] * ((double)dpr[t] - dot) * g->scale);
        for (int64_t t = jend; t < nk; t++)
            dsr[t] = 0.0f;
    }
    bool ok = true;
    if (hd->dv) /* dV[0 .. nk) += P^T dY */
        ok = gemm(j->isa, nk, g->Dv, rows, P, 1, nk, hd->dy + i0 * hd->lv, hd->lv, 1, hd->dv,
                  hd->lv, true);
    if (ok && hd->dq) /* dQ[i0 ..) += dS K */
        ok = gemm(j->isa, rows, g->Dk, nk, dS, nk, 1, hd->k, hd->lq, 1, hd->dq + i0 * hd->lq,
                  hd->lq, true);
    if (ok && hd->dk) /* dK[0 .. nk) += dS^T Q */
        ok = gemm(j->isa, nk, g->Dk, rows, dS, 1, nk, hd->q + i0 * hd->lq, hd->lq, 1, hd->dk,
                  hd->lq, true);
    return ok;
}

static void head_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const ag_job *j = vctx;
    const ck_attn_geom *g = j->g;
    const ag_head hd = head_of(j, task / g->H, task % g->H);
    const size_t block = (size_t)AG_ROWS * (size_t)g->Lk;
    float *S = malloc(block * sizeof *S), *P = malloc(block * sizeof *P);
    float *dP = j->dy ? malloc(block * sizeof *dP) : NULL;
    double *x = malloc(2 * (size_t)g->Lk * sizeof *x);
    bool ok = S && P && x && (!j->dy || dP);
    for (int64_t i0 = 0; ok && i0 < g->Lq; i0 += AG_ROWS) {
        const int64_t rows = g->Lq - i0 < AG_ROWS ? g->Lq - i0 : AG_ROWS;
        const int64_t nk = row_end(g, i0 + rows - 1); /* the block's last row sees most */
        ok = j->dy ? backward_block(j, &hd, i0, rows, nk, S, P, dP, x, x + g->Lk)
                   : forward_block(j, &hd, i0, rows, nk, S, P, x, x + g->Lk);
    }
    free(S);
    free(P);
    free(dP);
    free(x);
    if (!ok)
        j->failed[task] = true;
}

ck_status cpu_attention_gemm(const cpu_ctx *c, const ck_attn_geom *g, const float *q,
                             const float *k, const float *v, float *y, const float *dy,
                             float *dq, float *dk, float *dv, const char *what, ck_error *err)
{
    const int64_t tasks = g->N * g->H;
    ag_job j = {.g = g, .isa = c->isa, .q = q, .k = k, .v = v, .dy = dy, .y = y, .dq = dq,
                .dk = dk, .dv = dv};
    j.failed = calloc((size_t)tasks, sizeof *j.failed);
    if (!j.failed)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", what);
    cpk_parallel(c->pool, tasks, head_task, &j);
    bool failed = false;
    for (int64_t t = 0; t < tasks; t++)
        failed |= j.failed[t];
    free(j.failed);
    if (failed)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory for a block of scores", what);
    return CK_OK;
}
