/* CUDA rmsnorm (backends/ref/rmsnorm.c): one thread per row; dw one thread per column. */
#include "backends/cuda/k18_cuda.cuh"

__device__ double rms_rinv(ck_dv x, int64_t base, int64_t D, double eps)
{
    double sq = 0.0;
    for (int64_t j = 0; j < D; j++) {
        double v = ck_ld(x, base + j);
        sq = __dadd_rn(sq, __dmul_rn(v, v));
    }
    return 1.0 / sqrt(sq / (double)D + eps);
}

__device__ __forceinline__ double ld_or1(ck_dv t, int64_t i) { return t.p ? ck_ld(t, i) : 1.0; }

__global__ void rms_fwd_kernel(ck_dv y, ck_dv x, ck_dv w, int64_t R, int64_t D, double eps)
{
    CK_GRID_STRIDE(r, R)
    {
        const double ri = rms_rinv(x, r * D, D, eps);
        for (int64_t j = 0; j < D; j++)
            ck_st(y, r * D + j, ck_ld(x, r * D + j) * ri * ld_or1(w, j));
    }
}

__global__ void rms_dx_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv w, int64_t R, int64_t D, double eps)
{
    CK_GRID_STRIDE(r, R)
    {
        const double ri = rms_rinv(x, r * D, D, eps);
        double s = 0.0;
        for (int64_t j = 0; j < D; j++)
            s = __dadd_rn(s, ck_ld(dy, r * D + j) * ld_or1(w, j) * ck_ld(x, r * D + j));
        for (int64_t j = 0; j < D; j++)
            ck_acc(dx, r * D + j, ri * (ck_ld(dy, r * D + j) * ld_or1(w, j) -
                                        ck_ld(x, r * D + j) * ri * ri * s / (double)D));
    }
}

__global__ void rms_dw_kernel(ck_dv dw, ck_dv dy, ck_dv x, int64_t R, int64_t D, double eps)
{
    CK_GRID_STRIDE(j, D)
    {
        double acc = 0.0;
        for (int64_t r = 0; r < R; r++)
            acc = __dadd_rn(acc, ck_ld(dy, r * D + j) * ck_ld(x, r * D + j) * rms_rinv(x, r * D, D, eps));
        ck_acc(dw, j, acc);
    }
}

ck_status k18c_rmsnorm_fwd(ck_cuda *cu, ck_dv y, ck_dv x, ck_dv w, int64_t R, int64_t D,
                           double eps, ck_error *err)
{
    rms_fwd_kernel<<<ck_blocks(R), CK_THREADS, 0, cu->stream>>>(y, x, w, R, D, eps);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_rmsnorm_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv dy, ck_dv x, ck_dv w,
                           int64_t R, int64_t D, double eps, ck_error *err)
{
    if (dw.p) {
        rms_dw_kernel<<<ck_blocks(D), CK_THREADS, 0, cu->stream>>>(dw, dy, x, R, D, eps);
        CK_LAUNCH_CHECK();
    }
    if (dx.p) {
        rms_dx_kernel<<<ck_blocks(R), CK_THREADS, 0, cu->stream>>>(dx, dy, x, w, R, D, eps);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_rmsnorm_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc18_rows(CUDA_BE, "rmsnorm", op, io->in[0], io->out, io->weight, &R, &D, err));
    return k18c_rmsnorm_fwd(cu, ck_view(io->out), ck_view(io->in[0]), ck_view(io->weight), R, D,
                            op->eps, err);
}

ck_status cuda_rmsnorm_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc18_rows(CUDA_BE, "rmsnorm backward", op, io->in[0], g->dout, io->weight, &R, &D,
                         err));
    return k18c_rmsnorm_bwd(cu, ck_view(g->din[0]), ck_view(g->dweight), ck_view(g->dout),
                            ck_view(io->in[0]), ck_view(io->weight), R, D, op->eps, err);
}
