/*
 * The CPU reference backend: memory in host RAM, ops dispatched to one file per op family
 * (ref_ops.h). Single-threaded and fixed-order by design: it is the reference every other
 * backend is judged against, and plain vs checkpointed must be bitwise identical on it.
 * Compute dtypes: fp32, fp64, fp16 and bf16; every op loads each tensor in its own dtype
 * and rounds each output once (ref_elem.h, harness/precision.md). Memory is typeless:
 * upload, download, zero and copy move ck_tensor_bytes of any dtype.
 */
#include "backends/ref/ref_elem.h"
#include "backends/host_memory.h"
#include "backends/op_check18.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

static bool ref_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    (void)b;
    return (unsigned)op->kind < CK_OP_KIND_COUNT && ref_is_float(dtype);
}

typedef ck_status (*ref_fwd_fn)(const ck_op_params *, const ck_fwd_args *, ck_op_io *, ck_error *);
typedef ck_status (*ref_bwd_fn)(const ck_op_params *, const ck_fwd_args *, const ck_op_io *,
                                ck_op_grads *, ck_error *);

static const struct {
    ref_fwd_fn forward;
    ref_bwd_fn backward;
} ref_op_table[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = {ref_linear_forward, ref_linear_backward},
    [CK_OP_CONV] = {ref_conv_forward, ref_conv_backward},
    [CK_OP_RELU] = {ref_activation_forward, ref_activation_backward},
    [CK_OP_LEAKY_RELU] = {ref_activation_forward, ref_activation_backward},
    [CK_OP_GELU] = {ref_activation_forward, ref_activation_backward},
    [CK_OP_TANH] = {ref_activation_forward, ref_activation_backward},
    [CK_OP_SIGMOID] = {ref_activation_forward, ref_activation_backward},
    [CK_OP_BATCHNORM] = {ref_batchnorm_forward, ref_batchnorm_backward},
    [CK_OP_LAYERNORM] = {ref_layernorm_forward, ref_layernorm_backward},
    [CK_OP_DROPOUT] = {ref_dropout_forward, ref_dropout_backward},
    [CK_OP_GAUSSIAN_NOISE] = {ref_noise_forward, ref_noise_backward},
    [CK_OP_MAXPOOL] = {ref_pool_forward, ref_pool_backward},
    [CK_OP_AVGPOOL] = {ref_pool_forward, ref_pool_backward},
    [CK_OP_UPSAMPLE] = {ref_upsample_forward, ref_upsample_backward},
    [CK_OP_ADD] = {ref_add_forward, ref_add_backward},
    [CK_OP_CONCAT] = {ref_concat_forward, ref_concat_backward},
    [CK_OP_FLATTEN] = {ref_flatten_forward, ref_flatten_backward},
    [CK_OP_MATMUL] = {ref_matmul_forward, ref_matmul_backward},
    [CK_OP_SOFTMAX] = {ref_softmax_forward, ref_softmax_backward},
    [CK_OP_LOG_SOFTMAX] = {ref_softmax_forward, ref_softmax_backward},
    [CK_OP_ATTENTION] = {ref_attention_forward, ref_attention_backward},
    [CK_OP_EMBEDDING] = {ref_embedding_forward, ref_embedding_backward},
    [CK_OP_RESHAPE] = {ref_permute_forward, ref_permute_backward},
    [CK_OP_PERMUTE] = {ref_permute_forward, ref_permute_backward},
    [CK_OP_RMSNORM] = {ref_rmsnorm_forward, ref_rmsnorm_backward},
    [CK_OP_GROUPNORM] = {ref_groupnorm_forward, ref_groupnorm_backward},
    [CK_OP_MUL] = {ref_pointwise18_forward, ref_pointwise18_backward},
    [CK_OP_SILU] = {ref_pointwise18_forward, ref_pointwise18_backward},
    [CK_OP_CONV_TRANSPOSE] = {ref_conv_transpose_forward, ref_conv_transpose_backward},
    [CK_OP_POSITIONAL] = {ref_positional_forward, ref_positional_backward},
};

/* The kernels an op's options select within its family: gelu's tanh approximation, padded
 * pools and linear upsampling run the issue-18 kernels; everything else (and so every
 * pre-existing case) the family's own. */
static ref_fwd_fn ref_pick_forward(const ck_op_params *op)
{
    if (op->kind == CK_OP_GELU && op->gelu_tanh)
        return ref_pointwise18_forward;
    if ((op->kind == CK_OP_MAXPOOL || op->kind == CK_OP_AVGPOOL) && ck_opc18_pool_padded(op))
        return ref_pool_pad_forward;
    if (op->kind == CK_OP_UPSAMPLE && op->mode == CK_UPSAMPLE_LINEAR)
        return ref_upsample_linear_forward;
    return ref_op_table[op->kind].forward;
}

static ref_bwd_fn ref_pick_backward(const ck_op_params *op)
{
    if (op->kind == CK_OP_GELU && op->gelu_tanh)
        return ref_pointwise18_backward;
    if ((op->kind == CK_OP_MAXPOOL || op->kind == CK_OP_AVGPOOL) && ck_opc18_pool_padded(op))
        return ref_pool_pad_backward;
    if (op->kind == CK_OP_UPSAMPLE && op->mode == CK_UPSAMPLE_LINEAR)
        return ref_upsample_linear_backward;
    return ref_op_table[op->kind].backward;
}

static ck_status ref_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    if (!ref_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "ref backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    return ref_pick_forward(op)(op, args, io, err);
}

static ck_status ref_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    if (!ref_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "ref backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    return ref_pick_backward(op)(op, args, io, g, err);
}

static ck_status ref_loss_fwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double *loss, ck_error *err)
{
    (void)b;
    return ref_loss_forward(kind, y, target, loss, err);
}

static ck_status ref_loss_bwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err)
{
    (void)b;
    return ref_loss_backward(kind, y, target, scale, dy, err);
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

static void *ref_get_proc(ck_backend *b, const char *name)
{
    (void)b;
    if (strcmp(name, CK_PROC_CE_FORWARD) == 0)
        return (void *)(ck_ce_forward_fn)ref_ce_fwd;
    if (strcmp(name, CK_PROC_CE_BACKWARD) == 0)
        return (void *)(ck_ce_backward_fn)ref_ce_bwd;
    return NULL;
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
    b->loss_forward = ref_loss_fwd;
    b->loss_backward = ref_loss_bwd;
    b->optimizer_step = ref_optim;
    b->convert = ref_conv_dtype;
    b->info = ref_info;
    b->destroy = ref_destroy;
    b->get_proc = ref_get_proc;
    *out = b;
    return CK_OK;
}
