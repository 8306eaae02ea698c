/*
 * CUDA broadcast family: the binary ops with numpy broadcasting (sub, div, maximum,
 * minimum, pow, masked_fill, and add/mul of two shapes or with a constant), expand, and
 * sum, mean, amax over dims (backends/ref/broadcast.c).
 *
 * The geometry and the functions are backends/check/broadcast.h, the reference's own
 * lines. Forward: one thread per output element. A gradient of a broadcast operand, a
 * sum, a mean and expand's backward: one thread per element of the smaller tensor, adding
 * its terms in ascending order in double (device code is built with -fmad=false) and
 * rounding once, the reference's order, so the results are its bits; pow uses CUDA's
 * double pow (within 2 ulp in double), which almost always rounds to the same fp32.
 */
#include "backends/cuda/cuda_common.cuh"

/* an operand: a tensor, or the scalar when v.data is NULL */
struct bc_operand {
    ck_dv v;
    double scalar;
};

static __device__ __forceinline__ double bc_ld(const bc_operand &o, int64_t j)
{
    return o.v.p ? ck_ld(o.v, j) : o.scalar;
}

static bc_operand bc_make(const ck_tensor *t, double scalar)
{
    bc_operand o;
    o.v = ck_view(t);
    o.scalar = scalar;
    return o;
}

static double op_value(const ck_op_params *op)
{
    return op->kind == CK_OP_POW || op->kind == CK_OP_MASKED_FILL ? op->scalar : 0.0;
}

// ----------------------------------------------------------------------------
// binary ops

static __global__ void binary_fwd_kernel(int kind, ck_bc_geom g, bc_operand a, bc_operand b,
                                         double v, ck_dv y)
{
    CK_GRID_STRIDE(i, g.n_full)
    {
        const double x0 = bc_ld(a, ck_bc_offset(&g, 0, i));
        const double x1 = bc_ld(b, ck_bc_offset(&g, 1, i));
        ck_st(y, i, ck_bc_f((ck_op_kind)kind, x0, x1, v));
    }
}

/* dx (operand k's gradient) += the sum over its readers of dy * df/d(operand k) */
static __global__ void binary_bwd_kernel(int kind, int k, ck_bc_geom g, bc_operand a,
                                         bc_operand b, double v, bool values, bool mask,
                                         ck_dv dy, ck_dv dx)
{
    CK_GRID_STRIDE(j, g.n[k])
    {
        double acc = 0.0;
        for (int64_t m = 0; m < g.fan[k]; m++) {
            const int64_t i = ck_bc_reader(&g, k, j, m);
            double x0 = 0.0, x1 = 0.0;
            if (values || mask) {
                x1 = bc_ld(b, ck_bc_offset(&g, 1, i));
                x0 = values ? bc_ld(a, ck_bc_offset(&g, 0, i)) : 0.0;
            }
            const double d = k == 0 ? ck_bc_da((ck_op_kind)kind, x0, x1, v)
                                    : ck_bc_db((ck_op_kind)kind, x0, x1);
            acc += ck_ld(dy, i) * d;
        }
        ck_acc(dx, j, acc);
    }
}

static ck_status binary_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_opc_bc_operands o;
    CK_TRY(ck_opc_binary(CUDA_BE, op, io, io->out, &o, err));
    if (o.g.n_full == 0)
        return CK_OK;
    binary_fwd_kernel<<<ck_blocks(o.g.n_full), CK_THREADS, 0, cu->stream>>>(
        (int)op->kind, o.g, bc_make(o.t[0], o.scalar), bc_make(o.t[1], o.scalar),
        op_value(op), ck_view(io->out));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status binary_op_backward(ck_cuda *cu, const ck_op_params *op,
                                    const ck_fwd_args *args, const ck_op_io *io,
                                    ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_opc_bc_operands o;
    CK_TRY(ck_opc_binary(CUDA_BE, op, io, g->dout, &o, err));
    const bool values = ck_bc_grad_reads_values(op->kind);
    const bool mask = op->kind == CK_OP_MASKED_FILL;
    /* add/sub read no values: their operands may have been freed (backward_reads) */
    const bc_operand a = bc_make(values ? o.t[0] : NULL, o.scalar);
    const bc_operand b = bc_make(values || mask ? o.t[1] : NULL, o.scalar);
    for (int k = 0; k < 2; k++) {
        ck_tensor *dx = o.input[k] >= 0 ? g->din[o.input[k]] : NULL;
        if (!dx || o.g.n[k] == 0)
            continue;
        binary_bwd_kernel<<<ck_blocks(o.g.n[k]), CK_THREADS, 0, cu->stream>>>(
            (int)op->kind, k, o.g, a, b, op_value(op), values, mask, ck_view(g->dout),
            ck_view(dx));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// sum, mean, amax (operand 0: the output, reduced dims kept as 1); expand (operand 0: the
// input, the full shape the output's)

static __global__ void reduce_fwd_kernel(int kind, ck_bc_geom g, ck_dv x, ck_dv y)
{
    CK_GRID_STRIDE(j, g.n[0])
    {
        double acc = kind == CK_OP_REDUCE_MAX ? -(double)INFINITY : 0.0;
        for (int64_t m = 0; m < g.fan[0]; m++) {
            const double v = ck_ld(x, ck_bc_reader(&g, 0, j, m));
            if (kind != CK_OP_REDUCE_MAX)
                acc += v;
            else if (ck_bc_is_nan(v) || v > acc) /* NaN propagates, as torch.amax */
                acc = ck_bc_is_nan(acc) ? acc : v;
        }
        ck_st(y, j, kind == CK_OP_REDUCE_MEAN ? acc / (double)g.fan[0] : acc);
    }
}

static __global__ void reduce_bwd_kernel(int kind, ck_bc_geom g, ck_dv x, ck_dv y, ck_dv dy,
                                         ck_dv dx)
{
    CK_GRID_STRIDE(j, g.n[0])
    {
        const double d = ck_ld(dy, j);
        double share = kind == CK_OP_REDUCE_MEAN ? d / (double)g.fan[0] : d;
        double ymax = 0.0;
        if (kind == CK_OP_REDUCE_MAX) {
            ymax = ck_ld(y, j);
            int64_t ties = 0;
            for (int64_t m = 0; m < g.fan[0]; m++)
                ties += ck_ld(x, ck_bc_reader(&g, 0, j, m)) == ymax;
            share = ties ? d / (double)ties : 0.0;
        }
        for (int64_t m = 0; m < g.fan[0]; m++) {
            const int64_t i = ck_bc_reader(&g, 0, j, m);
            if (kind != CK_OP_REDUCE_MAX || ck_ld(x, i) == ymax)
                ck_acc(dx, i, share);
        }
    }
}

static __global__ void expand_fwd_kernel(ck_bc_geom g, ck_dv x, ck_dv y)
{
    CK_GRID_STRIDE(i, g.n_full)
    ck_st(y, i, ck_ld(x, ck_bc_offset(&g, 0, i)));
}

static __global__ void expand_bwd_kernel(ck_bc_geom g, ck_dv dy, ck_dv dx)
{
    CK_GRID_STRIDE(j, g.n[0])
    {
        double acc = 0.0;
        for (int64_t m = 0; m < g.fan[0]; m++)
            acc += ck_ld(dy, ck_bc_reader(&g, 0, j, m));
        ck_acc(dx, j, acc);
    }
}

static ck_status reduce_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_bc_geom g;
    CK_TRY(ck_opc_reduce(CUDA_BE, op, io->in[0], io->out, &g, err));
    if (op->kind == CK_OP_EXPAND) {
        if (g.n_full)
            expand_fwd_kernel<<<ck_blocks(g.n_full), CK_THREADS, 0, cu->stream>>>(
                g, ck_view(io->in[0]), ck_view(io->out));
    } else if (g.n[0]) {
        reduce_fwd_kernel<<<ck_blocks(g.n[0]), CK_THREADS, 0, cu->stream>>>(
            (int)op->kind, g, ck_view(io->in[0]), ck_view(io->out));
    }
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status reduce_op_backward(ck_cuda *cu, const ck_op_params *op,
                                    const ck_fwd_args *args, const ck_op_io *io,
                                    ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_bc_geom geo;
    CK_TRY(ck_opc_reduce(CUDA_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0] || geo.n[0] == 0)
        return CK_OK;
    if (op->kind == CK_OP_EXPAND)
        expand_bwd_kernel<<<ck_blocks(geo.n[0]), CK_THREADS, 0, cu->stream>>>(
            geo, ck_view(g->dout), ck_view(g->din[0]));
    else /* sum and mean read no values (io->in[0] may have been freed); amax reads x, y */
        reduce_bwd_kernel<<<ck_blocks(geo.n[0]), CK_THREADS, 0, cu->stream>>>(
            (int)op->kind, geo, ck_view(op->kind == CK_OP_REDUCE_MAX ? io->in[0] : NULL),
            ck_view(op->kind == CK_OP_REDUCE_MAX ? io->out : NULL), ck_view(g->dout),
            ck_view(g->din[0]));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh); add and mul come here from the pointwise
// family when op->broadcast is set

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_ADD:
    case CK_OP_MUL:
        if (!op->broadcast)
            return cuda_op_fns{NULL, NULL};
        return cuda_op_fns{binary_op_forward, binary_op_backward};
    case CK_OP_SUB:
    case CK_OP_DIV:
    case CK_OP_MAXIMUM:
    case CK_OP_MINIMUM:
    case CK_OP_POW:
    case CK_OP_MASKED_FILL: return cuda_op_fns{binary_op_forward, binary_op_backward};
    case CK_OP_REDUCE_SUM:
    case CK_OP_REDUCE_MEAN:
    case CK_OP_REDUCE_MAX:
    case CK_OP_EXPAND: return cuda_op_fns{reduce_op_forward, reduce_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(broadcast, pick)
