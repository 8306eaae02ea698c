/*
 * Host-side checks and geometry of the attention family (check.h): softmax,
 * log_softmax, attention.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

/* ---------------------------------------------------------------------------- softmax */

ck_status ck_opc_softmax(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, int64_t *outer, int64_t *D, int64_t *inner,
                           ck_error *err)
{
    const char *fn = op->kind == CK_OP_LOG_SOFTMAX ? "log_softmax" : "softmax";
    CK_TRY(ck_opc_need(fn, x, "input", err));
    CK_TRY(ck_opc_need(fn, y, "output", err));
    const ck_tensor *ts[] = {y};
    CK_TRY(ck_opc_pointwise(be, fn, x, ts, 1, err));
    if (op->dim < 0 || op->dim >= x->shape.ndim)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: dim %d is outside input '%s' of rank %d", fn,
                       op->dim, ck_opc_tname(x), x->shape.ndim);
    *outer = ck_opc_prod(&x->shape, 0, op->dim);
    *D = x->shape.dim[op->dim];
    *inner = ck_opc_prod(&x->shape, op->dim + 1, x->shape.ndim);
    return CK_OK;
}

/* -------------------------------------------------------------------------- attention */

ck_status ck_opc_attention(const char *be, const ck_op_params *op, const ck_tensor *q,
                             const ck_tensor *k, const ck_tensor *v, const ck_tensor *y,
                             ck_attn_geom *g, ck_error *err)
{
    CK_TRY(ck_opc_need("attention", q, "query", err));
    CK_TRY(ck_opc_need("attention", k, "key", err));
    CK_TRY(ck_opc_need("attention", v, "value", err));
    CK_TRY(ck_opc_need("attention", y, "output", err));
    const ck_tensor *all[] = {q, k, v, y};
    CK_TRY(ck_opc_float_dtypes(be, "attention", all, 4, err));
    char s1[96], s2[96], s3[96], s4[96];
    const int64_t H = op->heads;
    bool ok = q->shape.ndim == 3 && k->shape.ndim == 3 && v->shape.ndim == 3 &&
              y->shape.ndim == 3 && H >= 1;
    if (ok) {
        g->N = q->shape.dim[0];
        g->Lq = q->shape.dim[1];
        g->Lk = k->shape.dim[1];
        g->H = H;
        ok = q->shape.dim[2] % H == 0 && v->shape.dim[2] % H == 0 &&
             k->shape.dim[0] == g->N && v->shape.dim[0] == g->N && y->shape.dim[0] == g->N &&
             k->shape.dim[2] == q->shape.dim[2] && v->shape.dim[1] == g->Lk &&
             y->shape.dim[1] == g->Lq && y->shape.dim[2] == v->shape.dim[2];
        g->Dk = q->shape.dim[2] / H;
        g->Dv = v->shape.dim[2] / H;
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "attention: shapes do not fit %lld heads: q '%s' %s, k '%s' %s, v '%s' %s, "
                       "y '%s' %s",
                       (long long)H, ck_opc_tname(q), SH(q, s1), ck_opc_tname(k), SH(k, s2),
                       ck_opc_tname(v), SH(v, s3), ck_opc_tname(y), SH(y, s4));
    g->scale = op->attn_scale > 0.0 ? op->attn_scale : 1.0 / sqrt((double)g->Dk);
    g->causal = op->causal;
    g->rate = op->rate;
    g->rng = NULL;
    return CK_OK;
}

