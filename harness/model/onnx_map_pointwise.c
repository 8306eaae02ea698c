/*
 * Element-wise ops: a layer of one or more activation inputs (relu, add, concat, mul, ...)
 * and the case op of each ONNX unary function.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <string.h>

ck_status imp_map_simple(imp *im, const ck_onnx_node *n, const char *op, int n_act)
{
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = imp_new_layer(im, name, op);
    if (!L)
        return imp_oom(im);
    int idx[8];
    for (int i = 0; i < n_act && i < 8; i++)
        idx[i] = i;
    CK_TRY(imp_set_inputs(im, L, n, idx, n_act));
    if (strcmp(op, "leaky_relu") == 0 &&
        !cJSON_AddNumberToObject(L, "slope", imp_float_decimal(imp_attr_float(n, "alpha", 0.01))))
        return imp_oom(im);
    return imp_bind(im, n->out[0], name);
}

/* The case op of an ONNX unary function node, or NULL. */
const char *imp_unary_op(const char *op_type)
{
    static const char *const unary[][2] = {{"Sqrt", "sqrt"}, {"Reciprocal", "reciprocal"},
                                           {"Exp", "exp"},   {"Log", "log"},
                                           {"Neg", "neg"},   {"Erf", "erf"},
                                           {"Abs", "abs"}};
    for (size_t k = 0; k < sizeof unary / sizeof unary[0]; k++)
        if (strcmp(op_type, unary[k][0]) == 0)
            return unary[k][1];
    return NULL;
}
