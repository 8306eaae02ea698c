/*
 * The conv family's definitions (op_def.h): conv1d/2d/3d and conv_transpose1d/2d/3d.
 */
#include "harness/model/op_rules.h"

#include <limits.h>
#include <math.h>

/* ---- conv: cross-correlation as PyTorch; W (F, C, k...), b (F) ---- */

static const ck_option_def conv_options[] = {
    CK_OPT("filters", SIZE, filters, .required = true),
    CK_OPT("kernel", WINDOW, kernel, .required = true),
    CK_OPT("stride", WINDOW, stride),
    CK_OPT("padding", PADDING, pad),
    CK_OPT("dilation", WINDOW, dilation),
    CK_OPT("bias", BOOL, bias),
    CK_OPT("init", INIT, init),
    CK_OPTIONS_END,
};

/* Output length of one conv spatial dim; resolves that dim's padding into op. */
static ck_status infer_conv_dim(ck_op_params *op, int d, int64_t in_len, int64_t *out_len,
                                ck_error *err)
{
    int64_t k = op->kernel[d], stride = op->stride[d], dilation = op->dilation[d];
    int64_t extent = (k - 1) * dilation + 1; /* sizes are capped at 2^20: no overflow */
    int64_t lo = 0, hi = 0;
    switch (op->pad_mode) {
    case CK_PAD_VALID:
        break;
    case CK_PAD_EXPLICIT:
        lo = hi = op->pad[d];
        break;
    case CK_PAD_SAME: {
        /* TensorFlow's rule: out = ceil(in / stride); the odd pixel goes at the end. */
        int64_t want = in_len / stride + (in_len % stride != 0);
        int64_t total = (want - 1) * stride + extent - in_len;
        if (total < 0)
            total = 0;
        lo = total / 2;
        hi = total - lo;
        break;
    }
    }
    if (lo > INT_MAX || hi > INT_MAX)
        return ck_fail(err, CK_ERR_INPUT,
                       "\"same\" padding of %lld in spatial dim %d is too large (kernel %lld, "
                       "dilation %lld)",
                       (long long)(lo + hi), d, (long long)k, (long long)dilation);
    op->pad_lo[d] = (int)lo;
    op->pad_hi[d] = (int)hi;
    int64_t padded = in_len + lo + hi;
    if (padded < extent) {
        if (lo + hi > 0)
            return ck_fail(err, CK_ERR_INPUT,
                           "kernel %lld (dilated %lld) is larger than the padded input %lld "
                           "(%lld + padding %lld + %lld) in spatial dim %d",
                           (long long)k, (long long)extent, (long long)padded, (long long)in_len,
                           (long long)lo, (long long)hi, d);
        return ck_fail(err, CK_ERR_INPUT,
                       "kernel %lld (dilated %lld) is larger than the input %lld in spatial dim "
                       "%d (no padding)",
                       (long long)k, (long long)extent, (long long)in_len, d);
    }
    *out_len = (padded - extent) / stride + 1;
    return CK_OK;
}

static ck_status conv_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                            ck_error *err)
{
    CK_TRY(ck_op_need_spatial_rank(op, &in[0], err));
    y->dim[1] = op->filters;
    for (int d = 0; d < op->nsp; d++)
        CK_TRY(infer_conv_dim(op, d, in[0].dim[2 + d], &y->dim[2 + d], err));
    return CK_OK;
}

static void conv_state(ck_node *node, const ck_shape *in0)
{
    const ck_op_params *op = &node->op;
    int64_t channels = in0->dim[1];
    double fan_in = (double)channels;
    ck_shape w = ck_op_shape2(2 + op->nsp, op->filters, channels);
    for (int d = 0; d < op->nsp; d++) {
        w.dim[2 + d] = op->kernel[d];
        fan_in *= op->kernel[d];
    }
    ck_op_weight_bias_specs(node, w, op->filters, fan_in,
                            fan_in / (double)channels * (double)op->filters);
}

/* ---- conv_transpose: as PyTorch's ConvTranspose; W (C, F, k...), b (F) ---- */

static const ck_option_def convt_options[] = {
    CK_OPT("filters", SIZE, filters, .required = true),
    CK_OPT("kernel", WINDOW, kernel, .required = true),
    CK_OPT("stride", WINDOW, stride),
    CK_OPT("padding", PAD, pad),
    CK_OPT("output_padding", WINDOW0, out_pad,
           .type_text = "window ≥ 0, less than stride or dilation"),
    CK_OPT("dilation", WINDOW, dilation),
    CK_OPT("bias", BOOL, bias),
    CK_OPTIONS_END,
};

static ck_status convt_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                             ck_error *err)
{
    CK_TRY(ck_op_need_spatial_rank(op, &in[0], err));
    y->dim[1] = op->filters;
    for (int d = 0; d < op->nsp; d++) {
        const int64_t p = op->pad_mode == CK_PAD_EXPLICIT ? op->pad[d] : 0;
        const int64_t len = (in[0].dim[2 + d] - 1) * op->stride[d] - 2 * p +
                            (int64_t)op->dilation[d] * (op->kernel[d] - 1) + op->out_pad[d] + 1;
        if (len < 1)
            return ck_fail(err, CK_ERR_INPUT,
                           "conv_transpose output length %lld < 1 in spatial dim %d (input "
                           "%lld, padding %lld too large)",
                           (long long)len, d, (long long)in[0].dim[2 + d], (long long)p);
        op->pad_lo[d] = op->pad_hi[d] = (int)p;
        y->dim[2 + d] = len;
    }
    return CK_OK;
}

static void convt_state(ck_node *node, const ck_shape *in0)
{
    const ck_op_params *op = &node->op;
    /* weight (C_in, F, k...); PyTorch's fan_in is weight.size(1) * prod(k) = F * prod(k) */
    const int64_t channels = in0->dim[1];
    double fan_in = (double)op->filters;
    ck_shape w = ck_op_shape2(2 + op->nsp, channels, op->filters);
    for (int d = 0; d < op->nsp; d++) {
        w.dim[2 + d] = op->kernel[d];
        fan_in *= op->kernel[d];
    }
    const double a = 1.0 / sqrt(fan_in);
    node->params[node->n_params++] = ck_op_spec("weight", w, CK_F32, CK_INIT_UNIFORM, a);
    if (op->bias)
        node->params[node->n_params++] =
            ck_op_spec("bias", ck_op_shape2(1, op->filters, 0), CK_F32, CK_INIT_UNIFORM, a);
}

const ck_op_def ck_op_defs_conv[] = {
    {.kind = CK_OP_CONV,
     .spellings = {{"conv1d", 1, "1-D convolution (cross-correlation) over (N, C, L)"},
                   {"conv2d", 2, "2-D convolution (cross-correlation) over (N, C, H, W)"},
                   {"conv3d", 3, "3-D convolution (cross-correlation) over (N, C, D, H, W)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = conv_options,
     .infer = conv_infer,
     .state = conv_state,
     .backward_reads = CK_BWD_READS_INPUTS, /* dW correlates dy with x */
     .casts_params = true},
    {.kind = CK_OP_CONV_TRANSPOSE,
     .spellings = {{"conv_transpose1d", 1, "1-D transposed convolution over (N, C, L)"},
                   {"conv_transpose2d", 2, "2-D transposed convolution over (N, C, H, W)"},
                   {"conv_transpose3d", 3, "3-D transposed convolution over (N, C, D, H, W)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = convt_options,
     .infer = convt_infer,
     .state = convt_state,
     .backward_reads = CK_BWD_READS_INPUTS,
     .casts_params = true},
};
CK_OP_ROWS_COUNT(ck_op_defs_conv);
