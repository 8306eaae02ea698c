/*
 * Fast CPU scaled dot-product attention (CK_OP_ATTENTION) for fp32 q, k, v without dropout,
 * the op's entry points: values in range take the fp32 GEMM path (attention_gemm.c, not the
 * reference's bits); the others (a NaN, an Inf, a value too large for fp32 sums:
 * cpu_attention_gemm_fits) the reference's double arithmetic (backends/ref/attention.c),
 * operation for operation, split across threads by (sample, head) and vectorised only
 * across independent values, here.
 *
 * Every value sees the reference's operations in the reference's order: a score
 * s = sum_d q[d] k[j][d] is one double chain over d (multiply, then add: no fma) - four
 * keys j share a vector, never one score's terms; the row maximum, exp, the row sum and the
 * row's dot product are the reference's scalar loops (the same libm exp and fmax); an output
 * y[d] = sum_j p[j] v[j][d] is one chain over j per d, four d to a vector. Backward keeps
 * per (sample, head) the double accumulators of dk and dv, which see the query rows i in
 * increasing order as in the reference, and adds them (and each dq row, 0 + its sum) to the
 * fp32 gradients with one rounding, as the reference's wide scratch does. Only fp32 inputs
 * are widened (exactly), so the results are the reference's bits, on every ISA path and
 * thread count. Dropout (its mask is indexed by the whole batch), other dtypes, one tensor
 * given twice as a gradient and refused arguments go to the reference (delegate.c).
 */
#include "backends/cpu/attention_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

typedef struct {
    ck_attn_geom g;
    const float *q, *k, *v, *dy;
    float *y, *dq, *dk, *dv;
    bool backward, simd;
    bool *failed; /* per task: out of memory */
} attn_job;

/* the task's double copies: kt[d][j], vt[d][j] (keys along a row), kh[j][d], vh[j][d] */
typedef struct {
    double *kt, *vt, *kh, *vh, *p, *ds, *row, *gy, *dqr, *dkw, *dvw;
} attn_scratch;

static bool scratch_make(const ck_attn_geom *g, bool backward, attn_scratch *s, double **mem)
{
    const size_t Lk = (size_t)(g->Lk ? g->Lk : 1), Dk = (size_t)g->Dk, Dv = (size_t)g->Dv;
    const size_t n = 2 * Lk * Dk + 2 * Lk * Dv + 2 * Lk + 2 * Dk + Dv + (backward ? Lk * (Dk + Dv) : 0);
    double *m = malloc(n * sizeof *m);
    *mem = m;
    if (!m)
        return false;
    s->kt = m, m += Lk * Dk;
    s->kh = m, m += Lk * Dk;
    s->vt = m, m += Lk * Dv;
    s->vh = m, m += Lk * Dv;
    s->p = m, m += Lk;
    s->ds = m, m += Lk;
    s->row = m, m += Dk;
    s->gy = m, m += Dv;
    s->dqr = m, m += Dk;
    s->dkw = backward ? m : NULL;
    s->dvw = backward ? m + Lk * Dk : NULL;
    if (backward)
        memset(s->dkw, 0, Lk * (Dk + Dv) * sizeof *m);
    return true;
}

#if CPK_X86
/* the vector parts of the three helpers below; each returns how far it got */
__attribute__((target("avx2"))) static int64_t dots_by_column_avx2(const double *a,
                                                                   const double *t, int64_t ld,
                                                                   int64_t D, int64_t n,
                                                                   double *out)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256d a0 = _mm256_setzero_pd(), a1 = a0;
        for (int64_t d = 0; d < D; d++) {
            const __m256d ad = _mm256_set1_pd(a[d]);
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(ad, _mm256_loadu_pd(t + d * ld + j)));
            a1 = _mm256_add_pd(a1, _mm256_mul_pd(ad, _mm256_loadu_pd(t + d * ld + j + 4)));
        }
        _mm256_storeu_pd(out + j, a0);
        _mm256_storeu_pd(out + j + 4, a1);
    }
    for (; j + 4 <= n; j += 4) {
        __m256d acc = _mm256_setzero_pd();
        for (int64_t d = 0; d < D; d++)
            acc = _mm256_add_pd(acc, _mm256_mul_pd(_mm256_set1_pd(a[d]),
                                                   _mm256_loadu_pd(t + d * ld + j)));
        _mm256_storeu_pd(out + j, acc);
    }
    return j;
}

__attribute__((target("avx2"))) static int64_t sums_of_rows_avx2(const double *c,
                                                                 const double *r, int64_t n,
                                                                 int64_t D, double *out)
{
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) {
        __m256d a0 = _mm256_setzero_pd(), a1 = a0;
        for (int64_t j = 0; j < n; j++) {
            const __m256d cj = _mm256_set1_pd(c[j]);
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(cj, _mm256_loadu_pd(r + j * D + d)));
            a1 = _mm256_add_pd(a1, _mm256_mul_pd(cj, _mm256_loadu_pd(r + j * D + d + 4)));
        }
        _mm256_storeu_pd(out + d, a0);
        _mm256_storeu_pd(out + d + 4, a1);
    }
    return d;
}

__attribute__((target("avx2"))) static int64_t add_scaled_avx2(double *acc, double c,
                                                               const double *x, int64_t D)
{
    const __m256d cv = _mm256_set1_pd(c);
    int64_t d = 0;
    for (; d + 4 <= D; d += 4)
        _mm256_storeu_pd(acc + d, _mm256_add_pd(_mm256_loadu_pd(acc + d),
                                                _mm256_mul_pd(cv, _mm256_loadu_pd(x + d))));
    return d;
}
#endif

/* out[j] = sum_d a[d] t[d][j] for j < n (t rows of stride ld), one chain per j in d order */
static void dots_by_column(bool simd, const double *a, const double *t, int64_t ld, int64_t D,
                           int64_t n, double *out)
{
    int64_t j = 0;
#if CPK_X86
    if (simd)
        j = dots_by_column_avx2(a, t, ld, D, n, out);
#endif
    (void)simd;
    for (; j < n; j++) {
        double s = 0.0;
        for (int64_t d = 0; d < D; d++)
            s += a[d] * t[d * ld + j];
        out[j] = s;
    }
}

/* out[d] = sum_j c[j] r[j][d] for d < D (rows r of stride D), one chain per d in j order */
static void sums_of_rows(bool simd, const double *c, const double *r, int64_t n, int64_t D,
                         double *out)
{
    int64_t d = 0;
#if CPK_X86
    if (simd)
        d = sums_of_rows_avx2(c, r, n, D, out);
#endif
    (void)simd;
    for (; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++)
            acc += c[j] * r[j * D + d];
        out[d] = acc;
    }
}

/* acc[d] += c * x[d], d < D */
static void add_scaled(bool simd, double *acc, double c, const double *x, int64_t D)
{
    int64_t d = 0;
#if CPK_X86
    if (simd)
        d = add_scaled_avx2(acc, c, x, D);
#endif
    (void)simd;
    for (; d < D; d++)
        acc[d] += c * x[d];
}

/* p[0 .. jend) = softmax of the query row q (widened) against the task's keys: the
 * reference's row_probs */
static int64_t row_probs(const attn_job *j, const attn_scratch *s, const double *q, int64_t i)
{
    const ck_attn_geom *g = &j->g;
    const int64_t jend = g->causal ? (i + 1 < g->Lk ? i + 1 : g->Lk) : g->Lk;
    double *p = s->p;
    dots_by_column(j->simd, q, s->kt, g->Lk, g->Dk, jend, p);
    double m = -INFINITY;
    for (int64_t t = 0; t < jend; t++) {
        p[t] = p[t] * g->scale;
        m = fmax(m, p[t]);
    }
    double sum = 0.0;
    for (int64_t t = 0; t < jend; t++) {
        p[t] = exp(p[t] - m);
        sum += p[t];
    }
    for (int64_t t = 0; t < jend; t++)
        p[t] /= sum;
    return jend;
}

/* widened copies of head h of sample n: rows [j][d] and columns [d][j] of k and v */
static void load_head(const attn_job *j, attn_scratch *s, int64_t n, int64_t h)
{
    const ck_attn_geom *g = &j->g;
    for (int64_t t = 0; t < g->Lk; t++) {
        const float *kr = j->k + (n * g->Lk + t) * g->H * g->Dk + h * g->Dk;
        const float *vr = j->v + (n * g->Lk + t) * g->H * g->Dv + h * g->Dv;
        for (int64_t d = 0; d < g->Dk; d++)
            s->kh[t * g->Dk + d] = s->kt[d * g->Lk + t] = (double)kr[d];
        for (int64_t d = 0; d < g->Dv; d++)
            s->vh[t * g->Dv + d] = s->vt[d * g->Lk + t] = (double)vr[d];
    }
}

static void widen(double *dst, const float *src, int64_t n)
{
    for (int64_t t = 0; t < n; t++)
        dst[t] = (double)src[t];
}

/* the reference's f64_attention_bwd for one query row i (no dropout: pd = 1) */
static void backward_row(const attn_job *j, attn_scratch *s, int64_t n, int64_t h, int64_t i)
{
    const ck_attn_geom *g = &j->g;
    const double keep_scale = 1.0 / (1.0 - g->rate);
    const int64_t qoff = (n * g->Lq + i) * g->H * g->Dk + h * g->Dk;
    widen(s->row, j->q + qoff, g->Dk);
    widen(s->gy, j->dy + (n * g->Lq + i) * g->H * g->Dv + h * g->Dv, g->Dv);
    const int64_t jend = row_probs(j, s, s->row, i);
    const double *p = s->p;
    double *ds = s->ds;
    dots_by_column(j->simd, s->gy, s->vt, g->Lk, g->Dv, jend, ds); /* dpd[j] = gy . v[j] */
    double dot = 0.0;
    for (int64_t t = 0; t < jend; t++) {
        if (j->dv)
            add_scaled(j->simd, s->dvw + t * g->Dv, p[t] * keep_scale, s->gy, g->Dv);
        ds[t] = ds[t] * keep_scale;
        dot += ds[t] * p[t];
    }
    for (int64_t t = 0; t < jend; t++)
        ds[t] = p[t] * (ds[t] - dot) * g->scale;
    if (j->dq) {
        sums_of_rows(j->simd, ds, s->kh, jend, g->Dk, s->dqr);
        float *dst = j->dq + qoff;
        for (int64_t d = 0; d < g->Dk; d++)
            dst[d] = (float)((double)dst[d] + (0.0 + s->dqr[d]));
    }
    if (j->dk)
        for (int64_t t = 0; t < jend; t++)
            add_scaled(j->simd, s->dkw + t * g->Dk, ds[t], s->row, g->Dk);
}

/* adds the task's double accumulators to head h of sample n of t, one rounding each */
static void add_head(float *t, const double *w, const ck_attn_geom *g, int64_t n, int64_t h,
                     int64_t D)
{
    for (int64_t r = 0; r < g->Lk; r++) {
        float *dst = t + (n * g->Lk + r) * g->H * D + h * D;
        for (int64_t d = 0; d < D; d++)
            dst[d] = (float)((double)dst[d] + w[r * D + d]);
    }
}

static void attn_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const attn_job *j = vctx;
    const ck_attn_geom *g = &j->g;
    const int64_t n = task / g->H, h = task % g->H;
    attn_scratch s;
    double *mem;
    if (!scratch_make(g, j->backward, &s, &mem)) {
        j->failed[task] = true;
        return;
    }
    load_head(j, &s, n, h);
    const double keep_scale = 1.0 / (1.0 - g->rate);
    for (int64_t i = 0; i < g->Lq; i++) {
        if (j->backward) {
            backward_row(j, &s, n, h, i);
            continue;
        }
        widen(s.row, j->q + (n * g->Lq + i) * g->H * g->Dk + h * g->Dk, g->Dk);
        const int64_t jend = row_probs(j, &s, s.row, i);
        for (int64_t t = 0; t < jend; t++)
            s.p[t] = s.p[t] * keep_scale;
        sums_of_rows(j->simd, s.p, s.vh, jend, g->Dv, s.gy);
        float *yr = j->y + (n * g->Lq + i) * g->H * g->Dv + h * g->Dv;
        for (int64_t d = 0; d < g->Dv; d++)
            yr[d] = (float)s.gy[d];
    }
    if (j->backward && j->dk)
        add_head(j->dk, s.dkw, g, n, h, g->Dk);
    if (j->backward && j->dv)
        add_head(j->dv, s.dvw, g, n, h, g->Dv);
    free(mem);
}

static bool is_f32(const ck_tensor *t)
{
    return t && t->dtype == CK_F32;
}

/* the fast path's geometry for q, k, v and y (or dy), or false */
static bool fast_geom(const ck_op_params *op, const ck_op_io *io, const ck_tensor *y,
                      ck_attn_geom *g)
{
    if (io->n_in != 3 || op->rate > 0.0 || !is_f32(io->in[0]) || !is_f32(io->in[1]) ||
        !is_f32(io->in[2]) || !is_f32(y))
        return false;
    ck_error ignored = {{0}};
    return ck_opc_attention(CPU_BE, op, io->in[0], io->in[1], io->in[2], y, g, &ignored) ==
               CK_OK &&
           g->rate <= 0.0 && g->N > 0 && g->H > 0;
}

static ck_status run_attn(const cpu_ctx *c, attn_job *j, const char *what, ck_error *err)
{
    const int64_t tasks = j->g.N * j->g.H;
    j->simd = CPK_X86 && c->isa != CPK_ISA_PORTABLE;
    j->failed = calloc((size_t)tasks, sizeof *j->failed);
    if (!j->failed)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", what);
    cpk_parallel(c->pool, tasks, attn_task, j);
    bool failed = false;
    for (int64_t t = 0; t < tasks; t++)
        failed |= j->failed[t];
    free(j->failed);
    if (failed)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory for a head's scores", what);
    return CK_OK;
}

ck_status cpu_attention_forward(const cpu_ctx *c, const ck_op_params *op,
                                const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    attn_job j = {.backward = false};
    if (op->kind != CK_OP_ATTENTION || !fast_geom(op, io, io->out, &j.g))
        return cpu_delegate_forward(c, op, args, io, err);
    j.q = io->in[0]->data, j.k = io->in[1]->data, j.v = io->in[2]->data;
    j.y = io->out->data;
    if (cpu_attention_gemm_fits(c, &j.g, j.q, j.k, j.v, NULL))
        return cpu_attention_gemm(c, &j.g, j.q, j.k, j.v, j.y, NULL, NULL, NULL, NULL,
                                  "attention", err);
    return run_attn(c, &j, "attention", err);
}

ck_status cpu_attention_backward(const cpu_ctx *c, const ck_op_params *op,
                                 const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                 ck_error *err)
{
    attn_job j = {.backward = true};
    ck_tensor *const *d = g->din;
    const bool distinct = (!d[0] || (d[0] != d[1] && d[0] != d[2])) && (!d[1] || d[1] != d[2]);
    if (op->kind != CK_OP_ATTENTION || !distinct || !fast_geom(op, io, g->dout, &j.g))
        return cpu_delegate_backward(c, op, args, io, g, err);
    for (int i = 0; i < 3; i++)
        if (d[i] && (!is_f32(d[i]) || !ck_shape_equal(&d[i]->shape, &io->in[i]->shape)))
            return cpu_delegate_backward(c, op, args, io, g, err);
    if (!d[0] && !d[1] && !d[2])
        return CK_OK;
    j.q = io->in[0]->data, j.k = io->in[1]->data, j.v = io->in[2]->data;
    j.dy = g->dout->data;
    j.dq = d[0] ? d[0]->data : NULL;
    j.dk = d[1] ? d[1]->data : NULL;
    j.dv = d[2] ? d[2]->data : NULL;
    if (cpu_attention_gemm_fits(c, &j.g, j.q, j.k, j.v, j.dy))
        return cpu_attention_gemm(c, &j.g, j.q, j.k, j.v, NULL, j.dy, j.dq, j.dk, j.dv,
                                  "attention backward", err);
    return run_attn(c, &j, "attention backward", err);
}
