/*
 * The backends' shared host-side checks and geometry (op_check.h).
 */
#include "backends/op_check.h"

#include <stdio.h>

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
static ck_status unary_io(const char *fn, const ck_op_io *io, const ck_op_grads *g,
                          ck_error *err)
{
    if (!g && (io->n_in != 1 || !io->in[0] || !io->out))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    if (g && (io->n_in != 1 || !io->in[0] || !g->dout))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    return CK_OK;
}

/* ck_opc_pointwise over the output (forward: g NULL) or dout and din[0] (backward) */
static ck_status unary_pointwise(const char *be, const char *fn, const ck_op_io *io,
                                 const ck_op_grads *g, ck_error *err)
{
    if (!g) {
        const ck_tensor *ts[] = {io->out};
        return ck_opc_pointwise(be, fn, io->in[0], ts, 1, err);
    }
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    return ck_opc_pointwise(be, fn, io->in[0], ts, 2, err);
}

static bool is_activation(ck_op_kind k)
{
    return k == CK_OP_RELU || k == CK_OP_LEAKY_RELU || k == CK_OP_GELU || k == CK_OP_TANH ||
           k == CK_OP_SIGMOID;
}

ck_status ck_opc_activation_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                                ck_error *err)
{
    if (!is_activation(op->kind))
        return ck_fail(err, CK_ERR_INTERNAL, "activation: op %s is not an activation",
                       ck_op_kind_name(op->kind));
    CK_TRY(unary_io(ck_op_kind_name(op->kind), io, NULL, err));
    return unary_pointwise(be, ck_op_kind_name(op->kind), io, NULL, err);
}

ck_status ck_opc_activation_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                                const ck_op_grads *g, ck_error *err)
{
    if (!is_activation(op->kind))
        return ck_fail(err, CK_ERR_INTERNAL, "activation: op %s is not an activation",
                       ck_op_kind_name(op->kind));
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s backward: needs one input and dout",
                       ck_op_kind_name(op->kind));
    if (!g->din[0])
        return CK_OK;
    return unary_pointwise(be, ck_op_kind_name(op->kind), io, g, err);
}

static ck_status dropout_check_rate(const char *fn, double rate, ck_error *err)
{
    if (!(rate >= 0.0 && rate < 1.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: rate %g is outside [0, 1)", fn, rate);
    return CK_OK;
}

ck_status ck_opc_dropout_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                             ck_error *err)
{
    const char *fn = "dropout";
    CK_TRY(unary_io(fn, io, NULL, err));
    CK_TRY(dropout_check_rate(fn, op->rate, err));
    return unary_pointwise(be, fn, io, NULL, err);
}

ck_status ck_opc_dropout_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                             const ck_op_grads *g, ck_error *err)
{
    const char *fn = "dropout backward";
    CK_TRY(unary_io(fn, io, g, err));
    if (!g->din[0])
        return CK_OK;
    CK_TRY(dropout_check_rate(fn, op->rate, err));
    return unary_pointwise(be, fn, io, g, err);
}

ck_status ck_opc_noise_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                           ck_error *err)
{
    const char *fn = "gaussian_noise";
    CK_TRY(unary_io(fn, io, NULL, err));
    if (!(op->stddev >= 0.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: stddev must be >= 0, got %g", fn, op->stddev);
    return unary_pointwise(be, fn, io, NULL, err);
}

ck_status ck_opc_noise_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                           ck_error *err)
{
    const char *fn = "gaussian_noise backward";
    CK_TRY(unary_io(fn, io, g, err));
    if (!g->din[0])
        return CK_OK;
    return unary_pointwise(be, fn, io, g, err);
}

// ----------------------------------------------------------------------------
// shape ops

/* ref and t (when not NULL) have float dtypes; with `shape` set, t has ref's shape. */
static ck_status check_like(const char *be, const char *fn, const ck_tensor *ref,
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

static ck_status check_inputs(const char *fn, const ck_op_io *io, int min_in, ck_error *err)
{
    if (io->n_in < min_in || io->n_in > CK_MAX_INPUTS)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: got %d inputs, needs %d to %d", fn, io->n_in,
                       min_in, CK_MAX_INPUTS);
    for (int i = 0; i < io->n_in; i++)
        if (!io->in[i])
            return ck_fail(err, CK_ERR_INTERNAL, "%s: input %d is missing", fn, i);
    return CK_OK;
}

ck_status ck_opc_add_fwd(const char *be, const ck_op_io *io, ck_error *err)
{
    const char *fn = "add";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    for (int k = 1; k < io->n_in; k++)
        CK_TRY(check_like(be, fn, io->in[0], io->in[k], true, err));
    return check_like(be, fn, io->in[0], io->out, true, err);
}

ck_status ck_opc_add_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                         ck_error *err)
{
    const char *fn = "add backward";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    CK_TRY(check_like(be, fn, io->in[0], g->dout, true, err));
    for (int k = 0; k < io->n_in; k++)
        CK_TRY(check_like(be, fn, io->in[0], g->din[k], true, err));
    return CK_OK;
}

/* concat's layout (op_check.h), out being the output or dout */
static ck_status concat_dims(const char *be, const char *fn, const ck_op_io *io,
                             const ck_tensor *out, int64_t *N, int64_t *block,
                             int64_t *out_block, ck_error *err)
{
    const ck_tensor *x0 = io->in[0];
    if (x0->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, C, ...)", fn,
                       ck_opc_tname(x0), x0->shape.ndim);
    int64_t S = 1;
    for (int d = 2; d < x0->shape.ndim; d++)
        S *= x0->shape.dim[d];
    int64_t channels = 0;
    for (int k = 0; k < io->n_in; k++) {
        const ck_tensor *x = io->in[k];
        CK_TRY(check_like(be, fn, x0, x, false, err));
        bool same = x->shape.ndim == x0->shape.ndim;
        for (int d = 0; same && d < x0->shape.ndim; d++)
            same = d == 1 || x->shape.dim[d] == x0->shape.dim[d];
        if (!same) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s; only dim 1 "
                           "may differ", fn, ck_opc_tname(x),
                           ck_shape_str(&x->shape, a, sizeof a), ck_opc_tname(x0),
                           ck_shape_str(&x0->shape, b, sizeof b));
        }
        block[k] = x->shape.dim[1] * S;
        channels += x->shape.dim[1];
    }
    CK_TRY(check_like(be, fn, x0, out, false, err));
    if (out->shape.ndim != x0->shape.ndim ||
        ck_shape_numel(&out->shape) != x0->shape.dim[0] * channels * S ||
        out->shape.dim[0] != x0->shape.dim[0] || out->shape.dim[1] != channels)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s is not (%lld, %lld, ...)", fn,
                       ck_opc_tname(out), (long long)x0->shape.dim[0], (long long)channels);
    *N = x0->shape.dim[0];
    *out_block = channels * S;
    return CK_OK;
}

ck_status ck_opc_concat_fwd(const char *be, const ck_op_io *io, int64_t *N, int64_t *block,
                            int64_t *out_block, ck_error *err)
{
    const char *fn = "concat";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    return concat_dims(be, fn, io, io->out, N, block, out_block, err);
}

ck_status ck_opc_concat_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                            int64_t *N, int64_t *block, int64_t *out_block, ck_error *err)
{
    const char *fn = "concat backward";
    CK_TRY(check_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    CK_TRY(concat_dims(be, fn, io, g->dout, N, block, out_block, err));
    for (int k = 0; k < io->n_in; k++)
        CK_TRY(check_like(be, fn, io->in[k], g->din[k], true, err));
    return CK_OK;
}

static ck_status flatten_check(const char *be, const char *fn, const ck_tensor *x,
                               const ck_tensor *flat, ck_error *err)
{
    CK_TRY(check_like(be, fn, x, flat, false, err));
    if (x->shape.ndim < 1 || flat->shape.ndim != 2 || flat->shape.dim[0] != x->shape.dim[0] ||
        ck_shape_numel(&flat->shape) != ck_shape_numel(&x->shape)) {
        char a[128], b[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, not the flattening of %s %s",
                       fn, ck_opc_tname(flat), ck_shape_str(&flat->shape, a, sizeof a),
                       ck_opc_tname(x), ck_shape_str(&x->shape, b, sizeof b));
    }
    return CK_OK;
}

ck_status ck_opc_flatten_fwd(const char *be, const ck_op_io *io, ck_error *err)
{
    const char *fn = "flatten";
    CK_TRY(unary_io(fn, io, NULL, err));
    return flatten_check(be, fn, io->in[0], io->out, err);
}

ck_status ck_opc_flatten_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                             ck_error *err)
{
    const char *fn = "flatten backward";
    CK_TRY(unary_io(fn, io, g, err));
    CK_TRY(flatten_check(be, fn, io->in[0], g->dout, err));
    return check_like(be, fn, io->in[0], g->din[0], true, err);
}

// ----------------------------------------------------------------------------
// linear, conv

ck_status ck_opc_linear_shapes(const ck_tensor *x, const ck_tensor *w, const ck_tensor *b,
                               const ck_tensor *y, ck_linear_dims *d, ck_error *err)
{
    char s1[96], s2[96];
    if (!w)
        return ck_fail(err, CK_ERR_INTERNAL, "linear on '%s': no weight tensor",
                       ck_opc_tname(x));
    if (x->shape.ndim < 1 || w->shape.ndim != 2 ||
        w->shape.dim[1] != x->shape.dim[x->shape.ndim - 1])
        return ck_fail(err, CK_ERR_INTERNAL, "linear: input '%s' %s does not match weight '%s' %s",
                       ck_opc_tname(x), ck_shape_str(&x->shape, s1, sizeof s1),
                       ck_opc_tname(w), ck_shape_str(&w->shape, s2, sizeof s2));
    d->in = w->shape.dim[1];
    d->units = w->shape.dim[0];
    d->M = ck_shape_numel(&x->shape) / d->in;
    if (y->shape.ndim != x->shape.ndim || y->shape.dim[y->shape.ndim - 1] != d->units ||
        ck_shape_numel(&y->shape) != d->M * d->units)
        return ck_fail(err, CK_ERR_INTERNAL, "linear: output '%s' %s does not match input '%s' %s",
                       ck_opc_tname(y), ck_shape_str(&y->shape, s1, sizeof s1),
                       ck_opc_tname(x), ck_shape_str(&x->shape, s2, sizeof s2));
    if (b && ck_shape_numel(&b->shape) != d->units)
        return ck_fail(err, CK_ERR_INTERNAL, "linear: bias '%s' %s does not have %lld entries",
                       ck_opc_tname(b), ck_shape_str(&b->shape, s1, sizeof s1),
                       (long long)d->units);
    return CK_OK;
}

ck_status ck_opc_conv_fit(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                          const ck_tensor *b, const ck_tensor *y, ck_error *err)
{
    char sx[96], sw[96], sy[96];
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "conv: %d spatial dims (1 to 3 supported)", nsp);
    if (!w)
        return ck_fail(err, CK_ERR_INTERNAL, "conv%dd on '%s': no weight tensor", nsp,
                       ck_opc_tname(x));
    ck_shape_str(&x->shape, sx, sizeof sx);
    ck_shape_str(&w->shape, sw, sizeof sw);
    ck_shape_str(&y->shape, sy, sizeof sy);
    bool ok = x->shape.ndim == nsp + 2 && w->shape.ndim == nsp + 2 &&
              y->shape.ndim == nsp + 2 && w->shape.dim[1] == x->shape.dim[1] &&
              y->shape.dim[0] == x->shape.dim[0] && y->shape.dim[1] == w->shape.dim[0];
    for (int a = 0; ok && a < nsp; a++)
        ok = w->shape.dim[2 + a] == op->kernel[a];
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "conv%dd: input '%s' %s, weight '%s' %s and output '%s' %s do not fit",
                       nsp, ck_opc_tname(x), sx, ck_opc_tname(w), sw, ck_opc_tname(y), sy);
    if (b && ck_shape_numel(&b->shape) != w->shape.dim[0])
        return ck_fail(err, CK_ERR_INTERNAL, "conv%dd: bias '%s' does not have %lld entries",
                       nsp, ck_opc_tname(b), (long long)w->shape.dim[0]);
    return CK_OK;
}

// ----------------------------------------------------------------------------
// pool, upsample

/* x (N, C, s...) and y (N, C, o...) with nsp spatial dims each */
static bool same_nc(int nsp, const ck_tensor *x, const ck_tensor *y)
{
    return x->shape.ndim == nsp + 2 && y->shape.ndim == nsp + 2 &&
           y->shape.dim[0] == x->shape.dim[0] && y->shape.dim[1] == x->shape.dim[1];
}

const char *ck_opc_pool_name(const ck_op_params *op)
{
    return op->kind == CK_OP_MAXPOOL ? "maxpool" : "avgpool";
}

ck_status ck_opc_pool_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                            bool *is_max, ck_pool_geom *g, ck_error *err)
{
    if (op->kind != CK_OP_MAXPOOL && op->kind != CK_OP_AVGPOOL)
        return ck_fail(err, CK_ERR_INTERNAL, "pool: op kind %s is not a pooling op",
                       ck_op_kind_name(op->kind));
    *is_max = op->kind == CK_OP_MAXPOOL;
    const char *what = ck_opc_pool_name(op);
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %d spatial dims (1 to 3 supported)", what,
                       nsp);
    char sx[96], sy[96];
    bool ok = same_nc(nsp, x, y);
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->kernel[a] = s < 0 ? 1 : op->kernel[s];
        g->stride[a] = s < 0 ? 1 : op->stride[s];
        ok = g->kernel[a] >= 1 && g->stride[a] >= 1 && g->out[a] >= 1 &&
             (g->out[a] - 1) * g->stride[a] + g->kernel[a] <= g->in[a];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "%s%dd: output '%s' %s does not fit input '%s' %s with its windows",
                       what, nsp, ck_opc_tname(y), ck_shape_str(&y->shape, sy, sizeof sy),
                       ck_opc_tname(x), ck_shape_str(&x->shape, sx, sizeof sx));
    return CK_OK;
}

ck_status ck_opc_upsample_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                                ck_upsample_geom *g, ck_error *err)
{
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "upsample: %d spatial dims (1 to 3 supported)",
                       nsp);
    char sx[96], sy[96];
    bool ok = same_nc(nsp, x, y);
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->scale[a] = s < 0 ? 1 : op->scale[s];
        ok = g->scale[a] >= 1 && g->out[a] == g->in[a] * g->scale[a];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "upsample%dd: output '%s' %s is not input '%s' %s times scale", nsp,
                       ck_opc_tname(y), ck_shape_str(&y->shape, sy, sizeof sy),
                       ck_opc_tname(x), ck_shape_str(&x->shape, sx, sizeof sx));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// batchnorm, layernorm

/* t is NULL, or has a float dtype and `numel` elements (numel < 0: any count). */
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
static ck_status ce_check(const ck_tensor *y, const ck_tensor *target, ck_ncs_dims *d,
                          ck_error *err)
{
    char a[128], b[128];
    if (y->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INPUT, "cross_entropy: %s has shape %s, needs (N, C, ...)",
                       ck_opc_tname(y), ck_shape_str(&y->shape, a, sizeof a));
    if (target->dtype != CK_I32)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cross_entropy: target %s is %s, expected i32",
                       ck_opc_tname(target), ck_dtype_name(target->dtype));
    bool ok = target->shape.ndim == y->shape.ndim - 1 && target->shape.dim[0] == y->shape.dim[0];
    for (int i = 1; ok && i < target->shape.ndim; i++)
        ok = target->shape.dim[i] == y->shape.dim[i + 1];
    if (!ok)
        return ck_fail(err, CK_ERR_INPUT, "cross_entropy: target %s has shape %s, expected %s "
                       "without dim 1 (%s)", ck_opc_tname(target),
                       ck_shape_str(&target->shape, a, sizeof a), ck_opc_tname(y),
                       ck_shape_str(&y->shape, b, sizeof b));
    d->N = y->shape.dim[0];
    d->C = y->shape.dim[1];
    d->S = ck_shape_numel(&y->shape) / (d->N * d->C);
    return CK_OK;
}

ck_status ck_opc_ce_classes(const ck_tensor *target, const int32_t *t, const ck_ncs_dims *d,
                            ck_error *err)
{
    const int64_t numel = d->N * d->S;
    for (int64_t i = 0; i < numel; i++) {
        if (t[i] < 0 || t[i] >= d->C) {
            int64_t idx[CK_MAX_DIMS];
            ck_shape_unflatten(&target->shape, i, idx);
            char where[160];
            size_t used = 0;
            for (int k = 0; k < target->shape.ndim && used < sizeof where; k++) {
                int w = snprintf(where + used, sizeof where - used, "%s%lld", k ? ", " : "",
                                 (long long)idx[k]);
                if (w > 0)
                    used += (size_t)w;
            }
            return ck_fail(err, CK_ERR_INPUT, "cross_entropy: class index %s[%s] = %d is "
                           "outside [0, %lld)", ck_opc_tname(target), where, t[i],
                           (long long)d->C);
        }
    }
    return CK_OK;
}

ck_status ck_opc_loss(const char *be, ck_loss_kind kind, const ck_tensor *y,
                      const ck_tensor *target, ck_ncs_dims *d, ck_error *err)
{
    const char *fn = ck_loss_kind_name(kind);
    char what[64];
    snprintf(what, sizeof what, "%s loss", fn);
    const ck_tensor *ys[] = {y};
    CK_TRY(ck_opc_float_dtypes(be, what, ys, 1, err));
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        return CK_OK;
    case CK_LOSS_MSE:
        if (!target)
            return ck_fail(err, CK_ERR_INTERNAL, "mse loss: no target");
        if (!ck_opc_is_float(target->dtype))
            return ck_fail(err, CK_ERR_UNSUPPORTED, "mse loss: target %s is %s, expected a "
                           "float dtype", ck_opc_tname(target), ck_dtype_name(target->dtype));
        if (!ck_shape_equal(&target->shape, &y->shape)) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INPUT, "mse loss: target %s has shape %s, %s has %s",
                           ck_opc_tname(target), ck_shape_str(&target->shape, a, sizeof a),
                           ck_opc_tname(y), ck_shape_str(&y->shape, b, sizeof b));
        }
        return CK_OK;
    case CK_LOSS_CROSS_ENTROPY:
        if (!target)
            return ck_fail(err, CK_ERR_INTERNAL, "cross_entropy loss: no target");
        return ce_check(y, target, d, err);
    default:
        return ck_fail(err, CK_ERR_UNSUPPORTED, "unknown loss kind %d", (int)kind);
    }
}

ck_status ck_opc_loss_dy(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *dy,
                         ck_error *err)
{
    if (!dy || !ck_opc_is_float(dy->dtype) || !ck_shape_equal(&dy->shape, &y->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "%s loss backward: the gradient tensor must have "
                       "a float dtype and the shape of %s", ck_loss_kind_name(kind),
                       ck_opc_tname(y));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// optimizer

/* t is present (when `required`), has a float dtype and the parameter's element count. */
static ck_status check_like_param(const char *be, const char *fn, const ck_tensor *param,
                                  const ck_tensor *t, const char *role, bool required,
                                  ck_error *err)
{
    if (!t)
        return required ? ck_fail(err, CK_ERR_INTERNAL, "%s: %s needs a %s tensor", fn,
                                  ck_opc_tname(param), role)
                        : CK_OK;
    if (!ck_opc_is_float(t->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s %s of %s is %s; the %s backend "
                       "computes in fp32, fp64, fp16 and bf16", fn, role, ck_opc_tname(t),
                       ck_opc_tname(param), ck_dtype_name(t->dtype), be);
    if (ck_shape_numel(&t->shape) != ck_shape_numel(&param->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s %s has %lld elements, %s has %lld", fn,
                       role, ck_opc_tname(t), (long long)ck_shape_numel(&t->shape),
                       ck_opc_tname(param), (long long)ck_shape_numel(&param->shape));
    return CK_OK;
}

ck_status ck_opc_optimizer_args(const char *be, const char *fn, const ck_optimizer *opt,
                                int64_t step, const ck_tensor *param, const ck_tensor *grad,
                                const ck_tensor *state0, const ck_tensor *state1,
                                ck_error *err)
{
    if (step < 1)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: step %lld, steps count from 1", fn,
                       (long long)step);
    CK_TRY(check_like_param(be, fn, param, grad, "gradient", true, err));
    const bool uses0 = opt->kind == CK_OPT_MOMENTUM || opt->kind == CK_OPT_ADAM ||
                       opt->kind == CK_OPT_ADAMW;
    const bool uses1 = opt->kind == CK_OPT_ADAM || opt->kind == CK_OPT_ADAMW;
    CK_TRY(check_like_param(be, fn, param, state0, uses1 ? "first moment" : "momentum buffer",
                         uses0, err));
    return check_like_param(be, fn, param, state1, "second moment", uses1, err);
}
