/*
 * The pool family's definitions (op_def.h): maxpool1d/2d/3d, avgpool1d/2d/3d, with or
 * without padding.
 */
#include "harness/model/op_rules.h"

#define POOL_OPTIONS                                                                        \
    CK_OPT("pool", WINDOW, kernel, .required = true),                                      \
    CK_OPT("stride", WINDOW, stride, .default_text = "the pool window"),                   \
    CK_OPT("padding", PAD, pad, .type_text = "window ≥ 0, at most pool / 2")

static const ck_option_def maxpool_options[] = {POOL_OPTIONS, CK_OPTIONS_END};
static const ck_option_def avgpool_options[] = {
    POOL_OPTIONS,
    CK_OPT("count_include_pad", BOOL, count_include_pad),
    CK_OPTIONS_END,
};

/* floor((in + 2 padding - pool) / stride) + 1 per spatial dim; resolves the padding */
static ck_status pool_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                            ck_error *err)
{
    CK_TRY(ck_op_need_spatial_rank(op, &in[0], err));
    for (int d = 0; d < op->nsp; d++) {
        int64_t len = in[0].dim[2 + d];
        int64_t p = op->pad_mode == CK_PAD_EXPLICIT ? op->pad[d] : 0;
        if (2 * p > op->kernel[d])
            return ck_fail(err, CK_ERR_INPUT,
                           "pool padding %lld is more than half the window %d in spatial dim %d",
                           (long long)p, op->kernel[d], d);
        if (op->kernel[d] > len + 2 * p)
            return ck_fail(err, CK_ERR_INPUT,
                           "pool window %d is larger than the input %lld in spatial dim %d",
                           op->kernel[d], (long long)len, d);
        op->pad_lo[d] = op->pad_hi[d] = (int)p;
        y->dim[2 + d] = (len + 2 * p - op->kernel[d]) / op->stride[d] + 1;
    }
    return CK_OK;
}

const ck_op_def ck_op_defs_pool[] = {
    {.kind = CK_OP_MAXPOOL,
     .spellings = {{"maxpool1d", 1, "1-D max pooling, -inf padding"},
                   {"maxpool2d", 2, "2-D max pooling, -inf padding"},
                   {"maxpool3d", 3, "3-D max pooling, -inf padding"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = maxpool_options,
     .infer = pool_infer,
     .backward_reads = CK_BWD_READS_INPUTS}, /* finds each window's first maximum in x */
    {.kind = CK_OP_AVGPOOL,
     .spellings = {{"avgpool1d", 1, "1-D average pooling, zero padding"},
                   {"avgpool2d", 2, "2-D average pooling, zero padding"},
                   {"avgpool3d", 3, "3-D average pooling, zero padding"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = avgpool_options,
     .infer = pool_infer,
     .backward_reads = CK_BWD_READS_NOTHING}, /* spreads dy over each window */
};
CK_OP_ROWS_COUNT(ck_op_defs_pool);
