/*
 * CUDA fused relu backward (backend.h: ck_op_grads.din0_relu_over_input and
 * loss_backward's relu_over), as the host backends do it (backends/ref/relu_over.c): the
 * relu's mask is recorded as one bit per element (one thread per 32-element word,
 * !(r <= 0): NaN passes) in device scratch of numel / 8 bytes (the backend's scratch
 * figure counts it; the executor's activation accounting does not), the buffer is zeroed
 * and the ordinary gradient is computed into it (every cuDNN, cuBLAS and direct path
 * unchanged), then one thread per element applies the relu's backward with the pointwise
 * kernel's own operations (+0 stored, dy * (0 or 1) added with one rounding): the
 * unfused bits by construction.
 */
#include "backends/cuda/cuda_common.cuh"

static __global__ void relu_mask_take_kernel(uint32_t *bits, ck_dv r, int64_t n)
{
    CK_GRID_STRIDE(w, (n + 31) / 32)
    {
        uint32_t word = 0;
        const int64_t k0 = w * 32;
        for (int b = 0; b < 32 && k0 + b < n; b++)
            word |= (uint32_t)!(ck_ld(r, k0 + b) <= 0.0) << b;
        bits[w] = word;
    }
}

static __global__ void relu_mask_apply_kernel(ck_dv din, const uint32_t *bits, int64_t n)
{
    CK_GRID_STRIDE(k, n)
    {
        const double dact = (bits[k >> 5] >> (k & 31)) & 1u ? 1.0 : 0.0;
        const double v = ck_ld(din, k) * dact; /* relu's dout[k] * act'(x[k]) */
        ck_st(din, k, 0.0);
        ck_acc(din, k, v);
    }
}

ck_status cuda_relu_mask_take(ck_cuda *cu, const ck_tensor *r, ck_dev_buf *bits, ck_error *err)
{
    const int64_t n = ck_shape_numel(&r->shape), words = n / 32 + 1;
    CK_TRY(bits->alloc(cu, (size_t)words * sizeof(uint32_t), "the relu mask", err));
    relu_mask_take_kernel<<<ck_blocks(words), CK_THREADS, 0, cu->stream>>>(bits->as<uint32_t>(),
                                                                           ck_view(r), n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_relu_mask_apply(ck_cuda *cu, ck_tensor *din, const ck_dev_buf *bits, ck_error *err)
{
    const int64_t n = ck_shape_numel(&din->shape);
    relu_mask_apply_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(din), bits->as<const uint32_t>(), n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_backward_relu_over_input(ck_cuda *cu, cuda_bwd_fn fn, const ck_op_params *op,
                                        const ck_fwd_args *args, const ck_op_io *io,
                                        ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_relu_over_input(op, io, g, err));
    const ck_tensor *r = io->in[0], *d = g->din[0];
    ck_dev_buf bits;
    CK_TRY(cuda_relu_mask_take(cu, r, &bits, err));
    CK_CUDA_CHECK(cudaMemsetAsync(d->data, 0, ck_tensor_bytes(d), cu->stream));
    ck_tensor hidden = *r; /* the input gradient does not read the input */
    hidden.data = NULL;
    ck_op_io dx_io = *io;
    dx_io.in[0] = &hidden;
    ck_op_grads dx_g = *g;
    dx_g.din0_relu_over_input = false;
    CK_TRY(fn(cu, op, args, &dx_io, &dx_g, err));
    return cuda_relu_mask_apply(cu, g->din[0], &bits, err);
}

ck_status cuda_loss_backward_relu_over(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                                       const ck_tensor *target, double scale, ck_tensor *dy,
                                       ck_error *err)
{
    CK_TRY(ck_opc_loss_relu_over(kind, y, dy, err));
    ck_dev_buf bits;
    CK_TRY(cuda_relu_mask_take(cu, y, &bits, err));
    /* each thread of the loss gradient reads y[k] before it writes dy[k] */
    CK_TRY(cuda_loss_backward(cu, kind, y, target, scale, dy, err));
    return cuda_relu_mask_apply(cu, dy, &bits, err);
}
