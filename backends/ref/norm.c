/*
 * CPU normalisation layers: batchnorm (per channel over N and spatial) and layernorm (per
 * sample over all non-batch dims), forward and backward.
 *
 * Statistics are two-pass (mean, then biased variance of x - mean) accumulated in double;
 * every value is computed in double and rounded once on store. Batchnorm follows PyTorch's
 * BatchNorm{1,2,3}d: training normalises with the batch statistics and, when asked,
 * updates running_mean, running_var (unbiased) and num_batches_tracked; eval normalises
 * with the running statistics and updates nothing. `saved` holds (mean, invstd) per
 * channel (batchnorm) or per sample (layernorm) for the backward pass.
 *
 * Every tensor is loaded in its own dtype. In an fp16/bf16 run x, y, dy and dx are low
 * while weight, bias, their gradients, the running buffers and `saved` stay fp32
 * (harness/precision.md): the statistics come from the low x in double, are stored once
 * in fp32, and the backward adds each double gradient to its tensor with one rounding
 * (ref_elem.h).
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <math.h>

#include "harness/core/half.h"

/* weight/bias may be absent: w = 1, b = 0 */
static inline double ld_or(const ck_tensor *t, int64_t i, double dflt)
{
    return t ? ref_ld(t, i) : dflt;
}

/* ================================ batchnorm ================================ */

/* x viewed as (N, C, S) with S the product of the spatial dims */
typedef ck_ncs_dims bn_dims;

static inline int64_t bn_index(const bn_dims *d, int64_t n, int64_t c, int64_t s)
{
    return (n * d->C + c) * d->S + s;
}

/* The canary policies.reduction_dtype "low": v rounded to x's dtype when it is fp16/bf16
 * (a running sum kept in the low dtype), else v. */
static inline double low_sum(const ck_tensor *x, bool low, double v)
{
    return low && (x->dtype == CK_F16 || x->dtype == CK_BF16) ? ck_round_to_dtype(v, x->dtype) : v;
}

/* Batch statistics of channel c: mean and biased variance over N and S; `low`: the sums are
 * kept in x's low dtype (the reduction canary), else in double. */
static void bn_channel_stats(const ck_tensor *x, const bn_dims *d, int64_t c, bool low,
                             double *mean, double *var)
{
    double cnt = (double)(d->N * d->S);
    double sum = 0.0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t s = 0; s < d->S; s++)
            sum = low_sum(x, low, sum + ref_ld(x, bn_index(d, n, c, s)));
    double m = sum / cnt;
    double sq = 0.0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t s = 0; s < d->S; s++) {
            double dx = ref_ld(x, bn_index(d, n, c, s)) - m;
            sq = low_sum(x, low, sq + dx * dx);
        }
    *mean = m;
    *var = sq / cnt;
}

/* out = (x - mean) * invstd * w + b; x, out (N, C, S); weight, bias (C) or NULL;
 * saved (2, C) or NULL: row 0 mean, row 1 invstd. Training uses batch statistics and
 * updates the running buffers when `update`; eval uses the running buffers. */
static void batchnorm_forward(ck_tensor *out, ck_tensor *saved, ck_tensor *running_mean,
                              ck_tensor *running_var, ck_tensor *num_batches_tracked,
                              const ck_tensor *x, const ck_tensor *weight, const ck_tensor *bias,
                              const bn_dims *d, double eps, double momentum, bool eval,
                              bool update, bool low)
{
    int64_t cnt = d->N * d->S;
    for (int64_t c = 0; c < d->C; c++) {
        double mean, invstd;
        if (eval) {
            mean = ref_ld(running_mean, c);
            invstd = 1.0 / sqrt(ref_ld(running_var, c) + eps);
        } else {
            double var;
            bn_channel_stats(x, d, c, low, &mean, &var);
            invstd = 1.0 / sqrt(var + eps);
            if (update) {
                double unbiased = var * (double)cnt / (double)(cnt - 1);
                if (running_mean)
                    ref_st(running_mean, c,
                           (1.0 - momentum) * ref_ld(running_mean, c) + momentum * mean);
                if (running_var)
                    ref_st(running_var, c,
                           (1.0 - momentum) * ref_ld(running_var, c) + momentum * unbiased);
            }
        }
        if (saved) {
            ref_st(saved, c, mean);
            ref_st(saved, d->C + c, invstd);
        }
        double w = ld_or(weight, c, 1.0), b = ld_or(bias, c, 0.0);
        for (int64_t n = 0; n < d->N; n++)
            for (int64_t s = 0; s < d->S; s++) {
                int64_t i = bn_index(d, n, c, s);
                ref_st(out, i, (ref_ld(x, i) - mean) * invstd * w + b);
            }
    }
    if (!eval && update && num_batches_tracked)
        ((int64_t *)num_batches_tracked->data)[0] += 1;
}

/* Accumulates dx, dweight, dbias from dout using saved (mean, invstd). Training:
 * dx = invstd w / n (n dy - sum dy - xhat sum(dy xhat)); eval (statistics are constants):
 * dx = dy w invstd. dweight += sum(dy xhat), dbias += sum(dy). */
static void batchnorm_backward(ck_tensor *dx, ck_tensor *dweight, ck_tensor *dbias,
                               const ck_tensor *dout, const ck_tensor *x, const ck_tensor *weight,
                               const ck_tensor *saved, const bn_dims *d, bool eval)
{
    double cnt = (double)(d->N * d->S);
    for (int64_t c = 0; c < d->C; c++) {
        double mean = ref_ld(saved, c), invstd = ref_ld(saved, d->C + c);
        double w = ld_or(weight, c, 1.0);
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int64_t n = 0; n < d->N; n++)
            for (int64_t s = 0; s < d->S; s++) {
                int64_t i = bn_index(d, n, c, s);
                double dy = ref_ld(dout, i);
                sum_dy += dy;
                sum_dy_xhat += dy * (ref_ld(x, i) - mean) * invstd;
            }
        if (dweight)
            ref_acc(dweight, c, sum_dy_xhat);
        if (dbias)
            ref_acc(dbias, c, sum_dy);
        if (!dx)
            continue;
        for (int64_t n = 0; n < d->N; n++)
            for (int64_t s = 0; s < d->S; s++) {
                int64_t i = bn_index(d, n, c, s);
                double dy = ref_ld(dout, i);
                if (eval) {
                    ref_acc(dx, i, dy * w * invstd);
                } else {
                    double xhat = (ref_ld(x, i) - mean) * invstd;
                    ref_acc(dx, i,
                            invstd * w / cnt * (cnt * dy - sum_dy - xhat * sum_dy_xhat));
                }
            }
    }
}

static ck_status batchnorm_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    bn_dims d;
    CK_TRY(ck_opc_batchnorm_fwd(REF_BE, op, io, &d, err));
    batchnorm_forward(io->out, io->saved, io->running_mean, io->running_var,
                      io->num_batches_tracked, io->in[0], io->weight, io->bias, &d, op->eps,
                      op->momentum, op->eval, args->update_running_stats,
                      op->low_precision_reduction);
    return CK_OK;
}

static ck_status batchnorm_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    bn_dims d;
    CK_TRY(ck_opc_batchnorm_bwd(REF_BE, op, io, g, &d, err));
    batchnorm_backward(g->din[0], g->dweight, g->dbias, g->dout, io->in[0], io->weight,
                       io->saved, &d, op->eval);
    return CK_OK;
}

/* ================================ layernorm ================================ */

/* out = (x - mean_n) * invstd_n * w + b per sample n; x, out (N, D); weight, bias (D) or
 * NULL; saved (2, N) or NULL: row 0 mean, row 1 invstd. */
static void layernorm_forward(ck_tensor *out, ck_tensor *saved, const ck_tensor *x,
                              const ck_tensor *weight, const ck_tensor *bias, int64_t N,
                              int64_t D, double eps)
{
    for (int64_t n = 0; n < N; n++) {
        const int64_t base = n * D;
        double sum = 0.0;
        for (int64_t j = 0; j < D; j++)
            sum += ref_ld(x, base + j);
        double mean = sum / (double)D;
        double sq = 0.0;
        for (int64_t j = 0; j < D; j++) {
            double dx = ref_ld(x, base + j) - mean;
            sq += dx * dx;
        }
        double invstd = 1.0 / sqrt(sq / (double)D + eps);
        if (saved) {
            ref_st(saved, n, mean);
            ref_st(saved, N + n, invstd);
        }
        for (int64_t j = 0; j < D; j++) {
            double xhat = (ref_ld(x, base + j) - mean) * invstd;
            ref_st(out, base + j, xhat * ld_or(weight, j, 1.0) + ld_or(bias, j, 0.0));
        }
    }
}

/* With g = dy * w: dx = invstd / D (D g - sum g - xhat sum(g xhat));
 * dweight += sum_n dy xhat, dbias += sum_n dy (summed over the batch in double). */
static void layernorm_backward(ck_tensor *dx, ck_tensor *dweight, ck_tensor *dbias,
                               const ck_tensor *dout, const ck_tensor *x, const ck_tensor *weight,
                               const ck_tensor *saved, int64_t N, int64_t D)
{
    if (dweight || dbias) {
        for (int64_t j = 0; j < D; j++) {
            double sum_dy = 0.0, sum_dy_xhat = 0.0;
            for (int64_t n = 0; n < N; n++) {
                double dy = ref_ld(dout, n * D + j);
                sum_dy += dy;
                sum_dy_xhat +=
                    dy * (ref_ld(x, n * D + j) - ref_ld(saved, n)) * ref_ld(saved, N + n);
            }
            if (dweight)
                ref_acc(dweight, j, sum_dy_xhat);
            if (dbias)
                ref_acc(dbias, j, sum_dy);
        }
    }
    if (!dx)
        return;
    for (int64_t n = 0; n < N; n++) {
        const int64_t base = n * D;
        double mean = ref_ld(saved, n), invstd = ref_ld(saved, N + n);
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (int64_t j = 0; j < D; j++) {
            double gj = ref_ld(dout, base + j) * ld_or(weight, j, 1.0);
            sum_g += gj;
            sum_g_xhat += gj * (ref_ld(x, base + j) - mean) * invstd;
        }
        for (int64_t j = 0; j < D; j++) {
            double xhat = (ref_ld(x, base + j) - mean) * invstd;
            double gj = ref_ld(dout, base + j) * ld_or(weight, j, 1.0);
            ref_acc(dx, base + j,
                    invstd / (double)D * ((double)D * gj - sum_g - xhat * sum_g_xhat));
        }
    }
}

static ck_status layernorm_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    int64_t N, D;
    CK_TRY(ck_opc_layernorm_fwd(REF_BE, op, io, &N, &D, err));
    layernorm_forward(io->out, io->saved, io->in[0], io->weight, io->bias, N, D, op->eps);
    return CK_OK;
}

static ck_status layernorm_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    int64_t N, D;
    CK_TRY(ck_opc_layernorm_bwd(REF_BE, op, io, g, &N, &D, err));
    layernorm_backward(g->din[0], g->dweight, g->dbias, g->dout, io->in[0], io->weight,
                       io->saved, N, D);
    return CK_OK;
}

/*
 * rmsnorm over the last D elements (wide_kernels.h): r = 1 / sqrt(mean(x^2) + eps), y = x r w.
 * With g = dy w: dx = r (g - x r^2 sum(g x) / D); dw += sum over rows of dy x r.
 * Backward recomputes r from x (in the same order as forward).
 */
#include "backends/ref/wide_scope.h"

#include <math.h>

static double row_rinv(const double *x, int64_t D, double eps)
{
    double sq = 0.0;
    for (int64_t j = 0; j < D; j++)
        sq += x[j] * x[j];
    return 1.0 / sqrt(sq / (double)D + eps);
}

void f64_rmsnorm_fwd(double *y, double *saved_rinv, const double *x, const double *w,
                     int64_t R, int64_t D, double eps)
{
    for (int64_t r = 0; r < R; r++) {
        const double *xr = x + r * D;
        double ri = row_rinv(xr, D, eps);
        if (saved_rinv)
            saved_rinv[r] = ri;
        for (int64_t j = 0; j < D; j++)
            y[r * D + j] = xr[j] * ri * (w ? w[j] : 1.0);
    }
}

void f64_rmsnorm_bwd(double *dx, double *dw, const double *dy, const double *x,
                     const double *w, int64_t R, int64_t D, double eps)
{
    if (dw)
        for (int64_t j = 0; j < D; j++) {
            double acc = 0.0;
            for (int64_t r = 0; r < R; r++)
                acc += dy[r * D + j] * x[r * D + j] * row_rinv(x + r * D, D, eps);
            dw[j] += acc;
        }
    if (!dx)
        return;
    for (int64_t r = 0; r < R; r++) {
        const double *xr = x + r * D, *gr = dy + r * D;
        double ri = row_rinv(xr, D, eps);
        double s = 0.0;
        for (int64_t j = 0; j < D; j++)
            s += gr[j] * (w ? w[j] : 1.0) * xr[j];
        for (int64_t j = 0; j < D; j++)
            dx[r * D + j] += ri * (gr[j] * (w ? w[j] : 1.0) - xr[j] * ri * ri * s / (double)D);
    }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h); weight fp32 in low-precision runs, as layernorm's

static ck_status rmsnorm_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc_norm_rows(REF_BE, "rmsnorm", op, io->in[0], io->out, io->weight, &R, &D, err));
    ref_scope s;
    ref_scope_begin(&s, "rmsnorm", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_rmsnorm_fwd(y, NULL, x, w, R, D, op->eps);
    return ref_scope_end(&s, true);
}

static ck_status rmsnorm_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc_norm_rows(REF_BE, "rmsnorm backward", op, io->in[0], g->dout, io->weight, &R, &D,
                         err));
    if (!g->din[0] && !g->dweight)
        return CK_OK;
    ref_scope s;
    ref_scope_begin(&s, "rmsnorm backward", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight),
                 *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]), *dw = ref_scope_grad(&s, g->dweight);
    if (s.st == CK_OK)
        f64_rmsnorm_bwd(dx, dw, dy, x, w, R, D, op->eps);
    return ref_scope_end(&s, true);
}

/*
 * groupnorm (wide_kernels.h): x (N, C, S) in G groups of C/G channels; statistics (two-pass mean and
 * biased variance, as layernorm) per (n, group) over (C/G) S values; per-channel affine.
 * Backward recomputes the statistics from x (the same order as forward) and, with
 * g = dy w[c]: dx = invstd / M (M g - sum g - xhat sum(g xhat)), M = (C/G) S.
 */
#include "backends/ref/wide_scope.h"

#include <math.h>

static void group_stats(const double *xg, int64_t M, double eps, double *mean, double *invstd)
{
    double s = 0.0;
    for (int64_t i = 0; i < M; i++)
        s += xg[i];
    double m = s / (double)M, sq = 0.0;
    for (int64_t i = 0; i < M; i++)
        sq += (xg[i] - m) * (xg[i] - m);
    *mean = m;
    *invstd = 1.0 / sqrt(sq / (double)M + eps);
}

void f64_groupnorm_fwd(double *y, double *saved, const double *x, const double *w,
                       const double *b, int64_t N, int64_t C, int64_t S, int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            const int64_t base = (n * C + gi * cpg) * S;
            double mean, invstd;
            group_stats(x + base, M, eps, &mean, &invstd);
            if (saved) {
                saved[n * G + gi] = mean;
                saved[N * G + n * G + gi] = invstd;
            }
            for (int64_t c = 0; c < cpg; c++) {
                const int64_t ch = gi * cpg + c;
                for (int64_t s = 0; s < S; s++) {
                    const int64_t i = base + c * S + s;
                    y[i] = (x[i] - mean) * invstd * (w ? w[ch] : 1.0) + (b ? b[ch] : 0.0);
                }
            }
        }
}

void f64_groupnorm_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
                       const double *w, int64_t N, int64_t C, int64_t S, int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    /* parameter gradients per channel, summed over n then s */
    if (dw || db)
        for (int64_t ch = 0; ch < C; ch++) {
            const int64_t gi = ch / cpg;
            double sdy = 0.0, sdyx = 0.0;
            for (int64_t n = 0; n < N; n++) {
                double mean, invstd;
                group_stats(x + (n * C + gi * cpg) * S, M, eps, &mean, &invstd);
                for (int64_t s = 0; s < S; s++) {
                    const int64_t i = (n * C + ch) * S + s;
                    sdy += dy[i];
                    sdyx += dy[i] * (x[i] - mean) * invstd;
                }
            }
            if (dw)
                dw[ch] += sdyx;
            if (db)
                db[ch] += sdy;
        }
    if (!dx)
        return;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            const int64_t base = (n * C + gi * cpg) * S;
            double mean, invstd;
            group_stats(x + base, M, eps, &mean, &invstd);
            double sg = 0.0, sgx = 0.0;
            for (int64_t c = 0; c < cpg; c++)
                for (int64_t s = 0; s < S; s++) {
                    const int64_t i = base + c * S + s;
                    double gv = dy[i] * (w ? w[gi * cpg + c] : 1.0);
                    sg += gv;
                    sgx += gv * (x[i] - mean) * invstd;
                }
            for (int64_t c = 0; c < cpg; c++)
                for (int64_t s = 0; s < S; s++) {
                    const int64_t i = base + c * S + s;
                    double gv = dy[i] * (w ? w[gi * cpg + c] : 1.0);
                    double xhat = (x[i] - mean) * invstd;
                    dx[i] += invstd / (double)M * ((double)M * gv - sg - xhat * sgx);
                }
        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h); weight, bias and saved fp32 in low-precision runs

static ck_status groupnorm_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc_groupnorm(REF_BE, op, io->in[0], io->out, io->weight, io->bias, &N, &C, &S,
                              err));
    ref_scope s;
    ref_scope_begin(&s, "groupnorm", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight),
                 *b = ref_scope_in(&s, io->bias);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_groupnorm_fwd(y, NULL, x, w, b, N, C, S, op->groups, op->eps);
    return ref_scope_end(&s, true);
}

static ck_status groupnorm_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc_groupnorm(REF_BE, op, io->in[0], g->dout, io->weight, io->bias, &N, &C, &S,
                              err));
    ref_scope s;
    ref_scope_begin(&s, "groupnorm backward", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight),
                 *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]), *dw = ref_scope_grad(&s, g->dweight),
           *db = ref_scope_grad(&s, g->dbias);
    if (s.st == CK_OK)
        f64_groupnorm_bwd(dx, dw, db, dy, x, w, N, C, S, op->groups, op->eps);
    return ref_scope_end(&s, true);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_BATCHNORM: return (ref_op_fns){batchnorm_op_forward, batchnorm_op_backward};
    case CK_OP_LAYERNORM: return (ref_op_fns){layernorm_op_forward, layernorm_op_backward};
    case CK_OP_RMSNORM: return (ref_op_fns){rmsnorm_op_forward, rmsnorm_op_backward};
    case CK_OP_GROUPNORM: return (ref_op_fns){groupnorm_op_forward, groupnorm_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(norm, pick)
