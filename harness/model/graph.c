/*
 * The model graph: per-op shape inference (ck_op_infer), parameter/buffer/saved specs
 * (ck_op_state_specs) and the graph a case turns into (ck_graph_build: resolved padding,
 * output and target shapes, consumers). Rules per op are documented in cases/README.md.
 */
#include "harness/model/graph.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name a case writes for this op ("conv2d"), for messages. */
static const char *op_display_name(const ck_op_params *op)
{
    int count = 0;
    const ck_op_info *cat = ck_op_catalogue(&count);
    for (int i = 0; i < count; i++)
        if (cat[i].kind == op->kind && cat[i].nsp == op->nsp)
            return cat[i].name;
    return ck_op_kind_name(op->kind);
}

static const char *spatial_layout(int nsp)
{
    switch (nsp) {
    case 1: return "(N, C, L)";
    case 2: return "(N, C, H, W)";
    case 3: return "(N, C, D, H, W)";
    default: return "(N, C, ...)";
    }
}

static bool op_takes_many_inputs(ck_op_kind kind)
{
    return kind == CK_OP_ADD || kind == CK_OP_CONCAT;
}

/* ------------------------------------------------------------------------------------ */
/* Shape inference                                                                       */
/* ------------------------------------------------------------------------------------ */

static ck_status need_min_rank(const ck_op_params *op, const ck_shape *in, int min_rank,
                               const char *layout, ck_error *err)
{
    char s[128];
    if (in->ndim >= min_rank)
        return CK_OK;
    return ck_fail(err, CK_ERR_INPUT, "%s needs an input of rank >= %d %s, got %s",
                   op_display_name(op), min_rank, layout, ck_shape_str(in, s, sizeof s));
}

static ck_status need_spatial_rank(const ck_op_params *op, const ck_shape *in, ck_error *err)
{
    char s[128];
    if (in->ndim == 2 + op->nsp)
        return CK_OK;
    return ck_fail(err, CK_ERR_INPUT, "%s needs a rank-%d input %s, got %s", op_display_name(op),
                   2 + op->nsp, spatial_layout(op->nsp), ck_shape_str(in, s, sizeof s));
}

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

/* Input i as a message names it: "up" [2, 4, 8] or input 1 [2, 4, 8]. */
static const char *input_label(const char *const *names, int i, const ck_shape *s, char *buf,
                               size_t n)
{
    char dims[128];
    ck_shape_str(s, dims, sizeof dims);
    if (names)
        snprintf(buf, n, "\"%s\" %s", names[i], dims);
    else
        snprintf(buf, n, "input %d %s", i, dims);
    return buf;
}

/* add: one shape for all; concat: rank >= 2 and equal dims except dim 1. names may be
 * NULL (inputs are then named by position). */
static ck_status check_join_shapes(const ck_op_params *op, int n_in, const ck_shape *in,
                                   const char *const *names, ck_error *err)
{
    char a[200], b[200];
    if (op->kind == CK_OP_CONCAT && in[0].ndim < 2)
        return ck_fail(err, CK_ERR_INPUT, "concat needs inputs of rank >= 2 (N, C, ...), got %s",
                       input_label(names, 0, &in[0], a, sizeof a));
    for (int i = 1; i < n_in; i++) {
        if (op->kind == CK_OP_ADD) {
            if (!ck_shape_equal(&in[0], &in[i]))
                return ck_fail(err, CK_ERR_INPUT,
                               "inputs %s and %s differ in shape (add needs one shape)",
                               input_label(names, 0, &in[0], a, sizeof a),
                               input_label(names, i, &in[i], b, sizeof b));
            continue;
        }
        bool same = in[i].ndim == in[0].ndim;
        for (int d = 0; same && d < in[0].ndim; d++)
            if (d != 1 && in[i].dim[d] != in[0].dim[d])
                same = false;
        if (!same)
            return ck_fail(err, CK_ERR_INPUT,
                           "inputs %s and %s differ outside dim 1 (concat joins channels only)",
                           input_label(names, 0, &in[0], a, sizeof a),
                           input_label(names, i, &in[i], b, sizeof b));
    }
    return CK_OK;
}

/* ---- issue 18 ops ---- */

/* dim as written (negative from the end) -> [0, ndim) */
static ck_status resolve_dim(const char *op, const char *what, int dim, int ndim, int *out,
                             ck_error *err)
{
    int d = dim < 0 ? ndim + dim : dim;
    if (d < 0 || d >= ndim)
        return ck_fail(err, CK_ERR_INPUT, "%s: %s %d is out of range for an input of rank %d",
                       op, what, dim, ndim);
    *out = d;
    return CK_OK;
}

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
                       "in layernorm to normalise every non-batch dim, the pre-issue-18 rule)",
                       ck_op_kind_name(op->kind), ck_shape_str(&want, ns, sizeof ns),
                       ck_shape_str(x, s, sizeof s));
    return CK_OK;
}

static ck_status infer_matmul(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
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

static ck_status infer_attention(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
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

static ck_status infer_reshape(ck_op_params *op, const ck_shape *x, ck_shape *y, ck_error *err)
{
    char s[128], t[128];
    ck_shape want = ck_shape_make(op->n_shape, op->shape);
    int64_t known = 1, n = ck_shape_numel(x);
    int infer_at = -1;
    for (int d = 0; d < op->n_shape; d++) {
        if (op->shape[d] == -1)
            infer_at = d;
        else if (__builtin_mul_overflow(known, op->shape[d], &known))
            known = INT64_MAX;
    }
    if (infer_at >= 0 && known > 0 && n % known == 0)
        want.dim[infer_at] = n / known;
    if ((infer_at >= 0 && (known <= 0 || n % known != 0)) ||
        (infer_at < 0 && known != n))
        return ck_fail(err, CK_ERR_INPUT,
                       "reshape: input %s (%lld elements) cannot take shape %s", 
                       ck_shape_str(x, s, sizeof s), (long long)n,
                       ck_shape_str(&want, t, sizeof t));
    for (int d = 0; d < op->n_shape; d++)
        op->shape[d] = want.dim[d];
    *y = want;
    return CK_OK;
}

static ck_status infer_permute(ck_op_params *op, const ck_shape *x, ck_shape *y, ck_error *err)
{
    char s[128];
    if (op->n_perm == 0) { /* transpose(dim0, dim1) */
        int a = 0, b = 0;
        CK_TRY(resolve_dim("transpose", "dim0", op->dim0, x->ndim, &a, err));
        CK_TRY(resolve_dim("transpose", "dim1", op->dim1, x->ndim, &b, err));
        for (int d = 0; d < x->ndim; d++)
            op->perm[d] = d;
        op->perm[a] = b;
        op->perm[b] = a;
        op->n_perm = x->ndim;
    } else {
        if (op->n_perm != x->ndim)
            return ck_fail(err, CK_ERR_INPUT,
                           "permute: dims has %d entries, the input %s has rank %d", op->n_perm,
                           ck_shape_str(x, s, sizeof s), x->ndim);
        unsigned seen = 0;
        for (int d = 0; d < op->n_perm; d++) {
            int p = 0;
            CK_TRY(resolve_dim("permute", "dims entry", op->perm[d], x->ndim, &p, err));
            if (seen & (1u << p))
                return ck_fail(err, CK_ERR_INPUT, "permute: dims repeats dim %d (it must be a "
                                                  "permutation of 0 .. %d)",
                               p, x->ndim - 1);
            seen |= 1u << p;
            op->perm[d] = p;
        }
    }
    *y = *x;
    for (int d = 0; d < x->ndim; d++)
        y->dim[d] = x->dim[op->perm[d]];
    return CK_OK;
}

ck_status ck_op_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *out,
                      ck_error *err)
{
    char s[128];
    ck_status st = CK_OK;
    const char *name = op_display_name(op);

    int in_lo = 1, in_hi = 1;
    ck_op_input_range(op->kind, &in_lo, &in_hi);
    if (op_takes_many_inputs(op->kind)) {
        if (n_in < 2 || n_in > CK_MAX_INPUTS)
            return ck_fail(err, CK_ERR_INPUT, "%s needs 2 to %d inputs, got %d", name,
                           CK_MAX_INPUTS, n_in);
    } else if (in_hi > 1) {
        if (n_in < in_lo || n_in > in_hi || (op->kind == CK_OP_ATTENTION && n_in == 2))
            return ck_fail(err, CK_ERR_INPUT, "%s takes %s inputs, got %d", name,
                           op->kind == CK_OP_ATTENTION ? "1 (q = k = v) or 3 (q, k, v)"
                           : op->kind == CK_OP_MATMUL  ? "1 (with units) or 2"
                                                       : "exactly 2",
                           n_in);
    } else if (n_in != 1) {
        return ck_fail(err, CK_ERR_INPUT, "%s takes exactly one input, got %d", name, n_in);
    }
    for (int i = 0; i < n_in; i++)
        if (in[i].ndim < 1 || !ck_shape_numel_checked(&in[i], 8, NULL))
            return ck_fail(err, CK_ERR_INPUT, "input %d has an invalid shape %s", i,
                           ck_shape_str(&in[i], s, sizeof s));
    for (int d = 0; d < CK_MAX_SPATIAL; d++)
        op->pad_lo[d] = op->pad_hi[d] = 0;

    ck_shape y = in[0];
    switch (op->kind) {
    case CK_OP_LINEAR:
        if ((st = need_min_rank(op, &in[0], 2, "(N, ..., features)", err)) != CK_OK)
            return st;
        y.dim[y.ndim - 1] = op->units;
        break;
    case CK_OP_CONV:
        if ((st = need_spatial_rank(op, &in[0], err)) != CK_OK)
            return st;
        y.dim[1] = op->filters;
        for (int d = 0; d < op->nsp; d++)
            if ((st = infer_conv_dim(op, d, in[0].dim[2 + d], &y.dim[2 + d], err)) != CK_OK)
                return st;
        break;
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL:
        if ((st = need_spatial_rank(op, &in[0], err)) != CK_OK)
            return st;
        for (int d = 0; d < op->nsp; d++) {
            int64_t len = in[0].dim[2 + d];
            int64_t p = op->pad_mode == CK_PAD_EXPLICIT ? op->pad[d] : 0;
            if (2 * p > op->kernel[d])
                return ck_fail(err, CK_ERR_INPUT,
                               "pool padding %lld is more than half the window %d in spatial dim "
                               "%d",
                               (long long)p, op->kernel[d], d);
            if (op->kernel[d] > len + 2 * p)
                return ck_fail(err, CK_ERR_INPUT,
                               "pool window %d is larger than the input %lld in spatial dim %d",
                               op->kernel[d], (long long)len, d);
            op->pad_lo[d] = op->pad_hi[d] = (int)p;
            y.dim[2 + d] = (len + 2 * p - op->kernel[d]) / op->stride[d] + 1;
        }
        break;
    case CK_OP_UPSAMPLE:
        if ((st = need_spatial_rank(op, &in[0], err)) != CK_OK)
            return st;
        for (int d = 0; d < op->nsp; d++)
            if (__builtin_mul_overflow(in[0].dim[2 + d], (int64_t)op->scale[d], &y.dim[2 + d]))
                return ck_fail(err, CK_ERR_INPUT, "upsampling %s by %d overflows in spatial dim %d",
                               ck_shape_str(&in[0], s, sizeof s), op->scale[d], d);
        break;
    case CK_OP_RELU:
    case CK_OP_LEAKY_RELU:
    case CK_OP_GELU:
    case CK_OP_TANH:
    case CK_OP_SIGMOID:
    case CK_OP_DROPOUT:
    case CK_OP_GAUSSIAN_NOISE:
        break;
    case CK_OP_BATCHNORM: {
        if ((st = need_min_rank(op, &in[0], 2, "(N, C, ...)", err)) != CK_OK)
            return st;
        /* As PyTorch: batch statistics of a single value per channel are meaningless. */
        int64_t per_channel = ck_shape_numel(&in[0]) / in[0].dim[1];
        if (!op->eval && per_channel < 2)
            return ck_fail(err, CK_ERR_INPUT,
                           "batchnorm in training needs more than 1 value per channel, got "
                           "input %s (use a larger batch or \"eval\": true)",
                           ck_shape_str(&in[0], s, sizeof s));
        break;
    }
    case CK_OP_LAYERNORM:
        if ((st = need_min_rank(op, &in[0], 2, "(N, ...)", err)) != CK_OK)
            return st;
        if (op->n_norm > 0 && (st = check_norm_shape(op, &in[0], err)) != CK_OK)
            return st;
        break;
    case CK_OP_RMSNORM:
        if (op->n_norm == 0) { /* default: the last dim */
            op->n_norm = 1;
            op->norm_shape[0] = in[0].dim[in[0].ndim - 1];
        }
        if ((st = check_norm_shape(op, &in[0], err)) != CK_OK)
            return st;
        break;
    case CK_OP_GROUPNORM:
        if ((st = need_min_rank(op, &in[0], 2, "(N, C, ...)", err)) != CK_OK)
            return st;
        if (op->groups < 1 || in[0].dim[1] % op->groups != 0)
            return ck_fail(err, CK_ERR_INPUT,
                           "groupnorm: groups %lld does not divide the %lld channels of input %s",
                           (long long)op->groups, (long long)in[0].dim[1],
                           ck_shape_str(&in[0], s, sizeof s));
        break;
    case CK_OP_SILU:
        break;
    case CK_OP_POSITIONAL:
        if ((st = need_min_rank(op, &in[0], 2, "(N, L, ...)", err)) != CK_OK)
            return st;
        break;
    case CK_OP_MUL:
        if (!ck_shape_equal(&in[0], &in[1])) {
            char s2[128];
            return ck_fail(err, CK_ERR_INPUT,
                           "mul needs two inputs of one shape, got %s and %s",
                           ck_shape_str(&in[0], s, sizeof s), ck_shape_str(&in[1], s2, sizeof s2));
        }
        break;
    case CK_OP_SOFTMAX:
    case CK_OP_LOG_SOFTMAX:
        if ((st = resolve_dim(name, "dim", op->dim, in[0].ndim, &op->dim, err)) != CK_OK)
            return st;
        break;
    case CK_OP_MATMUL:
        if ((st = infer_matmul(op, n_in, in, &y, err)) != CK_OK)
            return st;
        break;
    case CK_OP_ATTENTION:
        if ((st = infer_attention(op, n_in, in, &y, err)) != CK_OK)
            return st;
        break;
    case CK_OP_EMBEDDING:
        if (in[0].ndim + 1 > CK_MAX_DIMS)
            return ck_fail(err, CK_ERR_INPUT, "embedding of input %s: the output would have "
                                              "more than %d dims",
                           ck_shape_str(&in[0], s, sizeof s), CK_MAX_DIMS);
        y.ndim = in[0].ndim + 1;
        y.dim[y.ndim - 1] = op->units;
        break;
    case CK_OP_RESHAPE:
        if ((st = infer_reshape(op, &in[0], &y, err)) != CK_OK)
            return st;
        break;
    case CK_OP_PERMUTE:
        if ((st = infer_permute(op, &in[0], &y, err)) != CK_OK)
            return st;
        break;
    case CK_OP_CONV_TRANSPOSE:
        if ((st = need_spatial_rank(op, &in[0], err)) != CK_OK)
            return st;
        y.dim[1] = op->filters;
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
            y.dim[2 + d] = len;
        }
        break;
    case CK_OP_ADD:
        if ((st = check_join_shapes(op, n_in, in, NULL, err)) != CK_OK)
            return st;
        break;
    case CK_OP_CONCAT:
        if ((st = check_join_shapes(op, n_in, in, NULL, err)) != CK_OK)
            return st;
        for (int i = 1; i < n_in; i++)
            if (__builtin_add_overflow(y.dim[1], in[i].dim[1], &y.dim[1]))
                return ck_fail(err, CK_ERR_INPUT, "concatenated channel count overflows");
        break;
    case CK_OP_FLATTEN:
        if ((st = need_min_rank(op, &in[0], 2, "(N, ...)", err)) != CK_OK)
            return st;
        y.ndim = 2;
        y.dim[1] = ck_shape_numel(&in[0]) / in[0].dim[0];
        for (int d = 2; d < CK_MAX_DIMS; d++)
            y.dim[d] = 0;
        break;
    case CK_OP_KIND_COUNT:
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "unknown op kind %d", (int)op->kind);
    }
    if (!ck_shape_numel_checked(&y, 8, NULL))
        return ck_fail(err, CK_ERR_INPUT, "output shape %s is too large",
                       ck_shape_str(&y, s, sizeof s));
    *out = y;
    return CK_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Parameter, buffer and saved specs                                                     */
/* ------------------------------------------------------------------------------------ */

static ck_param_spec make_spec(const char *suffix, ck_shape shape, ck_dtype dtype,
                               ck_init_kind init, double a)
{
    ck_param_spec p;
    p.suffix = suffix;
    p.shape = shape;
    p.dtype = dtype;
    p.init = init;
    p.a = a;
    return p;
}

static ck_shape shape_of(int ndim, int64_t d0, int64_t d1)
{
    ck_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    s.dim[0] = d0;
    s.dim[1] = d1;
    return s;
}

void ck_op_state_specs(ck_node *node, const ck_shape *in0)
{
    const ck_op_params *op = &node->op;
    node->n_params = 0;
    node->n_buffers = 0;
    node->has_saved = false;
    memset(&node->saved_shape, 0, sizeof node->saved_shape);

    switch (op->kind) {
    case CK_OP_LINEAR: {
        /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
        int64_t fan_in = in0->dim[in0->ndim - 1];
        double a = 1.0 / sqrt((double)fan_in);
        node->params[node->n_params++] = make_spec(
            "weight", shape_of(2, op->units, fan_in), CK_F32, CK_INIT_UNIFORM, a);
        if (op->bias)
            node->params[node->n_params++] =
                make_spec("bias", shape_of(1, op->units, 0), CK_F32, CK_INIT_UNIFORM, a);
        break;
    }
    case CK_OP_CONV: {
        int64_t channels = in0->dim[1];
        double fan_in = (double)channels;
        ck_shape w = shape_of(2 + op->nsp, op->filters, channels);
        for (int d = 0; d < op->nsp; d++) {
            w.dim[2 + d] = op->kernel[d];
            fan_in *= op->kernel[d];
        }
        double a = 1.0 / sqrt(fan_in);
        node->params[node->n_params++] = make_spec("weight", w, CK_F32, CK_INIT_UNIFORM, a);
        if (op->bias)
            node->params[node->n_params++] =
                make_spec("bias", shape_of(1, op->filters, 0), CK_F32, CK_INIT_UNIFORM, a);
        break;
    }
    case CK_OP_BATCHNORM: {
        ck_shape c = shape_of(1, in0->dim[1], 0);
        node->params[node->n_params++] = make_spec("weight", c, CK_F32, CK_INIT_CONST, 1.0);
        node->params[node->n_params++] = make_spec("bias", c, CK_F32, CK_INIT_CONST, 0.0);
        node->buffers[node->n_buffers++] =
            make_spec("running_mean", c, CK_F32, CK_INIT_CONST, 0.0);
        node->buffers[node->n_buffers++] =
            make_spec("running_var", c, CK_F32, CK_INIT_CONST, 1.0);
        node->buffers[node->n_buffers++] =
            make_spec("num_batches_tracked", shape_of(0, 0, 0), CK_I64, CK_INIT_CONST, 0.0);
        node->has_saved = true;
        node->saved_shape = shape_of(2, 2, in0->dim[1]); /* mean, invstd per channel */
        break;
    }
    case CK_OP_LAYERNORM: {
        ck_shape rest;
        memset(&rest, 0, sizeof rest);
        if (op->n_norm > 0) {
            rest = ck_shape_make(op->n_norm, op->norm_shape);
        } else {
            rest.ndim = in0->ndim - 1;
            for (int d = 1; d < in0->ndim; d++)
                rest.dim[d - 1] = in0->dim[d];
        }
        node->params[node->n_params++] = make_spec("weight", rest, CK_F32, CK_INIT_CONST, 1.0);
        node->params[node->n_params++] = make_spec("bias", rest, CK_F32, CK_INIT_CONST, 0.0);
        node->has_saved = true;
        /* mean, invstd per normalised row */
        node->saved_shape = shape_of(2, 2, ck_shape_numel(in0) / ck_shape_numel(&rest));
        break;
    }
    case CK_OP_RMSNORM:
        node->params[node->n_params++] = make_spec(
            "weight", ck_shape_make(op->n_norm, op->norm_shape), CK_F32, CK_INIT_CONST, 1.0);
        break;
    case CK_OP_GROUPNORM: {
        ck_shape c = shape_of(1, in0->dim[1], 0);
        node->params[node->n_params++] = make_spec("weight", c, CK_F32, CK_INIT_CONST, 1.0);
        node->params[node->n_params++] = make_spec("bias", c, CK_F32, CK_INIT_CONST, 0.0);
        break;
    }
    case CK_OP_MATMUL: {
        if (node->n_in != 1)
            break;
        /* weight (K, units): y = x @ W; PyTorch Linear's U(-1/sqrt(K), 1/sqrt(K)) */
        const int64_t K = in0->dim[in0->ndim - (op->trans_a ? 2 : 1)];
        node->params[node->n_params++] = make_spec("weight", shape_of(2, K, op->units), CK_F32,
                                                   CK_INIT_UNIFORM, 1.0 / sqrt((double)K));
        break;
    }
    case CK_OP_EMBEDDING:
        /* PyTorch nn.Embedding: N(0, 1) */
        node->params[node->n_params++] = make_spec("weight", shape_of(2, op->vocab, op->units),
                                                   CK_F32, CK_INIT_NORMAL, 1.0);
        break;
    case CK_OP_POSITIONAL:
        /* weight (L, ...) = x[1:]; N(0, 1) as an nn.Embedding of positions */
        node->params[node->n_params++] =
            make_spec("weight", ck_shape_make(in0->ndim - 1, in0->dim + 1), CK_F32,
                      CK_INIT_NORMAL, 1.0);
        break;
    case CK_OP_CONV_TRANSPOSE: {
        /* weight (C_in, F, k...); PyTorch's fan_in is weight.size(1) * prod(k) = F * prod(k) */
        const int64_t channels = in0->dim[1];
        double fan_in = (double)op->filters;
        ck_shape w = shape_of(2 + op->nsp, channels, op->filters);
        for (int d = 0; d < op->nsp; d++) {
            w.dim[2 + d] = op->kernel[d];
            fan_in *= op->kernel[d];
        }
        const double a = 1.0 / sqrt(fan_in);
        node->params[node->n_params++] = make_spec("weight", w, CK_F32, CK_INIT_UNIFORM, a);
        if (op->bias)
            node->params[node->n_params++] =
                make_spec("bias", shape_of(1, op->filters, 0), CK_F32, CK_INIT_UNIFORM, a);
        break;
    }
    default:
        break;
    }
}

void ck_op_draw_specs(ck_node *node, const ck_shape *in)
{
    node->draw_elems = 0;
    node->draw_uniform = false;
    switch (node->op.kind) {
    case CK_OP_DROPOUT:
        node->draw_uniform = true;
        node->draw_elems = ck_shape_numel(&node->out_shape);
        break;
    case CK_OP_GAUSSIAN_NOISE:
        node->draw_elems = ck_shape_numel(&node->out_shape);
        break;
    case CK_OP_ATTENTION:
        if (node->op.rate > 0.0) {
            const ck_shape *k = node->n_in == 3 ? &in[1] : &in[0];
            node->draw_uniform = true;
            node->draw_elems = in[0].dim[0] * node->op.heads * in[0].dim[1] * k->dim[1];
        }
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------------------ */
/* The graph                                                                             */
/* ------------------------------------------------------------------------------------ */

static ck_status check_state_sizes(const ck_node *node, ck_error *err)
{
    char s[128];
    for (int p = 0; p < node->n_params; p++)
        if (!ck_shape_numel_checked(&node->params[p].shape, 8, NULL))
            return ck_fail(err, CK_ERR_INPUT, "%s shape %s is too large", node->params[p].suffix,
                           ck_shape_str(&node->params[p].shape, s, sizeof s));
    return CK_OK;
}

static ck_status infer_target(const ck_case *c, ck_graph *g, ck_error *err)
{
    char s[128];
    const ck_shape *y = &g->output_shape;
    memset(&g->target_shape, 0, sizeof g->target_shape);
    g->loss_spec.kind = c->loss;
    g->loss_spec.class_dim = 1;
    g->loss_spec.has_ignore = c->loss_has_ignore;
    g->loss_spec.ignore_index = c->loss_ignore_index;
    switch (c->loss) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        return CK_OK; /* no target: ndim 0 */
    case CK_LOSS_MSE:
        g->target_shape = *y;
        return CK_OK;
    case CK_LOSS_CROSS_ENTROPY:
        if (c->loss_class_dim != 1 || c->loss_has_ignore) {
            int cd = c->loss_class_dim < 0 ? y->ndim + c->loss_class_dim : c->loss_class_dim;
            if (y->ndim < 2 || cd < 0 || cd >= y->ndim)
                return ck_fail(err, CK_ERR_INPUT,
                               "%s: loss.class_dim: %d is out of range for the output %s", c->path,
                               c->loss_class_dim, ck_shape_str(y, s, sizeof s));
            if (y->dim[cd] < 2 || y->dim[cd] > INT32_MAX)
                return ck_fail(err, CK_ERR_INPUT,
                               "%s: loss.class_dim: cross_entropy needs 2 to %d classes in dim %d "
                               "of the output, got %s",
                               c->path, INT32_MAX, cd, ck_shape_str(y, s, sizeof s));
            g->loss_spec.class_dim = cd;
            g->target_shape.ndim = y->ndim - 1;
            for (int d = 0, t = 0; d < y->ndim; d++)
                if (d != cd)
                    g->target_shape.dim[t++] = y->dim[d];
            return CK_OK;
        }
        if (y->ndim < 2)
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: loss.op: cross_entropy needs an output of rank >= 2 (N, C, ...), "
                           "got %s",
                           c->path, ck_shape_str(y, s, sizeof s));
        if (y->dim[1] < 2 || y->dim[1] > INT32_MAX)
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: loss.op: cross_entropy needs 2 to %d classes in dim 1 of the "
                           "output, got %s",
                           c->path, INT32_MAX, ck_shape_str(y, s, sizeof s));
        g->target_shape.ndim = y->ndim - 1;
        g->target_shape.dim[0] = y->dim[0];
        for (int d = 2; d < y->ndim; d++)
            g->target_shape.dim[d - 1] = y->dim[d];
        return CK_OK;
    case CK_LOSS_KIND_COUNT:
    default:
        break;
    }
    return ck_fail(err, CK_ERR_INTERNAL, "%s: unknown loss kind %d", c->path, (int)c->loss);
}

ck_status ck_graph_build(const ck_case *c, ck_graph *g, ck_error *err)
{
    ck_status st = CK_OK;
    memset(g, 0, sizeof *g);
    const char *path = c->path ? c->path : "(case)";

    if (c->n_layers < 1 || !c->layers) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: layers: the case has no layers", path);
        goto cleanup;
    }
    g->nodes = calloc((size_t)c->n_layers, sizeof *g->nodes);
    if (!g->nodes) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    g->cs = c;
    g->n = c->n_layers;
    g->input_shape = c->input_shape;

    for (int i = 0; i < g->n; i++) {
        const ck_layer_spec *L = &c->layers[i];
        ck_node *node = &g->nodes[i];
        ck_shape in_shapes[CK_MAX_INPUTS];
        const char *in_names[CK_MAX_INPUTS];

        node->spec = L;
        node->op = L->op;
        node->n_in = L->n_in;
        node->last_consumer = -1;
        for (int j = 0; j < L->n_in; j++) {
            int src = L->in[j];
            if (src >= i || src < -1) {
                st = ck_fail(err, CK_ERR_INTERNAL, "%s: layers[%d] (%s): input %d is not earlier",
                             path, i, L->name, j);
                goto cleanup;
            }
            node->in[j] = src;
            in_shapes[j] = src < 0 ? c->input_shape : g->nodes[src].out_shape;
            in_names[j] = src < 0 ? "input" : c->layers[src].name;
        }
        /* token ids (an i32 input) feed embeddings only, and embeddings read only them */
        for (int j = 0; j < L->n_in; j++) {
            const bool tokens = L->in[j] < 0 && c->input_dist == CK_DIST_TOKENS;
            if (tokens && L->op.kind != CK_OP_EMBEDDING) {
                st = ck_fail(err, CK_ERR_INPUT,
                             "%s: layers[%d] (%s): reads the model input, which holds token ids "
                             "(\"dist\": \"tokens\"); only an embedding layer can read them",
                             path, i, L->name);
                goto cleanup;
            }
            if (!tokens && L->op.kind == CK_OP_EMBEDDING) {
                st = ck_fail(err, CK_ERR_INPUT,
                             "%s: layers[%d] (%s): an embedding reads token ids: its input must "
                             "be the model input with \"dist\": \"tokens\"",
                             path, i, L->name);
                goto cleanup;
            }
        }
        /* add/concat first with the input names, which ck_op_infer does not know. */
        if (op_takes_many_inputs(L->op.kind) && L->n_in >= 2 &&
            (st = check_join_shapes(&node->op, L->n_in, in_shapes, in_names, err)) != CK_OK) {
            ck_error_prefix(err, "%s: layers[%d] (%s).inputs", path, i, L->name);
            goto cleanup;
        }
        if ((st = ck_op_infer(&node->op, node->n_in, in_shapes, &node->out_shape, err)) !=
            CK_OK) {
            ck_error_prefix(err, "%s: layers[%d] (%s)", path, i, L->name);
            goto cleanup;
        }
        ck_op_state_specs(node, &in_shapes[0]);
        ck_op_draw_specs(node, in_shapes);
        if ((st = check_state_sizes(node, err)) != CK_OK) {
            ck_error_prefix(err, "%s: layers[%d] (%s)", path, i, L->name);
            goto cleanup;
        }
        /* One count per input edge: add(["a", "a"]) reads a twice. */
        for (int j = 0; j < node->n_in; j++) {
            if (node->in[j] < 0)
                continue;
            g->nodes[node->in[j]].n_consumers++;
            g->nodes[node->in[j]].last_consumer = i;
        }
    }
    g->nodes[g->n - 1].n_consumers++; /* the loss reads the output layer */
    g->nodes[g->n - 1].last_consumer = g->n;

    /* A layer nobody reads gets no gradient and is almost always a wrong `inputs`. */
    for (int i = 0; i < g->n - 1; i++) {
        if (g->nodes[i].n_consumers == 0) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: layers[%d] (%s): output is never used (only the last layer may "
                         "feed nothing but the loss)",
                         path, i, c->layers[i].name);
            goto cleanup;
        }
    }
    g->output_shape = g->nodes[g->n - 1].out_shape;
    st = infer_target(c, g, err);
cleanup:
    if (st != CK_OK)
        ck_graph_free(g);
    return st;
}

void ck_graph_free(ck_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    memset(g, 0, sizeof *g);
}
