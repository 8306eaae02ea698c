/*
 * CPU shape ops: add (n inputs of one shape), concat (along dim 1, the channels) and
 * flatten ((N, ...) -> (N, prod ...)), forward and backward.
 *
 * add sums its inputs in input order in double and rounds once; concat and flatten copy
 * values (exactly within one dtype, rounded once into another). Backward passes
 * accumulate (+=) into every gradient that is not NULL, with one rounding each. Each
 * tensor is loaded in its own dtype: fp32, fp64, fp16 or bf16 (ref_elem.h,
 * harness/precision.md).
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

/* ================================= slice ================================== */

/* y[o, j, i] = x[o, start + j, i]; x (outer, D, inner), y (outer, len, inner) */
static ck_status slice_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                  ck_error *err)
{
    int64_t outer, D, inner;
    CK_TRY(ck_opc_slice(REF_BE, op, io, NULL, &outer, &D, &inner, err));
    int64_t a = op->slice_range[0], len = op->slice_range[1] - a;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len * inner; j++)
            ref_st(io->out, o * len * inner + j, ref_ld(io->in[0], (o * D + a) * inner + j));
    return CK_OK;
}

/* dx[o, start + j, i] += dy[o, j, i]; the rest of dx is unchanged */
static ck_status slice_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    int64_t outer, D, inner;
    CK_TRY(ck_opc_slice(REF_BE, op, io, g, &outer, &D, &inner, err));
    if (!g->din[0])
        return CK_OK;
    int64_t a = op->slice_range[0], len = op->slice_range[1] - a;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len * inner; j++)
            ref_acc(g->din[0], (o * D + a) * inner + j, ref_ld(g->dout, o * len * inner + j));
    return CK_OK;
}

/* ================================= concat ================================= */

/* out[n, off_k + c, s] = in[k][n, c, s]; out (N, sum C_k, S), in[k] (N, C_k, S) */
static void concat_forward(ck_tensor *out, const ck_tensor *const *in, int n_in, int64_t N,
                           const int64_t *block, int64_t out_block)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t off = n * out_block;
        for (int k = 0; k < n_in; k++) {
            for (int64_t j = 0; j < block[k]; j++)
                ref_st(out, off + j, ref_ld(in[k], n * block[k] + j));
            off += block[k];
        }
    }
}

/* din[k][n, c, s] += dout[n, off_k + c, s] for every non-NULL din[k] */
static void concat_backward(ck_tensor *const *din, const ck_tensor *dout, int n_in, int64_t N,
                            const int64_t *block, int64_t out_block)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t off = n * out_block;
        for (int k = 0; k < n_in; k++) {
            if (din[k])
                for (int64_t j = 0; j < block[k]; j++)
                    ref_acc(din[k], n * block[k] + j, ref_ld(dout, off + j));
            off += block[k];
        }
    }
}

static ck_status concat_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                             ck_error *err)
{
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(ck_opc_concat_fwd(REF_BE, op, io, &N, block, &out_block, err));
    concat_forward(io->out, io->in, io->n_in, N, block, out_block);
    return CK_OK;
}

static ck_status concat_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(ck_opc_concat_bwd(REF_BE, op, io, g, &N, block, &out_block, err));
    concat_backward(g->din, g->dout, io->n_in, N, block, out_block);
    return CK_OK;
}

/* ================================= flatten ================================= */

/* out = x viewed as (N, prod ...); a row-major copy; all (numel) */
static void flatten_forward(ck_tensor *out, const ck_tensor *x, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_st(out, i, ref_ld(x, i));
}

/* dx += dout; all (numel) */
static void flatten_backward(ck_tensor *dx, const ck_tensor *dout, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_acc(dx, i, ref_ld(dout, i));
}

static ck_status flatten_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    CK_TRY(ck_opc_flatten_fwd(REF_BE, io, err));
    flatten_forward(io->out, io->in[0], ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

static ck_status flatten_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_flatten_bwd(REF_BE, io, g, err));
    if (g->din[0])
        flatten_backward(g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}


/* permute / transpose: a strided copy (wide_kernels.h); backward is the inverse copy, added. */
#include "backends/ref/wide_scope.h"

/* x's flat index of y's flat index yi */
static int64_t src_index(int64_t yi, int ndim, const int64_t *xdim, const int *perm)
{
    int64_t xstride[8], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        xstride[d] = s;
        s *= xdim[d];
    }
    int64_t xi = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t len = xdim[perm[d]];
        xi += (yi % len) * xstride[perm[d]];
        yi /= len;
    }
    return xi;
}

void f64_permute_fwd(double *y, const double *x, int ndim, const int64_t *xdim, const int *perm)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= xdim[d];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[src_index(i, ndim, xdim, perm)];
}

void f64_permute_bwd(double *dx, const double *dy, int ndim, const int64_t *xdim,
                     const int *perm)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= xdim[d];
    for (int64_t i = 0; i < n; i++)
        dx[src_index(i, ndim, xdim, perm)] += dy[i];
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_PERMUTE (permute, transpose) and CK_OP_RESHAPE

static ck_status permute_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    ref_scope s;
    if (op->kind == CK_OP_RESHAPE) {
        CK_TRY(ck_opc_reshape(REF_BE, x, io->out, err));
        ref_scope_begin(&s, "reshape", err);
        const double *xv = ref_scope_in(&s, x);
        double *y = ref_scope_out(&s, io->out);
        if (s.st == CK_OK)
            memcpy(y, xv, sizeof(double) * (size_t)ck_shape_numel(&x->shape));
        return ref_scope_end(&s, true);
    }
    CK_TRY(ck_opc_permute(REF_BE, op, x, io->out, err));
    ref_scope_begin(&s, "permute", err);
    const double *xv = ref_scope_in(&s, x);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_permute_fwd(y, xv, x->shape.ndim, x->shape.dim, op->perm);
    return ref_scope_end(&s, true);
}

static ck_status permute_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    if (op->kind == CK_OP_RESHAPE)
        CK_TRY(ck_opc_reshape(REF_BE, x, g->dout, err));
    else
        CK_TRY(ck_opc_permute(REF_BE, op, x, g->dout, err));
    if (!g->din[0])
        return CK_OK;
    ref_scope s;
    ref_scope_begin(&s, op->kind == CK_OP_RESHAPE ? "reshape backward" : "permute backward", err);
    const double *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]);
    if (s.st == CK_OK) {
        if (op->kind == CK_OP_RESHAPE) {
            const int64_t n = ck_shape_numel(&x->shape);
            for (int64_t i = 0; i < n; i++)
                dx[i] += dy[i];
        } else {
            f64_permute_bwd(dx, dy, x->shape.ndim, x->shape.dim, op->perm);
        }
    }
    return ref_scope_end(&s, true);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_CONCAT: return (ref_op_fns){concat_op_forward, concat_op_backward};
    case CK_OP_SLICE: return (ref_op_fns){slice_op_forward, slice_op_backward};
    case CK_OP_FLATTEN: return (ref_op_fns){flatten_op_forward, flatten_op_backward};
    case CK_OP_RESHAPE:
    case CK_OP_PERMUTE: return (ref_op_fns){permute_op_forward, permute_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(shape, pick)
