/*
 * The fast CPU backend: host memory, a thread pool, and the fast kernels for linear, conv
 * and relu (linear.c, conv.c, pointwise.c on gemm.c and conv_kernels.c), fp32 max pooling,
 * concat and nearest upsampling (pool.c, shape.c, upsample.c), fp32 attention without
 * dropout (attention.c), fp32 layernorm (norm.c) and the fp32 optimizer step (optim.c).
 * Every other op, the losses and dtype conversion are the reference backend's own entry
 * points (backends/ref/ref_ops.h), called directly (split into slices across threads where
 * an op never mixes them: delegate.c), so they keep the reference bits. Determinism rules and what may differ between machines: docs/cpu-backend.md.
 */
#include "backends/cpu/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "backends/cpu/cpu_common.h"
#include "backends/host_memory.h"
#include "backends/ref/ref_ops.h"

typedef struct {
    ck_backend be;
    cpu_ctx ctx;
} cpu_backend;

static const cpu_ctx *ctx_of(ck_backend *b)
{
    return &((cpu_backend *)b->impl)->ctx;
}

/* every op the reference supports: the fast kernels cover a subset of its ops, and the
 * rest run on its entry points */
static bool cpu_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    (void)b;
    return ck_opc_is_float(dtype) && ref_op_supports(op, dtype);
}

typedef ck_status (*fast_fwd_fn)(const cpu_ctx *, const ck_op_params *, const ck_fwd_args *,
                                 ck_op_io *, ck_error *);
typedef ck_status (*fast_bwd_fn)(const cpu_ctx *, const ck_op_params *, const ck_fwd_args *,
                                 const ck_op_io *, ck_op_grads *, ck_error *);

/* the fast kernels; every op kind not listed runs on the reference backend */
static const struct {
    fast_fwd_fn fwd;
    fast_bwd_fn bwd;
} fast_ops[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = {cpu_linear_forward, cpu_linear_backward},
    [CK_OP_CONV] = {cpu_conv_forward, cpu_conv_backward},
    /* relu in fp32 here; the other activations go on to the reference */
    [CK_OP_RELU] = {cpu_pointwise_forward, cpu_pointwise_backward},
    /* add of same-shape fp32 tensors; broadcasting and other dtypes go on to the reference */
    [CK_OP_ADD] = {cpu_pointwise_forward, cpu_pointwise_backward},
    /* fp32 max pooling, concat, nearest upsampling; other cases go on to the reference */
    [CK_OP_MAXPOOL] = {cpu_pool_forward, cpu_pool_backward},
    [CK_OP_CONCAT] = {cpu_shape_forward, cpu_shape_backward},
    [CK_OP_UPSAMPLE] = {cpu_upsample_forward, cpu_upsample_backward},
    /* attention in fp32 without dropout, the reference's double arithmetic by head */
    [CK_OP_ATTENTION] = {cpu_attention_forward, cpu_attention_backward},
    /* layernorm in fp32, the reference's double arithmetic by rows and columns */
    [CK_OP_LAYERNORM] = {cpu_norm_forward, cpu_norm_backward},
    /* gelu's tanh form in fp32, vectorised (not the reference's bits: gelu.c) */
    [CK_OP_GELU] = {cpu_gelu_forward, cpu_gelu_backward},
};

static ck_status cpu_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    if (!cpu_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    const cpu_ctx *c = ctx_of(b);
    if (fast_ops[op->kind].fwd)
        return fast_ops[op->kind].fwd(c, op, args, io, err);
    return cpu_delegate_forward(c, op, args, io, err);
}

static ck_status cpu_backward_entry(const void *ctx, const ck_op_params *op,
                                    const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                    ck_error *err)
{
    const cpu_ctx *c = ctx;
    if (fast_ops[op->kind].bwd)
        return fast_ops[op->kind].bwd(c, op, args, io, g, err);
    return cpu_delegate_backward(c, op, args, io, g, err);
}

static ck_status cpu_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    if (!cpu_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    if (g->din0_relu_over_input) /* a fused relu: the mask around every dx path */
        return cpu_backward_relu_over_input(ctx_of(b), cpu_backward_entry, op, args, io, g,
                                            err);
    return cpu_backward_entry(ctx_of(b), op, args, io, g, err);
}

static ck_status cpu_conv_dtype(ck_backend *b, ck_tensor *dst, const ck_tensor *src,
                                double scale, bool accumulate, ck_error *err)
{
    return cpu_convert(ctx_of(b), dst, src, scale, accumulate, err);
}

static ck_status cpu_round_for_calibration(ck_backend *b, ck_tensor *t, int bits, double rel,
                                           const ck_rng_stream *rng, ck_error *err)
{
    return cpu_calibration_round(ctx_of(b), t, bits, rel, rng, err);
}

static ck_status cpu_optim(ck_backend *b, const ck_optimizer *opt, int64_t step,
                           double grad_scale, ck_tensor *param, const ck_tensor *grad,
                           ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    return cpu_optimizer_step(ctx_of(b), opt, step, grad_scale, param, grad, state0, state1,
                              err);
}

static void cpu_info(ck_backend *b, ck_backend_info *out)
{
    const cpu_ctx *c = ctx_of(b);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "cpu");
    struct utsname u;
    snprintf(out->device, sizeof out->device, "%s host, %d thread%s, %s",
             uname(&u) == 0 ? u.machine : "unknown", c->threads, c->threads == 1 ? "" : "s",
             cpk_isa_name(c->isa));
    out->threads = c->threads;
    snprintf(out->isa, sizeof out->isa, "%s", cpk_isa_name(c->isa));
#if defined(__clang__)
    snprintf(out->versions, sizeof out->versions, "clang %s", __clang_version__);
#elif defined(__GNUC__)
    snprintf(out->versions, sizeof out->versions, "gcc %d.%d.%d", __GNUC__, __GNUC_MINOR__,
             __GNUC_PATCHLEVEL__);
#endif
}

static ck_status cpu_count_nonfinite(ck_backend *b, const ck_tensor *t, int64_t *nan,
                                     int64_t *inf, int64_t *first, bool *first_nan,
                                     ck_error *err)
{
    const cpu_ctx *c = ctx_of(b);
    if (!cpu_count_nonfinite_with(c->pool, c->isa, t->dtype, ck_shape_numel(&t->shape),
                                  t->data, nan, inf, first, first_nan))
        return ck_fail(err, CK_ERR_NOMEM, "out of memory checking %s for NaN/Inf", t->name);
    return CK_OK;
}

typedef struct {
    ck_host_task_fn fn;
    void *ctx;
} host_job;

static void host_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const host_job *j = vctx;
    j->fn(j->ctx, task);
}

static void cpu_host_parallel(ck_backend *b, int64_t ntasks, ck_host_task_fn fn, void *ctx)
{
    host_job j = {fn, ctx};
    cpk_parallel(ctx_of(b)->pool, ntasks, host_task, &j);
}

/* capability "params_fresh": the linear's backward writes fresh parameter gradients */
static bool cpu_params_fresh(ck_backend *b, ck_op_kind kind)
{
    (void)b;
    return kind == CK_OP_LINEAR;
}

static void *cpu_get_proc(ck_backend *b, const char *name)
{
    (void)b;
    union {
        void *p;
        ck_count_nonfinite_fn count;
        ck_host_parallel_fn parallel;
        ck_params_fresh_fn params_fresh;
    } u = {NULL};
    if (strcmp(name, CK_PROC_COUNT_NONFINITE) == 0)
        u.count = cpu_count_nonfinite;
    else if (strcmp(name, CK_PROC_HOST_PARALLEL) == 0)
        u.parallel = cpu_host_parallel;
    else if (strcmp(name, CK_PROC_PARAMS_FRESH) == 0)
        u.params_fresh = cpu_params_fresh;
    return u.p;
}

static ck_status cpu_alloc(ck_backend *b, size_t bytes, void **ptr, ck_error *err)
{
    return cpu_mem_alloc(ctx_of(b)->blocks, bytes, ptr, err);
}

static void cpu_free(ck_backend *b, void *ptr)
{
    cpu_mem_free(ctx_of(b)->blocks, ptr);
}

static ck_status cpu_zero(ck_backend *b, ck_tensor *t, ck_error *err)
{
    (void)err;
    cpu_mem_zero(ctx_of(b)->pool, t->data, ck_tensor_bytes(t));
    return CK_OK;
}

/* host copies in and out (records of every gradient and parameter each step), split
 * across the threads */
static ck_status cpu_upload(ck_backend *b, ck_tensor *dst, const void *host, ck_error *err)
{
    (void)err;
    cpu_mem_copy(ctx_of(b)->pool, dst->data, host, ck_tensor_bytes(dst));
    return CK_OK;
}

static ck_status cpu_download(ck_backend *b, const ck_tensor *src, void *host, ck_error *err)
{
    (void)err;
    cpu_mem_copy(ctx_of(b)->pool, host, src->data, ck_tensor_bytes(src));
    return CK_OK;
}

static void cpu_destroy(ck_backend *b)
{
    if (!b)
        return;
    cpu_backend *cb = b->impl;
    cpk_pool_destroy(cb->ctx.pool);
    cpu_block_cache_destroy(cb->ctx.blocks);
    free(cb);
}

bool ck_backend_cpu_config(const ck_backend *b, int *threads, const char **isa)
{
    if (!b || b->destroy != cpu_destroy)
        return false;
    const cpu_ctx *c = &((const cpu_backend *)b->impl)->ctx;
    if (threads)
        *threads = c->threads;
    if (isa)
        *isa = cpk_isa_name(c->isa);
    return true;
}

ck_status ck_backend_cpu_create_with(ck_backend **out, int threads, const char *isa,
                                     ck_error *err)
{
    *out = NULL;
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 256 ? 256 : (int)n;
    }
    if (threads < 1 || threads > 256)
        return ck_fail(err, CK_ERR_INPUT, "cpu backend: %d threads: use 1 to 256", threads);
    const cpk_isa best = cpk_isa_detect();
    cpk_isa want = best;
    if (isa && strcmp(isa, "auto") != 0) {
        if (strcmp(isa, "portable") == 0)
            want = CPK_ISA_PORTABLE;
        else if (strcmp(isa, "avx2") == 0 || strcmp(isa, "avx2+fma") == 0)
            want = CPK_ISA_AVX2;
        else if (strcmp(isa, "avx512") == 0 || strcmp(isa, "avx512f") == 0)
            want = CPK_ISA_AVX512;
        else
            return ck_fail(err, CK_ERR_INPUT,
                           "cpu backend: unknown ISA '%s' (auto, portable, avx2, avx512)", isa);
        if (want > best)
            return ck_fail(err, CK_ERR_UNSUPPORTED,
                           "cpu backend: this machine does not support %s (best: %s)",
                           cpk_isa_name(want), cpk_isa_name(best));
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the cpu backend");
    cb->ctx.threads = threads;
    cb->ctx.isa = want;
    if (!(cb->ctx.blocks = cpu_block_cache_create())) {
        free(cb);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the cpu backend");
    }
    if (!(cb->ctx.pool = cpk_pool_create(threads))) {
        cpu_block_cache_destroy(cb->ctx.blocks);
        free(cb);
        return ck_fail(err, CK_ERR_NOMEM, "cpu backend: cannot start %d threads", threads);
    }
    ck_backend *b = &cb->be;
    b->name = "cpu";
    b->impl = cb;
    ck_host_memory_install(b);
    b->alloc = cpu_alloc; /* host memory that keeps freed blocks for reuse (memory.c) */
    b->free = cpu_free;
    b->zero = cpu_zero;
    b->upload = cpu_upload;
    b->download = cpu_download;
    b->calibration_round = cpu_round_for_calibration;
    b->supports = cpu_supports;
    b->forward = cpu_forward;
    b->backward = cpu_backward;
    ref_install_training(b); /* losses: the reference's */
    b->convert = cpu_conv_dtype; /* fp32 threaded, the reference's bits (convert.c) */
    b->optimizer_step = cpu_optim; /* fp32 threaded, the reference's bits (optim.c) */
    b->info = cpu_info;
    b->destroy = cpu_destroy;
    b->get_proc = cpu_get_proc;
    *out = b;
    return CK_OK;
}
