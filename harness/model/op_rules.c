/*
 * Rules several op families share (op_rules.h).
 */
#include "harness/model/op_rules.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *spatial_layout(int nsp)
{
    switch (nsp) {
    case 1: return "(N, C, L)";
    case 2: return "(N, C, H, W)";
    case 3: return "(N, C, D, H, W)";
    default: return "(N, C, ...)";
    }
}

ck_status ck_op_need_min_rank(const ck_op_params *op, const ck_shape *in, int min_rank,
                              const char *layout, ck_error *err)
{
    char s[128];
    if (in->ndim >= min_rank)
        return CK_OK;
    return ck_fail(err, CK_ERR_INPUT, "%s needs an input of rank >= %d %s, got %s",
                   ck_op_display_name(op), min_rank, layout, ck_shape_str(in, s, sizeof s));
}

ck_status ck_op_need_spatial_rank(const ck_op_params *op, const ck_shape *in, ck_error *err)
{
    char s[128];
    if (in->ndim == 2 + op->nsp)
        return CK_OK;
    return ck_fail(err, CK_ERR_INPUT, "%s needs a rank-%d input %s, got %s",
                   ck_op_display_name(op), 2 + op->nsp, spatial_layout(op->nsp),
                   ck_shape_str(in, s, sizeof s));
}

ck_status ck_op_resolve_dim(const char *op, const char *what, int dim, int ndim, int *out,
                            ck_error *err)
{
    int d = dim < 0 ? ndim + dim : dim;
    if (d < 0 || d >= ndim)
        return ck_fail(err, CK_ERR_INPUT, "%s: %s %d is out of range for an input of rank %d",
                       op, what, dim, ndim);
    *out = d;
    return CK_OK;
}

bool ck_op_broadcast_shapes(const ck_shape *a, const ck_shape *b, ck_shape *y)
{
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    memset(y, 0, sizeof *y);
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        const int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        const int64_t va = da >= 0 ? a->dim[da] : 1, vb = db >= 0 ? b->dim[db] : 1;
        if (va != vb && va != 1 && vb != 1)
            return false;
        y->dim[d] = va == 1 ? vb : va;
    }
    return true;
}

/* Input i as a message names it: "up" [2, 4, 8] or input 1 [2, 4, 8]. */
static const char *input_label(const char *const *names, int i, const ck_shape *s, char *buf,
                               size_t n)
{
    char dims[128];
    ck_shape_str(s, dims, sizeof dims);
    if (names)
        snprintf(buf, n, "\"%s\" %s", names[i], dims);
    else
        snprintf(buf, n, "input %d %s", i, dims);
    return buf;
}

ck_status ck_op_check_join_shapes(const ck_op_params *op, int n_in, const ck_shape *in,
                                  const char *const *names, ck_error *err)
{
    char a[200], b[200];
    if (op->kind == CK_OP_CONCAT && in[0].ndim < 2)
        return ck_fail(err, CK_ERR_INPUT, "concat needs inputs of rank >= 2 (N, C, ...), got %s",
                       input_label(names, 0, &in[0], a, sizeof a));
    if (op->kind == CK_OP_ADD && n_in == 2) { /* two inputs may broadcast (numpy rules) */
        ck_shape y;
        if (ck_op_broadcast_shapes(&in[0], &in[1], &y))
            return CK_OK;
        return ck_fail(err, CK_ERR_INPUT,
                       "inputs %s and %s differ in shape and do not broadcast (add needs one "
                       "shape, or two that broadcast as numpy's)",
                       input_label(names, 0, &in[0], a, sizeof a),
                       input_label(names, 1, &in[1], b, sizeof b));
    }
    int cd = 1; /* concat's dim */
    if (op->kind == CK_OP_CONCAT &&
        ck_op_resolve_dim("concat", "dim", op->dim, in[0].ndim, &cd, err) != CK_OK)
        return CK_ERR_INPUT;
    for (int i = 1; i < n_in; i++) {
        if (op->kind != CK_OP_CONCAT) {
            if (!ck_shape_equal(&in[0], &in[i]))
                return ck_fail(err, CK_ERR_INPUT,
                               "inputs %s and %s differ in shape (%s needs one shape)",
                               input_label(names, 0, &in[0], a, sizeof a),
                               input_label(names, i, &in[i], b, sizeof b),
                               ck_op_kind_name(op->kind));
            continue;
        }
        bool same = in[i].ndim == in[0].ndim;
        for (int d = 0; same && d < in[0].ndim; d++)
            if (d != cd && in[i].dim[d] != in[0].dim[d])
                same = false;
        if (!same)
            return ck_fail(err, CK_ERR_INPUT,
                           "inputs %s and %s differ outside dim %d (concat joins along `dim` "
                           "only)",
                           input_label(names, 0, &in[0], a, sizeof a),
                           input_label(names, i, &in[i], b, sizeof b), cd);
    }
    return CK_OK;
}

ck_param_spec ck_op_spec(const char *suffix, ck_shape shape, ck_dtype dtype, ck_init_kind init,
                         double a)
{
    ck_param_spec p;
    p.suffix = suffix;
    p.shape = shape;
    p.dtype = dtype;
    p.init = init;
    p.a = a;
    return p;
}

ck_shape ck_op_shape2(int ndim, int64_t d0, int64_t d1)
{
    ck_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    s.dim[0] = d0;
    s.dim[1] = d1;
    return s;
}

/* A linear/conv layer's weight and (op.bias) bias under its init scheme (ops.h). */
void ck_op_weight_bias_specs(ck_node *node, ck_shape w, int64_t out, double fan_in,
                             double fan_out)
{
    ck_init_kind wk = CK_INIT_UNIFORM, bk = CK_INIT_CONST;
    double wa = 0.0, ba = 0.0;
    switch ((ck_init_scheme)node->op.init) {
    case CK_INIT_TORCH_DEFAULT: /* U(+-1/sqrt(fan_in)) for weight and bias */
        wa = 1.0 / sqrt(fan_in);
        bk = CK_INIT_UNIFORM;
        ba = wa;
        break;
    case CK_INIT_KAIMING_NORMAL: wk = CK_INIT_NORMAL; wa = sqrt(2.0 / fan_in); break;
    case CK_INIT_KAIMING_UNIFORM: wa = sqrt(6.0 / fan_in); break;
    case CK_INIT_XAVIER_UNIFORM: wa = sqrt(6.0 / (fan_in + fan_out)); break;
    case CK_INIT_XAVIER_NORMAL: wk = CK_INIT_NORMAL; wa = sqrt(2.0 / (fan_in + fan_out)); break;
    case CK_INIT_ZEROS: wk = CK_INIT_CONST; break;
    }
    node->params[node->n_params++] = ck_op_spec("weight", w, CK_F32, wk, wa);
    if (node->op.bias)
        node->params[node->n_params++] =
            ck_op_spec("bias", ck_op_shape2(1, out, 0), CK_F32, bk, ba);
}
