/*
 * CUDA nearest-neighbour upsampling (CK_OP_UPSAMPLE) by integer scale[] per spatial dim,
 * 1 to 3 spatial dims.
 *
 *   y[n, c, o...] = x[n, c, o / scale...]
 *
 * As backends/ref/upsample.c: forward copies values (one rounding when y's dtype differs
 * from x's); backward sums dout over each scale0 x scale1 x scale2 block in double, in the
 * CPU's order (r0, r1, r2), and adds the sum to dx as the CPU does: `dx += (T)acc` when
 * every tensor is fp32 (or fp64), one rounding of dx + acc otherwise (CK_MODE_*). One
 * thread per output element forward, one per input element backward: no thread writes
 * another's element, so there are no atomics.
 */
#include "backends/cuda/cuda_common.cuh"

// ----------------------------------------------------------------------------
// geometry

/* planes (N * C), in/out spatial sizes (D, H, W), scale; filled and checked by
 * ck_opc_upsample_setup (backends/op_check.h) */
typedef ck_upsample_geom upsample_geom;

// ----------------------------------------------------------------------------
// kernels

/* out (N, C, I0*s0, I1*s1, I2*s2), inp (N, C, I0, I1, I2) */
static __global__ void upsample_forward_kernel(ck_dv out, ck_dv inp, upsample_geom g)
{
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(i, g.planes * out_plane)
    {
        const int64_t p = i / out_plane, r = i % out_plane;
        const int64_t o2 = r % g.out[2], o1 = (r / g.out[2]) % g.out[1],
                      o0 = r / (g.out[2] * g.out[1]);
        ck_st(out, i,
              ck_ld(inp, p * in_plane + ((o0 / g.scale[0]) * g.in[1] + o1 / g.scale[1]) * g.in[2] +
                             o2 / g.scale[2]));
    }
}

/* dinp (N, C, I0, I1, I2) accumulated, dout (N, C, I0*s0, I1*s1, I2*s2) */
static __global__ void upsample_backward_kernel(ck_dv dinp, ck_dv dout, int mode, upsample_geom g)
{
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(e, g.planes * in_plane)
    {
        const int64_t p = e / in_plane, r = e % in_plane;
        const int64_t i2 = r % g.in[2], i1 = (r / g.in[2]) % g.in[1], i0 = r / (g.in[2] * g.in[1]);
        double acc = 0.0;
        for (int64_t r0 = 0; r0 < g.scale[0]; r0++)
            for (int64_t r1 = 0; r1 < g.scale[1]; r1++) {
                const int64_t row = p * out_plane +
                                    ((i0 * g.scale[0] + r0) * g.out[1] + i1 * g.scale[1] + r1) *
                                        g.out[2] +
                                    i2 * g.scale[2];
                for (int64_t r2 = 0; r2 < g.scale[2]; r2++)
                    acc = __dadd_rn(acc, ck_ld(dout, row + r2));
            }
        ck_acc_mode(dinp, e, acc, mode);
    }
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_upsample_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, io->out};
    CK_TRY(ck_cuda_check_float_dtypes("upsample", all, 2, err));
    upsample_geom g;
    CK_TRY(ck_opc_upsample_setup(op, x, io->out, &g, err));
    const int64_t n = ck_shape_numel(&io->out->shape);
    upsample_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(io->out),
                                                                         ck_view(x), g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_upsample_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *gr, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, gr->dout, gr->din[0]};
    CK_TRY(ck_cuda_check_float_dtypes("upsample", all, 3, err));
    upsample_geom g;
    CK_TRY(ck_opc_upsample_setup(op, x, gr->dout, &g, err));
    if (!gr->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&x->shape);
    upsample_backward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(gr->din[0]), ck_view(gr->dout), ck_mode_of(all, 3), g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}
