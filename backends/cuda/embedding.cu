/* CUDA embedding (backends/ref/embedding.c): forward one thread per output element;
 * backward one thread per weight element, gathering the positions that use its row. */
#include "backends/cuda/k18_cuda.cuh"

__global__ void emb_fwd_kernel(ck_dv y, const int32_t *ids, ck_dv w, int64_t M, int64_t E)
{
    CK_GRID_STRIDE(i, M * E)
    ck_st(y, i, ck_ld(w, (int64_t)ids[i / E] * E + i % E));
}

__global__ void emb_bwd_kernel(ck_dv dw, ck_dv dy, const int32_t *ids, int64_t M, int64_t V, int64_t E)
{
    CK_GRID_STRIDE(i, V * E)
    {
        const int64_t row = i / E, e = i % E;
        double acc = 0.0;
        bool any = false;
        for (int64_t m = 0; m < M; m++)
            if (ids[m] == row) {
                acc = __dadd_rn(acc, ck_ld(dy, m * E + e));
                any = true;
            }
        if (any)
            ck_acc(dw, i, acc);
    }
}

ck_status k18c_embedding_fwd(ck_cuda *cu, ck_dv y, const int32_t *ids, ck_dv w, int64_t M,
                             int64_t E, ck_error *err)
{
    emb_fwd_kernel<<<ck_blocks(M * E), CK_THREADS, 0, cu->stream>>>(y, ids, w, M, E);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_embedding_bwd(ck_cuda *cu, ck_dv dw, ck_dv dy, const int32_t *ids, int64_t M,
                             int64_t V, int64_t E, ck_error *err)
{
    emb_bwd_kernel<<<ck_blocks(V * E), CK_THREADS, 0, cu->stream>>>(dw, dy, ids, M, V, E);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status emb_check_ids(ck_cuda *cu, const ck_tensor *ids, int64_t M, int64_t V,
                               ck_error *err)
{
    int32_t *h = (int32_t *)malloc(sizeof(int32_t) * (size_t)(M ? M : 1));
    if (!h)
        return ck_fail(err, CK_ERR_NOMEM, "embedding: no host memory for %lld ids", (long long)M);
    ck_status st = CK_GPU_CALL(cudaMemcpyAsync(h, ids->data, sizeof(int32_t) * (size_t)M,
                                               cudaMemcpyDeviceToHost, cu->stream));
    if (st == CK_OK)
        st = CK_GPU_CALL(cudaStreamSynchronize(cu->stream));
    if (st == CK_OK)
        st = ck_opc18_embedding_ids(ids, h, M, V, err);
    free(h);
    return st;
}

ck_status cuda_embedding_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc18_embedding(CUDA_BE, io->in[0], io->weight, io->out, &M, &V, &E, err));
    CK_TRY(emb_check_ids(cu, io->in[0], M, V, err));
    return k18c_embedding_fwd(cu, ck_view(io->out), (const int32_t *)io->in[0]->data,
                              ck_view(io->weight), M, E, err);
}

ck_status cuda_embedding_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc18_embedding(CUDA_BE, io->in[0], io->weight, g->dout, &M, &V, &E, err));
    if (!g->dweight)
        return CK_OK;
    CK_TRY(emb_check_ids(cu, io->in[0], M, V, err));
    return k18c_embedding_bwd(cu, ck_view(g->dweight), ck_view(g->dout),
                              (const int32_t *)io->in[0]->data, M, V, E, err);
}
