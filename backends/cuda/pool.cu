/*
 * CUDA pooling (CK_OP_MAXPOOL, CK_OP_AVGPOOL) over 1 to 3 spatial dims.
 *
 * As backends/ref/pool.c: windows are kernel[] wide, step stride[], never padded, output
 * size taken from the output tensor. Max pooling keeps the first maximum in the window's
 * row-major scan and the first NaN wins over any number; backward recomputes the winner
 * from the input (nothing is saved). Like the CPU, the arithmetic runs in fp32 when every
 * tensor is fp32, in fp64 when every tensor is fp64, and otherwise in double on the
 * tensors' values with each output rounded once and dx computed from zero and then added
 * with one rounding (the CPU's wide path, cuda_common.cuh's CK_MODE_*).
 *
 * Forward: one thread per output element. Backward gathers instead of scattering, so it
 * needs no atomics even when windows overlap: one thread per input element visits the
 * windows that contain it in the CPU's order (output row-major) and makes exactly the
 * additions the CPU makes to that element, so results are bit-identical to the CPU's.
 */
#include "backends/cuda/cuda_common.cuh"

// ----------------------------------------------------------------------------
// geometry

/* planes (N * C), in/out spatial sizes (D, H, W), kernel, stride; filled and checked by
 * ck_opc_pool_setup (backends/op_check.h) */
typedef ck_pool_geom pool_geom;

/* Offset in an input plane of the window of output (o0, o1, o2). */
__device__ __forceinline__ int64_t window_origin(const pool_geom &g, int64_t o0, int64_t o1,
                                                 int64_t o2)
{
    return (o0 * g.stride[0] * g.in[1] + o1 * g.stride[1]) * g.in[2] + o2 * g.stride[2];
}

// ----------------------------------------------------------------------------
// kernels: A is the arithmetic type (float when every tensor is fp32, else double)

/* Offset (from the window origin at x[base]) of the first maximum, or of the first NaN. */
template <typename A>
__device__ int64_t max_window(const ck_dv &x, int64_t base, const pool_geom &g)
{
    int64_t best_off = 0;
    A best = (A)ck_ld(x, base);
    for (int64_t k0 = 0; k0 < g.kernel[0]; k0++)
        for (int64_t k1 = 0; k1 < g.kernel[1]; k1++)
            for (int64_t k2 = 0; k2 < g.kernel[2]; k2++) {
                const int64_t off = (k0 * g.in[1] + k1) * g.in[2] + k2;
                const A v = (A)ck_ld(x, base + off);
                if (!isnan(best) && (v > best || isnan(v))) {
                    best = v;
                    best_off = off;
                }
            }
    return best_off;
}

/* out (N, C, O0, O1, O2), inp (N, C, I0, I1, I2) */
template <typename A>
static __global__ void pool_forward_kernel(ck_dv out, ck_dv inp, bool is_max, pool_geom g)
{
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    const A kvol = (A)(g.kernel[0] * g.kernel[1] * g.kernel[2]);
    CK_GRID_STRIDE(i, g.planes * out_plane)
    {
        const int64_t p = i / out_plane, r = i % out_plane;
        const int64_t o2 = r % g.out[2], o1 = (r / g.out[2]) % g.out[1],
                      o0 = r / (g.out[2] * g.out[1]);
        const int64_t base = p * in_plane + window_origin(g, o0, o1, o2);
        if (is_max) {
            ck_st(out, i, ck_ld(inp, base + max_window<A>(inp, base, g)));
        } else {
            /* the window's sum in row-major order, then / kvol, in A */
            A acc = 0;
            for (int64_t k0 = 0; k0 < g.kernel[0]; k0++)
                for (int64_t k1 = 0; k1 < g.kernel[1]; k1++)
                    for (int64_t k2 = 0; k2 < g.kernel[2]; k2++)
                        acc += (A)ck_ld(inp, base + (k0 * g.in[1] + k1) * g.in[2] + k2);
            ck_st(out, i, (double)(acc / kvol));
        }
    }
}

/* First and last (inclusive) output index on one axis whose window holds input index i. */
__device__ __forceinline__ void covering(int64_t i, int64_t k, int64_t s, int64_t n_out,
                                         int64_t *lo, int64_t *hi)
{
    const int64_t first = i - k + 1; /* o * s >= i - k + 1 */
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    const int64_t last = i / s; /* o * s <= i */
    *hi = last < n_out - 1 ? last : n_out - 1;
}

/* dinp (N, C, I0, I1, I2) accumulated, dout (N, C, O0, O1, O2), inp like dinp. Not wide:
 * the CPU's in-place `dx += d` in A from dx's value; wide: the sum from zero, then added to
 * dx with one rounding. */
template <typename A>
static __global__ void pool_backward_kernel(ck_dv dinp, ck_dv dout, ck_dv inp, bool is_max, bool wide,
                                     pool_geom g)
{
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    const A kvol = (A)(g.kernel[0] * g.kernel[1] * g.kernel[2]);
    CK_GRID_STRIDE(e, g.planes * in_plane)
    {
        const int64_t p = e / in_plane, r = e % in_plane;
        const int64_t i2 = r % g.in[2], i1 = (r / g.in[2]) % g.in[1], i0 = r / (g.in[2] * g.in[1]);
        int64_t lo0, hi0, lo1, hi1, lo2, hi2;
        covering(i0, g.kernel[0], g.stride[0], g.out[0], &lo0, &hi0);
        covering(i1, g.kernel[1], g.stride[1], g.out[1], &lo1, &hi1);
        covering(i2, g.kernel[2], g.stride[2], g.out[2], &lo2, &hi2);
        A acc = wide ? (A)0 : (A)ck_ld(dinp, e);
        bool touched = false;
        for (int64_t o0 = lo0; o0 <= hi0; o0++)
            for (int64_t o1 = lo1; o1 <= hi1; o1++)
                for (int64_t o2 = lo2; o2 <= hi2; o2++) {
                    const int64_t o = p * out_plane + (o0 * g.out[1] + o1) * g.out[2] + o2;
                    if (is_max) {
                        const int64_t origin = window_origin(g, o0, o1, o2);
                        if (origin + max_window<A>(inp, p * in_plane + origin, g) != r)
                            continue;
                        acc += (A)ck_ld(dout, o);
                    } else {
                        acc += (A)ck_ld(dout, o) / kvol;
                    }
                    touched = true;
                }
        if (!touched)
            continue;
        if (wide)
            ck_acc(dinp, e, (double)acc);
        else
            ck_st(dinp, e, (double)acc); /* exact: acc is already in dinp's dtype */
    }
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_pool_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                            ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, io->out};
    CK_TRY(ck_cuda_check_float_dtypes(ck_opc_pool_name(op), all, 2, err));
    bool is_max;
    pool_geom g;
    CK_TRY(ck_opc_pool_setup(op, x, io->out, &is_max, &g, err));
    const int64_t n = ck_shape_numel(&io->out->shape);
    const unsigned blocks = ck_blocks(n);
    if (ck_mode_of(all, 2) == CK_MODE_F32)
        pool_forward_kernel<float><<<blocks, CK_THREADS, 0, cu->stream>>>(ck_view(io->out),
                                                                          ck_view(x), is_max, g);
    else
        pool_forward_kernel<double><<<blocks, CK_THREADS, 0, cu->stream>>>(ck_view(io->out),
                                                                           ck_view(x), is_max, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_pool_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                             const ck_op_io *io, ck_op_grads *gr, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, gr->dout, gr->din[0]};
    CK_TRY(ck_cuda_check_float_dtypes(ck_opc_pool_name(op), all, 3, err));
    bool is_max;
    pool_geom g;
    CK_TRY(ck_opc_pool_setup(op, x, gr->dout, &is_max, &g, err));
    if (!gr->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&x->shape);
    const unsigned blocks = ck_blocks(n);
    const int mode = ck_mode_of(all, 3);
    if (mode == CK_MODE_F32)
        pool_backward_kernel<float><<<blocks, CK_THREADS, 0, cu->stream>>>(
            ck_view(gr->din[0]), ck_view(gr->dout), ck_view(x), is_max, false, g);
    else
        pool_backward_kernel<double><<<blocks, CK_THREADS, 0, cu->stream>>>(
            ck_view(gr->din[0]), ck_view(gr->dout), ck_view(x), is_max, mode == CK_MODE_WIDE, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}
