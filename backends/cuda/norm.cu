/*
 * CUDA normalisation layers: batchnorm (per channel over N and spatial) and layernorm
 * (per sample over all non-batch dims), forward and backward.
 *
 * As backends/ref/norm.c: statistics are two-pass (mean, then biased variance of
 * x - mean) accumulated in double; every value is computed in double with the CPU's
 * expressions, operand for operand, and rounded once on store; gradients are added with
 * one rounding (ck_acc). Every tensor is read and written in its own dtype, so in an
 * fp16/bf16 run x, y, dy and dx are low while weight, bias, their gradients, the running
 * buffers and `saved` stay fp32 (harness/precision.md). Batchnorm follows PyTorch's
 * BatchNorm{1,2,3}d (training: batch statistics, and when asked, running_mean,
 * running_var (unbiased) and num_batches_tracked updated; eval: running statistics,
 * nothing updated). `saved` holds (mean, invstd) per channel or per sample.
 *
 * The sums are the fixed-order block reductions of cuda_common.cuh (a tree instead of
 * the CPU's left-to-right loop, so the double sums may differ from the CPU's in their
 * last bits; the rounded outputs rarely do).
 */
#include "backends/cuda/cuda_common.cuh"

// ----------------------------------------------------------------------------
// absent weight/bias read as w = 1, b = 0

static __device__ __forceinline__ double ld_or(const ck_dv &a, int64_t i, double dflt)
{
    return a.p ? ck_ld(a, i) : dflt;
}

static __device__ __forceinline__ void acc_if(const ck_dv &a, int64_t i, double v)
{
    if (a.p)
        ck_acc(a, i, v);
}

// ================================ batchnorm ================================

/* x viewed as (N, C, S) with S the product of the spatial dims */
typedef ck_ncs_dims bn_dims;

static __device__ __forceinline__ int64_t bn_index(const bn_dims &d, int64_t n, int64_t c, int64_t s)
{
    return (n * d.C + c) * d.S + s;
}

/* channel c, position m = n * S + s of N * S: x */
struct bn_x_term {
    ck_dv x;
    bn_dims d;
    __device__ ck_dvec<1> operator()(int64_t c, int64_t m) const
    {
        return {{ck_ld(x, bn_index(d, m / d.S, c, m % d.S))}};
    }
};

/* (x - mean[c])^2 */
struct bn_sq_term {
    ck_dv x;
    const double *mean;
    bn_dims d;
    __device__ ck_dvec<1> operator()(int64_t c, int64_t m) const
    {
        const double dx = ck_ld(x, bn_index(d, m / d.S, c, m % d.S)) - mean[c];
        return {{dx * dx}};
    }
};

/* mean[c] = sum[c] / cnt */
static __global__ void bn_mean_kernel(double *mean, const double *sum, int64_t C, double cnt)
{
    CK_GRID_STRIDE(c, C)
    mean[c] = sum[c] / cnt;
}

/* Per channel: var, invstd, running statistics (when update), saved; leaves the
 * normalisation's mean and invstd in coef[c] = {mean, invstd}. Training: mean holds the
 * batch mean, sq the sum of squared deviations; eval: both unused. */
static __global__ void bn_channel_kernel(double *coef, const double *mean, const double *sq, ck_dv saved,
                                  ck_dv running_mean, ck_dv running_var, int64_t C, int64_t cnt,
                                  double eps, double momentum, bool eval, bool update)
{
    CK_GRID_STRIDE(c, C)
    {
        double m, invstd;
        if (eval) {
            m = ck_ld(running_mean, c);
            invstd = 1.0 / sqrt(ck_ld(running_var, c) + eps);
        } else {
            m = mean[c];
            const double var = sq[c] / (double)cnt;
            invstd = 1.0 / sqrt(var + eps);
            if (update) {
                const double unbiased = var * (double)cnt / (double)(cnt - 1);
                if (running_mean.p)
                    ck_st(running_mean, c,
                          (1.0 - momentum) * ck_ld(running_mean, c) + momentum * m);
                if (running_var.p)
                    ck_st(running_var, c,
                          (1.0 - momentum) * ck_ld(running_var, c) + momentum * unbiased);
            }
        }
        if (saved.p) {
            ck_st(saved, c, m);
            ck_st(saved, C + c, invstd);
        }
        coef[2 * c] = m;
        coef[2 * c + 1] = invstd;
    }
}

/* out = (x - mean) * invstd * w + b per channel */
static __global__ void bn_apply_kernel(ck_dv out, ck_dv x, const double *coef, ck_dv weight, ck_dv bias,
                                bn_dims d)
{
    CK_GRID_STRIDE(i, d.N * d.C * d.S)
    {
        const int64_t c = (i / d.S) % d.C;
        const double mean = coef[2 * c], invstd = coef[2 * c + 1];
        const double w = ld_or(weight, c, 1.0), b = ld_or(bias, c, 0.0);
        ck_st(out, i, (ck_ld(x, i) - mean) * invstd * w + b);
    }
}

static __global__ void bn_count_kernel(int64_t *num_batches_tracked)
{
    num_batches_tracked[0] += 1;
}

/* {dy, dy (x - mean) invstd} with mean and invstd from saved */
struct bn_grad_term {
    ck_dv dy, x, saved;
    bn_dims d;
    __device__ ck_dvec<2> operator()(int64_t c, int64_t m) const
    {
        const int64_t i = bn_index(d, m / d.S, c, m % d.S);
        const double mean = ck_ld(saved, c);
        const double invstd = ck_ld(saved, d.C + c);
        const double g = ck_ld(dy, i);
        return {{g, g * (ck_ld(x, i) - mean) * invstd}};
    }
};

/* dweight[c] += sum(dy xhat), dbias[c] += sum(dy); sums[c] = {sum dy, sum dy xhat} */
static __global__ void bn_param_grad_kernel(ck_dv dweight, ck_dv dbias, const double *sums, int64_t C)
{
    CK_GRID_STRIDE(c, C)
    {
        acc_if(dweight, c, sums[2 * c + 1]);
        acc_if(dbias, c, sums[2 * c]);
    }
}

/* training: dx += invstd w / n (n dy - sum dy - xhat sum(dy xhat)); eval: dx += dy w invstd */
static __global__ void bn_dx_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv saved, ck_dv weight,
                             const double *sums, bn_dims d, bool eval)
{
    const double cnt = (double)(d.N * d.S);
    CK_GRID_STRIDE(i, d.N * d.C * d.S)
    {
        const int64_t c = (i / d.S) % d.C;
        const double mean = ck_ld(saved, c);
        const double invstd = ck_ld(saved, d.C + c);
        const double w = ld_or(weight, c, 1.0);
        const double g = ck_ld(dy, i);
        if (eval) {
            ck_acc(dx, i, g * w * invstd);
        } else {
            const double sum_dy = sums[2 * c], sum_dy_xhat = sums[2 * c + 1];
            const double xhat = (ck_ld(x, i) - mean) * invstd;
            ck_acc(dx, i, invstd * w / cnt * (cnt * g - sum_dy - xhat * sum_dy_xhat));
        }
    }
}

static ck_status batchnorm_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    bn_dims d;
    CK_TRY(ck_opc_batchnorm_fwd(CUDA_BE, op, io, &d, err));
    const ck_tensor *x = io->in[0];
    const bool update = !op->eval && args->update_running_stats;
    const int64_t cnt = d.N * d.S, C = d.C;

    ck_dev_buf stats, coef; /* stats: sum, mean, sq (C each); coef: (mean, invstd) per c */
    CK_TRY(stats.alloc(cu, (size_t)C * 3 * sizeof(double), "batchnorm statistics", err));
    CK_TRY(coef.alloc(cu, (size_t)C * 2 * sizeof(double), "batchnorm coefficients", err));
    double *sum = stats.as<double>(), *mean = sum + C, *sq = mean + C;
    if (!op->eval) {
        CK_TRY(ck_row_sums<1>(cu, bn_x_term{ck_view(x), d}, C, cnt, sum, err));
        bn_mean_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(mean, sum, C, (double)cnt);
        CK_LAUNCH_CHECK();
        CK_TRY(ck_row_sums<1>(cu, bn_sq_term{ck_view(x), mean, d}, C, cnt, sq, err));
    }
    bn_channel_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(
        coef.as<double>(), mean, sq, ck_view(io->saved), ck_view(io->running_mean),
        ck_view(io->running_var), C, cnt, op->eps, op->momentum, op->eval, update);
    CK_LAUNCH_CHECK();
    const int64_t n = ck_shape_numel(&x->shape);
    bn_apply_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(x), coef.as<double>(), ck_view(io->weight), ck_view(io->bias), d);
    CK_LAUNCH_CHECK();
    if (update && io->num_batches_tracked) {
        bn_count_kernel<<<1, 1, 0, cu->stream>>>(static_cast<int64_t *>(io->num_batches_tracked->data));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

static ck_status batchnorm_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    bn_dims d;
    CK_TRY(ck_opc_batchnorm_bwd(CUDA_BE, op, io, g, &d, err));
    const ck_tensor *x = io->in[0];
    const int64_t numel = ck_shape_numel(&x->shape), C = d.C;

    ck_dev_buf sums; /* {sum dy, sum dy xhat} per channel */
    CK_TRY(sums.alloc(cu, (size_t)C * 2 * sizeof(double), "batchnorm gradient sums", err));
    CK_TRY(ck_row_sums<2>(cu, bn_grad_term{ck_view(g->dout), ck_view(x), ck_view(io->saved), d},
                          C, d.N * d.S, sums.as<double>(), err));
    if (g->dweight || g->dbias) {
        bn_param_grad_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(
            ck_view(g->dweight), ck_view(g->dbias), sums.as<double>(), C);
        CK_LAUNCH_CHECK();
    }
    if (g->din[0]) {
        bn_dx_kernel<<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(
            ck_view(g->din[0]), ck_view(g->dout), ck_view(x), ck_view(io->saved),
            ck_view(io->weight), sums.as<double>(), d, op->eval);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ================================ layernorm ================================

/* sample n, element j: x[n * D + j] */
struct ln_x_term {
    ck_dv x;
    int64_t D;
    __device__ ck_dvec<1> operator()(int64_t n, int64_t j) const { return {{ck_ld(x, n * D + j)}}; }
};

/* (x - mean_n)^2, the mean of sample n read from coef (stride 2) */
struct ln_sq_term {
    ck_dv x;
    const double *coef;
    int64_t D;
    __device__ ck_dvec<1> operator()(int64_t n, int64_t j) const
    {
        const double dx = ck_ld(x, n * D + j) - coef[2 * n];
        return {{dx * dx}};
    }
};

/* mean_n = sum_n / D into coef[2n] */
static __global__ void ln_mean_kernel(double *coef, const double *sum, int64_t N, int64_t D)
{
    CK_GRID_STRIDE(n, N)
    coef[2 * n] = sum[n] / (double)D;
}

/* invstd_n into coef[2n + 1]; mean and invstd into saved */
static __global__ void ln_invstd_kernel(double *coef, const double *sq, ck_dv saved, int64_t N, int64_t D,
                                 double eps)
{
    CK_GRID_STRIDE(n, N)
    {
        const double mean = coef[2 * n];
        const double invstd = 1.0 / sqrt(sq[n] / (double)D + eps);
        coef[2 * n + 1] = invstd;
        if (saved.p) {
            ck_st(saved, n, mean);
            ck_st(saved, N + n, invstd);
        }
    }
}

/* out = xhat * w + b */
static __global__ void ln_apply_kernel(ck_dv out, ck_dv x, const double *coef, ck_dv weight, ck_dv bias,
                                int64_t N, int64_t D)
{
    CK_GRID_STRIDE(i, N * D)
    {
        const int64_t n = i / D, j = i % D;
        const double xhat = (ck_ld(x, i) - coef[2 * n]) * coef[2 * n + 1];
        ck_st(out, i, xhat * ld_or(weight, j, 1.0) + ld_or(bias, j, 0.0));
    }
}

/* element j, sample n: {dy, dy (x - mean_n) invstd_n} */
struct ln_param_term {
    ck_dv dy, x, saved;
    int64_t N, D;
    __device__ ck_dvec<2> operator()(int64_t j, int64_t n) const
    {
        const double g = ck_ld(dy, n * D + j);
        return {{g, g * (ck_ld(x, n * D + j) - ck_ld(saved, n)) * ck_ld(saved, N + n)}};
    }
};

/* sample n, element j, g = dy w: {g, g (x - mean) invstd} */
struct ln_dx_term {
    ck_dv dy, x, saved, weight;
    int64_t N, D;
    __device__ ck_dvec<2> operator()(int64_t n, int64_t j) const
    {
        const double mean = ck_ld(saved, n);
        const double invstd = ck_ld(saved, N + n);
        const double g = ck_ld(dy, n * D + j) * ld_or(weight, j, 1.0);
        return {{g, g * (ck_ld(x, n * D + j) - mean) * invstd}};
    }
};

/* dweight[j] += sum_n dy xhat, dbias[j] += sum_n dy */
static __global__ void ln_param_grad_kernel(ck_dv dweight, ck_dv dbias, const double *sums, int64_t D)
{
    CK_GRID_STRIDE(j, D)
    {
        acc_if(dweight, j, sums[2 * j + 1]);
        acc_if(dbias, j, sums[2 * j]);
    }
}

/* dx += invstd / D (D g - sum g - xhat sum(g xhat)) */
static __global__ void ln_dx_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv saved, ck_dv weight,
                             const double *sums, int64_t N, int64_t D)
{
    CK_GRID_STRIDE(i, N * D)
    {
        const int64_t n = i / D, j = i % D;
        const double mean = ck_ld(saved, n);
        const double invstd = ck_ld(saved, N + n);
        const double xhat = (ck_ld(x, i) - mean) * invstd;
        const double g = ck_ld(dy, i) * ld_or(weight, j, 1.0);
        const double sum_g = sums[2 * n], sum_g_xhat = sums[2 * n + 1];
        ck_acc(dx, i, invstd / (double)D * ((double)D * g - sum_g - xhat * sum_g_xhat));
    }
}

static ck_status layernorm_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t N, D;
    CK_TRY(ck_opc_layernorm_fwd(CUDA_BE, op, io, &N, &D, err));
    const ck_tensor *x = io->in[0];

    ck_dev_buf stats, coef; /* stats: sum, sq (N each); coef: (mean, invstd) per sample */
    CK_TRY(stats.alloc(cu, (size_t)N * 2 * sizeof(double), "layernorm statistics", err));
    CK_TRY(coef.alloc(cu, (size_t)N * 2 * sizeof(double), "layernorm coefficients", err));
    double *sum = stats.as<double>(), *sq = sum + N;
    CK_TRY(ck_row_sums<1>(cu, ln_x_term{ck_view(x), D}, N, D, sum, err));
    ln_mean_kernel<<<ck_blocks(N), CK_THREADS, 0, cu->stream>>>(coef.as<double>(), sum, N, D);
    CK_LAUNCH_CHECK();
    CK_TRY(ck_row_sums<1>(cu, ln_sq_term{ck_view(x), coef.as<double>(), D}, N, D, sq, err));
    ln_invstd_kernel<<<ck_blocks(N), CK_THREADS, 0, cu->stream>>>(coef.as<double>(), sq,
                                                                  ck_view(io->saved), N, D,
                                                                  op->eps);
    CK_LAUNCH_CHECK();
    ln_apply_kernel<<<ck_blocks(N * D), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(x), coef.as<double>(), ck_view(io->weight), ck_view(io->bias), N,
        D);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status layernorm_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, D;
    CK_TRY(ck_opc_layernorm_bwd(CUDA_BE, op, io, g, &N, &D, err));
    const ck_tensor *x = io->in[0];

    if (g->dweight || g->dbias) {
        ck_dev_buf sums; /* {sum_n dy, sum_n dy xhat} per element j */
        CK_TRY(sums.alloc(cu, (size_t)D * 2 * sizeof(double), "layernorm parameter sums", err));
        CK_TRY(ck_row_sums<2>(cu, ln_param_term{ck_view(g->dout), ck_view(x), ck_view(io->saved),
                                                N, D},
                              D, N, sums.as<double>(), err));
        ln_param_grad_kernel<<<ck_blocks(D), CK_THREADS, 0, cu->stream>>>(
            ck_view(g->dweight), ck_view(g->dbias), sums.as<double>(), D);
        CK_LAUNCH_CHECK();
    }
    if (!g->din[0])
        return CK_OK;
    ck_dev_buf sums; /* {sum_j g, sum_j g xhat} per sample */
    CK_TRY(sums.alloc(cu, (size_t)N * 2 * sizeof(double), "layernorm gradient sums", err));
    CK_TRY(ck_row_sums<2>(cu, ln_dx_term{ck_view(g->dout), ck_view(x), ck_view(io->saved),
                                         ck_view(io->weight), N, D},
                          N, D, sums.as<double>(), err));
    ln_dx_kernel<<<ck_blocks(N * D), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout), ck_view(x), ck_view(io->saved), ck_view(io->weight),
        sums.as<double>(), N, D);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

/* CUDA rmsnorm (backends/ref/norm.c): one thread per row; dw one thread per column. */
#include "backends/cuda/cuda_common.cuh"

static __device__ double rms_rinv(ck_dv x, int64_t base, int64_t D, double eps)
{
    double sq = 0.0;
    for (int64_t j = 0; j < D; j++) {
        double v = ck_ld(x, base + j);
        sq = __dadd_rn(sq, __dmul_rn(v, v));
    }
    return 1.0 / sqrt(sq / (double)D + eps);
}

static __device__ __forceinline__ double ld_or1(ck_dv t, int64_t i) { return t.p ? ck_ld(t, i) : 1.0; }

static __global__ void rms_fwd_kernel(ck_dv y, ck_dv x, ck_dv w, int64_t R, int64_t D, double eps)
{
    CK_GRID_STRIDE(r, R)
    {
        const double ri = rms_rinv(x, r * D, D, eps);
        for (int64_t j = 0; j < D; j++)
            ck_st(y, r * D + j, ck_ld(x, r * D + j) * ri * ld_or1(w, j));
    }
}

static __global__ void rms_dx_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv w, int64_t R, int64_t D, double eps)
{
    CK_GRID_STRIDE(r, R)
    {
        const double ri = rms_rinv(x, r * D, D, eps);
        double s = 0.0;
        for (int64_t j = 0; j < D; j++)
            s = __dadd_rn(s, ck_ld(dy, r * D + j) * ld_or1(w, j) * ck_ld(x, r * D + j));
        for (int64_t j = 0; j < D; j++)
            ck_acc(dx, r * D + j, ri * (ck_ld(dy, r * D + j) * ld_or1(w, j) -
                                        ck_ld(x, r * D + j) * ri * ri * s / (double)D));
    }
}

static __global__ void rms_dw_kernel(ck_dv dw, ck_dv dy, ck_dv x, int64_t R, int64_t D, double eps)
{
    CK_GRID_STRIDE(j, D)
    {
        double acc = 0.0;
        for (int64_t r = 0; r < R; r++)
            acc = __dadd_rn(acc, ck_ld(dy, r * D + j) * ck_ld(x, r * D + j) * rms_rinv(x, r * D, D, eps));
        ck_acc(dw, j, acc);
    }
}

static ck_status launch_rmsnorm_fwd(ck_cuda *cu, ck_dv y, ck_dv x, ck_dv w, int64_t R, int64_t D,
                           double eps, ck_error *err)
{
    rms_fwd_kernel<<<ck_blocks(R), CK_THREADS, 0, cu->stream>>>(y, x, w, R, D, eps);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_rmsnorm_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv dy, ck_dv x, ck_dv w,
                           int64_t R, int64_t D, double eps, ck_error *err)
{
    if (dw.p) {
        rms_dw_kernel<<<ck_blocks(D), CK_THREADS, 0, cu->stream>>>(dw, dy, x, R, D, eps);
        CK_LAUNCH_CHECK();
    }
    if (dx.p) {
        rms_dx_kernel<<<ck_blocks(R), CK_THREADS, 0, cu->stream>>>(dx, dy, x, w, R, D, eps);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status rmsnorm_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc_norm_rows(CUDA_BE, "rmsnorm", op, io->in[0], io->out, io->weight, &R, &D, err));
    return launch_rmsnorm_fwd(cu, ck_view(io->out), ck_view(io->in[0]), ck_view(io->weight), R, D,
                            op->eps, err);
}

static ck_status rmsnorm_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t R, D;
    CK_TRY(ck_opc_norm_rows(CUDA_BE, "rmsnorm backward", op, io->in[0], g->dout, io->weight, &R, &D,
                         err));
    return launch_rmsnorm_bwd(cu, ck_view(g->din[0]), ck_view(g->dweight), ck_view(g->dout),
                            ck_view(io->in[0]), ck_view(io->weight), R, D, op->eps, err);
}

/* CUDA groupnorm (backends/ref/norm.c): one thread per (n, group); the parameter
 * gradients one thread per channel. */
#include "backends/cuda/cuda_common.cuh"

static __device__ void gn_stats(ck_dv x, int64_t base, int64_t M, double eps, double *mean, double *invstd)
{
    double s = 0.0;
    for (int64_t i = 0; i < M; i++)
        s = __dadd_rn(s, ck_ld(x, base + i));
    const double m = s / (double)M;
    double sq = 0.0;
    for (int64_t i = 0; i < M; i++) {
        double d = ck_ld(x, base + i) - m;
        sq = __dadd_rn(sq, __dmul_rn(d, d));
    }
    *mean = m;
    *invstd = 1.0 / sqrt(sq / (double)M + eps);
}

static __global__ void gn_fwd_kernel(ck_dv y, ck_dv saved, ck_dv x, ck_dv w, ck_dv b, int64_t N,
                              int64_t C, int64_t S, int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    CK_GRID_STRIDE(r, N * G)
    {
        const int64_t n = r / G, gi = r % G, base = (n * C + gi * cpg) * S;
        double mean, invstd;
        gn_stats(x, base, M, eps, &mean, &invstd);
        if (saved.p) {
            ck_st(saved, r, mean);
            ck_st(saved, N * G + r, invstd);
        }
        for (int64_t c = 0; c < cpg; c++) {
            const int64_t ch = gi * cpg + c;
            const double wv = w.p ? ck_ld(w, ch) : 1.0, bv = b.p ? ck_ld(b, ch) : 0.0;
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = base + c * S + s;
                ck_st(y, i, (ck_ld(x, i) - mean) * invstd * wv + bv);
            }
        }
    }
}

static __global__ void gn_dx_kernel(ck_dv dx, ck_dv dy, ck_dv x, ck_dv w, int64_t N, int64_t C, int64_t S,
                             int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    CK_GRID_STRIDE(r, N * G)
    {
        const int64_t n = r / G, gi = r % G, base = (n * C + gi * cpg) * S;
        double mean, invstd;
        gn_stats(x, base, M, eps, &mean, &invstd);
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < cpg; c++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = base + c * S + s;
                const double gv = ck_ld(dy, i) * (w.p ? ck_ld(w, gi * cpg + c) : 1.0);
                sg = __dadd_rn(sg, gv);
                sgx = __dadd_rn(sgx, gv * (ck_ld(x, i) - mean) * invstd);
            }
        for (int64_t c = 0; c < cpg; c++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = base + c * S + s;
                const double gv = ck_ld(dy, i) * (w.p ? ck_ld(w, gi * cpg + c) : 1.0);
                const double xhat = (ck_ld(x, i) - mean) * invstd;
                ck_acc(dx, i, invstd / (double)M * ((double)M * gv - sg - xhat * sgx));
            }
    }
}

static __global__ void gn_dwb_kernel(ck_dv dw, ck_dv db, ck_dv dy, ck_dv x, int64_t N, int64_t C,
                              int64_t S, int64_t G, double eps)
{
    const int64_t cpg = C / G, M = cpg * S;
    CK_GRID_STRIDE(ch, C)
    {
        const int64_t gi = ch / cpg;
        double sdy = 0.0, sdyx = 0.0;
        for (int64_t n = 0; n < N; n++) {
            double mean, invstd;
            gn_stats(x, (n * C + gi * cpg) * S, M, eps, &mean, &invstd);
            for (int64_t s = 0; s < S; s++) {
                const int64_t i = (n * C + ch) * S + s;
                sdy = __dadd_rn(sdy, ck_ld(dy, i));
                sdyx = __dadd_rn(sdyx, ck_ld(dy, i) * (ck_ld(x, i) - mean) * invstd);
            }
        }
        if (dw.p)
            ck_acc(dw, ch, sdyx);
        if (db.p)
            ck_acc(db, ch, sdy);
    }
}

static ck_status launch_groupnorm_fwd(ck_cuda *cu, ck_dv y, ck_dv saved, ck_dv x, ck_dv w, ck_dv b,
                             int64_t N, int64_t C, int64_t S, int64_t G, double eps,
                             ck_error *err)
{
    gn_fwd_kernel<<<ck_blocks(N * G), CK_THREADS, 0, cu->stream>>>(y, saved, x, w, b, N, C, S, G,
                                                                  eps);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_groupnorm_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv db, ck_dv dy, ck_dv x,
                             ck_dv w, int64_t N, int64_t C, int64_t S, int64_t G, double eps,
                             ck_error *err)
{
    if (dw.p || db.p) {
        gn_dwb_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(dw, db, dy, x, N, C, S, G, eps);
        CK_LAUNCH_CHECK();
    }
    if (dx.p) {
        gn_dx_kernel<<<ck_blocks(N * G), CK_THREADS, 0, cu->stream>>>(dx, dy, x, w, N, C, S, G, eps);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status groupnorm_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc_groupnorm(CUDA_BE, op, io->in[0], io->out, io->weight, io->bias, &N, &C, &S,
                              err));
    return launch_groupnorm_fwd(cu, ck_view(io->out), ck_view(NULL), ck_view(io->in[0]),
                              ck_view(io->weight), ck_view(io->bias), N, C, S, op->groups,
                              op->eps, err);
}

static ck_status groupnorm_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    int64_t N, C, S;
    CK_TRY(ck_opc_groupnorm(CUDA_BE, op, io->in[0], g->dout, io->weight, io->bias, &N, &C, &S,
                              err));
    return launch_groupnorm_bwd(cu, ck_view(g->din[0]), ck_view(g->dweight), ck_view(g->dbias),
                              ck_view(g->dout), ck_view(io->in[0]), ck_view(io->weight), N, C,
                              S, op->groups, op->eps, err);
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_BATCHNORM: return cuda_op_fns{batchnorm_op_forward, batchnorm_op_backward};
    case CK_OP_LAYERNORM: return cuda_op_fns{layernorm_op_forward, layernorm_op_backward};
    case CK_OP_RMSNORM: return cuda_op_fns{rmsnorm_op_forward, rmsnorm_op_backward};
    case CK_OP_GROUPNORM: return cuda_op_fns{groupnorm_op_forward, groupnorm_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(norm, pick)
