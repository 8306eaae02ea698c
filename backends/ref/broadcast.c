/*
 * CPU broadcast family: the binary ops with numpy broadcasting (sub, div, maximum, minimum,
 * pow with a constant exponent, masked_fill with a constant mask, and add/mul of two shapes
 * or with a constant), expand, and the reductions sum, mean and amax over dims.
 *
 * Geometry and functions are backends/check/broadcast.h, shared with the CUDA kernels.
 * Every value is loaded in its tensor's dtype and computed in double; each output element
 * is rounded once. A gradient of a broadcast operand, a sum, a mean and expand's backward
 * add their terms in ascending order of the full-shape index, in double, and round once
 * (ck_bc_reader), so the CUDA kernels, which add the same terms in the same order, give
 * the same bits.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <math.h>

/* operand k's value at its element j (the scalar when it has no tensor) */
static double operand(const ck_opc_bc_operands *o, int k, int64_t j)
{
    return o->t[k] ? ref_ld(o->t[k], j) : o->scalar;
}

/* pow's exponent and masked_fill's value; NaN (unused) for the others */
static double op_value(const ck_op_params *op)
{
    return op->kind == CK_OP_POW || op->kind == CK_OP_MASKED_FILL ? op->scalar : NAN;
}

// ----------------------------------------------------------------------------
// binary ops

static ck_status binary_op_forward(const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_opc_bc_operands o;
    CK_TRY(ck_opc_binary(REF_BE, op, io, io->out, &o, err));
    const double v = op_value(op);
    /* operand values are read before the output element is written: in place is safe */
    for (int64_t i = 0; i < o.g.n_full; i++) {
        const double a = operand(&o, 0, ck_bc_offset(&o.g, 0, i));
        const double b = operand(&o, 1, ck_bc_offset(&o.g, 1, i));
        ref_st(io->out, i, ck_bc_f(op->kind, a, b, v));
    }
    return CK_OK;
}

static ck_status binary_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                    const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_opc_bc_operands o;
    CK_TRY(ck_opc_binary(REF_BE, op, io, g->dout, &o, err));
    const double v = op_value(op);
    const bool values = ck_bc_grad_reads_values(op->kind);
    const bool mask = op->kind == CK_OP_MASKED_FILL;
    for (int k = 0; k < 2; k++) {
        ck_tensor *dx = o.input[k] >= 0 ? g->din[o.input[k]] : NULL;
        if (!dx)
            continue;
        for (int64_t j = 0; j < o.g.n[k]; j++) {
            double acc = 0.0;
            for (int64_t m = 0; m < o.g.fan[k]; m++) {
                const int64_t i = ck_bc_reader(&o.g, k, j, m);
                double a = 0.0, b = 0.0;
                if (values || mask) {
                    b = operand(&o, 1, ck_bc_offset(&o.g, 1, i));
                    a = values ? operand(&o, 0, ck_bc_offset(&o.g, 0, i)) : 0.0;
                }
                const double d = k == 0 ? ck_bc_da(op->kind, a, b, v) : ck_bc_db(op->kind, a, b);
                acc += ref_ld(g->dout, i) * d;
            }
            ref_acc(dx, j, acc);
        }
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// sum, mean, amax: operand 0 of the geometry is the output (reduced dims kept as 1)

static ck_status reduce_op_forward(const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_bc_geom g;
    CK_TRY(ck_opc_reduce(REF_BE, op, io->in[0], io->out, &g, err));
    for (int64_t j = 0; j < g.n[0]; j++) {
        double acc = op->kind == CK_OP_REDUCE_MAX ? -INFINITY : 0.0;
        for (int64_t m = 0; m < g.fan[0]; m++) {
            const double x = ref_ld(io->in[0], ck_bc_reader(&g, 0, j, m));
            if (op->kind != CK_OP_REDUCE_MAX)
                acc += x;
            else if (isnan(x) || x > acc) /* NaN propagates, as torch.amax */
                acc = isnan(acc) ? acc : x;
        }
        ref_st(io->out, j, op->kind == CK_OP_REDUCE_MEAN ? acc / (double)g.fan[0] : acc);
    }
    return CK_OK;
}

static ck_status reduce_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                    const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_bc_geom geo;
    CK_TRY(ck_opc_reduce(REF_BE, op, io->in[0], g->dout, &geo, err));
    ck_tensor *dx = g->din[0];
    if (!dx)
        return CK_OK;
    for (int64_t j = 0; j < geo.n[0]; j++) {
        const double dy = ref_ld(g->dout, j);
        double share = op->kind == CK_OP_REDUCE_MEAN ? dy / (double)geo.fan[0] : dy;
        double y = 0.0;
        if (op->kind == CK_OP_REDUCE_MAX) {
            /* torch.amax: the gradient is shared equally by the elements equal to the max */
            y = ref_ld(io->out, j);
            int64_t ties = 0;
            for (int64_t m = 0; m < geo.fan[0]; m++)
                ties += ref_ld(io->in[0], ck_bc_reader(&geo, 0, j, m)) == y;
            share = ties ? dy / (double)ties : 0.0;
        }
        for (int64_t m = 0; m < geo.fan[0]; m++) {
            const int64_t i = ck_bc_reader(&geo, 0, j, m);
            if (op->kind != CK_OP_REDUCE_MAX || ref_ld(io->in[0], i) == y)
                ref_acc(dx, i, share);
        }
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// expand: operand 0 is the input, the full shape the output's

static ck_status expand_op_forward(const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_bc_geom g;
    CK_TRY(ck_opc_reduce(REF_BE, op, io->in[0], io->out, &g, err));
    for (int64_t i = 0; i < g.n_full; i++)
        ref_st(io->out, i, ref_ld(io->in[0], ck_bc_offset(&g, 0, i)));
    return CK_OK;
}

static ck_status expand_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                    const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_bc_geom geo;
    CK_TRY(ck_opc_reduce(REF_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    for (int64_t j = 0; j < geo.n[0]; j++) {
        double acc = 0.0;
        for (int64_t m = 0; m < geo.fan[0]; m++)
            acc += ref_ld(g->dout, ck_bc_reader(&geo, 0, j, m));
        ref_acc(g->din[0], j, acc);
    }
    return CK_OK;
}

/* ---- the family's entry points (ref_ops.h); add and mul come here from the pointwise
 * family when op->broadcast is set ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_ADD:
    case CK_OP_MUL:
        if (!op->broadcast)
            return (ref_op_fns){NULL, NULL};
        /* fall through */
    case CK_OP_SUB:
    case CK_OP_DIV:
    case CK_OP_MAXIMUM:
    case CK_OP_MINIMUM:
    case CK_OP_POW:
    case CK_OP_MASKED_FILL: return (ref_op_fns){binary_op_forward, binary_op_backward};
    case CK_OP_REDUCE_SUM:
    case CK_OP_REDUCE_MEAN:
    case CK_OP_REDUCE_MAX: return (ref_op_fns){reduce_op_forward, reduce_op_backward};
    case CK_OP_EXPAND: return (ref_op_fns){expand_op_forward, expand_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(broadcast, pick)
