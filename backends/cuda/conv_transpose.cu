/* CUDA transposed convolution (backends/ref/conv_transpose.c): y, dx and dW each one thread
 * per element, gathering in the reference's order; db one thread per output channel. */
#include "backends/cuda/k18_cuda.cuh"

__device__ __forceinline__ int64_t ct_src(const k18_convt_geom &g, int a, int64_t o, int64_t t)
{
    int64_t num = o + g.pad[a] - t * g.dil[a];
    if (num < 0 || num % g.stride[a] != 0)
        return -1;
    int64_t i = num / g.stride[a];
    return i < g.in[a] ? i : -1;
}
__device__ __forceinline__ int64_t ct_dst(const k18_convt_geom &g, int a, int64_t i, int64_t t)
{
    int64_t o = i * g.stride[a] - g.pad[a] + t * g.dil[a];
    return o >= 0 && o < g.out[a] ? o : -1;
}

#define VOL3(v) ((v)[0] * (v)[1] * (v)[2])

__global__ void ct_fwd_kernel(ck_dv y, ck_dv x, ck_dv w, ck_dv b, k18_convt_geom g)
{
    const int64_t ivol = VOL3(g.in), ovol = VOL3(g.out), kvol = VOL3(g.k);
    CK_GRID_STRIDE(e, g.N * g.Co * ovol)
    {
        const int64_t o2 = e % g.out[2], o1 = (e / g.out[2]) % g.out[1],
                      o0 = (e / (g.out[2] * g.out[1])) % g.out[0], co = (e / ovol) % g.Co,
                      n = e / (ovol * g.Co);
        double acc = b.p ? ck_ld(b, co) : 0.0;
        for (int64_t ci = 0; ci < g.Ci; ci++)
            for (int64_t t0 = 0; t0 < g.k[0]; t0++) {
                const int64_t i0 = ct_src(g, 0, o0, t0);
                if (i0 < 0)
                    continue;
                for (int64_t t1 = 0; t1 < g.k[1]; t1++) {
                    const int64_t i1 = ct_src(g, 1, o1, t1);
                    if (i1 < 0)
                        continue;
                    for (int64_t t2 = 0; t2 < g.k[2]; t2++) {
                        const int64_t i2 = ct_src(g, 2, o2, t2);
                        if (i2 < 0)
                            continue;
                        acc = __dadd_rn(acc, __dmul_rn(
                            ck_ld(x, (n * g.Ci + ci) * ivol + (i0 * g.in[1] + i1) * g.in[2] + i2),
                            ck_ld(w, (ci * g.Co + co) * kvol + (t0 * g.k[1] + t1) * g.k[2] + t2)));
                    }
                }
            }
        ck_st(y, e, acc);
    }
}

__global__ void ct_dx_kernel(ck_dv dx, ck_dv dy, ck_dv w, k18_convt_geom g)
{
    const int64_t ivol = VOL3(g.in), ovol = VOL3(g.out), kvol = VOL3(g.k);
    CK_GRID_STRIDE(e, g.N * g.Ci * ivol)
    {
        const int64_t i2 = e % g.in[2], i1 = (e / g.in[2]) % g.in[1],
                      i0 = (e / (g.in[2] * g.in[1])) % g.in[0], ci = (e / ivol) % g.Ci,
                      n = e / (ivol * g.Ci);
        double acc = 0.0;
        for (int64_t co = 0; co < g.Co; co++)
            for (int64_t t0 = 0; t0 < g.k[0]; t0++) {
                const int64_t o0 = ct_dst(g, 0, i0, t0);
                if (o0 < 0)
                    continue;
                for (int64_t t1 = 0; t1 < g.k[1]; t1++) {
                    const int64_t o1 = ct_dst(g, 1, i1, t1);
                    if (o1 < 0)
                        continue;
                    for (int64_t t2 = 0; t2 < g.k[2]; t2++) {
                        const int64_t o2 = ct_dst(g, 2, i2, t2);
                        if (o2 < 0)
                            continue;
                        acc = __dadd_rn(acc, __dmul_rn(
                            ck_ld(dy, (n * g.Co + co) * ovol + (o0 * g.out[1] + o1) * g.out[2] + o2),
                            ck_ld(w, (ci * g.Co + co) * kvol + (t0 * g.k[1] + t1) * g.k[2] + t2)));
                    }
                }
            }
        ck_acc(dx, e, acc);
    }
}

__global__ void ct_dw_kernel(ck_dv dw, ck_dv dy, ck_dv x, k18_convt_geom g)
{
    const int64_t ivol = VOL3(g.in), ovol = VOL3(g.out), kvol = VOL3(g.k);
    CK_GRID_STRIDE(e, g.Ci * g.Co * kvol)
    {
        const int64_t t2 = e % g.k[2], t1 = (e / g.k[2]) % g.k[1], t0 = (e / (g.k[2] * g.k[1])) % g.k[0],
                      co = (e / kvol) % g.Co, ci = e / (kvol * g.Co);
        double acc = 0.0;
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t i0 = 0; i0 < g.in[0]; i0++) {
                const int64_t o0 = ct_dst(g, 0, i0, t0);
                if (o0 < 0)
                    continue;
                for (int64_t i1 = 0; i1 < g.in[1]; i1++) {
                    const int64_t o1 = ct_dst(g, 1, i1, t1);
                    if (o1 < 0)
                        continue;
                    for (int64_t i2 = 0; i2 < g.in[2]; i2++) {
                        const int64_t o2 = ct_dst(g, 2, i2, t2);
                        if (o2 < 0)
                            continue;
                        acc = __dadd_rn(acc, __dmul_rn(
                            ck_ld(x, (n * g.Ci + ci) * ivol + (i0 * g.in[1] + i1) * g.in[2] + i2),
                            ck_ld(dy, (n * g.Co + co) * ovol + (o0 * g.out[1] + o1) * g.out[2] + o2)));
                    }
                }
            }
        ck_acc(dw, e, acc);
    }
}

__global__ void ct_db_kernel(ck_dv db, ck_dv dy, k18_convt_geom g)
{
    const int64_t ovol = VOL3(g.out);
    CK_GRID_STRIDE(co, g.Co)
    {
        double acc = 0.0;
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t o = 0; o < ovol; o++)
                acc = __dadd_rn(acc, ck_ld(dy, (n * g.Co + co) * ovol + o));
        ck_acc(db, co, acc);
    }
}

ck_status k18c_convt_fwd(ck_cuda *cu, ck_dv y, ck_dv x, ck_dv w, ck_dv b,
                         const k18_convt_geom &g, ck_error *err)
{
    ct_fwd_kernel<<<ck_blocks(g.N * g.Co * VOL3(g.out)), CK_THREADS, 0, cu->stream>>>(y, x, w, b, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status k18c_convt_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv db, ck_dv dy, ck_dv x, ck_dv w,
                         const k18_convt_geom &g, ck_error *err)
{
    if (db.p) {
        ct_db_kernel<<<ck_blocks(g.Co), CK_THREADS, 0, cu->stream>>>(db, dy, g);
        CK_LAUNCH_CHECK();
    }
    if (dx.p) {
        ct_dx_kernel<<<ck_blocks(g.N * g.Ci * VOL3(g.in)), CK_THREADS, 0, cu->stream>>>(dx, dy, w, g);
        CK_LAUNCH_CHECK();
    }
    if (dw.p) {
        ct_dw_kernel<<<ck_blocks(g.Ci * g.Co * VOL3(g.k)), CK_THREADS, 0, cu->stream>>>(dw, dy, x, g);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_conv_transpose_forward(ck_cuda *cu, const ck_op_params *op,
                                      const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *b = op->bias ? io->bias : NULL;
    k18_convt_geom g;
    CK_TRY(ck_opc18_convt(CUDA_BE, op, io->in[0], io->weight, b, io->out, &g, err));
    return k18c_convt_fwd(cu, ck_view(io->out), ck_view(io->in[0]), ck_view(io->weight),
                          ck_view(b), g, err);
}

ck_status cuda_conv_transpose_backward(ck_cuda *cu, const ck_op_params *op,
                                       const ck_fwd_args *args, const ck_op_io *io,
                                       ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_tensor *db = op->bias ? g->dbias : NULL;
    k18_convt_geom geo;
    CK_TRY(ck_opc18_convt(CUDA_BE, op, io->in[0], io->weight, db, g->dout, &geo, err));
    return k18c_convt_bwd(cu, ck_view(g->din[0]), ck_view(g->dweight), ck_view(db),
                          ck_view(g->dout), ck_view(io->in[0]), ck_view(io->weight), geo, err);
}
