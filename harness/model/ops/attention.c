/*
 * The attention family's definitions (op_def.h): softmax, log_softmax, attention.
 */
#include "harness/model/op_rules.h"

static const ck_option_def softmax_options[] = {
    CK_OPT("dim", DIM, dim),
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
    return ck_op_resolve_dim(ck_op_display_name(op), "dim", op->dim, in[0].ndim, &op->dim, err);
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
     .spellings = {{"softmax", 0, "softmax over dim"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = softmax_options,
     .infer = softmax_infer,
     .backward_reads = CK_BWD_READS_INPUTS}, /* recomputes the probabilities from x */
    {.kind = CK_OP_LOG_SOFTMAX,
     .spellings = {{"log_softmax", 0, "log-softmax over dim"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = softmax_options,
     .infer = softmax_infer,
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
