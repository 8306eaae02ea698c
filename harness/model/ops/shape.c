/*
 * The shape family's definitions (op_def.h): slice, concat, flatten, reshape, permute and
 * transpose. They move values without computing; backward reads nothing but shapes.
 */
#include "harness/model/op_rules.h"

#include <math.h>
#include <stdint.h>

static const ck_option_def reshape_options[] = {
    CK_OPT("shape", SHAPE, shape, .required = true, .range = {-1.0, INFINITY, false, false},
           .count_offset = CK_OPT_FIELD(n_shape)),
    CK_OPTIONS_END,
};
/* permute takes dims, transpose dim0 and dim1 (case.c keeps each to its spelling) */
static const ck_option_def permute_options[] = {
    CK_OPT("dims", DIMLIST, perm, .count_offset = CK_OPT_FIELD(n_perm),
           .default_text = "required by permute"),
    CK_OPT("dim0", DIM, dim0, .default_text = "required by transpose"),
    CK_OPT("dim1", DIM, dim1, .default_text = "required by transpose"),
    CK_OPTIONS_END,
};

static const ck_option_def slice_options[] = {
    CK_OPT("dim", DIM, dim, .required = true),
    CK_OPT("range", SHAPE, slice_range, .required = true, .range = {0.0, INFINITY, false, false},
           .count_offset = CK_OPT_FIELD(n_slice), .type_text = "[start, end], 0 <= start < end",
           .default_text = "required"),
    CK_OPTIONS_END,
};

/* y = x[..., start:end, ...] along dim (resolved to >= 0 here) */
static ck_status slice_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                             ck_error *err)
{
    char s[128];
    CK_TRY(ck_op_resolve_dim("slice", "dim", op->dim, in[0].ndim, &op->dim, err));
    if (op->n_slice != 2)
        return ck_fail(err, CK_ERR_INPUT, "slice: range needs 2 values [start, end], got %d",
                       op->n_slice);
    int64_t a = op->slice_range[0], b = op->slice_range[1];
    if (!(a < b) || b > in[0].dim[op->dim])
        return ck_fail(err, CK_ERR_INPUT, "slice: range [%lld, %lld] is not inside dim %d of "
                       "the input %s (0 <= start < end <= %lld)", (long long)a, (long long)b,
                       op->dim, ck_shape_str(&in[0], s, sizeof s),
                       (long long)in[0].dim[op->dim]);
    *y = in[0];
    y->dim[op->dim] = b - a;
    return CK_OK;
}

static ck_status concat_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                              ck_error *err)
{
    CK_TRY(ck_op_check_join_shapes(op, n_in, in, NULL, err));
    CK_TRY(ck_op_resolve_dim("concat", "dim", op->dim, in[0].ndim, &op->dim, err));
    for (int i = 1; i < n_in; i++)
        if (__builtin_add_overflow(y->dim[op->dim], in[i].dim[op->dim], &y->dim[op->dim]))
            return ck_fail(err, CK_ERR_INPUT, "concatenated size along dim %d overflows",
                           op->dim);
    return CK_OK;
}

static const ck_option_def concat_options[] = {
    CK_OPT("dim", DIM, dim),
    CK_OPTIONS_END,
};

static ck_status flatten_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                               ck_error *err)
{
    CK_TRY(ck_op_need_min_rank(op, &in[0], 2, "(N, ...)", err));
    y->ndim = 2;
    y->dim[1] = ck_shape_numel(&in[0]) / in[0].dim[0];
    for (int d = 2; d < CK_MAX_DIMS; d++)
        y->dim[d] = 0;
    return CK_OK;
}

static ck_status reshape_rule(ck_op_params *op, const ck_shape *x, ck_shape *y, ck_error *err)
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

static ck_status permute_rule(ck_op_params *op, const ck_shape *x, ck_shape *y, ck_error *err)
{
    char s[128];
    if (op->n_perm == 0) { /* transpose(dim0, dim1) */
        int a = 0, b = 0;
        CK_TRY(ck_op_resolve_dim("transpose", "dim0", op->dim0, x->ndim, &a, err));
        CK_TRY(ck_op_resolve_dim("transpose", "dim1", op->dim1, x->ndim, &b, err));
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
            CK_TRY(ck_op_resolve_dim("permute", "dims entry", op->perm[d], x->ndim, &p, err));
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

static ck_status reshape_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                               ck_error *err)
{
    return reshape_rule(op, &in[0], y, err);
}

static ck_status permute_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *y,
                               ck_error *err)
{
    return permute_rule(op, &in[0], y, err);
}

const ck_op_def ck_op_defs_shape[] = {
    {.kind = CK_OP_SLICE,
     .spellings = {{"slice", 0, "x[..., start:end, ...] along one dim (torch.split, x[:, a:b])"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = slice_options,
     .infer = slice_infer,
     .backward_reads = CK_BWD_READS_NOTHING}, /* dx[.., start:end, ..] += dy */
    {.kind = CK_OP_CONCAT,
     .spellings = {{"concat", 0, "join 2 to 8 inputs along a dim (default 1, the channels)"}},
     .min_inputs = 2, .max_inputs = CK_MAX_INPUTS,
     .options = concat_options,
     .infer = concat_infer,
     .backward_reads = CK_BWD_READS_NOTHING},
    {.kind = CK_OP_FLATTEN,
     .spellings = {{"flatten", 0, "(N, ...) -> (N, product of the rest)"}},
     .min_inputs = 1, .max_inputs = 1,
     .infer = flatten_infer,
     .backward_reads = CK_BWD_READS_NOTHING},
    {.kind = CK_OP_RESHAPE,
     .spellings = {{"reshape", 0, "the same values in another shape (batch dim included)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = reshape_options,
     .infer = reshape_infer,
     .backward_reads = CK_BWD_READS_NOTHING},
    {.kind = CK_OP_PERMUTE,
     .spellings = {{"permute", 0, "dims reordered: y = x.permute(dims)"},
                   {"transpose", 0, "two dims swapped: y = x.transpose(dim0, dim1)"}},
     .min_inputs = 1, .max_inputs = 1,
     .options = permute_options,
     .infer = permute_infer,
     .backward_reads = CK_BWD_READS_NOTHING},
};
CK_OP_ROWS_COUNT(ck_op_defs_shape);
