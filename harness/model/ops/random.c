/*
 * The random family's definitions (op_def.h): dropout, gaussian_noise. Their draws come
 * from the layer's stream (harness/core/rng.h; the RNG policy picks the stream).
 */
#include "harness/model/op_rules.h"

static const ck_option_def dropout_options[] = {
    CK_OPT("rate", REAL, rate, .range = CK_RANGE_UNIT_HALF_OPEN),
    CK_OPTIONS_END,
};
static const ck_option_def noise_options[] = {
    CK_OPT("stddev", REAL, stddev, .required = true, .range = CK_RANGE_NON_NEGATIVE),
    CK_OPTIONS_END,
};

/* one uniform word per output element: the keep mask */
static void dropout_draws(ck_node *node, const ck_shape *in)
{
    node->draw_uniform = true;
    node->draw_elems = ck_shape_numel(&node->out_shape);
}

/* one normal draw per output element */
static void noise_draws(ck_node *node, const ck_shape *in)
{
    node->draw_elems = ck_shape_numel(&node->out_shape);
}

const ck_op_def ck_op_defs_random[] = {
    {.kind = CK_OP_DROPOUT,
     .spellings = {{"dropout", 0,
                    "inverted dropout: zero with probability rate, scale 1/(1-rate)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = dropout_options,
     .draws = dropout_draws,
     .backward_reads = CK_BWD_REDRAWS_MASK}, /* dx = dy * keep / (1 - rate) */
    {.kind = CK_OP_GAUSSIAN_NOISE,
     .spellings = {{"gaussian_noise", 0, "x + stddev * N(0, 1)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = noise_options,
     .draws = noise_draws,
     .backward_reads = CK_BWD_READS_NOTHING}, /* dx = dy */
};
CK_OP_ROWS_COUNT(ck_op_defs_random);
