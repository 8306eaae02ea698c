/*
 * Slices of activations: Split, Slice, and Gather of one constant index.
 */
#include "harness/model/onnx_import_internal.h"

#include <stdio.h>
#include <string.h>

/* A slice layer of `src_value` along dim [a, b), named from the node (suffix k when the
 * node makes several), bound to out_value. */
static ck_status add_slice(imp *im, const ck_onnx_node *n, const char *src_value, int k,
                           int dim, int64_t a, int64_t b, const char *out_value)
{
    char name[CK_NAME_MAX + 1], from[600];
    snprintf(from, sizeof from, "%s%s%d", n->name[0] ? n->name : n->op_type, k ? "_" : "",
             k);
    if (!k)
        snprintf(from, sizeof from, "%s", n->name[0] ? n->name : n->op_type);
    CK_TRY(imp_make_name(im, from, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "slice", src_value, out_value, &L));
    int64_t r[2] = {a, b};
    if (!cJSON_AddNumberToObject(L, "dim", dim) || !imp_add_ints(L, "range", r, 2))
        return imp_oom(im);
    return CK_OK;
}

static ck_status map_split(imp *im, const ck_onnx_node *n)
{
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    int64_t axis = imp_attr_int(n, "axis", 0);
    axis = axis < 0 ? axis + xs.ndim : axis;
    if (axis < 0 || axis >= xs.ndim)
        return imp_fail_node(im, "axis %lld is out of range",
                             (long long)imp_attr_int(n, "axis", 0));
    int64_t sizes[CK_ONNX_MAX_IO], D = xs.dim[axis], total = 0;
    const ck_onnx_attr *sa = ck_onnx_attr_find(n, "split");
    const ck_onnx_tensor *st = n->n_in > 1 && n->in[1][0] ? imp_const_of(im, n->in[1]) : NULL;
    if (n->n_in > 1 && n->in[1][0] && !st)
        return imp_fail_node(im, "the split sizes must be constants");
    for (int k = 0; k < n->n_out; k++) {
        sizes[k] = sa && k < sa->n_ints  ? sa->ints[k]
                   : st && k < st->numel ? imp_elem_i64(st, k)
                                         : (D + n->n_out - 1) / n->n_out;
        if (!sa && !st && k == n->n_out - 1)
            sizes[k] = D - total; /* equal parts, the last one smaller */
        if (sizes[k] < 1 || sizes[k] > D)
            return imp_fail_node(im, "output %d has size %lld, outside [1, %lld]", k,
                                 (long long)sizes[k], (long long)D);
        total += sizes[k];
    }
    if (total != D)
        return imp_fail_node(im, "splits %lld along axis %lld into parts of %lld in all",
                             (long long)D, (long long)axis, (long long)total);
    int64_t off = 0;
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k][0])
            CK_TRY(add_slice(im, n, n->in[0], k + 1, (int)axis, off, off + sizes[k], n->out[k]));
        off += sizes[k];
    }
    return CK_OK;
}

/* Slice with constant starts/ends (steps 1): one slice layer per sliced axis. */
static ck_status map_slice(imp *im, const ck_onnx_node *n)
{
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    const ck_onnx_tensor *c[4] = {NULL};
    for (int k = 1; k < n->n_in && k < 5; k++)
        if (n->in[k][0] && !(c[k - 1] = imp_const_of(im, n->in[k])))
            return imp_fail_node(im, "starts, ends, axes and steps must be constants");
    if (!c[0] || !c[1] || c[0]->numel != c[1]->numel || c[0]->numel > CK_MAX_DIMS)
        return imp_fail_node(im, "starts and ends must be constants of one length (opset >= 10)");
    const char *src = n->in[0];
    int made = 0, m = (int)c[0]->numel;
    for (int i = 0; i < m; i++) {
        int64_t ax = c[2] ? imp_elem_i64(c[2], i) : i;
        ax = ax < 0 ? ax + xs.ndim : ax;
        if (ax < 0 || ax >= xs.ndim || (c[3] && imp_elem_f64(c[3], i) != 1.0))
            return imp_fail_node(im, "axis out of range or a step other than 1");
        double D = (double)xs.dim[ax], s = imp_elem_f64(c[0], i), e = imp_elem_f64(c[1], i);
        s = s < 0 ? s + D : s;
        e = e < 0 ? e + D : e;
        s = s < 0 ? 0 : s > D ? D : s;
        e = e < 0 ? 0 : e > D ? D : e;
        if (!(s < e))
            return imp_fail_node(im, "an empty slice along axis %lld", (long long)ax);
        if (s == 0 && e == D)
            continue; /* the whole axis */
        bool last = true;
        for (int j = i + 1; j < m; j++) {
            int64_t axj = c[2] ? imp_elem_i64(c[2], j) : j;
            double Dj = (double)xs.dim[axj < 0 ? axj + xs.ndim : axj];
            double sj = imp_elem_f64(c[0], j), ej = imp_elem_f64(c[1], j);
            if (!((sj == 0 || sj == -Dj) && ej >= Dj))
                last = false;
        }
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s#%d", n->out[0], made);
        const char *out = last ? n->out[0] : tmp;
        CK_TRY(add_slice(im, n, src, made ? made + 1 : 0, (int)ax, (int64_t)s, (int64_t)e, out));
        src = out;
        made++;
        if (last)
            break;
    }
    if (!made) { /* every axis whole: the identity */
        const char *l = imp_layer_of(im, n->in[0]);
        return imp_bind(im, n->out[0], l);
    }
    return CK_OK;
}

/* Gather(activation, one constant index, axis): a slice of one and, for a scalar index, a
 * reshape dropping the axis. */
static ck_status map_gather_one(imp *im, const ck_onnx_node *n, const ck_onnx_tensor *ix)
{
    ck_shape xs;
    CK_TRY(imp_value_shape(im, n->in[0], &xs));
    int64_t axis = imp_attr_int(n, "axis", 0);
    axis = axis < 0 ? axis + xs.ndim : axis;
    if (axis < 0 || axis >= xs.ndim || ix->numel != 1 || ix->ndim > 1)
        return imp_fail_node(im,
                             "only a Gather of one constant index of an activation is supported");
    int64_t i = imp_elem_i64(ix, 0);
    i = i < 0 ? i + xs.dim[axis] : i;
    if (i < 0 || i >= xs.dim[axis])
        return imp_fail_node(im, "index %lld is outside [0, %lld)", (long long)imp_elem_f64(ix, 0),
                             (long long)xs.dim[axis]);
    if (ix->ndim == 1)
        return add_slice(im, n, n->in[0], 0, (int)axis, i, i + 1, n->out[0]);
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s#slice", n->out[0]);
    CK_TRY(add_slice(im, n, n->in[0], 1, (int)axis, i, i + 1, tmp));
    int64_t dims[CK_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < xs.ndim; d++)
        if (d != axis)
            dims[m++] = xs.dim[d];
    if (m < 1)
        return imp_fail_node(im, "gathers a scalar");
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(imp_one_input_layer(im, name, "reshape", tmp, n->out[0], &L));
    return imp_add_ints(L, "shape", dims, m) ? CK_OK : imp_oom(im);
}

/* Gather (an embedding, or one index of an activation), Split, Slice. */
ck_status imp_map_slicing(imp *im, const ck_onnx_node *n)
{
    const char *op = n->op_type;
    bool act = n->n_in >= 1 && imp_layer_of(im, n->in[0]);
    if (op[0] == 'G' && n->n_in == 2 && act && imp_const_of(im, n->in[1]))
        return map_gather_one(im, n, imp_const_of(im, n->in[1]));
    if (op[0] == 'G')
        return imp_map_gather(im, n);
    if (!act)
        return imp_fail_node(im, "its input is produced by no supported node");
    if (strcmp(op, "Split") == 0)
        return map_split(im, n);
    if (n->n_in < 3)
        return imp_fail_node(im, "starts and ends must be inputs (opset >= 10)");
    return map_slice(im, n);
}
