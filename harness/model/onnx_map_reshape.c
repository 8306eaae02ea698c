/*
 * Reshapes of activations: Unsqueeze, Squeeze and Reshape (a flatten, the start of an
 * attention pattern, or a reshape to a constant shape).
 */
#include "harness/model/onnx_import_internal.h"

#include <string.h>

/* Unsqueeze / Squeeze of an activation: a reshape to the shape they give (the input's
 * static shape with dims of size 1 inserted or removed). */
ck_status imp_map_squeeze(imp *im, int idx, const ck_onnx_node *n)
{
    int t = imp_sole_reader(im, n->out[0]);
    if (n->op_type[0] == 'U' && t >= 0 && strcmp(im->m->nodes[t].op_type, "Tile") == 0)
        return imp_map_repeat_chain(im, idx); /* tf2onnx's UpSampling chain */
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    const ck_onnx_attr *aa = ck_onnx_attr_find(n, "axes");
    const ck_onnx_tensor *ac = n->n_in > 1 && n->in[1][0] ? imp_const_of(im, n->in[1]) : NULL;
    if (n->n_in > 1 && n->in[1][0] && !ac)
        return imp_fail_node(im, "the axes must be a constant");
    int64_t axes[CK_MAX_DIMS];
    int k = 0;
    for (; aa && k < aa->n_ints && k < CK_MAX_DIMS; k++)
        axes[k] = aa->ints[k];
    for (; !aa && ac && k < ac->numel && k < CK_MAX_DIMS; k++)
        axes[k] = imp_elem_i64(ac, k);
    bool unsq = n->op_type[0] == 'U';
    int r = unsq ? xs.ndim + k : xs.ndim;
    if (r > CK_MAX_DIMS || (unsq && !k))
        return imp_fail_node(im, "axes give a shape of %d dims", r);
    bool mark[CK_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r || mark[a] || (!unsq && xs.dim[a] != 1))
            return imp_fail_node(im, "axis %lld is out of range%s", (long long)axes[i],
                                 unsq ? " or repeated" : " or not a dim of size 1");
        mark[a] = true;
    }
    int64_t dims[CK_MAX_DIMS];
    int m = 0;
    for (int d = 0, src = 0; d < r; d++) {
        if (unsq)
            dims[m++] = mark[d] ? 1 : xs.dim[src++];
        else if (!(k ? mark[d] : xs.dim[d] == 1))
            dims[m++] = xs.dim[d];
    }
    if (m < 1)
        return imp_fail_node(im, "squeezes every dim (a scalar activation is not supported)");
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "reshape", n->in[0], n->out[0], &L));
    return imp_add_ints(L, "shape", dims, m) ? CK_OK : imp_oom(im);
}

/* Reshape to (N, -1) or (0, -1) is a flatten; to [B, L, H, d] before a head-splitting
 * Transpose, the start of an attention pattern; any other constant shape a reshape. */
ck_status imp_map_reshape(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *s = n->n_in > 1 ? imp_const_of(im, n->in[1]) : NULL;
    if (!s)
        return imp_fail_node(im, "the target shape is computed from activations; export with "
                                 "constant folding and static shapes");
    bool matched;
    CK_TRY(imp_attn_reshape_in(im, n, s, &matched));
    if (matched)
        return CK_OK;
    if (s->numel == 2 && imp_elem_f64(s, 1) == -1.0)
        return imp_map_simple(im, n, "flatten", 1);
    if (s->numel < 1 || s->numel > CK_MAX_DIMS)
        return imp_fail_node(im, "a target shape of %lld dims is not supported",
                             (long long)s->numel);
    if (imp_is_float_type(s->data_type))
        return imp_fail_node(im, "the target shape is %s, not integers",
                             ck_onnx_type_name(s->data_type));
    int64_t dims[CK_MAX_DIMS];
    ck_shape in_shape = {0};
    bool have_shape = false;
    for (int64_t k = 0; k < s->numel; k++) {
        double v = imp_elem_f64(s, k);
        if (v == 0.0 && !imp_attr_int(n, "allowzero", 0)) { /* 0: the input's dim k */
            if (!have_shape)
                CK_TRY(imp_value_shape(im, n->in[0], &in_shape));
            have_shape = true;
            if (k >= in_shape.ndim)
                return imp_fail_node(im,
                                     "target dim %lld is 0 (copy the input's dim) but the input "
                                     "has %d dims",
                                     (long long)k, in_shape.ndim);
            v = (double)in_shape.dim[k];
        }
        if (!(v == -1.0 || (v >= 1.0 && v <= (double)CK_SIZE_CAP)))
            return imp_fail_node(im,
                                 "target dim %lld is %.0f; only sizes and one -1 are supported "
                                 "(0, copy the input's dim, is not)",
                                 (long long)k, v);
        dims[k] = (int64_t)v;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "reshape", n->in[0], n->out[0], &L));
    return imp_add_ints(L, "shape", dims, (int)s->numel) ? CK_OK : imp_oom(im);
}
