/*
 * Pooling with symmetric padding (PyTorch MaxPool/AvgPool{1,2,3}d, floor mode), in double
 * (k18.h). Max: padded positions are -inf (never chosen: PyTorch requires pad <= k / 2, so
 * every window holds a real element); the first maximum in the row-major scan wins, a NaN
 * wins over any number. Avg: the window sum of real elements over the divisor
 * (count_include_pad: the window clipped to the padded input; else the real elements).
 * Backward recomputes the winner from x; dx is a zeroed wide buffer in the entry points.
 */
#include "backends/ref/ref18.h"

#include <math.h>

typedef struct {
    int64_t lo[3], hi[3]; /* real input range [lo, hi) of the window */
    int64_t div;          /* avg divisor */
} window;

static window window_at(const k18_pool_geom *g, const int64_t *o)
{
    window w;
    int64_t padded = 1, real = 1;
    for (int a = 0; a < 3; a++) {
        int64_t start = o[a] * g->stride[a] - g->pad[a];
        int64_t end = start + g->k[a];
        int64_t pend = end < g->in[a] + g->pad[a] ? end : g->in[a] + g->pad[a];
        padded *= pend - start;
        w.lo[a] = start < 0 ? 0 : start;
        w.hi[a] = end < g->in[a] ? end : g->in[a];
        real *= w.hi[a] - w.lo[a];
    }
    w.div = g->count_include_pad ? padded : real;
    return w;
}

/* flat in-plane index of the window's winner (max) */
static int64_t argmax(const double *xp, const k18_pool_geom *g, const window *w)
{
    int64_t best = -1;
    double bv = -INFINITY;
    for (int64_t i0 = w->lo[0]; i0 < w->hi[0]; i0++)
        for (int64_t i1 = w->lo[1]; i1 < w->hi[1]; i1++)
            for (int64_t i2 = w->lo[2]; i2 < w->hi[2]; i2++) {
                int64_t idx = (i0 * g->in[1] + i1) * g->in[2] + i2;
                double v = xp[idx];
                if (best < 0 || (!isnan(bv) && (v > bv || isnan(v)))) {
                    bv = v;
                    best = idx;
                }
            }
    return best;
}

void k18_pool_fwd(double *y, const double *x, const k18_pool_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    int64_t o[3];
    for (int64_t p = 0; p < g->planes; p++) {
        const double *xp = x + p * ivol;
        for (o[0] = 0; o[0] < g->out[0]; o[0]++)
            for (o[1] = 0; o[1] < g->out[1]; o[1]++)
                for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
                    window w = window_at(g, o);
                    double v;
                    if (g->is_max) {
                        v = xp[argmax(xp, g, &w)];
                    } else {
                        double s = 0.0;
                        for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0++)
                            for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1++)
                                for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2++)
                                    s += xp[(i0 * g->in[1] + i1) * g->in[2] + i2];
                        v = s / (double)w.div;
                    }
                    y[p * ovol + (o[0] * g->out[1] + o[1]) * g->out[2] + o[2]] = v;
                }
    }
}

void k18_pool_bwd(double *dx, const double *dy, const double *x, const k18_pool_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    int64_t o[3];
    for (int64_t p = 0; p < g->planes; p++) {
        const double *xp = x + p * ivol;
        double *dp = dx + p * ivol;
        for (o[0] = 0; o[0] < g->out[0]; o[0]++)
            for (o[1] = 0; o[1] < g->out[1]; o[1]++)
                for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
                    window w = window_at(g, o);
                    double gv = dy[p * ovol + (o[0] * g->out[1] + o[1]) * g->out[2] + o[2]];
                    if (g->is_max) {
                        dp[argmax(xp, g, &w)] += gv;
                        continue;
                    }
                    double share = gv / (double)w.div;
                    for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0++)
                        for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1++)
                            for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2++)
                                dp[(i0 * g->in[1] + i1) * g->in[2] + i2] += share;
                }
    }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_MAXPOOL, CK_OP_AVGPOOL with padding (the dispatcher
// sends unpadded pools to pool.c, whose results are unchanged)

ck_status ref_pool_pad_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                               ck_error *err)
{
    (void)args;
    k18_pool_geom g;
    CK_TRY(ck_opc18_pool(REF_BE, op, io->in[0], io->out, &g, err));
    ref18_scope s;
    ref18_begin(&s, g.is_max ? "maxpool" : "avgpool", err);
    const double *x = ref18_in(&s, io->in[0]);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_pool_fwd(y, x, &g);
    return ref18_end(&s, true);
}

ck_status ref_pool_pad_backward(const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    k18_pool_geom geo;
    CK_TRY(ck_opc18_pool(REF_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    ref18_scope s;
    ref18_begin(&s, geo.is_max ? "maxpool backward" : "avgpool backward", err);
    const double *x = ref18_in(&s, io->in[0]), *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]);
    if (s.st == CK_OK)
        k18_pool_bwd(dx, dy, x, &geo);
    return ref18_end(&s, true);
}
