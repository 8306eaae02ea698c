/*
 * Scaled dot-product attention with heads, optional causal mask and dropout on the
 * probabilities, in double (wide_kernels.h). Nothing is saved: backward recomputes each row's
 * probabilities from q and k and regenerates the dropout mask from the same stream, so a
 * recomputed forward and its backward see the very mask the plain run drew (under the
 * `counter` policy). Rows are processed one query position at a time; every sum runs in
 * index order.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/wide_scope.h"

#include <math.h>

static inline int64_t q_at(const ck_attn_geom *g, int64_t n, int64_t i, int64_t h, int64_t d)
{
    return (n * g->Lq + i) * g->H * g->Dk + h * g->Dk + d;
}
static inline int64_t k_at(const ck_attn_geom *g, int64_t n, int64_t j, int64_t h, int64_t d)
{
    return (n * g->Lk + j) * g->H * g->Dk + h * g->Dk + d;
}
static inline int64_t v_at(const ck_attn_geom *g, int64_t n, int64_t j, int64_t h, int64_t d)
{
    return (n * g->Lk + j) * g->H * g->Dv + h * g->Dv + d;
}
static inline int64_t y_at(const ck_attn_geom *g, int64_t n, int64_t i, int64_t h, int64_t d)
{
    return (n * g->Lq + i) * g->H * g->Dv + h * g->Dv + d;
}

bool f64_attention_keep(const ck_attn_geom *g, int64_t e)
{
    if (g->rate <= 0.0)
        return true;
    return ck_rng_u32(g->rng, (uint64_t)e) >= ck_dropout_threshold(g->rate);
}

/* visible keys of query i: j < jend */
static inline int64_t row_end(const ck_attn_geom *g, int64_t i)
{
    return g->causal ? (i + 1 < g->Lk ? i + 1 : g->Lk) : g->Lk;
}

/* p[0 .. jend) = softmax of row i of head h; returns jend */
static int64_t row_probs(const ck_attn_geom *g, const double *q, const double *k, int64_t n,
                         int64_t h, int64_t i, double *p)
{
    const int64_t jend = row_end(g, i);
    double m = -INFINITY;
    for (int64_t j = 0; j < jend; j++) {
        double s = 0.0;
        for (int64_t d = 0; d < g->Dk; d++)
            s += q[q_at(g, n, i, h, d)] * k[k_at(g, n, j, h, d)];
        p[j] = s * g->scale;
        m = fmax(m, p[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < jend; j++) {
        p[j] = exp(p[j] - m);
        sum += p[j];
    }
    for (int64_t j = 0; j < jend; j++)
        p[j] /= sum;
    return jend;
}

void f64_attention_fwd(double *y, const double *q, const double *k, const double *v,
                       const ck_attn_geom *g, double *p)
{
    const double keep_scale = 1.0 / (1.0 - g->rate);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t h = 0; h < g->H; h++)
            for (int64_t i = 0; i < g->Lq; i++) {
                const int64_t jend = row_probs(g, q, k, n, h, i, p);
                const int64_t e0 = ((n * g->H + h) * g->Lq + i) * g->Lk;
                for (int64_t j = 0; j < jend; j++)
                    p[j] = f64_attention_keep(g, e0 + j) ? p[j] * keep_scale : 0.0;
                for (int64_t d = 0; d < g->Dv; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < jend; j++)
                        acc += p[j] * v[v_at(g, n, j, h, d)];
                    y[y_at(g, n, i, h, d)] = acc;
                }
            }
}

void f64_attention_bwd(double *dq, double *dk, double *dv, const double *dy, const double *q,
                       const double *k, const double *v, const ck_attn_geom *g,
                       double *scratch)
{
    double *p = scratch, *pd = scratch + g->Lk, *ds = scratch + 2 * g->Lk;
    const double keep_scale = 1.0 / (1.0 - g->rate);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t h = 0; h < g->H; h++)
            for (int64_t i = 0; i < g->Lq; i++) {
                const int64_t jend = row_probs(g, q, k, n, h, i, p);
                const int64_t e0 = ((n * g->H + h) * g->Lq + i) * g->Lk;
                /* pd: dropout factor per key (0 or 1/(1-rate)) */
                for (int64_t j = 0; j < jend; j++)
                    pd[j] = f64_attention_keep(g, e0 + j) ? keep_scale : 0.0;
                /* dv[j] += Pd[i, j] dy[i]; dPd[i, j] = dy[i] . v[j]; dP = dPd * factor */
                double dot = 0.0;
                for (int64_t j = 0; j < jend; j++) {
                    double dpd = 0.0;
                    for (int64_t d = 0; d < g->Dv; d++) {
                        double gy = dy[y_at(g, n, i, h, d)];
                        dpd += gy * v[v_at(g, n, j, h, d)];
                        if (dv)
                            dv[v_at(g, n, j, h, d)] += p[j] * pd[j] * gy;
                    }
                    ds[j] = dpd * pd[j];
                    dot += ds[j] * p[j];
                }
                /* dS = P (dP - sum P dP), times scale for q and k */
                for (int64_t j = 0; j < jend; j++)
                    ds[j] = p[j] * (ds[j] - dot) * g->scale;
                if (dq)
                    for (int64_t d = 0; d < g->Dk; d++) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < jend; j++)
                            acc += ds[j] * k[k_at(g, n, j, h, d)];
                        dq[q_at(g, n, i, h, d)] += acc;
                    }
                if (dk)
                    for (int64_t j = 0; j < jend; j++)
                        for (int64_t d = 0; d < g->Dk; d++)
                            dk[k_at(g, n, j, h, d)] += ds[j] * q[q_at(g, n, i, h, d)];
            }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): q, k, v are inputs 0, 1, 2 (one input: q = k = v)

static const ck_tensor *attn_in(const ck_op_io *io, int i)
{
    return io->n_in >= 3 ? io->in[i] : io->in[0];
}

static ck_status attention_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    ck_attn_geom g;
    CK_TRY(ck_opc_attention(REF_BE, op, attn_in(io, 0), attn_in(io, 1), attn_in(io, 2),
                              io->out, &g, err));
    g.rng = &args->rng;
    double *p = malloc(sizeof(double) * (size_t)(g.Lk ? g.Lk : 1));
    if (!p)
        return ck_fail(err, CK_ERR_NOMEM, "attention: no memory for a row of %lld scores",
                       (long long)g.Lk);
    ref_scope s;
    ref_scope_begin(&s, "attention", err);
    const double *q = ref_scope_in(&s, attn_in(io, 0)), *k = ref_scope_in(&s, attn_in(io, 1)),
                 *v = ref_scope_in(&s, attn_in(io, 2));
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_attention_fwd(y, q, k, v, &g, p);
    free(p);
    return ref_scope_end(&s, true);
}

static ck_status attention_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    ck_attn_geom geo;
    CK_TRY(ck_opc_attention(REF_BE, op, attn_in(io, 0), attn_in(io, 1), attn_in(io, 2),
                              g->dout, &geo, err));
    geo.rng = &args->rng;
    ck_tensor *dq = g->din[0], *dk = io->n_in >= 3 ? g->din[1] : g->din[0],
              *dv = io->n_in >= 3 ? g->din[2] : g->din[0];
    if (!dq && !dk && !dv)
        return CK_OK;
    double *scratch = malloc(sizeof(double) * 3 * (size_t)(geo.Lk ? geo.Lk : 1));
    if (!scratch)
        return ck_fail(err, CK_ERR_NOMEM, "attention backward: no memory for %lld scores",
                       (long long)geo.Lk);
    ref_scope s;
    ref_scope_begin(&s, "attention backward", err);
    const double *q = ref_scope_in(&s, attn_in(io, 0)), *k = ref_scope_in(&s, attn_in(io, 1)),
                 *v = ref_scope_in(&s, attn_in(io, 2)), *dy = ref_scope_in(&s, g->dout);
    double *wdq = ref_scope_grad(&s, dq), *wdk = ref_scope_grad(&s, dk), *wdv = ref_scope_grad(&s, dv);
    if (s.st == CK_OK)
        f64_attention_bwd(wdq, wdk, wdv, dy, q, k, v, &geo, scratch);
    free(scratch);
    return ref_scope_end(&s, true);
}

/*
 * softmax / log_softmax over one dim, in double (wide_kernels.h): max-subtracted, summed in index
 * order. Backward recomputes the probabilities from x (nothing saved):
 *   softmax:     dx = y (dy - sum_j dy_j y_j)
 *   log_softmax: dx = dy - p sum_j dy_j
 */
#include "backends/ref/wide_scope.h"

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

void f64_softmax_fwd(double *y, const double *x, int64_t outer, int64_t D, int64_t inner,
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

void f64_softmax_bwd(double *dx, const double *dy, const double *x, int64_t outer, int64_t D,
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

/* x plus the additive mask io->constant (broadcast), in a new double array; x itself when
 * there is no mask. *owned: the array to free. */
static ck_status masked_input(const ck_op_io *io, const double *x, const double **xm,
                              double **owned, ck_error *err)
{
    *xm = x;
    *owned = NULL;
    if (!io->constant)
        return CK_OK;
    ck_bc_geom g;
    CK_TRY(ck_opc_bc_against(REF_BE, "softmax", io->in[0], io->constant, &g, err));
    double *v = malloc((size_t)(g.n_full > 0 ? g.n_full : 1) * sizeof *v);
    if (!v)
        return ck_fail(err, CK_ERR_NOMEM, "softmax: out of memory adding the mask");
    for (int64_t i = 0; i < g.n_full; i++)
        v[i] = x[i] + ref_ld(io->constant, ck_bc_offset(&g, 0, i));
    *xm = *owned = v;
    return CK_OK;
}

static ck_status softmax_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc_softmax(REF_BE, op, io->in[0], io->out, &outer, &D, &inner, err));
    ref_scope s;
    ref_scope_begin(&s, op->kind == CK_OP_LOG_SOFTMAX ? "log_softmax" : "softmax", err);
    const double *x = ref_scope_in(&s, io->in[0]), *xm = NULL;
    double *y = ref_scope_out(&s, io->out), *owned = NULL;
    if (s.st == CK_OK)
        s.st = masked_input(io, x, &xm, &owned, err);
    if (s.st == CK_OK)
        f64_softmax_fwd(y, xm, outer, D, inner, op->kind == CK_OP_LOG_SOFTMAX);
    free(owned);
    return ref_scope_end(&s, s.st == CK_OK);
}

static ck_status softmax_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc_softmax(REF_BE, op, io->in[0], g->dout, &outer, &D, &inner, err));
    if (!g->din[0])
        return CK_OK;
    ref_scope s;
    ref_scope_begin(&s, op->kind == CK_OP_LOG_SOFTMAX ? "log_softmax backward" : "softmax backward",
                err);
    const double *x = ref_scope_in(&s, io->in[0]), *dy = ref_scope_in(&s, g->dout), *xm = NULL;
    double *dx = ref_scope_grad(&s, g->din[0]), *owned = NULL;
    if (s.st == CK_OK)
        s.st = masked_input(io, x, &xm, &owned, err);
    if (s.st == CK_OK)
        f64_softmax_bwd(dx, dy, xm, outer, D, inner, op->kind == CK_OP_LOG_SOFTMAX);
    free(owned);
    return ref_scope_end(&s, s.st == CK_OK);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_SOFTMAX:
    case CK_OP_LOG_SOFTMAX: return (ref_op_fns){softmax_op_forward, softmax_op_backward};
    case CK_OP_ATTENTION: return (ref_op_fns){attention_op_forward, attention_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(attention, pick)
