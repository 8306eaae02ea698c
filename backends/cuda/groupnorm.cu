/* CUDA groupnorm (backends/ref/groupnorm.c): one thread per (n, group); the parameter
 * gradients one thread per channel. */
#include "backends/cuda/k18_cuda.cuh"

__device__ void gn_stats(ck_dv x, int64_t base, int64_t M, double eps, double *mean, double *invstd)
{
    double s = 0.0;
    for (int64_t i = 0; i < M; i++)
        s = __dadd_rn(s, ck_ld(x, base + i));
    const double m = s / (double)M;
    double sq = 0.0;
    for (int64_t i = 0; i < M; i++) {
        double d = ck_ld(x, base + i) - m;
        sq = __dadd_rn(sq, __dmul_rn(d, d));
    }
    *mean = m;
    *invstd = 1.0 / sqrt(sq / (double)M + eps);
}

__global__ void gn_fwd_kernel(ck_dv y, ck_dv saved, ck_dv x, ck_dv w, ck_dv b, int64_t N,
                              int64_t C, int64_t S, int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    CK_GRID_STRIDE(r, N * G)
    {
        const int64_t n = r / G, gi = r % G, base = (n * C + gi * cpg) * S;
        double mean, invstd;
        gn_stats(x, base, M, eps, &mean, &invstd);
        if (saved.p) {
            ck_st(saved, r, mean);
            ck_st(saved, N * G + r, invstd);
        }
        for (int64_t c = 0; c < cpg; c++) {
            const int64_t ch = gi * cpg + c;
            const double wv = w.p ? ck_ld(w, ch) : 1.0, bv = b.p ? ck_ld(b, ch) : 0.0;
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = base + c * S + s;
                ck_st(y, i, (ck_ld(x, i) - mean) * invstd * wv + bv);
            }
        }
    }
}

__global__ void gn_dx_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv w, int64_t N, int64_t C, int64_t S,
                             int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    CK_GRID_STRIDE(r, N * G)
    {
        const int64_t n = r / G, gi = r % G, base = (n * C + gi * cpg) * S;
        double mean, invstd;
        gn_stats(x, base, M, eps, &mean, &invstd);
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < cpg; c++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = base + c * S + s;
                const double gv = ck_ld(dy, i) * (w.p ? ck_ld(w, gi * cpg + c) : 1.0);
                sg = __dadd_rn(sg, gv);
                sgx = __dadd_rn(sgx, gv * (ck_ld(x, i) - mean) * invstd);
            }
        for (int64_t c = 0; c < cpg; c++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = base + c * S + s;
                const double gv = ck_ld(dy, i) * (w.p ? ck_ld(w, gi * cpg + c) : 1.0);
                const double xhat = (ck_ld(x, i) - mean) * invstd;
                ck_acc(dx, i, invstd / (double)M * ((double)M * gv - sg - xhat * sgx));
            }
    }
}

__global__ void gn_dwb_kernel(ck_dv dw, ck_dv db, ck_dv dy, ck_dv x, int64_t N, int64_t C,
                              int64_t S, int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    CK_GRID_STRIDE(ch, C)
    {
        const int64_t gi = ch / cpg;
        double sdy = 0.0, sdyx = 0.0;
        for (int64_t n = 0; n < N; n++) {
            double mean, invstd;
            gn_stats(x, (n * C + gi * cpg) * S, M, eps, &mean, &invstd);
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = (n * C + ch) * S + s;
                sdy = __dadd_rn(sdy, ck_ld(dy, i));
                sdyx = __dadd_rn(sdyx, ck_ld(dy, i) * (ck_ld(x, i) - mean) * invstd);
            }
        }
        if (dw.p)
            ck_acc(dw, ch, sdyx);
        if (db.p)
            ck_acc(db, ch, sdy);
    }
}

ck_status k18c_groupnorm_fwd(ck_cuda *cu, ck_dv y, ck_dv saved, ck_dv x, ck_dv w, ck_dv b,
                             int64_t N, int64_t C, int64_t S, int64_t G, double eps,
                             ck_error *err)
{
    gn_fwd_kernel<<<ck_blocks(N * G), CK_THREADS, 0, cu->stream>>>(y, saved, x, w, b, N, C, S, G,
                                                                  eps);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_groupnorm_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv db, ck_dv dy, ck_dv x,
                             ck_dv w, int64_t N, int64_t C, int64_t S, int64_t G, double eps,
                             ck_error *err)
{
    if (dw.p || db.p) {
        gn_dwb_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(dw, db, dy, x, N, C, S, G, eps);
        CK_LAUNCH_CHECK();
    }
    if (dx.p) {
        gn_dx_kernel<<<ck_blocks(N * G), CK_THREADS, 0, cu->stream>>>(dx, dy, x, w, N, C, S, G, eps);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_groupnorm_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc18_groupnorm(CUDA_BE, op, io->in[0], io->out, io->weight, io->bias, &N, &C, &S,
                              err));
    return k18c_groupnorm_fwd(cu, ck_view(io->out), ck_view(NULL), ck_view(io->in[0]),
                              ck_view(io->weight), ck_view(io->bias), N, C, S, op->groups,
                              op->eps, err);
}

ck_status cuda_groupnorm_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc18_groupnorm(CUDA_BE, op, io->in[0], g->dout, io->weight, io->bias, &N, &C, &S,
                              err));
    return k18c_groupnorm_bwd(cu, ck_view(g->din[0]), ck_view(g->dweight), ck_view(g->dbias),
                              ck_view(g->dout), ck_view(io->in[0]), ck_view(io->weight), N, C,
                              S, op->groups, op->eps, err);
}
