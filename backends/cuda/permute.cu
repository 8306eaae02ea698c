/* CUDA permute / transpose (backends/ref/permute.c): one thread per output element. */
#include "backends/cuda/k18_cuda.cuh"

struct perm_geom {
    int ndim;
    int64_t ydim[8], xstride_of_y[8]; /* y's dims and the x stride each y dim walks */
};

/* forward: y[i] = x[src(i)]; backward: dx[src(i)] += dy[i] (a permutation: one writer) */
__global__ void perm_kernel(ck_dv dst, ck_dv src, perm_geom pg, int64_t n, bool backward)
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

ck_status k18c_permute(ck_cuda *cu, ck_dv dst, ck_dv src, int ndim, const int64_t *xdim,
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

ck_status cuda_permute_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const int64_t n = ck_shape_numel(&x->shape);
    const int ident[1] = {0};
    if (op->kind == CK_OP_RESHAPE) {
        CK_TRY(ck_opc18_reshape(CUDA_BE, x, io->out, err));
        return k18c_permute(cu, ck_view(io->out), ck_view(x), 1, &n, ident, false, err);
    }
    CK_TRY(ck_opc18_permute(CUDA_BE, op, x, io->out, err));
    return k18c_permute(cu, ck_view(io->out), ck_view(x), x->shape.ndim, x->shape.dim, op->perm,
                        false, err);
}

ck_status cuda_permute_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const int64_t n = ck_shape_numel(&x->shape);
    const int ident[1] = {0};
    if (op->kind == CK_OP_RESHAPE)
        CK_TRY(ck_opc18_reshape(CUDA_BE, x, g->dout, err));
    else
        CK_TRY(ck_opc18_permute(CUDA_BE, op, x, g->dout, err));
    if (!g->din[0])
        return CK_OK;
    if (op->kind == CK_OP_RESHAPE)
        return k18c_permute(cu, ck_view(g->din[0]), ck_view(g->dout), 1, &n, ident, true, err);
    return k18c_permute(cu, ck_view(g->din[0]), ck_view(g->dout), x->shape.ndim, x->shape.dim,
                        op->perm, true, err);
}
