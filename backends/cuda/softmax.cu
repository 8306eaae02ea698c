/* CUDA softmax / log_softmax over one dim: one thread per row (backends/ref/softmax.c). */
#include "backends/cuda/k18_cuda.cuh"

__device__ void sm_stats(ck_dv x, int64_t base, int64_t D, int64_t inner, double *m, double *lse)
{
    double mx = -INFINITY;
    for (int64_t d = 0; d < D; d++)
        mx = fmax(mx, ck_ld(x, base + d * inner));
    double s = 0.0;
    for (int64_t d = 0; d < D; d++)
        s = __dadd_rn(s, exp(ck_ld(x, base + d * inner) - mx));
    *m = mx;
    *lse = log(s);
}

__global__ void sm_fwd_kernel(ck_dv y, ck_dv x, int64_t outer, int64_t D, int64_t inner, bool lg)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int64_t base = (r / inner) * D * inner + r % inner;
        double m, lse;
        sm_stats(x, base, D, inner, &m, &lse);
        for (int64_t d = 0; d < D; d++) {
            double ls = ck_ld(x, base + d * inner) - m - lse;
            ck_st(y, base + d * inner, lg ? ls : exp(ls));
        }
    }
}

__global__ void sm_bwd_kernel(ck_dv dx, ck_dv dy, ck_dv x, int64_t outer, int64_t D, int64_t inner,
                              bool lg)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int64_t base = (r / inner) * D * inner + r % inner;
        double m, lse;
        sm_stats(x, base, D, inner, &m, &lse);
        double s = 0.0;
        for (int64_t d = 0; d < D; d++) {
            double gv = ck_ld(dy, base + d * inner);
            s = __dadd_rn(s, lg ? gv : gv * exp(ck_ld(x, base + d * inner) - m - lse));
        }
        for (int64_t d = 0; d < D; d++) {
            double p = exp(ck_ld(x, base + d * inner) - m - lse), gv = ck_ld(dy, base + d * inner);
            ck_acc(dx, base + d * inner, lg ? gv - p * s : p * (gv - s));
        }
    }
}

ck_status k18c_softmax_fwd(ck_cuda *cu, ck_dv y, ck_dv x, int64_t outer, int64_t D,
                           int64_t inner, bool log_softmax, ck_error *err)
{
    sm_fwd_kernel<<<ck_blocks(outer * inner), CK_THREADS, 0, cu->stream>>>(y, x, outer, D, inner,
                                                                          log_softmax);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_softmax_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, ck_dv x, int64_t outer, int64_t D,
                           int64_t inner, bool log_softmax, ck_error *err)
{
    sm_bwd_kernel<<<ck_blocks(outer * inner), CK_THREADS, 0, cu->stream>>>(dx, dy, x, outer, D,
                                                                          inner, log_softmax);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_SOFTMAX, CK_OP_LOG_SOFTMAX

ck_status cuda_softmax_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc18_softmax(CUDA_BE, op, io->in[0], io->out, &outer, &D, &inner, err));
    return k18c_softmax_fwd(cu, ck_view(io->out), ck_view(io->in[0]), outer, D, inner,
                            op->kind == CK_OP_LOG_SOFTMAX, err);
}

ck_status cuda_softmax_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc18_softmax(CUDA_BE, op, io->in[0], g->dout, &outer, &D, &inner, err));
    if (!g->din[0])
        return CK_OK;
    return k18c_softmax_bwd(cu, ck_view(g->din[0]), ck_view(g->dout), ck_view(io->in[0]), outer,
                            D, inner, op->kind == CK_OP_LOG_SOFTMAX, err);
}
