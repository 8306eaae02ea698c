/*
 * Fast CPU nearest-neighbour upsampling (CK_OP_UPSAMPLE, nearest mode) in fp32, split
 * across threads by planes (N * C). The forward writes each output row from its source
 * row once and copies it to the rows that repeat it. The backward is the reference's
 * (backends/ref/upsample.c): per input element, the scale[0] x scale[1] x scale[2] block
 * of dy summed in double from 0 in (r0, r1, r2) order, rounded to fp32 and added to dx in
 * fp32 - the same operations in the same order, written for the block at hand instead of
 * through the general index arithmetic. Linear modes, other dtypes and refused arguments
 * go to the reference (delegate.c).
 */
#include "backends/cpu/cpu_common.h"

#include <string.h>

#define UPSAMPLE_OUT_PER_TASK 32768 /* output elements per task, at least one plane */

typedef struct {
    ck_upsample_geom g;
    const float *x, *dy;
    float *y, *dx;
    int64_t planes_per_task;
} upsample_job;

static void upsample_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const upsample_job *j = vctx;
    const ck_upsample_geom *g = &j->g;
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];
    const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t p0 = task * j->planes_per_task;
    const int64_t p1 = p0 + j->planes_per_task < g->planes ? p0 + j->planes_per_task : g->planes;
    const int64_t s2 = g->scale[2], w = g->out[2];
    for (int64_t p = p0; p < p1; p++) {
        const float *x = j->x + p * in_plane;
        float *y = j->y + p * out_plane;
        for (int64_t o0 = 0; o0 < g->out[0]; o0++)
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                float *yr = y + (o0 * g->out[1] + o1) * w;
                if (o1 % g->scale[1]) { /* the row above has the same source */
                    memcpy(yr, yr - w, (size_t)w * sizeof *yr);
                    continue;
                }
                if (o0 % g->scale[0]) { /* the plane slice above has the same source */
                    memcpy(yr, yr - g->out[1] * w, (size_t)w * sizeof *yr);
                    continue;
                }
                const float *xr = x + ((o0 / g->scale[0]) * g->in[1] + o1 / g->scale[1]) * g->in[2];
                if (s2 == 2)
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++)
                        yr[2 * i2] = yr[2 * i2 + 1] = xr[i2];
                else
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++)
                        for (int64_t r = 0; r < s2; r++)
                            yr[i2 * s2 + r] = xr[i2];
            }
    }
}

static void upsample_bwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const upsample_job *j = vctx;
    const ck_upsample_geom *g = &j->g;
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];
    const int64_t out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t p0 = task * j->planes_per_task;
    const int64_t p1 = p0 + j->planes_per_task < g->planes ? p0 + j->planes_per_task : g->planes;
    const int64_t w = g->out[2];
    const bool x2 = g->scale[0] == 1 && g->scale[1] == 2 && g->scale[2] == 2;
    for (int64_t p = p0; p < p1; p++) {
        float *dx = j->dx + p * in_plane;
        const float *dy = j->dy + p * out_plane;
        for (int64_t i0 = 0; i0 < g->in[0]; i0++)
            for (int64_t i1 = 0; i1 < g->in[1]; i1++) {
                float *dxr = dx + (i0 * g->in[1] + i1) * g->in[2];
                if (x2) { /* rows 2 i1 and 2 i1 + 1, columns 2 i2 and 2 i2 + 1 */
                    const float *a = dy + (i0 * g->out[1] + 2 * i1) * w, *b = a + w;
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                        double acc = 0.0;
                        acc += (double)a[2 * i2];
                        acc += (double)a[2 * i2 + 1];
                        acc += (double)b[2 * i2];
                        acc += (double)b[2 * i2 + 1];
                        dxr[i2] += (float)acc;
                    }
                    continue;
                }
                for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                    double acc = 0.0;
                    for (int64_t r0 = 0; r0 < g->scale[0]; r0++)
                        for (int64_t r1 = 0; r1 < g->scale[1]; r1++) {
                            const float *dyb = dy + ((i0 * g->scale[0] + r0) * g->out[1] +
                                                     i1 * g->scale[1] + r1) * w + i2 * g->scale[2];
                            for (int64_t r2 = 0; r2 < g->scale[2]; r2++)
                                acc += (double)dyb[r2];
                        }
                    dxr[i2] += (float)acc;
                }
            }
    }
}

/* the fast path's geometry, or false: the call goes to the reference */
static bool fast_geom(const ck_op_params *op, const ck_tensor *const *t, int n,
                      const ck_tensor *x, const ck_tensor *y, upsample_job *j)
{
    if (op->kind != CK_OP_UPSAMPLE || ck_upsample_is_linear(op))
        return false;
    for (int i = 0; i < n; i++)
        if (!t[i] || t[i]->dtype != CK_F32)
            return false;
    ck_error ignored = {{0}};
    if (ck_opc_upsample_setup(op, x, y, &j->g, &ignored) != CK_OK || j->g.planes <= 0)
        return false;
    const int64_t out_plane = j->g.out[0] * j->g.out[1] * j->g.out[2];
    const int64_t k = UPSAMPLE_OUT_PER_TASK / (out_plane > 0 ? out_plane : 1);
    j->planes_per_task = k < 1 ? 1 : k;
    return true;
}

ck_status cpu_upsample_forward(const cpu_ctx *c, const ck_op_params *op,
                               const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    const ck_tensor *all[] = {io->in[0], io->out};
    upsample_job j = {.x = NULL};
    if (io->n_in != 1 || !fast_geom(op, all, 2, io->in[0], io->out, &j))
        return cpu_delegate_forward(c, op, args, io, err);
    j.x = io->in[0]->data;
    j.y = io->out->data;
    cpk_parallel(c->pool, (j.g.planes + j.planes_per_task - 1) / j.planes_per_task,
                 upsample_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_upsample_backward(const cpu_ctx *c, const ck_op_params *op,
                                const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                ck_error *err)
{
    const ck_tensor *all[] = {io->in[0], g->dout, g->din[0]};
    upsample_job j = {.x = NULL};
    if (io->n_in != 1 || !fast_geom(op, all, 3, io->in[0], g->dout, &j))
        return cpu_delegate_backward(c, op, args, io, g, err);
    j.dy = g->dout->data;
    j.dx = g->din[0]->data;
    cpk_parallel(c->pool, (j.g.planes + j.planes_per_task - 1) / j.planes_per_task,
                 upsample_bwd_task, &j);
    return CK_OK;
}
