/*
 * CUDA shape ops: add (n inputs of one shape), concat (along dim 1, the channels) and
 * flatten ((N, ...) -> (N, prod ...)), forward and backward.
 *
 * As backends/ref/shape.c: add sums its inputs in input order in double and rounds
 * once; concat and flatten copy values (device-to-device copies within one dtype, one
 * rounding into another). Each tensor is loaded in its own dtype. Backward passes
 * accumulate (+=, ck_acc) into every gradient that is not NULL, one input at a time in
 * input order (one launch each), so a tensor feeding two inputs of the same layer gets
 * both contributions in the CPU's order.
 */
#include "backends/cuda/cuda_common.cuh"

// ----------------------------------------------------------------------------
// kernels

/* dx[i] += dy[i]; all (numel) */
static __global__ void accumulate_kernel(ck_dv dx, ck_dv dy, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_acc(dx, i, ck_ld(dy, i));
}

/* out[n, off + j] = in[n, j]; out (N, out_block), in (N, block) */
static __global__ void concat_forward_kernel(ck_dv out, ck_dv in, int64_t N, int64_t block,
                                      int64_t out_block, int64_t off)
{
    CK_GRID_STRIDE(i, N * block)
    ck_st(out, (i / block) * out_block + off + i % block, ck_ld(in, i));
}

/* din[n, j] += dout[n, off + j]; din (N, block), dout (N, out_block) */
static __global__ void concat_backward_kernel(ck_dv din, ck_dv dout, int64_t N, int64_t block,
                                       int64_t out_block, int64_t off)
{
    CK_GRID_STRIDE(i, N * block)
    ck_acc(din, i, ck_ld(dout, (i / block) * out_block + off + i % block));
}

/* y[o, j, i] = x[o, a + j, i]; x (outer, D, inner), y (outer, len, inner) */
static __global__ void slice_forward_kernel(ck_dv y, ck_dv x, int64_t outer, int64_t D,
                                            int64_t inner, int64_t a, int64_t len)
{
    CK_GRID_STRIDE(i, outer * len * inner)
    {
        int64_t o = i / (len * inner), r = i % (len * inner);
        ck_st(y, i, ck_ld(x, (o * D + a) * inner + r));
    }
}

/* dx[o, a + j, i] += dy[o, j, i] */
static __global__ void slice_backward_kernel(ck_dv dx, ck_dv dy, int64_t outer, int64_t D,
                                             int64_t inner, int64_t a, int64_t len)
{
    CK_GRID_STRIDE(i, outer * len * inner)
    {
        int64_t o = i / (len * inner), r = i % (len * inner);
        ck_acc(dx, (o * D + a) * inner + r, ck_ld(dy, i));
    }
}

/* out = x, one rounding when the dtypes differ */
static __global__ void copy_kernel(ck_dv out, ck_dv x, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(out, i, ck_ld(x, i));
}

static ck_status accumulate(ck_cuda *cu, ck_tensor *dx, const ck_tensor *dy, int64_t numel,
                            ck_error *err)
{
    accumulate_kernel<<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(ck_view(dx), ck_view(dy),
                                                                       numel);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// slice

static ck_status slice_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc_slice(CUDA_BE, op, io, NULL, &outer, &D, &inner, err));
    int64_t a = op->slice_range[0], len = op->slice_range[1] - a, n = outer * len * inner;
    slice_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), outer, D, inner, a, len);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status slice_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc_slice(CUDA_BE, op, io, g, &outer, &D, &inner, err));
    if (!g->din[0])
        return CK_OK;
    int64_t a = op->slice_range[0], len = op->slice_range[1] - a, n = outer * len * inner;
    slice_backward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout), outer, D, inner, a, len);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// concat

static ck_status concat_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(ck_opc_concat_fwd(CUDA_BE, op, io, &N, block, &out_block, err));
    /* out[n, off_k + j] = in[k][n, j]: a strided 2-D copy per input of the output's dtype */
    const size_t es = ck_dtype_size(io->out->dtype);
    int64_t off = 0;
    for (int k = 0; k < io->n_in; k++) {
        if (io->in[k]->dtype == io->out->dtype) {
            CK_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char *>(io->out->data) + (size_t)off * es,
                                            (size_t)out_block * es, io->in[k]->data,
                                            (size_t)block[k] * es, (size_t)block[k] * es,
                                            (size_t)N, cudaMemcpyDeviceToDevice, cu->stream));
        } else {
            concat_forward_kernel<<<ck_blocks(N * block[k]), CK_THREADS, 0, cu->stream>>>(
                ck_view(io->out), ck_view(io->in[k]), N, block[k], out_block, off);
            CK_LAUNCH_CHECK();
        }
        off += block[k];
    }
    return CK_OK;
}

static ck_status concat_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, block[CK_MAX_INPUTS], out_block;
    CK_TRY(ck_opc_concat_bwd(CUDA_BE, op, io, g, &N, block, &out_block, err));
    int64_t off = 0;
    for (int k = 0; k < io->n_in; k++) {
        if (g->din[k]) {
            concat_backward_kernel<<<ck_blocks(N * block[k]), CK_THREADS, 0, cu->stream>>>(
                ck_view(g->din[k]), ck_view(g->dout), N, block[k], out_block, off);
            CK_LAUNCH_CHECK();
        }
        off += block[k];
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// flatten

static ck_status flatten_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    CK_TRY(ck_opc_flatten_fwd(CUDA_BE, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    if (io->out->dtype != io->in[0]->dtype) {
        copy_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(io->out),
                                                                 ck_view(io->in[0]), n);
        CK_LAUNCH_CHECK();
    } else if (io->out->data != io->in[0]->data) {
        CK_CUDA_CHECK(cudaMemcpyAsync(io->out->data, io->in[0]->data, ck_tensor_bytes(io->in[0]),
                                      cudaMemcpyDeviceToDevice, cu->stream));
    }
    return CK_OK;
}

static ck_status flatten_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    CK_TRY(ck_opc_flatten_bwd(CUDA_BE, io, g, err));
    if (g->din[0])
        CK_TRY(accumulate(cu, g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape), err));
    return CK_OK;
}

/* CUDA permute / transpose (backends/ref/shape.c): one thread per output element. */
#include "backends/cuda/cuda_common.cuh"

struct perm_geom {
    int ndim;
    int64_t ydim[8], xstride_of_y[8]; /* y's dims and the x stride each y dim walks */
};

/* forward: y[i] = x[src(i)]; backward: dx[src(i)] += dy[i] (a permutation: one writer) */
static __global__ void perm_kernel(ck_dv dst, ck_dv src, perm_geom pg, int64_t n, bool backward)
{
    CK_GRID_STRIDE(i, n)
    {
        int64_t rem = i, xi = 0;
        for (int d = pg.ndim - 1; d >= 0; d--) {
            xi += (rem % pg.ydim[d]) * pg.xstride_of_y[d];
            rem /= pg.ydim[d];
        }
        if (backward)
            ck_acc(dst, xi, ck_ld(src, i));
        else
            ck_st(dst, i, ck_ld(src, xi));
    }
}

static ck_status launch_permute(ck_cuda *cu, ck_dv dst, ck_dv src, int ndim, const int64_t *xdim,
                       const int *perm, bool backward, ck_error *err)
{
    perm_geom pg;
    memset(&pg, 0, sizeof pg);
    pg.ndim = ndim;
    int64_t xs[8], s = 1, n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        xs[d] = s;
        s *= xdim[d];
    }
    for (int d = 0; d < ndim; d++) {
        pg.ydim[d] = xdim[perm[d]];
        pg.xstride_of_y[d] = xs[perm[d]];
        n *= xdim[d];
    }
    perm_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(dst, src, pg, n, backward);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_PERMUTE and CK_OP_RESHAPE (the identity permutation)

static ck_status permute_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const int64_t n = ck_shape_numel(&x->shape);
    const int ident[1] = {0};
    if (op->kind == CK_OP_RESHAPE) {
        CK_TRY(ck_opc_reshape(CUDA_BE, x, io->out, err));
        return launch_permute(cu, ck_view(io->out), ck_view(x), 1, &n, ident, false, err);
    }
    CK_TRY(ck_opc_permute(CUDA_BE, op, x, io->out, err));
    return launch_permute(cu, ck_view(io->out), ck_view(x), x->shape.ndim, x->shape.dim, op->perm,
                        false, err);
}

static ck_status permute_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const int64_t n = ck_shape_numel(&x->shape);
    const int ident[1] = {0};
    if (op->kind == CK_OP_RESHAPE)
        CK_TRY(ck_opc_reshape(CUDA_BE, x, g->dout, err));
    else
        CK_TRY(ck_opc_permute(CUDA_BE, op, x, g->dout, err));
    if (!g->din[0])
        return CK_OK;
    if (op->kind == CK_OP_RESHAPE)
        return launch_permute(cu, ck_view(g->din[0]), ck_view(g->dout), 1, &n, ident, true, err);
    return launch_permute(cu, ck_view(g->din[0]), ck_view(g->dout), x->shape.ndim, x->shape.dim,
                        op->perm, true, err);
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_CONCAT: return cuda_op_fns{concat_op_forward, concat_op_backward};
    case CK_OP_SLICE: return cuda_op_fns{slice_op_forward, slice_op_backward};
    case CK_OP_FLATTEN: return cuda_op_fns{flatten_op_forward, flatten_op_backward};
    case CK_OP_RESHAPE:
    case CK_OP_PERMUTE: return cuda_op_fns{permute_op_forward, permute_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(shape, pick)
