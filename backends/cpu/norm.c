/*
 * Fast CPU layernorm (CK_OP_LAYERNORM) for fp32 tensors (saved statistics fp32 or fp64):
 * the reference's double arithmetic (backends/ref/norm.c) operation for operation, split
 * across threads where no value's order changes:
 *  - forward: by rows (a row's mean, variance, saved statistics and outputs are its own);
 *  - backward: dweight and dbias by columns (each column's two sums over the rows in row
 *    order, as the reference's), then dx by rows (a row's two sums over its columns).
 * Where the machine has AVX2 the sums run four rows (forward, dx) or four columns (dweight,
 * dbias) at a time in the lanes of one register of doubles, and a row's outputs (y, dx)
 * four columns at a time (eight on AVX-512, norm_lanes.h); each lane does the reference's
 * operations on its own row, column or element in the reference's order, so every bit is
 * the same.
 * The saved statistics are read back rounded to their dtype, as the reference reads them.
 * Other dtypes and refused arguments go to the reference (delegate.c).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "backends/cpu/cpu_common.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define LN_ROWS_PER_TASK 16
#define LN_COLS_PER_TASK 64
#define NV_VECTOR_BYTES(n) __attribute__((vector_size(n))) /* a vector type of n bytes */

#if CPK_X86
#define NV_W 4
#define NV_SUF w4
#define NV_ATTR __attribute__((target("avx2")))
#include "backends/cpu/norm_lanes.h"
#undef NV_W
#undef NV_SUF
#undef NV_ATTR

#define NV_W 8
#define NV_SUF w8
#define NV_ATTR __attribute__((target("avx512f")))
#include "backends/cpu/norm_lanes.h"
#undef NV_W
#undef NV_SUF
#undef NV_ATTR
#endif

typedef struct {
    int64_t N, D;
    double eps;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    void *saved;
    bool saved_f64;
    bool avx2; /* the AVX2 paths below: four rows (or columns) in the lanes of one register,
                  each lane the portable code's operations in its order, the same bits */
    int lanes; /* a row's outputs: columns per vector (norm_lanes.h), 1 without one */
} ln_job;

static inline double saved_ld(const ln_job *j, int64_t i)
{
    return j->saved_f64 ? ((const double *)j->saved)[i] : (double)((const float *)j->saved)[i];
}

static inline void saved_st(const ln_job *j, int64_t i, double v)
{
    if (j->saved_f64)
        ((double *)j->saved)[i] = v;
    else
        ((float *)j->saved)[i] = (float)v;
}

static inline double w_or_1(const ln_job *j, int64_t c)
{
    return j->w ? (double)j->w[c] : 1.0;
}

/* row n's output from its mean and invstd (stored in saved when there is one) */
static void ln_fwd_out(const ln_job *j, int64_t n, double mean, double invstd)
{
    const float *x = j->x + n * j->D;
    float *y = j->y + n * j->D;
    if (j->saved) {
        saved_st(j, n, mean);
        saved_st(j, j->N + n, invstd);
    }
    const int64_t body = j->lanes > 1 ? j->D / j->lanes * j->lanes : 0; /* norm_lanes.h's */
#if CPK_X86
    if (j->lanes == 8)
        ln_out_w8(x, j->w, j->b, y, body, mean, invstd);
    else if (j->lanes == 4)
        ln_out_w4(x, j->w, j->b, y, body, mean, invstd);
#endif
    for (int64_t c = body; c < j->D; c++) {
        double xhat = ((double)x[c] - mean) * invstd;
        y[c] = (float)(xhat * w_or_1(j, c) + (j->b ? (double)j->b[c] : 0.0));
    }
}

static void ln_fwd_row(const ln_job *j, int64_t n)
{
    const float *x = j->x + n * j->D;
    double sum = 0.0;
    for (int64_t c = 0; c < j->D; c++)
        sum += (double)x[c];
    double mean = sum / (double)j->D;
    double sq = 0.0;
    for (int64_t c = 0; c < j->D; c++) {
        double d = (double)x[c] - mean;
        sq += d * d;
    }
    ln_fwd_out(j, n, mean, 1.0 / sqrt(sq / (double)j->D + j->eps));
}

#if CPK_X86
/* Columns c..c+3 of rows r[0..3] as four registers, one per column, lane q row q. */
__attribute__((target("avx2"))) static inline void cols4(const float *const r[4], int64_t c,
                                                         __m256d v[4])
{
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(r[0] + c));
    const __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(r[1] + c));
    const __m256d e = _mm256_cvtps_pd(_mm_loadu_ps(r[2] + c));
    const __m256d f = _mm256_cvtps_pd(_mm_loadu_ps(r[3] + c));
    const __m256d t0 = _mm256_unpacklo_pd(a, b), t1 = _mm256_unpackhi_pd(a, b);
    const __m256d t2 = _mm256_unpacklo_pd(e, f), t3 = _mm256_unpackhi_pd(e, f);
    v[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    v[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    v[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    v[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* Columns c, c+1, ... of rows r[0..3] (four, or the fewer left before column D) as one
 * register per column, lane q row q; returns how many. */
__attribute__((target("avx2"))) static inline int cols_upto4(const float *const r[4], int64_t c,
                                                             int64_t D, __m256d v[4])
{
    if (c + 4 <= D) {
        cols4(r, c, v);
        return 4;
    }
    for (int64_t k = 0; c + k < D; k++)
        v[k] = _mm256_set_pd((double)r[3][c + k], (double)r[2][c + k], (double)r[1][c + k],
                             (double)r[0][c + k]);
    return (int)(D - c);
}

/* Rows n..n+3: the two sums of ln_fwd_row with the rows in the lanes, each lane's sums over
 * the columns in order, then each row's output as ln_fwd_row writes it. */
__attribute__((target("avx2"))) static void ln_fwd_rows4_avx2(const ln_job *j, int64_t n)
{
    const float *r[4];
    for (int q = 0; q < 4; q++)
        r[q] = j->x + (n + q) * j->D;
    const int64_t D = j->D;
    __m256d v[4], sum = _mm256_setzero_pd(), sq = _mm256_setzero_pd();
    for (int64_t c = 0; c < D; c += 4) {
        const int kn = cols_upto4(r, c, D, v);
        for (int k = 0; k < kn; k++)
            sum = _mm256_add_pd(sum, v[k]);
    }
    const __m256d Dv = _mm256_set1_pd((double)D), mean = _mm256_div_pd(sum, Dv);
    for (int64_t c = 0; c < D; c += 4) {
        const int kn = cols_upto4(r, c, D, v);
        for (int k = 0; k < kn; k++) {
            const __m256d d = _mm256_sub_pd(v[k], mean);
            sq = _mm256_add_pd(sq, _mm256_mul_pd(d, d));
        }
    }
    const __m256d invstd = _mm256_div_pd(
        _mm256_set1_pd(1.0),
        _mm256_sqrt_pd(_mm256_add_pd(_mm256_div_pd(sq, Dv), _mm256_set1_pd(j->eps))));
    double m[4], is[4];
    _mm256_storeu_pd(m, mean);
    _mm256_storeu_pd(is, invstd);
    for (int q = 0; q < 4; q++)
        ln_fwd_out(j, n + q, m[q], is[q]);
}
#endif


/* dweight, dbias over the columns [c0, c1): the sums over rows n in increasing order */
#if CPK_X86
/* Columns c..c+15 of ln_params_task's sums, four columns per register (each lane one
 * column's two sums over the rows in order), into sum_dy[0..15], sum_dy_xhat[0..15]. */
__attribute__((target("avx2"))) static void ln_params16_avx2(const ln_job *j, int64_t c,
                                                              double *sum_dy,
                                                              double *sum_dy_xhat)
{
    __m256d s[4], t[4];
    for (int q = 0; q < 4; q++)
        s[q] = t[q] = _mm256_setzero_pd();
    for (int64_t n = 0; n < j->N; n++) {
        const __m256d mean = _mm256_set1_pd(saved_ld(j, n));
        const __m256d invstd = _mm256_set1_pd(saved_ld(j, j->N + n));
        const float *x = j->x + n * j->D + c, *dy = j->dy + n * j->D + c;
        for (int q = 0; q < 4; q++) {
            const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(dy + 4 * q));
            const __m256d xc = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + 4 * q)), mean);
            s[q] = _mm256_add_pd(s[q], d);
            t[q] = _mm256_add_pd(t[q], _mm256_mul_pd(_mm256_mul_pd(d, xc), invstd));
        }
    }
    for (int q = 0; q < 4; q++) {
        _mm256_storeu_pd(sum_dy + 4 * q, s[q]);
        _mm256_storeu_pd(sum_dy_xhat + 4 * q, t[q]);
    }
}
#endif

static void ln_params_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const ln_job *j = vctx;
    const int64_t c0 = task * LN_COLS_PER_TASK;
    const int64_t c1 = c0 + LN_COLS_PER_TASK < j->D ? c0 + LN_COLS_PER_TASK : j->D;
    double sum_dy[LN_COLS_PER_TASK] = {0}, sum_dy_xhat[LN_COLS_PER_TASK] = {0};
    int64_t cs = c0; /* the first column the portable loop sums */
#if CPK_X86
    if (j->avx2)
        for (; cs + 16 <= c1; cs += 16)
            ln_params16_avx2(j, cs, sum_dy + (cs - c0), sum_dy_xhat + (cs - c0));
#endif
    for (int64_t n = 0; n < j->N && cs < c1; n++) {
        const double mean = saved_ld(j, n), invstd = saved_ld(j, j->N + n);
        const float *x = j->x + n * j->D, *dy = j->dy + n * j->D;
        for (int64_t c = cs; c < c1; c++) {
            double d = (double)dy[c];
            sum_dy[c - c0] += d;
            sum_dy_xhat[c - c0] += d * ((double)x[c] - mean) * invstd;
        }
    }
    for (int64_t c = c0; c < c1; c++) {
        if (j->dw)
            j->dw[c] = (float)((double)j->dw[c] + sum_dy_xhat[c - c0]);
        if (j->db)
            j->db[c] = (float)((double)j->db[c] + sum_dy[c - c0]);
    }
}

/* row n's input gradient from its two sums over the columns */
static void ln_dx_out(const ln_job *j, int64_t n, double sum_g, double sum_g_xhat)
{
    const float *x = j->x + n * j->D, *dy = j->dy + n * j->D;
    float *dx = j->dx + n * j->D;
    const double mean = saved_ld(j, n), invstd = saved_ld(j, j->N + n), D = (double)j->D;
    const int64_t body = j->lanes > 1 ? j->D / j->lanes * j->lanes : 0; /* norm_lanes.h's */
#if CPK_X86
    if (j->lanes == 8)
        ln_dx_w8(x, dy, j->w, dx, body, mean, invstd, D, invstd / D, sum_g, sum_g_xhat);
    else if (j->lanes == 4)
        ln_dx_w4(x, dy, j->w, dx, body, mean, invstd, D, invstd / D, sum_g, sum_g_xhat);
#endif
    for (int64_t c = body; c < j->D; c++) {
        double xhat = ((double)x[c] - mean) * invstd;
        double g = (double)dy[c] * w_or_1(j, c);
        dx[c] = (float)((double)dx[c] + invstd / D * (D * g - sum_g - xhat * sum_g_xhat));
    }
}

static void ln_dx_row(const ln_job *j, int64_t n)
{
    const float *x = j->x + n * j->D, *dy = j->dy + n * j->D;
    const double mean = saved_ld(j, n), invstd = saved_ld(j, j->N + n);
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t c = 0; c < j->D; c++) {
        double g = (double)dy[c] * w_or_1(j, c);
        sum_g += g;
        sum_g_xhat += g * ((double)x[c] - mean) * invstd;
    }
    ln_dx_out(j, n, sum_g, sum_g_xhat);
}

#if CPK_X86
/* Rows n..n+3: ln_dx_row's two sums with the rows in the lanes (each lane's over the
 * columns in order), then each row's input gradient as ln_dx_row writes it. */
__attribute__((target("avx2"))) static void ln_dx_rows4_avx2(const ln_job *j, int64_t n)
{
    const float *xr[4], *dr[4];
    double m[4], is[4];
    for (int q = 0; q < 4; q++) {
        xr[q] = j->x + (n + q) * j->D;
        dr[q] = j->dy + (n + q) * j->D;
        m[q] = saved_ld(j, n + q);
        is[q] = saved_ld(j, j->N + n + q);
    }
    const __m256d mean = _mm256_loadu_pd(m), invstd = _mm256_loadu_pd(is);
    const int64_t D = j->D;
    __m256d xv[4], dv[4], sg = _mm256_setzero_pd(), sgx = _mm256_setzero_pd();
    for (int64_t c = 0; c < D; c += 4) {
        const int kn = cols_upto4(xr, c, D, xv);
        cols_upto4(dr, c, D, dv);
        for (int k = 0; k < kn; k++) {
            const __m256d g = _mm256_mul_pd(dv[k], _mm256_set1_pd(w_or_1(j, c + k)));
            sg = _mm256_add_pd(sg, g);
            sgx = _mm256_add_pd(
                sgx, _mm256_mul_pd(_mm256_mul_pd(g, _mm256_sub_pd(xv[k], mean)), invstd));
        }
    }
    double a[4], b[4];
    _mm256_storeu_pd(a, sg);
    _mm256_storeu_pd(b, sgx);
    for (int q = 0; q < 4; q++)
        ln_dx_out(j, n + q, a[q], b[q]);
}
#endif

typedef void (*ln_rows_fn)(const ln_job *j, int64_t n);

/* The rows of one task: groups of four through rows4 (the AVX2 path, NULL without one),
 * the rest one by one through row. */
static void ln_rows(const ln_job *j, int64_t task, ln_rows_fn row, ln_rows_fn rows4)
{
    const int64_t n1 = (task + 1) * LN_ROWS_PER_TASK < j->N ? (task + 1) * LN_ROWS_PER_TASK : j->N;
    int64_t n = task * LN_ROWS_PER_TASK;
    if (j->avx2 && rows4)
        for (; n + 4 <= n1; n += 4)
            rows4(j, n);
    for (; n < n1; n++)
        row(j, n);
}

#if CPK_X86
#define LN_FWD_ROWS4 ln_fwd_rows4_avx2
#define LN_DX_ROWS4 ln_dx_rows4_avx2
#else
#define LN_FWD_ROWS4 NULL
#define LN_DX_ROWS4 NULL
#endif

static void ln_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    ln_rows(vctx, task, ln_fwd_row, LN_FWD_ROWS4);
}

static void ln_dx_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    ln_rows(vctx, task, ln_dx_row, LN_DX_ROWS4);
}

static bool f32_or_null(const ck_tensor *t)
{
    return !t || t->dtype == CK_F32;
}

/* the fast path's job (false: the call goes to the reference) */
static bool ln_fast(const ck_op_params *op, const ck_op_io *io, const ck_op_grads *g,
                    ln_job *j)
{
    if (op->kind != CK_OP_LAYERNORM || io->n_in != 1 || !io->in[0] ||
        io->in[0]->dtype != CK_F32 || !f32_or_null(io->weight) || !f32_or_null(io->bias) ||
        (io->saved && io->saved->dtype != CK_F32 && io->saved->dtype != CK_F64))
        return false;
    ck_error ignored = {{0}};
    if (!g) {
        if (!io->out || io->out->dtype != CK_F32 ||
            ck_opc_layernorm_fwd(CPU_BE, op, io, &j->N, &j->D, &ignored) != CK_OK)
            return false;
    } else if (!f32_or_null(g->dout) || !f32_or_null(g->din[0]) || !f32_or_null(g->dweight) ||
               !f32_or_null(g->dbias) ||
               ck_opc_layernorm_bwd(CPU_BE, op, io, g, &j->N, &j->D, &ignored) != CK_OK) {
        return false;
    }
    j->eps = op->eps;
    j->x = io->in[0]->data;
    j->w = io->weight ? io->weight->data : NULL;
    j->b = io->bias ? io->bias->data : NULL;
    j->saved = io->saved ? io->saved->data : NULL;
    j->saved_f64 = io->saved && io->saved->dtype == CK_F64;
    return j->N > 0 && j->D > 0;
}

ck_status cpu_norm_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    ln_job j = {.N = 0};
    if (!ln_fast(op, io, NULL, &j))
        return cpu_delegate_forward(c, op, args, io, err);
    j.avx2 = c->isa != CPK_ISA_PORTABLE;
    j.lanes = cpu_f64_lanes(c->isa);
    j.y = io->out->data;
    cpk_parallel(c->pool, (j.N + LN_ROWS_PER_TASK - 1) / LN_ROWS_PER_TASK, ln_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_norm_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    ln_job j = {.N = 0};
    if (!ln_fast(op, io, g, &j))
        return cpu_delegate_backward(c, op, args, io, g, err);
    j.avx2 = c->isa != CPK_ISA_PORTABLE;
    j.lanes = cpu_f64_lanes(c->isa);
    j.dy = g->dout->data;
    j.dx = g->din[0] ? g->din[0]->data : NULL;
    j.dw = g->dweight ? g->dweight->data : NULL;
    j.db = g->dbias ? g->dbias->data : NULL;
    if (j.dw || j.db)
        cpk_parallel(c->pool, (j.D + LN_COLS_PER_TASK - 1) / LN_COLS_PER_TASK, ln_params_task,
                     &j);
    if (j.dx)
        cpk_parallel(c->pool, (j.N + LN_ROWS_PER_TASK - 1) / LN_ROWS_PER_TASK, ln_dx_task, &j);
    return CK_OK;
}
