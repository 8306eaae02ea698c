/*
 * The CUDA backend: device memory, the vtable, dispatch to one file per op family
 * (cuda_common.cuh), the per-layer algorithm records, and the GPU/driver/library versions
 * the report prints.
 *
 * Memory is stream-ordered: cudaMallocAsync/cudaFreeAsync from the device's default pool
 * on the backend's one stream, with the pool told to keep freed blocks (so the executor's
 * per-layer allocations cost no cudaMalloc after the first step). Every op runs on that
 * stream and the backend synchronises at the end of each op, so an asynchronous CUDA
 * error is reported by the op (and layer) that caused it, not by a later one.
 */
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/op_support.h"
#include "harness/core/calibration.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// checked calls

/* The called function's name: the call's text up to its '(' */
static const char *call_name(const char *call, char *buf, size_t n)
{
    size_t i = 0;
    while (call[i] && call[i] != '(' && i + 1 < n) {
        buf[i] = call[i];
        i++;
    }
    buf[i] = '\0';
    return buf;
}

ck_status ck_gpu_status(cudaError_t rc, const char *file, int line, const char *call,
                        ck_error *err)
{
    if (rc == cudaSuccess)
        return CK_OK;
    (void)cudaGetLastError(); /* clear it, so the next launch check does not see it again */
    char name[64];
    return ck_fail(err, CK_ERR_BACKEND, "%s:%d: %s: %s (%s)", file, line,
                   call_name(call, name, sizeof name), cudaGetErrorName(rc),
                   cudaGetErrorString(rc));
}

ck_status ck_gpu_status(cublasStatus_t rc, const char *file, int line, const char *call,
                        ck_error *err)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return CK_OK;
    char name[64];
    return ck_fail(err, CK_ERR_BACKEND, "%s:%d: %s: %s", file, line,
                   call_name(call, name, sizeof name), cublasGetStatusString(rc));
}

ck_status ck_gpu_status(cudnnStatus_t rc, const char *file, int line, const char *call,
                        ck_error *err)
{
    if (rc == CUDNN_STATUS_SUCCESS)
        return CK_OK;
    char name[64], detail[256];
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof detail);
    for (char *p = detail; *p; p++) /* one line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return ck_fail(err, CK_ERR_BACKEND, "%s:%d: %s: %s%s%s", file, line,
                   call_name(call, name, sizeof name), cudnnGetErrorString(rc),
                   detail[0] ? ": " : "", detail);
}

// ----------------------------------------------------------------------------
// device memory

static void set_deferred(ck_cuda *cu, const char *what, cudaError_t rc)
{
    (void)cudaGetLastError();
    if (!cu->deferred_error[0])
        snprintf(cu->deferred_error, sizeof cu->deferred_error, "%s: %s (%s)", what,
                 cudaGetErrorName(rc), cudaGetErrorString(rc));
}

ck_status cuda_dev_alloc(ck_cuda *cu, size_t bytes, void **ptr, const char *what, ck_error *err)
{
    const size_t n = bytes ? bytes : 1;
    *ptr = NULL;
    cudaError_t rc = cudaMallocAsync(ptr, n, cu->stream);
    if (rc == cudaErrorMemoryAllocation) {
        /* the pool may hold freed blocks of other sizes: give them back and retry once */
        (void)cudaGetLastError();
        CK_CUDA_CHECK(cudaStreamSynchronize(cu->stream));
        CK_CUDA_CHECK(cudaMemPoolTrimTo(cu->pool, 0));
        rc = cudaMallocAsync(ptr, n, cu->stream);
    }
    size_t free_b = 0, total_b = 0;
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
            (void)cudaGetLastError();
    }
    /* a size beyond the device's memory may come back as another error than
     * cudaErrorMemoryAllocation: it is still out of memory */
    if (rc == cudaErrorMemoryAllocation || (rc != cudaSuccess && total_b && n > total_b)) {
        *ptr = NULL;
        return ck_fail(err, CK_ERR_NOMEM,
                       "out of GPU memory: %zu bytes (%.2f GiB) asked%s%s; %zu of %zu bytes "
                       "free on GPU %d", bytes, (double)bytes / 1073741824.0,
                       what ? " for " : "", what ? what : "", free_b, total_b, cu->device);
    }
    if (rc != cudaSuccess) {
        *ptr = NULL;
        return CK_GPU_CALL(rc);
    }
    return CK_OK;
}

void cuda_dev_free(ck_cuda *cu, void *ptr)
{
    if (!ptr)
        return;
    cudaError_t rc = cudaFreeAsync(ptr, cu->stream);
    if (rc != cudaSuccess)
        set_deferred(cu, "cudaFreeAsync", rc);
}

ck_status ck_dev_buf::alloc(ck_cuda *c, size_t n, const char *what, ck_error *err,
                            bool is_workspace)
{
    release();
    cu = c;
    CK_TRY(cuda_dev_alloc(c, n, &p, what, err));
    bytes = n;
    workspace = is_workspace;
    ck_cuda_mem_on_alloc(&c->mem, n, is_workspace);
    return CK_OK;
}

void ck_dev_buf::release()
{
    if (cu && p) {
        cuda_dev_free(cu, p);
        ck_cuda_mem_on_free(&cu->mem, bytes, workspace);
    }
    p = nullptr;
    bytes = 0;
}

// ----------------------------------------------------------------------------
// conversion and the wide path

/* dst = (accumulate ? dst : 0) + src * scale, rounded once (backends/ref/convert.c): an
 * accumulation into fp16/bf16 sums to odd first (round_odd.h), as the CPU's ref_acc does */
static __global__ void convert_kernel(ck_dv dst, ck_dv src, double scale, bool accumulate, int64_t n)
{
    const bool low = dst.dt == CK_F16 || dst.dt == CK_BF16;
    CK_GRID_STRIDE(i, n)
    {
        const double v = ck_ld(src, i) * scale;
        ck_st(dst, i, ck_convert_value(accumulate ? ck_ld(dst, i) : 0.0, v, accumulate, low));
    }
}

/* dst += src with one rounding (ref_wide_accumulate) */
static __global__ void accumulate_wide_kernel(ck_dv dst, ck_dv src, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    ck_acc(dst, i, ck_ld(src, i));
}

ck_status cuda_convert(ck_cuda *cu, ck_tensor *dst, const ck_tensor *src, double scale,
                       bool accumulate, ck_error *err)
{
    if (!ck_dtype_is_float(dst->dtype) || !ck_dtype_is_float(src->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "convert %s -> %s: float dtypes only",
                       ck_dtype_name(src->dtype), ck_dtype_name(dst->dtype));
    if (!ck_shape_equal(&dst->shape, &src->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "convert %s -> %s: shapes differ",
                       ck_cuda_tname(src), ck_cuda_tname(dst));
    const int64_t n = ck_shape_numel(&dst->shape);
    convert_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(dst), ck_view(src), scale,
                                                               accumulate, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

/* An fp64 view of a tensor: the tensor itself when it is fp64, else a device copy
 * (inputs: converted; outputs: scratch, zeroed for gradients). */
struct wide_view {
    ck_tensor t;
    ck_dev_buf buf;
    bool owned = false;
};

static ck_status wide_in(ck_cuda *cu, const ck_tensor *src, wide_view *w, ck_error *err)
{
    if (!src)
        return CK_OK;
    w->t = *src;
    if (src->dtype == CK_F64 || !src->data) /* a hidden tensor (not read) stays hidden */
        return CK_OK;
    const int64_t n = ck_shape_numel(&src->shape);
    CK_TRY(w->buf.alloc(cu, (size_t)n * sizeof(double), "an fp64 copy for mixed dtypes", err));
    w->t.dtype = CK_F64;
    w->t.data = w->buf.p;
    w->owned = true;
    const ck_dv dst = {w->buf.p, CK_F64};
    convert_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(dst, ck_view(src), 1.0, false, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status wide_out(ck_cuda *cu, const ck_tensor *dst, bool zero, wide_view *w,
                          ck_error *err)
{
    if (!dst)
        return CK_OK;
    w->t = *dst;
    if (dst->dtype == CK_F64)
        return CK_OK;
    const int64_t n = ck_shape_numel(&dst->shape);
    CK_TRY(w->buf.alloc(cu, (size_t)n * sizeof(double), "fp64 scratch for mixed dtypes", err));
    w->t.dtype = CK_F64;
    w->t.data = w->buf.p;
    w->owned = true;
    if (zero)
        CK_CUDA_CHECK(cudaMemsetAsync(w->buf.p, 0, (size_t)n * sizeof(double), cu->stream));
    return CK_OK;
}

/* forward output: dst = w rounded once; gradient: dst += w with one rounding */
static ck_status wide_finish(ck_cuda *cu, ck_tensor *dst, const wide_view *w, bool gradient,
                             ck_error *err)
{
    if (!dst || !w->owned)
        return CK_OK;
    const int64_t n = ck_shape_numel(&dst->shape);
    const ck_dv src = {w->t.data, CK_F64};
    if (gradient)
        accumulate_wide_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(dst), src, n);
    else
        convert_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(dst), src, 1.0, false,
                                                                   n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

ck_status cuda_forward_wide(ck_cuda *cu, cuda_fwd_fn fn, const ck_op_params *op,
                            const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    wide_view in[CK_MAX_INPUTS], w, b, out;
    ck_op_io wio = *io;
    for (int k = 0; k < io->n_in && k < CK_MAX_INPUTS; k++) {
        CK_TRY(wide_in(cu, io->in[k], &in[k], err));
        wio.in[k] = io->in[k] ? &in[k].t : NULL;
    }
    CK_TRY(wide_in(cu, io->weight, &w, err));
    CK_TRY(wide_in(cu, io->bias, &b, err));
    CK_TRY(wide_out(cu, io->out, false, &out, err));
    wio.weight = io->weight ? &w.t : NULL;
    wio.bias = io->bias ? &b.t : NULL;
    wio.out = &out.t;
    CK_TRY(fn(cu, op, args, &wio, err));
    return wide_finish(cu, io->out, &out, false, err);
}

ck_status cuda_backward_wide(ck_cuda *cu, cuda_bwd_fn fn, const ck_op_params *op,
                             const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                             ck_error *err)
{
    wide_view in[CK_MAX_INPUTS], din[CK_MAX_INPUTS], w, b, out, dout, dw, db;
    ck_op_io wio = *io;
    ck_op_grads wg = *g;
    for (int k = 0; k < io->n_in && k < CK_MAX_INPUTS; k++) {
        CK_TRY(wide_in(cu, io->in[k], &in[k], err));
        wio.in[k] = io->in[k] ? &in[k].t : NULL;
        CK_TRY(wide_out(cu, g->din[k], true, &din[k], err));
        wg.din[k] = g->din[k] ? &din[k].t : NULL;
    }
    CK_TRY(wide_in(cu, io->weight, &w, err));
    CK_TRY(wide_in(cu, io->bias, &b, err));
    CK_TRY(wide_in(cu, io->out, &out, err));
    CK_TRY(wide_in(cu, g->dout, &dout, err));
    CK_TRY(wide_out(cu, g->dweight, true, &dw, err));
    CK_TRY(wide_out(cu, g->dbias, true, &db, err));
    wio.weight = io->weight ? &w.t : NULL;
    wio.bias = io->bias ? &b.t : NULL;
    wio.out = io->out ? &out.t : NULL;
    wg.dout = g->dout ? &dout.t : NULL;
    wg.dweight = g->dweight ? &dw.t : NULL;
    wg.dbias = g->dbias ? &db.t : NULL;
    CK_TRY(fn(cu, op, args, &wio, &wg, err));
    for (int k = 0; k < io->n_in && k < CK_MAX_INPUTS; k++)
        CK_TRY(wide_finish(cu, g->din[k], &din[k], true, err));
    CK_TRY(wide_finish(cu, g->dweight, &dw, true, err));
    return wide_finish(cu, g->dbias, &db, true, err);
}

// ----------------------------------------------------------------------------
// the vtable: memory

static ck_cuda *impl(ck_backend *b) { return static_cast<ck_cuda *>(b->impl); }

static ck_status enter(ck_cuda *cu, ck_error *err)
{
    CK_CUDA_CHECK(cudaSetDevice(cu->device));
    if (cu->deferred_error[0]) {
        ck_status st = ck_fail(err, CK_ERR_BACKEND, "an earlier CUDA call failed: %s",
                               cu->deferred_error);
        cu->deferred_error[0] = '\0';
        return st;
    }
    return CK_OK;
}

/* Waits for the op's work and reports an asynchronous failure as the op's. */
static ck_status finish(ck_cuda *cu, ck_status st, ck_error *err)
{
    cudaError_t rc = cudaStreamSynchronize(cu->stream);
    if (st != CK_OK) {
        (void)cudaGetLastError();
        return st;
    }
    if (rc != cudaSuccess)
        return CK_GPU_CALL(rc);
    if (cu->deferred_error[0]) {
        st = ck_fail(err, CK_ERR_BACKEND, "%s", cu->deferred_error);
        cu->deferred_error[0] = '\0';
    }
    return st;
}

static ck_status cuda_alloc(ck_backend *b, size_t bytes, void **ptr, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    return cuda_dev_alloc(cu, bytes, ptr, NULL, err);
}

static void cuda_free(ck_backend *b, void *ptr)
{
    ck_cuda *cu = impl(b);
    if (cudaSetDevice(cu->device) != cudaSuccess)
        set_deferred(cu, "cudaSetDevice", cudaGetLastError());
    cuda_dev_free(cu, ptr);
}

static ck_status cuda_upload(ck_backend *b, ck_tensor *dst, const void *host, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    const size_t bytes = ck_tensor_bytes(dst);
    if (bytes == 0)
        return CK_OK;
    CK_CUDA_CHECK(cudaMemcpyAsync(dst->data, host, bytes, cudaMemcpyHostToDevice, cu->stream));
    return finish(cu, CK_OK, err);
}

static ck_status cuda_download(ck_backend *b, const ck_tensor *src, void *host, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    const size_t bytes = ck_tensor_bytes(src);
    if (bytes == 0)
        return CK_OK;
    CK_CUDA_CHECK(cudaMemcpyAsync(host, src->data, bytes, cudaMemcpyDeviceToHost, cu->stream));
    return finish(cu, CK_OK, err);
}

static ck_status cuda_zero(ck_backend *b, ck_tensor *t, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    const size_t bytes = ck_tensor_bytes(t);
    if (bytes == 0)
        return CK_OK;
    CK_CUDA_CHECK(cudaMemsetAsync(t->data, 0, bytes, cu->stream));
    return CK_OK; /* stream-ordered: the next op sees zeros */
}

static ck_status cuda_copy(ck_backend *b, ck_tensor *dst, const ck_tensor *src, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    if (dst->dtype != src->dtype || !ck_shape_equal(&dst->shape, &src->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "copy between tensors of different dtype or shape");
    const size_t bytes = ck_tensor_bytes(src);
    if (bytes == 0 || dst->data == src->data)
        return CK_OK;
    CK_CUDA_CHECK(cudaMemcpyAsync(dst->data, src->data, bytes, cudaMemcpyDeviceToDevice,
                                  cu->stream));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the vtable: ops

static bool cuda_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    (void)b;
    return ck_cuda_supports_op(op, dtype);
}

/* every op family's entry points (cuda_common.cuh); a family's file picks the kernel */
static cuda_op_fns cuda_family(ck_op_family f)
{
    switch (f) {
    case CK_FAMILY_LINEAR: return cuda_op_fns{cuda_linear_forward, cuda_linear_backward};
    case CK_FAMILY_CONV: return cuda_op_fns{cuda_conv_forward, cuda_conv_backward};
    case CK_FAMILY_POOL: return cuda_op_fns{cuda_pool_forward, cuda_pool_backward};
    case CK_FAMILY_UPSAMPLE: return cuda_op_fns{cuda_upsample_forward, cuda_upsample_backward};
    case CK_FAMILY_POINTWISE: return cuda_op_fns{cuda_pointwise_forward, cuda_pointwise_backward};
    case CK_FAMILY_NORM: return cuda_op_fns{cuda_norm_forward, cuda_norm_backward};
    case CK_FAMILY_RANDOM: return cuda_op_fns{cuda_random_forward, cuda_random_backward};
    case CK_FAMILY_ATTENTION: return cuda_op_fns{cuda_attention_forward, cuda_attention_backward};
    case CK_FAMILY_SHAPE: return cuda_op_fns{cuda_shape_forward, cuda_shape_backward};
    case CK_FAMILY_BROADCAST: return cuda_op_fns{cuda_broadcast_forward, cuda_broadcast_backward};
    case CK_FAMILY_COUNT: break;
    }
    return cuda_op_fns{NULL, NULL};
}

ck_status cuda_no_kernel(const char *family, const ck_op_params *op, ck_error *err)
{
    return ck_fail(err, CK_ERR_INTERNAL, "cuda backend: the %s family has no kernel for op %s",
                   family, ck_op_kind_name(op->kind));
}

static ck_status unsupported(const ck_op_params *op, ck_dtype dt, ck_error *err)
{
    return ck_fail(err, CK_ERR_UNSUPPORTED, "cuda backend: no kernel for op %s in %s "
                   "(fp32, fp64, fp16 and bf16 have kernels)", ck_op_kind_name(op->kind),
                   ck_dtype_name(dt));
}

static ck_status cuda_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                              ck_op_io *io, ck_error *err)
{
    ck_cuda *cu = impl(b);
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "cuda forward of %s: no output tensor",
                       ck_op_kind_name(op->kind));
    if (!cuda_supports(b, op, io->out->dtype))
        return unsupported(op, io->out->dtype, err);
    CK_TRY(enter(cu, err));
    return finish(cu, cuda_family(ck_op_family_of(op->kind)).forward(cu, op, args, io, err), err);
}

static ck_status cuda_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    ck_cuda *cu = impl(b);
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "cuda backward of %s: no output tensor",
                       ck_op_kind_name(op->kind));
    if (!cuda_supports(b, op, io->out->dtype))
        return unsupported(op, io->out->dtype, err);
    CK_TRY(enter(cu, err));
    const cuda_bwd_fn fn = cuda_family(ck_op_family_of(op->kind)).backward;
    if (g->din0_relu_over_input) /* a fused relu (relu_over.cu) */
        return finish(cu, cuda_backward_relu_over_input(cu, fn, op, args, io, g, err), err);
    return finish(cu, fn(cu, op, args, io, g, err), err);
}

static ck_status cuda_loss_fwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                               const ck_tensor *target, double *loss, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    return finish(cu, cuda_loss_forward(cu, kind, y, target, loss, err), err);
}

static ck_status cuda_loss_bwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                               const ck_tensor *target, double scale, ck_tensor *dy,
                               bool relu_over, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    if (relu_over)
        return finish(cu, cuda_loss_backward_relu_over(cu, kind, y, target, scale, dy, err),
                      err);
    return finish(cu, cuda_loss_backward(cu, kind, y, target, scale, dy, err), err);
}

static ck_status cuda_optim(ck_backend *b, const ck_optimizer *opt, int64_t step,
                            double grad_scale, ck_tensor *param, const ck_tensor *grad,
                            ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    return finish(cu, cuda_optimizer_step(cu, opt, step, grad_scale, param, grad, state0,
                                          state1, err),
                  err);
}

/* every loss and optimizer in the dtypes the kernels compute in */
static bool cuda_supports_loss(ck_backend *b, const ck_loss_spec *loss, ck_dtype dtype)
{
    (void)b;
    return (unsigned)loss->kind < CK_LOSS_KIND_COUNT && ck_cuda_float_dtype(dtype);
}

static bool cuda_supports_optimizer(ck_backend *b, const ck_optimizer *opt, ck_dtype dtype)
{
    (void)b;
    return (unsigned)opt->kind < CK_OPT_KIND_COUNT && ck_cuda_float_dtype(dtype);
}

static ck_status cuda_conv_dtype(ck_backend *b, ck_tensor *dst, const ck_tensor *src,
                                 double scale, bool accumulate, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    return finish(cu, cuda_convert(cu, dst, src, scale, accumulate, err), err);
}

/* The calibration rounding in place on the device (harness/core/calibration.h): the
 * executor's calibration runs move no activation through the host. */
static __global__ void calibration_round_kernel(float *v, int bits, double rel, ck_rng_stream s,
                                                int64_t n)
{
    CK_GRID_STRIDE(i, n)
    v[i] = ck_calibration_round(v[i], bits, rel, &s, (uint64_t)i);
}

static ck_status cuda_calibration_round(ck_backend *b, ck_tensor *t, int bits, double rel,
                                        const ck_rng_stream *rng, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    if (t->dtype != CK_F32)
        return ck_fail(err, CK_ERR_INTERNAL, "calibration rounding of %s: fp32 tensors only",
                       ck_cuda_tname(t));
    const int64_t n = ck_shape_numel(&t->shape);
    if (n > 0)
        calibration_round_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
            static_cast<float *>(t->data), bits, rel, *rng, n);
    CK_LAUNCH_CHECK();
    return finish(cu, CK_OK, err);
}

// ----------------------------------------------------------------------------
// algorithm records

ck_status cuda_record_algo(ck_cuda *cu, const ck_tensor *weight, const char *op,
                           ck_cuda_pass pass, ck_dtype dtype, const char *engine, int algo,
                           bool deterministic, const char *math, size_t workspace,
                           float time_ms, const char *chosen_by, ck_error *err)
{
    /* the layer's name: the weight's name up to its last '.' ("enc1.weight" -> "enc1") */
    char layer[64];
    ck_cuda_layer_name(weight ? weight->name : NULL, layer, sizeof layer);

    ck_cuda_algo_record *r = NULL;
    for (int i = 0; i < cu->n_records && !r; i++)
        if (cu->records[i].pass == pass && strcmp(cu->records[i].layer, layer) == 0 &&
            cu->records[i].dtype == dtype)
            r = &cu->records[i];
    if (!r) {
        if (cu->n_records == cu->cap_records) {
            int cap = cu->cap_records ? 2 * cu->cap_records : 32;
            void *p = realloc(cu->records, (size_t)cap * sizeof *cu->records);
            if (!p)
                return ck_fail(err, CK_ERR_NOMEM, "out of memory recording algorithms");
            cu->records = static_cast<ck_cuda_algo_record *>(p);
            cu->cap_records = cap;
        }
        r = &cu->records[cu->n_records++];
        memset(r, 0, sizeof *r);
        snprintf(r->layer, sizeof r->layer, "%s", layer);
        r->pass = pass;
        r->dtype = dtype;
        r->algo = algo;
        snprintf(r->engine, sizeof r->engine, "%s", engine);
    }
    if (r->calls > 0 && (r->algo != algo || strcmp(r->engine, engine) != 0))
        r->changed = true;
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->engine, sizeof r->engine, "%s", engine);
    snprintf(r->math, sizeof r->math, "%s", math);
    snprintf(r->chosen_by, sizeof r->chosen_by, "%s", chosen_by);
    r->algo = algo;
    r->deterministic = deterministic;
    r->workspace_bytes = workspace;
    r->time_ms = time_ms;
    r->calls++;
    return CK_OK;
}

// ----------------------------------------------------------------------------
// info, destroy

static void cuda_info(ck_backend *b, ck_backend_info *out)
{
    *out = impl(b)->info;
}

static void cuda_destroy(ck_backend *b)
{
    if (!b)
        return;
    ck_cuda *cu = impl(b);
    if (cu) {
        if (cudaSetDevice(cu->device) == cudaSuccess) {
            if (cu->stream)
                (void)cudaStreamSynchronize(cu->stream);
            cuda_conv_release(cu);
            cuda_linear_release(cu);
            if (cu->stream)
                (void)cudaStreamDestroy(cu->stream);
            if (cu->pool)
                (void)cudaMemPoolTrimTo(cu->pool, 0);
        }
        (void)cudaGetLastError();
        free(cu->records);
        free(cu);
    }
    free(b);
}

// ----------------------------------------------------------------------------
// creation

/* The NVIDIA driver's version ("580.95.05") from NVML when libnvidia-ml is there. */
static void nvidia_driver_version(char *buf, size_t n)
{
    buf[0] = '\0';
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    typedef int (*init_fn)(void);
    typedef int (*version_fn)(char *, unsigned);
    init_fn init = reinterpret_cast<init_fn>(dlsym(h, "nvmlInit_v2"));
    init_fn shutdown = reinterpret_cast<init_fn>(dlsym(h, "nvmlShutdown"));
    version_fn version = reinterpret_cast<version_fn>(dlsym(h, "nvmlSystemGetDriverVersion"));
    if (init && shutdown && version && init() == 0) {
        char v[96];
        if (version(v, sizeof v) == 0)
            snprintf(buf, n, "%s", v);
        shutdown();
    }
    dlclose(h);
}

static void fill_info(ck_cuda *cu, const cudaDeviceProp *prop)
{
    ck_backend_info *in = &cu->info;
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "cuda");
    snprintf(in->device, sizeof in->device, "%.64s (GPU %d, compute capability %d.%d, %d SMs, "
             "%.1f GiB)", prop->name, cu->device, prop->major, prop->minor,
             prop->multiProcessorCount, (double)prop->totalGlobalMem / 1073741824.0);

    char driver[96];
    nvidia_driver_version(driver, sizeof driver);
    int drv_api = 0, rt = 0;
    if (cudaDriverGetVersion(&drv_api) != cudaSuccess || cudaRuntimeGetVersion(&rt) != cudaSuccess)
        (void)cudaGetLastError();
    size_t dnn = cudnnGetVersion();
    int bl_major = 0, bl_minor = 0, bl_patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &bl_major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &bl_minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &bl_patch) != CUBLAS_STATUS_SUCCESS)
        bl_major = bl_minor = bl_patch = 0;
    snprintf(in->versions, sizeof in->versions,
             "driver %s (CUDA %d.%d), runtime %d.%d, cuDNN %zu.%zu.%zu (built with %d.%d.%d), "
             "cuBLAS %d.%d.%d; fp32 without TF32 (cuDNN FMA math, cuBLAS pedantic); "
             "conv algorithms: %s",
             driver[0] ? driver : "version unknown", drv_api / 1000, (drv_api % 1000) / 10,
             rt / 1000, (rt % 1000) / 10, dnn / 10000, (dnn % 10000) / 100, dnn % 100,
             CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, bl_major, bl_minor, bl_patch,
             ck_cuda_algo_policy_name(cu->policy));
}

static __global__ void ck_probe_kernel(int *p)
{
    if (p)
        *p = 1;
}

extern "C" bool ck_cuda_available(char *why, size_t n)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        if (why && n)
            snprintf(why, n, "no usable CUDA driver or GPU: cudaGetDeviceCount: %s (%s)",
                     cudaGetErrorName(rc), cudaGetErrorString(rc));
        return false;
    }
    if (count <= 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (why && n)
            snprintf(why, n, "no CUDA device is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
                     vis ? vis : "", vis ? ")" : "");
        return false;
    }
    if (why && n)
        snprintf(why, n, "%d CUDA device%s visible", count, count == 1 ? "" : "s");
    return true;
}

extern "C" ck_status ck_cuda_ce_forward(ck_backend *b, const ck_loss_spec *loss,
                                        const ck_tensor *y, const ck_tensor *target,
                                        double *out, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    return finish(cu, cuda_ce_forward(cu, loss, y, target, out, err), err);
}

extern "C" ck_status ck_cuda_ce_backward(ck_backend *b, const ck_loss_spec *loss,
                                         const ck_tensor *y, const ck_tensor *target,
                                         double scale, ck_tensor *dy, ck_error *err)
{
    ck_cuda *cu = impl(b);
    CK_TRY(enter(cu, err));
    return finish(cu, cuda_ce_backward(cu, loss, y, target, scale, dy, err), err);
}

extern "C" bool ck_backend_is_cuda(const ck_backend *b)
{
    return b && b->destroy == cuda_destroy;
}

extern "C" int ck_cuda_algo_records(const ck_backend *b, const ck_cuda_algo_record **out)
{
    if (!ck_backend_is_cuda(b)) {
        *out = NULL;
        return 0;
    }
    const ck_cuda *cu = static_cast<const ck_cuda *>(b->impl);
    *out = cu->records;
    return cu->n_records;
}

extern "C" void ck_cuda_algo_records_clear(ck_backend *b)
{
    if (ck_backend_is_cuda(b))
        impl(b)->n_records = 0;
}

extern "C" bool ck_cuda_device_memory(ck_backend *b, ck_device_memory *out, bool reset)
{
    if (!ck_backend_is_cuda(b))
        return false;
    ck_cuda *cu = impl(b);
    out->workspace_peak_bytes = cu->mem.workspace_peak;
    out->scratch_peak_bytes = cu->mem.scratch_peak;
    out->pool_peak_bytes = -1;
    unsigned long long high = 0;
    if (cudaSetDevice(cu->device) == cudaSuccess &&
        cudaMemPoolGetAttribute(cu->pool, cudaMemPoolAttrUsedMemHigh, &high) == cudaSuccess)
        out->pool_peak_bytes = (int64_t)high;
    if (reset) {
        unsigned long long zero = 0; /* the only value the high-water mark can be set to */
        if (cudaMemPoolSetAttribute(cu->pool, cudaMemPoolAttrUsedMemHigh, &zero) != cudaSuccess)
            out->pool_peak_bytes = -1;
        ck_cuda_mem_reset_peaks(&cu->mem);
    }
    (void)cudaGetLastError();
    return true;
}

extern "C" ck_status ck_backend_cuda_create(ck_backend **out, int device,
                                            ck_cuda_algo_policy policy, ck_error *err)
{
    *out = NULL;
    if ((unsigned)policy >= CK_CUDA_ALGO_POLICY_COUNT)
        return ck_fail(err, CK_ERR_INPUT, "cuda backend: algorithm policy %d is neither "
                       "deterministic nor fastest", (int)policy);
    if (device < 0)
        return ck_fail(err, CK_ERR_INPUT, "--device %d: CUDA devices are numbered from 0",
                       device);
    char why[256];
    if (!ck_cuda_available(why, sizeof why))
        return ck_fail(err, CK_ERR_BACKEND, "--backend cuda: %s", why);
    int count = 0;
    CK_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device >= count)
        return ck_fail(err, CK_ERR_INPUT, "--device %d: only %d CUDA device%s visible (0 to %d)",
                       device, count, count == 1 ? " is" : "s are", count - 1);

    ck_backend *b = static_cast<ck_backend *>(calloc(1, sizeof *b));
    ck_cuda *cu = static_cast<ck_cuda *>(calloc(1, sizeof *cu));
    ck_status st = CK_OK;
    cudaDeviceProp prop;
    cudaFuncAttributes fa;
    int pools = 0;
    uint64_t keep = UINT64_MAX; /* keep freed blocks in the pool */
    if (!b || !cu) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory creating the cuda backend");
        goto fail;
    }
    b->impl = cu;
    b->destroy = cuda_destroy;
    cu->device = device;
    cu->policy = policy;
    if ((st = CK_GPU_CALL(cudaSetDevice(device))) != CK_OK ||
        (st = CK_GPU_CALL(cudaGetDeviceProperties(&prop, device))) != CK_OK)
        goto fail;
    if (cudaFuncGetAttributes(&fa, ck_probe_kernel) != cudaSuccess) {
        cudaError_t rc = cudaGetLastError();
        st = ck_fail(err, CK_ERR_BACKEND, "GPU %d (%s, compute capability %d.%d) cannot run "
                     "this build's kernels: %s (%s); rebuild with CUDA_ARCH set for it",
                     device, prop.name, prop.major, prop.minor, cudaGetErrorName(rc),
                     cudaGetErrorString(rc));
        goto fail;
    }
    if ((st = CK_GPU_CALL(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                                                 device))) != CK_OK)
        goto fail;
    if (!pools) {
        st = ck_fail(err, CK_ERR_BACKEND, "GPU %d (%s) does not support stream-ordered memory "
                     "pools (cudaMallocAsync), which the cuda backend needs", device, prop.name);
        goto fail;
    }
    if ((st = CK_GPU_CALL(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking))) !=
            CK_OK ||
        (st = CK_GPU_CALL(cudaDeviceGetDefaultMemPool(&cu->pool, device))) != CK_OK ||
        (st = CK_GPU_CALL(cudaMemPoolSetAttribute(cu->pool, cudaMemPoolAttrReleaseThreshold,
                                                  &keep))) != CK_OK)
        goto fail;
    if ((st = ck_cuda_workspace_cap(prop.totalGlobalMem, getenv("CK_CUDA_WORKSPACE_MIB"),
                                    &cu->workspace_cap, err)) != CK_OK)
        goto fail;
    fill_info(cu, &prop);

    b->name = "cuda";
    b->alloc = cuda_alloc;
    b->free = cuda_free;
    b->upload = cuda_upload;
    b->download = cuda_download;
    b->zero = cuda_zero;
    b->copy = cuda_copy;
    b->supports = cuda_supports;
    b->forward = cuda_forward;
    b->backward = cuda_backward;
    b->loss_forward = cuda_loss_fwd;
    b->loss_backward = cuda_loss_bwd;
    b->ce_forward = ck_cuda_ce_forward;
    b->ce_backward = ck_cuda_ce_backward;
    b->supports_loss = cuda_supports_loss;
    b->optimizer_step = cuda_optim;
    b->supports_optimizer = cuda_supports_optimizer;
    b->convert = cuda_conv_dtype;
    b->calibration_round = cuda_calibration_round;
    b->info = cuda_info;
    *out = b;
    return CK_OK;
fail:
    if (b && cu)
        cuda_destroy(b);
    else {
        free(cu);
        free(b);
    }
    return st;
}
