/*
 * The conv family: Conv and ConvTranspose as conv1d/2d/3d and conv_transpose1d/2d/3d.
 */
#include "harness/model/onnx_import_internal.h"

#include <string.h>

ck_status imp_map_conv(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
    if (!W || W->ndim < 3 || W->ndim > 5)
        return imp_fail_node(im, "the weight must be a constant of rank 3 to 5");
    int nsp = W->ndim - 2;
    if (imp_attr_int(n, "group", 1) != 1)
        return imp_fail_node(im, "grouped convolution (group %lld) is not supported",
                             (long long)imp_attr_int(n, "group", 1));
    int64_t stride[3], dil[3], pads[6], pad[3], kshape[3];
    CK_TRY(imp_attr_ints(im, n, "strides", nsp, 1, stride));
    CK_TRY(imp_attr_ints(im, n, "dilations", nsp, 1, dil));
    CK_TRY(imp_attr_ints(im, n, "pads", 2 * nsp, 0, pads));
    CK_TRY(imp_attr_ints(im, n, "kernel_shape", nsp, 0, kshape));
    for (int i = 0; i < nsp; i++)
        if (kshape[i] && kshape[i] != W->dims[2 + i])
            return imp_fail_node(im, "kernel_shape does not match the weight's shape");
    const ck_onnx_attr *ap = ck_onnx_attr_find(n, "auto_pad");
    const char *auto_pad = ap && ap->s ? ap->s : "NOTSET";
    bool same = false;
    if (strcmp(auto_pad, "SAME_UPPER") == 0)
        same = true;
    else if (strcmp(auto_pad, "NOTSET") != 0 && strcmp(auto_pad, "VALID") != 0)
        return imp_fail_node(
            im, "auto_pad %s is not supported (SAME_LOWER puts the odd pixel first)", auto_pad);
    if (!same && !imp_symmetric_pads(pads, nsp, pad))
        return imp_fail_node(im, "asymmetric padding is not supported");
    const ck_onnx_tensor *B = n->n_in > 2 ? imp_const_of(im, n->in[2]) : NULL;
    if (n->n_in > 2 && n->in[2][0] && !B)
        return imp_fail_node(im, "the bias must be a constant");
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(imp_name_for(im, n, n->in[1], name));
    cJSON *L = imp_new_layer(im, name, imp_nd_op("conv", nsp, op, sizeof op));
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    bool ok = cJSON_AddNumberToObject(L, "filters", (double)W->dims[0]) &&
              imp_add_ints(L, "kernel", W->dims + 2, nsp) &&
              imp_add_ints(L, "stride", stride, nsp) && imp_add_ints(L, "dilation", dil, nsp) &&
              (same ? cJSON_AddStringToObject(L, "padding", "same") != NULL
                    : imp_add_ints(L, "padding", pad, nsp)) &&
              cJSON_AddBoolToObject(L, "bias", B != NULL);
    if (!ok)
        return imp_oom(im);
    CK_TRY(imp_add_weight(im, name, "weight", W, false));
    if (B)
        CK_TRY(imp_add_weight(im, name, "bias", B, false));
    return imp_bind(im, n->out[0], name);
}

/* ConvTranspose as conv_transpose1d/2d/3d (groups 1). */
ck_status imp_map_conv_transpose(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
    if (!W || W->ndim < 3 || W->ndim > 5)
        return imp_fail_node(im, "the weight must be a constant of rank 3 to 5");
    int nsp = W->ndim - 2;
    if (imp_attr_int(n, "group", 1) != 1)
        return imp_fail_node(im, "grouped transposed convolution (group %lld) is not supported",
                             (long long)imp_attr_int(n, "group", 1));
    if (ck_onnx_attr_find(n, "output_shape"))
        return imp_fail_node(im, "output_shape is not supported (give pads and output_padding)");
    const ck_onnx_attr *ap = ck_onnx_attr_find(n, "auto_pad");
    if (ap && ap->s && strcmp(ap->s, "NOTSET") != 0 && strcmp(ap->s, "VALID") != 0)
        return imp_fail_node(im, "auto_pad %s is not supported", ap->s);
    int64_t stride[3], dil[3], pads[6], pad[3], kshape[3], opad[3];
    CK_TRY(imp_attr_ints(im, n, "strides", nsp, 1, stride));
    CK_TRY(imp_attr_ints(im, n, "dilations", nsp, 1, dil));
    CK_TRY(imp_attr_ints(im, n, "pads", 2 * nsp, 0, pads));
    CK_TRY(imp_attr_ints(im, n, "kernel_shape", nsp, 0, kshape));
    CK_TRY(imp_attr_ints(im, n, "output_padding", nsp, 0, opad));
    for (int i = 0; i < nsp; i++)
        if (kshape[i] && kshape[i] != W->dims[2 + i])
            return imp_fail_node(im, "kernel_shape does not match the weight's shape");
    if (!imp_symmetric_pads(pads, nsp, pad))
        return imp_fail_node(im, "asymmetric padding is not supported");
    const ck_onnx_tensor *B = n->n_in > 2 ? imp_const_of(im, n->in[2]) : NULL;
    if (n->n_in > 2 && n->in[2][0] && !B)
        return imp_fail_node(im, "the bias must be a constant");
    char name[CK_NAME_MAX + 1], op[24];
    CK_TRY(imp_name_for(im, n, n->in[1], name));
    cJSON *L = imp_new_layer(im, name, imp_nd_op("conv_transpose", nsp, op, sizeof op));
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    if (!cJSON_AddNumberToObject(L, "filters", (double)W->dims[1]) ||
        !imp_add_ints(L, "kernel", W->dims + 2, nsp) || !imp_add_ints(L, "stride", stride, nsp) ||
        !imp_add_ints(L, "padding", pad, nsp) || !imp_add_ints(L, "output_padding", opad, nsp) ||
        !imp_add_ints(L, "dilation", dil, nsp) || !cJSON_AddBoolToObject(L, "bias", B != NULL))
        return imp_oom(im);
    CK_TRY(imp_add_weight(im, name, "weight", W, false));
    if (B)
        CK_TRY(imp_add_weight(im, name, "bias", B, false));
    return imp_bind(im, n->out[0], name);
}
