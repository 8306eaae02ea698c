/*
 * Fast CPU convolution (CK_OP_CONV): conv1d/2d/3d as PyTorch computes it (cross-
 * correlation, groups 1), every call brought to three spatial dims (conv_kernels.c).
 *
 *   forward   y  = b + conv(x, W)       one fp32 fma chain per output over (c, k), from b
 *   backward  dx += conv^T(dy, W)       one fp32 fma chain per input element over (f, k');
 *                                       fp32 continues from the stored dx, fp16/bf16 adds
 *                                       the contribution with one rounding
 *             dW += sum dy * x          fp32 lanes per plane, double across planes, one
 *                                       rounding into dW
 *             db += sum dy              one double chain per channel, one rounding
 * Small channel counts run the direct kernel, large ones an implicit GEMM; both evaluate
 * the same chains, so the choice (by shape) changes no bit. fp64 calls (gradient checks)
 * run the reference kernels (backends/ref/).
 */
#include "backends/cpu/cpu_common.h"

#include <stdlib.h>
#include <string.h>


/* fills g from x (N, C, s...), W (F, C, k...), y (N, F, o...): the shared geometry
 * (ck_opc_conv_geom3) in the kernels' struct */
static ck_status conv_geom(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                           const ck_tensor *b, const ck_tensor *y, cpk_conv_geom *g,
                           ck_error *err)
{
    ck_conv_geom3 g3;
    CK_TRY(ck_opc_conv_geom3(op, x, w, b, y, &g3, err));
    memset(g, 0, sizeof *g);
    g->N = g3.N;
    g->C = g3.C;
    g->F = g3.F;
    for (int a = 0; a < 3; a++) {
        g->in[a] = g3.in[a];
        g->out[a] = g3.out[a];
        g->k[a] = g3.k[a];
        g->stride[a] = g3.stride[a];
        g->dil[a] = g3.dil[a];
        g->pad[a] = g3.pad_lo[a];
    }
    return CK_OK;
}

static ck_status nomem(ck_error *err, const ck_op_params *op)
{
    return ck_fail(err, CK_ERR_NOMEM, "conv%dd: no memory for convolution scratch", op->nsp);
}

ck_status cpu_conv_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    CK_TRY(ck_opc_float_dtypes(CPU_BE, "conv", all, 4, err));
    cpk_conv_geom g;
    CK_TRY(conv_geom(op, x, io->weight, b, io->out, &g, err));
    if (cpu_any_f64(all, 4))
        return ref_op_forward(op, args, io, err);
    const float *xf, *wf, *bf;
    float *ox = NULL, *ow = NULL, *ob = NULL, *y = NULL;
    ck_status st;
    if ((st = cpu_view_f32("conv", x, c, &xf, &ox, err)) != CK_OK ||
        (st = cpu_view_f32("conv", io->weight, c, &wf, &ow, err)) != CK_OK ||
        (st = cpu_view_f32("conv", b, c, &bf, &ob, err)) != CK_OK)
        goto done;
    if (io->out->dtype == CK_F32)
        y = io->out->data;
    else if ((st = cpu_scratch("conv", ck_shape_numel(&io->out->shape), false, &y, err)) !=
             CK_OK)
        goto done;
    if (!cpk_conv_forward(c->pool, c->isa, &g, xf, wf, bf, y, false)) {
        st = nomem(err, op);
        goto done;
    }
    cpu_store(c, io->out, y);
done:
    if (y && y != io->out->data)
        free(y);
    free(ox);
    free(ow);
    free(ob);
    return st;
}

ck_status cpu_conv_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    ck_tensor *db = op->bias ? g->dbias : NULL;
    const ck_tensor *all[] = {x, io->weight, g->dout, g->din[0], g->dweight, db};
    CK_TRY(ck_opc_float_dtypes(CPU_BE, "conv", all, 6, err));
    cpk_conv_geom geom;
    CK_TRY(conv_geom(op, x, io->weight, db, g->dout, &geom, err));
    if (cpu_any_f64(all, 6))
        return ref_op_backward(op, args, io, g, err);
    const float *xf = NULL, *wf = NULL, *dyf = NULL;
    float *ox = NULL, *ow = NULL, *ody = NULL, *tmp = NULL;
    double *acc = NULL;
    ck_status st = CK_OK;
    if ((st = cpu_view_f32("conv", g->dout, c, &dyf, &ody, err)) != CK_OK)
        goto done;
    if (g->din[0]) {
        ck_tensor *dx = g->din[0];
        if ((st = cpu_view_f32("conv", io->weight, c, &wf, &ow, err)) != CK_OK)
            goto done;
        const bool f32 = dx->dtype == CK_F32;
        float *out = dx->data;
        if (!f32) {
            if ((st = cpu_scratch("conv", ck_shape_numel(&dx->shape), false, &tmp, err)) !=
                CK_OK)
                goto done;
            out = tmp;
        }
        if (!cpk_conv_backward_data(c->pool, c->isa, &geom, dyf, wf, out, f32)) {
            st = nomem(err, op);
            goto done;
        }
        if (!f32)
            cpu_accumulate_f32(c, dx, tmp);
    }
    if (g->dweight) {
        if ((st = cpu_view_f32("conv", x, c, &xf, &ox, err)) != CK_OK)
            goto done;
        if (!(acc = malloc((size_t)ck_shape_numel(&g->dweight->shape) * sizeof *acc)) ||
            !cpk_conv_backward_weight(c->pool, c->isa, &geom, dyf, xf, acc)) {
            st = nomem(err, op);
            goto done;
        }
        cpu_accumulate_f64(c, g->dweight, acc);
        free(acc);
        acc = NULL;
    }
    if (db) {
        if (!(acc = malloc((size_t)geom.F * sizeof *acc))) {
            st = nomem(err, op);
            goto done;
        }
        cpk_channel_sums(c->pool, c->isa, dyf, geom.N, geom.F,
                         geom.out[0] * geom.out[1] * geom.out[2], acc);
        cpu_accumulate_f64(c, db, acc);
    }
done:
    free(acc);
    free(tmp);
    free(ox);
    free(ow);
    free(ody);
    return st;
}
