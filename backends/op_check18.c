/*
 * The issue-18 ops' shared host-side checks and geometry (op_check18.h).
 */
#include "backends/op_check18.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

static ck_status need(const char *fn, const ck_tensor *t, const char *what, ck_error *err)
{
    if (!t)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: missing %s", fn, what);
    return CK_OK;
}

static int64_t prod(const ck_shape *s, int from, int to)
{
    int64_t p = 1;
    for (int d = from; d < to; d++)
        p *= s->dim[d];
    return p;
}

/* ---------------------------------------------------------------------------- matmul */

ck_status ck_opc18_matmul(const char *be, const ck_op_params *op, const ck_tensor *a,
                          const ck_tensor *b, const ck_tensor *y, k18_matmul_geom *g,
                          ck_error *err)
{
    CK_TRY(need("matmul", a, "input A", err));
    CK_TRY(need("matmul", b, "operand B (second input or weight)", err));
    CK_TRY(need("matmul", y, "output", err));
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
        g->batch = prod(A, 0, A->ndim - 2);
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

/* ---------------------------------------------------------------------------- softmax */

ck_status ck_opc18_softmax(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, int64_t *outer, int64_t *D, int64_t *inner,
                           ck_error *err)
{
    const char *fn = op->kind == CK_OP_LOG_SOFTMAX ? "log_softmax" : "softmax";
    CK_TRY(need(fn, x, "input", err));
    CK_TRY(need(fn, y, "output", err));
    const ck_tensor *ts[] = {y};
    CK_TRY(ck_opc_pointwise(be, fn, x, ts, 1, err));
    if (op->dim < 0 || op->dim >= x->shape.ndim)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: dim %d is outside input '%s' of rank %d", fn,
                       op->dim, ck_opc_tname(x), x->shape.ndim);
    *outer = prod(&x->shape, 0, op->dim);
    *D = x->shape.dim[op->dim];
    *inner = prod(&x->shape, op->dim + 1, x->shape.ndim);
    return CK_OK;
}

/* -------------------------------------------------------------------------- attention */

ck_status ck_opc18_attention(const char *be, const ck_op_params *op, const ck_tensor *q,
                             const ck_tensor *k, const ck_tensor *v, const ck_tensor *y,
                             k18_attn_geom *g, ck_error *err)
{
    CK_TRY(need("attention", q, "query", err));
    CK_TRY(need("attention", k, "key", err));
    CK_TRY(need("attention", v, "value", err));
    CK_TRY(need("attention", y, "output", err));
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

/* -------------------------------------------------------------------------- embedding */

ck_status ck_opc18_embedding(const char *be, const ck_tensor *ids, const ck_tensor *w,
                             const ck_tensor *y, int64_t *M, int64_t *V, int64_t *E,
                             ck_error *err)
{
    CK_TRY(need("embedding", ids, "token ids", err));
    CK_TRY(need("embedding", w, "weight", err));
    CK_TRY(need("embedding", y, "output", err));
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

ck_status ck_opc18_embedding_ids(const ck_tensor *t, const int32_t *ids, int64_t M, int64_t V,
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

/* ---------------------------------------------------------------------- reshape, permute */

ck_status ck_opc18_permute(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, ck_error *err)
{
    CK_TRY(need("permute", x, "input", err));
    CK_TRY(need("permute", y, "output", err));
    const ck_tensor *all[] = {x, y};
    CK_TRY(ck_opc_float_dtypes(be, "permute", all, 2, err));
    char s1[96], s2[96];
    bool ok = op->n_perm == x->shape.ndim && y->shape.ndim == x->shape.ndim;
    unsigned seen = 0;
    for (int d = 0; ok && d < op->n_perm; d++) {
        int p = op->perm[d];
        ok = p >= 0 && p < x->shape.ndim && !(seen & (1u << p)) &&
             y->shape.dim[d] == x->shape.dim[p];
        seen |= 1u << (p & 31);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "permute: output '%s' %s is not input '%s' %s permuted by the op's dims",
                       ck_opc_tname(y), SH(y, s2), ck_opc_tname(x), SH(x, s1));
    return CK_OK;
}

ck_status ck_opc18_reshape(const char *be, const ck_tensor *x, const ck_tensor *y,
                           ck_error *err)
{
    CK_TRY(need("reshape", x, "input", err));
    CK_TRY(need("reshape", y, "output", err));
    const ck_tensor *ts[] = {y};
    return ck_opc_pointwise(be, "reshape", x, ts, 1, err);
}

/* ------------------------------------------------------------------------------ norms */

ck_status ck_opc18_rows(const char *be, const char *fn, const ck_op_params *op,
                        const ck_tensor *x, const ck_tensor *y, const ck_tensor *w,
                        int64_t *R, int64_t *D, ck_error *err)
{
    CK_TRY(need(fn, x, "input", err));
    CK_TRY(need(fn, y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {y, w};
    CK_TRY(ck_opc_pointwise(be, fn, x, ts, 1, err));
    CK_TRY(ck_opc_float_dtypes(be, fn, ts + 1, 1, err));
    const int k = op->n_norm > 0 ? op->n_norm : x->shape.ndim - 1;
    char s1[96];
    if (k < 1 || k > x->shape.ndim)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %d normalised dims for input '%s' %s", fn, k,
                       ck_opc_tname(x), SH(x, s1));
    *D = prod(&x->shape, x->shape.ndim - k, x->shape.ndim);
    *R = ck_shape_numel(&x->shape) / *D;
    if (w && ck_shape_numel(&w->shape) != *D)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: weight '%s' has %lld elements, not %lld", fn,
                       ck_opc_tname(w), (long long)ck_shape_numel(&w->shape), (long long)*D);
    return CK_OK;
}

ck_status ck_opc18_groupnorm(const char *be, const ck_op_params *op, const ck_tensor *x,
                             const ck_tensor *y, const ck_tensor *w, const ck_tensor *b,
                             int64_t *N, int64_t *C, int64_t *S, ck_error *err)
{
    CK_TRY(need("groupnorm", x, "input", err));
    CK_TRY(need("groupnorm", y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {y};
    CK_TRY(ck_opc_pointwise(be, "groupnorm", x, ts, 1, err));
    const ck_tensor *p[] = {w, b};
    CK_TRY(ck_opc_float_dtypes(be, "groupnorm", p, 2, err));
    char s1[96];
    if (x->shape.ndim < 2 || op->groups < 1 || x->shape.dim[1] % op->groups != 0)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "groupnorm: input '%s' %s does not split into %lld groups of channels",
                       ck_opc_tname(x), SH(x, s1), (long long)op->groups);
    *N = x->shape.dim[0];
    *C = x->shape.dim[1];
    *S = prod(&x->shape, 2, x->shape.ndim);
    for (int i = 0; i < 2; i++)
        if (p[i] && ck_shape_numel(&p[i]->shape) != *C)
            return ck_fail(err, CK_ERR_INTERNAL, "groupnorm: '%s' has %lld elements, not %lld",
                           ck_opc_tname(p[i]), (long long)ck_shape_numel(&p[i]->shape),
                           (long long)*C);
    return CK_OK;
}

/* --------------------------------------------------------------------- conv_transpose */

ck_status ck_opc18_convt(const char *be, const ck_op_params *op, const ck_tensor *x,
                         const ck_tensor *w, const ck_tensor *b, const ck_tensor *y,
                         k18_convt_geom *g, ck_error *err)
{
    CK_TRY(need("conv_transpose", x, "input", err));
    CK_TRY(need("conv_transpose", w, "weight", err));
    CK_TRY(need("conv_transpose", y, "output (or its gradient)", err));
    const ck_tensor *all[] = {x, w, b, y};
    CK_TRY(ck_opc_float_dtypes(be, "conv_transpose", all, 4, err));
    const int nsp = op->nsp;
    char s1[96], s2[96], s3[96];
    bool ok = nsp >= 1 && nsp <= 3 && x->shape.ndim == 2 + nsp && y->shape.ndim == 2 + nsp &&
              w->shape.ndim == 2 + nsp;
    if (ok) {
        g->N = x->shape.dim[0];
        g->Ci = x->shape.dim[1];
        g->Co = w->shape.dim[1];
        ok = w->shape.dim[0] == g->Ci && y->shape.dim[0] == g->N && y->shape.dim[1] == g->Co &&
             (!b || ck_shape_numel(&b->shape) == g->Co);
        for (int a = 0; ok && a < 3; a++) {
            int s = a - (3 - nsp);
            g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
            g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
            g->k[a] = s < 0 ? 1 : w->shape.dim[2 + s];
            g->stride[a] = s < 0 ? 1 : op->stride[s];
            g->dil[a] = s < 0 ? 1 : op->dilation[s];
            g->pad[a] = s < 0 ? 0 : op->pad_lo[s];
            int64_t want = (g->in[a] - 1) * g->stride[a] - (s < 0 ? 0 : op->pad_lo[s] + op->pad_hi[s]) +
                           g->dil[a] * (g->k[a] - 1) + (s < 0 ? 0 : op->out_pad[s]) + 1;
            ok = g->out[a] == want && (s < 0 || g->k[a] == op->kernel[s]);
        }
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "conv_transpose%dd: shapes do not fit the op's geometry: x '%s' %s, weight "
                       "'%s' %s, y '%s' %s",
                       nsp, ck_opc_tname(x), SH(x, s1), ck_opc_tname(w), SH(w, s2),
                       ck_opc_tname(y), SH(y, s3));
    return CK_OK;
}

/* ------------------------------------------------------------------ linear upsampling */

ck_status ck_opc18_lerp(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, k18_lerp_geom *g, ck_error *err)
{
    CK_TRY(need("upsample", x, "input", err));
    CK_TRY(need("upsample", y, "output (or its gradient)", err));
    const ck_tensor *all[] = {x, y};
    CK_TRY(ck_opc_float_dtypes(be, "upsample", all, 2, err));
    const int nsp = op->nsp;
    char s1[96], s2[96];
    bool ok = nsp >= 1 && nsp <= 3 && x->shape.ndim == 2 + nsp && y->shape.ndim == 2 + nsp &&
              x->shape.dim[0] == y->shape.dim[0] && x->shape.dim[1] == y->shape.dim[1];
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    g->align_corners = op->align_corners;
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp);
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        ok = g->out[a] == g->in[a] * (s < 0 ? 1 : op->scale[s]);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "upsample%dd: output '%s' %s is not input '%s' %s times scale", nsp,
                       ck_opc_tname(y), SH(y, s2), ck_opc_tname(x), SH(x, s1));
    return CK_OK;
}

/* ------------------------------------------------------------------------ padded pools */

bool ck_opc18_pool_padded(const ck_op_params *op)
{
    for (int d = 0; d < op->nsp && d < CK_MAX_SPATIAL; d++)
        if (op->pad_lo[d] || op->pad_hi[d])
            return true;
    return false;
}

ck_status ck_opc18_pool(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, k18_pool_geom *g, ck_error *err)
{
    const char *fn = op->kind == CK_OP_MAXPOOL ? "maxpool" : "avgpool";
    CK_TRY(need(fn, x, "input", err));
    CK_TRY(need(fn, y, "output (or its gradient)", err));
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

/* -------------------------------------------------------------------------- positional */

ck_status ck_opc18_positional(const char *be, const ck_tensor *x, const ck_tensor *w,
                              const ck_tensor *y, int64_t *N, int64_t *M, ck_error *err)
{
    CK_TRY(need("positional", x, "input", err));
    CK_TRY(need("positional", w, "weight", err));
    CK_TRY(need("positional", y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {y};
    CK_TRY(ck_opc_pointwise(be, "positional", x, ts, 1, err));
    const ck_tensor *ws[] = {w};
    CK_TRY(ck_opc_float_dtypes(be, "positional", ws, 1, err));
    char s1[96], s2[96];
    *N = x->shape.ndim >= 2 ? x->shape.dim[0] : 0;
    *M = *N ? ck_shape_numel(&x->shape) / *N : 0;
    if (*N == 0 || ck_shape_numel(&w->shape) != *M)
        return ck_fail(err, CK_ERR_INTERNAL, "positional: weight '%s' %s does not fit input '%s' %s",
                       ck_opc_tname(w), SH(w, s1), ck_opc_tname(x), SH(x, s2));
    return CK_OK;
}

/* ----------------------------------------------------------------------- cross-entropy */

ck_status ck_opc18_ce(const char *be, const ck_loss_spec *loss, const ck_tensor *y,
                      const ck_tensor *target, int64_t *outer, int64_t *C, int64_t *inner,
                      ck_error *err)
{
    CK_TRY(need("cross_entropy", y, "logits", err));
    CK_TRY(need("cross_entropy", target, "target", err));
    const ck_tensor *ys[] = {y};
    CK_TRY(ck_opc_float_dtypes(be, "cross_entropy", ys, 1, err));
    const int cd = loss->class_dim;
    char s1[96], s2[96];
    bool ok = target->dtype == CK_I32 && cd >= 0 && cd < y->shape.ndim &&
              target->shape.ndim == y->shape.ndim - 1;
    for (int d = 0, t = 0; ok && d < y->shape.ndim; d++) {
        if (d == cd)
            continue;
        ok = target->shape.dim[t++] == y->shape.dim[d];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "cross_entropy: target '%s' %s (%s) is not logits '%s' %s without class "
                       "dim %d, in i32",
                       ck_opc_tname(target), SH(target, s1), ck_dtype_name(target->dtype),
                       ck_opc_tname(y), SH(y, s2), cd);
    *outer = prod(&y->shape, 0, cd);
    *C = y->shape.dim[cd];
    *inner = prod(&y->shape, cd + 1, y->shape.ndim);
    return CK_OK;
}

ck_status ck_opc18_ce_classes(const ck_loss_spec *loss, const ck_tensor *target,
                              const int32_t *t, int64_t n, int64_t C, ck_error *err)
{
    for (int64_t i = 0; i < n; i++) {
        if (loss->has_ignore && t[i] == loss->ignore_index)
            continue;
        if (t[i] < 0 || t[i] >= C)
            return ck_fail(err, CK_ERR_INPUT,
                           "cross_entropy: class index %d at flat position %lld of '%s' is "
                           "outside [0, %lld)%s",
                           (int)t[i], (long long)i, ck_opc_tname(target), (long long)C,
                           loss->has_ignore ? " and is not ignore_index" : "");
    }
    return CK_OK;
}
