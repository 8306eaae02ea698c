/*
 * CUDA matmul (batched, transposes, shared second operand): one thread per output or
 * gradient element, each a double sum in the reference's order (backends/ref/matmul.c),
 * rounded once. A plain kernel rather than cuBLAS: fp16/bf16 and mixed dtypes then follow
 * precision.md exactly, and the sizes the harness checkpoints are small.
 */
#include "backends/cuda/k18_cuda.cuh"

__device__ __forceinline__ int64_t mm_a(const k18_matmul_geom &g, int64_t bt, int64_t m, int64_t k)
{
    return g.trans_a ? (bt * g.K + k) * g.M + m : (bt * g.M + m) * g.K + k;
}
__device__ __forceinline__ int64_t mm_b(const k18_matmul_geom &g, int64_t bt, int64_t k, int64_t n)
{
    const int64_t bb = g.b_shared ? 0 : bt;
    return g.trans_b ? (bb * g.N + n) * g.K + k : (bb * g.K + k) * g.N + n;
}

__global__ void mm_fwd_kernel(ck_dv y, ck_dv a, ck_dv b, k18_matmul_geom g)
{
    CK_GRID_STRIDE(i, g.batch * g.M * g.N)
    {
        const int64_t n = i % g.N, m = (i / g.N) % g.M, bt = i / (g.N * g.M);
        double acc = 0.0;
        for (int64_t k = 0; k < g.K; k++)
            acc = __dadd_rn(acc, __dmul_rn(ck_ld(a, mm_a(g, bt, m, k)), ck_ld(b, mm_b(g, bt, k, n))));
        ck_st(y, i, acc);
    }
}

__global__ void mm_da_kernel(ck_dv da, ck_dv dy, ck_dv b, k18_matmul_geom g)
{
    CK_GRID_STRIDE(i, g.batch * g.M * g.K)
    {
        const int64_t k = i % g.K, m = (i / g.K) % g.M, bt = i / (g.K * g.M);
        double acc = 0.0;
        for (int64_t n = 0; n < g.N; n++)
            acc = __dadd_rn(acc, __dmul_rn(ck_ld(dy, (bt * g.M + m) * g.N + n), ck_ld(b, mm_b(g, bt, k, n))));
        ck_acc(da, mm_a(g, bt, m, k), acc);
    }
}

__global__ void mm_db_kernel(ck_dv db, ck_dv dy, ck_dv a, k18_matmul_geom g)
{
    const int64_t nb = g.b_shared ? 1 : g.batch;
    CK_GRID_STRIDE(i, nb * g.K * g.N)
    {
        const int64_t n = i % g.N, k = (i / g.N) % g.K, bb = i / (g.N * g.K);
        const int64_t b0 = g.b_shared ? 0 : bb, b1 = g.b_shared ? g.batch : bb + 1;
        double acc = 0.0;
        for (int64_t bt = b0; bt < b1; bt++)
            for (int64_t m = 0; m < g.M; m++)
                acc = __dadd_rn(acc, __dmul_rn(ck_ld(a, mm_a(g, bt, m, k)), ck_ld(dy, (bt * g.M + m) * g.N + n)));
        ck_acc(db, mm_b(g, bb, k, n), acc);
    }
}

ck_status k18c_matmul_fwd(ck_cuda *cu, ck_dv y, ck_dv a, ck_dv b, const k18_matmul_geom &g,
                          ck_error *err)
{
    mm_fwd_kernel<<<ck_blocks(g.batch * g.M * g.N), CK_THREADS, 0, cu->stream>>>(y, a, b, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_matmul_bwd(ck_cuda *cu, ck_dv da, ck_dv db, ck_dv dy, ck_dv a, ck_dv b,
                          const k18_matmul_geom &g, ck_error *err)
{
    if (da.p) {
        mm_da_kernel<<<ck_blocks(g.batch * g.M * g.K), CK_THREADS, 0, cu->stream>>>(da, dy, b, g);
        CK_LAUNCH_CHECK();
    }
    if (db.p) {
        mm_db_kernel<<<ck_blocks((g.b_shared ? 1 : g.batch) * g.K * g.N), CK_THREADS, 0,
                       cu->stream>>>(db, dy, a, g);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static const ck_tensor *matmul_b(const ck_op_io *io)
{
    return io->n_in >= 2 ? io->in[1] : io->weight;
}

ck_status cuda_matmul_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              ck_op_io *io, ck_error *err)
{
    (void)args;
    k18_matmul_geom g;
    CK_TRY(ck_opc18_matmul(CUDA_BE, op, io->in[0], matmul_b(io), io->out, &g, err));
    return k18c_matmul_fwd(cu, ck_view(io->out), ck_view(io->in[0]), ck_view(matmul_b(io)), g,
                           err);
}

ck_status cuda_matmul_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    k18_matmul_geom geo;
    CK_TRY(ck_opc18_matmul(CUDA_BE, op, io->in[0], matmul_b(io), g->dout, &geo, err));
    ck_tensor *db = io->n_in >= 2 ? g->din[1] : g->dweight;
    return k18c_matmul_bwd(cu, ck_view(g->din[0]), ck_view(db), ck_view(g->dout),
                           ck_view(io->in[0]), ck_view(matmul_b(io)), geo, err);
}
