/*
 * CUDA pointwise activations: relu, leaky_relu, gelu (exact, erf form), tanh, sigmoid.
 *
 * As backends/ref/activation.c: every kernel loads each tensor in its own dtype (x, y, dy
 * and dx need not share one), computes in double and rounds once on store; backward adds
 * its double contribution to dx with one rounding (ck_acc). Backward differentiates at the
 * input x (io->in[0]), so relu'(0) = 0 and leaky_relu'(0) = slope. relu and leaky_relu
 * match the CPU bit for bit; gelu, tanh and sigmoid use CUDA's double erf/exp/tanh (within
 * 2 ulp in double), so after rounding to fp32 or lower they almost always match glibc's.
 */
#include "backends/cuda/cuda_common.cuh"

/* glibc's M_SQRT1_2 and M_2_SQRTPI, spelled out for device code */
#define CK_SQRT1_2 0.70710678118654752440
#define CK_2_SQRTPI 1.12837916709551257390

// ----------------------------------------------------------------------------
// the functions and their derivatives (as the CPU's act / dact)

__device__ __forceinline__ double ck_sigmoid(double x)
{
    /* never exponentiates a positive number, so it cannot overflow */
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

__device__ __forceinline__ double ck_act(int kind, double slope, double x)
{
    switch (kind) {
    case CK_OP_RELU: return x <= 0.0 ? 0.0 : x; /* NaN stays NaN, as torch.relu */
    case CK_OP_LEAKY_RELU: return x > 0.0 ? x : slope * x;
    case CK_OP_GELU: return 0.5 * x * (1.0 + erf(x * CK_SQRT1_2));
    case CK_OP_TANH: return tanh(x);
    case CK_OP_SIGMOID: return ck_sigmoid(x);
    default: return __longlong_as_double(0x7ff8000000000000LL); /* NaN */
    }
}

/* d act / dx at x */
__device__ __forceinline__ double ck_dact(int kind, double slope, double x)
{
    switch (kind) {
    case CK_OP_RELU: return x <= 0.0 ? 0.0 : 1.0; /* threshold_backward: NaN passes dy */
    case CK_OP_LEAKY_RELU: return x > 0.0 ? 1.0 : slope;
    case CK_OP_GELU: {
        /* Phi(x) + x phi(x) */
        double cdf = 0.5 * (1.0 + erf(x * CK_SQRT1_2));
        double pdf = exp(-0.5 * x * x) * (0.5 * CK_2_SQRTPI * CK_SQRT1_2);
        return cdf + x * pdf;
    }
    case CK_OP_TANH: {
        double t = tanh(x);
        return 1.0 - t * t;
    }
    case CK_OP_SIGMOID: {
        double s = ck_sigmoid(x);
        return s * (1.0 - s);
    }
    default: return __longlong_as_double(0x7ff8000000000000LL);
    }
}

// ----------------------------------------------------------------------------
// kernels

/* out = act(inp); all (numel) */
static __global__ void activation_forward_kernel(ck_dv out, ck_dv inp, int kind, double slope,
                                          int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(out, i, ck_act(kind, slope, ck_ld(inp, i)));
}

/* dinp += dout * act'(inp); all (numel) */
static __global__ void activation_backward_kernel(ck_dv dinp, ck_dv dout, ck_dv inp, int kind,
                                           double slope, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_acc(dinp, i, ck_ld(dout, i) * ck_dact(kind, slope, ck_ld(inp, i)));
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_activation_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_fwd(CUDA_BE, op, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    activation_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), (int)op->kind, op->slope, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_activation_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_bwd(CUDA_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    activation_backward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout), ck_view(io->in[0]), (int)op->kind, op->slope, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}
