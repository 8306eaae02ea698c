/*
 * The causal multi-head attention pattern, matched value by value as the graph walk reaches
 * each node (the pending values live in the importer's state).
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Causal multi-head attention as GPT code writes it out, matched value by value:
 *   q, k, v: Reshape(layer, [B, L, H, d]) → Transpose(0,2,1,3)   (k: (0,2,3,1), or a
 *   further Transpose(0,1,3,2) of (0,2,1,3));
 *   MatMul(q, kᵀ) → [Div or Mul by a scalar] → [Add of a constant causal mask of 0 on and
 *   below the diagonal and −inf above] → Softmax(last axis) → [Dropout] → MatMul(·, v) →
 *   Transpose(0,2,1,3) → Reshape([B, L, H·d])
 * becomes one `attention` layer (q, k, v, heads H, scale, causal, dropout). Each value in
 * between must be read by the next node only; anything else reading one is named. */

struct pend *imp_pend_of(const imp *im, const char *value)
{
    for (int i = 0; i < im->n_pend; i++)
        if (strcmp(im->pend[i].value, value) == 0)
            return &im->pend[i];
    return NULL;
}

/* Records out_value as the next stage of `from` (copied). */
static ck_status pend_next(imp *im, const struct pend *from, const char *out_value, int kind)
{
    if (imp_readers(im, out_value) != 1)
        return imp_fail_node(im,
                             "its output `%s` (inside an attention pattern) is read by %d nodes; "
                             "only the pattern's next node may read it",
                             out_value, imp_readers(im, out_value));
    struct pend cp = *from; /* from may point into im->pend, which moves */
    cp.kind = kind;
    struct pend *p = realloc(im->pend, (size_t)(im->n_pend + 1) * sizeof *p);
    if (!p)
        return imp_oom(im);
    im->pend = p;
    if (!(cp.value = strdup(out_value)))
        return imp_oom(im);
    im->pend[im->n_pend++] = cp;
    return CK_OK;
}

static bool perm_is(const ck_onnx_node *n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const ck_onnx_attr *p = ck_onnx_attr_find(n, "perm");
    return p && p->n_ints == 4 && p->ints[0] == a && p->ints[1] == b && p->ints[2] == c &&
           p->ints[3] == d;
}

/* Reshape(layer, [B, L, H, d]) read only by a head-splitting Transpose: starts a pattern. */
ck_status imp_attn_reshape_in(imp *im, const ck_onnx_node *n, const ck_onnx_tensor *s,
                              bool *matched)
{
    *matched = false;
    const char *src = imp_layer_of(im, n->in[0]);
    if (!src || s->numel != 4 || imp_is_float_type(s->data_type))
        return CK_OK;
    for (int k = 0; k < 4; k++)
        if (!(imp_elem_f64(s, k) >= 1.0 && imp_elem_f64(s, k) <= (double)CK_SIZE_CAP))
            return CK_OK;
    int t = imp_sole_reader(im, n->out[0]);
    if (t < 0 || strcmp(im->m->nodes[t].op_type, "Transpose") != 0 ||
        !(perm_is(&im->m->nodes[t], 0, 2, 1, 3) || perm_is(&im->m->nodes[t], 0, 2, 3, 1)))
        return CK_OK;
    struct pend p;
    memset(&p, 0, sizeof p);
    snprintf(p.q, sizeof p.q, "%s", src);
    p.b = (int64_t)imp_elem_f64(s, 0);
    p.l = (int64_t)imp_elem_f64(s, 1);
    p.heads = (int64_t)imp_elem_f64(s, 2);
    p.d = (int64_t)imp_elem_f64(s, 3);
    p.scale = 1.0;
    p.softmax_node = -1;
    *matched = true;
    return pend_next(im, &p, n->out[0], P_SPLIT);
}

static ck_status attn_broken(imp *im, const char *value)
{
    return imp_fail_node(im,
                         "reads `%s`, a value inside a causal attention pattern (docs/onnx.md), "
                         "in a way the pattern does not allow",
                         value);
}

/* A node reading a pattern value: the next stage, or the finished attention layer. */
ck_status imp_attn_step(imp *im, int idx, const ck_onnx_node *n, struct pend *in0, struct pend *in1)
{
    const char *op = n->op_type;
    if (strcmp(op, "Transpose") == 0 && in0) {
        if (in0->kind == P_SPLIT && perm_is(n, 0, 2, 1, 3))
            return pend_next(im, in0, n->out[0], P_HEADS);
        if (in0->kind == P_SPLIT && perm_is(n, 0, 2, 3, 1))
            return pend_next(im, in0, n->out[0], P_HEADS_T);
        if (in0->kind == P_HEADS && perm_is(n, 0, 1, 3, 2))
            return pend_next(im, in0, n->out[0], P_HEADS_T);
        if (in0->kind == P_CTX && perm_is(n, 0, 2, 1, 3))
            return pend_next(im, in0, n->out[0], P_CTX_T);
        return attn_broken(im, n->in[0]);
    }
    if (strcmp(op, "MatMul") == 0 && in0 && in1 && n->n_in == 2) {
        bool same = in0->b == in1->b && in0->l == in1->l && in0->heads == in1->heads &&
                    in0->d == in1->d;
        if (same && in0->kind == P_HEADS && in1->kind == P_HEADS_T) {
            struct pend p = *in0;
            snprintf(p.k, sizeof p.k, "%s", in1->q);
            return pend_next(im, &p, n->out[0], P_SCORES);
        }
        if (same && in0->kind == P_PROBS && in1->kind == P_HEADS) {
            struct pend p = *in0;
            snprintf(p.v, sizeof p.v, "%s", in1->q);
            return pend_next(im, &p, n->out[0], P_CTX);
        }
        return attn_broken(im, n->in[in0->kind == P_HEADS || in0->kind == P_PROBS ? 1 : 0]);
    }
    struct pend *p = in0 ? in0 : in1;
    const char *other = n->n_in == 2 ? n->in[in0 ? 1 : 0] : NULL;
    if ((strcmp(op, "Div") == 0 || strcmp(op, "Mul") == 0) && p->kind == P_SCORES &&
        !p->scaled && !p->masked && other && n->n_in == 2 && (in0 || op[0] == 'M')) {
        const ck_onnx_tensor *c = imp_const_of(im, other);
        double v = c && c->numel == 1 && imp_is_float_type(c->data_type) ? imp_elem_f64(c, 0) : 0.0;
        if (!(v > 0.0) || !isfinite(v))
            return imp_fail_node(im,
                                 "scales attention scores by `%s`, which is not a positive "
                                 "constant scalar",
                                 other);
        struct pend q = *p;
        q.scale = op[0] == 'D' ? 1.0 / v : v;
        q.scaled = true;
        return pend_next(im, &q, n->out[0], P_SCORES);
    }
    if (strcmp(op, "Add") == 0 && p->kind == P_SCORES && !p->masked && other && n->n_in == 2) {
        const ck_onnx_tensor *c = imp_const_of(im, other);
        bool causal = c && imp_is_float_type(c->data_type) && c->ndim >= 2 &&
                      c->dims[c->ndim - 1] == p->l && c->dims[c->ndim - 2] == p->l &&
                      c->numel / p->l == p->l && c->numel % p->l == 0;
        for (int64_t i = 0; causal && i < p->l; i++)
            for (int64_t j = 0; causal && j < p->l; j++) {
                double v = imp_elem_f64(c, i * p->l + j);
                causal = j > i ? (isinf(v) && v < 0) : v == 0.0;
            }
        if (!causal)
            return imp_fail_node(im,
                                 "adds `%s` to attention scores: only a constant causal mask "
                                 "(%lld x %lld, 0 on and below the diagonal, -inf above) is "
                                 "supported",
                                 other, (long long)p->l, (long long)p->l);
        struct pend q = *p;
        q.masked = q.causal = true;
        return pend_next(im, &q, n->out[0], P_SCORES);
    }
    if (strcmp(op, "Softmax") == 0 && p->kind == P_SCORES && in0) {
        int64_t axis = imp_attr_int(n, "axis", -1);
        if ((axis != -1 && axis != 3) || im->m->opset < 13)
            return imp_fail_node(im,
                                 "a softmax of attention scores must be over the keys (axis -1, "
                                 "opset >= 13)");
        struct pend q = *p;
        q.softmax_node = idx;
        return pend_next(im, &q, n->out[0], P_PROBS);
    }
    if (strcmp(op, "Dropout") == 0 && p->kind == P_PROBS && in0 && !p->dropped) {
        double rate;
        bool training;
        CK_TRY(imp_dropout_params(im, n, &rate, &training));
        struct pend q = *p;
        q.dropped = true;
        q.dropout = training ? rate : 0.0;
        return pend_next(im, &q, n->out[0], P_PROBS);
    }
    if (strcmp(op, "Reshape") == 0 && p->kind == P_CTX_T && in0) {
        const ck_onnx_tensor *s = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
        if (!s || s->numel != 3 || imp_elem_f64(s, 0) != (double)p->b ||
            imp_elem_f64(s, 1) != (double)p->l ||
            imp_elem_f64(s, 2) != (double)p->heads * (double)p->d)
            return imp_fail_node(im, "merging attention heads must reshape to [%lld, %lld, %lld]",
                                 (long long)p->b, (long long)p->l,
                                 (long long)p->heads * (long long)p->d);
        char name[CK_NAME_MAX + 1];
        CK_TRY(imp_scoped_name(im, &im->m->nodes[p->softmax_node], "attention", name));
        cJSON *L = imp_new_layer(im, name, "attention");
        cJSON *ins = cJSON_CreateArray();
        if (!L || !ins || !cJSON_AddItemToObject(L, "inputs", ins)) {
            cJSON_Delete(ins);
            return imp_oom(im);
        }
        const char *qkv[3] = {p->q, p->k, p->v};
        for (int k = 0; k < 3; k++)
            if (!cJSON_AddItemToArray(ins, cJSON_CreateString(qkv[k])))
                return imp_oom(im);
        if (!cJSON_AddNumberToObject(L, "heads", (double)p->heads) ||
            !cJSON_AddBoolToObject(L, "causal", p->causal) ||
            !cJSON_AddNumberToObject(L, "dropout", p->dropout) ||
            !cJSON_AddNumberToObject(L, "scale", p->scale))
            return imp_oom(im);
        return imp_bind(im, n->out[0], name);
    }
    return attn_broken(im, p->value);
}

/* masked_fill of attention scores: Where(mask, -inf, scores) with a constant mask true
 * exactly above the diagonal (nanoGPT's `bias[:, :, :T, :T] == 0`) is the causal mask. */
ck_status imp_attn_where(imp *im, const ck_onnx_node *n, struct pend *p)
{
    const ck_onnx_tensor *c = NULL, *v = NULL;
    CK_TRY(imp_const_ahead(im, n->in[0], 0, &c));
    CK_TRY(imp_const_ahead(im, n->in[1], 0, &v));
    c = imp_const_of(im, n->in[0]); /* folding v may have moved c */
    bool causal = p->kind == P_SCORES && !p->masked && c && v && v->numel == 1 &&
                  imp_is_float_type(v->data_type) && isinf(imp_elem_f64(v, 0)) &&
                  imp_elem_f64(v, 0) < 0 && c->ndim >= 2 && c->dims[c->ndim - 1] == p->l &&
                  c->dims[c->ndim - 2] == p->l && c->numel == p->l * p->l;
    for (int64_t i = 0; causal && i < p->l; i++)
        for (int64_t j = 0; causal && j < p->l; j++)
            causal = (imp_elem_f64(c, i * p->l + j) != 0.0) == (j > i);
    if (!causal)
        return imp_fail_node(im,
                             "fills attention scores where `%s` holds: only a constant causal "
                             "mask (%lld x %lld, true above the diagonal) filled with -inf is "
                             "supported",
                             n->in[0], (long long)p->l, (long long)p->l);
    struct pend q = *p;
    q.masked = q.causal = true;
    return pend_next(im, &q, n->out[0], P_SCORES);
}
