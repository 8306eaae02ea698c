/*
 * `make bench`'s yardstick: the fast CPU backend's SGEMM on a large square problem
 * (M = N = K = 1536, fp32) with the given thread count, best of 5, in GFLOP/s - the
 * machine's measured sgemm peak the bench table relates each model's GFLOP/s to.
 * Usage: sgemm_peak THREADS. Prints "<GFLOP/s> <isa>". Asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/kernels.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int64_t n = 1536;
    float *a = malloc((size_t)(n * n) * sizeof *a), *b = malloc((size_t)(n * n) * sizeof *b),
          *c = malloc((size_t)(n * n) * sizeof *c);
    cpk_pool *p = cpk_pool_create(threads < 1 ? 1 : threads);
    if (!a || !b || !c || !p) {
        fprintf(stderr, "sgemm_peak: out of memory\n");
        return 2;
    }
    for (int64_t i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) / 13.0f;
        b[i] = (float)((i * 5) % 11) / 11.0f;
    }
    const cpk_isa isa = cpk_isa_detect();
    const cpk_gemm_src s = {.a = a, .a_rs = n, .a_cs = 1, .b = b, .b_rs = n, .b_cs = 1};
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        const double t0 = now();
        if (!cpk_sgemm(p, isa, n, n, n, &s, c, n, false)) {
            fprintf(stderr, "sgemm_peak: out of memory\n");
            return 2;
        }
        const double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    printf("%.1f %s\n", 2.0 * (double)n * (double)n * (double)n / best / 1e9, cpk_isa_name(isa));
    cpk_pool_destroy(p);
    free(a);
    free(b);
    free(c);
    return 0;
}
