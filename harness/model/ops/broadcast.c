/*
 * The broadcast family's definitions (op_def.h): the binary ops with numpy broadcasting
 * (sub, div, maximum, minimum; pow with a constant exponent; masked_fill with a constant
 * mask), expand, and the reductions sum, mean and amax over dims. add and mul are
 * pointwise rows that share this file's rule (ck_op_binary_infer) for two shapes that
 * broadcast or a constant operand.
 *
 * A constant operand is the op's `scalar`, or a buffer `constant` of shape
 * `constant_shape` (masked_fill: `mask`, `mask_shape`): not trained, filled with `scalar`
 * (1 when none; a mask with 0) unless `init.from` gives its values, as the ONNX importer's
 * weights file does for an initializer. A tensor constant is the op's operand; `scalar`
 * is then only its fill value.
 */
#include "harness/model/op_rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ck_shape const_shape(const ck_op_params *op)
{
    return ck_shape_make(op->n_const, op->const_shape);
}

ck_status ck_op_binary_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                             ck_error *err)
{
    const char *name = ck_op_display_name(op);
    char s1[128], s2[128];
    const bool has_scalar = !isnan(op->scalar), has_tensor = op->n_const > 0;
    if (n_in > 2) /* add of 3 to 8 inputs: one shape (ck_op_check_join_shapes) */
        return ck_op_check_join_shapes(op, n_in, in, NULL, err);
    if (n_in == 2 && (has_scalar || has_tensor))
        return ck_fail(err, CK_ERR_INPUT, "%s: `scalar` and `constant_shape` are for a layer "
                       "with one input; this one has two", name);
    if (n_in == 1 && !has_scalar && !has_tensor)
        return ck_fail(err, CK_ERR_INPUT, "%s with one input needs a constant operand: "
                       "`scalar` or `constant_shape` (a tensor filled with `scalar`)", name);
    const ck_shape other = n_in == 2 ? in[1] : has_tensor ? const_shape(op) : ck_shape_make(0, NULL);
    if (!ck_op_broadcast_shapes(&in[0], &other, y)) {
        ck_shape_str(&in[0], s1, sizeof s1);
        ck_shape_str(&other, s2, sizeof s2);
        if (n_in == 2)
            return ck_fail(err, CK_ERR_INPUT, "inputs input 0 %s and input 1 %s differ in shape "
                           "and do not broadcast (%s; numpy rules: dims aligned from the right, "
                           "equal or 1)", s1, s2, name);
        return ck_fail(err, CK_ERR_INPUT, "%s: the input %s and the constant %s do not "
                       "broadcast (numpy rules: dims aligned from the right, equal or 1)", name,
                       s1, s2);
    }
    if (y->ndim < 1)
        return ck_fail(err, CK_ERR_INPUT, "%s: the output would be a 0-d scalar", name);
    op->broadcast = n_in == 1 || !ck_shape_equal(&in[0], &in[1]);
    return CK_OK;
}

void ck_op_binary_state(ck_node *node, const ck_shape *in0)
{
    (void)in0;
    const ck_op_params *op = &node->op;
    if (op->n_const <= 0)
        return;
    const bool mask = op->kind == CK_OP_MASKED_FILL;
    const double fill = mask ? 0.0 : isnan(op->scalar) ? 1.0 : op->scalar;
    node->buffers[node->n_buffers++] =
        ck_op_spec(mask ? "mask" : "constant", const_shape(op), CK_F32, CK_INIT_CONST, fill);
}

/* ---- options ---- */

#define CONSTANT_OPTIONS                                                                   \
    CK_OPT("scalar", REAL, scalar, .range = CK_RANGE_ANY_FINITE,                            \
           .type_text = "number", .default_text = "none (one input: this or constant_shape)"), \
    CK_OPT("constant_shape", SHAPE, const_shape, .count_offset = CK_OPT_FIELD(n_const),      \
           .type_text = "list of sizes", .default_text = "none (a buffer `constant`)")

const ck_option_def ck_op_binary_options[] = {
    CONSTANT_OPTIONS,
    CK_OPTIONS_END,
};

/* sub and div: the constant may be the left operand (c - x, c / x) */
static const ck_option_def ordered_options[] = {
    CONSTANT_OPTIONS,
    CK_OPT("constant_first", BOOL, const_first),
    CK_OPTIONS_END,
};

static const ck_option_def pow_options[] = {
    CK_OPT("exponent", REAL, scalar, .required = true, .range = CK_RANGE_ANY_FINITE),
    CK_OPTIONS_END,
};

static const ck_option_def masked_fill_options[] = {
    CK_OPT("mask_shape", SHAPE, const_shape, .required = true,
           .count_offset = CK_OPT_FIELD(n_const), .type_text = "list of sizes",
           .default_text = "required (a buffer `mask`, nonzero: fill)"),
    CK_OPT("value", REAL, scalar, .required = true, .range = CK_RANGE_ANY_FINITE),
    CK_OPTIONS_END,
};

static const ck_option_def expand_options[] = {
    CK_OPT("shape", SHAPE, shape, .required = true, .range = {-1.0, INFINITY, false, false},
           .count_offset = CK_OPT_FIELD(n_shape)),
    CK_OPTIONS_END,
};

static const ck_option_def reduce_options[] = {
    CK_OPT("dim", DIMLIST, axes, .required = true, .count_offset = CK_OPT_FIELD(n_axes),
           .type_text = "list of dims"),
    CK_OPT("keepdim", BOOL, keepdim),
    CK_OPTIONS_END,
};

/* ---- shape rules ---- */

static ck_status pow_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                           ck_error *err)
{
    (void)op;
    (void)n_in;
    (void)err;
    *y = in[0];
    return CK_OK;
}

static ck_status masked_fill_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                   ck_error *err)
{
    char s1[128], s2[128];
    const ck_shape m = const_shape(op);
    if (!ck_op_broadcast_shapes(&in[0], &m, y) || !ck_shape_equal(y, &in[0]))
        return ck_fail(err, CK_ERR_INPUT, "masked_fill: mask_shape %s does not broadcast to the "
                       "input %s", ck_shape_str(&m, s1, sizeof s1),
                       ck_shape_str(&in[0], s2, sizeof s2));
    return CK_OK;
}

static ck_status expand_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                              ck_error *err)
{
    char s1[128], s2[128];
    const ck_shape *x = &in[0];
    ck_shape want = ck_shape_make(op->n_shape, op->shape);
    bool ok = op->n_shape >= x->ndim;
    for (int d = 0; ok && d < op->n_shape; d++) {
        const int src = d - (op->n_shape - x->ndim);
        const int64_t have = src >= 0 ? x->dim[src] : 1;
        if (op->shape[d] == -1)
            ok = src >= 0; /* -1 keeps an existing dim */
        want.dim[d] = op->shape[d] == -1 ? have : op->shape[d];
        ok = ok && (have == 1 || have == want.dim[d]);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INPUT, "expand: the input %s cannot expand to shape %s "
                       "(dims aligned from the right; only a size-1 dim grows; -1 keeps a dim)",
                       ck_shape_str(x, s1, sizeof s1), ck_shape_str(&want, s2, sizeof s2));
    for (int d = 0; d < op->n_shape; d++)
        op->shape[d] = want.dim[d];
    *y = want;
    return CK_OK;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static ck_status reduce_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                              ck_error *err)
{
    const char *name = ck_op_display_name(op);
    const ck_shape *x = &in[0];
    bool reduced[CK_OP_MAX_DIMS] = {false};
    for (int a = 0; a < op->n_axes; a++) {
        int d = 0;
        CK_TRY(ck_op_resolve_dim(name, "dim entry", op->axes[a], x->ndim, &d, err));
        if (reduced[d])
            return ck_fail(err, CK_ERR_INPUT, "%s: dim lists dim %d twice", name, d);
        reduced[d] = true;
        op->axes[a] = d;
    }
    qsort(op->axes, (size_t)op->n_axes, sizeof op->axes[0], cmp_int);
    memset(y, 0, sizeof *y);
    for (int d = 0; d < x->ndim; d++)
        if (!reduced[d] || op->keepdim)
            y->dim[y->ndim++] = reduced[d] ? 1 : x->dim[d];
    if (y->ndim == 0)
        return ck_fail(err, CK_ERR_INPUT, "%s over every dim gives a 0-d scalar: set "
                       "\"keepdim\": true, or keep a dim", name);
    return CK_OK;
}

/* ---- the rows ---- */

#define BINARY(k, name, summary, opts, reads, domain)                                       \
    {.kind = k, .spellings = {{name, 0, summary}}, .min_inputs = 1, .max_inputs = 2,        \
     .inputs_rule = "1 (with a constant) or 2", .options = opts,                            \
     .infer = ck_op_binary_infer, .state = ck_op_binary_state, .backward_reads = reads,     \
     .input_domain = domain}

const ck_op_def ck_op_defs_broadcast[] = {
    BINARY(CK_OP_SUB, "sub", "a - b with numpy broadcasting, or x - c / c - x for a constant c",
           ordered_options, CK_BWD_READS_NOTHING, CK_DOMAIN_REAL), /* da = dy, db = -dy */
    BINARY(CK_OP_DIV, "div", "a / b with numpy broadcasting, or x / c / c / x for a constant c",
           ordered_options, CK_BWD_READS_INPUTS, CK_DOMAIN_POSITIVE),
    BINARY(CK_OP_MAXIMUM, "maximum",
           "torch.maximum(a, b) with broadcasting; ties share the gradient equally",
           ck_op_binary_options, CK_BWD_READS_INPUTS, CK_DOMAIN_REAL),
    BINARY(CK_OP_MINIMUM, "minimum",
           "torch.minimum(a, b) with broadcasting; ties share the gradient equally",
           ck_op_binary_options, CK_BWD_READS_INPUTS, CK_DOMAIN_REAL),
    {.kind = CK_OP_POW,
     .spellings = {{"pow", 0, "x ** exponent, a constant exponent (as torch.pow)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = pow_options,
     .infer = pow_infer,
     .backward_reads = CK_BWD_READS_INPUTS, /* dx = dy p x^(p-1) */
     .input_domain = CK_DOMAIN_POSITIVE},
    {.kind = CK_OP_MASKED_FILL,
     .spellings = {{"masked_fill", 0,
                    "value where a constant mask (buffer `mask`, broadcast) is nonzero, else x"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = masked_fill_options,
     .infer = masked_fill_infer,
     .state = ck_op_binary_state,
     .backward_reads = CK_BWD_READS_NOTHING}, /* dx = dy where the mask is 0 */
    {.kind = CK_OP_EXPAND,
     .spellings = {{"expand", 0, "x broadcast to a shape (size-1 dims grow; -1 keeps a dim)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = expand_options,
     .infer = expand_infer,
     .backward_reads = CK_BWD_READS_NOTHING}, /* dx = dy summed over the grown dims */
    {.kind = CK_OP_REDUCE_SUM,
     .spellings = {{"sum", 0, "sum over dims (torch.sum(x, dim, keepdim))"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = reduce_options,
     .infer = reduce_infer,
     .backward_reads = CK_BWD_READS_NOTHING},
    {.kind = CK_OP_REDUCE_MEAN,
     .spellings = {{"mean", 0, "mean over dims (torch.mean(x, dim, keepdim))"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = reduce_options,
     .infer = reduce_infer,
     .backward_reads = CK_BWD_READS_NOTHING},
    {.kind = CK_OP_REDUCE_MAX,
     .spellings = {{"amax", 0,
                    "max over dims (torch.amax; ties share the gradient equally)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = reduce_options,
     .infer = reduce_infer,
     .backward_reads = CK_BWD_READS_INPUTS | CK_BWD_READS_OUTPUT},
};
CK_OP_ROWS_COUNT(ck_op_defs_broadcast);
