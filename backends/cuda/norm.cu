/*
 * CUDA normalisation layers: batchnorm (per channel over N and spatial) and layernorm
 * (per sample over all non-batch dims), forward and backward.
 *
 * As backends/cpu/norm.c: statistics are two-pass (mean, then biased variance of
 * x - mean) accumulated in double; every value is computed in double with the CPU's
 * expressions, operand for operand, and rounded once on store. Batchnorm follows
 * PyTorch's BatchNorm{1,2,3}d (training: batch statistics, and when asked, running_mean,
 * running_var (unbiased) and num_batches_tracked updated; eval: running statistics,
 * nothing updated). `saved` holds (mean, invstd) per channel or per sample.
 *
 * The sums are the fixed-order block reductions of cuda_common.cuh (a tree instead of
 * the CPU's left-to-right loop, so the double sums may differ from the CPU's in their
 * last bits; the rounded fp32 outputs rarely do). Weights, biases, running statistics
 * and `saved` are read and written in their own dtype, so fp16/bf16 runs may keep them in
 * fp32 as harness/precision.md asks.
 */
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// small tensors in their own dtype (NULL allowed)

typedef struct {
    void *p;
    int dt;
} any_ptr;

static any_ptr any(const ck_tensor *t)
{
    any_ptr a = {t ? t->data : nullptr, t ? (int)t->dtype : (int)CK_F32};
    return a;
}

/* weight/bias may be absent: w = 1, b = 0 */
__device__ __forceinline__ double ld_or(any_ptr a, int64_t i, double dflt)
{
    return a.p ? ck_ld_any(a.p, a.dt, i) : dflt;
}

/* the CPU's acc(t, i, v): st(t, i, ld(t, i) + v) */
__device__ __forceinline__ void acc_any(any_ptr a, int64_t i, double v)
{
    if (a.p)
        ck_st_any(a.p, a.dt, i, ck_ld_any(a.p, a.dt, i) + v);
}

// ----------------------------------------------------------------------------
// checks (as the CPU's, except that small tensors may have their own float dtype)

static ck_status check_act(const char *fn, const ck_tensor *x, const ck_tensor *t, int64_t numel,
                           ck_error *err)
{
    if (!t)
        return CK_OK;
    if (t->dtype != x->dtype)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s but %s is %s", fn,
                       ck_cuda_tname(t), ck_dtype_name(t->dtype), ck_cuda_tname(x),
                       ck_dtype_name(x->dtype));
    if (ck_shape_numel(&t->shape) != numel)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has %lld elements, expected %lld", fn,
                       ck_cuda_tname(t), (long long)ck_shape_numel(&t->shape), (long long)numel);
    return CK_OK;
}

/* weight, bias, running statistics, their gradients: any float dtype, `numel` elements */
static ck_status check_small(const char *fn, const ck_tensor *t, int64_t numel, ck_error *err)
{
    if (!t)
        return CK_OK;
    if (!ck_cuda_float_dtype(t->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s, expected a float dtype", fn,
                       ck_cuda_tname(t), ck_dtype_name(t->dtype));
    if (ck_shape_numel(&t->shape) != numel)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has %lld elements, expected %lld", fn,
                       ck_cuda_tname(t), (long long)ck_shape_numel(&t->shape), (long long)numel);
    return CK_OK;
}

/* `saved` holds 2 x rows values in a float dtype. */
static ck_status check_saved(const char *fn, const ck_tensor *saved, int64_t rows, ck_error *err)
{
    if (!saved)
        return CK_OK;
    if (!ck_cuda_float_dtype(saved->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: saved tensor %s is %s, expected a float "
                       "dtype", fn, ck_cuda_tname(saved), ck_dtype_name(saved->dtype));
    if (ck_shape_numel(&saved->shape) != 2 * rows)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: saved tensor %s has %lld elements, "
                       "expected 2 x %lld", fn, ck_cuda_tname(saved),
                       (long long)ck_shape_numel(&saved->shape), (long long)rows);
    return CK_OK;
}

// ================================ batchnorm ================================

/* x viewed as (N, C, S) with S the product of the spatial dims */
typedef struct {
    int64_t N, C, S;
} bn_dims;

__device__ __forceinline__ int64_t bn_index(const bn_dims &d, int64_t n, int64_t c, int64_t s)
{
    return (n * d.C + c) * d.S + s;
}

/* channel c, position m = n * S + s of N * S: x */
template <typename T> struct bn_x_term {
    const T *x;
    bn_dims d;
    __device__ ck_dvec<1> operator()(int64_t c, int64_t m) const
    {
        return {{ck_to_d(x[bn_index(d, m / d.S, c, m % d.S)])}};
    }
};

/* (x - mean[c])^2 */
template <typename T> struct bn_sq_term {
    const T *x;
    const double *mean;
    bn_dims d;
    __device__ ck_dvec<1> operator()(int64_t c, int64_t m) const
    {
        const double dx = ck_to_d(x[bn_index(d, m / d.S, c, m % d.S)]) - mean[c];
        return {{dx * dx}};
    }
};

/* mean[c] = sum[c] / cnt */
__global__ void bn_mean_kernel(double *mean, const double *sum, int64_t C, double cnt)
{
    CK_GRID_STRIDE(c, C)
    mean[c] = sum[c] / cnt;
}

/* Per channel: var, invstd, running statistics (when update), saved; leaves the
 * normalisation's mean and invstd in coef[c] = {mean, invstd}. Training: mean holds the
 * batch mean, sq the sum of squared deviations; eval: both unused. */
__global__ void bn_channel_kernel(double *coef, const double *mean, const double *sq, any_ptr saved,
                                  any_ptr running_mean, any_ptr running_var, int64_t C,
                                  int64_t cnt, double eps, double momentum, bool eval, bool update)
{
    CK_GRID_STRIDE(c, C)
    {
        double m, invstd;
        if (eval) {
            m = ck_ld_any(running_mean.p, running_mean.dt, c);
            invstd = 1.0 / sqrt(ck_ld_any(running_var.p, running_var.dt, c) + eps);
        } else {
            m = mean[c];
            const double var = sq[c] / (double)cnt;
            invstd = 1.0 / sqrt(var + eps);
            if (update) {
                const double unbiased = var * (double)cnt / (double)(cnt - 1);
                if (running_mean.p)
                    ck_st_any(running_mean.p, running_mean.dt, c,
                              (1.0 - momentum) * ck_ld_any(running_mean.p, running_mean.dt, c) +
                                  momentum * m);
                if (running_var.p)
                    ck_st_any(running_var.p, running_var.dt, c,
                              (1.0 - momentum) * ck_ld_any(running_var.p, running_var.dt, c) +
                                  momentum * unbiased);
            }
        }
        if (saved.p) {
            ck_st_any(saved.p, saved.dt, c, m);
            ck_st_any(saved.p, saved.dt, C + c, invstd);
        }
        coef[2 * c] = m;
        coef[2 * c + 1] = invstd;
    }
}

/* out = (x - mean) * invstd * w + b per channel */
template <typename T>
__global__ void bn_apply_kernel(T *out, const T *x, const double *coef, any_ptr weight,
                                any_ptr bias, bn_dims d)
{
    CK_GRID_STRIDE(i, d.N * d.C * d.S)
    {
        const int64_t c = (i / d.S) % d.C;
        const double mean = coef[2 * c], invstd = coef[2 * c + 1];
        const double w = ld_or(weight, c, 1.0), b = ld_or(bias, c, 0.0);
        out[i] = ck_from_d<T>((ck_to_d(x[i]) - mean) * invstd * w + b);
    }
}

__global__ void bn_count_kernel(int64_t *num_batches_tracked)
{
    num_batches_tracked[0] += 1;
}

/* {dy, dy (x - mean) invstd} with mean and invstd from saved */
template <typename T> struct bn_grad_term {
    const T *dy, *x;
    any_ptr saved;
    bn_dims d;
    __device__ ck_dvec<2> operator()(int64_t c, int64_t m) const
    {
        const int64_t i = bn_index(d, m / d.S, c, m % d.S);
        const double mean = ck_ld_any(saved.p, saved.dt, c);
        const double invstd = ck_ld_any(saved.p, saved.dt, d.C + c);
        const double g = ck_to_d(dy[i]);
        return {{g, g * (ck_to_d(x[i]) - mean) * invstd}};
    }
};

/* dweight[c] += sum(dy xhat), dbias[c] += sum(dy); sums[c] = {sum dy, sum dy xhat} */
__global__ void bn_param_grad_kernel(any_ptr dweight, any_ptr dbias, const double *sums, int64_t C)
{
    CK_GRID_STRIDE(c, C)
    {
        acc_any(dweight, c, sums[2 * c + 1]);
        acc_any(dbias, c, sums[2 * c]);
    }
}

/* training: dx += invstd w / n (n dy - sum dy - xhat sum(dy xhat)); eval: dx += dy w invstd */
template <typename T>
__global__ void bn_dx_kernel(T *dx, const T *dy, const T *x, any_ptr saved, any_ptr weight,
                             const double *sums, bn_dims d, bool eval)
{
    const double cnt = (double)(d.N * d.S);
    CK_GRID_STRIDE(i, d.N * d.C * d.S)
    {
        const int64_t c = (i / d.S) % d.C;
        const double mean = ck_ld_any(saved.p, saved.dt, c);
        const double invstd = ck_ld_any(saved.p, saved.dt, d.C + c);
        const double w = ld_or(weight, c, 1.0);
        const double g = ck_to_d(dy[i]);
        if (eval) {
            dx[i] = ck_add_wide(dx[i], g * w * invstd);
        } else {
            const double sum_dy = sums[2 * c], sum_dy_xhat = sums[2 * c + 1];
            const double xhat = (ck_to_d(x[i]) - mean) * invstd;
            dx[i] = ck_add_wide(dx[i],
                                invstd * w / cnt * (cnt * g - sum_dy - xhat * sum_dy_xhat));
        }
    }
}

static ck_status bn_check_io(const char *fn, const ck_op_params *op, const ck_op_io *io,
                             bn_dims *d, ck_error *err)
{
    if (io->n_in != 1 || !io->in[0])
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs exactly one input", fn);
    const ck_tensor *x = io->in[0];
    if (!ck_cuda_float_dtype(x->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s; the cuda backend computes in "
                       "fp32, fp64, fp16 or bf16", fn, ck_cuda_tname(x), ck_dtype_name(x->dtype));
    if (x->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, C, ...)", fn,
                       ck_cuda_tname(x), x->shape.ndim);
    d->N = x->shape.dim[0];
    d->C = x->shape.dim[1];
    d->S = 1;
    for (int i = 2; i < x->shape.ndim; i++)
        d->S *= x->shape.dim[i];
    CK_TRY(check_small(fn, io->weight, d->C, err));
    CK_TRY(check_small(fn, io->bias, d->C, err));
    CK_TRY(check_small(fn, io->running_mean, d->C, err));
    CK_TRY(check_small(fn, io->running_var, d->C, err));
    CK_TRY(check_saved(fn, io->saved, d->C, err));
    if (io->num_batches_tracked && (io->num_batches_tracked->dtype != CK_I64 ||
                                    ck_shape_numel(&io->num_batches_tracked->shape) != 1))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s must be one i64", fn,
                       ck_cuda_tname(io->num_batches_tracked));
    if (op->eval && (!io->running_mean || !io->running_var))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: eval mode needs running_mean and running_var",
                       fn);
    if (!op->eval && d->N * d->S < 2)
        return ck_fail(err, CK_ERR_INPUT, "%s: %s has %lld value per channel; training mode "
                       "needs more than 1 (as PyTorch)", fn, ck_cuda_tname(x),
                       (long long)(d->N * d->S));
    return CK_OK;
}

ck_status cuda_batchnorm_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    const char *fn = "batchnorm";
    bn_dims d;
    CK_TRY(bn_check_io(fn, op, io, &d, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    const ck_tensor *x = io->in[0];
    CK_TRY(check_act(fn, x, io->out, ck_shape_numel(&x->shape), err));
    const bool update = !op->eval && args->update_running_stats;
    const int64_t cnt = d.N * d.S, C = d.C;

    ck_dev_buf stats, coef; /* stats: sum, mean, sq (C each); coef: (mean, invstd) per c */
    CK_TRY(stats.alloc(cu, (size_t)C * 3 * sizeof(double), "batchnorm statistics", err));
    CK_TRY(coef.alloc(cu, (size_t)C * 2 * sizeof(double), "batchnorm coefficients", err));
    double *sum = stats.as<double>(), *mean = sum + C, *sq = mean + C;
    if (!op->eval) {
        CK_CUDA_DISPATCH(x->dtype, T, {
            const T *xp = static_cast<const T *>(x->data);
            CK_TRY(ck_row_sums<1>(cu, bn_x_term<T>{xp, d}, C, cnt, sum, err));
            bn_mean_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(mean, sum, C, (double)cnt);
            CK_LAUNCH_CHECK();
            CK_TRY(ck_row_sums<1>(cu, bn_sq_term<T>{xp, mean, d}, C, cnt, sq, err));
        });
    }
    bn_channel_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(
        coef.as<double>(), mean, sq, any(io->saved), any(io->running_mean), any(io->running_var),
        C, cnt, op->eps, op->momentum, op->eval, update);
    CK_LAUNCH_CHECK();
    const int64_t n = ck_shape_numel(&x->shape);
    CK_CUDA_DISPATCH(x->dtype, T,
                     bn_apply_kernel<T><<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
                         static_cast<T *>(io->out->data), static_cast<const T *>(x->data),
                         coef.as<double>(), any(io->weight), any(io->bias), d));
    CK_LAUNCH_CHECK();
    if (update && io->num_batches_tracked) {
        bn_count_kernel<<<1, 1, 0, cu->stream>>>(static_cast<int64_t *>(io->num_batches_tracked->data));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

ck_status cuda_batchnorm_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const char *fn = "batchnorm backward";
    bn_dims d;
    CK_TRY(bn_check_io(fn, op, io, &d, err));
    if (!io->saved)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs the saved (mean, invstd) tensor", fn);
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    const ck_tensor *x = io->in[0];
    const int64_t numel = ck_shape_numel(&x->shape), C = d.C;
    CK_TRY(check_act(fn, x, g->dout, numel, err));
    CK_TRY(check_act(fn, x, g->din[0], numel, err));
    CK_TRY(check_small(fn, g->dweight, C, err));
    CK_TRY(check_small(fn, g->dbias, C, err));

    ck_dev_buf sums; /* {sum dy, sum dy xhat} per channel */
    CK_TRY(sums.alloc(cu, (size_t)C * 2 * sizeof(double), "batchnorm gradient sums", err));
    CK_CUDA_DISPATCH(x->dtype, T,
                     CK_TRY(ck_row_sums<2>(cu,
                                           bn_grad_term<T>{static_cast<const T *>(g->dout->data),
                                                           static_cast<const T *>(x->data),
                                                           any(io->saved), d},
                                           C, d.N * d.S, sums.as<double>(), err)));
    if (g->dweight || g->dbias) {
        bn_param_grad_kernel<<<ck_blocks(C), CK_THREADS, 0, cu->stream>>>(
            any(g->dweight), any(g->dbias), sums.as<double>(), C);
        CK_LAUNCH_CHECK();
    }
    if (g->din[0]) {
        CK_CUDA_DISPATCH(x->dtype, T,
                         bn_dx_kernel<T><<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(
                             static_cast<T *>(g->din[0]->data),
                             static_cast<const T *>(g->dout->data),
                             static_cast<const T *>(x->data), any(io->saved), any(io->weight),
                             sums.as<double>(), d, op->eval));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ================================ layernorm ================================

/* sample n, element j: x[n * D + j] */
template <typename T> struct ln_x_term {
    const T *x;
    int64_t D;
    __device__ ck_dvec<1> operator()(int64_t n, int64_t j) const { return {{ck_to_d(x[n * D + j])}}; }
};

/* Per sample: mean, invstd (into coef and saved). */
__global__ void ln_sample_kernel(double *coef, const double *sum, const double *sq_or_null,
                                 any_ptr saved, int64_t N, int64_t D, double eps, bool means_only)
{
    CK_GRID_STRIDE(n, N)
    {
        if (means_only) {
            coef[2 * n] = sum[n] / (double)D;
            continue;
        }
        const double mean = coef[2 * n];
        const double invstd = 1.0 / sqrt(sq_or_null[n] / (double)D + eps);
        coef[2 * n + 1] = invstd;
        if (saved.p) {
            ck_st_any(saved.p, saved.dt, n, mean);
            ck_st_any(saved.p, saved.dt, N + n, invstd);
        }
    }
}

/* mean of sample n read from coef (stride 2) */
template <typename T> struct ln_sq_coef_term {
    const T *x;
    const double *coef;
    int64_t D;
    __device__ ck_dvec<1> operator()(int64_t n, int64_t j) const
    {
        const double dx = ck_to_d(x[n * D + j]) - coef[2 * n];
        return {{dx * dx}};
    }
};

/* out = xhat * w + b */
template <typename T>
__global__ void ln_apply_kernel(T *out, const T *x, const double *coef, any_ptr weight,
                                any_ptr bias, int64_t N, int64_t D)
{
    CK_GRID_STRIDE(i, N * D)
    {
        const int64_t n = i / D, j = i % D;
        const double xhat = (ck_to_d(x[i]) - coef[2 * n]) * coef[2 * n + 1];
        out[i] = ck_from_d<T>(xhat * ld_or(weight, j, 1.0) + ld_or(bias, j, 0.0));
    }
}

/* element j, sample n: {dy, dy (x - mean_n) invstd_n} */
template <typename T> struct ln_param_term {
    const T *dy, *x;
    any_ptr saved;
    int64_t N, D;
    __device__ ck_dvec<2> operator()(int64_t j, int64_t n) const
    {
        const double g = ck_to_d(dy[n * D + j]);
        return {{g, g * (ck_to_d(x[n * D + j]) - ck_ld_any(saved.p, saved.dt, n)) *
                        ck_ld_any(saved.p, saved.dt, N + n)}};
    }
};

/* sample n, element j, g = dy w: {g, g (x - mean) invstd} */
template <typename T> struct ln_dx_term {
    const T *dy, *x;
    any_ptr saved, weight;
    int64_t N, D;
    __device__ ck_dvec<2> operator()(int64_t n, int64_t j) const
    {
        const double mean = ck_ld_any(saved.p, saved.dt, n);
        const double invstd = ck_ld_any(saved.p, saved.dt, N + n);
        const double g = ck_to_d(dy[n * D + j]) * ld_or(weight, j, 1.0);
        return {{g, g * (ck_to_d(x[n * D + j]) - mean) * invstd}};
    }
};

/* dweight[j] += sum_n dy xhat, dbias[j] += sum_n dy */
__global__ void ln_param_grad_kernel(any_ptr dweight, any_ptr dbias, const double *sums, int64_t D)
{
    CK_GRID_STRIDE(j, D)
    {
        acc_any(dweight, j, sums[2 * j + 1]);
        acc_any(dbias, j, sums[2 * j]);
    }
}

/* dx += invstd / D (D g - sum g - xhat sum(g xhat)) */
template <typename T>
__global__ void ln_dx_kernel(T *dx, const T *dy, const T *x, any_ptr saved, any_ptr weight,
                             const double *sums, int64_t N, int64_t D)
{
    CK_GRID_STRIDE(i, N * D)
    {
        const int64_t n = i / D, j = i % D;
        const double mean = ck_ld_any(saved.p, saved.dt, n);
        const double invstd = ck_ld_any(saved.p, saved.dt, N + n);
        const double xhat = (ck_to_d(x[i]) - mean) * invstd;
        const double g = ck_to_d(dy[i]) * ld_or(weight, j, 1.0);
        const double sum_g = sums[2 * n], sum_g_xhat = sums[2 * n + 1];
        dx[i] = ck_add_wide(dx[i], invstd / (double)D *
                                       ((double)D * g - sum_g - xhat * sum_g_xhat));
    }
}

static ck_status ln_check_io(const char *fn, const ck_op_io *io, int64_t *N, int64_t *D,
                             ck_error *err)
{
    if (io->n_in != 1 || !io->in[0])
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs exactly one input", fn);
    const ck_tensor *x = io->in[0];
    if (!ck_cuda_float_dtype(x->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s; the cuda backend computes in "
                       "fp32, fp64, fp16 or bf16", fn, ck_cuda_tname(x), ck_dtype_name(x->dtype));
    if (x->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, ...)", fn,
                       ck_cuda_tname(x), x->shape.ndim);
    *N = x->shape.dim[0];
    *D = ck_shape_numel(&x->shape) / *N;
    CK_TRY(check_small(fn, io->weight, *D, err));
    CK_TRY(check_small(fn, io->bias, *D, err));
    CK_TRY(check_saved(fn, io->saved, *N, err));
    return CK_OK;
}

ck_status cuda_layernorm_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)args;
    const char *fn = "layernorm";
    int64_t N, D;
    CK_TRY(ln_check_io(fn, io, &N, &D, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    const ck_tensor *x = io->in[0];
    CK_TRY(check_act(fn, x, io->out, N * D, err));

    ck_dev_buf stats, coef; /* stats: sum, sq (N each); coef: (mean, invstd) per sample */
    CK_TRY(stats.alloc(cu, (size_t)N * 2 * sizeof(double), "layernorm statistics", err));
    CK_TRY(coef.alloc(cu, (size_t)N * 2 * sizeof(double), "layernorm coefficients", err));
    double *sum = stats.as<double>(), *sq = sum + N;
    CK_CUDA_DISPATCH(x->dtype, T, {
        const T *xp = static_cast<const T *>(x->data);
        CK_TRY(ck_row_sums<1>(cu, ln_x_term<T>{xp, D}, N, D, sum, err));
        ln_sample_kernel<<<ck_blocks(N), CK_THREADS, 0, cu->stream>>>(
            coef.as<double>(), sum, nullptr, any(io->saved), N, D, op->eps, true);
        CK_LAUNCH_CHECK();
        CK_TRY(ck_row_sums<1>(cu, ln_sq_coef_term<T>{xp, coef.as<double>(), D}, N, D, sq, err));
        ln_sample_kernel<<<ck_blocks(N), CK_THREADS, 0, cu->stream>>>(
            coef.as<double>(), sum, sq, any(io->saved), N, D, op->eps, false);
        CK_LAUNCH_CHECK();
        ln_apply_kernel<T><<<ck_blocks(N * D), CK_THREADS, 0, cu->stream>>>(
            static_cast<T *>(io->out->data), xp, coef.as<double>(), any(io->weight),
            any(io->bias), N, D);
        CK_LAUNCH_CHECK();
    });
    return CK_OK;
}

ck_status cuda_layernorm_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    const char *fn = "layernorm backward";
    int64_t N, D;
    CK_TRY(ln_check_io(fn, io, &N, &D, err));
    if (!io->saved)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs the saved (mean, invstd) tensor", fn);
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    const ck_tensor *x = io->in[0];
    CK_TRY(check_act(fn, x, g->dout, N * D, err));
    CK_TRY(check_act(fn, x, g->din[0], N * D, err));
    CK_TRY(check_small(fn, g->dweight, D, err));
    CK_TRY(check_small(fn, g->dbias, D, err));

    if (g->dweight || g->dbias) {
        ck_dev_buf sums; /* {sum_n dy, sum_n dy xhat} per element j */
        CK_TRY(sums.alloc(cu, (size_t)D * 2 * sizeof(double), "layernorm parameter sums", err));
        CK_CUDA_DISPATCH(x->dtype, T,
                         CK_TRY(ck_row_sums<2>(cu,
                                               ln_param_term<T>{
                                                   static_cast<const T *>(g->dout->data),
                                                   static_cast<const T *>(x->data),
                                                   any(io->saved), N, D},
                                               D, N, sums.as<double>(), err)));
        ln_param_grad_kernel<<<ck_blocks(D), CK_THREADS, 0, cu->stream>>>(
            any(g->dweight), any(g->dbias), sums.as<double>(), D);
        CK_LAUNCH_CHECK();
    }
    if (!g->din[0])
        return CK_OK;
    ck_dev_buf sums; /* {sum_j g, sum_j g xhat} per sample */
    CK_TRY(sums.alloc(cu, (size_t)N * 2 * sizeof(double), "layernorm gradient sums", err));
    CK_CUDA_DISPATCH(x->dtype, T, {
        const T *dyp = static_cast<const T *>(g->dout->data);
        const T *xp = static_cast<const T *>(x->data);
        CK_TRY(ck_row_sums<2>(cu, ln_dx_term<T>{dyp, xp, any(io->saved), any(io->weight), N, D},
                              N, D, sums.as<double>(), err));
        ln_dx_kernel<T><<<ck_blocks(N * D), CK_THREADS, 0, cu->stream>>>(
            static_cast<T *>(g->din[0]->data), dyp, xp, any(io->saved), any(io->weight),
            sums.as<double>(), N, D);
        CK_LAUNCH_CHECK();
    });
    return CK_OK;
}
