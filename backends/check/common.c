/*
 * The host-side checks every op family shares (check.h): dtypes, element counts, the
 * presence and shape of tensors.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

// ----------------------------------------------------------------------------
// dtypes

ck_status ck_opc_float_dtypes(const char *be, const char *op, const ck_tensor *const *t, int n,
                              ck_error *err)
{
    for (int i = 0; i < n; i++)
        if (t[i] && !ck_opc_is_float(t[i]->dtype))
            return ck_fail(err, CK_ERR_UNSUPPORTED,
                           "%s: dtype %s of '%s' is not supported by the %s backend "
                           "(fp32, fp64, fp16 and bf16 only)", op,
                           ck_dtype_name(t[i]->dtype), ck_opc_tname(t[i]), be);
    return CK_OK;
}

ck_dtype ck_opc_common_dtype(const ck_tensor *const *t, int n)
{
    ck_dtype dt = CK_DTYPE_COUNT;
    for (int i = 0; i < n; i++) {
        if (!t[i])
            continue;
        if (dt == CK_DTYPE_COUNT)
            dt = t[i]->dtype;
        else if (t[i]->dtype != dt)
            return CK_DTYPE_COUNT;
    }
    return dt;
}

ck_status ck_opc_pointwise(const char *be, const char *fn, const ck_tensor *x,
                           const ck_tensor *const *ts, int n, ck_error *err)
{
    const ck_tensor *xs[] = {x};
    CK_TRY(ck_opc_float_dtypes(be, fn, xs, 1, err));
    CK_TRY(ck_opc_float_dtypes(be, fn, ts, n, err));
    int64_t numel = ck_shape_numel(&x->shape);
    for (int i = 0; i < n; i++) {
        const ck_tensor *t = ts[i];
        if (t && ck_shape_numel(&t->shape) != numel)
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has %lld elements, %s has %lld", fn,
                           ck_opc_tname(t), (long long)ck_shape_numel(&t->shape),
                           ck_opc_tname(x), (long long)numel);
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// pointwise ops

/* one input and an output (forward: g NULL) or dout (backward) */
ck_status ck_opc_unary_io(const char *fn, const ck_op_io *io, const ck_op_grads *g,
                          ck_error *err)
{
    if (!g && (io->n_in != 1 || !io->in[0] || !io->out))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    if (g && (io->n_in != 1 || !io->in[0] || !g->dout))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    return CK_OK;
}

/* ck_opc_pointwise over the output (forward: g NULL) or dout and din[0] (backward) */
ck_status ck_opc_unary_pointwise(const char *be, const char *fn, const ck_op_io *io,
                                 const ck_op_grads *g, ck_error *err)
{
    if (!g) {
        const ck_tensor *ts[] = {io->out};
        return ck_opc_pointwise(be, fn, io->in[0], ts, 1, err);
    }
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    return ck_opc_pointwise(be, fn, io->in[0], ts, 2, err);
}

ck_status ck_opc_like(const char *be, const char *fn, const ck_tensor *ref,
                            const ck_tensor *t, bool shape, ck_error *err)
{
    const ck_tensor *ts[] = {ref, t};
    CK_TRY(ck_opc_float_dtypes(be, fn, ts, 2, err));
    if (!t)
        return CK_OK;
    if (shape && !ck_shape_equal(&t->shape, &ref->shape)) {
        char a[128], b[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s", fn,
                       ck_opc_tname(t), ck_shape_str(&t->shape, a, sizeof a), ck_opc_tname(ref),
                       ck_shape_str(&ref->shape, b, sizeof b));
    }
    return CK_OK;
}

ck_status ck_opc_inputs(const char *fn, const ck_op_io *io, int min_in, ck_error *err)
{
    if (io->n_in < min_in || io->n_in > CK_MAX_INPUTS)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: got %d inputs, needs %d to %d", fn, io->n_in,
                       min_in, CK_MAX_INPUTS);
    for (int i = 0; i < io->n_in; i++)
        if (!io->in[i])
            return ck_fail(err, CK_ERR_INTERNAL, "%s: input %d is missing", fn, i);
    return CK_OK;
}

ck_status ck_opc_need(const char *fn, const ck_tensor *t, const char *what, ck_error *err)
{
    if (!t)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: missing %s", fn, what);
    return CK_OK;
}

int64_t ck_opc_prod(const ck_shape *s, int from, int to)
{
    int64_t p = 1;
    for (int d = from; d < to; d++)
        p *= s->dim[d];
    return p;
}


/* x (N, C, s...) and y (N, C, o...) with nsp spatial dims each */
bool ck_opc_same_nc(int nsp, const ck_tensor *x, const ck_tensor *y)
{
    return x->shape.ndim == nsp + 2 && y->shape.ndim == nsp + 2 &&
           y->shape.dim[0] == x->shape.dim[0] && y->shape.dim[1] == x->shape.dim[1];
}

ck_status ck_opc_relu_over_input(const ck_op_params *op, const ck_op_io *io,
                                 const ck_op_grads *g, ck_error *err)
{
    const ck_tensor *r = io->n_in == 1 ? io->in[0] : NULL, *d = g->din[0];
    if (!ck_backward_relu_over_input(op->kind) || !r || !d || !r->data ||
        r->data != d->data || r->dtype != d->dtype || !ck_opc_is_float(d->dtype) ||
        !ck_shape_equal(&r->shape, &d->shape) || g->dweight || g->dbias)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "%s backward: a fused relu needs its input gradient in the input's own "
                       "buffer, same dtype and shape, without weight or bias gradients",
                       ck_op_kind_name(op->kind));
    return CK_OK;
}

ck_status ck_opc_loss_relu_over(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *dy,
                                ck_error *err)
{
    if ((kind != CK_LOSS_MEAN && kind != CK_LOSS_SUM && kind != CK_LOSS_MSE) || !y || !dy ||
        y->data != dy->data || y->dtype != dy->dtype)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "%s loss backward: a fused relu needs mean, sum or mse and the gradient "
                       "in the prediction's own buffer", ck_loss_kind_name(kind));
    return CK_OK;
}
