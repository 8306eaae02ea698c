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
 * ck_opc_pool_setup (backends/check/check.h) */
typedef ck_pool_geom pool_geom;

/* Offset in an input plane of the window of output (o0, o1, o2). */
static __device__ __forceinline__ int64_t window_origin(const pool_geom &g, int64_t o0, int64_t o1,
                                                 int64_t o2)
{
    return (o0 * g.stride[0] * g.in[1] + o1 * g.stride[1]) * g.in[2] + o2 * g.stride[2];
}

// ----------------------------------------------------------------------------
// kernels: A is the arithmetic type (float when every tensor is fp32, else double)

/* Offset (from the window origin at x[base]) of the first maximum, or of the first NaN. */
template <typename A>
static __device__ int64_t max_window(const ck_dv &x, int64_t base, const pool_geom &g)
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
static __device__ __forceinline__ void covering(int64_t i, int64_t k, int64_t s, int64_t n_out,
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

static ck_status pool_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
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

static ck_status pool_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
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

/* CUDA padded max/avg pooling (backends/ref/pool.c): forward one thread per output;
 * backward one thread per input element, gathering the windows that contain it (max: the
 * windows whose first maximum it is). */
#include "backends/cuda/cuda_common.cuh"

struct pwin {
    int64_t lo[3], hi[3], div;
};

static __device__ pwin pool_window(const ck_pool_pad_geom &g, const int64_t *o)
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

static __device__ int64_t pool_argmax(ck_dv x, int64_t base, const ck_pool_pad_geom &g, const pwin &w)
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

static __global__ void pool_fwd_kernel(ck_dv y, ck_dv x, ck_pool_pad_geom g)
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

static __global__ void pool_bwd_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_pool_pad_geom g)
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

static ck_status launch_pool_fwd(ck_cuda *cu, ck_dv y, ck_dv x, const ck_pool_pad_geom &g, ck_error *err)
{
    pool_fwd_kernel<<<ck_blocks(g.planes * g.out[0] * g.out[1] * g.out[2]), CK_THREADS, 0,
                      cu->stream>>>(y, x, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_pool_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, ck_dv x, const ck_pool_pad_geom &g,
                        ck_error *err)
{
    pool_bwd_kernel<<<ck_blocks(g.planes * g.in[0] * g.in[1] * g.in[2]), CK_THREADS, 0,
                      cu->stream>>>(dx, dy, x, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): padded pools (unpadded ones stay in pool.cu)

static ck_status pool_pad_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                ck_op_io *io, ck_error *err)
{
    (void)args;
    ck_pool_pad_geom g;
    CK_TRY(ck_opc_pool_pad(CUDA_BE, op, io->in[0], io->out, &g, err));
    return launch_pool_fwd(cu, ck_view(io->out), ck_view(io->in[0]), g, err);
}

static ck_status pool_pad_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_pool_pad_geom geo;
    CK_TRY(ck_opc_pool_pad(CUDA_BE, op, io->in[0], g->dout, &geo, err));
    if (!g->din[0])
        return CK_OK;
    return launch_pool_bwd(cu, ck_view(g->din[0]), ck_view(g->dout), ck_view(io->in[0]), geo, err);
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL:
        /* padded windows (or count_include_pad false) take the padded kernel */
        return ck_pool_is_padded(op) ? cuda_op_fns{pool_pad_op_forward, pool_pad_op_backward} : cuda_op_fns{pool_op_forward, pool_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(pool, pick)
