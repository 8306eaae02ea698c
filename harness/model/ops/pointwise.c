/*
 * The pointwise family's definitions (op_def.h): relu, leaky_relu, gelu, tanh, sigmoid,
 * silu, add, mul, positional, and the unary functions sqrt, rsqrt, reciprocal, exp, log,
 * neg, erf, abs; cast between float dtypes. Element-wise: the output has the first input's
 * shape.
 */
#include "harness/model/op_rules.h"

static const ck_option_def leaky_relu_options[] = {
    CK_OPT("slope", REAL, slope, .range = CK_RANGE_ANY_FINITE),
    CK_OPTIONS_END,
};
static const ck_option_def gelu_options[] = {
    CK_OPT("approximate", APPROX, gelu_tanh),
    CK_OPTIONS_END,
};

/* cast (cases/README.md, `cast`): forward rounds x to `to`, backward rounds dy to `from`,
 * as PyTorch's x.to(dtype) and its backward; the result is then stored in the run's dtype */
static const ck_option_def cast_options[] = {
    CK_OPT("to", FLOAT_DTYPE, cast_to, .required = true),
    CK_OPT("from", FLOAT_DTYPE, cast_from),
    CK_OPTIONS_END,
};

static ck_status positional_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                  ck_error *err)
{
    return ck_op_need_min_rank(op, &in[0], 2, "(N, L, ...)", err);
}

static void positional_state(ck_node *node, const ck_shape *in0)
{
    /* weight (L, ...) = x[1:]; N(0, 1) as an nn.Embedding of positions */
    node->params[node->n_params++] = ck_op_spec(
        "weight", ck_shape_make(in0->ndim - 1, in0->dim + 1), CK_F32, CK_INIT_NORMAL, 1.0);
}

/* one input, same shape out, no parameters; backward differentiates at x */
#define UNARY(k, name, summary, opts)                                                       \
    {.kind = k, .spellings = {{name, 0, summary}}, .min_inputs = 1, .max_inputs = 1,        \
     .options = opts, .backward_reads = CK_BWD_READS_INPUTS}

const ck_op_def ck_op_defs_pointwise[] = {
    {.kind = CK_OP_RELU, .spellings = {{"relu", 0, "max(x, 0)"}}, .min_inputs = 1,
     .max_inputs = 1, .backward_reads = CK_BWD_READS_OUTPUT}, /* relu'(x) = [y > 0], as PyTorch */
    UNARY(CK_OP_LEAKY_RELU, "leaky_relu", "x if x > 0 else slope * x", leaky_relu_options),
    UNARY(CK_OP_GELU, "gelu", "GELU: exact 0.5 x (1 + erf(x / sqrt 2)), or tanh-approximated",
          gelu_options),
    UNARY(CK_OP_TANH, "tanh", "tanh(x)", NULL),
    UNARY(CK_OP_SIGMOID, "sigmoid", "1 / (1 + exp(-x))", NULL),
    /* add and mul of differing shapes or with a constant run on the broadcast family's
     * kernels (op->broadcast, set by ck_op_binary_infer) */
    {.kind = CK_OP_ADD,
     .spellings = {{"add", 0, "element-wise sum of 2 to 8 inputs of one shape, of 2 that "
                              "broadcast, or of 1 and a constant"}},
     .min_inputs = 1, .max_inputs = CK_MAX_INPUTS,
     .options = ck_op_binary_options,
     .infer = ck_op_binary_infer,
     .state = ck_op_binary_state,
     .backward_reads = CK_BWD_READS_NOTHING}, /* dx_i = dy (summed over broadcast dims) */
    {.kind = CK_OP_MUL,
     .spellings = {{"mul", 0, "element-wise product of 2 inputs (numpy broadcasting), or of 1 "
                              "and a constant"}},
     .min_inputs = 1, .max_inputs = 2,
     .inputs_rule = "1 (with a constant) or 2",
     .options = ck_op_binary_options,
     .infer = ck_op_binary_infer,
     .state = ck_op_binary_state,
     .backward_reads = CK_BWD_READS_INPUTS}, /* da = dy b, db = dy a */
    UNARY(CK_OP_SILU, "silu", "x * sigmoid(x)", NULL),
    {.kind = CK_OP_SQRT,
     .spellings = {{"sqrt", 0, "sqrt(x), NaN below 0 (as torch.sqrt)"}},
     .min_inputs = 1, .max_inputs = 1,
     .backward_reads = CK_BWD_READS_INPUTS, /* dx = dy / (2 sqrt(x)) */
     .input_domain = CK_DOMAIN_POSITIVE},
    {.kind = CK_OP_POSITIONAL,
     .spellings = {{"positional", 0,
                    "learned positions: x (N, L, ...) plus a weight (L, ...) shared by the "
                    "batch"}},
     .min_inputs = 1, .max_inputs = 1,
     .infer = positional_infer,
     .state = positional_state,
     .backward_reads = CK_BWD_READS_NOTHING, /* dx = dy, dW = sum over the batch of dy */
     .casts_params = true},
    /* the unary functions exporters emit (torch.sqrt, torch.rsqrt, ...), as PyTorch's:
     * outside their domain they give NaN or +-inf, as PyTorch does */
    {.kind = CK_OP_RSQRT,
     .spellings = {{"rsqrt", 0, "1 / sqrt(x), NaN below 0 (as torch.rsqrt)"}},
     .min_inputs = 1, .max_inputs = 1,
     .backward_reads = CK_BWD_READS_INPUTS, /* dx = -dy / (2 x sqrt(x)) */
     .input_domain = CK_DOMAIN_POSITIVE},
    {.kind = CK_OP_RECIPROCAL,
     .spellings = {{"reciprocal", 0, "1 / x (as torch.reciprocal)"}},
     .min_inputs = 1, .max_inputs = 1,
     .backward_reads = CK_BWD_READS_INPUTS, /* dx = -dy / x^2 */
     .input_domain = CK_DOMAIN_POSITIVE},
    UNARY(CK_OP_EXP, "exp", "exp(x)", NULL),
    {.kind = CK_OP_LOG,
     .spellings = {{"log", 0, "natural logarithm of x, NaN below 0 (as torch.log)"}},
     .min_inputs = 1, .max_inputs = 1,
     .backward_reads = CK_BWD_READS_INPUTS, /* dx = dy / x */
     .input_domain = CK_DOMAIN_POSITIVE},
    UNARY(CK_OP_NEG, "neg", "-x", NULL),
    UNARY(CK_OP_ERF, "erf", "the error function erf(x)", NULL),
    UNARY(CK_OP_ABS, "abs", "|x| (gradient sign(x), 0 at 0, as PyTorch)", NULL),
    {.kind = CK_OP_CAST,
     .spellings = {{"cast", 0,
                    "x rounded to the float dtype `to` (round to nearest even); the gradient "
                    "rounded to `from` (as x.to(dtype) in PyTorch)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = cast_options,
     .backward_reads = CK_BWD_READS_NOTHING}, /* dx = dy rounded to `from` */
};
CK_OP_ROWS_COUNT(ck_op_defs_pointwise);
