/*
 * The norm family's definitions (op_def.h): batchnorm, layernorm, rmsnorm, groupnorm.
 * Their parameters stay fp32 in fp16/bf16 runs (harness/precision.md).
 */
#include "harness/model/op_rules.h"

#include <string.h>

/* normalized_shape must be the input's trailing dims */
static ck_status check_norm_shape(const ck_op_params *op, const ck_shape *x, ck_error *err)
{
    char s[128], ns[128];
    ck_shape want = ck_shape_make(op->n_norm, op->norm_shape);
    bool ok = op->n_norm <= x->ndim;
    for (int i = 0; ok && i < op->n_norm; i++)
        ok = x->dim[x->ndim - op->n_norm + i] == op->norm_shape[i];
    if (!ok)
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: normalized_shape %s is not the trailing dims of input %s (omit it "
                       "to normalise %s)",
                       ck_op_kind_name(op->kind), ck_shape_str(&want, ns, sizeof ns),
                       ck_shape_str(x, s, sizeof s),
                       op->kind == CK_OP_RMSNORM ? "the last dim" : "every non-batch dim");
    return CK_OK;
}

/* weight const 1 and bias const 0, both shaped c */
static void affine_specs(ck_node *node, ck_shape c)
{
    node->params[node->n_params++] = ck_op_spec("weight", c, CK_F32, CK_INIT_CONST, 1.0);
    node->params[node->n_params++] = ck_op_spec("bias", c, CK_F32, CK_INIT_CONST, 0.0);
}

/* ---- batchnorm: per channel (dim 1) over N and spatial, running statistics ---- */

static const ck_option_def batchnorm_options[] = {
    CK_OPT("momentum", REAL, momentum, .range = CK_RANGE_UNIT_CLOSED),
    CK_OPT("eps", REAL, eps, .range = CK_RANGE_POSITIVE),
    CK_OPT("eval", BOOL, eval),
    CK_OPTIONS_END,
};

static ck_status batchnorm_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                 ck_error *err)
{
    char s[128];
    CK_TRY(ck_op_need_min_rank(op, &in[0], 2, "(N, C, ...)", err));
    /* As PyTorch: batch statistics of a single value per channel are meaningless. */
    int64_t per_channel = ck_shape_numel(&in[0]) / in[0].dim[1];
    if (!op->eval && per_channel < 2)
        return ck_fail(err, CK_ERR_INPUT,
                       "batchnorm in training needs more than 1 value per channel, got "
                       "input %s (use a larger batch or \"eval\": true)",
                       ck_shape_str(&in[0], s, sizeof s));
    return CK_OK;
}

static void batchnorm_state(ck_node *node, const ck_shape *in0)
{
    ck_shape c = ck_op_shape2(1, in0->dim[1], 0);
    affine_specs(node, c);
    node->buffers[node->n_buffers++] = ck_op_spec("running_mean", c, CK_F32, CK_INIT_CONST, 0.0);
    node->buffers[node->n_buffers++] = ck_op_spec("running_var", c, CK_F32, CK_INIT_CONST, 1.0);
    node->buffers[node->n_buffers++] = ck_op_spec(
        "num_batches_tracked", ck_op_shape2(0, 0, 0), CK_I64, CK_INIT_CONST, 0.0);
    node->has_saved = true;
    node->saved_shape = ck_op_shape2(2, 2, in0->dim[1]); /* mean, invstd per channel */
}

/* ---- layernorm: over the trailing normalized_shape dims (default every non-batch dim) ---- */

static const ck_option_def layernorm_options[] = {
    CK_OPT("normalized_shape", NORMSHAPE, norm_shape, .count_offset = CK_OPT_FIELD(n_norm),
           .default_text = "every non-batch dim (x[1:])"),
    CK_OPT("eps", REAL, eps, .range = CK_RANGE_POSITIVE),
    CK_OPTIONS_END,
};

static ck_status layernorm_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                 ck_error *err)
{
    CK_TRY(ck_op_need_min_rank(op, &in[0], 2, "(N, ...)", err));
    if (op->n_norm > 0)
        CK_TRY(check_norm_shape(op, &in[0], err));
    return CK_OK;
}

static void layernorm_state(ck_node *node, const ck_shape *in0)
{
    const ck_op_params *op = &node->op;
    ck_shape rest;
    memset(&rest, 0, sizeof rest);
    if (op->n_norm > 0) {
        rest = ck_shape_make(op->n_norm, op->norm_shape);
    } else {
        rest.ndim = in0->ndim - 1;
        for (int d = 1; d < in0->ndim; d++)
            rest.dim[d - 1] = in0->dim[d];
    }
    affine_specs(node, rest);
    node->has_saved = true;
    /* mean, invstd per normalised row */
    node->saved_shape = ck_op_shape2(2, 2, ck_shape_numel(in0) / ck_shape_numel(&rest));
}

/* ---- rmsnorm: x / sqrt(mean(x^2) + eps) * weight over the trailing dims ---- */

static const ck_option_def rmsnorm_options[] = {
    CK_OPT("normalized_shape", NORMSHAPE, norm_shape, .count_offset = CK_OPT_FIELD(n_norm),
           .default_text = "the last dim"),
    CK_OPT("eps", REAL, eps, .range = CK_RANGE_POSITIVE),
    CK_OPTIONS_END,
};

static ck_status rmsnorm_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                               ck_error *err)
{
    if (op->n_norm == 0) { /* default: the last dim */
        op->n_norm = 1;
        op->norm_shape[0] = in[0].dim[in[0].ndim - 1];
    }
    return check_norm_shape(op, &in[0], err);
}

static void rmsnorm_state(ck_node *node, const ck_shape *in0)
{
    node->params[node->n_params++] =
        ck_op_spec("weight", ck_shape_make(node->op.n_norm, node->op.norm_shape), CK_F32,
                   CK_INIT_CONST, 1.0);
}

/* ---- groupnorm: per sample over groups of channels, per-channel affine ---- */

/* groups: required by groupnorm (checked by the case parser); instancenorm is groupnorm
 * with one group per channel and refuses it (0 until groupnorm_infer sets C) */
static const ck_option_def groupnorm_options[] = {
    CK_OPT("groups", SIZE, groups, .type_text = "size dividing C",
           .default_text = "required by groupnorm; instancenorm: C (not allowed)"),
    CK_OPT("eps", REAL, eps, .range = CK_RANGE_POSITIVE),
    CK_OPTIONS_END,
};

static ck_status groupnorm_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                 ck_error *err)
{
    char s[128];
    CK_TRY(ck_op_need_min_rank(op, &in[0], 2, "(N, C, ...)", err));
    if (op->groups == 0) /* instancenorm: one group per channel */
        op->groups = in[0].dim[1];
    if (op->groups < 1 || in[0].dim[1] % op->groups != 0)
        return ck_fail(err, CK_ERR_INPUT,
                       "groupnorm: groups %lld does not divide the %lld channels of input %s",
                       (long long)op->groups, (long long)in[0].dim[1],
                       ck_shape_str(&in[0], s, sizeof s));
    return CK_OK;
}

static void groupnorm_state(ck_node *node, const ck_shape *in0)
{
    affine_specs(node, ck_op_shape2(1, in0->dim[1], 0));
}

const ck_op_def ck_op_defs_norm[] = {
    {.kind = CK_OP_BATCHNORM,
     .spellings = {{"batchnorm", 0,
                    "per-channel normalisation over N and spatial dims, running statistics"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = batchnorm_options,
     .infer = batchnorm_infer,
     .state = batchnorm_state,
     .backward_reads = CK_BWD_READS_INPUTS | CK_BWD_READS_SAVED}, /* x and mean/invstd */
    {.kind = CK_OP_LAYERNORM,
     .spellings = {{"layernorm", 0,
                    "normalisation over the trailing normalized_shape dims (default: every "
                    "non-batch dim), affine"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = layernorm_options,
     .infer = layernorm_infer,
     .state = layernorm_state,
     .backward_reads = CK_BWD_READS_INPUTS | CK_BWD_READS_SAVED},
    {.kind = CK_OP_RMSNORM,
     .spellings = {{"rmsnorm", 0, "x / sqrt(mean(x^2) + eps) * weight over the trailing dims"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = rmsnorm_options,
     .infer = rmsnorm_infer,
     .state = rmsnorm_state,
     .backward_reads = CK_BWD_READS_INPUTS}, /* recomputes the statistic from x */
    {.kind = CK_OP_GROUPNORM,
     .spellings = {{"groupnorm", 0,
                    "normalisation per sample over groups of channels, per-channel affine"},
                   {"instancenorm", 0,
                    "groupnorm with one group per channel: per sample and channel over the "
                    "spatial dims, affine"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = groupnorm_options,
     .infer = groupnorm_infer,
     .state = groupnorm_state,
     .backward_reads = CK_BWD_READS_INPUTS}, /* recomputes the statistics from x */
};
CK_OP_ROWS_COUNT(ck_op_defs_norm);
