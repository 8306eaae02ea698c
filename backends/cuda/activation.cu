/*
 * CUDA pointwise activations: relu, leaky_relu, gelu (exact, erf form), tanh, sigmoid.
 *
 * As backends/cpu/activation.c: every kernel computes in double and rounds once on store,
 * and backward differentiates at the input x (io->in[0]), so relu'(0) = 0 and
 * leaky_relu'(0) = slope. relu and leaky_relu match the CPU bit for bit; gelu, tanh and
 * sigmoid use CUDA's double erf/exp/tanh (within 2 ulp in double), so after rounding to
 * fp32 they almost always match the CPU's glibc results too.
 */
#include "cuda_common.cuh"

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
    case CK_OP_RELU: return x > 0.0 ? x : 0.0;
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
    case CK_OP_RELU: return x > 0.0 ? 1.0 : 0.0;
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

static bool is_activation(ck_op_kind k)
{
    return k == CK_OP_RELU || k == CK_OP_LEAKY_RELU || k == CK_OP_GELU || k == CK_OP_TANH ||
           k == CK_OP_SIGMOID;
}

// ----------------------------------------------------------------------------
// kernels

/* out = act(inp); all (numel) */
template <typename T>
__global__ void activation_forward_kernel(T *out, const T *inp, int kind, double slope,
                                          int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    out[i] = ck_from_d<T>(ck_act(kind, slope, ck_to_d(inp[i])));
}

/* dinp += dout * act'(inp); all (numel) */
template <typename T>
__global__ void activation_backward_kernel(T *dinp, const T *dout, const T *inp, int kind,
                                           double slope, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    dinp[i] = ck_add_wide(dinp[i], ck_to_d(dout[i]) * ck_dact(kind, slope, ck_to_d(inp[i])));
}

// ----------------------------------------------------------------------------
// checks (as the CPU's check_pointwise)

/* x has a float dtype and every other non-NULL tensor shares it and its element count. */
static ck_status check_pointwise(const char *fn, const ck_tensor *x, const ck_tensor *const *ts,
                                 int n, ck_error *err)
{
    if (!ck_cuda_float_dtype(x->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s; the cuda backend computes in "
                       "fp32, fp64, fp16 or bf16", fn, ck_cuda_tname(x), ck_dtype_name(x->dtype));
    int64_t numel = ck_shape_numel(&x->shape);
    for (int i = 0; i < n; i++) {
        const ck_tensor *t = ts[i];
        if (!t)
            continue;
        if (t->dtype != x->dtype)
            return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s but %s is %s", fn,
                           ck_cuda_tname(t), ck_dtype_name(t->dtype), ck_cuda_tname(x),
                           ck_dtype_name(x->dtype));
        if (ck_shape_numel(&t->shape) != numel)
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has %lld elements, %s has %lld", fn,
                           ck_cuda_tname(t), (long long)ck_shape_numel(&t->shape),
                           ck_cuda_tname(x), (long long)numel);
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_activation_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)args;
    if (!is_activation(op->kind))
        return ck_fail(err, CK_ERR_INTERNAL, "activation: op %s is not an activation",
                       ck_op_kind_name(op->kind));
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output",
                       ck_op_kind_name(op->kind));
    const ck_tensor *ts[] = {io->out};
    CK_TRY(check_pointwise(ck_op_kind_name(op->kind), io->in[0], ts, 1, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    CK_CUDA_DISPATCH(io->in[0]->dtype, T,
                     activation_forward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(io->out->data), static_cast<const T *>(io->in[0]->data),
                         (int)op->kind, op->slope, n));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_activation_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    if (!is_activation(op->kind))
        return ck_fail(err, CK_ERR_INTERNAL, "activation: op %s is not an activation",
                       ck_op_kind_name(op->kind));
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s backward: needs one input and dout",
                       ck_op_kind_name(op->kind));
    if (!g->din[0])
        return CK_OK;
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    CK_TRY(check_pointwise(ck_op_kind_name(op->kind), io->in[0], ts, 2, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    CK_CUDA_DISPATCH(io->in[0]->dtype, T,
                     activation_backward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(g->din[0]->data), static_cast<const T *>(g->dout->data),
                         static_cast<const T *>(io->in[0]->data), (int)op->kind, op->slope, n));
    CK_LAUNCH_CHECK();
    return CK_OK;
}
