/*
 * CPU shape ops: add (n inputs of one shape), concat (along dim 1, the channels) and
 * flatten ((N, ...) -> (N, prod ...)), forward and backward.
 *
 * add sums its inputs in input order in double and rounds once; concat and flatten copy
 * values (exactly within one dtype, rounded once into another). Backward passes
 * accumulate (+=) into every gradient that is not NULL, with one rounding each. Each
 * tensor is loaded in its own dtype: fp32, fp64, fp16 or bf16 (cpu_elem.h,
 * harness/precision.md).
 */
#include "cpu_elem.h"

/* ref and t (when not NULL) have float dtypes; with `shape` set, t has ref's shape. */
static ck_status check_like(const char *fn, const ck_tensor *ref, const ck_tensor *t,
                            bool shape, ck_error *err)
{
    const ck_tensor *ts[] = {ref, t};
    ck_status rc = cpu_check_float_dtypes(fn, ts, 2, err);
    if (rc != CK_OK || !t)
        return rc;
    if (shape && !ck_shape_equal(&t->shape, &ref->shape)) {
        char a[128], b[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s", fn, cpu_tname(t),
                       ck_shape_str(&t->shape, a, sizeof a), cpu_tname(ref),
                       ck_shape_str(&ref->shape, b, sizeof b));
    }
    return CK_OK;
}

#define TRY(expr)                                                                          \
    do {                                                                                   \
        ck_status rc_ = (expr);                                                            \
        if (rc_ != CK_OK)                                                                  \
            return rc_;                                                                    \
    } while (0)

static ck_status check_inputs(const char *fn, const ck_op_io *io, int min_in, ck_error *err)
{
    if (io->n_in < min_in || io->n_in > CK_MAX_INPUTS)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: got %d inputs, needs %d to %d", fn, io->n_in,
                       min_in, CK_MAX_INPUTS);
    for (int i = 0; i < io->n_in; i++)
        if (!io->in[i])
            return ck_fail(err, CK_ERR_INTERNAL, "%s: input %d is missing", fn, i);
    return CK_OK;
}

/* ================================== add ================================== */

/* out = in[0] + in[1] + ... in input order; all (numel) */
static void add_forward(ck_tensor *out, const ck_tensor *const *in, int n_in, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++) {
        double sum = 0.0;
        for (int k = 0; k < n_in; k++)
            sum += cpu_ld(in[k], i);
        cpu_st(out, i, sum);
    }
}

/* din[k] += dout for every non-NULL din[k]; all (numel) */
static void add_backward(ck_tensor *const *din, const ck_tensor *dout, int n_in, int64_t numel)
{
    for (int k = 0; k < n_in; k++) {
        if (!din[k])
            continue;
        for (int64_t i = 0; i < numel; i++)
            cpu_acc(din[k], i, cpu_ld(dout, i));
    }
}

ck_status cpu_add_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                          ck_error *err)
{
    const char *fn = "add";
    TRY(check_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    for (int k = 1; k < io->n_in; k++)
        TRY(check_like(fn, io->in[0], io->in[k], true, err));
    TRY(check_like(fn, io->in[0], io->out, true, err));
    add_forward(io->out, io->in, io->n_in, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status cpu_add_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                           ck_op_grads *g, ck_error *err)
{
    const char *fn = "add backward";
    TRY(check_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    TRY(check_like(fn, io->in[0], g->dout, true, err));
    for (int k = 0; k < io->n_in; k++)
        TRY(check_like(fn, io->in[0], g->din[k], true, err));
    add_backward(g->din, g->dout, io->n_in, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

/* ================================= concat ================================= */

/* Every input is (N, C_k, S...) with the same N and S; out is (N, sum C_k, S...).
 * Writes each input's C_k * S block size to `block`, the output's to *out_block, and
 * the batch size to *N. */
static ck_status concat_dims(const char *fn, const ck_op_io *io, const ck_tensor *out,
                             int64_t *N, int64_t *block, int64_t *out_block, ck_error *err)
{
    const ck_tensor *x0 = io->in[0];
    if (x0->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has rank %d, needs (N, C, ...)", fn,
                       cpu_tname(x0), x0->shape.ndim);
    int64_t S = 1;
    for (int d = 2; d < x0->shape.ndim; d++)
        S *= x0->shape.dim[d];
    int64_t channels = 0;
    for (int k = 0; k < io->n_in; k++) {
        const ck_tensor *x = io->in[k];
        TRY(check_like(fn, x0, x, false, err));
        bool same = x->shape.ndim == x0->shape.ndim;
        for (int d = 0; same && d < x0->shape.ndim; d++)
            same = d == 1 || x->shape.dim[d] == x0->shape.dim[d];
        if (!same) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, %s has %s; only dim 1 "
                           "may differ", fn, cpu_tname(x), ck_shape_str(&x->shape, a, sizeof a),
                           cpu_tname(x0), ck_shape_str(&x0->shape, b, sizeof b));
        }
        block[k] = x->shape.dim[1] * S;
        channels += x->shape.dim[1];
    }
    TRY(check_like(fn, x0, out, false, err));
    if (out->shape.ndim != x0->shape.ndim ||
        ck_shape_numel(&out->shape) != x0->shape.dim[0] * channels * S ||
        out->shape.dim[0] != x0->shape.dim[0] || out->shape.dim[1] != channels)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s is not (%lld, %lld, ...)", fn, cpu_tname(out),
                       (long long)x0->shape.dim[0], (long long)channels);
    *N = x0->shape.dim[0];
    *out_block = channels * S;
    return CK_OK;
}

/* out[n, off_k + c, s] = in[k][n, c, s]; out (N, sum C_k, S), in[k] (N, C_k, S) */
static void concat_forward(ck_tensor *out, const ck_tensor *const *in, int n_in, int64_t N,
                           const int64_t *block, int64_t out_block)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t off = n * out_block;
        for (int k = 0; k < n_in; k++) {
            for (int64_t j = 0; j < block[k]; j++)
                cpu_st(out, off + j, cpu_ld(in[k], n * block[k] + j));
            off += block[k];
        }
    }
}

/* din[k][n, c, s] += dout[n, off_k + c, s] for every non-NULL din[k] */
static void concat_backward(ck_tensor *const *din, const ck_tensor *dout, int n_in, int64_t N,
                            const int64_t *block, int64_t out_block)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t off = n * out_block;
        for (int k = 0; k < n_in; k++) {
            if (din[k])
                for (int64_t j = 0; j < block[k]; j++)
                    cpu_acc(din[k], n * block[k] + j, cpu_ld(dout, off + j));
            off += block[k];
        }
    }
}

ck_status cpu_concat_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                             ck_error *err)
{
    const char *fn = "concat";
    TRY(check_inputs(fn, io, 1, err));
    if (!io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no output tensor", fn);
    int64_t N, block[CK_MAX_INPUTS], out_block;
    TRY(concat_dims(fn, io, io->out, &N, block, &out_block, err));
    concat_forward(io->out, io->in, io->n_in, N, block, out_block);
    return CK_OK;
}

ck_status cpu_concat_backward(const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const char *fn = "concat backward";
    TRY(check_inputs(fn, io, 1, err));
    if (!g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: no dout", fn);
    int64_t N, block[CK_MAX_INPUTS], out_block;
    TRY(concat_dims(fn, io, g->dout, &N, block, &out_block, err));
    for (int k = 0; k < io->n_in; k++)
        TRY(check_like(fn, io->in[k], g->din[k], true, err));
    concat_backward(g->din, g->dout, io->n_in, N, block, out_block);
    return CK_OK;
}

/* ================================= flatten ================================= */

/* out = x viewed as (N, prod ...); a row-major copy; all (numel) */
static void flatten_forward(ck_tensor *out, const ck_tensor *x, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        cpu_st(out, i, cpu_ld(x, i));
}

/* dx += dout; all (numel) */
static void flatten_backward(ck_tensor *dx, const ck_tensor *dout, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        cpu_acc(dx, i, cpu_ld(dout, i));
}

static ck_status flatten_check(const char *fn, const ck_tensor *x, const ck_tensor *flat,
                               ck_error *err)
{
    TRY(check_like(fn, x, flat, false, err));
    if (x->shape.ndim < 1 || flat->shape.ndim != 2 || flat->shape.dim[0] != x->shape.dim[0] ||
        ck_shape_numel(&flat->shape) != ck_shape_numel(&x->shape)) {
        char a[128], b[128];
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has shape %s, not the flattening of %s %s",
                       fn, cpu_tname(flat), ck_shape_str(&flat->shape, a, sizeof a), cpu_tname(x),
                       ck_shape_str(&x->shape, b, sizeof b));
    }
    return CK_OK;
}

ck_status cpu_flatten_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    const char *fn = "flatten";
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    TRY(flatten_check(fn, io->in[0], io->out, err));
    flatten_forward(io->out, io->in[0], ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status cpu_flatten_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const char *fn = "flatten backward";
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    TRY(flatten_check(fn, io->in[0], g->dout, err));
    TRY(check_like(fn, io->in[0], g->din[0], true, err));
    if (g->din[0])
        flatten_backward(g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}
