/*
 * The norm family's ONNX ops: BatchNormalization and LayerNormalization (opset 17). The
 * normalisations exporters write out as several nodes are matched in onnx_match_norm.c.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ck_status imp_map_batchnorm(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *t[4];
    if (n->n_in != 5)
        return imp_fail_node(im, "expected 5 inputs (X, scale, B, mean, var)");
    for (int k = 0; k < 4; k++)
        if (!(t[k] = imp_const_of(im, n->in[k + 1])) || t[k]->ndim != 1)
            return imp_fail_node(im, "input %d must be a constant 1-D tensor", k + 1);
    bool training = imp_attr_int(n, "training_mode", 0) != 0 || n->n_out > 1;
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k][0] && imp_readers(im, n->out[k]) > 0)
            return imp_fail_node(im, "its running-statistics output `%s` is read by another node",
                                 n->out[k]);
    /* judged as the user wrote them, before the conversion to the case's convention */
    double momentum = imp_float_decimal(imp_attr_float(n, "momentum", 0.9));
    double eps = imp_float_decimal(imp_attr_float(n, "epsilon", 1e-5));
    if (!(momentum >= 0.0 && momentum <= 1.0))
        return imp_fail_node(im,
                             "momentum %g is outside [0, 1] (ONNX weighs the running statistic "
                             "by it)",
                             momentum);
    if (!(eps > 0.0) || !isfinite(eps))
        return imp_fail_node(im, "epsilon %g must be a positive finite number", eps);
    char buf[32];
    snprintf(buf, sizeof buf, "%.15g", 1.0 - momentum);
    double batch_weight = strtod(buf, NULL);
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, n->in[1], name));
    cJSON *L = imp_new_layer(im, name, "batchnorm");
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    /* ONNX: running = running * momentum + batch * (1 - momentum); PyTorch and the case
     * weigh the batch by momentum */
    if (!cJSON_AddNumberToObject(L, "momentum", batch_weight) ||
        !cJSON_AddNumberToObject(L, "eps", eps) || !cJSON_AddBoolToObject(L, "eval", !training))
        return imp_oom(im);
    static const char *const what[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; k++)
        CK_TRY(imp_add_weight(im, name, what[k], t[k], false));
    CK_TRY(imp_add_nbt(im, name));
    return imp_bind(im, n->out[0], name);
}

/* LayerNormalization (opset 17) over the trailing dims its scale covers. */
ck_status imp_map_layernorm(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *S = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
    if (!S || S->ndim < 1 || !imp_is_float_type(S->data_type))
        return imp_fail_node(im, "the scale must be a constant");
    const ck_onnx_tensor *B = n->n_in > 2 && n->in[2][0] ? imp_const_of(im, n->in[2]) : NULL;
    if (n->n_in > 2 && n->in[2][0] && (!B || B->numel != S->numel))
        return imp_fail_node(im, "the bias must be a constant shaped as the scale");
    int64_t axis = imp_attr_int(n, "axis", -1);
    if (axis != -S->ndim)
        return imp_fail_node(im,
                             "axis %lld with a scale of rank %d: only the trailing dims the "
                             "scale covers (axis %d) are supported",
                             (long long)axis, S->ndim, -S->ndim);
    if (imp_attr_int(n, "stash_type", 1) != 1)
        return imp_fail_node(im, "stash_type %lld is not supported (only float statistics, 1)",
                             (long long)imp_attr_int(n, "stash_type", 1));
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k][0] && imp_readers(im, n->out[k]) > 0)
            return imp_fail_node(im, "its statistics output `%s` is read by another node",
                                 n->out[k]);
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, n->in[1], name));
    cJSON *L = imp_new_layer(im, name, "layernorm");
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    if (!imp_add_ints(L, "normalized_shape", S->dims, S->ndim) ||
        !cJSON_AddNumberToObject(L, "eps", imp_float_decimal(imp_attr_float(n, "epsilon", 1e-5))))
        return imp_oom(im);
    CK_TRY(imp_add_weight(im, name, "weight", S, false));
    if (B) {
        CK_TRY(imp_add_weight(im, name, "bias", B, false));
    } else { /* no bias: the case's layernorm adds zeros, the same numbers */
        ck_onnx_tensor z = *S;
        z.name = S->name;
        z.data_type = CK_ONNX_FLOAT;
        z.nbytes = (size_t)S->numel * 4;
        z.data = calloc((size_t)S->numel + 1, 4);
        if (!z.data)
            return imp_oom(im);
        im->made_up = true;
        ck_status st = imp_add_weight(im, name, "bias", &z, false);
        im->made_up = false;
        free(z.data);
        CK_TRY(st);
    }
    return imp_bind(im, n->out[0], name);
}
