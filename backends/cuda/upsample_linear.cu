/* CUDA linear/bilinear/trilinear upsampling (backends/ref/upsample_linear.c): forward one
 * thread per output element; backward one thread per input element, gathering the output
 * positions whose taps reach it (a window of each dim around i * out / in). */
#include "backends/cuda/k18_cuda.cuh"

struct lerp_tap {
    int64_t i0, i1;
    double l0, l1;
};

__device__ lerp_tap lerp_src(const k18_lerp_geom &g, int a, int64_t o)
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

__global__ void lerp_fwd_kernel(ck_dv y, ck_dv x, k18_lerp_geom g)
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
__device__ __forceinline__ double lerp_w(const k18_lerp_geom &g, int a, int64_t o, int64_t i)
{
    const lerp_tap t = lerp_src(g, a, o);
    return (t.i0 == i ? t.l0 : 0.0) + (t.i1 == i ? t.l1 : 0.0);
}

__global__ void lerp_bwd_kernel(ck_dv dx, ck_dv dy, k18_lerp_geom g)
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

ck_status k18c_lerp_fwd(ck_cuda *cu, ck_dv y, ck_dv x, const k18_lerp_geom &g, ck_error *err)
{
    lerp_fwd_kernel<<<ck_blocks(g.planes * g.out[0] * g.out[1] * g.out[2]), CK_THREADS, 0,
                      cu->stream>>>(y, x, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_lerp_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, const k18_lerp_geom &g, ck_error *err)
{
    lerp_bwd_kernel<<<ck_blocks(g.planes * g.in[0] * g.in[1] * g.in[2]), CK_THREADS, 0,
                      cu->stream>>>(dx, dy, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_UPSAMPLE with mode linear/bilinear/trilinear

ck_status cuda_upsample_linear_forward(ck_cuda *cu, const ck_op_params *op,
                                       const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    (void)args;
    k18_lerp_geom g;
    CK_TRY(ck_opc18_lerp(CUDA_BE, op, io->in[0], io->out, &g, err));
    return k18c_lerp_fwd(cu, ck_view(io->out), ck_view(io->in[0]), g, err);
}

ck_status cuda_upsample_linear_backward(ck_cuda *cu, const ck_op_params *op,
                                        const ck_fwd_args *args, const ck_op_io *io,
                                        ck_op_grads *g, ck_error *err)
{
    (void)args;
    k18_lerp_geom geo;
    CK_TRY(ck_opc18_lerp(CUDA_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    return k18c_lerp_bwd(cu, ck_view(g->din[0]), ck_view(g->dout), geo, err);
}
