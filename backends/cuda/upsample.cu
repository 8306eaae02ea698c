/*
 * CUDA nearest-neighbour upsampling (CK_OP_UPSAMPLE) by integer scale[] per spatial dim,
 * 1 to 3 spatial dims.
 *
 *   y[n, c, o...] = x[n, c, o / scale...]
 *
 * As backends/cpu/upsample.c: backward sums dout over each scale0 x scale1 x scale2 block
 * in double (in the CPU's order: r0, r1, r2) and adds the sum to dx as the CPU does
 * (`dx += (T)acc`). One thread per output element forward, one per input element backward:
 * no thread writes another's element, so there are no atomics.
 */
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// geometry

typedef struct {
    int64_t planes;        /* N * C */
    int64_t in[3], out[3]; /* spatial sizes (D, H, W) of x and y, leading dims 1 */
    int64_t scale[3];
} upsample_geom;

// ----------------------------------------------------------------------------
// kernels

/* out (N, C, I0*s0, I1*s1, I2*s2), inp (N, C, I0, I1, I2) */
template <typename T>
__global__ void upsample_forward_kernel(T *out, const T *inp, upsample_geom g)
{
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(i, g.planes * out_plane)
    {
        const int64_t p = i / out_plane, r = i % out_plane;
        const int64_t o2 = r % g.out[2], o1 = (r / g.out[2]) % g.out[1],
                      o0 = r / (g.out[2] * g.out[1]);
        out[i] = inp[p * in_plane +
                     ((o0 / g.scale[0]) * g.in[1] + o1 / g.scale[1]) * g.in[2] + o2 / g.scale[2]];
    }
}

/* dinp (N, C, I0, I1, I2) accumulated, dout (N, C, I0*s0, I1*s1, I2*s2) */
template <typename T>
__global__ void upsample_backward_kernel(T *dinp, const T *dout, upsample_geom g)
{
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    CK_GRID_STRIDE(e, g.planes * in_plane)
    {
        const int64_t p = e / in_plane, r = e % in_plane;
        const int64_t i2 = r % g.in[2], i1 = (r / g.in[2]) % g.in[1], i0 = r / (g.in[2] * g.in[1]);
        const T *dy = dout + p * out_plane;
        double acc = 0.0;
        for (int64_t r0 = 0; r0 < g.scale[0]; r0++)
            for (int64_t r1 = 0; r1 < g.scale[1]; r1++) {
                const T *dyb = dy + ((i0 * g.scale[0] + r0) * g.out[1] + i1 * g.scale[1] + r1) *
                                        g.out[2] +
                               i2 * g.scale[2];
                for (int64_t r2 = 0; r2 < g.scale[2]; r2++)
                    acc = __dadd_rn(acc, ck_to_d(dyb[r2]));
            }
        dinp[e] = ck_add_rounded(dinp[e], acc);
    }
}

// ----------------------------------------------------------------------------
// checks and setup (as the CPU's)

/* Every non-NULL tensor in t[0..n) must have the dtype of t[0], a float dtype. */
static ck_status common_float_dtype(const ck_tensor *const *t, int n, ck_dtype *dt,
                                    ck_error *err)
{
    *dt = t[0]->dtype;
    if (!ck_cuda_float_dtype(*dt))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "upsample: dtype %s of '%s' is not supported by "
                       "the cuda backend", ck_dtype_name(*dt), ck_cuda_tname(t[0]));
    for (int i = 1; i < n; i++)
        if (t[i] && t[i]->dtype != *dt)
            return ck_fail(err, CK_ERR_INTERNAL, "upsample: '%s' is %s but '%s' is %s",
                           ck_cuda_tname(t[i]), ck_dtype_name(t[i]->dtype), ck_cuda_tname(t[0]),
                           ck_dtype_name(*dt));
    return CK_OK;
}

/* Checks x (N, C, s...) and y (N, C, s * scale...) and fills g. */
static ck_status upsample_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                                upsample_geom *g, ck_error *err)
{
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "upsample: %d spatial dims (1 to 3 supported)", nsp);
    char sx[96], sy[96];
    bool ok = x->shape.ndim == nsp + 2 && y->shape.ndim == nsp + 2 &&
              y->shape.dim[0] == x->shape.dim[0] && y->shape.dim[1] == x->shape.dim[1];
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->scale[a] = s < 0 ? 1 : op->scale[s];
        ok = g->scale[a] >= 1 && g->out[a] == g->in[a] * g->scale[a];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "upsample%dd: output '%s' %s is not input '%s' %s times scale", nsp,
                       ck_cuda_tname(y), ck_shape_str(&y->shape, sy, sizeof sy), ck_cuda_tname(x),
                       ck_shape_str(&x->shape, sx, sizeof sx));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_upsample_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, io->out};
    ck_dtype dt;
    CK_TRY(common_float_dtype(all, 2, &dt, err));
    upsample_geom g;
    CK_TRY(upsample_setup(op, x, io->out, &g, err));
    const int64_t n = ck_shape_numel(&io->out->shape);
    CK_CUDA_DISPATCH(dt, T,
                     upsample_forward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(io->out->data), static_cast<const T *>(x->data), g));
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_upsample_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *gr, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *all[] = {x, gr->dout, gr->din[0]};
    ck_dtype dt;
    CK_TRY(common_float_dtype(all, 3, &dt, err));
    upsample_geom g;
    CK_TRY(upsample_setup(op, x, gr->dout, &g, err));
    if (!gr->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&x->shape);
    CK_CUDA_DISPATCH(dt, T,
                     upsample_backward_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(gr->din[0]->data),
                         static_cast<const T *>(gr->dout->data), g));
    CK_LAUNCH_CHECK();
    return CK_OK;
}
