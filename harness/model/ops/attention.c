/*
 * The attention family's definitions (op_def.h): softmax, log_softmax, attention.
 */
#include "harness/model/op_rules.h"

static const ck_option_def softmax_options[] = {
    CK_OPT("dim", DIM, dim),
    CK_OPT("mask_shape", SHAPE, const_shape, .count_offset = CK_OPT_FIELD(n_const),
           .type_text = "list of sizes", .default_text = "none (a buffer `mask` added to x)"),
    CK_OPTIONS_END,
};
static const ck_option_def attention_options[] = {
    CK_OPT("heads", SIZE, heads),
    CK_OPT("causal", BOOL, causal),
    CK_OPT("dropout", REAL, rate, .range = CK_RANGE_UNIT_HALF_OPEN),
    CK_OPT("scale", REAL, attn_scale, .range = CK_RANGE_POSITIVE, .default_text = "1/√d"),
    CK_OPTIONS_END,
};

static ck_status softmax_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                               ck_error *err)
{
    char s1[128], s2[128];
    CK_TRY(ck_op_resolve_dim(ck_op_display_name(op), "dim", op->dim, in[0].ndim, &op->dim, err));
    const ck_shape m = ck_shape_make(op->n_const, op->const_shape);
    ck_shape b;
    if (op->n_const > 0 && (!ck_op_broadcast_shapes(&in[0], &m, &b) || !ck_shape_equal(&b, &in[0])))
        return ck_fail(err, CK_ERR_INPUT, "%s: mask_shape %s does not broadcast to the input %s",
                       ck_op_display_name(op), ck_shape_str(&m, s1, sizeof s1),
                       ck_shape_str(&in[0], s2, sizeof s2));
    return CK_OK;
}

/* an additive mask: a constant buffer `mask` (0 and -inf for a causal or padding mask) */
static void softmax_state(ck_node *node, const ck_shape *in0)
{
    (void)in0;
    if (node->op.n_const > 0)
        node->buffers[node->n_buffers++] = ck_op_spec(
            "mask", ck_shape_make(node->op.n_const, node->op.const_shape), CK_F32, CK_INIT_CONST, 0.0);
}

/* q (N, Lq, H d), k (N, Lk, H d), v (N, Lk, H dv) -> (N, Lq, H dv) */
static ck_status attention_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                 ck_error *err)
{
    char q[128], k[128], v[128];
    const ck_shape *Q = &in[0], *K = n_in == 3 ? &in[1] : &in[0], *V = n_in == 3 ? &in[2] : &in[0];
    bool ok = Q->ndim == 3 && K->ndim == 3 && V->ndim == 3 && K->dim[0] == Q->dim[0] &&
              V->dim[0] == Q->dim[0] && K->dim[2] == Q->dim[2] && V->dim[1] == K->dim[1];
    if (!ok)
        return ck_fail(err, CK_ERR_INPUT,
                       "attention needs q (N, Lq, E), k (N, Lk, E), v (N, Lk, Ev), got q %s, "
                       "k %s, v %s",
                       ck_shape_str(Q, q, sizeof q), ck_shape_str(K, k, sizeof k),
                       ck_shape_str(V, v, sizeof v));
    if (Q->dim[2] % op->heads != 0 || V->dim[2] % op->heads != 0)
        return ck_fail(err, CK_ERR_INPUT,
                       "attention: heads %lld does not divide the feature dims of q %s and v %s",
                       (long long)op->heads, ck_shape_str(Q, q, sizeof q),
                       ck_shape_str(V, v, sizeof v));
    *y = *Q;
    y->dim[2] = V->dim[2];
    return CK_OK;
}

/* with dropout: one uniform word per probability (N, heads, Lq, Lk) */
static void attention_draws(ck_node *node, const ck_shape *in)
{
    if (node->op.rate <= 0.0)
        return;
    const ck_shape *k = node->n_in == 3 ? &in[1] : &in[0];
    node->draw_uniform = true;
    node->draw_elems = in[0].dim[0] * node->op.heads * in[0].dim[1] * k->dim[1];
}

const ck_op_def ck_op_defs_attention[] = {
    {.kind = CK_OP_SOFTMAX,
     .spellings = {{"softmax", 0, "softmax over dim, of x plus a constant mask when given"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = softmax_options,
     .infer = softmax_infer,
     .state = softmax_state,
     .backward_reads = CK_BWD_READS_INPUTS}, /* recomputes the probabilities from x */
    {.kind = CK_OP_LOG_SOFTMAX,
     .spellings = {{"log_softmax", 0, "log-softmax over dim, of x plus a constant mask when given"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = softmax_options,
     .infer = softmax_infer,
     .state = softmax_state,
     .backward_reads = CK_BWD_READS_INPUTS},
    {.kind = CK_OP_ATTENTION,
     .spellings = {{"attention", 0,
                    "scaled dot-product attention over q, k, v (N, L, heads * d), heads merged "
                    "in the output"}},
     .min_inputs = 1, .max_inputs = 3,
     .inputs_mask = (1u << 1) | (1u << 3),
     .inputs_rule = "1 (q = k = v) or 3 (q, k, v)",
     .options = attention_options,
     .infer = attention_infer,
     .draws = attention_draws,
     /* recomputes the probabilities from q, k and draws the dropout mask again */
     .backward_reads = CK_BWD_READS_INPUTS | CK_BWD_REDRAWS_MASK},
};
CK_OP_ROWS_COUNT(ck_op_defs_attention);
