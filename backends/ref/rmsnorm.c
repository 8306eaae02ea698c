/*
 * rmsnorm over the last D elements (k18.h): r = 1 / sqrt(mean(x^2) + eps), y = x r w.
 * With g = dy w: dx = r (g - x r^2 sum(g x) / D); dw += sum over rows of dy x r.
 * Backward recomputes r from x (in the same order as forward).
 */
#include "backends/ref/ref18.h"

#include <math.h>

static double row_rinv(const double *x, int64_t D, double eps)
{
    double sq = 0.0;
    for (int64_t j = 0; j < D; j++)
        sq += x[j] * x[j];
    return 1.0 / sqrt(sq / (double)D + eps);
}

void k18_rmsnorm_fwd(double *y, double *saved_rinv, const double *x, const double *w,
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

void k18_rmsnorm_bwd(double *dx, double *dw, const double *dy, const double *x,
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

ck_status ref_rmsnorm_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc18_rows(REF_BE, "rmsnorm", op, io->in[0], io->out, io->weight, &R, &D, err));
    ref18_scope s;
    ref18_begin(&s, "rmsnorm", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_rmsnorm_fwd(y, NULL, x, w, R, D, op->eps);
    return ref18_end(&s, true);
}

ck_status ref_rmsnorm_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc18_rows(REF_BE, "rmsnorm backward", op, io->in[0], g->dout, io->weight, &R, &D,
                         err));
    if (!g->din[0] && !g->dweight)
        return CK_OK;
    ref18_scope s;
    ref18_begin(&s, "rmsnorm backward", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight),
                 *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]), *dw = ref18_grad(&s, g->dweight);
    if (s.st == CK_OK)
        k18_rmsnorm_bwd(dx, dw, dy, x, w, R, D, op->eps);
    return ref18_end(&s, true);
}
