/*
 * The convolution algorithm policy (--algo deterministic|fastest) as pure functions, and
 * the names the report prints. Plain C with no CUDA headers: it is compiled in every
 * build, so tests/test_cuda_cpu.c checks the filtering rules on machines without a GPU.
 * conv.cu converts cuDNN's perf results into ck_cuda_algo_candidate and asks
 * ck_cuda_algo_rank which to try, in which order.
 */
#include "backends/cuda/algo_policy.h"

#include <string.h>

static const char *const fwd_names[CK_CUDA_FWD_ALGO_COUNT] = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED",
};
static const char *const bwd_data_names[CK_CUDA_BWD_DATA_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED",
};
static const char *const bwd_filter_names[CK_CUDA_BWD_FILTER_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING",
};

static int algo_count(ck_cuda_pass p)
{
    switch (p) {
    case CK_CUDA_PASS_FORWARD: return CK_CUDA_FWD_ALGO_COUNT;
    case CK_CUDA_PASS_BACKWARD_DATA: return CK_CUDA_BWD_DATA_ALGO_COUNT;
    case CK_CUDA_PASS_BACKWARD_FILTER: return CK_CUDA_BWD_FILTER_ALGO_COUNT;
    default: return 0;
    }
}

const char *ck_cuda_algo_policy_name(ck_cuda_algo_policy p)
{
    switch (p) {
    case CK_CUDA_ALGO_DETERMINISTIC: return "deterministic";
    case CK_CUDA_ALGO_FASTEST: return "fastest";
    default: return "unknown";
    }
}

bool ck_cuda_algo_policy_parse(const char *s, ck_cuda_algo_policy *out)
{
    if (!s)
        return false;
    if (strcmp(s, "deterministic") == 0) {
        *out = CK_CUDA_ALGO_DETERMINISTIC;
        return true;
    }
    if (strcmp(s, "fastest") == 0) {
        *out = CK_CUDA_ALGO_FASTEST;
        return true;
    }
    return false;
}

const char *ck_cuda_pass_name(ck_cuda_pass p)
{
    switch (p) {
    case CK_CUDA_PASS_FORWARD: return "forward";
    case CK_CUDA_PASS_BACKWARD_DATA: return "backward_data";
    case CK_CUDA_PASS_BACKWARD_FILTER: return "backward_filter";
    default: return "unknown";
    }
}

const char *ck_cuda_conv_algo_name(ck_cuda_pass p, int algo)
{
    if (algo < 0 || algo >= algo_count(p))
        return "unknown";
    switch (p) {
    case CK_CUDA_PASS_FORWARD: return fwd_names[algo];
    case CK_CUDA_PASS_BACKWARD_DATA: return bwd_data_names[algo];
    case CK_CUDA_PASS_BACKWARD_FILTER: return bwd_filter_names[algo];
    default: return "unknown";
    }
}

const char *ck_cuda_math_name(int math)
{
    switch (math) {
    case CK_CUDA_MATH_DEFAULT: return "DEFAULT";
    case CK_CUDA_MATH_TENSOR_OP: return "TENSOR_OP";
    case CK_CUDA_MATH_TENSOR_OP_ALLOW_CONVERSION: return "TENSOR_OP_ALLOW_CONVERSION";
    case CK_CUDA_MATH_FMA: return "FMA";
    default: return "unknown";
    }
}

/* The algorithms cuDNN documents as nondeterministic (cudnn_ops.h): refused under the
 * deterministic policy even if a perf result claimed otherwise. */
static bool known_nondeterministic(ck_cuda_pass pass, int algo)
{
    return (pass == CK_CUDA_PASS_BACKWARD_FILTER && (algo == 0 || algo == 3)) ||
           (pass == CK_CUDA_PASS_BACKWARD_DATA && algo == 0);
}

bool ck_cuda_algo_allowed(ck_cuda_pass pass, int algo, ck_cuda_determinism det,
                          ck_cuda_algo_policy policy)
{
    if (algo < 0 || algo >= algo_count(pass))
        return false;
    switch (policy) {
    case CK_CUDA_ALGO_FASTEST: return true;
    case CK_CUDA_ALGO_DETERMINISTIC:
        return det == CK_CUDA_DETERMINISTIC && !known_nondeterministic(pass, algo);
    default: return false;
    }
}

bool ck_cuda_math_allowed(ck_dtype dtype, int math)
{
    if (math < 0 || math >= CK_CUDA_MATH_COUNT)
        return false;
    switch (dtype) {
    case CK_F32: return math == CK_CUDA_MATH_FMA;
    case CK_F64: return math != CK_CUDA_MATH_TENSOR_OP_ALLOW_CONVERSION;
    case CK_F16:
    case CK_BF16: return true;
    default: return false;
    }
}

int ck_cuda_algo_rank(ck_cuda_pass pass, ck_dtype dtype, ck_cuda_algo_policy policy,
                      size_t workspace_limit, bool by_time, const ck_cuda_algo_candidate *c,
                      int n, int *order)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!c[i].status_ok || c[i].memory > workspace_limit ||
            !ck_cuda_algo_allowed(pass, c[i].algo, c[i].determinism, policy) ||
            !ck_cuda_math_allowed(dtype, c[i].math))
            continue;
        order[m++] = i;
    }
    if (!by_time)
        return m;
    /* insertion sort: stable, and n is at most a few dozen */
    for (int i = 1; i < m; i++) {
        int v = order[i], j = i;
        while (j > 0 && c[order[j - 1]].time_ms > c[v].time_ms) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    return m;
}
