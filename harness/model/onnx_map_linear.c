/*
 * The linear family: Gemm and MatMul with a constant weight (a following bias Add fused),
 * Gather of a weight's rows (nn.Embedding), Add of learned positions.
 */
#include "harness/model/onnx_import_internal.h"

#include <string.h>

/* The node (index > from) reading value as an Add with a constant 1-D bias of `units`, if
 * value has no other reader: the bias a MatMul's output gets in a Linear layer. */
static int fused_bias_add(imp *im, int from, const char *value, int64_t units,
                          const ck_onnx_tensor **bias)
{
    if (imp_readers(im, value) != 1)
        return -1;
    for (int i = from + 1; i < im->m->n_nodes; i++) {
        const ck_onnx_node *a = &im->m->nodes[i];
        if (strcmp(a->op_type, "Add") != 0 || a->n_in != 2)
            continue;
        int k = strcmp(a->in[0], value) == 0 ? 1 : strcmp(a->in[1], value) == 0 ? 0 : -1;
        if (k < 0)
            continue;
        const ck_onnx_tensor *b = imp_const_of(im, a->in[k]);
        if (b && b->ndim == 1 && b->dims[0] == units && imp_is_float_type(b->data_type)) {
            *bias = b;
            return i;
        }
        return -1;
    }
    return -1;
}

ck_status imp_map_linear(imp *im, int idx, const ck_onnx_node *n)
{
    bool gemm = strcmp(n->op_type, "Gemm") == 0;
    const ck_onnx_tensor *W = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
    if (!W || W->ndim != 2)
        return imp_fail_node(im, "the second input must be a constant 2-D weight (a product of two "
                                 "activations is not a linear layer)");
    bool transpose;
    const ck_onnx_tensor *B = NULL;
    int64_t units;
    int fused = -1;
    if (gemm) {
        if (imp_attr_int(n, "transA", 0) != 0 || imp_attr_float(n, "alpha", 1.0) != 1.0 ||
            imp_attr_float(n, "beta", 1.0) != 1.0)
            return imp_fail_node(im, "Gemm with transA, alpha or beta other than 0, 1, 1 is not "
                                     "supported");
        transpose = imp_attr_int(n, "transB", 0) == 0; /* case weights are (units, in) */
        units = transpose ? W->dims[1] : W->dims[0];
        if (n->n_in > 2 && n->in[2][0]) {
            B = imp_const_of(im, n->in[2]);
            if (!B || B->numel != units)
                return imp_fail_node(im, "the bias must be a constant of %lld values",
                                     (long long)units);
        }
    } else {
        transpose = true; /* MatMul: x (.., in) @ W (in, units) */
        units = W->dims[1];
        fused = fused_bias_add(im, idx, n->out[0], units, &B);
    }
    char name[CK_NAME_MAX + 1], owner[CK_NAME_MAX + 16];
    CK_TRY(imp_shared_weight(im, W, transpose, owner, sizeof owner));
    /* a layer using another's weight (a tied head) is named after its node, not the weight */
    CK_TRY(imp_name_for(im, n, owner[0] ? NULL : n->in[1], name));
    cJSON *L = imp_new_layer(im, name, "linear");
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    if (!cJSON_AddNumberToObject(L, "units", (double)units) ||
        !cJSON_AddBoolToObject(L, "bias", B != NULL))
        return imp_oom(im);
    if (owner[0] && !cJSON_AddStringToObject(L, "share", owner)) /* a tied head */
        return imp_oom(im);
    if (!owner[0])
        CK_TRY(imp_add_weight(im, name, "weight", W, transpose));
    if (B)
        CK_TRY(imp_add_weight(im, name, "bias", B, false));
    CK_TRY(imp_bind(im, n->out[0], name));
    if (fused >= 0) {
        im->folded[fused] = true;
        CK_TRY(imp_bind(im, im->m->nodes[fused].out[0], name));
    }
    return CK_OK;
}

/* Gather(weight, token ids) along axis 0: nn.Embedding. */
ck_status imp_map_gather(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = n->n_in == 2 ? imp_const_of(im, n->in[0]) : NULL;
    if (!W || W->ndim != 2 || !imp_is_float_type(W->data_type))
        return imp_fail_node(im, "only a Gather of rows of a constant 2-D weight (an embedding) is "
                                 "supported");
    if (imp_attr_int(n, "axis", 0) != 0)
        return imp_fail_node(im, "axis %lld is not supported (an embedding gathers rows, axis 0)",
                             (long long)imp_attr_int(n, "axis", 0));
    const char *src = imp_layer_of(im, n->in[1]);
    if (!src || strcmp(src, "input") != 0)
        return imp_fail_node(im, "the indices must be the model's integer input (token ids)");
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, n->in[0], name));
    cJSON *L = imp_new_layer(im, name, "embedding");
    if (!L || !cJSON_AddStringToObject(L, "inputs", "input") ||
        !cJSON_AddNumberToObject(L, "vocab", (double)W->dims[0]) ||
        !cJSON_AddNumberToObject(L, "units", (double)W->dims[1]))
        return imp_oom(im);
    char owner[CK_NAME_MAX + 16];
    CK_TRY(imp_shared_weight(im, W, false, owner, sizeof owner));
    if (owner[0] && !cJSON_AddStringToObject(L, "share", owner)) /* tied to a head before it */
        return imp_oom(im);
    if (!owner[0])
        CK_TRY(imp_add_weight(im, name, "weight", W, false));
    return imp_bind(im, n->out[0], name);
}

/* Add(x, constant) with the constant of rank >= 2: learned positions shared by the batch.
 * A leading 1 of a rank >= 3 constant (1, L, D) is dropped: the weight is x[1:]; the case
 * refuses a weight of another shape, so a broadcast of another kind is an error. */
ck_status imp_map_positional(imp *im, const ck_onnx_node *n, const char *act,
                             const ck_onnx_tensor *P)
{
    if (!imp_is_float_type(P->data_type) || P->ndim < 2)
        return imp_fail_node(im,
                             "adding the constant `%s` (rank %d) is not supported (only learned "
                             "positions of rank >= 2 shared by the batch)",
                             P->name, P->ndim);
    ck_onnx_tensor w = *P;
    if (w.ndim >= 3 && w.dims[0] == 1) {
        memmove(w.dims, w.dims + 1, (size_t)(w.ndim - 1) * sizeof w.dims[0]);
        w.ndim--;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, P->name, name));
    CK_TRY(imp_one_input_layer(im, name, "positional", act, n->out[0], NULL));
    return imp_add_weight(im, name, "weight", &w, false);
}
