/*
 * CUDA random ops: inverted dropout and additive gaussian noise.
 *
 * Both draw from args->rng through the shared formulas of harness/core/rng.h and
 * harness/core/philox.h, compiled for the device: element i of a draw is a pure function of
 * (key, counter, i), so each thread computes its own element and the dropout mask is
 * bit-identical to the CPU backend's (an integer comparison of the same Philox word).
 * Dropout keeps nothing for backward: it regenerates its mask from the same stream.
 * Each tensor is loaded in its own dtype; values are computed in double and rounded once
 * on store, and backward adds its contribution with one rounding (ck_acc), as on the
 * CPU. The noise value
 * itself comes from ck_rng_normal_f32, whose logf/cosf/sqrtf are CUDA's here and glibc's
 * there (within 2 ulp of each other in fp32), so noise matches within tolerance, not bitwise.
 */
#include "backends/cuda/cuda_common.cuh"

// ----------------------------------------------------------------------------
// kernels

/* out = keep ? x / (1 - rate) : 0; element i is dropped iff its word is below threshold */
static __global__ void dropout_forward_kernel(ck_dv out, ck_dv x, ck_rng_stream rng, uint32_t threshold,
                                       double scale, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        const bool keep = ck_rng_u32(&rng, (uint64_t)i) >= threshold;
        ck_st(out, i, keep ? ck_ld(x, i) * scale : 0.0);
    }
}

/* dx += keep ? dout / (1 - rate) : 0, with the mask regenerated from rng */
static __global__ void dropout_backward_kernel(ck_dv dx, ck_dv dout, ck_rng_stream rng,
                                        uint32_t threshold, double scale, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        if (ck_rng_u32(&rng, (uint64_t)i) >= threshold)
            ck_acc(dx, i, ck_ld(dout, i) * scale);
    }
}

/* out = x + stddev * n_i with n_i the float normal draw of element i */
static __global__ void noise_forward_kernel(ck_dv out, ck_dv x, ck_rng_stream rng, double stddev,
                                     int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(out, i, ck_ld(x, i) + stddev * (double)ck_rng_normal_f32(&rng, (uint64_t)i));
}

/* dx += dout */
static __global__ void noise_backward_kernel(ck_dv dx, ck_dv dout, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_acc(dx, i, ck_ld(dout, i));
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status dropout_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    CK_TRY(ck_opc_dropout_fwd(CUDA_BE, op, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    const uint32_t threshold = ck_dropout_threshold(op->rate);
    const double scale = 1.0 / (1.0 - op->rate);
    dropout_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), args->rng, threshold, scale, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status dropout_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_dropout_bwd(CUDA_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    const uint32_t threshold = ck_dropout_threshold(op->rate);
    const double scale = 1.0 / (1.0 - op->rate);
    dropout_backward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout), args->rng, threshold, scale, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status noise_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    CK_TRY(ck_opc_noise_fwd(CUDA_BE, op, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    noise_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), args->rng, op->stddev, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status noise_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    CK_TRY(ck_opc_noise_bwd(CUDA_BE, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    noise_backward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout), n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_DROPOUT: return cuda_op_fns{dropout_op_forward, dropout_op_backward};
    case CK_OP_GAUSSIAN_NOISE: return cuda_op_fns{noise_op_forward, noise_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(random, pick)
