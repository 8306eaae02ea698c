/*
 * The generic path for the broadcast family: Add/Sub/Mul/Div/Max/Min/Pow with numpy
 * broadcasting between activations or with a constant, ReduceMean/ReduceSum/ReduceMax
 * (axes as an attribute or, from opset 18 (ReduceSum: 13), an input), Where with a constant
 * condition, Expand, Cast between float types, and an additive constant mask before a
 * Softmax (softmax's `mask_shape`). Patterns (LayerNorm, GELU, RMSNorm, attention) are
 * matched before these, as the fast path.
 *
 * A constant operand is the layer's `scalar` when it has one element, else a buffer
 * (`constant`, `mask`) written to the weights file. An initializer read directly by an
 * element-wise op outside a pattern may be a trained parameter (ONNX does not tell a
 * parameter from a buffer), so it is refused unless it is a scalar or an additive mask
 * before a Softmax; a constant computed in the graph (a Where of a Trilu, a product of
 * constants) cannot be a parameter.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The case op of an ONNX binary element-wise node, or NULL. */
static const char *binary_op(const char *op_type)
{
    static const char *const ops[][2] = {{"Add", "add"},     {"Sub", "sub"},
                                         {"Mul", "mul"},     {"Div", "div"},
                                         {"Max", "maximum"}, {"Min", "minimum"},
                                         {"Pow", "pow"}};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (strcmp(op_type, ops[k][0]) == 0)
            return ops[k][1];
    return NULL;
}

bool imp_is_binary(const char *op_type)
{
    return binary_op(op_type) != NULL;
}

/* A constant's dims as a list, without leading 1s beyond the rank of the activation
 * (broadcasting ignores them, and the case's buffer has at most the output's rank). */
static int const_dims(const ck_onnx_tensor *c, int act_rank, int64_t *dims)
{
    int skip = 0;
    while (c->ndim - skip > act_rank && c->dims[skip] == 1)
        skip++;
    for (int d = skip; d < c->ndim; d++)
        dims[d - skip] = c->dims[d];
    return c->ndim - skip;
}

/* Whether constant `value` may be held as a non-trained constant by a generic layer: a
 * scalar, or a constant computed in the graph; `mask_ok`: an initializer added before a
 * Softmax (an attention mask). */
static ck_status constant_allowed(imp *im, const char *value, const ck_onnx_tensor *c,
                                  bool mask_ok)
{
    if (!imp_is_float_type(c->data_type) && c->data_type != CK_ONNX_BOOL)
        return imp_fail_node(im, "the constant `%s` is %s; only float (and boolean masks) "
                             "constants are supported", value, ck_onnx_type_name(c->data_type));
    if (c->numel == 1 || mask_ok)
        return CK_OK;
    const char *init = imp_alias_source(im, value);
    if (init)
        return imp_fail_node(im, "reads the initializer `%s` (%lld elements) outside a matched "
                             "pattern; it may be a trained parameter (ONNX does not tell a "
                             "parameter from a buffer), so it is not imported as a constant",
                             init, (long long)c->numel);
    return CK_OK;
}

/* Adds constant c as buffer `what` of layer L (name) with its dims under `key`, as fp32
 * (a boolean mask as 0/1; `invert`: 1 where c is 0). */
static ck_status add_constant(imp *im, cJSON *L, const char *name, const char *key,
                              const char *what, const ck_onnx_tensor *c, int act_rank,
                              bool invert)
{
    int64_t dims[CK_MAX_DIMS];
    int nd = const_dims(c, act_rank, dims);
    if (nd == 0) {
        dims[0] = 1;
        nd = 1;
    }
    if (!imp_add_ints(L, key, dims, nd))
        return imp_oom(im);
    float *buf = malloc((size_t)(c->numel > 0 ? c->numel : 1) * sizeof *buf);
    if (!buf)
        return imp_oom(im);
    for (int64_t i = 0; i < c->numel; i++) {
        const double v = imp_elem_f64(c, i);
        buf[i] = (float)(invert ? (v == 0.0 ? 1.0 : 0.0)
                                : c->data_type == CK_ONNX_BOOL ? (v != 0.0 ? 1.0 : 0.0) : v);
    }
    ck_onnx_tensor t = *c;
    t.ndim = nd;
    memcpy(t.dims, dims, (size_t)nd * sizeof dims[0]);
    t.data_type = CK_ONNX_FLOAT;
    t.data = buf;
    t.nbytes = (size_t)c->numel * sizeof *buf;
    const bool made_up = im->made_up;
    im->made_up = imp_alias_source(im, c->name) == NULL;
    ck_status st = imp_add_weight(im, name, what, &t, false);
    im->made_up = made_up;
    free(buf);
    return st;
}

/* Add(scores, constant mask) read only by a Softmax over the last axis: one softmax layer
 * with the mask (a -inf never lands in an activation). */
static ck_status map_masked_softmax(imp *im, const ck_onnx_node *n, const char *act,
                                    const char *cv, const ck_onnx_tensor *c, int sm)
{
    const ck_onnx_node *s = &im->m->nodes[sm];
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, s, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "softmax", act, s->out[0], &L));
    ck_shape xs;
    CK_TRY(imp_value_shape(im, act, &xs));
    if (!cJSON_AddNumberToObject(L, "dim", (double)imp_attr_int(s, "axis", -1)))
        return imp_oom(im);
    CK_TRY(add_constant(im, L, name, "mask_shape", "mask", c, xs.ndim, false));
    (void)cv;
    (void)n;
    im->folded[sm] = true;
    return CK_OK;
}

/* The Softmax (opset >= 13) that alone reads the output of node n, or -1. */
static int softmax_reader(const imp *im, const ck_onnx_node *n)
{
    int r = imp_sole_reader(im, n->out[0]);
    if (r < 0 || im->m->opset < 13)
        return -1;
    const ck_onnx_node *s = &im->m->nodes[r];
    return strcmp(s->op_type, "Softmax") == 0 && s->n_in == 1 ? r : -1;
}

bool imp_add_feeds_softmax(const imp *im, const ck_onnx_node *n)
{
    return softmax_reader(im, n) >= 0;
}

ck_status imp_map_binary(imp *im, int idx, const ck_onnx_node *n)
{
    const char *op = binary_op(n->op_type);
    if (!op || n->n_in != 2)
        return imp_fail_node(im, "expected 2 inputs, got %d", n->n_in);
    const char *a0 = imp_layer_of(im, n->in[0]), *a1 = imp_layer_of(im, n->in[1]);
    const ck_onnx_tensor *c0 = a0 ? NULL : imp_const_of(im, n->in[0]);
    const ck_onnx_tensor *c1 = a1 ? NULL : imp_const_of(im, n->in[1]);
    if ((!a0 && !c0) || (!a1 && !c1))
        return imp_fail_node(im, "input `%s` is produced by no supported node",
                             !a0 && !c0 ? n->in[0] : n->in[1]);
    char name[CK_NAME_MAX + 1];
    if (a0 && a1) {
        if (strcmp(op, "pow") == 0)
            return imp_fail_node(im, "an exponent that is an activation is not supported (only "
                                 "a constant exponent)");
        return imp_map_simple(im, n, op, 2);
    }
    bool first = c0 != NULL; /* the constant is the left operand */
    const char *act = first ? n->in[1] : n->in[0];
    const char *cv = first ? n->in[0] : n->in[1];
    const ck_onnx_tensor *c = first ? c0 : c1;
    ck_shape xs;
    CK_TRY(imp_value_shape(im, act, &xs));
    const int sm = strcmp(op, "add") == 0 ? softmax_reader(im, n) : -1;
    if (sm >= 0 && c->numel > 1) {
        (void)idx;
        CK_TRY(constant_allowed(im, cv, c, true));
        return map_masked_softmax(im, n, act, cv, c, sm);
    }
    CK_TRY(constant_allowed(im, cv, c, false));
    if (strcmp(op, "pow") == 0 && (first || c->numel != 1))
        return imp_fail_node(im, "only x ** (a constant scalar) is supported");
    const bool ordered = strcmp(op, "sub") == 0 || strcmp(op, "div") == 0;
    if (first && !ordered && strcmp(op, "pow") != 0)
        first = false; /* commutative: x op c */
    if (first && !ordered)
        return imp_fail_node(im, "a constant left operand is not supported here");
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, op, act, n->out[0], &L));
    if (c->numel == 1) {
        const double v = imp_elem_f64(c, 0);
        if (!isfinite(v))
            return imp_fail_node(im, "the constant operand is %g; only finite constants are "
                                 "supported", v);
        if (!cJSON_AddNumberToObject(L, strcmp(op, "pow") == 0 ? "exponent" : "scalar",
                                     imp_float_decimal(v)))
            return imp_oom(im);
        /* a 1-element constant of a higher rank still broadcasts the output up */
        if (c->ndim > xs.ndim)
            return imp_fail_node(im, "the constant operand has rank %d, above the input's %d",
                                 c->ndim, xs.ndim);
    } else {
        for (int64_t k = 0; k < c->numel; k++)
            if (!isfinite(imp_elem_f64(c, k)))
                return imp_fail_node(im, "the constant operand holds %g; non-finite constants "
                                     "are only supported as a mask added before a Softmax",
                                     imp_elem_f64(c, k));
        CK_TRY(add_constant(im, L, name, "constant_shape", "constant", c, xs.ndim, false));
    }
    if (first && !cJSON_AddBoolToObject(L, "constant_first", true))
        return imp_oom(im);
    return CK_OK;
}

/* The axes of a Reduce node: the attribute (opset < 18; ReduceSum < 13) or the second input
 * (a constant); none given: every axis. */
static ck_status reduce_axes(imp *im, const ck_onnx_node *n, int rank, int64_t *axes, int *k)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, "axes");
    const ck_onnx_tensor *c = n->n_in > 1 && n->in[1][0] ? imp_const_of(im, n->in[1]) : NULL;
    if (n->n_in > 1 && n->in[1][0] && !c)
        return imp_fail_node(im, "its axes are computed from activations; only constant axes "
                             "are supported");
    *k = 0;
    if (a) {
        for (int i = 0; i < a->n_ints && i < CK_MAX_DIMS; i++)
            axes[(*k)++] = a->ints[i];
    } else if (c) {
        for (int64_t i = 0; i < c->numel && i < CK_MAX_DIMS; i++)
            axes[(*k)++] = imp_elem_i64(c, i);
    }
    if (*k == 0) {
        if (imp_attr_int(n, "noop_with_empty_axes", 0))
            return imp_fail_node(im, "noop_with_empty_axes with no axes (an identity) is not "
                                 "supported");
        for (int d = 0; d < rank; d++)
            axes[(*k)++] = d;
    }
    return CK_OK;
}

ck_status imp_map_reduce(imp *im, const ck_onnx_node *n)
{
    const char *op = strcmp(n->op_type, "ReduceMean") == 0  ? "mean"
                     : strcmp(n->op_type, "ReduceSum") == 0 ? "sum"
                                                            : "amax";
    if (n->n_in < 1 || !imp_layer_of(im, n->in[0]))
        return imp_fail_node(im, "its input is produced by no supported node");
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    int64_t axes[CK_MAX_DIMS];
    int k = 0;
    CK_TRY(reduce_axes(im, n, xs.ndim, axes, &k));
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, op, n->in[0], n->out[0], &L));
    if (!imp_add_ints(L, "dim", axes, k) ||
        !cJSON_AddBoolToObject(L, "keepdim", imp_attr_int(n, "keepdims", 1) != 0))
        return imp_oom(im);
    return CK_OK;
}

/* Where(cond, a, b) with a constant condition, one branch an activation and the other a
 * constant scalar: masked_fill (of !cond when the activation is the first branch). */
ck_status imp_map_where(imp *im, const ck_onnx_node *n)
{
    if (n->n_in != 3)
        return imp_fail_node(im, "expected 3 inputs, got %d", n->n_in);
    const ck_onnx_tensor *cond = imp_const_of(im, n->in[0]);
    if (!cond)
        return imp_fail_node(im, "only a constant condition is supported (a mask computed from "
                             "activations is not)");
    const char *a = imp_layer_of(im, n->in[1]), *b = imp_layer_of(im, n->in[2]);
    const ck_onnx_tensor *va = a ? NULL : imp_const_of(im, n->in[1]);
    const ck_onnx_tensor *vb = b ? NULL : imp_const_of(im, n->in[2]);
    if ((a != NULL) == (b != NULL) || !(a ? vb : va) || (a ? vb : va)->numel != 1)
        return imp_fail_node(im, "only Where(mask, activation, scalar) or Where(mask, scalar, "
                             "activation) is supported");
    const ck_onnx_tensor *v = a ? vb : va;
    const double value = imp_elem_f64(v, 0);
    if (!isfinite(value))
        return imp_fail_node(im, "fills with %g: a non-finite fill is only supported as a mask "
                             "added before a Softmax", value);
    const char *act = a ? n->in[1] : n->in[2];
    ck_shape xs;
    CK_TRY(imp_value_shape(im, act, &xs));
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "masked_fill", act, n->out[0], &L));
    if (!cJSON_AddNumberToObject(L, "value", imp_float_decimal(value)))
        return imp_oom(im);
    /* the fill goes where the constant is taken: cond for Where(c, v, x), !cond otherwise */
    return add_constant(im, L, name, "mask_shape", "mask", cond, xs.ndim, a != NULL);
}

ck_status imp_map_expand(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *s = n->n_in == 2 ? imp_const_of(im, n->in[1]) : NULL;
    if (!s || s->numel < 1 || s->numel > CK_MAX_DIMS)
        return imp_fail_node(im, "only a constant target shape of 1 to %d dims is supported",
                             CK_MAX_DIMS);
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    /* ONNX Expand broadcasts both ways (a 1 in the shape keeps the input's dim) */
    int64_t dims[CK_MAX_DIMS];
    const int nd = (int)s->numel > xs.ndim ? (int)s->numel : xs.ndim;
    for (int d = 0; d < nd; d++) {
        const int si = d - (nd - (int)s->numel), xi = d - (nd - xs.ndim);
        const int64_t sv = si >= 0 ? imp_elem_i64(s, si) : 1, xv = xi >= 0 ? xs.dim[xi] : 1;
        dims[d] = sv == 1 ? xv : sv;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "expand", n->in[0], n->out[0], &L));
    return imp_add_ints(L, "shape", dims, nd) ? CK_OK : imp_oom(im);
}

/* The case's dtype name ("float32", "float16", "bfloat16") of an ONNX float element type the
 * cast op takes, or NULL. */
static const char *cast_dtype(int64_t onnx_type)
{
    switch (onnx_type) {
    case CK_ONNX_FLOAT: return "float32";
    case CK_ONNX_FLOAT16: return "float16";
    case CK_ONNX_BFLOAT16: return "bfloat16";
    default: return NULL;
    }
}

/* The layer of that name (NULL: none). */
static const cJSON *layer_named(const imp *im, const char *name)
{
    const cJSON *L;
    cJSON_ArrayForEach(L, im->layers)
    {
        const cJSON *nm = cJSON_GetObjectItem(L, "name");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0)
            return L;
    }
    return NULL;
}

/* The ONNX element type of an activation value: float, except the output of a cast layer to
 * float16 or bfloat16 (every value the importer maps is float32 otherwise: the graph input
 * is float, and no op reads a float16 or bfloat16 value but a Cast, imp_low_float_input). */
static int value_elem_type(const imp *im, const char *value)
{
    if (im->n_low_float_casts == 0)
        return CK_ONNX_FLOAT;
    const char *src = imp_layer_of(im, value);
    const cJSON *L = src ? layer_named(im, src) : NULL;
    const cJSON *op = L ? cJSON_GetObjectItem(L, "op") : NULL;
    const cJSON *to = L ? cJSON_GetObjectItem(L, "to") : NULL;
    if (!cJSON_IsString(op) || strcmp(op->valuestring, "cast") != 0 || !cJSON_IsString(to))
        return CK_ONNX_FLOAT;
    if (strcmp(to->valuestring, "float16") == 0)
        return CK_ONNX_FLOAT16;
    return strcmp(to->valuestring, "bfloat16") == 0 ? CK_ONNX_BFLOAT16 : CK_ONNX_FLOAT;
}

ck_status imp_low_float_input(imp *im, const ck_onnx_node *n)
{
    if (strcmp(n->op_type, "Cast") == 0 || strcmp(n->op_type, "Identity") == 0 ||
        strcmp(n->op_type, "Shape") == 0)
        return CK_OK;
    for (int k = 0; k < n->n_in; k++) {
        if (!n->in[k][0] || !imp_layer_of(im, n->in[k]))
            continue;
        const int t = value_elem_type(im, n->in[k]);
        if (t != CK_ONNX_FLOAT)
            return imp_fail_node(im, "reads `%s`, a %s value (a Cast made it): an op computed "
                                 "in %s is not supported, as the case's ops compute in the "
                                 "run's dtype; only a Cast may read it",
                                 n->in[k], ck_onnx_type_name(t), ck_onnx_type_name(t));
    }
    return CK_OK;
}

/* Cast of an activation between float32, float16 and bfloat16: the identity (to its own
 * type) is folded away; a cast that changes values in some run (forward rounds to `to`,
 * backward rounds the gradient to the source's type, as PyTorch) is a `cast` layer. A cast
 * to any other type (an integer, bool, double) is refused, never ignored. */
ck_status imp_map_cast(imp *im, const ck_onnx_node *n)
{
    const char *src = n->n_in == 1 ? imp_layer_of(im, n->in[0]) : NULL;
    if (!src)
        return imp_fail_node(im, "its input is produced by no supported node");
    const int64_t to = imp_attr_int(n, "to", 0);
    const cJSON *dist = cJSON_GetObjectItem(im->input_json, "dist");
    const bool tokens = strcmp(src, "input") == 0 && cJSON_IsString(dist) &&
                        strcmp(dist->valuestring, "tokens") == 0;
    if (!cast_dtype(to) || tokens)
        return imp_fail_node(im, "a Cast of an activation to %s is not supported: only casts "
                             "between float, float16 and bfloat16 are imported (the case's "
                             "`cast` op); a cast to any other type would change what the "
                             "model computes, and is refused rather than ignored",
                             ck_onnx_type_name((int)to));
    const int from = value_elem_type(im, n->in[0]);
    if (from == to)
        return imp_bind(im, n->out[0], src);
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "cast", n->in[0], n->out[0], &L));
    im->n_low_float_casts += to != CK_ONNX_FLOAT;
    return cJSON_AddStringToObject(L, "to", cast_dtype(to)) &&
                   cJSON_AddStringToObject(L, "from", cast_dtype(from))
               ? CK_OK
               : imp_oom(im);
}

ck_status imp_map_generic(imp *im, int idx, const ck_onnx_node *n, bool *handled)
{
    const char *op = n->op_type;
    *handled = true;
    if (imp_is_binary(op))
        return imp_map_binary(im, idx, n);
    if (strcmp(op, "ReduceMean") == 0 || strcmp(op, "ReduceSum") == 0 ||
        strcmp(op, "ReduceMax") == 0)
        return imp_map_reduce(im, n);
    if (strcmp(op, "Where") == 0)
        return imp_map_where(im, n);
    if (strcmp(op, "Expand") == 0)
        return imp_map_expand(im, n);
    if (strcmp(op, "Cast") == 0)
        return imp_map_cast(im, n);
    if (strcmp(op, "Concat") == 0) {
        if (n->n_in < 2 || n->n_in > 8)
            return imp_fail_node(im, "joins %d inputs; 2 to 8 are supported", n->n_in);
        CK_TRY(imp_map_simple(im, n, "concat", n->n_in));
        cJSON *L = cJSON_GetArrayItem(im->layers, cJSON_GetArraySize(im->layers) - 1);
        const int64_t axis = imp_attr_int(n, "axis", 0);
        return axis == 1 || cJSON_AddNumberToObject(L, "dim", (double)axis) ? CK_OK : imp_oom(im);
    }
    *handled = false;
    return CK_OK;
}
