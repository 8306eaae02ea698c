/*
 * Host-side checks of the norm family (check.h): batchnorm, layernorm, rmsnorm,
 * groupnorm.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

static ck_status norm_tensor(const char *be, const char *fn, const ck_tensor *t, int64_t numel,
                             ck_error *err)
{
    if (!t)
        return CK_OK;
    const ck_tensor *ts[] = {t};
    CK_TRY(ck_opc_float_dtypes(be, fn, ts, 1, err));
    if (numel >= 0 && ck_shape_numel(&t->shape) != numel)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has %lld elements, expected %lld", fn,
                       ck_opc_tname(t), (long long)ck_shape_numel(&t->shape), (long long)numel);
    return CK_OK;
}

/* `saved` has its own float dtype and holds 2 x rows values. */
static ck_status norm_saved(const char *fn, const ck_tensor *saved, int64_t rows,
                            ck_error *err)
{
    if (!saved)
        return CK_OK;
    if (!ck_opc_is_float(saved->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: saved tensor %s is %s, expected a float "
                       "dtype", fn, ck_opc_tname(saved), ck_dtype_name(saved->dtype));
    if (ck_shape_numel(&saved->shape) != 2 * rows)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: saved tensor %s has %lld elements, "
                       "expected 2 x %lld", fn, ck_opc_tname(saved),
                       (long long)ck_shape_numel(&saved->shape), (long long)rows);
    return CK_OK;
}

/* the input, parameters, running buffers and saved statistics of a batchnorm call */
static ck_status bn_check_io(const char *be, const char *fn, const ck_op_params *op,
                             const ck_op_io *io, ck_ncs_dims *d, ck_error *err)
{
    if (io->n_in != 1 || !io->in[0])
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs exactly one input", fn);
    const ck_tensor *x = io->in[0];
    CK_TRY(norm_tensor(be, fn, x, -1, err));
    if (x->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, C, ...)", fn,
                       ck_opc_tname(x), x->shape.ndim);
    d->N = x->shape.dim[0];
    d->C = x->shape.dim[1];
    d->S = 1;
    for (int i = 2; i < x->shape.ndim; i++)
        d->S *= x->shape.dim[i];
    CK_TRY(norm_tensor(be, fn, io->weight, d->C, err));
    CK_TRY(norm_tensor(be, fn, io->bias, d->C, err));
    CK_TRY(norm_tensor(be, fn, io->running_mean, d->C, err));
    CK_TRY(norm_tensor(be, fn, io->running_var, d->C, err));
    CK_TRY(norm_saved(fn, io->saved, d->C, err));
    if (io->num_batches_tracked && (io->num_batches_tracked->dtype != CK_I64 ||
                                    ck_shape_numel(&io->num_batches_tracked->shape) != 1))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s must be one i64", fn,
                       ck_opc_tname(io->num_batches_tracked));
    if (op->eval && (!io->running_mean || !io->running_var))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: eval mode needs running_mean and running_var",
                       fn);
    if (!op->eval && d->N * d->S < 2)
        return ck_fail(err, CK_ERR_INPUT, "%s: %s has %lld value per channel; training mode "
                       "needs more than 1 (as PyTorch)", fn, ck_opc_tname(x),
                       (long long)(d->N * d->S));
    return CK_OK;
}

ck_status ck_opc_batchnorm_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               ck_ncs_dims *d, ck_error *err)
{
    const char *fn = "batchnorm";
    CK_TRY(bn_check_io(be, fn, op, io, d, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    return norm_tensor(be, fn, io->out, ck_shape_numel(&io->in[0]->shape), err);
}

/* a normalisation's backward: the saved statistics, dout, and gradients with x's element
 * count (dout, din[0]) or `params` entries (dweight, dbias) */
static ck_status norm_grads(const char *be, const char *fn, const ck_op_io *io,
                            const ck_op_grads *g, int64_t numel, int64_t params,
                            ck_error *err)
{
    if (!io->saved)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs the saved (mean, invstd) tensor", fn);
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    CK_TRY(norm_tensor(be, fn, g->dout, numel, err));
    CK_TRY(norm_tensor(be, fn, g->din[0], numel, err));
    CK_TRY(norm_tensor(be, fn, g->dweight, params, err));
    return norm_tensor(be, fn, g->dbias, params, err);
}

ck_status ck_opc_batchnorm_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               const ck_op_grads *g, ck_ncs_dims *d, ck_error *err)
{
    const char *fn = "batchnorm backward";
    CK_TRY(bn_check_io(be, fn, op, io, d, err));
    return norm_grads(be, fn, io, g, ck_shape_numel(&io->in[0]->shape), d->C, err);
}

/* the input, parameters and saved statistics of a layernorm call */
static ck_status ln_check_io(const char *be, const char *fn, const ck_op_params *op,
                             const ck_op_io *io, int64_t *N, int64_t *D, ck_error *err)
{
    if (io->n_in != 1 || !io->in[0])
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs exactly one input", fn);
    const ck_tensor *x = io->in[0];
    CK_TRY(norm_tensor(be, fn, x, -1, err));
    if (x->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, ...)", fn,
                       ck_opc_tname(x), x->shape.ndim);
    /* rows of D values: the trailing normalized_shape dims, or every non-batch dim */
    const int k = op && op->n_norm > 0 ? op->n_norm : x->shape.ndim - 1;
    if (k < 1 || k > x->shape.ndim)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %d normalised dims for %s of rank %d", fn, k,
                       ck_opc_tname(x), x->shape.ndim);
    *D = 1;
    for (int d = x->shape.ndim - k; d < x->shape.ndim; d++)
        *D *= x->shape.dim[d];
    *N = ck_shape_numel(&x->shape) / *D;
    CK_TRY(norm_tensor(be, fn, io->weight, *D, err));
    CK_TRY(norm_tensor(be, fn, io->bias, *D, err));
    return norm_saved(fn, io->saved, *N, err);
}

ck_status ck_opc_layernorm_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               int64_t *N, int64_t *D, ck_error *err)
{
    const char *fn = "layernorm";
    CK_TRY(ln_check_io(be, fn, op, io, N, D, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    return norm_tensor(be, fn, io->out, *N * *D, err);
}

ck_status ck_opc_layernorm_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               const ck_op_grads *g, int64_t *N, int64_t *D, ck_error *err)
{
    const char *fn = "layernorm backward";
    CK_TRY(ln_check_io(be, fn, op, io, N, D, err));
    return norm_grads(be, fn, io, g, *N * *D, *D, err);
}

// ----------------------------------------------------------------------------
// losses

/* The target's shape is y's without dim 1 and its dtype i32; fills *d. */
/* ------------------------------------------------------------------------------ norms */

ck_status ck_opc_norm_rows(const char *be, const char *fn, const ck_op_params *op,
                        const ck_tensor *x, const ck_tensor *y, const ck_tensor *w,
                        int64_t *R, int64_t *D, ck_error *err)
{
    CK_TRY(ck_opc_need(fn, x, "input", err));
    CK_TRY(ck_opc_need(fn, y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {y, w};
    CK_TRY(ck_opc_pointwise(be, fn, x, ts, 1, err));
    CK_TRY(ck_opc_float_dtypes(be, fn, ts + 1, 1, err));
    const int k = op->n_norm > 0 ? op->n_norm : x->shape.ndim - 1;
    char s1[96];
    if (k < 1 || k > x->shape.ndim)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %d normalised dims for input '%s' %s", fn, k,
                       ck_opc_tname(x), SH(x, s1));
    *D = ck_opc_prod(&x->shape, x->shape.ndim - k, x->shape.ndim);
    *R = ck_shape_numel(&x->shape) / *D;
    if (w && ck_shape_numel(&w->shape) != *D)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: weight '%s' has %lld elements, not %lld", fn,
                       ck_opc_tname(w), (long long)ck_shape_numel(&w->shape), (long long)*D);
    return CK_OK;
}

ck_status ck_opc_groupnorm(const char *be, const ck_op_params *op, const ck_tensor *x,
                             const ck_tensor *y, const ck_tensor *w, const ck_tensor *b,
                             int64_t *N, int64_t *C, int64_t *S, ck_error *err)
{
    CK_TRY(ck_opc_need("groupnorm", x, "input", err));
    CK_TRY(ck_opc_need("groupnorm", y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {y};
    CK_TRY(ck_opc_pointwise(be, "groupnorm", x, ts, 1, err));
    const ck_tensor *p[] = {w, b};
    CK_TRY(ck_opc_float_dtypes(be, "groupnorm", p, 2, err));
    char s1[96];
    if (x->shape.ndim < 2 || op->groups < 1 || x->shape.dim[1] % op->groups != 0)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "groupnorm: input '%s' %s does not split into %lld groups of channels",
                       ck_opc_tname(x), SH(x, s1), (long long)op->groups);
    *N = x->shape.dim[0];
    *C = x->shape.dim[1];
    *S = ck_opc_prod(&x->shape, 2, x->shape.ndim);
    for (int i = 0; i < 2; i++)
        if (p[i] && ck_shape_numel(&p[i]->shape) != *C)
            return ck_fail(err, CK_ERR_INTERNAL, "groupnorm: '%s' has %lld elements, not %lld",
                           ck_opc_tname(p[i]), (long long)ck_shape_numel(&p[i]->shape),
                           (long long)*C);
    return CK_OK;
}

