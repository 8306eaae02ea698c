/*
 * CUDA cross-entropy over a class dim with ignore_index (backends/ref/cross_entropy.c):
 * one thread per position computes its term; one thread then sums the terms in position
 * order, the reference's order, so the loss is the reference's bit for bit when the
 * per-position exp/log agree.
 */
#include "backends/cuda/k18_cuda.cuh"

__device__ void ce_terms(ck_dv y, int64_t base, int64_t C, int64_t inner, double *m, double *lse)
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

__global__ void ce_term_kernel(double *terms, ck_dv y, const int32_t *t, int64_t outer, int64_t C,
                               int64_t inner, long long ignore)
{
    CK_GRID_STRIDE(r, outer * inner)
    {
        const int32_t cls = t[r];
        if ((long long)cls == ignore) {
            terms[r] = 0.0;
            continue;
        }
        const int64_t base = (r / inner) * C * inner + r % inner;
        double m, lse;
        ce_terms(y, base, C, inner, &m, &lse);
        terms[r] = m + lse - ck_ld(y, base + (int64_t)cls * inner);
    }
}

__global__ void ce_sum_kernel(double *out, const double *terms, const int32_t *t, int64_t n,
                              long long ignore)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        if ((long long)t[i] != ignore) {
            s = __dadd_rn(s, terms[i]);
            count++;
        }
    out[0] = s / (double)count;
    out[1] = (double)count;
}

__global__ void ce_grad_kernel(ck_dv dy, ck_dv y, const int32_t *t, int64_t outer, int64_t C,
                               int64_t inner, long long ignore, const double *count, double scale)
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
        for (int64_t c = 0; c < C; c++)
            ck_st(dy, base + c * inner,
                  g * (exp(ck_ld(y, base + c * inner) - m - lse) - (c == cls ? 1.0 : 0.0)));
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
        st = ck_opc18_ce_classes(loss, target, h, n, C, err);
    free(h);
    return st;
}

ck_status cuda_ce_forward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                          const ck_tensor *target, double *out, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc18_ce(CUDA_BE, loss, y, target, &outer, &C, &inner, err));
    const int64_t n = outer * inner;
    CK_TRY(ce_host_targets(cu, loss, target, n, C, err));
    const long long ignore = loss->has_ignore ? (long long)loss->ignore_index : LLONG_MIN;
    ck_dev_buf terms, res;
    CK_TRY(terms.alloc(cu, sizeof(double) * (size_t)(n ? n : 1), "cross-entropy terms", err));
    CK_TRY(res.alloc(cu, 2 * sizeof(double), "cross-entropy result", err));
    ce_term_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        terms.as<double>(), ck_view(y), (const int32_t *)target->data, outer, C, inner, ignore);
    CK_LAUNCH_CHECK();
    ce_sum_kernel<<<1, 1, 0, cu->stream>>>(res.as<double>(), terms.as<double>(),
                                           (const int32_t *)target->data, n, ignore);
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
    CK_TRY(ck_opc18_ce(CUDA_BE, loss, y, target, &outer, &C, &inner, err));
    const int64_t n = outer * inner;
    CK_TRY(ce_host_targets(cu, loss, target, n, C, err));
    CK_TRY(ck_opc_loss_dy(CK_LOSS_CROSS_ENTROPY, y, dy, err));
    const long long ignore = loss->has_ignore ? (long long)loss->ignore_index : LLONG_MIN;
    ck_dev_buf terms, res;
    CK_TRY(terms.alloc(cu, sizeof(double) * (size_t)(n ? n : 1), "cross-entropy terms", err));
    CK_TRY(res.alloc(cu, 2 * sizeof(double), "cross-entropy result", err));
    ce_term_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        terms.as<double>(), ck_view(y), (const int32_t *)target->data, outer, C, inner, ignore);
    CK_LAUNCH_CHECK();
    ce_sum_kernel<<<1, 1, 0, cu->stream>>>(res.as<double>(), terms.as<double>(),
                                           (const int32_t *)target->data, n, ignore);
    CK_LAUNCH_CHECK();
    ce_grad_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(dy), ck_view(y), (const int32_t *)target->data, outer, C, inner, ignore,
        res.as<double>(), scale);
    CK_LAUNCH_CHECK();
    return CK_OK;
}
