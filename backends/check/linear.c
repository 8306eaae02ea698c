/*
 * Host-side checks of the linear family (check.h): linear, matmul, embedding.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

ck_status ck_opc_linear_shapes(const ck_tensor *x, const ck_tensor *w, const ck_tensor *b,
                               const ck_tensor *y, ck_linear_dims *d, ck_error *err)
{
    char s1[96], s2[96];
    if (!w)
        return ck_fail(err, CK_ERR_INTERNAL, "linear on '%s': no weight tensor",
                       ck_opc_tname(x));
    if (x->shape.ndim < 1 || w->shape.ndim != 2 ||
        w->shape.dim[1] != x->shape.dim[x->shape.ndim - 1])
        return ck_fail(err, CK_ERR_INTERNAL, "linear: input '%s' %s does not match weight '%s' %s",
                       ck_opc_tname(x), ck_shape_str(&x->shape, s1, sizeof s1),
                       ck_opc_tname(w), ck_shape_str(&w->shape, s2, sizeof s2));
    d->in = w->shape.dim[1];
    d->units = w->shape.dim[0];
    d->M = ck_shape_numel(&x->shape) / d->in;
    if (y->shape.ndim != x->shape.ndim || y->shape.dim[y->shape.ndim - 1] != d->units ||
        ck_shape_numel(&y->shape) != d->M * d->units)
        return ck_fail(err, CK_ERR_INTERNAL, "linear: output '%s' %s does not match input '%s' %s",
                       ck_opc_tname(y), ck_shape_str(&y->shape, s1, sizeof s1),
                       ck_opc_tname(x), ck_shape_str(&x->shape, s2, sizeof s2));
    if (b && ck_shape_numel(&b->shape) != d->units)
        return ck_fail(err, CK_ERR_INTERNAL, "linear: bias '%s' %s does not have %lld entries",
                       ck_opc_tname(b), ck_shape_str(&b->shape, s1, sizeof s1),
                       (long long)d->units);
    return CK_OK;
}

/* ---------------------------------------------------------------------------- matmul */

ck_status ck_opc_matmul(const char *be, const ck_op_params *op, const ck_tensor *a,
                          const ck_tensor *b, const ck_tensor *y, ck_matmul_geom *g,
                          ck_error *err)
{
    CK_TRY(ck_opc_need("matmul", a, "input A", err));
    CK_TRY(ck_opc_need("matmul", b, "operand B (second input or weight)", err));
    CK_TRY(ck_opc_need("matmul", y, "output", err));
    const ck_tensor *all[] = {a, b, y};
    CK_TRY(ck_opc_float_dtypes(be, "matmul", all, 3, err));
    char sa[96], sb[96], sy[96];
    const ck_shape *A = &a->shape, *B = &b->shape, *Y = &y->shape;
    bool ok = A->ndim >= 2 && B->ndim >= 2 && Y->ndim == A->ndim &&
              (B->ndim == 2 || B->ndim == A->ndim);
    if (ok) {
        g->trans_a = op->trans_a;
        g->trans_b = op->trans_b;
        g->M = A->dim[A->ndim - (op->trans_a ? 1 : 2)];
        g->K = A->dim[A->ndim - (op->trans_a ? 2 : 1)];
        int64_t kb = B->dim[B->ndim - (op->trans_b ? 1 : 2)];
        g->N = B->dim[B->ndim - (op->trans_b ? 2 : 1)];
        g->batch = ck_opc_prod(A, 0, A->ndim - 2);
        g->b_shared = B->ndim == 2 && A->ndim > 2;
        if (B->ndim == 2 && A->ndim == 2)
            g->b_shared = false;
        ok = kb == g->K && Y->dim[Y->ndim - 2] == g->M && Y->dim[Y->ndim - 1] == g->N;
        for (int d = 0; ok && d < A->ndim - 2; d++)
            ok = Y->dim[d] == A->dim[d] && (B->ndim == 2 || B->dim[d] == A->dim[d]);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "matmul: shapes do not fit: A '%s' %s, B '%s' %s, y '%s' %s "
                       "(transpose_a %d, transpose_b %d)",
                       ck_opc_tname(a), SH(a, sa), ck_opc_tname(b), SH(b, sb), ck_opc_tname(y),
                       SH(y, sy), (int)op->trans_a, (int)op->trans_b);
    return CK_OK;
}

/* -------------------------------------------------------------------------- embedding */

ck_status ck_opc_embedding(const char *be, const ck_tensor *ids, const ck_tensor *w,
                             const ck_tensor *y, int64_t *M, int64_t *V, int64_t *E,
                             ck_error *err)
{
    CK_TRY(ck_opc_need("embedding", ids, "token ids", err));
    CK_TRY(ck_opc_need("embedding", w, "weight", err));
    CK_TRY(ck_opc_need("embedding", y, "output", err));
    if (ids->dtype != CK_I32)
        return ck_fail(err, CK_ERR_INPUT,
                       "embedding: input '%s' has dtype %s; embedding reads i32 token ids "
                       "(an input with \"dist\": \"tokens\")",
                       ck_opc_tname(ids), ck_dtype_name(ids->dtype));
    const ck_tensor *fl[] = {w, y};
    CK_TRY(ck_opc_float_dtypes(be, "embedding", fl, 2, err));
    char s1[96], s2[96], s3[96];
    bool ok = w->shape.ndim == 2 && y->shape.ndim == ids->shape.ndim + 1;
    for (int d = 0; ok && d < ids->shape.ndim; d++)
        ok = y->shape.dim[d] == ids->shape.dim[d];
    if (ok)
        ok = y->shape.dim[y->shape.ndim - 1] == w->shape.dim[1];
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "embedding: shapes do not fit: ids '%s' %s, weight '%s' %s, y '%s' %s",
                       ck_opc_tname(ids), SH(ids, s1), ck_opc_tname(w), SH(w, s2),
                       ck_opc_tname(y), SH(y, s3));
    *M = ck_shape_numel(&ids->shape);
    *V = w->shape.dim[0];
    *E = w->shape.dim[1];
    return CK_OK;
}

ck_status ck_opc_embedding_ids(const ck_tensor *t, const int32_t *ids, int64_t M, int64_t V,
                                 ck_error *err)
{
    for (int64_t m = 0; m < M; m++)
        if (ids[m] < 0 || ids[m] >= V) {
            int64_t idx[CK_MAX_DIMS];
            char pos[128];
            size_t off = 0;
            ck_shape_unflatten(&t->shape, m, idx);
            for (int d = 0; d < t->shape.ndim && off < sizeof pos; d++)
                off += (size_t)snprintf(pos + off, sizeof pos - off, "%s%lld", d ? ", " : "",
                                        (long long)idx[d]);
            return ck_fail(err, CK_ERR_INPUT,
                           "embedding: token id %d at [%s] of '%s' is outside the vocabulary "
                           "[0, %lld)",
                           (int)ids[m], pos, ck_opc_tname(t), (long long)V);
        }
    return CK_OK;
}

