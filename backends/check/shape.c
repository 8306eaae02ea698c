/*
 * Host-side checks of the shape family (check.h): concat, flatten, reshape, permute.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

/* concat along op->dim: N = the product of the dims before it, block[k] = input k's dim
 * times the product of the dims after it (dim 1: N and the channels times spatial) */
static ck_status concat_dims(const char *be, const char *fn, const ck_op_params *op,
                             const ck_op_io *io, const ck_tensor *out, int64_t *N,
                             int64_t *block, int64_t *out_block, ck_error *err)
{
    const ck_tensor *x0 = io->in[0];
    const int cd = op->dim;
    if (x0->shape.ndim < 2 || cd < 0 || cd >= x0->shape.ndim)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, C, ...) and dim %d "
                       "inside it", fn, ck_opc_tname(x0), x0->shape.ndim, cd);
    int64_t S = 1, outer = 1;
    for (int d = cd + 1; d < x0->shape.ndim; d++)
        S *= x0->shape.dim[d];
    for (int d = 0; d < cd; d++)
        outer *= x0->shape.dim[d];
    int64_t channels = 0;
    for (int k = 0; k < io->n_in; k++) {
        const ck_tensor *x = io->in[k];
        CK_TRY(ck_opc_like(be, fn, x0, x, false, err));
        bool same = x->shape.ndim == x0->shape.ndim;
        for (int d = 0; same && d < x0->shape.ndim; d++)
            same = d == cd || x->shape.dim[d] == x0->shape.dim[d];
        if (!same) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s; only dim %d "
                           "may differ", fn, ck_opc_tname(x),
                           ck_shape_str(&x->shape, a, sizeof a), ck_opc_tname(x0),
                           ck_shape_str(&x0->shape, b, sizeof b), cd);
        }
        block[k] = x->shape.dim[cd] * S;
        channels += x->shape.dim[cd];
    }
    CK_TRY(ck_opc_like(be, fn, x0, out, false, err));
    bool ok = out->shape.ndim == x0->shape.ndim && out->shape.dim[cd] == channels;
    for (int d = 0; ok && d < x0->shape.ndim; d++)
        ok = d == cd || out->shape.dim[d] == x0->shape.dim[d];
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s is not the inputs joined along dim %d (%lld "
                       "in all)", fn, ck_opc_tname(out), cd, (long long)channels);
    *N = outer;
    *out_block = channels * S;
    return CK_OK;
}

ck_status ck_opc_slice(const char *be, const ck_op_params *op, const ck_op_io *io,
                       const ck_op_grads *g, int64_t *outer, int64_t *D, int64_t *inner,
                       ck_error *err)
{
    const char *fn = g ? "slice backward" : "slice";
    if (io->n_in != 1 || !io->in[0])
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input", fn);
    const ck_tensor *x = io->in[0], *y = g ? g->dout : io->out;
    if (!y)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no %s", fn, g ? "dout" : "output tensor");
    CK_TRY(ck_opc_like(be, fn, x, y, false, err));
    int d = op->dim;
    int64_t a = op->slice_range[0], b = op->slice_range[1];
    bool ok = d >= 0 && d < x->shape.ndim && y->shape.ndim == x->shape.ndim && 0 <= a && a < b &&
              b <= x->shape.dim[d] && y->shape.dim[d] == b - a;
    for (int k = 0; ok && k < x->shape.ndim; k++)
        ok = k == d || y->shape.dim[k] == x->shape.dim[k];
    if (!ok) {
        char s1[128], s2[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s %s is not %s sliced [%lld, %lld) along "
                       "dim %d", fn, ck_opc_tname(y), SH(y, s1), SH(x, s2), (long long)a,
                       (long long)b, d);
    }
    if (g)
        CK_TRY(ck_opc_like(be, fn, x, g->din[0], true, err));
    *outer = *inner = 1;
    for (int k = 0; k < d; k++)
        *outer *= x->shape.dim[k];
    for (int k = d + 1; k < x->shape.ndim; k++)
        *inner *= x->shape.dim[k];
    *D = x->shape.dim[d];
    return CK_OK;
}

ck_status ck_opc_concat_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                            int64_t *N, int64_t *block, int64_t *out_block, ck_error *err)
{
    const char *fn = "concat";
    CK_TRY(ck_opc_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    return concat_dims(be, fn, op, io, io->out, N, block, out_block, err);
}

ck_status ck_opc_concat_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                            const ck_op_grads *g, int64_t *N, int64_t *block, int64_t *out_block,
                            ck_error *err)
{
    const char *fn = "concat backward";
    CK_TRY(ck_opc_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    CK_TRY(concat_dims(be, fn, op, io, g->dout, N, block, out_block, err));
    for (int k = 0; k < io->n_in; k++)
        CK_TRY(ck_opc_like(be, fn, io->in[k], g->din[k], true, err));
    return CK_OK;
}

static ck_status flatten_check(const char *be, const char *fn, const ck_tensor *x,
                               const ck_tensor *flat, ck_error *err)
{
    CK_TRY(ck_opc_like(be, fn, x, flat, false, err));
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
    CK_TRY(ck_opc_unary_io(fn, io, NULL, err));
    return flatten_check(be, fn, io->in[0], io->out, err);
}

ck_status ck_opc_flatten_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                             ck_error *err)
{
    const char *fn = "flatten backward";
    CK_TRY(ck_opc_unary_io(fn, io, g, err));
    CK_TRY(flatten_check(be, fn, io->in[0], g->dout, err));
    return ck_opc_like(be, fn, io->in[0], g->din[0], true, err);
}

// ----------------------------------------------------------------------------
// linear, conv

/* ---------------------------------------------------------------------- reshape, permute */

ck_status ck_opc_permute(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, ck_error *err)
{
    CK_TRY(ck_opc_need("permute", x, "input", err));
    CK_TRY(ck_opc_need("permute", y, "output", err));
    const ck_tensor *all[] = {x, y};
    CK_TRY(ck_opc_float_dtypes(be, "permute", all, 2, err));
    char s1[96], s2[96];
    bool ok = op->n_perm == x->shape.ndim && y->shape.ndim == x->shape.ndim;
    unsigned seen = 0;
    for (int d = 0; ok && d < op->n_perm; d++) {
        int p = op->perm[d];
        ok = p >= 0 && p < x->shape.ndim && !(seen & (1u << p)) &&
             y->shape.dim[d] == x->shape.dim[p];
        seen |= 1u << (p & 31);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "permute: output '%s' %s is not input '%s' %s permuted by the op's dims",
                       ck_opc_tname(y), SH(y, s2), ck_opc_tname(x), SH(x, s1));
    return CK_OK;
}

ck_status ck_opc_reshape(const char *be, const ck_tensor *x, const ck_tensor *y,
                           ck_error *err)
{
    CK_TRY(ck_opc_need("reshape", x, "input", err));
    CK_TRY(ck_opc_need("reshape", y, "output", err));
    const ck_tensor *ts[] = {y};
    return ck_opc_pointwise(be, "reshape", x, ts, 1, err);
}

