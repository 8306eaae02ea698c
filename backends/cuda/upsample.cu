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
 * ck_opc_upsample_setup (backends/check/check.h) */
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

static ck_status nearest_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
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

static ck_status nearest_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
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

/* CUDA linear/bilinear/trilinear upsampling (backends/ref/upsample.c): forward one
 * thread per output element; backward one thread per input element, gathering the output
 * positions whose taps reach it (a window of each dim around i * out / in). */
#include "backends/cuda/cuda_common.cuh"

struct lerp_tap {
    int64_t i0, i1;
    double l0, l1;
};

static __device__ lerp_tap lerp_src(const ck_lerp_geom &g, int a, int64_t o)
{
    lerp_tap t;
    const int64_t in = g.in[a], out = g.out[a];
    double src;
    if (g.align_corners)
        src = out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0.0;
    else {
        src = ((double)o + 0.5) * (double)in / (double)out - 0.5;
        if (src < 0.0)
            src = 0.0;
    }
    t.i0 = (int64_t)src;
    if (t.i0 > in - 1)
        t.i0 = in - 1;
    t.i1 = t.i0 + 1 < in ? t.i0 + 1 : in - 1;
    t.l1 = src - (double)t.i0;
    t.l0 = 1.0 - t.l1;
    return t;
}

static __global__ void lerp_fwd_kernel(ck_dv y, ck_dv x, ck_lerp_geom g)
{
    const int64_t ivol = g.in[0] * g.in[1] * g.in[2], ovol = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(e, g.planes * ovol)
    {
        const int64_t o2 = e % g.out[2], o1 = (e / g.out[2]) % g.out[1],
                      o0 = (e / (g.out[2] * g.out[1])) % g.out[0], p = e / ovol;
        const lerp_tap a = lerp_src(g, 0, o0), b = lerp_src(g, 1, o1), c = lerp_src(g, 2, o2);
        const int64_t base = p * ivol;
#define XL(i, j, k) ck_ld(x, base + ((i) * g.in[1] + (j)) * g.in[2] + (k))
        double v = a.l0 * (b.l0 * (c.l0 * XL(a.i0, b.i0, c.i0) + c.l1 * XL(a.i0, b.i0, c.i1)) +
                           b.l1 * (c.l0 * XL(a.i0, b.i1, c.i0) + c.l1 * XL(a.i0, b.i1, c.i1))) +
                   a.l1 * (b.l0 * (c.l0 * XL(a.i1, b.i0, c.i0) + c.l1 * XL(a.i1, b.i0, c.i1)) +
                           b.l1 * (c.l0 * XL(a.i1, b.i1, c.i0) + c.l1 * XL(a.i1, b.i1, c.i1)));
#undef XL
        ck_st(y, e, v);
    }
}

/* weight of input index i in output o along dim a (0 when o does not reach i) */
static __device__ __forceinline__ double lerp_w(const ck_lerp_geom &g, int a, int64_t o, int64_t i)
{
    const lerp_tap t = lerp_src(g, a, o);
    return (t.i0 == i ? t.l0 : 0.0) + (t.i1 == i ? t.l1 : 0.0);
}

static __global__ void lerp_bwd_kernel(ck_dv dx, ck_dv dy, ck_lerp_geom g)
{
    const int64_t ivol = g.in[0] * g.in[1] * g.in[2], ovol = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(e, g.planes * ivol)
    {
        const int64_t i[3] = {(e / (g.in[2] * g.in[1])) % g.in[0], (e / g.in[2]) % g.in[1],
                              e % g.in[2]};
        const int64_t p = e / ivol;
        int64_t lo[3], hi[3];
        for (int a = 0; a < 3; a++) {
            /* the outputs reaching i lie within two input cells of it */
            lo[a] = (i[a] - 2) * g.out[a] / g.in[a] - 2;
            hi[a] = (i[a] + 2) * g.out[a] / g.in[a] + 2;
            lo[a] = lo[a] < 0 ? 0 : lo[a];
            hi[a] = hi[a] > g.out[a] ? g.out[a] : hi[a];
        }
        double acc = 0.0;
        for (int64_t o0 = lo[0]; o0 < hi[0]; o0++) {
            const double w0 = lerp_w(g, 0, o0, i[0]);
            if (w0 == 0.0)
                continue;
            for (int64_t o1 = lo[1]; o1 < hi[1]; o1++) {
                const double w1 = lerp_w(g, 1, o1, i[1]);
                if (w1 == 0.0)
                    continue;
                for (int64_t o2 = lo[2]; o2 < hi[2]; o2++) {
                    const double w2 = lerp_w(g, 2, o2, i[2]);
                    if (w2 == 0.0)
                        continue;
                    acc = __dadd_rn(acc, ck_ld(dy, p * ovol + (o0 * g.out[1] + o1) * g.out[2] + o2) *
                                             w0 * w1 * w2);
                }
            }
        }
        ck_acc(dx, e, acc);
    }
}

static ck_status launch_lerp_fwd(ck_cuda *cu, ck_dv y, ck_dv x, const ck_lerp_geom &g, ck_error *err)
{
    lerp_fwd_kernel<<<ck_blocks(g.planes * g.out[0] * g.out[1] * g.out[2]), CK_THREADS, 0,
                      cu->stream>>>(y, x, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_lerp_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, const ck_lerp_geom &g, ck_error *err)
{
    lerp_bwd_kernel<<<ck_blocks(g.planes * g.in[0] * g.in[1] * g.in[2]), CK_THREADS, 0,
                      cu->stream>>>(dx, dy, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_UPSAMPLE with mode linear/bilinear/trilinear

static ck_status linear_op_forward(ck_cuda *cu, const ck_op_params *op,
                                       const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_lerp_geom g;
    CK_TRY(ck_opc_upsample_linear(CUDA_BE, op, io->in[0], io->out, &g, err));
    return launch_lerp_fwd(cu, ck_view(io->out), ck_view(io->in[0]), g, err);
}

static ck_status linear_op_backward(ck_cuda *cu, const ck_op_params *op,
                                        const ck_fwd_args *args, const ck_op_io *io,
                                        ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_lerp_geom geo;
    CK_TRY(ck_opc_upsample_linear(CUDA_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    return launch_lerp_bwd(cu, ck_view(g->din[0]), ck_view(g->dout), geo, err);
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_UPSAMPLE:
        return ck_upsample_is_linear(op) ? cuda_op_fns{linear_op_forward, linear_op_backward} : cuda_op_fns{nearest_op_forward, nearest_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(upsample, pick)
