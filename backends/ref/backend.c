/*
 * The CPU reference backend: memory in host RAM, ops dispatched by family to one file per
 * op family (ref_ops.h). Single-threaded and fixed-order by design: it is the reference every other
 * backend is judged against, and plain vs checkpointed must be bitwise identical on it.
 * Compute dtypes: fp32, fp64, fp16 and bf16; every op loads each tensor in its own dtype
 * and rounds each output once (ref_elem.h, harness/precision.md). Memory is typeless:
 * upload, download, zero and copy move ck_tensor_bytes of any dtype.
 */
#include "backends/ref/ref_elem.h"
#include "backends/host_memory.h"
#include "backends/check/check.h"
#include "backends/ref/ref_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

bool ref_op_supports(const ck_op_params *op, ck_dtype dtype)
{
    return (unsigned)op->kind < CK_OP_KIND_COUNT && ref_is_float(dtype);
}

static bool ref_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    (void)b;
    return ref_op_supports(op, dtype);
}

/* every op family's entry points (ref_ops.h); a family's file picks the kernel */
static const ref_op_fns ref_families[CK_FAMILY_COUNT] = {
    [CK_FAMILY_LINEAR] = {ref_linear_forward, ref_linear_backward},
    [CK_FAMILY_CONV] = {ref_conv_forward, ref_conv_backward},
    [CK_FAMILY_POOL] = {ref_pool_forward, ref_pool_backward},
    [CK_FAMILY_UPSAMPLE] = {ref_upsample_forward, ref_upsample_backward},
    [CK_FAMILY_POINTWISE] = {ref_pointwise_forward, ref_pointwise_backward},
    [CK_FAMILY_NORM] = {ref_norm_forward, ref_norm_backward},
    [CK_FAMILY_RANDOM] = {ref_random_forward, ref_random_backward},
    [CK_FAMILY_ATTENTION] = {ref_attention_forward, ref_attention_backward},
    [CK_FAMILY_SHAPE] = {ref_shape_forward, ref_shape_backward},
    [CK_FAMILY_BROADCAST] = {ref_broadcast_forward, ref_broadcast_backward},
};

ck_status ref_no_kernel(const char *family, const ck_op_params *op, ck_error *err)
{
    return ck_fail(err, CK_ERR_INTERNAL, "ref backend: the %s family has no kernel for op %s",
                   family, ck_op_kind_name(op->kind));
}

ck_status ref_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                         ck_error *err)
{
    if (!ref_op_supports(op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "ref backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    return ref_families[ck_op_family_of(op->kind)].forward(op, args, io, err);
}

ck_status ref_op_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                          ck_op_grads *g, ck_error *err)
{
    if (!ref_op_supports(op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "ref backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    return ref_families[ck_op_family_of(op->kind)].backward(op, args, io, g, err);
}

static ck_status ref_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    (void)b;
    return ref_op_forward(op, args, io, err);
}

static ck_status ref_backward_entry(const void *ctx, const ck_op_params *op,
                                    const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                    ck_error *err)
{
    (void)ctx;
    return ref_op_backward(op, args, io, g, err);
}

static ck_status ref_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)b;
    if (g->din0_relu_over_input) /* a fused relu (relu_over.c) */
        return ref_backward_relu_over_input(ref_backward_entry, NULL, op, args, io, g, err);
    return ref_op_backward(op, args, io, g, err);
}

static ck_status ref_loss_fwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double *loss, ck_error *err)
{
    (void)b;
    return ref_loss_forward(kind, y, target, loss, err);
}

static ck_status ref_loss_bwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double scale, ck_tensor *dy,
                              bool relu_over, ck_error *err)
{
    (void)b;
    return ref_loss_backward(kind, y, target, scale, dy, relu_over, err);
}

static ck_status ref_ce_fwd(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                            const ck_tensor *target, double *out, ck_error *err)
{
    (void)b;
    return ref_ce_forward(loss, y, target, out, err);
}

static ck_status ref_ce_bwd(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                            const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err)
{
    (void)b;
    return ref_ce_backward(loss, y, target, scale, dy, err);
}

/* every loss in every float dtype (fp64 for gradient checks) */
static bool ref_supports_loss(ck_backend *b, const ck_loss_spec *loss, ck_dtype dtype)
{
    (void)b;
    return (unsigned)loss->kind < CK_LOSS_KIND_COUNT && ref_is_float(dtype);
}

static bool ref_supports_optimizer(ck_backend *b, const ck_optimizer *opt, ck_dtype dtype)
{
    (void)b;
    return (unsigned)opt->kind < CK_OPT_KIND_COUNT && ref_is_float(dtype);
}

static ck_status ref_conv_dtype(ck_backend *b, ck_tensor *dst, const ck_tensor *src,
                                double scale, bool accumulate, ck_error *err)
{
    (void)b;
    return ref_convert(dst, src, scale, accumulate, err);
}

static ck_status ref_optim(ck_backend *b, const ck_optimizer *opt, int64_t step,
                           double grad_scale, ck_tensor *param, const ck_tensor *grad,
                           ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    (void)b;
    return ref_optimizer_step(opt, step, grad_scale, param, grad, state0, state1, err);
}

void ref_install_training(ck_backend *b)
{
    b->loss_forward = ref_loss_fwd;
    b->loss_backward = ref_loss_bwd;
    b->ce_forward = ref_ce_fwd;
    b->ce_backward = ref_ce_bwd;
    b->supports_loss = ref_supports_loss;
    b->optimizer_step = ref_optim;
    b->supports_optimizer = ref_supports_optimizer;
    b->convert = ref_conv_dtype;
}

static void ref_info(ck_backend *b, ck_backend_info *out)
{
    (void)b;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "ref");
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

static void ref_destroy(ck_backend *b)
{
    free(b);
}

ck_status ck_backend_ref_create(ck_backend **out, ck_error *err)
{
    ck_backend *b = calloc(1, sizeof *b);
    if (!b)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the ref backend");
    b->name = "ref";
    ck_host_memory_install(b);
    b->supports = ref_supports;
    b->forward = ref_forward;
    b->backward = ref_backward;
    ref_install_training(b);
    b->info = ref_info;
    b->destroy = ref_destroy;
    *out = b;
    return CK_OK;
}
