/*
 * `make bench`'s GEMM yardstick: the fast CPU backend's SGEMM and implicit-GEMM
 * convolution on given shapes with a given thread count, best of R runs, in GFLOP/s.
 * tests/bench/numpy_sgemm.py times numpy's matmul on the same shapes, and run.sh runs the
 * two one after the other, several rounds, and prints the medians and their ratio.
 *
 * Usage: sgemm_peak THREADS SHAPE...   Prints "<shape> <GFLOP/s>" per shape, then
 * "isa <name>". Asserts nothing. SHAPE:
 *   MxNxK      C = A B, A (M x K) and B (K x N) row-major
 *   MxNxKt     C = A B^T with B^T (N x K) row-major (a linear layer's forward, x W^T)
 *   MxNxKa     C = A^T B with A^T (K x M) row-major (a linear layer's weight gradient)
 *   conv:N,C,F,H,W   a 3x3 "same" 2-D convolution forward, x (N, C, H, W), F filters
 *                    (conv:N,C,F,D,H,W: a 3x3x3 "same" 3-D one, x (N, C, D, H, W));
 *              counted as N GEMMs of F x (H W) x (9 C), the padding and the B packing
 *              from the input included (numpy_sgemm.py times the bare GEMMs)
 *   dw:N,C,F,H,W     the same convolution's weight gradient (the lane kernel)
 *   dx:N,C,F,H,W     the same convolution's input gradient (implicit GEMM)
 * CK_BENCH_CLOCK=cpu times by the process's CPU time (see bench_clock).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/kernels.h"

/* CK_BENCH_CLOCK=cpu: the process's CPU time instead of wall time - on one thread of a
 * loaded machine a measure of the work done that other processes barely disturb */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now(void)
{
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *filled(int64_t n, int seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    if (v)
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)((i * (7 + 2 * seed)) % 13) / 13.0f - 0.5f;
    return v;
}

/* seconds of the best of `reps` runs, or -1 on bad shape / out of memory */
static double time_gemm(cpk_pool *p, cpk_isa isa, const char *shape, int reps, double *flop)
{
    long long M, N, K;
    char lay = 0;
    if (sscanf(shape, "%lldx%lldx%lld%c", &M, &N, &K, &lay) < 3 || M < 1 || N < 1 || K < 1 ||
        (lay && lay != 't' && lay != 'a'))
        return -1;
    float *a = filled(M * K, 0), *b = filled(K * N, 1), *c = filled(M * N, 2);
    double best = -1;
    if (a && b && c) {
        cpk_gemm_src s = {.a = a, .a_rs = K, .a_cs = 1, .b = b, .b_rs = N, .b_cs = 1};
        if (lay == 't')
            s.b_rs = 1, s.b_cs = K;
        if (lay == 'a')
            s.a_rs = 1, s.a_cs = M;
        for (int r = 0; r < reps; r++) {
            const double t0 = now();
            if (!cpk_sgemm(p, isa, M, N, K, &s, c, N, false)) {
                best = -1;
                break;
            }
            const double dt = now() - t0;
            best = best < 0 || dt < best ? dt : best;
        }
    }
    *flop = 2.0 * (double)M * (double)N * (double)K;
    free(a);
    free(b);
    free(c);
    return best;
}

static double time_conv(cpk_pool *p, cpk_isa isa, const char *shape, int reps, double *flop)
{
    long long N, C, F, D = 1, H, W, H2;
    char pass[8] = "";
    const int got = sscanf(shape, "%7[a-z]:%lld,%lld,%lld,%lld,%lld,%lld", pass, &N, &C, &F, &H,
                           &W, &H2);
    if (got == 7) { /* N,C,F,D,H,W: a 3x3x3 volume */
        D = H;
        H = W;
        W = H2;
    }
    if ((got != 6 && got != 7) || N < 1 || C < 1 || F < 1 || D < 1 || H < 1 || W < 1)
        return -1;
    const long long kd = got == 7 ? 3 : 1, kvol = kd * 9, vol = D * H * W;
    const int which = strcmp(pass, "conv") == 0 ? 0 : strcmp(pass, "dw") == 0 ? 1 : 2;
    cpk_conv_geom g = {.N = N, .C = C, .F = F, .in = {D, H, W}, .out = {D, H, W},
                       .k = {kd, 3, 3}, .stride = {1, 1, 1}, .dil = {1, 1, 1},
                       .pad = {kd / 2, 1, 1}};
    float *x = filled(N * C * vol, 0), *w = filled(F * C * kvol, 1), *y = filled(N * F * vol, 2);
    double *dw = malloc((size_t)(F * C * kvol) * sizeof *dw);
    double best = -1;
    if (x && w && y && dw)
        for (int r = 0; r < reps; r++) {
            const double t0 = now();
            const bool ok = which == 0   ? cpk_conv_forward(p, isa, &g, x, w, NULL, y, false)
                            : which == 1 ? cpk_conv_backward_weight(p, isa, &g, y, x, dw)
                                         : cpk_conv_backward_data(p, isa, &g, y, w, x, false);
            if (!ok) {
                best = -1;
                break;
            }
            const double dt = now() - t0;
            best = best < 0 || dt < best ? dt : best;
        }
    *flop = 2.0 * (double)N * (double)F * (double)vol * (double)(kvol * C);
    free(x);
    free(w);
    free(y);
    free(dw);
    return best;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const char *clk = getenv("CK_BENCH_CLOCK");
    if (clk && strcmp(clk, "cpu") == 0)
        bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    cpk_pool *p = cpk_pool_create(threads < 1 ? 1 : threads);
    if (!p) {
        fprintf(stderr, "sgemm_peak: out of memory\n");
        return 2;
    }
    const cpk_isa isa = cpk_isa_detect();
    for (int i = 2; i < argc; i++) {
        double flop = 0;
        /* about 0.3 s per shape: enough repetitions for a best-of on a noisy machine */
        const bool conv = strncmp(argv[i], "conv:", 5) == 0 || strncmp(argv[i], "dw:", 3) == 0 ||
                          strncmp(argv[i], "dx:", 3) == 0;
        double t = conv ? time_conv(p, isa, argv[i], 1, &flop) : time_gemm(p, isa, argv[i], 1, &flop);
        if (t > 0) {
            const int reps = t > 0.1 ? 3 : (int)(0.3 / t) + 2;
            t = conv ? time_conv(p, isa, argv[i], reps, &flop)
                     : time_gemm(p, isa, argv[i], reps, &flop);
        }
        if (t <= 0) {
            fprintf(stderr, "sgemm_peak: bad shape or out of memory: %s\n", argv[i]);
            cpk_pool_destroy(p);
            return 2;
        }
        printf("%s %.1f\n", argv[i], flop / t / 1e9);
    }
    printf("isa %s\n", cpk_isa_name(isa));
    cpk_pool_destroy(p);
    return 0;
}
