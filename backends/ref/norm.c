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
#include "backends/ref/ref_elem.h"

#include <math.h>

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

/* Batch statistics of channel c: mean and biased variance over N and S. */
static void bn_channel_stats(const ck_tensor *x, const bn_dims *d, int64_t c, double *mean,
                             double *var)
{
    double cnt = (double)(d->N * d->S);
    double sum = 0.0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t s = 0; s < d->S; s++)
            sum += ref_ld(x, bn_index(d, n, c, s));
    double m = sum / cnt;
    double sq = 0.0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t s = 0; s < d->S; s++) {
            double dx = ref_ld(x, bn_index(d, n, c, s)) - m;
            sq += dx * dx;
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
                              bool update)
{
    int64_t cnt = d->N * d->S;
    for (int64_t c = 0; c < d->C; c++) {
        double mean, invstd;
        if (eval) {
            mean = ref_ld(running_mean, c);
            invstd = 1.0 / sqrt(ref_ld(running_var, c) + eps);
        } else {
            double var;
            bn_channel_stats(x, d, c, &mean, &var);
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

ck_status ref_batchnorm_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    bn_dims d;
    CK_TRY(ck_opc_batchnorm_fwd(REF_BE, op, io, &d, err));
    batchnorm_forward(io->out, io->saved, io->running_mean, io->running_var,
                      io->num_batches_tracked, io->in[0], io->weight, io->bias, &d, op->eps,
                      op->momentum, op->eval, args->update_running_stats);
    return CK_OK;
}

ck_status ref_batchnorm_backward(const ck_op_params *op, const ck_fwd_args *args,
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

ck_status ref_layernorm_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    int64_t N, D;
    CK_TRY(ck_opc_layernorm_fwd(REF_BE, op, io, &N, &D, err));
    layernorm_forward(io->out, io->saved, io->in[0], io->weight, io->bias, N, D, op->eps);
    return CK_OK;
}

ck_status ref_layernorm_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    int64_t N, D;
    CK_TRY(ck_opc_layernorm_bwd(REF_BE, op, io, g, &N, &D, err));
    layernorm_backward(g->din[0], g->dweight, g->dbias, g->dout, io->in[0], io->weight,
                       io->saved, N, D);
    return CK_OK;
}
