/*
 * Names of op, loss and optimizer kinds, and the default op parameters a case file starts
 * from (documented per op in cases/README.md).
 */
#include "harness/core/ops.h"

#include <string.h>

static const char *const op_kind_names[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = "linear",       [CK_OP_CONV] = "conv",
    [CK_OP_RELU] = "relu",           [CK_OP_LEAKY_RELU] = "leaky_relu",
    [CK_OP_GELU] = "gelu",           [CK_OP_TANH] = "tanh",
    [CK_OP_SIGMOID] = "sigmoid",     [CK_OP_BATCHNORM] = "batchnorm",
    [CK_OP_LAYERNORM] = "layernorm", [CK_OP_DROPOUT] = "dropout",
    [CK_OP_GAUSSIAN_NOISE] = "gaussian_noise",
    [CK_OP_MAXPOOL] = "maxpool",     [CK_OP_AVGPOOL] = "avgpool",
    [CK_OP_UPSAMPLE] = "upsample",   [CK_OP_ADD] = "add",
    [CK_OP_CONCAT] = "concat",       [CK_OP_FLATTEN] = "flatten",
    [CK_OP_MATMUL] = "matmul",       [CK_OP_SOFTMAX] = "softmax",
    [CK_OP_LOG_SOFTMAX] = "log_softmax", [CK_OP_ATTENTION] = "attention",
    [CK_OP_EMBEDDING] = "embedding", [CK_OP_RESHAPE] = "reshape",
    [CK_OP_PERMUTE] = "permute",     [CK_OP_RMSNORM] = "rmsnorm",
    [CK_OP_GROUPNORM] = "groupnorm", [CK_OP_MUL] = "mul",
    [CK_OP_SILU] = "silu",           [CK_OP_CONV_TRANSPOSE] = "conv_transpose",
    [CK_OP_POSITIONAL] = "positional",
};

static const char *const loss_kind_names[CK_LOSS_KIND_COUNT] = {
    [CK_LOSS_MEAN] = "mean",
    [CK_LOSS_SUM] = "sum",
    [CK_LOSS_MSE] = "mse",
    [CK_LOSS_CROSS_ENTROPY] = "cross_entropy",
};

static const char *const optimizer_kind_names[CK_OPT_KIND_COUNT] = {
    [CK_OPT_SGD] = "sgd",
    [CK_OPT_MOMENTUM] = "momentum",
    [CK_OPT_ADAM] = "adam",
    [CK_OPT_ADAMW] = "adamw",
};

const char *ck_op_kind_name(ck_op_kind k)
{
    return (unsigned)k < CK_OP_KIND_COUNT ? op_kind_names[k] : "?";
}

const char *ck_loss_kind_name(ck_loss_kind k)
{
    return (unsigned)k < CK_LOSS_KIND_COUNT ? loss_kind_names[k] : "?";
}

const char *ck_optimizer_kind_name(ck_optimizer_kind k)
{
    return (unsigned)k < CK_OPT_KIND_COUNT ? optimizer_kind_names[k] : "?";
}

void ck_op_params_default(ck_op_params *p, ck_op_kind kind, int nsp)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->nsp = nsp;
    p->bias = true;
    /* Every window entry starts at 1 so that unused spatial slots are harmless, and a
     * hand-built op (tests) gets a 1-wide, unit-stride, undilated window by default. */
    for (int d = 0; d < CK_MAX_SPATIAL; d++) {
        p->kernel[d] = 1;
        p->stride[d] = 1;
        p->dilation[d] = 1;
        p->scale[d] = 1;
    }
    p->pad_mode = CK_PAD_VALID;
    p->slope = 0.01;
    p->momentum = 0.1;
    p->eps = 1e-5;
    p->eval = false;
    p->rate = 0.5;
    p->stddev = 0.0;
    p->dim = -1;
    p->heads = 1;
    p->rate = kind == CK_OP_ATTENTION ? 0.0 : p->rate;
    p->eps = kind == CK_OP_RMSNORM ? 1e-6 : p->eps;
    p->count_include_pad = true;
    p->mode = CK_UPSAMPLE_NEAREST;
}
