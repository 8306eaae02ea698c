/*
 * The pool family: MaxPool, AveragePool, GlobalAveragePool/GlobalMaxPool, and a Pad of zeros
 * (AvgPool2d's export).
 */
#include "harness/model/onnx_import_internal.h"

#include <string.h>

ck_status imp_map_pool(imp *im, const ck_onnx_node *n, bool is_max)
{
    const ck_onnx_attr *ks = ck_onnx_attr_find(n, "kernel_shape");
    if (!ks || ks->n_ints < 1 || ks->n_ints > 3)
        return imp_fail_node(im, "kernel_shape must give 1 to 3 sizes");
    int nsp = ks->n_ints;
    int64_t stride[3], pads[6], dil[3];
    CK_TRY(imp_attr_ints(im, n, "strides", nsp, 1, stride));
    CK_TRY(imp_attr_ints(im, n, "pads", 2 * nsp, 0, pads));
    CK_TRY(imp_attr_ints(im, n, "dilations", nsp, 1, dil));
    int64_t pad[3];
    if (!imp_symmetric_pads(pads, nsp, pad))
        return imp_fail_node(im, "asymmetric pooling padding is not supported");
    bool padded = false;
    for (int i = 0; i < nsp; i++) {
        padded = padded || pad[i] != 0;
        if (2 * pad[i] > ks->ints[i])
            return imp_fail_node(im, "padding %lld is more than half the window %lld",
                                 (long long)pad[i], (long long)ks->ints[i]);
    }
    for (int i = 0; i < nsp; i++)
        if (dil[i] != 1)
            return imp_fail_node(im, "dilated pooling is not supported");
    if (imp_attr_int(n, "ceil_mode", 0))
        return imp_fail_node(im, "ceil_mode is not supported");
    const ck_onnx_attr *ap = ck_onnx_attr_find(n, "auto_pad");
    if (ap && ap->s && strcmp(ap->s, "NOTSET") != 0 && strcmp(ap->s, "VALID") != 0)
        return imp_fail_node(im, "auto_pad %s is not supported", ap->s);
    if (n->n_out > 1 && n->out[1][0])
        return imp_fail_node(im, "MaxPool's indices output is not supported");
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L =
        imp_new_layer(im, name, imp_nd_op(is_max ? "maxpool" : "avgpool", nsp, op, sizeof op));
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    if (!imp_add_ints(L, "pool", ks->ints, nsp) || !imp_add_ints(L, "stride", stride, nsp) ||
        (padded && !imp_add_ints(L, "padding", pad, nsp)) ||
        (padded && !is_max &&
         !cJSON_AddBoolToObject(L, "count_include_pad", imp_attr_int(n, "count_include_pad", 0))))
        return imp_oom(im);
    return imp_bind(im, n->out[0], name);
}

/* A Pad of zeros (AvgPool2d's export) is the identity; any other is refused. */
ck_status imp_map_pad(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *pads = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
    const char *src = n->n_in ? imp_layer_of(im, n->in[0]) : NULL;
    bool zero = pads != NULL;
    for (int64_t k = 0; pads && k < pads->numel; k++)
        zero = zero && imp_elem_f64(pads, k) == 0.0;
    if (!zero || !src)
        return imp_fail_node(im, "padding by a non-zero amount is not supported (a case pads only "
                                 "inside conv)");
    return imp_bind(im, n->out[0], src);
}

/* GlobalAveragePool / GlobalMaxPool: a pool whose window is the input's spatial dims. */
ck_status imp_map_global_pool(imp *im, const ck_onnx_node *n, bool is_max)
{
    if (n->n_in != 1)
        return imp_fail_node(im, "expected 1 input, got %d", n->n_in);
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    int nsp = xs.ndim - 2;
    if (nsp < 1 || nsp > 3)
        return imp_fail_node(im, "an input of rank %d: only 1 to 3 spatial dims", xs.ndim);
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name,
                               imp_nd_op(is_max ? "maxpool" : "avgpool", nsp, op, sizeof op),
                               n->in[0], n->out[0], &L));
    return imp_add_ints(L, "pool", xs.dim + 2, nsp) ? CK_OK : imp_oom(im);
}
