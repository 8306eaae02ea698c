/*
 * CPU random ops: inverted dropout and additive gaussian noise.
 *
 * Both draw from args->rng through the shared formulas in harness/core/rng.h, so the CPU and
 * CUDA backends produce the same mask and the same noise, and a recomputed forward
 * replays its draw. Dropout keeps nothing for backward: it regenerates its mask from the
 * same stream. The mask is an integer comparison of Philox words, so it is the same in
 * every dtype. Each tensor is loaded in its own dtype (fp32, fp64, fp16 or bf16); values
 * are computed in double and rounded once on store, and backward adds its double
 * contribution to dx with one rounding (ref_elem.h, harness/precision.md).
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

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
        ref_st(out, i, dropout_keep(rng, threshold, i) ? ref_ld(x, i) * scale : 0.0);
}

/* dx += keep ? dout / (1 - rate) : 0, with the mask regenerated from rng; all (numel) */
static void dropout_backward(ck_tensor *dx, const ck_tensor *dout, const ck_rng_stream *rng,
                             double rate, int64_t numel)
{
    uint32_t threshold = ck_dropout_threshold(rate);
    double scale = 1.0 / (1.0 - rate);
    for (int64_t i = 0; i < numel; i++)
        if (dropout_keep(rng, threshold, i))
            ref_acc(dx, i, ref_ld(dout, i) * scale);
}

static ck_status dropout_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    CK_TRY(ck_opc_dropout_fwd(REF_BE, op, io, err));
    dropout_forward(io->out, io->in[0], &args->rng, op->rate, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

static ck_status dropout_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_dropout_bwd(REF_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    dropout_backward(g->din[0], g->dout, &args->rng, op->rate, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

/* ============================= gaussian noise ============================= */

/* out = x + stddev * n_i with n_i the float normal draw of element i; all (numel) */
static void noise_forward(ck_tensor *out, const ck_tensor *x, const ck_rng_stream *rng,
                          double stddev, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_st(out, i, ref_ld(x, i) + stddev * (double)ck_rng_normal_f32(rng, (uint64_t)i));
}

/* dx += dout; all (numel) */
static void noise_backward(ck_tensor *dx, const ck_tensor *dout, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_acc(dx, i, ref_ld(dout, i));
}

static ck_status noise_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                            ck_error *err)
{
    CK_TRY(ck_opc_noise_fwd(REF_BE, op, io, err));
    noise_forward(io->out, io->in[0], &args->rng, op->stddev, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

static ck_status noise_op_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                             ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_noise_bwd(REF_BE, io, g, err));
    if (!g->din[0])
        return CK_OK;
    noise_backward(g->din[0], g->dout, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_DROPOUT: return (ref_op_fns){dropout_op_forward, dropout_op_backward};
    case CK_OP_GAUSSIAN_NOISE: return (ref_op_fns){noise_op_forward, noise_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(random, pick)
