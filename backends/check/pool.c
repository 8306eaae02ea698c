/*
 * Host-side checks and geometry of the pool family (check.h): max and average
 * pooling, unpadded and padded.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)


const char *ck_opc_pool_name(const ck_op_params *op)
{
    return op->kind == CK_OP_MAXPOOL ? "maxpool" : "avgpool";
}

ck_status ck_opc_pool_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                            bool *is_max, ck_pool_geom *g, ck_error *err)
{
    if (op->kind != CK_OP_MAXPOOL && op->kind != CK_OP_AVGPOOL)
        return ck_fail(err, CK_ERR_INTERNAL, "pool: op kind %s is not a pooling op",
                       ck_op_kind_name(op->kind));
    *is_max = op->kind == CK_OP_MAXPOOL;
    const char *what = ck_opc_pool_name(op);
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %d spatial dims (1 to 3 supported)", what,
                       nsp);
    char sx[96], sy[96];
    bool ok = ck_opc_same_nc(nsp, x, y);
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->kernel[a] = s < 0 ? 1 : op->kernel[s];
        g->stride[a] = s < 0 ? 1 : op->stride[s];
        ok = g->kernel[a] >= 1 && g->stride[a] >= 1 && g->out[a] >= 1 &&
             (g->out[a] - 1) * g->stride[a] + g->kernel[a] <= g->in[a];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "%s%dd: output '%s' %s does not fit input '%s' %s with its windows",
                       what, nsp, ck_opc_tname(y), ck_shape_str(&y->shape, sy, sizeof sy),
                       ck_opc_tname(x), ck_shape_str(&x->shape, sx, sizeof sx));
    return CK_OK;
}

/* ------------------------------------------------------------------------ padded pools */

ck_status ck_opc_pool_pad(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, ck_pool_pad_geom *g, ck_error *err)
{
    const char *fn = op->kind == CK_OP_MAXPOOL ? "maxpool" : "avgpool";
    CK_TRY(ck_opc_need(fn, x, "input", err));
    CK_TRY(ck_opc_need(fn, y, "output (or its gradient)", err));
    const ck_tensor *all[] = {x, y};
    CK_TRY(ck_opc_float_dtypes(be, fn, all, 2, err));
    const int nsp = op->nsp;
    char s1[96], s2[96];
    bool ok = nsp >= 1 && nsp <= 3 && x->shape.ndim == 2 + nsp && y->shape.ndim == 2 + nsp &&
              x->shape.dim[0] == y->shape.dim[0] && x->shape.dim[1] == y->shape.dim[1];
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    g->is_max = op->kind == CK_OP_MAXPOOL;
    g->count_include_pad = op->count_include_pad;
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp);
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->k[a] = s < 0 ? 1 : op->kernel[s];
        g->stride[a] = s < 0 ? 1 : op->stride[s];
        g->pad[a] = s < 0 ? 0 : op->pad_lo[s];
        ok = g->k[a] >= 1 && g->stride[a] >= 1 && 2 * g->pad[a] <= g->k[a] &&
             g->out[a] == (g->in[a] + 2 * g->pad[a] - g->k[a]) / g->stride[a] + 1;
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "%s%dd: output '%s' %s does not fit input '%s' %s with its padded windows",
                       fn, nsp, ck_opc_tname(y), SH(y, s2), ck_opc_tname(x), SH(x, s1));
    return CK_OK;
}

