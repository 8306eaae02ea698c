/*
 * The fast CPU backend's kernels (backends/cpu, docs/cpu-backend.md), bit for bit:
 *  - the SGEMM and the convolutions give the same bits for 1, 2 and 3 threads, on the
 *    portable path and the machine's SIMD path, and on the direct and implicit-GEMM
 *    convolution paths; each GEMM / convolution output equals one sequential fmaf chain in
 *    the documented order; and their accuracy against double-precision loops;
 *  - fp16/bf16 conversions identical to harness/core/half.h; an accumulation rounds once;
 *  - fp16/bf16 linear/conv: the fp32 accumulator rounded once (rule 5), which ref's float64
 *    sums do not give (the op table's low-precision rule allows either);
 *  - relu bitwise the reference's over every 16-bit pattern;
 *  - the backend's configuration (threads, ISA) and its refusals.
 * Linear, conv and every other op against the reference backend, with gradchecks, are rows
 * of the op table (tests/backend_ops.c); whole cases are tests/test_cpu_cases.c.
 * No timing is asserted anywhere.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/backend.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/kernels.h"
#include "backends/registry.h"
#include "harness/core/calibration.h"
#include "harness/core/half.h"
#include "harness/engine/train.h"
#include "harness/verify/gradcheck.h"
#include "harness/verify/judge.h"
#include "harness/verify/result.h"
#include "harness/verify/run_case.h"
#include "tests/test_util.h"

// ----------------------------------------------------------------------------
// helpers

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    /* xorshift64*, U(-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const uint64_t v = rng_state * 0x2545F4914F6CDD1Dull;
    return (float)((double)(v >> 40) / 8388608.0 - 1.0);
}

static float *frand_array(int64_t n)
{
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
    ck_assert_ptr_nonnull(a);
    for (int64_t i = 0; i < n; i++)
        a[i] = frand();
    return a;
}

static void assert_same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    ck_assert_msg(memcmp(a, b, bytes) == 0, "%s: results differ bitwise", what);
}

static ck_backend *make_cpu(int threads, const char *isa)
{
    ck_backend *b = NULL;
    ck_error err = {{0}};
    ck_assert_msg(ck_backend_cpu_create_with(&b, threads, isa, &err) == CK_OK, "cpu: %s",
                  err.msg);
    return b;
}

/* the best ISA of this machine, and the thread counts every bitwise test covers */
static const int thread_counts[] = {1, 2, 3};

// ----------------------------------------------------------------------------
// SGEMM

typedef struct {
    int64_t M, N, K;
    int layout; /* 0: A row-major, B = W^T (W row-major N x K); 1: both row-major;
                   2: A column-major (A^T stored row-major), B row-major */
} gemm_shape;

/* M > 96 with K > 256 packs B for every k block at once (gemm.c's all_k), also over two
 * column blocks (N > 2048); 97 x 2100 x 1000 has too big a B for that and takes a phase
 * per k block */
static const gemm_shape gemm_shapes[] = {
    {1, 1, 1, 0},     {7, 5, 3, 1},       {13, 37, 300, 2},   {64, 100, 513, 0},
    {6, 16, 256, 1},  {100, 33, 1, 2},    {97, 130, 257, 0},  {12, 2100, 20, 1},
    {200, 40, 600, 2}, {5, 3000, 7, 0},   {150, 2100, 300, 1}, {97, 2100, 1000, 0},
};

static void gemm_src(const gemm_shape *s, const float *A, const float *B, cpk_gemm_src *src)
{
    memset(src, 0, sizeof *src);
    src->a = A;
    src->b = B;
    if (s->layout == 2) {
        src->a_rs = 1;
        src->a_cs = s->M;
    } else {
        src->a_rs = s->K;
        src->a_cs = 1;
    }
    if (s->layout == 0) {
        src->b_rs = 1;
        src->b_cs = s->K;
    } else {
        src->b_rs = s->N;
        src->b_cs = 1;
    }
}

START_TEST(test_gemm_bits_and_chain)
{
    const gemm_shape *s = &gemm_shapes[_i];
    const int64_t M = s->M, N = s->N, K = s->K;
    float *A = frand_array(M * K), *B = frand_array(K * N), *C0 = frand_array(M * N);
    cpk_gemm_src src;
    gemm_src(s, A, B, &src);
    const cpk_isa best = cpk_isa_detect();
    float *bias = frand_array(N);
    /* acc 0: chains from +0; 1: from C (accumulate); 2: from col_init (a linear's bias) */
    for (int acc = 0; acc < 3; acc++) {
        src.col_init = acc == 2 ? bias : NULL;
        /* the documented semantics: one sequential fmaf chain per element */
        float *want = malloc((size_t)(M * N) * sizeof *want);
        ck_assert_ptr_nonnull(want);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float c = acc == 1 ? C0[i * N + j] : acc == 2 ? bias[j] : 0.0f;
                for (int64_t k = 0; k < K; k++)
                    c = fmaf(A[i * src.a_rs + k * src.a_cs], B[k * src.b_rs + j * src.b_cs], c);
                want[i * N + j] = c;
            }
        for (int isa = 0; isa <= (int)best; isa++) {
            for (int t = 0; t < COUNT(thread_counts); t++) {
                cpk_pool *p = cpk_pool_create(thread_counts[t]);
                ck_assert_ptr_nonnull(p);
                float *C = malloc((size_t)(M * N) * sizeof *C);
                ck_assert_ptr_nonnull(C);
                memcpy(C, C0, (size_t)(M * N) * sizeof *C);
                ck_assert(cpk_sgemm(p, (cpk_isa)isa, M, N, K, &src, C, N, acc == 1));
                char what[128];
                snprintf(what, sizeof what, "gemm %lldx%lldx%lld layout %d acc %d %s %d threads",
                         (long long)M, (long long)N, (long long)K, s->layout, acc,
                         cpk_isa_name((cpk_isa)isa), thread_counts[t]);
                assert_same_bits(what, C, want, (size_t)(M * N) * sizeof *C);
                free(C);
                cpk_pool_destroy(p);
            }
        }
        /* and the chain is accurate: against double */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double r = acc == 1 ? C0[i * N + j] : acc == 2 ? bias[j] : 0.0, mag = fabs(r);
                for (int64_t k = 0; k < K; k++) {
                    const double p = (double)A[i * src.a_rs + k * src.a_cs] *
                                     B[k * src.b_rs + j * src.b_cs];
                    r += p;
                    mag += fabs(p);
                }
                REQUIRE(fabs(want[i * N + j] - r) <= 2.0 * (double)K * F32_ULP * mag + 1e-30,
                        "gemm accuracy at (%lld, %lld): %g vs %g", (long long)i, (long long)j,
                        want[i * N + j], r);
            }
        free(want);
    }
    free(bias);
    free(A);
    free(B);
    free(C0);
}
END_TEST

// ----------------------------------------------------------------------------
// convolutions

static const cpk_conv_geom conv_geoms[] = {
    /* N, C, F, in, out (filled), k, stride, dil, pad */
    {.N = 1, .C = 1, .F = 4, .in = {9, 10, 21}, .k = {3, 3, 3}, .stride = {1, 1, 1},
     .dil = {1, 1, 1}, .pad = {1, 1, 1}},
    {.N = 2, .C = 4, .F = 4, .in = {6, 7, 32}, .k = {3, 3, 3}, .stride = {1, 1, 1},
     .dil = {1, 1, 1}, .pad = {1, 1, 1}},
    {.N = 2, .C = 3, .F = 5, .in = {5, 6, 17}, .k = {3, 2, 3}, .stride = {1, 1, 1},
     .dil = {2, 1, 2}, .pad = {2, 0, 1}},
    {.N = 2, .C = 3, .F = 6, .in = {1, 1, 40}, .k = {1, 1, 5}, .stride = {1, 1, 2},
     .dil = {1, 1, 2}, .pad = {0, 0, 3}},
    {.N = 1, .C = 17, .F = 18, .in = {1, 12, 13}, .k = {1, 3, 3}, .stride = {1, 2, 1},
     .dil = {1, 1, 1}, .pad = {0, 1, 1}},
    {.N = 2, .C = 2, .F = 3, .in = {4, 5, 9}, .k = {1, 1, 1}, .stride = {1, 1, 1},
     .dil = {1, 1, 1}, .pad = {0, 0, 0}},
    {.N = 1, .C = 20, .F = 16, .in = {1, 9, 30}, .k = {1, 3, 3}, .stride = {1, 1, 1},
     .dil = {1, 1, 1}, .pad = {0, 1, 1}},
    /* rows of 70: B panels read where they lie in the padded input (0-31, 32-63) and a
     * packed one (64-69); strided rows, dilated columns */
    {.N = 2, .C = 5, .F = 7, .in = {1, 11, 70}, .k = {1, 3, 3}, .stride = {1, 2, 1},
     .dil = {1, 1, 2}, .pad = {0, 1, 2}},
    {.N = 1, .C = 2, .F = 2, .in = {3, 4, 5}, .k = {2, 2, 7}, .stride = {2, 1, 3},
     .dil = {1, 2, 1}, .pad = {1, 1, 4}},
    {.N = 3, .C = 5, .F = 1, .in = {1, 1, 11}, .k = {1, 1, 4}, .stride = {1, 1, 1},
     .dil = {1, 1, 3}, .pad = {0, 0, 0}},
    /* the weight gradient's three-kh-taps task (k 3x3, F % 4 == 0) with a strided, dilated
     * kh and a masked tail row */
    {.N = 2, .C = 3, .F = 8, .in = {1, 11, 19}, .k = {1, 3, 3}, .stride = {1, 2, 1},
     .dil = {1, 2, 1}, .pad = {0, 2, 1}},
    /* the AVX-512 direct tiles: rows of 60 (one group of 4 vectors of 16, a tail of 12)
     * with 5 channels (a block of 1); rows of 16 (one vector, 4 rows at a time, then 3) */
    {.N = 1, .C = 2, .F = 5, .in = {2, 7, 60}, .k = {3, 3, 3}, .stride = {1, 1, 1},
     .dil = {1, 1, 1}, .pad = {1, 1, 1}},
    {.N = 2, .C = 3, .F = 4, .in = {3, 7, 16}, .k = {3, 3, 3}, .stride = {1, 1, 1},
     .dil = {1, 1, 1}, .pad = {1, 1, 1}},
};

static int64_t v3(const int64_t *d)
{
    return d[0] * d[1] * d[2];
}

static void geom_fill(cpk_conv_geom *g)
{
    for (int a = 0; a < 3; a++)
        g->out[a] = (g->in[a] + 2 * g->pad[a] - g->dil[a] * (g->k[a] - 1) - 1) / g->stride[a] + 1;
}

/* input index of output o, tap k on one axis, or -1 in the padding */
static int64_t in_at(const cpk_conv_geom *g, int a, int64_t o, int64_t k)
{
    const int64_t i = o * g->stride[a] + k * g->dil[a] - g->pad[a];
    return i >= 0 && i < g->in[a] ? i : -1;
}

/* the documented forward chain, in fp32 with fmaf, every tap (padding reads 0) */
static void conv_fwd_chain(const cpk_conv_geom *g, const float *x, const float *w,
                           const float *b, float *y)
{
    const int64_t kv = v3(g->k);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t f = 0; f < g->F; f++)
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                        float acc = b ? b[f] : 0.0f;
                        for (int64_t c = 0; c < g->C; c++)
                            for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                                        const int64_t i0 = in_at(g, 0, o0, k0),
                                                      i1 = in_at(g, 1, o1, k1),
                                                      i2 = in_at(g, 2, o2, k2);
                                        const float xv =
                                            i0 < 0 || i1 < 0 || i2 < 0
                                                ? 0.0f
                                                : x[((n * g->C + c) * g->in[0] + i0) * g->in[1] *
                                                        g->in[2] + i1 * g->in[2] + i2];
                                        acc = fmaf(w[(f * g->C + c) * kv +
                                                     (k0 * g->k[1] + k1) * g->k[2] + k2],
                                                   xv, acc);
                                    }
                        y[((n * g->F + f) * g->out[0] + o0) * g->out[1] * g->out[2] +
                          o1 * g->out[2] + o2] = acc;
                    }
}

/* double-precision backward: dx (from 0), dw */
static void conv_bwd_double(const cpk_conv_geom *g, const float *x, const float *w,
                            const float *dy, double *dx, double *dxmag, double *dw,
                            double *dwmag)
{
    const int64_t kv = v3(g->k);
    memset(dx, 0, (size_t)(g->N * g->C * v3(g->in)) * sizeof *dx);
    memset(dxmag, 0, (size_t)(g->N * g->C * v3(g->in)) * sizeof *dxmag);
    memset(dw, 0, (size_t)(g->F * g->C * kv) * sizeof *dw);
    memset(dwmag, 0, (size_t)(g->F * g->C * kv) * sizeof *dwmag);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t f = 0; f < g->F; f++)
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                        const double d = dy[((n * g->F + f) * g->out[0] + o0) * g->out[1] *
                                                g->out[2] + o1 * g->out[2] + o2];
                        for (int64_t c = 0; c < g->C; c++)
                            for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                                        const int64_t i0 = in_at(g, 0, o0, k0),
                                                      i1 = in_at(g, 1, o1, k1),
                                                      i2 = in_at(g, 2, o2, k2);
                                        if (i0 < 0 || i1 < 0 || i2 < 0)
                                            continue;
                                        const int64_t xi =
                                            ((n * g->C + c) * g->in[0] + i0) * g->in[1] *
                                                g->in[2] + i1 * g->in[2] + i2;
                                        const int64_t wi = (f * g->C + c) * kv +
                                                           (k0 * g->k[1] + k1) * g->k[2] + k2;
                                        dx[xi] += d * w[wi];
                                        dxmag[xi] += fabs(d * w[wi]);
                                        dw[wi] += d * x[xi];
                                        dwmag[wi] += fabs(d * x[xi]);
                                    }
                    }
}

START_TEST(test_conv_bits_and_accuracy)
{
    cpk_conv_geom g = conv_geoms[_i];
    geom_fill(&g);
    const int64_t nx = g.N * g.C * v3(g.in), ny = g.N * g.F * v3(g.out),
                  nw = g.F * g.C * v3(g.k);
    float *x = frand_array(nx), *w = frand_array(nw), *b = frand_array(g.F),
          *dy = frand_array(ny), *dx0 = frand_array(nx);
    const bool with_bias = _i % 2 == 0;
    float *want_y = malloc((size_t)ny * sizeof *want_y);
    double *rdx = malloc((size_t)nx * sizeof *rdx), *rdxm = malloc((size_t)nx * sizeof *rdxm);
    double *rdw = malloc((size_t)nw * sizeof *rdw), *rdwm = malloc((size_t)nw * sizeof *rdwm);
    ck_assert(want_y && rdx && rdxm && rdw && rdwm);
    conv_fwd_chain(&g, x, w, with_bias ? b : NULL, want_y);
    conv_bwd_double(&g, x, w, dy, rdx, rdxm, rdw, rdwm);

    float *first_dx = NULL;
    double *first_dw = NULL;
    const cpk_isa best = cpk_isa_detect();
    for (int isa = 0; isa <= (int)best; isa++)
        for (int path = 1; path <= 2; path++)
            for (int t = 0; t < COUNT(thread_counts); t++) {
                char what[160];
                snprintf(what, sizeof what, "conv geometry %d, %s, path %d, %d threads", _i,
                         cpk_isa_name((cpk_isa)isa), path, thread_counts[t]);
                cpk_pool *p = cpk_pool_create(thread_counts[t]);
                ck_assert_ptr_nonnull(p);
                g.path = path;
                float *y = malloc((size_t)ny * sizeof *y), *dx = malloc((size_t)nx * sizeof *dx);
                double *dw = malloc((size_t)nw * sizeof *dw);
                ck_assert(y && dx && dw);
                memcpy(dx, dx0, (size_t)nx * sizeof *dx);
                ck_assert(cpk_conv_forward(p, (cpk_isa)isa, &g, x, w, with_bias ? b : NULL, y,
                                           false));
                ck_assert(cpk_conv_backward_data(p, (cpk_isa)isa, &g, dy, w, dx, true));
                ck_assert(cpk_conv_backward_weight(p, (cpk_isa)isa, &g, dy, x, dw));
                /* forward: exactly the documented chain, whatever the path */
                char fw[200];
                snprintf(fw, sizeof fw, "%s: forward vs the fmaf chain", what);
                assert_same_bits(fw, y, want_y, (size_t)ny * sizeof *y);
                if (!first_dx) {
                    first_dx = dx;
                    first_dw = dw;
                    /* accuracy against double, from the first configuration */
                    for (int64_t i = 0; i < nx; i++)
                        REQUIRE(fabs((double)dx[i] - (dx0[i] + rdx[i])) <=
                                    64 * F32_ULP * (rdxm[i] + fabs(dx0[i])) + 1e-30,
                                "%s: dx[%lld] %g vs %g", what, (long long)i, dx[i],
                                dx0[i] + rdx[i]);
                    for (int64_t i = 0; i < nw; i++)
                        REQUIRE(fabs(dw[i] - rdw[i]) <= 64 * F32_ULP * rdwm[i] + 1e-30,
                                "%s: dw[%lld] %g vs %g", what, (long long)i, dw[i], rdw[i]);
                } else {
                    char m[400];
                    snprintf(m, sizeof m, "%s: backward data vs the first configuration", what);
                    assert_same_bits(m, dx, first_dx, (size_t)nx * sizeof *dx);
                    snprintf(m, sizeof m, "%s: backward weight vs the first configuration",
                             what);
                    assert_same_bits(m, dw, first_dw, (size_t)nw * sizeof *dw);
                    free(dx);
                    free(dw);
                }
                free(y);
                cpk_pool_destroy(p);
            }
    free(first_dx);
    free(first_dw);
    free(x);
    free(w);
    free(b);
    free(dy);
    free(dx0);
    free(want_y);
    free(rdx);
    free(rdxm);
    free(rdw);
    free(rdwm);
}
END_TEST

// ----------------------------------------------------------------------------
// fp16/bf16 conversions: identical to harness/core/half.h

static bool same_f32(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

START_TEST(test_half_conversions)
{
    const cpk_isa best = cpk_isa_detect();
    ck_error err = {{0}};
    for (int isa = 0; isa <= (int)best; isa++) {
        cpu_ctx c = {.pool = NULL, .isa = (cpk_isa)isa, .threads = 1};
        /* widening: every 16-bit pattern */
        ck_tensor *h = tu_tensor_new("h", CK_F16, SHAPE(65536));
        ck_tensor *bh = tu_tensor_new("bh", CK_BF16, SHAPE(65536));
        for (int i = 0; i < 65536; i++) {
            ((uint16_t *)h->data)[i] = (uint16_t)i;
            ((uint16_t *)bh->data)[i] = (uint16_t)i;
        }
        const float *v;
        float *owned;
        ck_assert(cpu_view_f32("test", h, &c, &v, &owned, &err) == CK_OK);
        for (int i = 0; i < 65536; i++)
            REQUIRE(same_f32(v[i], ck_f16_to_f32((uint16_t)i)), "%s: fp16 %04x widens to %a",
                    cpk_isa_name((cpk_isa)isa), i, v[i]);
        free(owned);
        ck_assert(cpu_view_f32("test", bh, &c, &v, &owned, &err) == CK_OK);
        for (int i = 0; i < 65536; i++)
            REQUIRE(same_f32(v[i], ck_bf16_to_f32((uint16_t)i)), "bf16 %04x widens to %a", i,
                    v[i]);
        free(owned);
        /* narrowing: edge values and random bit patterns */
        const int n = 65536;
        float *src = malloc((size_t)n * sizeof *src);
        ck_assert_ptr_nonnull(src);
        const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                  0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x477fefffu,
                                  0x477ff000u, 0x477fffffu, 0x38800000u, 0x33800000u,
                                  0x33000000u, 0x33000001u, 0x00000001u, 0x7f7fffffu,
                                  0x7f7f8000u, 0x3f808000u, 0x3f818000u, 0x3f800fffu};
        for (int i = 0; i < n; i++) {
            uint32_t u;
            if (i < (int)(sizeof edges / sizeof edges[0])) {
                u = edges[i];
            } else {
                rng_state ^= rng_state >> 12;
                rng_state ^= rng_state << 25;
                rng_state ^= rng_state >> 27;
                u = (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
                if (i % 2) /* keep half of them within fp16's range */
                    u = (u & 0x807fffffu) | ((uint32_t)(100 + i % 48) << 23);
            }
            memcpy(&src[i], &u, sizeof u);
        }
        ck_tensor *o16 = tu_tensor_new("o16", CK_F16, SHAPE(n));
        ck_tensor *ob16 = tu_tensor_new("ob16", CK_BF16, SHAPE(n));
        cpu_store(&c, o16, src);
        cpu_store(&c, ob16, src);
        for (int i = 0; i < n; i++) {
            REQUIRE(((uint16_t *)o16->data)[i] == ck_f32_to_f16(src[i]),
                    "%s: %a narrows to fp16 %04x, half.h %04x", cpk_isa_name((cpk_isa)isa),
                    src[i], ((uint16_t *)o16->data)[i], ck_f32_to_f16(src[i]));
            REQUIRE(((uint16_t *)ob16->data)[i] == ck_f32_to_bf16(src[i]),
                    "%a narrows to bf16 %04x, half.h %04x", src[i],
                    ((uint16_t *)ob16->data)[i], ck_f32_to_bf16(src[i]));
        }
        free(src);
        tu_tensor_free(o16);
        tu_tensor_free(ob16);
        tu_tensor_free(h);
        tu_tensor_free(bh);
    }
}
END_TEST

/* t += v rounds the exact sum once: fp16 1 + (2^-11 + 2^-40) is 1 + 2^-10, not 1 */
START_TEST(test_accumulate_rounds_once)
{
    cpk_pool *pool = cpk_pool_create(2);
    ck_assert_ptr_nonnull(pool);
    const cpu_ctx c = {.pool = pool, .isa = cpk_isa_detect(), .threads = 2};
    ck_tensor *t = tu_tensor_new("t", CK_F16, SHAPE(1));
    tu_tset(t, 0, 1.0);
    const double v = ldexp(1.0, -11) + ldexp(1.0, -40);
    cpu_accumulate_f64(&c, t, &v);
    ck_assert_double_eq(tu_tget(t, 0), 1.0 + ldexp(1.0, -10));
    tu_tset(t, 0, 1.0);
    const float vf = (float)(ldexp(1.0, -11) + ldexp(1.0, -30));
    cpu_accumulate_f32(&c, t, &vf);
    ck_assert_double_eq(tu_tget(t, 0), 1.0 + ldexp(1.0, -10));
    tu_tensor_free(t);
    cpk_pool_destroy(pool);
}
END_TEST

START_TEST(test_lowp_is_the_fp32_sum_rounded_once)
{
    const ck_dtype dt = _i % 2 ? CK_BF16 : CK_F16;
    const bool conv = _i >= 2;
    const double h = dt == CK_F16 ? 0x1p-11 : 0x1p-8;
    ck_op_params op;
    ck_op_params_default(&op, conv ? CK_OP_CONV : CK_OP_LINEAR, conv ? 1 : 0);
    ck_shape xs = SHAPE(1, 3), ws = SHAPE(1, 3), ys = SHAPE(1, 1);
    if (conv) {
        op.filters = 1;
        xs = SHAPE(1, 3, 1);
        ws = SHAPE(1, 3, 1);
        ys = SHAPE(1, 1, 1);
    } else {
        op.units = 1;
    }
    op.bias = false;
    const double xv[3] = {1.0, h, 0x1p-24}, wv[3] = {1.0, 1.0, 1.0};
    ck_tensor *x = tu_tensor_of("x", dt, xs, xv), *w = tu_tensor_of("w", dt, ws, wv);
    ck_tensor *y = tu_tensor_new("y", dt, ys);
    ck_op_io io;
    memset(&io, 0, sizeof io);
    io.n_in = 1;
    io.in[0] = x;
    io.out = y;
    io.weight = w;
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_backend *cpu = make_cpu(2, NULL);
    ck_error err = {{0}};
    ck_assert_msg(cpu->forward(cpu, &op, &args, &io, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(tu_tget(y, 0) == 1.0, "%s in %s: %a, want 1.0", conv ? "conv" : "linear",
                  ck_dtype_name(dt), tu_tget(y, 0));
    cpu->destroy(cpu);
    tu_tensor_free(x);
    tu_tensor_free(w);
    tu_tensor_free(y);
}
END_TEST

/* relu on cpu (fast path in fp32, fp16, bf16) is bitwise the reference's, forward and
 * backward, over every 16-bit pattern as x, dy and the old dx */
START_TEST(test_relu_bitwise_ref)
{
    const ck_dtype dts[] = {CK_F16, CK_BF16, CK_F32};
    const ck_dtype dt = dts[_i];
    const int64_t n = 65536;
    ck_tensor *t[2][4]; /* [backend][x, y, dy, dx] */
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++)
            t[b][k] = tu_tensor_new("t", dt, SHAPE(n));
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 2; b++) {
            if (dt == CK_F32) {
                /* every fp16 pattern's value, and its bf16-like fp32 counterpart */
                ((float *)t[b][0]->data)[i] = ck_f16_to_f32((uint16_t)i);
                ((float *)t[b][2]->data)[i] = ck_bf16_to_f32((uint16_t)(i * 40503u));
                ((float *)t[b][3]->data)[i] = ck_f16_to_f32((uint16_t)(i * 2654435761u));
            } else {
                ((uint16_t *)t[b][0]->data)[i] = (uint16_t)i;
                ((uint16_t *)t[b][2]->data)[i] = (uint16_t)(i * 40503u);
                ((uint16_t *)t[b][3]->data)[i] = (uint16_t)(i * 2654435761u);
            }
        }
    ck_backend *be[2] = {make_cpu(2, NULL), NULL};
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &be[1], &err) == CK_OK);
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_RELU, 0);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    for (int b = 0; b < 2; b++) {
        ck_op_io io;
        memset(&io, 0, sizeof io);
        io.n_in = 1;
        io.in[0] = t[b][0];
        io.out = t[b][1];
        ck_assert_msg(be[b]->forward(be[b], &op, &args, &io, &err) == CK_OK, "%s", err.msg);
        ck_op_grads g;
        memset(&g, 0, sizeof g);
        g.dout = t[b][2];
        g.din[0] = t[b][3];
        ck_assert_msg(be[b]->backward(be[b], &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
    }
    /* bitwise, except that where both hold a NaN its payload and sign may differ: which
     * operand's NaN an addition propagates is the compiler's choice of operand order */
    for (int k = 1; k <= 3; k += 2)
        for (int64_t i = 0; i < n; i++) {
            const double a = tu_tget(t[0][k], i), r = tu_tget(t[1][k], i);
            const size_t sz = ck_dtype_size(dt);
            REQUIRE((isnan(a) && isnan(r)) ||
                        memcmp((const char *)t[0][k]->data + (size_t)i * sz,
                               (const char *)t[1][k]->data + (size_t)i * sz, sz) == 0,
                    "relu %s in %s at %lld: cpu %a, ref %a", k == 1 ? "forward" : "backward",
                    ck_dtype_name(dt), (long long)i, a, r);
        }
    for (int b = 0; b < 2; b++) {
        be[b]->destroy(be[b]);
        for (int k = 0; k < 4; k++)
            tu_tensor_free(t[b][k]);
    }
}
END_TEST

/* backend.h's convert in fp32 and the fused relu backward (din0_relu_over_input), split
 * across the pool's threads by element ranges: convert bitwise the reference's (copy, and a
 * scaled accumulation), the fused relu bitwise the unfused sequence (the input gradient into
 * a zeroed buffer, then relu's backward), on 1, 2 and 3 threads, over a tensor of several
 * tasks and a tail that is no whole mask word, through NaN, infinities and signed zeros */
START_TEST(test_convert_and_relu_mask_split)
{
    const int64_t rows = 301, cols = 251, n = rows * cols, outs = 3; /* 75551 elements */
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    ck_tensor *x = tu_tensor_new("x", CK_F32, SHAPE(rows, cols));
    ck_tensor *w = tu_tensor_new("w", CK_F32, SHAPE(outs, cols));
    ck_tensor *dy = tu_tensor_new("dy", CK_F32, SHAPE(rows, outs));
    ck_tensor *want = tu_tensor_new("want", CK_F32, SHAPE(rows, cols));
    ck_tensor *got = tu_tensor_new("got", CK_F32, SHAPE(rows, cols));
    ck_tensor *y = tu_tensor_new("y", CK_F32, SHAPE(rows, outs)); /* the op's output */
    float *xv = x->data;
    for (int64_t i = 0; i < n; i++) /* relu outputs: zeros of both signs, positives, NaN */
        xv[i] = i % 5 == 0 ? 0.0f : i % 7 == 0 ? -0.0f : i % 4093 == 0 ? NAN : fabsf(frand());
    for (int64_t i = 0; i < outs * cols; i++)
        ((float *)w->data)[i] = frand();
    for (int64_t i = 0; i < rows * outs; i++)
        ((float *)dy->data)[i] = i == 17 ? INFINITY : frand();
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_LINEAR, 0);
    op.units = outs;
    op.bias = false;
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    for (int ti = 0; ti < COUNT(thread_counts); ti++) {
        ck_backend *b = make_cpu(thread_counts[ti], NULL);
        /* convert: a copy, then a scaled accumulation, against ref's */
        for (int acc = 0; acc <= 1; acc++) {
            const double scale = acc ? 1.0 / 3.0 : 1.0;
            memcpy(want->data, x->data, (size_t)n * sizeof(float));
            memcpy(got->data, x->data, (size_t)n * sizeof(float));
            ck_tensor src = *x;
            ck_assert(ref->convert(ref, want, &src, scale, acc, &err) == CK_OK);
            ck_assert_msg(b->convert(b, got, &src, scale, acc, &err) == CK_OK, "%s", err.msg);
            for (int64_t i = 0; i < n; i++) {
                const float g = ((float *)got->data)[i], r = ((float *)want->data)[i];
                REQUIRE((isnan(g) && isnan(r)) || memcmp(&g, &r, sizeof g) == 0,
                        "convert %s, %d threads, at %lld: cpu %a, ref %a",
                        acc ? "accumulated" : "copied", thread_counts[ti], (long long)i, g, r);
            }
        }
        /* the unfused sequence on this backend: dx into zeros, then relu's backward */
        ck_tensor hidden = *x;
        hidden.data = NULL;
        ck_op_io io;
        memset(&io, 0, sizeof io);
        io.n_in = 1;
        io.in[0] = &hidden;
        io.weight = w;
        io.out = y;
        memset(want->data, 0, (size_t)n * sizeof(float));
        ck_op_grads g = {.dout = dy, .din = {want}};
        ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
        ck_op_params rop;
        ck_op_params_default(&rop, CK_OP_RELU, 0);
        ck_op_io rio;
        memset(&rio, 0, sizeof rio);
        rio.n_in = 1;
        rio.in[0] = x;
        rio.out = x;
        ck_op_grads rg = {.dout = want, .din = {want}, .din0_fresh = true};
        ck_assert_msg(b->backward(b, &rop, &args, &rio, &rg, &err) == CK_OK, "%s", err.msg);
        /* fused: written over a copy of the relu's output */
        memcpy(got->data, x->data, (size_t)n * sizeof(float));
        io.in[0] = got;
        ck_op_grads fg = {.dout = dy, .din = {got}, .din0_relu_over_input = true};
        ck_assert_msg(b->backward(b, &op, &args, &io, &fg, &err) == CK_OK, "%s", err.msg);
        assert_same_bits("fused relu over a linear's input gradient", got->data, want->data,
                         (size_t)n * sizeof(float));
        b->destroy(b);
    }
    ref->destroy(ref);
    tu_tensor_free(x);
    tu_tensor_free(w);
    tu_tensor_free(dy);
    tu_tensor_free(want);
    tu_tensor_free(got);
    tu_tensor_free(y);
}
END_TEST

START_TEST(test_backend_config)
{
    ck_backend *b = make_cpu(3, "portable");
    int threads = 0;
    const char *isa = NULL;
    ck_assert(ck_backend_cpu_config(b, &threads, &isa));
    ck_assert_int_eq(threads, 3);
    ck_assert_str_eq(isa, "portable");
    ck_backend_info info;
    b->info(b, &info);
    ck_assert_str_eq(info.name, "cpu");
    ck_assert_ptr_nonnull(strstr(info.device, "3 threads, portable"));
    b->destroy(b);
    b = make_cpu(0, NULL);
    ck_assert(ck_backend_cpu_config(b, &threads, &isa));
    ck_assert_int_ge(threads, 1);
    ck_assert_str_eq(isa, cpk_isa_name(cpk_isa_detect()));
    b->destroy(b);
    ck_error err = {{0}};
    ck_assert_int_eq(ck_backend_cpu_create_with(&b, -1, NULL, &err), CK_ERR_INPUT);
    ck_assert_int_eq(ck_backend_cpu_create_with(&b, 1, "sse9", &err), CK_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "sse9"));
    if (cpk_isa_detect() < CPK_ISA_AVX512)
        ck_assert_int_eq(ck_backend_cpu_create_with(&b, 1, "avx512", &err), CK_ERR_UNSUPPORTED);
    ck_backend *ref = NULL;
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    ck_assert(!ck_backend_cpu_config(ref, &threads, &isa));
    ref->destroy(ref);
}
END_TEST

/* the calibration rounding (backend.h's calibration_round): element k exactly
 * ck_calibration_round(v[k], bits, rel, stream, k), one element at a time, on every thread
 * count and ISA path (the AVX-512 Philox lanes, the portable lanes, the tail that is no
 * whole group of lanes), for fp16's and bf16's significands, with and without the dither,
 * from a stream with a nonzero offset, through zeros, subnormal floats, inf and NaN */
START_TEST(test_calibration_round_every_path)
{
    const int64_t n = 40003; /* several tasks and a tail of 3 */
    float *src = malloc((size_t)n * sizeof *src), *want = malloc((size_t)n * sizeof *want);
    ck_assert(src && want);
    for (int64_t i = 0; i < n; i++)
        src[i] = ck_f16_to_f32((uint16_t)(i * 2654435761u)) * (i % 7 == 0 ? 1e-30f : 1.0f);
    src[5] = 0.0f;
    src[6] = -0.0f;
    src[7] = 0x1p-149f;
    src[8] = INFINITY;
    src[9] = -NAN;
    ck_rng_stream st = ck_rng_keyed(77, 5, CK_PURPOSE_CALIBRATION, 2);
    st.offset = 12;
    const char *isas[] = {NULL, "portable", "avx2", "avx512"};
    const int bits[] = {11, 8};
    const double rels[] = {0.0, 0x1p-11, 0x1p-8};
    for (int ii = 0; ii < COUNT(isas); ii++) {
        if ((ii == 2 && cpk_isa_detect() < CPK_ISA_AVX2) ||
            (ii == 3 && cpk_isa_detect() < CPK_ISA_AVX512))
            continue;
        for (int ti = 0; ti < COUNT(thread_counts); ti++) {
            ck_backend *b = make_cpu(thread_counts[ti], isas[ii]);
            ck_tensor *t = tu_tensor_new("calibration.t", CK_F32, SHAPE(n));
            for (int bi = 0; bi < 2; bi++)
                for (int ri = 0; ri < COUNT(rels); ri++) {
                    for (int64_t i = 0; i < n; i++)
                        want[i] = ck_calibration_round(src[i], bits[bi], rels[ri], &st,
                                                       (uint64_t)i);
                    memcpy(t->data, src, (size_t)n * sizeof *src);
                    ck_error err = {{0}};
                    ck_assert_msg(b->calibration_round(b, t, bits[bi], rels[ri], &st, &err) ==
                                      CK_OK, "%s", err.msg);
                    const float *got = t->data;
                    for (int64_t i = 0; i < n; i++)
                        REQUIRE(memcmp(&got[i], &want[i], sizeof *got) == 0 ||
                                    (isnan(got[i]) && isnan(want[i])),
                                "calibration_round %s, %d threads, %d bits, dither %a at %lld: "
                                "%a, one element at a time %a",
                                isas[ii] ? isas[ii] : "auto", thread_counts[ti], bits[bi],
                                rels[ri], (long long)i, got[i], want[i]);
                }
            tu_tensor_free(t);
            b->destroy(b);
        }
    }
    free(src);
    free(want);
}
END_TEST

/* The linear's bias gradient on every ISA path and 1-3 threads: db[u] += the sum over rows of
 * dy[m][u] in double, m ascending from +0, rounded once onto the stored value. 83 units (a
 * task of 64 and one of 19: groups of 16 and a tail) and 37 rows, dy with -0, subnormals,
 * large values, an infinity and a NaN column among ordinary values. */
START_TEST(test_linear_bias_grad_every_path)
{
    const int64_t M = 37, U = 83, IN = 5;
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_LINEAR, 0);
    op.units = U;
    op.bias = true;
    ck_tensor *x = tu_tensor_new("x", CK_F32, SHAPE(M, IN));
    ck_tensor *w = tu_tensor_new("w", CK_F32, SHAPE(U, IN));
    ck_tensor *dy = tu_tensor_new("dy", CK_F32, SHAPE(M, U));
    ck_tensor *db = tu_tensor_new("db", CK_F32, SHAPE(U));
    ck_tensor *y = tu_tensor_new("y", CK_F32, SHAPE(M, U)); /* its dtype: the call's */
    float *d = dy->data, db0[83], want[83];
    for (int64_t i = 0; i < M * U; i++) {
        const uint32_t h = (uint32_t)i * 2654435761u;
        d[i] = (float)((int32_t)(h >> 8) - (1 << 23)) * 0x1p-20f;
        d[i] = i % 11 == 3 ? -0.0f : i % 13 == 5 ? 0x1p-140f : i % 17 == 1 ? d[i] * 0x1p100f : d[i];
    }
    d[4 * U + 70] = INFINITY;
    for (int64_t m = 0; m < M; m++)
        d[m * U + 21] = m == 9 ? NAN : d[m * U + 21];
    for (int64_t u = 0; u < U; u++) {
        db0[u] = (float)u * 0.25f - 3.0f;
        double acc = 0.0;
        for (int64_t m = 0; m < M; m++)
            acc += (double)d[m * U + u];
        want[u] = (float)((double)db0[u] + acc);
    }
    const char *isas[] = {"portable", "avx2", "avx512"};
    for (int ii = 0; ii < COUNT(isas); ii++) {
        if ((ii == 1 && cpk_isa_detect() < CPK_ISA_AVX2) ||
            (ii == 2 && cpk_isa_detect() < CPK_ISA_AVX512))
            continue;
        for (int ti = 0; ti < COUNT(thread_counts); ti++) {
            ck_backend *b = make_cpu(thread_counts[ti], isas[ii]);
            memcpy(db->data, db0, sizeof db0);
            ck_op_io io;
            memset(&io, 0, sizeof io);
            io.n_in = 1;
            io.in[0] = x;
            io.weight = w;
            io.out = y;
            ck_op_grads g;
            memset(&g, 0, sizeof g);
            g.dout = dy;
            g.dbias = db;
            ck_fwd_args args;
            memset(&args, 0, sizeof args);
            ck_error err = {{0}};
            ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
            const float *got = db->data;
            for (int64_t u = 0; u < U; u++)
                REQUIRE(memcmp(&got[u], &want[u], sizeof *got) == 0 ||
                            (isnan(got[u]) && isnan(want[u])),
                        "linear db %s, %d threads, unit %lld: %a, want %a", isas[ii],
                        thread_counts[ti], (long long)u, got[u], want[u]);
            b->destroy(b);
        }
    }
    tu_tensor_free(x);
    tu_tensor_free(w);
    tu_tensor_free(dy);
    tu_tensor_free(db);
    tu_tensor_free(y);
}
END_TEST

Suite *suite_cpu_kernels(void)
{
    Suite *s = suite_create("cpu_kernels");
    TCase *k = tcase_create("kernels");
    tcase_set_timeout(k, 300);
    tcase_add_loop_test(k, test_gemm_bits_and_chain, 0, COUNT(gemm_shapes));
    tcase_add_loop_test(k, test_conv_bits_and_accuracy, 0, COUNT(conv_geoms));
    tcase_add_test(k, test_half_conversions);
    tcase_add_test(k, test_accumulate_rounds_once);
    tcase_add_test(k, test_backend_config);
    tcase_add_test(k, test_calibration_round_every_path);
    tcase_add_test(k, test_convert_and_relu_mask_split);
    tcase_add_loop_test(k, test_lowp_is_the_fp32_sum_rounded_once, 0, 4);
    tcase_add_loop_test(k, test_relu_bitwise_ref, 0, 3);
    tcase_add_test(k, test_linear_bias_grad_every_path);
    suite_add_tcase(s, k);
    return s;
}
