/*
 * softmax / log_softmax over one dim, in double (k18.h): max-subtracted, summed in index
 * order. Backward recomputes the probabilities from x (nothing saved):
 *   softmax:     dx = y (dy - sum_j dy_j y_j)
 *   log_softmax: dx = dy - p sum_j dy_j
 */
#include "backends/ref/ref18.h"

#include <math.h>

static void row_stats(const double *x, int64_t D, int64_t inner, double *max, double *lse)
{
    double m = -INFINITY;
    for (int64_t d = 0; d < D; d++)
        m = fmax(m, x[d * inner]);
    double s = 0.0;
    for (int64_t d = 0; d < D; d++)
        s += exp(x[d * inner] - m);
    *max = m;
    *lse = log(s);
}

void k18_softmax_fwd(double *y, const double *x, int64_t outer, int64_t D, int64_t inner,
                     bool log_softmax)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xr = x + o * D * inner + i;
            double *yr = y + o * D * inner + i;
            double m, lse;
            row_stats(xr, D, inner, &m, &lse);
            for (int64_t d = 0; d < D; d++) {
                double ls = xr[d * inner] - m - lse;
                yr[d * inner] = log_softmax ? ls : exp(ls);
            }
        }
}

void k18_softmax_bwd(double *dx, const double *dy, const double *x, int64_t outer, int64_t D,
                     int64_t inner, bool log_softmax)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t base = o * D * inner + i;
            const double *xr = x + base, *gr = dy + base;
            double m, lse;
            row_stats(xr, D, inner, &m, &lse);
            double s = 0.0;
            for (int64_t d = 0; d < D; d++)
                s += log_softmax ? gr[d * inner] : gr[d * inner] * exp(xr[d * inner] - m - lse);
            for (int64_t d = 0; d < D; d++) {
                double p = exp(xr[d * inner] - m - lse);
                dx[base + d * inner] += log_softmax ? gr[d * inner] - p * s : p * (gr[d * inner] - s);
            }
        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_SOFTMAX, CK_OP_LOG_SOFTMAX

ck_status ref_softmax_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc18_softmax(REF_BE, op, io->in[0], io->out, &outer, &D, &inner, err));
    ref18_scope s;
    ref18_begin(&s, op->kind == CK_OP_LOG_SOFTMAX ? "log_softmax" : "softmax", err);
    const double *x = ref18_in(&s, io->in[0]);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_softmax_fwd(y, x, outer, D, inner, op->kind == CK_OP_LOG_SOFTMAX);
    return ref18_end(&s, true);
}

ck_status ref_softmax_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc18_softmax(REF_BE, op, io->in[0], g->dout, &outer, &D, &inner, err));
    if (!g->din[0])
        return CK_OK;
    ref18_scope s;
    ref18_begin(&s, op->kind == CK_OP_LOG_SOFTMAX ? "log_softmax backward" : "softmax backward",
                err);
    const double *x = ref18_in(&s, io->in[0]), *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]);
    if (s.st == CK_OK)
        k18_softmax_bwd(dx, dy, x, outer, D, inner, op->kind == CK_OP_LOG_SOFTMAX);
    return ref18_end(&s, true);
}
