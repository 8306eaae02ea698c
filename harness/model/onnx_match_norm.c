/*
 * Normalisations written out as several nodes: RMSNorm (Llama's), GroupNorm (as PyTorch
 * exports it) and LayerNorm below opset 17, each matched into one layer (the fast path; an
 * unmatched variant takes the generic path, onnx_map_broadcast.c).
 */
#include "harness/model/onnx_import_internal.h"

#include <string.h>

/* RMSNorm written out (Llama's): Pow(x, 2) → ReduceMean(last axis, keepdims) → Add(eps) →
 * Sqrt → Reciprocal or Div(1, ·) → Mul(x, ·) → Mul(·, weight of the last dim), every value
 * in between read by the next node only. */
static ck_status match_rmsnorm(imp *im, int idx, bool *matched)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    *matched = false;
    if (n->n_in != 2 || !imp_scalar_is(im, n->in[1], 2.0) || !imp_layer_of(im, n->in[0]))
        return CK_OK;
    const char *x = n->in[0];
    int chain[7], len = 0;
    chain[len++] = idx;
    int rm = imp_sole_reader(im, n->out[0]);
    if (rm < 0 || strcmp(im->m->nodes[rm].op_type, "ReduceMean") != 0 ||
        imp_attr_int(&im->m->nodes[rm], "keepdims", 1) != 1)
        return CK_OK;
    const ck_onnx_node *r = &im->m->nodes[rm];
    const ck_onnx_attr *axes = ck_onnx_attr_find(r, "axes");
    const ck_onnx_tensor *axes_c = r->n_in > 1 ? imp_const_of(im, r->in[1]) : NULL;
    int64_t axis = axes && axes->n_ints == 1      ? axes->ints[0]
                   : axes_c && axes_c->numel == 1 ? imp_elem_i64(axes_c, 0)
                                                  : 99;
    ck_shape xs;
    CK_TRY(imp_value_shape(im, x, &xs));
    if (axis != -1 && axis != xs.ndim - 1)
        return CK_OK;
    chain[len++] = rm;
    int ad = imp_sole_reader(im, r->out[0]);
    const char *eps_v = imp_other_input(im, ad, "Add", r->out[0]);
    const ck_onnx_tensor *eps = eps_v ? imp_const_of(im, eps_v) : NULL;
    if (!eps || eps->numel != 1 || !imp_is_float_type(eps->data_type) ||
        !(imp_elem_f64(eps, 0) > 0))
        return CK_OK;
    chain[len++] = ad;
    int sq = imp_sole_reader(im, im->m->nodes[ad].out[0]);
    if (sq < 0 || strcmp(im->m->nodes[sq].op_type, "Sqrt") != 0)
        return CK_OK;
    chain[len++] = sq;
    const char *cur = im->m->nodes[sq].out[0];
    int rc = imp_sole_reader(im, cur);
    if (rc < 0)
        return CK_OK;
    const ck_onnx_node *rn = &im->m->nodes[rc];
    bool recip = strcmp(rn->op_type, "Reciprocal") == 0 ||
                 (strcmp(rn->op_type, "Div") == 0 && rn->n_in == 2 && strcmp(rn->in[1], cur) == 0 &&
                  imp_scalar_is(im, rn->in[0], 1.0));
    if (!recip)
        return CK_OK;
    chain[len++] = rc;
    int m1 = imp_sole_reader(im, rn->out[0]);
    if (!imp_binary_of(im, m1, "Mul", x, rn->out[0]))
        return CK_OK;
    chain[len++] = m1;
    int m2 = imp_sole_reader(im, im->m->nodes[m1].out[0]);
    const char *w_v = imp_other_input(im, m2, "Mul", im->m->nodes[m1].out[0]);
    const ck_onnx_tensor *W = w_v ? imp_const_of(im, w_v) : NULL;
    if (!W || W->ndim != 1 || W->dims[0] != xs.dim[xs.ndim - 1] || !imp_is_float_type(W->data_type))
        return CK_OK;
    chain[len++] = m2;
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, w_v, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "rmsnorm", x, im->m->nodes[m2].out[0], &L));
    if (!imp_add_ints(L, "normalized_shape", W->dims, 1) ||
        !cJSON_AddNumberToObject(L, "eps", imp_float_decimal(imp_elem_f64(eps, 0))))
        return imp_oom(im);
    CK_TRY(imp_add_weight(im, name, "weight", W, false));
    for (int i = 1; i < len; i++)
        im->folded[chain[i]] = true;
    *matched = true;
    return CK_OK;
}

/* GroupNorm as PyTorch exports it: Reshape(x, [N or 0, G, -1]) → InstanceNormalization
 * (scale 1, bias 0 over the G groups) → Reshape back to x's shape → Mul(·, weight (C, 1..))
 * → Add(·, bias (C, 1..)), every value in between read by the next node only. */
static ck_status match_groupnorm(imp *im, int idx, bool *matched)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    *matched = false;
    const ck_onnx_tensor *t = n->n_in == 2 ? imp_const_of(im, n->in[1]) : NULL;
    if (!t || t->numel != 3 || imp_elem_f64(t, 2) != -1.0 || !imp_layer_of(im, n->in[0]))
        return CK_OK;
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    int64_t G = imp_elem_i64(t, 1), C = xs.ndim >= 2 ? xs.dim[1] : 0;
    if (xs.ndim < 3 || G < 1 || C % G != 0 ||
        (imp_elem_f64(t, 0) != 0.0 && imp_elem_f64(t, 0) != (double)xs.dim[0]))
        return CK_OK;
    int in_ = imp_sole_reader(im, n->out[0]);
    if (in_ < 0 || strcmp(im->m->nodes[in_].op_type, "InstanceNormalization") != 0)
        return CK_OK;
    const ck_onnx_node *inn = &im->m->nodes[in_];
    if (inn->n_in != 3 || !imp_const_all(im, inn->in[1], 1.0) ||
        !imp_const_all(im, inn->in[2], 0.0) || imp_const_of(im, inn->in[1])->numel != G)
        return CK_OK;
    int rb = imp_sole_reader(im, inn->out[0]);
    if (rb < 0 || strcmp(im->m->nodes[rb].op_type, "Reshape") != 0)
        return CK_OK;
    const ck_onnx_tensor *back = NULL;
    if (im->m->nodes[rb].n_in == 2)
        CK_TRY(imp_const_ahead(im, im->m->nodes[rb].in[1], 0, &back));
    if (!back || back->numel != xs.ndim)
        return CK_OK;
    for (int d = 0; back && d < xs.ndim; d++)
        if (imp_elem_f64(back, d) != (double)xs.dim[d] && !(d == 0 && imp_elem_f64(back, d) == 0.0))
            return CK_OK;
    int mu = imp_sole_reader(im, im->m->nodes[rb].out[0]);
    const char *w_v = imp_other_input(im, mu, "Mul", im->m->nodes[rb].out[0]);
    int ad = mu >= 0 ? imp_sole_reader(im, im->m->nodes[mu].out[0]) : -1;
    const char *b_v = ad >= 0 ? imp_other_input(im, ad, "Add", im->m->nodes[mu].out[0]) : NULL;
    const ck_onnx_tensor *W = NULL, *B = NULL;
    if (w_v && b_v) { /* folding may move the constants: look both up afterwards */
        CK_TRY(imp_const_ahead(im, w_v, 0, &W));
        CK_TRY(imp_const_ahead(im, b_v, 0, &B));
        W = imp_const_of(im, w_v);
        B = imp_const_of(im, b_v);
    }
    if (!W || !B || W->numel != C || B->numel != C || W->ndim != xs.ndim - 1 ||
        B->ndim != xs.ndim - 1 || !imp_is_float_type(W->data_type) ||
        !imp_is_float_type(B->data_type))
        return CK_OK;
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, imp_alias_source(im, w_v) ? w_v : NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "groupnorm", n->in[0], im->m->nodes[ad].out[0], &L));
    if (!cJSON_AddNumberToObject(L, "groups", (double)G) ||
        !cJSON_AddNumberToObject(L, "eps", imp_float_decimal(imp_attr_float(inn, "epsilon", 1e-5))))
        return imp_oom(im);
    ck_onnx_tensor w1 = *W, b1 = *B; /* (C, 1, ..) as the case's (C) */
    w1.ndim = b1.ndim = 1;
    w1.dims[0] = b1.dims[0] = C;
    CK_TRY(imp_add_weight(im, name, "weight", &w1, false));
    CK_TRY(imp_add_weight(im, name, "bias", &b1, false));
    im->folded[in_] = im->folded[rb] = im->folded[mu] = im->folded[ad] = true;
    *matched = true;
    return CK_OK;
}

/* Node idx is a ReduceMean of x over its last axis with keepdims (axes as the attribute
 * or a constant input). */
static bool mean_over_last(imp *im, int idx, const char *x, int rank)
{
    if (idx < 0)
        return false;
    const ck_onnx_node *r = &im->m->nodes[idx];
    if (strcmp(r->op_type, "ReduceMean") != 0 || strcmp(r->in[0], x) != 0 ||
        imp_attr_int(r, "keepdims", 1) != 1)
        return false;
    const ck_onnx_attr *axes = ck_onnx_attr_find(r, "axes");
    const ck_onnx_tensor *axes_c = r->n_in > 1 ? imp_const_of(im, r->in[1]) : NULL;
    int64_t axis = axes && axes->n_ints == 1      ? axes->ints[0]
                   : axes_c && axes_c->numel == 1 ? imp_elem_i64(axes_c, 0)
                                                  : 99;
    return axis == -1 || axis == rank - 1;
}

/* LayerNorm as exported below opset 17 (no LayerNormalization op): ReduceMean(x, last
 * axis) → Sub(x, mean) → Pow(·, 2) → ReduceMean → Add(eps) → Sqrt → Div(centred, ·) →
 * Mul(·, weight) → Add(·, bias), the weight and bias of the last dim; every value in between
 * read by the next node only (the centred value by Pow and Div). */
static ck_status match_layernorm(imp *im, int idx, bool *matched)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    *matched = false;
    if (n->n_in < 1 || n->n_out < 1) /* a node without inputs has no in[] to read */
        return CK_OK;
    const char *x = n->in[0];
    if (!imp_layer_of(im, x))
        return CK_OK;
    ck_shape xs;
    CK_TRY(imp_value_shape(im, x, &xs));
    if (!mean_over_last(im, idx, x, xs.ndim))
        return CK_OK;
    const int64_t E = xs.dim[xs.ndim - 1];
    int sub = imp_sole_reader(im, n->out[0]);
    if (sub < 0 || strcmp(im->m->nodes[sub].op_type, "Sub") != 0 ||
        strcmp(im->m->nodes[sub].in[0], x) != 0 || strcmp(im->m->nodes[sub].in[1], n->out[0]) != 0)
        return CK_OK;
    const char *c = im->m->nodes[sub].out[0];
    if (imp_readers(im, c) != 2)
        return CK_OK;
    int pw = -1, dv = -1;
    for (int i = 0; i < im->m->n_nodes; i++) {
        const ck_onnx_node *r = &im->m->nodes[i];
        if (r->n_in == 2 && strcmp(r->in[0], c) == 0 && strcmp(r->op_type, "Pow") == 0 &&
            imp_scalar_is(im, r->in[1], 2.0))
            pw = i;
        if (r->n_in == 2 && strcmp(r->in[0], c) == 0 && strcmp(r->op_type, "Div") == 0)
            dv = i;
    }
    if (pw < 0 || dv < 0)
        return CK_OK;
    int var = imp_sole_reader(im, im->m->nodes[pw].out[0]);
    if (!mean_over_last(im, var, im->m->nodes[pw].out[0], xs.ndim))
        return CK_OK;
    int ad = imp_sole_reader(im, im->m->nodes[var].out[0]);
    const char *eps_v = imp_other_input(im, ad, "Add", im->m->nodes[var].out[0]);
    const ck_onnx_tensor *eps = eps_v ? imp_const_of(im, eps_v) : NULL;
    if (!eps || eps->numel != 1 || !imp_is_float_type(eps->data_type) ||
        !(imp_elem_f64(eps, 0) > 0))
        return CK_OK;
    int sq = imp_sole_reader(im, im->m->nodes[ad].out[0]);
    if (sq < 0 || strcmp(im->m->nodes[sq].op_type, "Sqrt") != 0 ||
        imp_sole_reader(im, im->m->nodes[sq].out[0]) != dv ||
        strcmp(im->m->nodes[dv].in[1], im->m->nodes[sq].out[0]) != 0)
        return CK_OK;
    int mu = imp_sole_reader(im, im->m->nodes[dv].out[0]);
    const char *w_v = imp_other_input(im, mu, "Mul", im->m->nodes[dv].out[0]);
    int ab = mu >= 0 && w_v ? imp_sole_reader(im, im->m->nodes[mu].out[0]) : -1;
    const char *b_v = ab >= 0 ? imp_other_input(im, ab, "Add", im->m->nodes[mu].out[0]) : NULL;
    const ck_onnx_tensor *W = w_v ? imp_const_of(im, w_v) : NULL;
    const ck_onnx_tensor *B = b_v ? imp_const_of(im, b_v) : NULL;
    if (!W || !B || W->ndim != 1 || B->ndim != 1 || W->dims[0] != E || B->dims[0] != E ||
        !imp_is_float_type(W->data_type) || !imp_is_float_type(B->data_type))
        return CK_OK; /* no affine part (or another one): the generic path */
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, w_v, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "layernorm", x, im->m->nodes[ab].out[0], &L));
    if (!imp_add_ints(L, "normalized_shape", &E, 1) ||
        !cJSON_AddNumberToObject(L, "eps", imp_float_decimal(imp_elem_f64(eps, 0))))
        return imp_oom(im);
    CK_TRY(imp_add_weight(im, name, "weight", W, false));
    CK_TRY(imp_add_weight(im, name, "bias", B, false));
    const int chain[] = {sub, pw, var, ad, sq, dv, mu, ab};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        im->folded[chain[i]] = true;
    *matched = true;
    return CK_OK;
}

/* The normalisation patterns starting at node i (Pow: RMSNorm, Reshape: GroupNorm,
 * ReduceMean: LayerNorm below opset 17). */
ck_status imp_match_norm(imp *im, int i, bool *matched)
{
    const char *op = im->m->nodes[i].op_type;
    *matched = false;
    if (strcmp(op, "ReduceMean") == 0)
        return match_layernorm(im, i, matched);
    if (strcmp(op, "Pow") == 0)
        return match_rmsnorm(im, i, matched);
    if (strcmp(op, "Reshape") == 0)
        return match_groupnorm(im, i, matched);
    return CK_OK;
}
