/*
 * The reference backend's entry points: one forward/backward pair per op family, one file
 * each (linear.c, conv.c, pool.c, upsample.c, pointwise.c, norm.c, random.c, attention.c,
 * shape.c), plus loss.c, optim.c and convert.c. backend.c dispatches on the op's family;
 * the fast cpu backend (backends/cpu/) calls these directly for the ops it has no kernel
 * of its own for.
 * Every function takes tensors of CK_F32, CK_F64, CK_F16 and CK_BF16, each loaded in its
 * own dtype (a low-precision run mixes fp16/bf16 activations with fp32 normalisation
 * parameters and statistics, harness/precision.md), and returns CK_ERR_UNSUPPORTED naming
 * the tensor for any other dtype. Semantics: backends/backend.h and harness/core/ops.h; element
 * access and rounding: ref_elem.h.
 */
#ifndef CK_REF_OPS_H
#define CK_REF_OPS_H

#include "backends/backend.h"

typedef ck_status (*ref_fwd_fn)(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err);
typedef ck_status (*ref_bwd_fn)(const ck_op_params *op, const ck_fwd_args *args,
                                const ck_op_io *io, ck_op_grads *g, ck_error *err);
typedef struct {
    ref_fwd_fn forward;
    ref_bwd_fn backward;
} ref_op_fns;

/* One forward/backward pair per op family (harness/core/ops.h), one file each: the
 * family's file picks the kernel for the op's kind and options (a variant such as padded
 * pooling or linear upsampling is the family's business). An op of another family, or one
 * the family has no kernel for, fails with CK_ERR_INTERNAL. */
#define REF_FAMILY_DECL(fam)                                                               \
    ck_status ref_##fam##_forward(const ck_op_params *op, const ck_fwd_args *args,         \
                                  ck_op_io *io, ck_error *err);                            \
    ck_status ref_##fam##_backward(const ck_op_params *op, const ck_fwd_args *args,        \
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err);

REF_FAMILY_DECL(linear)    /* linear, matmul, embedding (linear.c) */
REF_FAMILY_DECL(conv)      /* conv, conv_transpose (conv.c) */
REF_FAMILY_DECL(pool)      /* maxpool, avgpool, unpadded and padded (pool.c) */
REF_FAMILY_DECL(upsample)  /* upsample, nearest and linear modes (upsample.c) */
REF_FAMILY_DECL(pointwise) /* activations, add, mul, silu, positional (pointwise.c) */
REF_FAMILY_DECL(norm)      /* batchnorm, layernorm, rmsnorm, groupnorm (norm.c) */
REF_FAMILY_DECL(random)    /* dropout, gaussian_noise (random.c) */
REF_FAMILY_DECL(attention) /* softmax, log_softmax, attention (attention.c) */
REF_FAMILY_DECL(shape)     /* concat, flatten, reshape, permute (shape.c) */
REF_FAMILY_DECL(broadcast) /* sub, div, maximum, minimum, pow, masked_fill, add/mul that
                              broadcast, expand, sum, mean, amax (broadcast.c) */

#undef REF_FAMILY_DECL

/* The failure for an op a family file has no kernel for. */
ck_status ref_no_kernel(const char *family, const ck_op_params *op, ck_error *err);

/* Defines ref_<fam>_forward/backward from a family file's
 * `static ref_op_fns pick(const ck_op_params *op)`. */
#define REF_FAMILY_ENTRIES(fam, pick)                                                       \
    ck_status ref_##fam##_forward(const ck_op_params *op, const ck_fwd_args *args,          \
                                  ck_op_io *io, ck_error *err)                              \
    {                                                                                       \
        const ref_op_fns f = pick(op);                                                      \
        return f.forward ? f.forward(op, args, io, err) : ref_no_kernel(#fam, op, err);     \
    }                                                                                       \
    ck_status ref_##fam##_backward(const ck_op_params *op, const ck_fwd_args *args,         \
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)       \
    {                                                                                       \
        const ref_op_fns f = pick(op);                                                      \
        return f.backward ? f.backward(op, args, io, g, err) : ref_no_kernel(#fam, op, err); \
    }

ck_status ref_loss_forward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                           double *loss, ck_error *err);
ck_status ref_loss_backward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                            double scale, ck_tensor *dy, bool relu_over, ck_error *err);

/* The fused relu backward of the host backends (relu_over.c; backend.h's
 * ck_op_grads.din0_relu_over_input): the relu's mask, one bit per element, taken from r
 * before its buffer is overwritten, then applied to the gradient computed there. */
typedef struct {
    uint32_t *bits;
    int64_t n;
} ref_relu_mask;
ck_status ref_relu_mask_take(const char *op, const ck_tensor *r, ref_relu_mask *m, ck_error *err);
/* din[k] = the relu's backward (fresh input gradient) of dout din[k]; frees the mask */
void ref_relu_mask_apply(ref_relu_mask *m, ck_tensor *din);
void ref_relu_mask_free(ref_relu_mask *m);
/* A backward entry of a host backend (ctx: its state) and the fused call around it: checks
 * the arguments, takes the mask, zeroes din[0], runs fn for the input gradient with the
 * input hidden, applies the mask. */
typedef ck_status (*ref_host_bwd_fn)(const void *ctx, const ck_op_params *op,
                                const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                ck_error *err);
/* fn's ordinary backward of a fused relu's op (g: din0_relu_over_input) with in[0], the
 * relu's output, hidden (data NULL: an input gradient does not read it) and the flag off:
 * the input gradient accumulated into din[0] (shared by the host backends' fused relu) */
ck_status ref_backward_input0_hidden(ref_host_bwd_fn fn, const void *ctx, const ck_op_params *op,
                                     const ck_fwd_args *args, const ck_op_io *io,
                                     const ck_op_grads *g, ck_error *err);
ck_status ref_backward_relu_over_input(ref_host_bwd_fn fn, const void *ctx, const ck_op_params *op,
                                       const ck_fwd_args *args, const ck_op_io *io,
                                       ck_op_grads *g, ck_error *err);
ck_status ref_convert(ck_tensor *dst, const ck_tensor *src, double scale, bool accumulate,
                      ck_error *err);
ck_status ref_optimizer_step(const ck_optimizer *opt, int64_t step, double grad_scale,
                             ck_tensor *param, const ck_tensor *grad, ck_tensor *state0,
                             ck_tensor *state1, ck_error *err);

/* The reference backend itself (backend.c); created by name through the registry. */
ck_status ck_backend_ref_create(ck_backend **out, ck_error *err);

/* The reference backend's op entry points, for a backend built on it (the fast cpu
 * backend runs every op it has no kernel of its own for through these): supports,
 * forward and backward of backend.h without the backend argument. */
bool ref_op_supports(const ck_op_params *op, ck_dtype dtype);
ck_status ref_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                         ck_error *err);
ck_status ref_op_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                          ck_op_grads *g, ck_error *err);
/* Installs the reference losses (loss_*, ce_*, supports_loss), optimizer
 * (optimizer_step, supports_optimizer) and convert into b: host memory, b's own state
 * unused. */
void ref_install_training(ck_backend *b);

/* cross-entropy over a class dim with ignore_index (loss.c): the backend's ce_forward /
 * ce_backward */
ck_status ref_ce_forward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                         double *out, ck_error *err);
ck_status ref_ce_backward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                          double scale, ck_tensor *dy, ck_error *err);

#endif
