/*
 * Private to the CUDA backend: the backend's state, the checked-call macros, element
 * access by dtype, device scratch memory, the CPU's wide path for library ops, and the one
 * deterministic reduction every op family uses. One forward/backward pair per op family
 * lives in its own file, named as in backends/ref/ (linear.cu, conv.cu, pool.cu,
 * upsample.cu, pointwise.cu, norm.cu, random.cu, attention.cu, shape.cu, loss.cu,
 * optim.cu); backend.cu dispatches by family.
 *
 * Numerics follow harness/precision.md and the CPU reference op by op: kernels load each
 * tensor in its own dtype (ck_ld, the CPU's ref_ld), compute with the CPU's expressions in
 * double (or in fp32 where the CPU's fp32 kernel does), round once per element written
 * (ck_st) and add gradients with one rounding (ck_acc); fp16/bf16 conversions are
 * harness/core/half.h's integer code, the same the CPU runs. Device code is built with
 * -fmad=false so a*b+c is two roundings, as on the CPU. No float atomics anywhere: every
 * reduction is a fixed-order block tree over a launch shape that depends only on the
 * tensor sizes, so results are bitwise repeatable run to run (and GPU to GPU for these
 * kernels; cuDNN and cuBLAS are repeatable on one GPU model and library version).
 */
#ifndef CK_CUDA_COMMON_CUH
#define CK_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <string.h>

#include "backends/cuda/cuda_api.h" /* backend.h, tensor.h, ops.h, rng.h with C linkage */
#include "backends/cuda/algo_pin.h" /* engine choice, pinning, failure rules: plain C */
#include "backends/cuda/mem_account.h" /* workspace and scratch bytes, live and peak */
#include "backends/check/check.h" /* the host-side checks shared with the CPU backend, C linkage */

/* the backend's name in the shared checks' messages (backends/check/check.h) */
#define CUDA_BE "cuda"

/* half.h names a local `half`, which shadows CUDA's global `half` type under -Wshadow */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
extern "C" {
#include "harness/core/half.h"
}
#pragma GCC diagnostic pop


// ----------------------------------------------------------------------------
// the backend's state (ck_backend.impl)

struct ck_cuda_conv_cache; /* conv.cu */

struct ck_cuda {
    int device;
    ck_cuda_algo_policy policy;
    cudaStream_t stream;  /* every kernel, copy, cuBLAS and cuDNN call runs here */
    cudaMemPool_t pool;   /* the device's default pool, behind cudaMallocAsync */
    cublasHandle_t cublas; /* created on first use (linear.cu) */
    cudnnHandle_t cudnn;   /* created on first use (conv.cu) */
    ck_cuda_conv_cache *conv_cache;
    size_t workspace_cap;  /* the most one convolution's workspace may take (algo_pin.h) */
    ck_cuda_mem_account mem; /* workspaces and scratch (mem_account.h) */

    ck_cuda_algo_record *records;
    int n_records, cap_records;

    char deferred_error[256]; /* a failure where no ck_error was at hand (a free) */
    ck_backend_info info;
};

/* Called by the backend's destroy: release what the op files created lazily. */
void cuda_conv_release(ck_cuda *cu);
void cuda_linear_release(ck_cuda *cu);

/* Finds or adds the record of (layer named after `weight`, op, pass) and updates it with
 * the engine that just ran. */
ck_status cuda_record_algo(ck_cuda *cu, const ck_tensor *weight, const char *op,
                           ck_cuda_pass pass, ck_dtype dtype, const char *engine, int algo,
                           bool deterministic, const char *math, size_t workspace,
                           float time_ms, const char *chosen_by, ck_error *err);

// ----------------------------------------------------------------------------
// checked calls: one macro family, "file:line: call: error string" as CK_ERR_BACKEND

ck_status ck_gpu_status(cudaError_t rc, const char *file, int line, const char *call,
                        ck_error *err);
ck_status ck_gpu_status(cublasStatus_t rc, const char *file, int line, const char *call,
                        ck_error *err);
ck_status ck_gpu_status(cudnnStatus_t rc, const char *file, int line, const char *call,
                        ck_error *err);

/* The status of a call (CK_OK or a filled err), for cleanup paths:
 *   if ((st = CK_GPU_CALL(cudaMemsetAsync(...))) != CK_OK) goto done; */
#define CK_GPU_CALL(call) ck_gpu_status((call), __FILE__, __LINE__, #call, err)
/* Returns from the enclosing function on failure. */
#define CK_GPU_CHECK(call)                                                                 \
    do {                                                                                   \
        ck_status ck_check_st_ = CK_GPU_CALL(call);                                        \
        if (ck_check_st_ != CK_OK)                                                         \
            return ck_check_st_;                                                           \
    } while (0)
#define CK_CUDA_CHECK(call) CK_GPU_CHECK(call)   /* cudaError_t */
#define CK_CUBLAS_CHECK(call) CK_GPU_CHECK(call) /* cublasStatus_t */
#define CK_CUDNN_CHECK(call) CK_GPU_CHECK(call)  /* cudnnStatus_t */
/* After a kernel launch: a bad launch configuration shows up here. */
#define CK_LAUNCH_CHECK() CK_CUDA_CHECK(cudaGetLastError())

/* CK_TRY(expr): return expr's status unless it is CK_OK (backends/check/check.h) */

static inline const char *ck_cuda_tname(const ck_tensor *t)
{
    return ck_opc_tname(t);
}

// ----------------------------------------------------------------------------
// device scratch: stream-ordered, freed on every path by the destructor

struct ck_dev_buf {
    ck_cuda *cu = nullptr;
    void *p = nullptr;
    size_t bytes = 0;
    bool workspace = false; /* a cuDNN workspace (counted apart from other scratch) */
    ck_dev_buf() = default;
    ck_dev_buf(const ck_dev_buf &) = delete;
    ck_dev_buf &operator=(const ck_dev_buf &) = delete;
    ~ck_dev_buf() { release(); }
    /* `what` names the buffer in the out-of-memory message */
    ck_status alloc(ck_cuda *c, size_t bytes, const char *what, ck_error *err,
                    bool is_workspace = false);
    void release();
    template <typename T> T *as() const { return static_cast<T *>(p); }
};

/* cudaMallocAsync on the backend's stream; on out-of-memory, trims the pool and retries
 * once, then fails with CK_ERR_NOMEM naming the bytes asked and the bytes free. */
ck_status cuda_dev_alloc(ck_cuda *cu, size_t bytes, void **ptr, const char *what, ck_error *err);
void cuda_dev_free(ck_cuda *cu, void *ptr);

// ----------------------------------------------------------------------------
// element access: each tensor in its own dtype (backends/ref/ref_elem.h, on the device)

/* A tensor as kernels see it: its memory and its dtype. fp16 and bf16 are raw 16-bit
 * patterns converted with harness/core/half.h, the same integer code the CPU runs, so a value
 * rounds to the same bits on both backends (NaN payloads included). */
typedef struct {
    void *p; /* NULL for an absent tensor */
    int dt;  /* ck_dtype */
} ck_dv;

static inline ck_dv ck_view(const ck_tensor *t)
{
    ck_dv v = {t ? t->data : nullptr, t ? (int)t->dtype : (int)CK_F32};
    return v;
}

/* t[i] as a double (exact for every float dtype): ref_ld */
__device__ __forceinline__ double ck_ld(const ck_dv &v, int64_t i)
{
    switch (v.dt) {
    case CK_F32: return (double)static_cast<const float *>(v.p)[i];
    case CK_F64: return static_cast<const double *>(v.p)[i];
    case CK_F16: return (double)ck_f16_to_f32(static_cast<const uint16_t *>(v.p)[i]);
    case CK_BF16: return (double)ck_bf16_to_f32(static_cast<const uint16_t *>(v.p)[i]);
    default: return 0.0;
    }
}

/* t[i] = x rounded once to t's dtype (nearest even): ref_st */
__device__ __forceinline__ void ck_st(const ck_dv &v, int64_t i, double x)
{
    switch (v.dt) {
    case CK_F32: static_cast<float *>(v.p)[i] = __double2float_rn(x); break;
    case CK_F64: static_cast<double *>(v.p)[i] = x; break;
    case CK_F16: static_cast<uint16_t *>(v.p)[i] = ck_f64_to_f16(x); break;
    case CK_BF16: static_cast<uint16_t *>(v.p)[i] = ck_f64_to_bf16(x); break;
    default: break;
    }
}

/* t[i] += x with one rounding into t's dtype: ref_acc */
__device__ __forceinline__ void ck_acc(const ck_dv &v, int64_t i, double x)
{
    const double old = ck_ld(v, i);
    ck_st(v, i, ck_convert_value(old, x, true, v.dt == CK_F16 || v.dt == CK_BF16));
}

/* How the CPU runs a T-kernel op (linear, conv, pool, upsample): on fp32 tensors when all
 * of them are fp32, on fp64 tensors when all are fp64, and otherwise in double on widened
 * copies with each output rounded once and each gradient added with ref_acc. */
enum { CK_MODE_F32 = 0, CK_MODE_F64 = 1, CK_MODE_WIDE = 2 };

/* The dtype every non-NULL t[0..n) shares, or CK_DTYPE_COUNT: cpu_common_dtype */
static inline ck_dtype ck_common_dtype(const ck_tensor *const *t, int n)
{
    return ck_opc_common_dtype(t, n);
}

static inline int ck_mode_of(const ck_tensor *const *t, int n)
{
    switch (ck_common_dtype(t, n)) {
    case CK_F32: return CK_MODE_F32;
    case CK_F64: return CK_MODE_F64;
    default: return CK_MODE_WIDE;
    }
}

/* A T-kernel's gradient update with a double contribution: the CPU's `g[i] += (T)acc`
 * in fp32 (round acc, then an fp32 add) or fp64, and ref_acc on the wide path. */
__device__ __forceinline__ void ck_acc_mode(const ck_dv &v, int64_t i, double x, int mode)
{
    if (mode == CK_MODE_F32)
        static_cast<float *>(v.p)[i] =
            __fadd_rn(static_cast<const float *>(v.p)[i], __double2float_rn(x));
    else if (mode == CK_MODE_F64)
        static_cast<double *>(v.p)[i] = __dadd_rn(static_cast<const double *>(v.p)[i], x);
    else
        ck_acc(v, i, x);
}

/* A float dtype the kernels handle (fp32, fp64, fp16, bf16). */
static inline bool ck_cuda_float_dtype(ck_dtype dt)
{
    return ck_opc_is_float(dt);
}

/* Every non-NULL t[0..n) has a float dtype; otherwise CK_ERR_UNSUPPORTED naming op, the
 * tensor and its dtype (ck_opc_float_dtypes, as cpu_check_float_dtypes). */
static inline ck_status ck_cuda_check_float_dtypes(const char *op, const ck_tensor *const *t,
                                                   int n, ck_error *err)
{
    return ck_opc_float_dtypes(CUDA_BE, op, t, n, err);
}

// ----------------------------------------------------------------------------
// launch shapes

#define CK_THREADS 256

/* Blocks for a grid-stride loop over n elements (at least 1, at most 2^20). */
static inline unsigned ck_blocks(int64_t n)
{
    int64_t b = (n + CK_THREADS - 1) / CK_THREADS;
    if (b < 1)
        b = 1;
    if (b > (int64_t)1 << 20)
        b = (int64_t)1 << 20;
    return (unsigned)b;
}

#define CK_GRID_STRIDE(i, n)                                                               \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

// ----------------------------------------------------------------------------
// the deterministic reduction: out[row][k] = sum over m in [0, M) of f(row, m).v[k]

template <int K> struct ck_dvec {
    double v[K];
};

/* Stage 1: block b sums chunk (b % chunks) of row (b / chunks): each thread a strided
 * subset in ascending order, then a fixed shared-memory tree. */
template <int K, typename F>
static __global__ void ck_row_partial_kernel(F f, int64_t M, int chunks, int64_t chunk_len,
                                      double *partial)
{
    __shared__ double sh[K][CK_THREADS];
    const int64_t row = blockIdx.x / chunks;
    const int64_t chunk = blockIdx.x % chunks;
    const int64_t begin = chunk * chunk_len;
    const int64_t end = begin + chunk_len < M ? begin + chunk_len : M;
    double acc[K];
    for (int k = 0; k < K; k++)
        acc[k] = 0.0;
    for (int64_t m = begin + threadIdx.x; m < end; m += CK_THREADS) {
        ck_dvec<K> v = f(row, m);
        for (int k = 0; k < K; k++)
            acc[k] = __dadd_rn(acc[k], v.v[k]);
    }
    for (int k = 0; k < K; k++)
        sh[k][threadIdx.x] = acc[k];
    __syncthreads();
    for (int s = CK_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            for (int k = 0; k < K; k++)
                sh[k][threadIdx.x] = __dadd_rn(sh[k][threadIdx.x], sh[k][threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int k = 0; k < K; k++)
            partial[(size_t)blockIdx.x * K + k] = sh[k][0];
}

/* Stage 2: one block per row sums its chunks the same way. */
template <int K>
static __global__ void ck_row_final_kernel(const double *partial, int64_t rows, int chunks, double *out)
{
    __shared__ double sh[K][CK_THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        double acc[K];
        for (int k = 0; k < K; k++)
            acc[k] = 0.0;
        for (int c = threadIdx.x; c < chunks; c += CK_THREADS)
            for (int k = 0; k < K; k++)
                acc[k] = __dadd_rn(acc[k], partial[((size_t)row * chunks + c) * K + k]);
        for (int k = 0; k < K; k++)
            sh[k][threadIdx.x] = acc[k];
        __syncthreads();
        for (int s = CK_THREADS / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s)
                for (int k = 0; k < K; k++)
                    sh[k][threadIdx.x] = __dadd_rn(sh[k][threadIdx.x], sh[k][threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0)
            for (int k = 0; k < K; k++)
                out[row * K + k] = sh[k][0];
        __syncthreads(); /* sh is reused by the next row */
    }
}

/* Chunks per row: about 4096 elements each, about 1024 blocks in all, at most 1024 per
 * row. A function of the sizes only, so the summation order never depends on the GPU. */
static inline int ck_row_chunks(int64_t rows, int64_t M)
{
    int64_t by_len = (M + 4095) / 4096;
    int64_t by_blocks = (1024 + rows - 1) / rows;
    int64_t c = by_len < by_blocks ? by_len : by_blocks;
    if (c < 1)
        c = 1;
    if (c > 1024)
        c = 1024;
    return (int)c;
}

/* out: device, rows * K doubles. f: a __device__ functor, ck_dvec<K> f(row, m). */
template <int K, typename F>
ck_status ck_row_sums(ck_cuda *cu, F f, int64_t rows, int64_t M, double *out, ck_error *err)
{
    if (rows <= 0)
        return CK_OK;
    const int chunks = ck_row_chunks(rows, M);
    if (rows > (int64_t)INT32_MAX / chunks)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cuda reduction over %lld rows is too large",
                       (long long)rows);
    const int64_t chunk_len = (M + chunks - 1) / chunks;
    ck_dev_buf partial;
    CK_TRY(partial.alloc(cu, (size_t)rows * chunks * K * sizeof(double), "reduction scratch",
                         err));
    ck_row_partial_kernel<K, F><<<(unsigned)(rows * chunks), CK_THREADS, 0, cu->stream>>>(
        f, M, chunks, chunk_len, partial.as<double>());
    CK_LAUNCH_CHECK();
    const unsigned fin = rows < 65536 ? (unsigned)rows : 65536u;
    ck_row_final_kernel<K><<<fin, CK_THREADS, 0, cu->stream>>>(partial.as<double>(), rows,
                                                               chunks, out);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the op families (one file each), dispatched by family in backend.cu

typedef ck_status (*cuda_fwd_fn)(ck_cuda *, const ck_op_params *, const ck_fwd_args *,
                                 ck_op_io *, ck_error *);
typedef ck_status (*cuda_bwd_fn)(ck_cuda *, const ck_op_params *, const ck_fwd_args *,
                                 const ck_op_io *, ck_op_grads *, ck_error *);

/* The CPU's wide path for an op whose tensors do not share one dtype (linear and conv,
 * which hand their tensors to cuBLAS/cuDNN in one dtype): every tensor is copied to fp64
 * (exactly), `fn` runs on the copies, forward outputs are rounded once into their tensors
 * and gradients, computed from zero, are added to theirs with one rounding (ck_acc). */
ck_status cuda_forward_wide(ck_cuda *cu, cuda_fwd_fn fn, const ck_op_params *op,
                            const ck_fwd_args *args, ck_op_io *io, ck_error *err);
ck_status cuda_backward_wide(ck_cuda *cu, cuda_bwd_fn fn, const ck_op_params *op,
                             const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                             ck_error *err);

/* The backend's convert (backend.h): dst = (accumulate ? dst : 0) + src * scale, in
 * double, rounded once into dst's dtype, as backends/ref/convert.c. */
ck_status cuda_convert(ck_cuda *cu, ck_tensor *dst, const ck_tensor *src, double scale,
                       bool accumulate, ck_error *err);

struct cuda_op_fns {
    cuda_fwd_fn forward;
    cuda_bwd_fn backward;
};

/* One forward/backward pair per op family (harness/core/ops.h), one file each: the
 * family's file picks the kernel for the op's kind and options (padded pooling, linear
 * upsampling, gelu's tanh approximation are the family's business). */
#define CUDA_FAMILY_DECL(fam)                                                               \
    ck_status cuda_##fam##_forward(ck_cuda *cu, const ck_op_params *op,                    \
                                   const ck_fwd_args *args, ck_op_io *io, ck_error *err);  \
    ck_status cuda_##fam##_backward(ck_cuda *cu, const ck_op_params *op,                   \
                                    const ck_fwd_args *args, const ck_op_io *io,           \
                                    ck_op_grads *g, ck_error *err);
CUDA_FAMILY_DECL(linear)    /* linear (cuBLAS), matmul, embedding (linear.cu) */
CUDA_FAMILY_DECL(conv)      /* conv (cuDNN), conv_transpose (conv.cu) */
CUDA_FAMILY_DECL(pool)      /* maxpool, avgpool, unpadded and padded (pool.cu) */
CUDA_FAMILY_DECL(upsample)  /* upsample, nearest and linear modes (upsample.cu) */
CUDA_FAMILY_DECL(pointwise) /* activations, add, mul, silu, positional (pointwise.cu) */
CUDA_FAMILY_DECL(norm)      /* batchnorm, layernorm, rmsnorm, groupnorm (norm.cu) */
CUDA_FAMILY_DECL(random)    /* dropout, gaussian_noise (random.cu) */
CUDA_FAMILY_DECL(attention) /* softmax, log_softmax, attention (attention.cu) */
CUDA_FAMILY_DECL(shape)     /* concat, flatten, reshape, permute (shape.cu) */
CUDA_FAMILY_DECL(broadcast) /* sub, div, maximum, minimum, pow, masked_fill, add/mul that
                               broadcast, expand, sum, mean, amax (broadcast.cu) */
#undef CUDA_FAMILY_DECL

/* The failure for an op a family file has no kernel for (backend.cu). */
ck_status cuda_no_kernel(const char *family, const ck_op_params *op, ck_error *err);

/* Defines cuda_<fam>_forward/backward from a family file's
 * `static cuda_op_fns pick(const ck_op_params *op)`. */
#define CUDA_FAMILY_ENTRIES(fam, pick)                                                      \
    ck_status cuda_##fam##_forward(ck_cuda *cu, const ck_op_params *op,                    \
                                   const ck_fwd_args *args, ck_op_io *io, ck_error *err)   \
    {                                                                                       \
        const cuda_op_fns f = pick(op);                                                     \
        return f.forward ? f.forward(cu, op, args, io, err) : cuda_no_kernel(#fam, op, err); \
    }                                                                                       \
    ck_status cuda_##fam##_backward(ck_cuda *cu, const ck_op_params *op,                   \
                                    const ck_fwd_args *args, const ck_op_io *io,           \
                                    ck_op_grads *g, ck_error *err)                         \
    {                                                                                       \
        const cuda_op_fns f = pick(op);                                                     \
        return f.backward ? f.backward(cu, op, args, io, g, err)                            \
                          : cuda_no_kernel(#fam, op, err);                                  \
    }

ck_status cuda_loss_forward(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                            const ck_tensor *target, double *loss, ck_error *err);
ck_status cuda_loss_backward(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                             const ck_tensor *target, double scale, ck_tensor *dy,
                             ck_error *err);
/* The fused relu backward (relu_over.cu; backend.h's ck_op_grads.din0_relu_over_input and
 * loss_backward's relu_over): the relu's mask, one bit per element in device scratch, taken
 * before the buffer is overwritten and applied to the gradient computed there. */
ck_status cuda_relu_mask_take(ck_cuda *cu, const ck_tensor *r, ck_dev_buf *bits, ck_error *err);
ck_status cuda_relu_mask_apply(ck_cuda *cu, ck_tensor *din, const ck_dev_buf *bits,
                               ck_error *err);
ck_status cuda_backward_relu_over_input(ck_cuda *cu, cuda_bwd_fn fn, const ck_op_params *op,
                                        const ck_fwd_args *args, const ck_op_io *io,
                                        ck_op_grads *g, ck_error *err);
ck_status cuda_loss_backward_relu_over(ck_cuda *cu, ck_loss_kind kind, const ck_tensor *y,
                                       const ck_tensor *target, double scale, ck_tensor *dy,
                                       ck_error *err);
/* cross-entropy over a class dim with ignore_index (loss.cu) */
ck_status cuda_ce_forward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                          const ck_tensor *target, double *out, ck_error *err);
ck_status cuda_ce_backward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                           const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err);
ck_status cuda_optimizer_step(ck_cuda *cu, const ck_optimizer *opt, int64_t step,
                              double grad_scale, ck_tensor *param, const ck_tensor *grad,
                              ck_tensor *state0, ck_tensor *state1, ck_error *err);

#endif
