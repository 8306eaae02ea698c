/*
 * Linear / bilinear / trilinear upsampling (PyTorch interpolate, mode linear|bilinear|
 * trilinear, integer scale_factor), in double (k18.h). Per dim, output o reads source
 * coordinate src = o (in - 1) / (out - 1) with align_corners (0 when out == 1), else
 * max((o + 0.5) in / out - 0.5, 0); i0 = floor(src), i1 = min(i0 + 1, in - 1),
 * l1 = src - i0, l0 = 1 - l1. Forward sums the 2^3 corner products (size-1 dims give a
 * single corner of weight 1). Backward scatters into dx (a zeroed wide buffer in the entry
 * points, so each dx element is rounded once).
 */
#include "backends/ref/ref18.h"

#include <math.h>

typedef struct {
    int64_t i0, i1;
    double l0, l1;
} tap;

static tap src_tap(const k18_lerp_geom *g, int a, int64_t o)
{
    tap t;
    const int64_t in = g->in[a], out = g->out[a];
    double src;
    if (g->align_corners)
        src = out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0.0;
    else {
        src = ((double)o + 0.5) * (double)in / (double)out - 0.5;
        if (src < 0.0)
            src = 0.0;
    }
    t.i0 = (int64_t)src;
    if (t.i0 > in - 1)
        t.i0 = in - 1;
    t.i1 = t.i0 + 1 < in ? t.i0 + 1 : in - 1;
    t.l1 = src - (double)t.i0;
    t.l0 = 1.0 - t.l1;
    return t;
}

void k18_upsample_linear_fwd(double *y, const double *x, const k18_lerp_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    for (int64_t p = 0; p < g->planes; p++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
            tap a = src_tap(g, 0, o0);
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                tap b = src_tap(g, 1, o1);
                for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                    tap c = src_tap(g, 2, o2);
                    const double *xp = x + p * ivol;
#define X(i, j, k) xp[((i) * g->in[1] + (j)) * g->in[2] + (k)]
                    double v = a.l0 * (b.l0 * (c.l0 * X(a.i0, b.i0, c.i0) + c.l1 * X(a.i0, b.i0, c.i1)) +
                                       b.l1 * (c.l0 * X(a.i0, b.i1, c.i0) + c.l1 * X(a.i0, b.i1, c.i1))) +
                               a.l1 * (b.l0 * (c.l0 * X(a.i1, b.i0, c.i0) + c.l1 * X(a.i1, b.i0, c.i1)) +
                                       b.l1 * (c.l0 * X(a.i1, b.i1, c.i0) + c.l1 * X(a.i1, b.i1, c.i1)));
#undef X
                    y[p * ovol + (o0 * g->out[1] + o1) * g->out[2] + o2] = v;
                }
            }
        }
}

void k18_upsample_linear_bwd(double *dx, const double *dy, const k18_lerp_geom *g)
{
    const int64_t ivol = g->in[0] * g->in[1] * g->in[2];
    const int64_t ovol = g->out[0] * g->out[1] * g->out[2];
    for (int64_t p = 0; p < g->planes; p++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
            tap a = src_tap(g, 0, o0);
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                tap b = src_tap(g, 1, o1);
                for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                    tap c = src_tap(g, 2, o2);
                    double gv = dy[p * ovol + (o0 * g->out[1] + o1) * g->out[2] + o2];
                    double *xp = dx + p * ivol;
                    const int64_t ii[2] = {a.i0, a.i1}, jj[2] = {b.i0, b.i1}, kk[2] = {c.i0, c.i1};
                    const double la[2] = {a.l0, a.l1}, lb[2] = {b.l0, b.l1}, lc[2] = {c.l0, c.l1};
                    for (int u = 0; u < 2; u++)
                        for (int v = 0; v < 2; v++)
                            for (int w = 0; w < 2; w++)
                                xp[(ii[u] * g->in[1] + jj[v]) * g->in[2] + kk[w]] +=
                                    gv * la[u] * lb[v] * lc[w];
                }
            }
        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_UPSAMPLE with mode linear/bilinear/trilinear

ck_status ref_upsample_linear_forward(const ck_op_params *op, const ck_fwd_args *args,
                                      ck_op_io *io, ck_error *err)
{
    (void)args;
    k18_lerp_geom g;
    CK_TRY(ck_opc18_lerp(REF_BE, op, io->in[0], io->out, &g, err));
    ref18_scope s;
    ref18_begin(&s, "upsample", err);
    const double *x = ref18_in(&s, io->in[0]);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_upsample_linear_fwd(y, x, &g);
    return ref18_end(&s, true);
}

ck_status ref_upsample_linear_backward(const ck_op_params *op, const ck_fwd_args *args,
                                       const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    k18_lerp_geom geo;
    CK_TRY(ck_opc18_lerp(REF_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    ref18_scope s;
    ref18_begin(&s, "upsample backward", err);
    const double *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]);
    if (s.st == CK_OK)
        k18_upsample_linear_bwd(dx, dy, &geo);
    return ref18_end(&s, true);
}
