/* CUDA mul, silu, gelu (tanh) (backends/ref/pointwise18.c): one thread per element. */
#include "backends/cuda/k18_cuda.cuh"

#define GELU_C 0.7978845608028654
#define GELU_K 0.044715

__device__ __forceinline__ double d_sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

__global__ void pw_fwd_kernel(int kind, ck_dv y, ck_dv a, ck_dv b, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    {
        const double x = ck_ld(a, i);
        double v;
        if (kind == 0)
            v = x * ck_ld(b, i);
        else if (kind == 1)
            v = x * d_sigmoid(x);
        else
            v = 0.5 * x * (1.0 + tanh(GELU_C * (x + GELU_K * x * x * x)));
        ck_st(y, i, v);
    }
}

__global__ void pw_bwd_kernel(int kind, ck_dv da, ck_dv db, ck_dv dy, ck_dv a, ck_dv b, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    {
        const double g = ck_ld(dy, i), x = ck_ld(a, i);
        if (kind == 3) {
            /* mul(x, x): both contributions, in the reference's order, rounded once */
            ck_acc(da, i, g * ck_ld(b, i) + g * x);
        } else if (kind == 0) {
            if (da.p)
                ck_acc(da, i, g * ck_ld(b, i));
            if (db.p)
                ck_acc(db, i, g * x);
        } else if (kind == 1) {
            const double s = d_sigmoid(x);
            ck_acc(da, i, g * (s * (1.0 + x * (1.0 - s))));
        } else {
            const double t = tanh(GELU_C * (x + GELU_K * x * x * x));
            ck_acc(da, i, g * (0.5 * (1.0 + t) +
                               0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_K * x * x)));
        }
    }
}

ck_status k18c_pointwise_fwd(ck_cuda *cu, int kind, ck_dv y, ck_dv a, ck_dv b, int64_t n,
                             ck_error *err)
{
    pw_fwd_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(kind, y, a, b, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_pointwise_bwd(ck_cuda *cu, int kind, ck_dv da, ck_dv db, ck_dv dy, ck_dv a,
                             ck_dv b, int64_t n, ck_error *err)
{
    if (!da.p && !db.p)
        return CK_OK;
    pw_bwd_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(kind, da, db, dy, a, b, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_MUL, CK_OP_SILU, CK_OP_GELU with approximate "tanh"

static int pw_kind(const ck_op_params *op)
{
    return op->kind == CK_OP_MUL ? 0 : op->kind == CK_OP_SILU ? 1 : 2;
}

static ck_status pw_check(const ck_op_params *op, const ck_op_io *io, const ck_tensor *y,
                          const ck_tensor *d1, const ck_tensor *d2, ck_error *err)
{
    const char *fn = op->kind == CK_OP_MUL ? "mul" : op->kind == CK_OP_SILU ? "silu" : "gelu";
    const int want = op->kind == CK_OP_MUL ? 2 : 1;
    if (io->n_in != want || !io->in[0] || (want == 2 && !io->in[1]) || !y)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs %d input(s) and an output", fn, want);
    const ck_tensor *ts[] = {y, want == 2 ? io->in[1] : NULL, d1, d2};
    return ck_opc_pointwise(CUDA_BE, fn, io->in[0], ts, 4, err);
}

ck_status cuda_pointwise18_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(pw_check(op, io, io->out, NULL, NULL, err));
    return k18c_pointwise_fwd(cu, pw_kind(op), ck_view(io->out), ck_view(io->in[0]),
                              ck_view(op->kind == CK_OP_MUL ? io->in[1] : NULL),
                              ck_shape_numel(&io->in[0]->shape), err);
}

ck_status cuda_pointwise18_backward(ck_cuda *cu, const ck_op_params *op,
                                    const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                    ck_error *err)
{
    (void)args;
    const bool two = op->kind == CK_OP_MUL;
    CK_TRY(pw_check(op, io, g->dout, g->din[0], two ? g->din[1] : NULL, err));
    if (two && g->din[0] && g->din[0] == g->din[1])
        return k18c_pointwise_bwd(cu, 3, ck_view(g->din[0]), ck_view(NULL), ck_view(g->dout),
                                  ck_view(io->in[0]), ck_view(io->in[1]),
                                  ck_shape_numel(&io->in[0]->shape), err);
    return k18c_pointwise_bwd(cu, pw_kind(op), ck_view(g->din[0]),
                              ck_view(two ? g->din[1] : NULL), ck_view(g->dout),
                              ck_view(io->in[0]), ck_view(two ? io->in[1] : NULL),
                              ck_shape_numel(&io->in[0]->shape), err);
}

// ----------------------------------------------------------------------------
// CK_OP_POSITIONAL (backends/ref/pointwise18.c): y = x + W repeated over the batch

__global__ void pos_fwd_kernel(ck_dv y, ck_dv x, ck_dv w, int64_t N, int64_t M)
{
    CK_GRID_STRIDE(i, N * M)
    ck_st(y, i, ck_ld(x, i) + ck_ld(w, i % M));
}

__global__ void pos_dx_kernel(ck_dv dx, ck_dv dy, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    ck_acc(dx, i, ck_ld(dy, i));
}

__global__ void pos_dw_kernel(ck_dv dw, ck_dv dy, int64_t N, int64_t M)
{
    CK_GRID_STRIDE(j, M)
    {
        double acc = 0.0;
        for (int64_t n = 0; n < N; n++)
            acc = __dadd_rn(acc, ck_ld(dy, n * M + j));
        ck_acc(dw, j, acc);
    }
}

ck_status cuda_positional_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc18_positional(CUDA_BE, io->in[0], io->weight, io->out, &N, &M, err));
    pos_fwd_kernel<<<ck_blocks(N * M), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), ck_view(io->weight), N, M);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_positional_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc18_positional(CUDA_BE, io->in[0], io->weight, g->dout, &N, &M, err));
    if (g->din[0]) {
        pos_dx_kernel<<<ck_blocks(N * M), CK_THREADS, 0, cu->stream>>>(ck_view(g->din[0]),
                                                                      ck_view(g->dout), N * M);
        CK_LAUNCH_CHECK();
    }
    if (g->dweight) {
        pos_dw_kernel<<<ck_blocks(M), CK_THREADS, 0, cu->stream>>>(ck_view(g->dweight),
                                                                  ck_view(g->dout), N, M);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}
