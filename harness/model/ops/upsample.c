/*
 * The upsample family's definitions (op_def.h): upsample1d/2d/3d, nearest and linear
 * modes.
 */
#include "harness/model/op_rules.h"

static const ck_option_def upsample_options[] = {
    CK_OPT("scale", WINDOW, scale, .required = true),
    CK_OPT("mode", UPMODE, mode,
           .type_text = "`\"nearest\"`, or the linear mode of the dims: `\"linear\"` (1d), "
                        "`\"bilinear\"` (2d), `\"trilinear\"` (3d)"),
    CK_OPT("align_corners", BOOL, align_corners, .type_text = "bool (linear modes only)"),
    CK_OPTIONS_END,
};

/* in * scale per spatial dim */
static ck_status upsample_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                ck_error *err)
{
    char s[128];
    CK_TRY(ck_op_need_spatial_rank(op, &in[0], err));
    for (int d = 0; d < op->nsp; d++)
        if (__builtin_mul_overflow(in[0].dim[2 + d], (int64_t)op->scale[d], &y->dim[2 + d]))
            return ck_fail(err, CK_ERR_INPUT, "upsampling %s by %d overflows in spatial dim %d",
                           ck_shape_str(&in[0], s, sizeof s), op->scale[d], d);
    return CK_OK;
}

const ck_op_def ck_op_defs_upsample[] = {
    {.kind = CK_OP_UPSAMPLE,
     .spellings = {{"upsample1d", 1, "1-D upsampling by an integer scale: nearest or linear"},
                   {"upsample2d", 2, "2-D upsampling by an integer scale: nearest or bilinear"},
                   {"upsample3d", 3,
                    "3-D upsampling by an integer scale: nearest or trilinear"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = upsample_options,
     .infer = upsample_infer,
     .backward_reads = CK_BWD_READS_NOTHING}, /* gathers dy by the fixed source indices */
};
CK_OP_ROWS_COUNT(ck_op_defs_upsample);
