/*
 * The CPU reference backend: memory in host RAM, ops dispatched to one file per op family
 * (cpu_ops.h). Single-threaded and fixed-order by design: it is the reference every other
 * backend is judged against, and plain vs checkpointed must be bitwise identical on it.
 * Compute dtypes: fp32, fp64, fp16 and bf16; every op loads each tensor in its own dtype
 * and rounds each output once (cpu_elem.h, harness/precision.md). Memory is typeless:
 * upload, download, zero and copy move ck_tensor_bytes of any dtype.
 */
#include "cpu_elem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

static ck_status cpu_alloc(ck_backend *b, size_t bytes, void **ptr, ck_error *err)
{
    (void)b;
    /* 64-byte alignment for vectorised loops; aligned_alloc needs a multiple of it */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes)
        return ck_fail(err, CK_ERR_NOMEM, "allocation of %zu bytes overflows", bytes);
    *ptr = aligned_alloc(64, rounded ? rounded : 64);
    if (!*ptr)
        return ck_fail(err, CK_ERR_NOMEM, "out of host memory allocating %zu bytes", bytes);
    return CK_OK;
}

static void cpu_free(ck_backend *b, void *ptr)
{
    (void)b;
    free(ptr);
}

static ck_status cpu_upload(ck_backend *b, ck_tensor *dst, const void *host, ck_error *err)
{
    (void)b;
    (void)err;
    memcpy(dst->data, host, ck_tensor_bytes(dst));
    return CK_OK;
}

static ck_status cpu_download(ck_backend *b, const ck_tensor *src, void *host, ck_error *err)
{
    (void)b;
    (void)err;
    memcpy(host, src->data, ck_tensor_bytes(src));
    return CK_OK;
}

static ck_status cpu_zero(ck_backend *b, ck_tensor *t, ck_error *err)
{
    (void)b;
    (void)err;
    memset(t->data, 0, ck_tensor_bytes(t));
    return CK_OK;
}

static ck_status cpu_copy(ck_backend *b, ck_tensor *dst, const ck_tensor *src, ck_error *err)
{
    (void)b;
    if (dst->dtype != src->dtype || !ck_shape_equal(&dst->shape, &src->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "copy between tensors of different dtype or shape");
    memmove(dst->data, src->data, ck_tensor_bytes(src));
    return CK_OK;
}

static bool cpu_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    (void)b;
    return (unsigned)op->kind < CK_OP_KIND_COUNT && cpu_is_float(dtype);
}

typedef ck_status (*cpu_fwd_fn)(const ck_op_params *, const ck_fwd_args *, ck_op_io *, ck_error *);
typedef ck_status (*cpu_bwd_fn)(const ck_op_params *, const ck_fwd_args *, const ck_op_io *,
                                ck_op_grads *, ck_error *);

static const struct {
    cpu_fwd_fn forward;
    cpu_bwd_fn backward;
} cpu_op_table[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = {cpu_linear_forward, cpu_linear_backward},
    [CK_OP_CONV] = {cpu_conv_forward, cpu_conv_backward},
    [CK_OP_RELU] = {cpu_activation_forward, cpu_activation_backward},
    [CK_OP_LEAKY_RELU] = {cpu_activation_forward, cpu_activation_backward},
    [CK_OP_GELU] = {cpu_activation_forward, cpu_activation_backward},
    [CK_OP_TANH] = {cpu_activation_forward, cpu_activation_backward},
    [CK_OP_SIGMOID] = {cpu_activation_forward, cpu_activation_backward},
    [CK_OP_BATCHNORM] = {cpu_batchnorm_forward, cpu_batchnorm_backward},
    [CK_OP_LAYERNORM] = {cpu_layernorm_forward, cpu_layernorm_backward},
    [CK_OP_DROPOUT] = {cpu_dropout_forward, cpu_dropout_backward},
    [CK_OP_GAUSSIAN_NOISE] = {cpu_noise_forward, cpu_noise_backward},
    [CK_OP_MAXPOOL] = {cpu_pool_forward, cpu_pool_backward},
    [CK_OP_AVGPOOL] = {cpu_pool_forward, cpu_pool_backward},
    [CK_OP_UPSAMPLE] = {cpu_upsample_forward, cpu_upsample_backward},
    [CK_OP_ADD] = {cpu_add_forward, cpu_add_backward},
    [CK_OP_CONCAT] = {cpu_concat_forward, cpu_concat_backward},
    [CK_OP_FLATTEN] = {cpu_flatten_forward, cpu_flatten_backward},
};

static ck_status cpu_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    if (!cpu_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    return cpu_op_table[op->kind].forward(op, args, io, err);
}

static ck_status cpu_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    if (!cpu_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    return cpu_op_table[op->kind].backward(op, args, io, g, err);
}

static ck_status cpu_loss_fwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double *loss, ck_error *err)
{
    (void)b;
    return cpu_loss_forward(kind, y, target, loss, err);
}

static ck_status cpu_loss_bwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err)
{
    (void)b;
    return cpu_loss_backward(kind, y, target, scale, dy, err);
}

static ck_status cpu_conv_dtype(ck_backend *b, ck_tensor *dst, const ck_tensor *src,
                                double scale, bool accumulate, ck_error *err)
{
    (void)b;
    return cpu_convert(dst, src, scale, accumulate, err);
}

static ck_status cpu_optim(ck_backend *b, const ck_optimizer *opt, int64_t step,
                           double grad_scale, ck_tensor *param, const ck_tensor *grad,
                           ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    (void)b;
    return cpu_optimizer_step(opt, step, grad_scale, param, grad, state0, state1, err);
}

static void cpu_info(ck_backend *b, ck_backend_info *out)
{
    (void)b;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "cpu");
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(out->device, sizeof out->device, "%s host, single-threaded reference", u.machine);
    else
        snprintf(out->device, sizeof out->device, "host, single-threaded reference");
#if defined(__clang__)
    snprintf(out->versions, sizeof out->versions, "clang %s", __clang_version__);
#elif defined(__GNUC__)
    snprintf(out->versions, sizeof out->versions, "gcc %d.%d.%d", __GNUC__, __GNUC_MINOR__,
             __GNUC_PATCHLEVEL__);
#endif
}

static void cpu_destroy(ck_backend *b)
{
    free(b);
}

ck_status ck_backend_cpu_create(ck_backend **out, ck_error *err)
{
    ck_backend *b = calloc(1, sizeof *b);
    if (!b)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the cpu backend");
    b->name = "cpu";
    b->alloc = cpu_alloc;
    b->free = cpu_free;
    b->upload = cpu_upload;
    b->download = cpu_download;
    b->zero = cpu_zero;
    b->copy = cpu_copy;
    b->supports = cpu_supports;
    b->forward = cpu_forward;
    b->backward = cpu_backward;
    b->loss_forward = cpu_loss_fwd;
    b->loss_backward = cpu_loss_bwd;
    b->optimizer_step = cpu_optim;
    b->convert = cpu_conv_dtype;
    b->info = cpu_info;
    b->destroy = cpu_destroy;
    *out = b;
    return CK_OK;
}
