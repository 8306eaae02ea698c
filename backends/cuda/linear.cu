/*
 * CUDA linear layer (CK_OP_LINEAR) with cuBLAS: y = x W^T + b over the last dimension.
 *
 * x (..., in) is M = numel / in rows. Row-major (M, in) is column-major (in, M), so the
 * three products are single column-major GEMMs without copies:
 *   forward      y^T  (units, M) = W (units, in)      . x^T (in, M)      [T, N]
 *   dx           dx^T (in, M)    = W^T (in, units)    . dy^T (units, M)  [N, N]
 *   dW           dW^T (in, units) = x^T (in, M)       . dy (M, units)    [N, T]
 * The bias is broadcast into y first and the GEMM adds to it (beta = 1), and backward
 * GEMMs accumulate into dx and dW the same way, so every output element is rounded once
 * from the fp32 (fp64) accumulator, as harness/precision.md asks. fp32 and fp64 use the
 * PEDANTIC compute types (no TF32, no emulation); fp16/bf16 use tensor cores with fp32
 * accumulation and reduced-precision split-K reductions disallowed. cuBLAS is bitwise
 * repeatable on one GPU model with atomics off and one stream, both set here. The bias
 * gradient is a fixed-order double reduction (cuda_common.cuh), like the CPU's.
 *
 * All tensors of a call share one dtype (fp32, fp64, fp16 or bf16) on this path; when they
 * do not (a recomputation in another dtype), the layer runs on fp64 copies and its
 * results are rounded once into their tensors, as the CPU's wide views do
 * (cuda_forward_wide / cuda_backward_wide).
 */
#include "backends/cuda/cuda_common.cuh"

// ----------------------------------------------------------------------------
// cuBLAS handle and the one GEMM call

static ck_status ensure_cublas(ck_cuda *cu, ck_error *err)
{
    if (cu->cublas)
        return CK_OK;
    CK_CUBLAS_CHECK(cublasCreate(&cu->cublas));
    CK_CUBLAS_CHECK(cublasSetStream(cu->cublas, cu->stream));
    CK_CUBLAS_CHECK(cublasSetAtomicsMode(cu->cublas, CUBLAS_ATOMICS_NOT_ALLOWED));
    CK_CUBLAS_CHECK(cublasSetPointerMode(cu->cublas, CUBLAS_POINTER_MODE_HOST));
    return CK_OK;
}

void cuda_linear_release(ck_cuda *cu)
{
    if (cu->cublas)
        (void)cublasDestroy(cu->cublas);
    cu->cublas = nullptr;
}

typedef struct {
    cudaDataType_t data;
    cublasComputeType_t compute;
    int math; /* cublasMath_t flags */
    const char *math_name;
} gemm_types;

static gemm_types gemm_types_for(ck_dtype dt)
{
    switch (dt) {
    case CK_F64:
        return {CUDA_R_64F, CUBLAS_COMPUTE_64F_PEDANTIC, CUBLAS_PEDANTIC_MATH,
                "cuBLAS COMPUTE_64F_PEDANTIC"};
    case CK_F16:
        return {CUDA_R_16F, CUBLAS_COMPUTE_32F,
                CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
                "cuBLAS COMPUTE_32F (fp32 accumulate)"};
    case CK_BF16:
        return {CUDA_R_16BF, CUBLAS_COMPUTE_32F,
                CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
                "cuBLAS COMPUTE_32F (fp32 accumulate)"};
    case CK_F32:
    default:
        return {CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_PEDANTIC_MATH,
                "cuBLAS COMPUTE_32F_PEDANTIC (no TF32)"};
    }
}

/* Column-major C (m, n) = op(A) op(B) (+ C when accumulate). */
static ck_status gemm(ck_cuda *cu, ck_dtype dt, cublasOperation_t ta, cublasOperation_t tb,
                      int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                      const void *B, int64_t ldb, bool accumulate, void *C, int64_t ldc,
                      ck_error *err)
{
    const gemm_types t = gemm_types_for(dt);
    CK_CUBLAS_CHECK(cublasSetMathMode(cu->cublas, static_cast<cublasMath_t>(t.math)));
    if (dt == CK_F64) {
        const double one = 1.0, beta = accumulate ? 1.0 : 0.0;
        CK_CUBLAS_CHECK(cublasGemmEx_64(cu->cublas, ta, tb, m, n, k, &one, A, t.data, lda, B,
                                        t.data, ldb, &beta, C, t.data, ldc, t.compute,
                                        CUBLAS_GEMM_DEFAULT));
    } else {
        const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        CK_CUBLAS_CHECK(cublasGemmEx_64(cu->cublas, ta, tb, m, n, k, &one, A, t.data, lda, B,
                                        t.data, ldb, &beta, C, t.data, ldc, t.compute,
                                        CUBLAS_GEMM_DEFAULT));
    }
    return CK_OK;
}

static ck_status record(ck_cuda *cu, const ck_tensor *weight, ck_cuda_pass pass, ck_dtype dt,
                        ck_error *err)
{
    return cuda_record_algo(cu, weight, "linear", pass, dt, "cublasGemmEx DEFAULT", -1, true,
                            gemm_types_for(dt).math_name, 0, -1.0f, "fixed", err);
}

// ----------------------------------------------------------------------------
// kernels

/* y[m, u] = b[u]; y (M, units), same dtype */
static __global__ void linear_bias_fill_kernel(ck_dv y, ck_dv b, int64_t M, int64_t units)
{
    CK_GRID_STRIDE(i, M * units)
    ck_st(y, i, ck_ld(b, i % units));
}

/* sum over rows m of dy[m, u] */
struct linear_dbias_term {
    ck_dv dy;
    int64_t units;
    __device__ ck_dvec<1> operator()(int64_t u, int64_t m) const
    {
        return {{ck_ld(dy, m * units + u)}};
    }
};

/* db[u] += (T)sum[u] as the CPU adds it (ck_acc_mode) */
static __global__ void linear_dbias_apply_kernel(ck_dv db, const double *sum, int64_t units, int mode)
{
    CK_GRID_STRIDE(u, units)
    ck_acc_mode(db, u, sum[u], mode);
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status linear_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              ck_op_io *io, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    CK_TRY(ck_cuda_check_float_dtypes("linear", all, 4, err));
    ck_linear_dims d;
    CK_TRY(ck_opc_linear_shapes(x, io->weight, b, io->out, &d, err));
    const ck_dtype dt = ck_common_dtype(all, 4);
    if (dt == CK_DTYPE_COUNT)
        return cuda_forward_wide(cu, linear_op_forward, op, args, io, err);
    CK_TRY(ensure_cublas(cu, err));
    if (b) {
        linear_bias_fill_kernel<<<ck_blocks(d.M * d.units), CK_THREADS, 0, cu->stream>>>(
            ck_view(io->out), ck_view(b), d.M, d.units);
        CK_LAUNCH_CHECK();
    }
    CK_TRY(gemm(cu, dt, CUBLAS_OP_T, CUBLAS_OP_N, d.units, d.M, d.in, io->weight->data, d.in,
                x->data, d.in, b != NULL, io->out->data, d.units, err));
    return record(cu, io->weight, CK_CUDA_PASS_FORWARD, dt, err);
}

static ck_status linear_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    ck_tensor *db = op->bias ? g->dbias : NULL;
    const ck_tensor *all[] = {x, io->weight, g->dout, g->din[0], g->dweight, db};
    CK_TRY(ck_cuda_check_float_dtypes("linear", all, 6, err));
    ck_linear_dims d;
    CK_TRY(ck_opc_linear_shapes(x, io->weight, db, g->dout, &d, err));
    if (g->din[0] && g->din0_fresh) /* its contents are undefined (backend.h) */
        CK_CUDA_CHECK(cudaMemsetAsync(g->din[0]->data, 0, ck_tensor_bytes(g->din[0]), cu->stream));
    const ck_dtype dt = ck_common_dtype(all, 6);
    if (dt == CK_DTYPE_COUNT)
        return cuda_backward_wide(cu, linear_op_backward, op, args, io, g, err);
    CK_TRY(ensure_cublas(cu, err));
    if (g->din[0]) {
        CK_TRY(gemm(cu, dt, CUBLAS_OP_N, CUBLAS_OP_N, d.in, d.M, d.units, io->weight->data,
                    d.in, g->dout->data, d.units, true, g->din[0]->data, d.in, err));
        CK_TRY(record(cu, io->weight, CK_CUDA_PASS_BACKWARD_DATA, dt, err));
    }
    if (g->dweight) {
        CK_TRY(gemm(cu, dt, CUBLAS_OP_N, CUBLAS_OP_T, d.in, d.units, d.M, x->data, d.in,
                    g->dout->data, d.units, true, g->dweight->data, d.in, err));
        CK_TRY(record(cu, io->weight, CK_CUDA_PASS_BACKWARD_FILTER, dt, err));
    }
    if (db) {
        ck_dev_buf sum;
        CK_TRY(sum.alloc(cu, (size_t)d.units * sizeof(double), "linear bias gradient sums", err));
        CK_TRY(ck_row_sums<1>(cu, linear_dbias_term{ck_view(g->dout), d.units}, d.units, d.M,
                              sum.as<double>(), err));
        const ck_tensor *mine[] = {db};
        linear_dbias_apply_kernel<<<ck_blocks(d.units), CK_THREADS, 0, cu->stream>>>(
            ck_view(db), sum.as<double>(), d.units, ck_mode_of(mine, 1));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

/*
 * CUDA matmul (batched, transposes, shared second operand): one thread per output or
 * gradient element, each a double sum in the reference's order (backends/ref/linear.c),
 * rounded once. A plain kernel rather than cuBLAS: fp16/bf16 and mixed dtypes then follow
 * precision.md exactly, and the sizes the harness checkpoints are small.
 */
#include "backends/cuda/cuda_common.cuh"

static __device__ __forceinline__ int64_t mm_a(const ck_matmul_geom &g, int64_t bt, int64_t m, int64_t k)
{
    return g.trans_a ? (bt * g.K + k) * g.M + m : (bt * g.M + m) * g.K + k;
}
static __device__ __forceinline__ int64_t mm_b(const ck_matmul_geom &g, int64_t bt, int64_t k, int64_t n)
{
    const int64_t bb = g.b_shared ? 0 : bt;
    return g.trans_b ? (bb * g.N + n) * g.K + k : (bb * g.K + k) * g.N + n;
}

static __global__ void mm_fwd_kernel(ck_dv y, ck_dv a, ck_dv b, ck_matmul_geom g)
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

static __global__ void mm_da_kernel(ck_dv da, ck_dv dy, ck_dv b, ck_matmul_geom g)
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

static __global__ void mm_db_kernel(ck_dv db, ck_dv dy, ck_dv a, ck_matmul_geom g)
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

static ck_status launch_matmul_fwd(ck_cuda *cu, ck_dv y, ck_dv a, ck_dv b, const ck_matmul_geom &g,
                          ck_error *err)
{
    mm_fwd_kernel<<<ck_blocks(g.batch * g.M * g.N), CK_THREADS, 0, cu->stream>>>(y, a, b, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_matmul_bwd(ck_cuda *cu, ck_dv da, ck_dv db, ck_dv dy, ck_dv a, ck_dv b,
                          const ck_matmul_geom &g, ck_error *err)
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

static ck_status matmul_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_matmul_geom g;
    CK_TRY(ck_opc_matmul(CUDA_BE, op, io->in[0], matmul_b(io), io->out, &g, err));
    return launch_matmul_fwd(cu, ck_view(io->out), ck_view(io->in[0]), ck_view(matmul_b(io)), g,
                           err);
}

static ck_status matmul_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_matmul_geom geo;
    CK_TRY(ck_opc_matmul(CUDA_BE, op, io->in[0], matmul_b(io), g->dout, &geo, err));
    ck_tensor *db = io->n_in >= 2 ? g->din[1] : g->dweight;
    return launch_matmul_bwd(cu, ck_view(g->din[0]), ck_view(db), ck_view(g->dout),
                           ck_view(io->in[0]), ck_view(matmul_b(io)), geo, err);
}

/* CUDA embedding (backends/ref/linear.c): forward one thread per output element;
 * backward one thread per weight element, gathering the positions that use its row. */
#include "backends/cuda/cuda_common.cuh"

static __global__ void emb_fwd_kernel(ck_dv y, const int32_t *ids, ck_dv w, int64_t M, int64_t E)
{
    CK_GRID_STRIDE(i, M * E)
    ck_st(y, i, ck_ld(w, (int64_t)ids[i / E] * E + i % E));
}

static __global__ void emb_bwd_kernel(ck_dv dw, ck_dv dy, const int32_t *ids, int64_t M, int64_t V, int64_t E)
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

static ck_status launch_embedding_fwd(ck_cuda *cu, ck_dv y, const int32_t *ids, ck_dv w, int64_t M,
                             int64_t E, ck_error *err)
{
    emb_fwd_kernel<<<ck_blocks(M * E), CK_THREADS, 0, cu->stream>>>(y, ids, w, M, E);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_embedding_bwd(ck_cuda *cu, ck_dv dw, ck_dv dy, const int32_t *ids, int64_t M,
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
        st = ck_opc_embedding_ids(ids, h, M, V, err);
    free(h);
    return st;
}

static ck_status embedding_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc_embedding(CUDA_BE, io->in[0], io->weight, io->out, &M, &V, &E, err));
    CK_TRY(emb_check_ids(cu, io->in[0], M, V, err));
    return launch_embedding_fwd(cu, ck_view(io->out), (const int32_t *)io->in[0]->data,
                              ck_view(io->weight), M, E, err);
}

static ck_status embedding_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc_embedding(CUDA_BE, io->in[0], io->weight, g->dout, &M, &V, &E, err));
    if (!g->dweight)
        return CK_OK;
    CK_TRY(emb_check_ids(cu, io->in[0], M, V, err));
    return launch_embedding_bwd(cu, ck_view(g->dweight), ck_view(g->dout),
                              (const int32_t *)io->in[0]->data, M, V, E, err);
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_LINEAR: return cuda_op_fns{linear_op_forward, linear_op_backward};
    case CK_OP_MATMUL: return cuda_op_fns{matmul_op_forward, matmul_op_backward};
    case CK_OP_EMBEDDING: return cuda_op_fns{embedding_op_forward, embedding_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(linear, pick)
