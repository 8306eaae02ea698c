/*
 * CUDA losses: mean, sum, mse and cross-entropy, and their gradients.
 *
 * As backends/ref/loss.c: the loss is a double (here a fixed-order block reduction instead
 * of the CPU's left-to-right sum); the gradient dy = scale * dL/dy is computed in double
 * and rounded once into dy's dtype. y, an mse target and dy are each loaded in their own
 * dtype. Cross-entropy takes logits y (N, C, spatial...) and
 * i32 class indices (N, spatial...) and averages logsumexp_c(y) - y[t] (max-subtracted)
 * over the N * spatial positions. Class indices are checked on the host (a copy of the
 * target), so a bad index gets the CPU backend's message, naming its position.
 */
#include "backends/cuda/cuda_common.cuh"

#include <math.h>
#include <math_constants.h>
#include <stdlib.h>

// ----------------------------------------------------------------------------
// cross-entropy layout: y (N, C, S), target (N, S)

typedef ck_ncs_dims ce_dims;

static __device__ __forceinline__ int64_t ce_index(const ce_dims &d, int64_t n, int64_t c, int64_t s)
{
    return (n * d.C + c) * d.S + s;
}

/* max_c y[n, c, s] and sum_c exp(y[n, c, s] - max) at one position */
static __device__ void ce_softmax_terms(const ck_dv &y, const ce_dims &d, int64_t n, int64_t s,
                                 double *max, double *sumexp)
{
    double m = -CUDART_INF;
    for (int64_t c = 0; c < d.C; c++)
        m = fmax(m, ck_ld(y, ce_index(d, n, c, s)));
    double se = 0.0;
    for (int64_t c = 0; c < d.C; c++)
        se = __dadd_rn(se, exp(ck_ld(y, ce_index(d, n, c, s)) - m));
    *max = m;
    *sumexp = se;
}

// ----------------------------------------------------------------------------
// reduction terms and kernels

struct loss_sum_term {
    ck_dv y;
    __device__ ck_dvec<1> operator()(int64_t, int64_t i) const { return {{ck_ld(y, i)}}; }
};

struct loss_mse_term {
    ck_dv y, t;
    __device__ ck_dvec<1> operator()(int64_t, int64_t i) const
    {
        const double r = ck_ld(y, i) - ck_ld(t, i);
        return {{r * r}};
    }
};

/* position m = n * S + s: max + log(sumexp) - y[t] */
struct loss_ce_term {
    ck_dv y;
    const int32_t *t;
    ce_dims d;
    __device__ ck_dvec<1> operator()(int64_t, int64_t m) const
    {
        const int64_t n = m / d.S, s = m % d.S;
        double max, sumexp;
        ce_softmax_terms(y, d, n, s, &max, &sumexp);
        return {{max + log(sumexp) - ck_ld(y, ce_index(d, n, t[m], s))}};
    }
};

/* dy = g */
static __global__ void loss_fill_kernel(ck_dv dy, double g, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(dy, i, g);
}

/* dy = g (y - t) */
static __global__ void loss_mse_grad_kernel(ck_dv dy, ck_dv y, ck_dv t, double g, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(dy, i, g * (ck_ld(y, i) - ck_ld(t, i)));
}

/* dy[n, c, s] = g (softmax_c - [c == t]), one thread per position */
static __global__ void loss_ce_grad_kernel(ck_dv dy, ck_dv y, const int32_t *t, double g, ce_dims d)
{
    CK_GRID_STRIDE(m, d.N * d.S)
    {
        const int64_t n = m / d.S, s = m % d.S;
        double max, sumexp;
        ce_softmax_terms(y, d, n, s, &max, &sumexp);
        const int32_t cls = t[m];
        for (int64_t c = 0; c < d.C; c++) {
            const int64_t i = ce_index(d, n, c, s);
            const double p = exp(ck_ld(y, i) - max) / sumexp;
            ck_st(dy, i, g * (p - (c == cls ? 1.0 : 0.0)));
        }
    }
}

// ----------------------------------------------------------------------------
// checks (as the CPU's)

/* Validates y and target for `kind` (backends/check/check.h); for cross-entropy also fills *d
 * and checks every class index is in [0, C), reading the classes from a host copy of the
 * target. */
static ck_status loss_check(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                            const ck_tensor *target, ce_dims *d, ck_error *err)
{
    CK_TRY(ck_opc_loss(CUDA_BE, kind, y, target, d, err));
    if (kind != CK_LOSS_CROSS_ENTROPY)
        return CK_OK;
    const int64_t numel = d->N * d->S;
    int32_t *t = static_cast<int32_t *>(malloc((size_t)numel * sizeof *t + 1));
    if (!t)
        return ck_fail(err, CK_ERR_NOMEM, "cross_entropy: no host memory to check %lld class "
                       "indices", (long long)numel);
    ck_status st = CK_GPU_CALL(cudaMemcpyAsync(t, target->data, (size_t)numel * sizeof *t,
                                               cudaMemcpyDeviceToHost, cu->stream));
    if (st == CK_OK)
        st = CK_GPU_CALL(cudaStreamSynchronize(cu->stream));
    if (st == CK_OK)
        st = ck_opc_ce_classes(target, t, d, err);
    free(t);
    return st;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

ck_status cuda_loss_forward(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                            const ck_tensor *target, double *loss, ck_error *err)
{
    ce_dims d = {0, 0, 0};
    CK_TRY(loss_check(cu, kind, y, target, &d, err));
    const int64_t numel = ck_shape_numel(&y->shape);
    ck_dev_buf out;
    CK_TRY(out.alloc(cu, sizeof(double), "the loss", err));
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        CK_TRY(ck_row_sums<1>(cu, loss_sum_term{ck_view(y)}, 1, numel, out.as<double>(), err));
        break;
    case CK_LOSS_MSE:
        CK_TRY(ck_row_sums<1>(cu, loss_mse_term{ck_view(y), ck_view(target)}, 1, numel,
                              out.as<double>(), err));
        break;
    case CK_LOSS_CROSS_ENTROPY:
        CK_TRY(ck_row_sums<1>(cu,
                              loss_ce_term{ck_view(y), static_cast<const int32_t *>(target->data), d},
                              1, d.N * d.S, out.as<double>(), err));
        break;
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "loss kind %d passed the checks", (int)kind);
    }
    double sum = 0.0;
    CK_CUDA_CHECK(cudaMemcpyAsync(&sum, out.p, sizeof sum, cudaMemcpyDeviceToHost, cu->stream));
    CK_CUDA_CHECK(cudaStreamSynchronize(cu->stream));
    switch (kind) {
    case CK_LOSS_MEAN: *loss = sum / (double)numel; break;
    case CK_LOSS_SUM: *loss = sum; break;
    case CK_LOSS_MSE: *loss = sum / (double)numel; break;
    default: *loss = sum / (double)(d.N * d.S); break;
    }
    return CK_OK;
}

ck_status cuda_loss_backward(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                             const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err)
{
    ce_dims d = {0, 0, 0};
    CK_TRY(loss_check(cu, kind, y, target, &d, err));
    CK_TRY(ck_opc_loss_dy(kind, y, dy, err));
    const int64_t numel = ck_shape_numel(&y->shape);
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM: {
        const double g = kind == CK_LOSS_MEAN ? scale / (double)numel : scale;
        loss_fill_kernel<<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(ck_view(dy), g, numel);
        break;
    }
    case CK_LOSS_MSE: {
        const double g = 2.0 * scale / (double)numel;
        loss_mse_grad_kernel<<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(
            ck_view(dy), ck_view(y), ck_view(target), g, numel);
        break;
    }
    case CK_LOSS_CROSS_ENTROPY: {
        const double g = scale / (double)(d.N * d.S);
        loss_ce_grad_kernel<<<ck_blocks(d.N * d.S), CK_THREADS, 0, cu->stream>>>(
            ck_view(dy), ck_view(y), static_cast<const int32_t *>(target->data), g, d);
        break;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "loss kind %d passed the checks", (int)kind);
    }
    CK_LAUNCH_CHECK();
    return CK_OK;
}

/*
 * CUDA cross-entropy over a class dim with ignore_index and label smoothing
 * (backends/ref/loss.c):
 * one thread per position computes its term; one thread then sums the terms in position
 * order, the reference's order, so the loss is the reference's bit for bit when the
 * per-position exp/log agree.
 */
#include "backends/cuda/cuda_common.cuh"

static __device__ void ce_terms(ck_dv y, int64_t base, int64_t C, int64_t inner, double *m, double *lse)
{
    double mx = -INFINITY;
    for (int64_t c = 0; c < C; c++)
        mx = fmax(mx, ck_ld(y, base + c * inner));
    double s = 0.0;
    for (int64_t c = 0; c < C; c++)
        s = __dadd_rn(s, exp(ck_ld(y, base + c * inner) - mx));
    *m = mx;
    *lse = log(s);
}

/* smooth (NULL without label smoothing): the position's -sum_c log p_c */
static __global__ void ce_term_kernel(double *terms, double *smooth, ck_dv y, const int32_t *t,
                                      int64_t outer, int64_t C, int64_t inner, long long ignore)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int32_t cls = t[r];
        if ((long long)cls == ignore) {
            terms[r] = 0.0;
            if (smooth)
                smooth[r] = 0.0;
            continue;
        }
        const int64_t base = (r / inner) * C * inner + r % inner;
        double m, lse;
        ce_terms(y, base, C, inner, &m, &lse);
        terms[r] = m + lse - ck_ld(y, base + (int64_t)cls * inner);
        if (smooth) {
            double s = 0.0;
            for (int64_t c = 0; c < C; c++)
                s = __dadd_rn(s, m + lse - ck_ld(y, base + c * inner));
            smooth[r] = s;
        }
    }
}

static __global__ void ce_sum_kernel(double *out, const double *terms, const double *smooth,
                                     const int32_t *t, int64_t n, long long ignore,
                                     double smoothing, int64_t C)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0, u = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        if ((long long)t[i] != ignore) {
            s = __dadd_rn(s, terms[i]);
            if (smooth)
                u = __dadd_rn(u, smooth[i]);
            count++;
        }
    out[0] = s / (double)count;
    if (smooth) /* the reference's (1 - e) nll + e / C smooth, each a mean over count */
        out[0] = (1.0 - smoothing) * out[0] + smoothing / (double)C * (u / (double)count);
    out[1] = (double)count;
}

static __global__ void ce_grad_kernel(ck_dv dy, ck_dv y, const int32_t *t, int64_t outer, int64_t C,
                               int64_t inner, long long ignore, const double *count, double scale,
                               double smoothing)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int64_t base = (r / inner) * C * inner + r % inner;
        const int32_t cls = t[r];
        if ((long long)cls == ignore) {
            for (int64_t c = 0; c < C; c++)
                ck_st(dy, base + c * inner, 0.0);
            continue;
        }
        const double g = scale / count[1];
        double m, lse;
        ce_terms(y, base, C, inner, &m, &lse);
        if (smoothing == 0.0) {
            for (int64_t c = 0; c < C; c++)
                ck_st(dy, base + c * inner,
                      g * (exp(ck_ld(y, base + c * inner) - m - lse) - (c == cls ? 1.0 : 0.0)));
            continue;
        }
        const double on = 1.0 - smoothing, uniform = smoothing / (double)C;
        for (int64_t c = 0; c < C; c++)
            ck_st(dy, base + c * inner,
                  g * (exp(ck_ld(y, base + c * inner) - m - lse) - (c == cls ? on : 0.0) -
                       uniform));
    }
}

/* host copy of the targets for the class check */
static ck_status ce_host_targets(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *target,
                                 int64_t n, int64_t C, ck_error *err)
{
    int32_t *h = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!h)
        return ck_fail(err, CK_ERR_NOMEM, "cross_entropy: no host memory for %lld targets",
                       (long long)n);
    ck_status st = CK_GPU_CALL(cudaMemcpyAsync(h, target->data, sizeof(int32_t) * (size_t)n,
                                               cudaMemcpyDeviceToHost, cu->stream));
    if (st == CK_OK)
        st = CK_GPU_CALL(cudaStreamSynchronize(cu->stream));
    if (st == CK_OK)
        st = ck_opc_ce_spec_classes(loss, target, h, n, C, err);
    free(h);
    return st;
}

ck_status cuda_ce_forward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                          const ck_tensor *target, double *out, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc_ce_spec(CUDA_BE, loss, y, target, &outer, &C, &inner, err));
    const int64_t n = outer * inner;
    CK_TRY(ce_host_targets(cu, loss, target, n, C, err));
    const long long ignore = loss->has_ignore ? (long long)loss->ignore_index : LLONG_MIN;
    const double e = loss->label_smoothing;
    ck_dev_buf terms, smooth, res;
    CK_TRY(terms.alloc(cu, sizeof(double) * (size_t)(n ? n : 1), "cross-entropy terms", err));
    if (e != 0.0)
        CK_TRY(smooth.alloc(cu, sizeof(double) * (size_t)(n ? n : 1), "label-smoothing terms",
                            err));
    CK_TRY(res.alloc(cu, 2 * sizeof(double), "cross-entropy result", err));
    double *sm = e != 0.0 ? smooth.as<double>() : NULL;
    ce_term_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        terms.as<double>(), sm, ck_view(y), (const int32_t *)target->data, outer, C, inner,
        ignore);
    CK_LAUNCH_CHECK();
    ce_sum_kernel<<<1, 1, 0, cu->stream>>>(res.as<double>(), terms.as<double>(), sm,
                                           (const int32_t *)target->data, n, ignore, e, C);
    CK_LAUNCH_CHECK();
    double h[2];
    CK_CUDA_CHECK(cudaMemcpyAsync(h, res.p, sizeof h, cudaMemcpyDeviceToHost, cu->stream));
    CK_CUDA_CHECK(cudaStreamSynchronize(cu->stream));
    *out = h[0];
    return CK_OK;
}

ck_status cuda_ce_backward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                           const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc_ce_spec(CUDA_BE, loss, y, target, &outer, &C, &inner, err));
    const int64_t n = outer * inner;
    CK_TRY(ce_host_targets(cu, loss, target, n, C, err));
    CK_TRY(ck_opc_loss_dy(CK_LOSS_CROSS_ENTROPY, y, dy, err));
    const long long ignore = loss->has_ignore ? (long long)loss->ignore_index : LLONG_MIN;
    const double e = loss->label_smoothing;
    ck_dev_buf terms, smooth, res;
    CK_TRY(terms.alloc(cu, sizeof(double) * (size_t)(n ? n : 1), "cross-entropy terms", err));
    if (e != 0.0)
        CK_TRY(smooth.alloc(cu, sizeof(double) * (size_t)(n ? n : 1), "label-smoothing terms",
                            err));
    CK_TRY(res.alloc(cu, 2 * sizeof(double), "cross-entropy result", err));
    double *sm = e != 0.0 ? smooth.as<double>() : NULL;
    ce_term_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        terms.as<double>(), sm, ck_view(y), (const int32_t *)target->data, outer, C, inner,
        ignore);
    CK_LAUNCH_CHECK();
    ce_sum_kernel<<<1, 1, 0, cu->stream>>>(res.as<double>(), terms.as<double>(), sm,
                                           (const int32_t *)target->data, n, ignore, e, C);
    CK_LAUNCH_CHECK();
    ce_grad_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(dy), ck_view(y), (const int32_t *)target->data, outer, C, inner, ignore,
        res.as<double>(), scale, e);
    CK_LAUNCH_CHECK();
    return CK_OK;
}
