/*
 * The linear family's definitions (op_def.h): linear, matmul, embedding.
 */
#include "harness/model/op_rules.h"

#include <math.h>
#include <string.h>

#define INIT_OPT CK_OPT("init", INIT, init)

/* ---- linear: y = x W^T + b over the last dim; W (units, in), b (units) ---- */

static const ck_option_def linear_options[] = {
    CK_OPT("units", SIZE, units, .required = true),
    CK_OPT("bias", BOOL, bias),
    INIT_OPT,
    CK_OPTIONS_END,
};

static ck_status linear_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                              ck_error *err)
{
    CK_TRY(ck_op_need_min_rank(op, &in[0], 2, "(N, ..., features)", err));
    y->dim[y->ndim - 1] = op->units;
    return CK_OK;
}

static void linear_state(ck_node *node, const ck_shape *in0)
{
    const ck_op_params *op = &node->op;
    int64_t fan_in = in0->dim[in0->ndim - 1];
    ck_op_weight_bias_specs(node, ck_op_shape2(2, op->units, fan_in), op->units,
                            (double)fan_in, (double)op->units);
}

/* ---- matmul: batched op(A) op(B), two inputs or one and a weight (K, units) ---- */

static const ck_option_def matmul_options[] = {
    CK_OPT("units", SIZE, units, .type_text = "size (one input only)",
           .default_text = "required with one input"),
    CK_OPT("transpose_a", BOOL, trans_a),
    CK_OPT("transpose_b", BOOL, trans_b, .type_text = "bool (two inputs only)"),
    CK_OPTIONS_END,
};

static ck_status matmul_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                              ck_error *err)
{
    char a[128], b[128];
    const ck_shape *A = &in[0];
    if (A->ndim < 2)
        return ck_fail(err, CK_ERR_INPUT, "matmul needs inputs of rank >= 2 (..., M, K), got %s",
                       ck_shape_str(A, a, sizeof a));
    const int64_t M = A->dim[A->ndim - (op->trans_a ? 1 : 2)];
    const int64_t K = A->dim[A->ndim - (op->trans_a ? 2 : 1)];
    int64_t N;
    if (n_in == 1) {
        N = op->units;
    } else {
        const ck_shape *B = &in[1];
        bool ok = B->ndim == 2 || B->ndim == A->ndim;
        for (int d = 0; ok && B->ndim == A->ndim && d < A->ndim - 2; d++)
            ok = B->dim[d] == A->dim[d];
        const int64_t kb = ok ? B->dim[B->ndim - (op->trans_b ? 1 : 2)] : -1;
        if (!ok || kb != K)
            return ck_fail(err, CK_ERR_INPUT,
                           "matmul: %s%s and %s%s do not multiply (B must be 2-D or share A's "
                           "leading dims, and its K must be A's)",
                           ck_shape_str(A, a, sizeof a), op->trans_a ? " transposed" : "",
                           ck_shape_str(B, b, sizeof b), op->trans_b ? " transposed" : "");
        N = B->dim[B->ndim - (op->trans_b ? 2 : 1)];
    }
    *y = *A;
    y->dim[y->ndim - 2] = M;
    y->dim[y->ndim - 1] = N;
    return CK_OK;
}

static void matmul_state(ck_node *node, const ck_shape *in0)
{
    const ck_op_params *op = &node->op;
    if (node->n_in != 1)
        return;
    /* weight (K, units): y = x @ W; PyTorch Linear's U(-1/sqrt(K), 1/sqrt(K)) */
    const int64_t K = in0->dim[in0->ndim - (op->trans_a ? 2 : 1)];
    node->params[node->n_params++] = ck_op_spec("weight", ck_op_shape2(2, K, op->units), CK_F32,
                                                CK_INIT_UNIFORM, 1.0 / sqrt((double)K));
}

/* ---- embedding: i32 ids (...) -> (..., units); weight (vocab, units) ---- */

static const ck_option_def embedding_options[] = {
    CK_OPT("vocab", SIZE, vocab, .required = true),
    CK_OPT("units", SIZE, units, .required = true),
    CK_OPTIONS_END,
};

static ck_status embedding_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                                 ck_error *err)
{
    char s[128];
    if (in[0].ndim + 1 > CK_MAX_DIMS)
        return ck_fail(err, CK_ERR_INPUT, "embedding of input %s: the output would have "
                                          "more than %d dims",
                       ck_shape_str(&in[0], s, sizeof s), CK_MAX_DIMS);
    y->ndim = in[0].ndim + 1;
    y->dim[y->ndim - 1] = op->units;
    return CK_OK;
}

static void embedding_state(ck_node *node, const ck_shape *in0)
{
    /* PyTorch nn.Embedding: N(0, 1) */
    node->params[node->n_params++] =
        ck_op_spec("weight", ck_op_shape2(2, node->op.vocab, node->op.units), CK_F32,
                   CK_INIT_NORMAL, 1.0);
}

const ck_op_def ck_op_defs_linear[] = {
    {.kind = CK_OP_LINEAR,
     .spellings = {{"linear", 0, "y = x W^T + b over the last dimension"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = linear_options,
     .infer = linear_infer,
     .state = linear_state,
     .backward_reads = CK_BWD_READS_INPUTS, /* dW = dy^T x */
     .casts_params = true},
    {.kind = CK_OP_MATMUL,
     .spellings = {{"matmul", 0,
                    "batched matrix product (..., M, K) x (..., K, N): two inputs, or one and "
                    "a weight (K, units)"}},
     .min_inputs = 1, .max_inputs = 2,
     .inputs_rule = "1 (with units) or 2",
     .options = matmul_options,
     .infer = matmul_infer,
     .state = matmul_state,
     .backward_reads = CK_BWD_READS_INPUTS, /* dA = dy B^T, dB = A^T dy */
     .casts_params = true},
    {.kind = CK_OP_EMBEDDING,
     .spellings = {{"embedding", 0, "token ids (i32, a \"tokens\" input) -> rows of a weight"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = embedding_options,
     .infer = embedding_infer,
     .state = embedding_state,
     .backward_reads = CK_BWD_READS_INPUTS, /* the ids pick the rows dW is added to */
     .casts_params = true},
};
CK_OP_ROWS_COUNT(ck_op_defs_linear);
