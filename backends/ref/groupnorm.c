/*
 * groupnorm (k18.h): x (N, C, S) in G groups of C/G channels; statistics (two-pass mean and
 * biased variance, as layernorm) per (n, group) over (C/G) S values; per-channel affine.
 * Backward recomputes the statistics from x (the same order as forward) and, with
 * g = dy w[c]: dx = invstd / M (M g - sum g - xhat sum(g xhat)), M = (C/G) S.
 */
#include "backends/ref/ref18.h"

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

void k18_groupnorm_fwd(double *y, double *saved, const double *x, const double *w,
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

void k18_groupnorm_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
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

ck_status ref_groupnorm_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc18_groupnorm(REF_BE, op, io->in[0], io->out, io->weight, io->bias, &N, &C, &S,
                              err));
    ref18_scope s;
    ref18_begin(&s, "groupnorm", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight),
                 *b = ref18_in(&s, io->bias);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_groupnorm_fwd(y, NULL, x, w, b, N, C, S, op->groups, op->eps);
    return ref18_end(&s, true);
}

ck_status ref_groupnorm_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc18_groupnorm(REF_BE, op, io->in[0], g->dout, io->weight, io->bias, &N, &C, &S,
                              err));
    ref18_scope s;
    ref18_begin(&s, "groupnorm backward", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight),
                 *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]), *dw = ref18_grad(&s, g->dweight),
           *db = ref18_grad(&s, g->dbias);
    if (s.st == CK_OK)
        k18_groupnorm_bwd(dx, dw, db, dy, x, w, N, C, S, op->groups, op->eps);
    return ref18_end(&s, true);
}
