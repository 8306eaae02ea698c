/*
 * CPU random ops: inverted dropout and additive gaussian noise.
 *
 * Both draw from args->rng through the shared formulas in harness/rng.h, so the CPU and
 * CUDA backends produce the same mask and the same noise, and a recomputed forward
 * replays its draw. Dropout keeps nothing for backward: it regenerates its mask from the
 * same stream. The mask is an integer comparison of Philox words, so it is the same in
 * every dtype. Each tensor is loaded in its own dtype (fp32, fp64, fp16 or bf16); values
 * are computed in double and rounded once on store, and backward adds its double
 * contribution to dx with one rounding (cpu_elem.h, harness/precision.md).
 */
#include "cpu_elem.h"

/* Every tensor has a float dtype; every non-NULL tensor of ts has x's element count. */
static ck_status check_pointwise(const char *fn, const ck_tensor *x, const ck_tensor *const *ts,
                                 int n, ck_error *err)
{
    const ck_tensor *xs[] = {x};
    ck_status rc = cpu_check_float_dtypes(fn, xs, 1, err);
    if (rc != CK_OK || (rc = cpu_check_float_dtypes(fn, ts, n, err)) != CK_OK)
        return rc;
    int64_t numel = ck_shape_numel(&x->shape);
    for (int i = 0; i < n; i++) {
        const ck_tensor *t = ts[i];
        if (t && ck_shape_numel(&t->shape) != numel)
            return ck_fail(err, CK_ERR_INTERNAL, "%s: %s has %lld elements, %s has %lld", fn,
                           cpu_tname(t), (long long)ck_shape_numel(&t->shape), cpu_tname(x),
                           (long long)numel);
    }
    return CK_OK;
}

#define TRY(expr)                                                                          \
    do {                                                                                   \
        ck_status rc_ = (expr);                                                            \
        if (rc_ != CK_OK)                                                                  \
            return rc_;                                                                    \
    } while (0)

/* ================================ dropout ================================ */

/* Element i is dropped iff its uniform word is below rate * 2^32 (integer comparison). */
static inline bool dropout_keep(const ck_rng_stream *rng, uint32_t threshold, int64_t i)
{
    return ck_rng_u32(rng, (uint64_t)i) >= threshold;
}

/* out = keep ? x / (1 - rate) : 0; all (numel) */
static void dropout_forward(ck_tensor *out, const ck_tensor *x, const ck_rng_stream *rng,
                            double rate, int64_t numel)
{
    uint32_t threshold = ck_dropout_threshold(rate);
    double scale = 1.0 / (1.0 - rate);
    for (int64_t i = 0; i < numel; i++)
        cpu_st(out, i, dropout_keep(rng, threshold, i) ? cpu_ld(x, i) * scale : 0.0);
}

/* dx += keep ? dout / (1 - rate) : 0, with the mask regenerated from rng; all (numel) */
static void dropout_backward(ck_tensor *dx, const ck_tensor *dout, const ck_rng_stream *rng,
                             double rate, int64_t numel)
{
    uint32_t threshold = ck_dropout_threshold(rate);
    double scale = 1.0 / (1.0 - rate);
    for (int64_t i = 0; i < numel; i++)
        if (dropout_keep(rng, threshold, i))
            cpu_acc(dx, i, cpu_ld(dout, i) * scale);
}

static ck_status dropout_check_rate(const char *fn, double rate, ck_error *err)
{
    if (!(rate >= 0.0 && rate < 1.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: rate %g is outside [0, 1)", fn, rate);
    return CK_OK;
}

ck_status cpu_dropout_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    const char *fn = "dropout";
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    TRY(dropout_check_rate(fn, op->rate, err));
    const ck_tensor *ts[] = {io->out};
    TRY(check_pointwise(fn, io->in[0], ts, 1, err));
    dropout_forward(io->out, io->in[0], &args->rng, op->rate, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status cpu_dropout_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const char *fn = "dropout backward";
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    if (!g->din[0])
        return CK_OK;
    TRY(dropout_check_rate(fn, op->rate, err));
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    TRY(check_pointwise(fn, io->in[0], ts, 2, err));
    dropout_backward(g->din[0], g->dout, &args->rng, op->rate, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

/* ============================= gaussian noise ============================= */

/* out = x + stddev * n_i with n_i the float normal draw of element i; all (numel) */
static void noise_forward(ck_tensor *out, const ck_tensor *x, const ck_rng_stream *rng,
                          double stddev, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        cpu_st(out, i, cpu_ld(x, i) + stddev * (double)ck_rng_normal_f32(rng, (uint64_t)i));
}

/* dx += dout; all (numel) */
static void noise_backward(ck_tensor *dx, const ck_tensor *dout, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        cpu_acc(dx, i, cpu_ld(dout, i));
}

ck_status cpu_noise_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                            ck_error *err)
{
    const char *fn = "gaussian_noise";
    if (io->n_in != 1 || !io->in[0] || !io->out)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and an output", fn);
    if (!(op->stddev >= 0.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: stddev must be >= 0, got %g", fn, op->stddev);
    const ck_tensor *ts[] = {io->out};
    TRY(check_pointwise(fn, io->in[0], ts, 1, err));
    noise_forward(io->out, io->in[0], &args->rng, op->stddev, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status cpu_noise_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                             ck_op_grads *g, ck_error *err)
{
    const char *fn = "gaussian_noise backward";
    if (io->n_in != 1 || !io->in[0] || !g->dout)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs one input and dout", fn);
    if (!g->din[0])
        return CK_OK;
    const ck_tensor *ts[] = {g->dout, g->din[0]};
    TRY(check_pointwise(fn, io->in[0], ts, 2, err));
    noise_backward(g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}
