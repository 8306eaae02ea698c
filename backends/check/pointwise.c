/*
 * Host-side checks of the pointwise family (check.h): activations, add, mul, silu,
 * positional.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

/* a one-input op of the pointwise family (the input count is checked next) */
static bool is_activation(ck_op_kind k)
{
    return ck_op_family_of(k) == CK_FAMILY_POINTWISE;
}

/* cast's `to` and `from`: float32, float16 or bfloat16 (the only dtypes it rounds to) */
static bool cast_dtype_ok(int dt)
{
    return dt == CK_F32 || dt == CK_F16 || dt == CK_BF16;
}

static ck_status check_cast(const char *be, const ck_op_params *op, ck_error *err)
{
    if (op->kind != CK_OP_CAST || (cast_dtype_ok(op->cast_to) && cast_dtype_ok(op->cast_from)))
        return CK_OK;
    const int bad = cast_dtype_ok(op->cast_to) ? op->cast_from : op->cast_to;
    return ck_fail(err, CK_ERR_UNSUPPORTED,
                   "%s: cast: %s dtype %d is not float32, float16 or bfloat16", be,
                   cast_dtype_ok(op->cast_to) ? "source" : "target", bad);
}

ck_status ck_opc_activation_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                                ck_error *err)
{
    if (!is_activation(op->kind))
        return ck_fail(err, CK_ERR_INTERNAL, "activation: op %s is not an activation",
                       ck_op_kind_name(op->kind));
    CK_TRY(check_cast(be, op, err));
    CK_TRY(ck_opc_unary_io(ck_op_kind_name(op->kind), io, NULL, err));
    return ck_opc_unary_pointwise(be, ck_op_kind_name(op->kind), io, NULL, err);
}

ck_status ck_opc_activation_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                                const ck_op_grads *g, ck_error *err)
{
    if (!is_activation(op->kind))
        return ck_fail(err, CK_ERR_INTERNAL, "activation: op %s is not an activation",
                       ck_op_kind_name(op->kind));
    CK_TRY(check_cast(be, op, err));
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s backward: needs one input and dout",
                       ck_op_kind_name(op->kind));
    if (!g->din[0])
        return CK_OK;
    return ck_opc_unary_pointwise(be, ck_op_kind_name(op->kind), io, g, err);
}

ck_status ck_opc_add_fwd(const char *be, const ck_op_io *io, ck_error *err)
{
    const char *fn = "add";
    CK_TRY(ck_opc_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    for (int k = 1; k < io->n_in; k++)
        CK_TRY(ck_opc_like(be, fn, io->in[0], io->in[k], true, err));
    return ck_opc_like(be, fn, io->in[0], io->out, true, err);
}

ck_status ck_opc_add_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                         ck_error *err)
{
    const char *fn = "add backward";
    CK_TRY(ck_opc_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    CK_TRY(ck_opc_like(be, fn, io->in[0], g->dout, true, err));
    for (int k = 0; k < io->n_in; k++)
        CK_TRY(ck_opc_like(be, fn, io->in[0], g->din[k], true, err));
    return CK_OK;
}

/* concat's layout (check.h), out being the output or dout */
/* -------------------------------------------------------------------------- positional */

ck_status ck_opc_positional(const char *be, const ck_tensor *x, const ck_tensor *w,
                              const ck_tensor *y, int64_t *N, int64_t *M, ck_error *err)
{
    CK_TRY(ck_opc_need("positional", x, "input", err));
    CK_TRY(ck_opc_need("positional", w, "weight", err));
    CK_TRY(ck_opc_need("positional", y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {y};
    CK_TRY(ck_opc_pointwise(be, "positional", x, ts, 1, err));
    const ck_tensor *ws[] = {w};
    CK_TRY(ck_opc_float_dtypes(be, "positional", ws, 1, err));
    char s1[96], s2[96];
    *N = x->shape.ndim >= 2 ? x->shape.dim[0] : 0;
    *M = *N ? ck_shape_numel(&x->shape) / *N : 0;
    if (*N == 0 || ck_shape_numel(&w->shape) != *M)
        return ck_fail(err, CK_ERR_INTERNAL, "positional: weight '%s' %s does not fit input '%s' %s",
                       ck_opc_tname(w), SH(w, s1), ck_opc_tname(x), SH(x, s2));
    return CK_OK;
}

