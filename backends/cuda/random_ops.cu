/*
 * CUDA random ops: inverted dropout and additive gaussian noise.
 *
 * Both draw from args->rng through the shared formulas of harness/rng.h and
 * harness/philox.h, compiled for the device: element i of a draw is a pure function of
 * (key, counter, i), so each thread computes its own element and the dropout mask is
 * bit-identical to the CPU backend's (an integer comparison of the same Philox word).
 * Dropout keeps nothing for backward: it regenerates its mask from the same stream.
 * Values are computed in double and rounded once on store, as on the CPU; the noise value
 * itself comes from ck_rng_normal_f32, whose logf/cosf/sqrtf are CUDA's here and glibc's
 * there (within 2 ulp of each other in fp32), so noise matches within tolerance, not bitwise.
 */
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// kernels

/* out = keep ? x / (1 - rate) : 0; element i is dropped iff its word is below threshold */
template <typename T>
__global__ void dropout_forward_kernel(T *out, const T *x, ck_rng_stream rng, uint32_t threshold,
                                       double scale, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        const bool keep = ck_rng_u32(&rng, (uint64_t)i) >= threshold;
        out[i] = ck_from_d<T>(keep ? ck_to_d(x[i]) * scale : 0.0);
    }
}

/* dx += keep ? dout / (1 - rate) : 0, with the mask regenerated from rng */
template <typename T>
__global__ void dropout_backward_kernel(T *dx, const T *dout, ck_rng_stream rng,
                                        uint32_t threshold, double scale, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        if (ck_rng_u32(&rng, (uint64_t)i) >= threshold)
            dx[i] = ck_add_wide(dx[i], ck_to_d(dout[i]) * scale);
    }
}

/* out = x + stddev * n_i with n_i the float normal draw of element i */
template <typename T>
__global__ void noise_forward_kernel(T *out, const T *x, ck_rng_stream rng, double stddev,
                                     int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    out[i] = ck_from_d<T>(ck_to_d(x[i]) + stddev * (double)ck_rng_normal_f32(&rng, (uint64_t)i));
}

/* dx += dout */
template <typename T>
__global__ void noise_backward_kernel(T *dx, const T *dout, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    dx[i] = ck_add_wide(dx[i], ck_to_d(dout[i]));
}

// ----------------------------------------------------------------------------
// checks (as the CPU's)

/* x has a float dtype and every non-NULL tensor of ts shares its dtype and element count. */
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

static ck_status dropout_check_rate(const char *fn, double rate, ck_error *err)
{
    if (!(rate >= 0.0 && rate < 1.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: rate %g is outside [0, 1)", fn, rate);
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_dropout_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    const char *fn = "dropout";
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    CK_TRY(dropout_check_rate(fn, op->rate, err));
    const ck_tensor *ts[] = {io->out};
    CK_TRY(check_pointwise(fn, io->in[0], ts, 1, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    const uint32_t threshold = ck_dropout_threshold(op->rate);
    const double scale = 1.0 / (1.0 - op->rate);
    CK_CUDA_DISPATCH(io->in[0]->dtype, T,
                     dropout_forward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(io->out->data), static_cast<const T *>(io->in[0]->data),
                         args->rng, threshold, scale, n));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_dropout_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const char *fn = "dropout backward";
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    if (!g->din[0])
        return CK_OK;
    CK_TRY(dropout_check_rate(fn, op->rate, err));
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    CK_TRY(check_pointwise(fn, io->in[0], ts, 2, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    const uint32_t threshold = ck_dropout_threshold(op->rate);
    const double scale = 1.0 / (1.0 - op->rate);
    CK_CUDA_DISPATCH(io->in[0]->dtype, T,
                     dropout_backward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(g->din[0]->data), static_cast<const T *>(g->dout->data),
                         args->rng, threshold, scale, n));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_noise_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    const char *fn = "gaussian_noise";
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    if (!(op->stddev >= 0.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: stddev must be >= 0, got %g", fn, op->stddev);
    const ck_tensor *ts[] = {io->out};
    CK_TRY(check_pointwise(fn, io->in[0], ts, 1, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    CK_CUDA_DISPATCH(io->in[0]->dtype, T,
                     noise_forward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(io->out->data), static_cast<const T *>(io->in[0]->data),
                         args->rng, op->stddev, n));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_noise_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "gaussian_noise backward";
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    if (!g->din[0])
        return CK_OK;
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    CK_TRY(check_pointwise(fn, io->in[0], ts, 2, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    CK_CUDA_DISPATCH(io->in[0]->dtype, T,
                     noise_backward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(g->din[0]->data), static_cast<const T *>(g->dout->data),
                         n));
    CK_LAUNCH_CHECK();
    return CK_OK;
}
