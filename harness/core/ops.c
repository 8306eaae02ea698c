/*
 * Names of op, loss and optimizer kinds, and the default op parameters a case file starts
 * from (documented per op in cases/README.md).
 */
#include "harness/core/ops.h"

#include <math.h>
#include <string.h>

#define KIND_NAME_(e, name, fam) [CK_OP_##e] = name,
static const char *const op_kind_names[CK_OP_KIND_COUNT] = {CK_OP_KINDS(KIND_NAME_)};
#undef KIND_NAME_

#define KIND_FAMILY_(e, name, fam) [CK_OP_##e] = CK_FAMILY_##fam,
static const ck_op_family op_kind_families[CK_OP_KIND_COUNT] = {CK_OP_KINDS(KIND_FAMILY_)};
#undef KIND_FAMILY_

static const char *const family_names[CK_FAMILY_COUNT] = {
    [CK_FAMILY_LINEAR] = "linear",       [CK_FAMILY_CONV] = "conv",
    [CK_FAMILY_POOL] = "pool",           [CK_FAMILY_UPSAMPLE] = "upsample",
    [CK_FAMILY_POINTWISE] = "pointwise", [CK_FAMILY_NORM] = "norm",
    [CK_FAMILY_RANDOM] = "random",       [CK_FAMILY_ATTENTION] = "attention",
    [CK_FAMILY_SHAPE] = "shape",         [CK_FAMILY_BROADCAST] = "broadcast",
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

ck_op_family ck_op_family_of(ck_op_kind k)
{
    return (unsigned)k < CK_OP_KIND_COUNT ? op_kind_families[k] : CK_FAMILY_COUNT;
}

const char *ck_op_family_name(ck_op_family f)
{
    return (unsigned)f < CK_FAMILY_COUNT ? family_names[f] : "?";
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
    p->dim = kind == CK_OP_CONCAT ? 1 : -1; /* concat joins channels unless told */
    p->heads = 1;
    p->rate = kind == CK_OP_ATTENTION ? 0.0 : p->rate;
    p->eps = kind == CK_OP_RMSNORM ? 1e-6 : p->eps;
    p->count_include_pad = true;
    p->mode = CK_UPSAMPLE_NEAREST;
    p->scalar = NAN; /* add, mul, ... with one input: no constant given */
}
