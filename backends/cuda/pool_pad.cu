/* CUDA padded max/avg pooling (backends/ref/pool_pad.c): forward one thread per output;
 * backward one thread per input element, gathering the windows that contain it (max: the
 * windows whose first maximum it is). */
#include "backends/cuda/k18_cuda.cuh"

struct pwin {
    int64_t lo[3], hi[3], div;
};

__device__ pwin pool_window(const k18_pool_geom &g, const int64_t *o)
{
    pwin w;
    int64_t padded = 1, real = 1;
    for (int a = 0; a < 3; a++) {
        const int64_t start = o[a] * g.stride[a] - g.pad[a], end = start + g.k[a];
        const int64_t pend = end < g.in[a] + g.pad[a] ? end : g.in[a] + g.pad[a];
        padded *= pend - start;
        w.lo[a] = start < 0 ? 0 : start;
        w.hi[a] = end < g.in[a] ? end : g.in[a];
        real *= w.hi[a] - w.lo[a];
    }
    w.div = g.count_include_pad ? padded : real;
    return w;
}

__device__ int64_t pool_argmax(ck_dv x, int64_t base, const k18_pool_geom &g, const pwin &w)
{
    int64_t best = -1;
    double bv = -INFINITY;
    for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0++)
        for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1++)
            for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2++) {
                const int64_t idx = (i0 * g.in[1] + i1) * g.in[2] + i2;
                const double v = ck_ld(x, base + idx);
                if (best < 0 || (!isnan(bv) && (v > bv || isnan(v)))) {
                    bv = v;
                    best = idx;
                }
            }
    return best;
}

__global__ void pool_fwd_kernel(ck_dv y, ck_dv x, k18_pool_geom g)
{
    const int64_t ivol = g.in[0] * g.in[1] * g.in[2], ovol = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(e, g.planes * ovol)
    {
        const int64_t o[3] = {(e / (g.out[2] * g.out[1])) % g.out[0], (e / g.out[2]) % g.out[1],
                              e % g.out[2]};
        const int64_t base = (e / ovol) * ivol;
        const pwin w = pool_window(g, o);
        double v;
        if (g.is_max) {
            v = ck_ld(x, base + pool_argmax(x, base, g, w));
        } else {
            double s = 0.0;
            for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0++)
                for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1++)
                    for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2++)
                        s = __dadd_rn(s, ck_ld(x, base + (i0 * g.in[1] + i1) * g.in[2] + i2));
            v = s / (double)w.div;
        }
        ck_st(y, e, v);
    }
}

__global__ void pool_bwd_kernel(ck_dv dx, ck_dv dy, ck_dv x, k18_pool_geom g)
{
    const int64_t ivol = g.in[0] * g.in[1] * g.in[2], ovol = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(e, g.planes * ivol)
    {
        const int64_t i[3] = {(e / (g.in[2] * g.in[1])) % g.in[0], (e / g.in[2]) % g.in[1],
                              e % g.in[2]};
        const int64_t p = e / ivol, base = p * ivol, self = e - base;
        int64_t lo[3], hi[3];
        for (int a = 0; a < 3; a++) {
            /* o with o s - pad <= i < o s - pad + k */
            const int64_t num = i[a] + g.pad[a] - g.k[a] + 1;
            lo[a] = num <= 0 ? 0 : (num + g.stride[a] - 1) / g.stride[a];
            hi[a] = (i[a] + g.pad[a]) / g.stride[a] + 1;
            hi[a] = hi[a] > g.out[a] ? g.out[a] : hi[a];
        }
        double acc = 0.0;
        int64_t o[3];
        for (o[0] = lo[0]; o[0] < hi[0]; o[0]++)
            for (o[1] = lo[1]; o[1] < hi[1]; o[1]++)
                for (o[2] = lo[2]; o[2] < hi[2]; o[2]++) {
                    const pwin w = pool_window(g, o);
                    const double gv = ck_ld(dy, p * ovol + (o[0] * g.out[1] + o[1]) * g.out[2] + o[2]);
                    if (g.is_max) {
                        if (pool_argmax(x, base, g, w) == self)
                            acc = __dadd_rn(acc, gv);
                    } else {
                        acc = __dadd_rn(acc, gv / (double)w.div);
                    }
                }
        ck_acc(dx, e, acc);
    }
}

ck_status k18c_pool_fwd(ck_cuda *cu, ck_dv y, ck_dv x, const k18_pool_geom &g, ck_error *err)
{
    pool_fwd_kernel<<<ck_blocks(g.planes * g.out[0] * g.out[1] * g.out[2]), CK_THREADS, 0,
                      cu->stream>>>(y, x, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_pool_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, ck_dv x, const k18_pool_geom &g,
                        ck_error *err)
{
    pool_bwd_kernel<<<ck_blocks(g.planes * g.in[0] * g.in[1] * g.in[2]), CK_THREADS, 0,
                      cu->stream>>>(dx, dy, x, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): padded pools (unpadded ones stay in pool.cu)

ck_status cuda_pool_pad_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                ck_op_io *io, ck_error *err)
{
    (void)args;
    k18_pool_geom g;
    CK_TRY(ck_opc18_pool(CUDA_BE, op, io->in[0], io->out, &g, err));
    return k18c_pool_fwd(cu, ck_view(io->out), ck_view(io->in[0]), g, err);
}

ck_status cuda_pool_pad_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    k18_pool_geom geo;
    CK_TRY(ck_opc18_pool(CUDA_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    return k18c_pool_bwd(cu, ck_view(g->din[0]), ck_view(g->dout), ck_view(io->in[0]), geo, err);
}
