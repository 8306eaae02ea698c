/*
 * CUDA scaled dot-product attention (backends/ref/attention.c): forward one thread per
 * (n, head, query) row; backward computes each row's dropped probabilities and dS into
 * scratch (one thread per row, which also gathers dq), then one thread per key element
 * gathers dk and dv over the queries. The dropout mask is ck_rng_u32 of the same stream
 * and word index as the reference, so both backends drop the same probabilities.
 */
#include "backends/cuda/cuda_common.cuh"

struct attn_dev {
    ck_attn_geom g; /* g.rng unused on the device */
    ck_rng_stream rng;
    uint32_t threshold;
    double keep_scale;
};

static __device__ __forceinline__ int64_t aq(const ck_attn_geom &g, int64_t n, int64_t i, int64_t h, int64_t d)
{
    return (n * g.Lq + i) * g.H * g.Dk + h * g.Dk + d;
}
static __device__ __forceinline__ int64_t ak(const ck_attn_geom &g, int64_t n, int64_t j, int64_t h, int64_t d)
{
    return (n * g.Lk + j) * g.H * g.Dk + h * g.Dk + d;
}
static __device__ __forceinline__ int64_t av(const ck_attn_geom &g, int64_t n, int64_t j, int64_t h, int64_t d)
{
    return (n * g.Lk + j) * g.H * g.Dv + h * g.Dv + d;
}
static __device__ __forceinline__ int64_t ay(const ck_attn_geom &g, int64_t n, int64_t i, int64_t h, int64_t d)
{
    return (n * g.Lq + i) * g.H * g.Dv + h * g.Dv + d;
}

static __device__ __forceinline__ int64_t a_end(const ck_attn_geom &g, int64_t i)
{
    return g.causal ? (i + 1 < g.Lk ? i + 1 : g.Lk) : g.Lk;
}

/* p[0..jend) of row (n, h, i) times the dropout factor; pfac[j] the factor alone */
static __device__ int64_t a_row(const attn_dev &A, ck_dv q, ck_dv k, int64_t n, int64_t h, int64_t i,
                         double *p, double *pfac)
{
    const ck_attn_geom &g = A.g;
    const int64_t jend = a_end(g, i);
    double m = -INFINITY;
    for (int64_t j = 0; j < jend; j++) {
        double s = 0.0;
        for (int64_t d = 0; d < g.Dk; d++)
            s = __dadd_rn(s, __dmul_rn(ck_ld(q, aq(g, n, i, h, d)), ck_ld(k, ak(g, n, j, h, d))));
        p[j] = s * g.scale;
        m = fmax(m, p[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < jend; j++) {
        p[j] = exp(p[j] - m);
        sum = __dadd_rn(sum, p[j]);
    }
    const int64_t e0 = ((n * g.H + h) * g.Lq + i) * g.Lk;
    for (int64_t j = 0; j < jend; j++) {
        p[j] /= sum;
        bool keep = g.rate <= 0.0 || ck_rng_u32(&A.rng, (uint64_t)(e0 + j)) >= A.threshold;
        pfac[j] = keep ? A.keep_scale : 0.0;
    }
    return jend;
}

static __global__ void attn_fwd_kernel(ck_dv y, ck_dv q, ck_dv k, ck_dv v, attn_dev A, double *scratch)
{
    const ck_attn_geom &g = A.g;
    CK_GRID_STRIDE(r, g.N * g.H * g.Lq)
    {
        const int64_t i = r % g.Lq, h = (r / g.Lq) % g.H, n = r / (g.Lq * g.H);
        double *p = scratch + r * 2 * g.Lk, *pf = p + g.Lk;
        const int64_t jend = a_row(A, q, k, n, h, i, p, pf);
        for (int64_t d = 0; d < g.Dv; d++) {
            double acc = 0.0;
            for (int64_t j = 0; j < jend; j++)
                acc = __dadd_rn(acc, __dmul_rn(p[j] * pf[j], ck_ld(v, av(g, n, j, h, d))));
            ck_st(y, ay(g, n, i, h, d), acc);
        }
    }
}

/* per row: Pd = P * factor and dS (times scale) into scratch rows of Lk; dq gathered */
static __global__ void attn_bwd_rows_kernel(ck_dv dq, ck_dv dy, ck_dv q, ck_dv k, ck_dv v, attn_dev A,
                                     double *pd, double *ds)
{
    const ck_attn_geom &g = A.g;
    CK_GRID_STRIDE(r, g.N * g.H * g.Lq)
    {
        const int64_t i = r % g.Lq, h = (r / g.Lq) % g.H, n = r / (g.Lq * g.H);
        double *p = pd + r * g.Lk, *s = ds + r * g.Lk;
        const int64_t jend = a_row(A, q, k, n, h, i, p, s); /* s: the factors, for now */
        double dot = 0.0;
        for (int64_t j = 0; j < jend; j++) {
            double dpd = 0.0;
            for (int64_t d = 0; d < g.Dv; d++)
                dpd = __dadd_rn(dpd, __dmul_rn(ck_ld(dy, ay(g, n, i, h, d)), ck_ld(v, av(g, n, j, h, d))));
            s[j] = dpd * s[j];
            dot = __dadd_rn(dot, s[j] * p[j]);
        }
        const int64_t e0 = ((n * g.H + h) * g.Lq + i) * g.Lk;
        for (int64_t j = 0; j < jend; j++) {
            bool keep = g.rate <= 0.0 || ck_rng_u32(&A.rng, (uint64_t)(e0 + j)) >= A.threshold;
            s[j] = p[j] * (s[j] - dot) * g.scale;
            p[j] = keep ? p[j] * A.keep_scale : 0.0;
        }
        for (int64_t j = jend; j < g.Lk; j++)
            p[j] = s[j] = 0.0;
        if (dq.p)
            for (int64_t d = 0; d < g.Dk; d++) {
                double acc = 0.0;
                for (int64_t j = 0; j < jend; j++)
                    acc = __dadd_rn(acc, s[j] * ck_ld(k, ak(g, n, j, h, d)));
                ck_acc(dq, aq(g, n, i, h, d), acc);
            }
    }
}

/* dk[n, j, h, d] = sum_i dS[i, j] q[i, d]; dv[n, j, h, d] = sum_i Pd[i, j] dy[i, d] */
static __global__ void attn_bwd_keys_kernel(ck_dv dk, ck_dv dv, ck_dv dy, ck_dv q, attn_dev A,
                                     const double *pd, const double *ds)
{
    const ck_attn_geom &g = A.g;
    const int64_t D = g.Dk > g.Dv ? g.Dk : g.Dv;
    CK_GRID_STRIDE(t, g.N * g.H * g.Lk * D)
    {
        const int64_t d = t % D, j = (t / D) % g.Lk, h = (t / (D * g.Lk)) % g.H,
                      n = t / (D * g.Lk * g.H);
        const int64_t row0 = (n * g.H + h) * g.Lq;
        if (dk.p && d < g.Dk) {
            double acc = 0.0;
            for (int64_t i = 0; i < g.Lq; i++)
                acc = __dadd_rn(acc, ds[(row0 + i) * g.Lk + j] * ck_ld(q, aq(g, n, i, h, d)));
            ck_acc(dk, ak(g, n, j, h, d), acc);
        }
        if (dv.p && d < g.Dv) {
            double acc = 0.0;
            for (int64_t i = 0; i < g.Lq; i++)
                acc = __dadd_rn(acc, pd[(row0 + i) * g.Lk + j] * ck_ld(dy, ay(g, n, i, h, d)));
            ck_acc(dv, av(g, n, j, h, d), acc);
        }
    }
}

static attn_dev attn_dev_of(const ck_attn_geom &g)
{
    attn_dev A;
    A.g = g;
    A.g.rng = nullptr;
    if (g.rng)
        A.rng = *g.rng;
    else
        memset(&A.rng, 0, sizeof A.rng);
    A.threshold = ck_dropout_threshold(g.rate);
    A.keep_scale = 1.0 / (1.0 - g.rate);
    return A;
}

static ck_status launch_attention_fwd(ck_cuda *cu, ck_dv y, ck_dv q, ck_dv k, ck_dv v,
                             const ck_attn_geom &g, ck_error *err)
{
    const int64_t rows = g.N * g.H * g.Lq;
    ck_dev_buf scratch;
    CK_TRY(scratch.alloc(cu, (size_t)rows * 2 * (size_t)g.Lk * sizeof(double),
                         "attention probabilities", err));
    attn_fwd_kernel<<<ck_blocks(rows), CK_THREADS, 0, cu->stream>>>(y, q, k, v, attn_dev_of(g),
                                                                    scratch.as<double>());
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_attention_bwd(ck_cuda *cu, ck_dv dq, ck_dv dk, ck_dv dv, ck_dv dy, ck_dv q,
                             ck_dv k, ck_dv v, const ck_attn_geom &g, ck_error *err)
{
    const int64_t rows = g.N * g.H * g.Lq;
    ck_dev_buf pd, ds;
    CK_TRY(pd.alloc(cu, (size_t)rows * (size_t)g.Lk * sizeof(double), "attention dropped probabilities", err));
    CK_TRY(ds.alloc(cu, (size_t)rows * (size_t)g.Lk * sizeof(double), "attention score gradients", err));
    const attn_dev A = attn_dev_of(g);
    attn_bwd_rows_kernel<<<ck_blocks(rows), CK_THREADS, 0, cu->stream>>>(
        dq, dy, q, k, v, A, pd.as<double>(), ds.as<double>());
    CK_LAUNCH_CHECK();
    if (dk.p || dv.p) {
        const int64_t D = g.Dk > g.Dv ? g.Dk : g.Dv;
        attn_bwd_keys_kernel<<<ck_blocks(g.N * g.H * g.Lk * D), CK_THREADS, 0, cu->stream>>>(
            dk, dv, dy, q, A, pd.as<double>(), ds.as<double>());
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): q, k, v are inputs 0, 1, 2 (one input: q = k = v)

static const ck_tensor *attn_in(const ck_op_io *io, int i)
{
    return io->n_in >= 3 ? io->in[i] : io->in[0];
}

static ck_status attention_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    ck_attn_geom g;
    CK_TRY(ck_opc_attention(CUDA_BE, op, attn_in(io, 0), attn_in(io, 1), attn_in(io, 2),
                              io->out, &g, err));
    g.rng = &args->rng;
    return launch_attention_fwd(cu, ck_view(io->out), ck_view(attn_in(io, 0)),
                              ck_view(attn_in(io, 1)), ck_view(attn_in(io, 2)), g, err);
}

static ck_status attention_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    ck_attn_geom geo;
    CK_TRY(ck_opc_attention(CUDA_BE, op, attn_in(io, 0), attn_in(io, 1), attn_in(io, 2),
                              g->dout, &geo, err));
    geo.rng = &args->rng;
    if (io->n_in >= 3)
        return launch_attention_bwd(cu, ck_view(g->din[0]), ck_view(g->din[1]), ck_view(g->din[2]),
                                  ck_view(g->dout), ck_view(io->in[0]), ck_view(io->in[1]),
                                  ck_view(io->in[2]), geo, err);
    /* q = k = v: the three gradients summed in an fp64 scratch, then added to the tensor
     * with one rounding (as the reference's shared wide scratch) */
    ck_tensor *d = g->din[0];
    if (!d)
        return CK_OK;
    ck_tensor acc = *d;
    acc.dtype = CK_F64;
    acc.name = "attention gradient scratch";
    ck_dev_buf buf;
    CK_TRY(buf.alloc(cu, ck_tensor_bytes(&acc), "attention gradient scratch", err));
    acc.data = buf.p;
    CK_CUDA_CHECK(cudaMemsetAsync(acc.data, 0, ck_tensor_bytes(&acc), cu->stream));
    const ck_dv x = ck_view(io->in[0]), a = ck_view(&acc);
    CK_TRY(launch_attention_bwd(cu, a, a, a, ck_view(g->dout), x, x, x, geo, err));
    return cuda_convert(cu, d, &acc, 1.0, true, err);
}

/* CUDA softmax / log_softmax over one dim: one thread per row (backends/ref/attention.c);
 * with an additive mask (io->constant, broadcast), of x + mask formed in double. */
#include "backends/cuda/cuda_common.cuh"

/* element i of x, plus the mask's element when there is one */
static __device__ __forceinline__ double sm_x(const ck_dv &x, const ck_dv &mask,
                                              const ck_bc_geom &g, int64_t i)
{
    return mask.p ? ck_ld(x, i) + ck_ld(mask, ck_bc_offset(&g, 0, i)) : ck_ld(x, i);
}

static __device__ void sm_stats(ck_dv x, ck_dv mask, const ck_bc_geom &g, int64_t base, int64_t D,
                                int64_t inner, double *m, double *lse)
{
    double mx = -INFINITY;
    for (int64_t d = 0; d < D; d++)
        mx = fmax(mx, sm_x(x, mask, g, base + d * inner));
    double s = 0.0;
    for (int64_t d = 0; d < D; d++)
        s = __dadd_rn(s, exp(sm_x(x, mask, g, base + d * inner) - mx));
    *m = mx;
    *lse = log(s);
}

static __global__ void sm_fwd_kernel(ck_dv y, ck_dv x, ck_dv mask, ck_bc_geom g, int64_t outer,
                                     int64_t D, int64_t inner, bool lg)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int64_t base = (r / inner) * D * inner + r % inner;
        double m, lse;
        sm_stats(x, mask, g, base, D, inner, &m, &lse);
        for (int64_t d = 0; d < D; d++) {
            double ls = sm_x(x, mask, g, base + d * inner) - m - lse;
            ck_st(y, base + d * inner, lg ? ls : exp(ls));
        }
    }
}

static __global__ void sm_bwd_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv mask, ck_bc_geom g,
                                     int64_t outer, int64_t D, int64_t inner, bool lg)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int64_t base = (r / inner) * D * inner + r % inner;
        double m, lse;
        sm_stats(x, mask, g, base, D, inner, &m, &lse);
        double s = 0.0;
        for (int64_t d = 0; d < D; d++) {
            double gv = ck_ld(dy, base + d * inner);
            s = __dadd_rn(s, lg ? gv : gv * exp(sm_x(x, mask, g, base + d * inner) - m - lse));
        }
        for (int64_t d = 0; d < D; d++) {
            double p = exp(sm_x(x, mask, g, base + d * inner) - m - lse),
                   gv = ck_ld(dy, base + d * inner);
            ck_acc(dx, base + d * inner, lg ? gv - p * s : p * (gv - s));
        }
    }
}

/* the mask's view and geometry (an absent mask: a NULL view) */
static ck_status sm_mask(const ck_op_io *io, ck_dv *mask, ck_bc_geom *g, ck_error *err)
{
    memset(g, 0, sizeof *g);
    *mask = ck_view(NULL);
    if (!io->constant)
        return CK_OK;
    CK_TRY(ck_opc_bc_against(CUDA_BE, "softmax", io->in[0], io->constant, g, err));
    *mask = ck_view(io->constant);
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_SOFTMAX, CK_OP_LOG_SOFTMAX

static ck_status softmax_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc_softmax(CUDA_BE, op, io->in[0], io->out, &outer, &D, &inner, err));
    ck_dv mask;
    ck_bc_geom g;
    CK_TRY(sm_mask(io, &mask, &g, err));
    sm_fwd_kernel<<<ck_blocks(outer * inner), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), mask, g, outer, D, inner,
        op->kind == CK_OP_LOG_SOFTMAX);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status softmax_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t outer, D, inner;
    CK_TRY(ck_opc_softmax(CUDA_BE, op, io->in[0], g->dout, &outer, &D, &inner, err));
    if (!g->din[0])
        return CK_OK;
    ck_dv mask;
    ck_bc_geom geo;
    CK_TRY(sm_mask(io, &mask, &geo, err));
    sm_bwd_kernel<<<ck_blocks(outer * inner), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout), ck_view(io->in[0]), mask, geo, outer, D, inner,
        op->kind == CK_OP_LOG_SOFTMAX);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_SOFTMAX:
    case CK_OP_LOG_SOFTMAX: return cuda_op_fns{softmax_op_forward, softmax_op_backward};
    case CK_OP_ATTENTION: return cuda_op_fns{attention_op_forward, attention_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(attention, pick)
