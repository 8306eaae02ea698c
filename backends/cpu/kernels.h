/*
 * Private to the fast CPU backend: its thread pool, SGEMM and convolution kernels, on fp32
 * buffers. Tensors, dtypes and the backend interface are handled by the op files.
 *
 * Determinism contract: every output element is computed by exactly one task, its sum in
 * an order fixed by the shapes alone (never by the thread count or the ISA path).
 *  - GEMM and convolution forward / backward-data: each output is ONE fp32 fused
 *    multiply-add chain  acc = fma(a_k, b_k, acc)  over k = 0..K-1 in increasing order,
 *    starting from the initial value (bias, 0, or the existing value when accumulating).
 *    SIMD lanes hold different outputs, so AVX2, AVX-512 and the portable fmaf path give
 *    the same bits.
 *  - Reductions over many terms (conv weight gradient, bias gradients): fixed chunks
 *    summed in fp32 lanes, chunk totals added in double in chunk order; the portable path
 *    emulates the lanes exactly.
 */
#ifndef CK_CPU_KERNELS_H
#define CK_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- thread pool ---- */
typedef struct cpk_pool cpk_pool;
/* nthreads >= 1 (the caller is one of them). NULL on failure. */
cpk_pool *cpk_pool_create(int nthreads);
void cpk_pool_destroy(cpk_pool *p);
int cpk_pool_threads(const cpk_pool *p);
/* Runs fn(ctx, task, tid) for task in [0, ntasks), each exactly once, on up to nthreads
 * threads; returns when all are done. tid < nthreads identifies per-thread scratch. */
typedef void (*cpk_task_fn)(void *ctx, int64_t task, int tid);
void cpk_parallel(cpk_pool *p, int64_t ntasks, cpk_task_fn fn, void *ctx);

/* A scratch buffer of at least `bytes` (64-byte aligned, contents undefined; NULL on
 * out-of-memory), handed back with cpk_scratch_give, which keeps one buffer of moderate
 * size for the next take. Not for concurrent use on one pool (nor is cpk_parallel). */
void *cpk_scratch_take(cpk_pool *p, size_t bytes);
void cpk_scratch_give(cpk_pool *p, void *v, size_t bytes);

/* ---- ISA ---- */
typedef enum { CPK_ISA_PORTABLE = 0, CPK_ISA_AVX2 = 1, CPK_ISA_AVX512 = 2 } cpk_isa;
cpk_isa cpk_isa_detect(void);
const char *cpk_isa_name(cpk_isa isa);

/* ---- SGEMM ---- */
/* C (M x N, row stride ldc) = init + A (M x K) * B (K x N), each C[i][j] one fma chain
 * over k ascending from init: init = C[i][j] when accumulate, else row_init[i] or 0.
 * A(i,k) = a[i*a_rs + k*a_cs]; B(k,j) = b[k*b_rs + j*b_cs], unless packB is set: then
 * packB(ctx, k0, kc, j0, nr, dst) writes B(k0+k, j0+j) to dst[k*NR + j] for k < kc,
 * j < nr (zero beyond nr up to NR = CPK_NR_MAX). */
#define CPK_NR_MAX 32
typedef void (*cpk_packB_fn)(const void *ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nr,
                            int64_t NR, float *dst);
/* Optional with packB: where the NR columns [j0, j0 + NR) of B lie contiguously at
 * base + b_koff[k] + (0..NR) for every k, returns base; else NULL (that panel is packed).
 * The micro-kernel then reads B where it lies (the implicit-GEMM convolutions' padded
 * input), which is a copy less and never changes a bit. */
typedef const float *(*cpk_bpanel_fn)(const void *ctx, int64_t j0, int64_t NR);
typedef struct {
    const float *a;
    int64_t a_rs, a_cs;
    const float *b;
    int64_t b_rs, b_cs;
    cpk_packB_fn packB;
    const void *packB_ctx;
    cpk_bpanel_fn bpanel; /* optional, with packB */
    const int64_t *b_koff; /* K offsets, with bpanel */
    const float *row_init; /* optional (M values): without accumulate, C[i][j]'s chain
                            * starts from row_init[i] instead of 0 (a convolution's bias) */
    const float *col_init; /* optional (N values), not with row_init: without accumulate,
                            * C[i][j]'s chain starts from col_init[j] (a linear's bias) */
} cpk_gemm_src;
/* scratch: returns false on out-of-memory */
bool cpk_sgemm(cpk_pool *p, cpk_isa isa, int64_t M, int64_t N, int64_t K, const cpk_gemm_src *s,
              float *C, int64_t ldc, bool accumulate);

/* ---- convolution, NC(DHW), fp32 buffers ---- */
typedef struct {
    int64_t N, C, F;
    int64_t in[3], out[3]; /* spatial, leading dims 1 */
    int64_t k[3], stride[3], dil[3], pad[3]; /* pad = pad_lo */
    int path; /* 0: by shape; 1: the direct kernel where it applies; 2: implicit GEMM (the
               * choice never changes a bit: tests force both to show it) */
} cpk_conv_geom;

/* y = (accumulate ? y : bias or 0) + conv(x, w). w (F, C, kvol). */
bool cpk_conv_forward(cpk_pool *p, cpk_isa isa, const cpk_conv_geom *g, const float *x,
                     const float *w, const float *bias, float *y, bool accumulate);
/* dx = (accumulate ? dx : 0) + conv^T(dy, w) */
bool cpk_conv_backward_data(cpk_pool *p, cpk_isa isa, const cpk_conv_geom *g, const float *dy,
                           const float *w, float *dx, bool accumulate);
/* dw_total (F*C*kvol doubles) = sum over n, positions of dy * x (not accumulated: the
 * caller adds it to its gradient with one rounding) */
bool cpk_conv_backward_weight(cpk_pool *p, cpk_isa isa, const cpk_conv_geom *g, const float *dy,
                             const float *x, double *dw_total);
/* out[c] = sum over n, p of t[n][c][p] (t is (N, Cn, P)), one double chain per channel in
 * (n, p) order; channels split across threads */
void cpk_channel_sums(cpk_pool *p, cpk_isa isa, const float *t, int64_t N, int64_t Cn, int64_t P,
                     double *out);

#endif
