/*
 * Private to the CPU backend: one forward/backward pair per op family, one file each
 * (linear.c, conv.c, pool.c, upsample.c, activation.c, norm.c, random_ops.c,
 * shape_ops.c), plus loss.c and optim.c. ref_backend.c dispatches on ck_op_kind.
 * Every function takes tensors of CK_F32, CK_F64, CK_F16 and CK_BF16, each loaded in its
 * own dtype (a low-precision run mixes fp16/bf16 activations with fp32 normalisation
 * parameters and statistics, harness/precision.md), and returns CK_ERR_UNSUPPORTED naming
 * the tensor for any other dtype. Semantics: backends/backend.h and harness/core/ops.h; element
 * access and rounding: ref_elem.h.
 */
#ifndef CK_CPU_OPS_H
#define CK_CPU_OPS_H

#include "backends/backend.h"

#define CPU_OP_DECL(fam)                                                                   \
    ck_status ref_##fam##_forward(const ck_op_params *op, const ck_fwd_args *args,         \
                                  ck_op_io *io, ck_error *err);                            \
    ck_status ref_##fam##_backward(const ck_op_params *op, const ck_fwd_args *args,        \
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err);

CPU_OP_DECL(linear)     /* CK_OP_LINEAR */
CPU_OP_DECL(conv)       /* CK_OP_CONV, 1-3 spatial dims */
CPU_OP_DECL(pool)       /* CK_OP_MAXPOOL, CK_OP_AVGPOOL */
CPU_OP_DECL(upsample)   /* CK_OP_UPSAMPLE */
CPU_OP_DECL(activation) /* CK_OP_RELU, LEAKY_RELU, GELU, TANH, SIGMOID */
CPU_OP_DECL(batchnorm)  /* CK_OP_BATCHNORM */
CPU_OP_DECL(layernorm)  /* CK_OP_LAYERNORM */
CPU_OP_DECL(dropout)    /* CK_OP_DROPOUT */
CPU_OP_DECL(noise)      /* CK_OP_GAUSSIAN_NOISE */
CPU_OP_DECL(add)        /* CK_OP_ADD */
CPU_OP_DECL(concat)     /* CK_OP_CONCAT */
CPU_OP_DECL(flatten)    /* CK_OP_FLATTEN */
/* issue 18: double kernels in backends/ref/k18.h, run through ref18.h's wide views */
CPU_OP_DECL(matmul)          /* CK_OP_MATMUL (matmul.c) */
CPU_OP_DECL(softmax)         /* CK_OP_SOFTMAX, CK_OP_LOG_SOFTMAX (softmax.c) */
CPU_OP_DECL(attention)       /* CK_OP_ATTENTION (attention.c) */
CPU_OP_DECL(embedding)       /* CK_OP_EMBEDDING (embedding.c) */
CPU_OP_DECL(permute)         /* CK_OP_PERMUTE, CK_OP_RESHAPE (permute.c) */
CPU_OP_DECL(rmsnorm)         /* CK_OP_RMSNORM (rmsnorm.c) */
CPU_OP_DECL(groupnorm)       /* CK_OP_GROUPNORM (groupnorm.c) */
CPU_OP_DECL(pointwise18)     /* CK_OP_MUL, CK_OP_SILU, CK_OP_GELU tanh (pointwise18.c) */
CPU_OP_DECL(conv_transpose)  /* CK_OP_CONV_TRANSPOSE (conv_transpose.c) */
CPU_OP_DECL(upsample_linear) /* CK_OP_UPSAMPLE, linear modes (upsample_linear.c) */
CPU_OP_DECL(pool_pad)        /* CK_OP_MAXPOOL, CK_OP_AVGPOOL with padding (pool_pad.c) */
CPU_OP_DECL(positional)      /* CK_OP_POSITIONAL (pointwise18.c) */

#undef CPU_OP_DECL

ck_status ref_loss_forward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                           double *loss, ck_error *err);
ck_status ref_loss_backward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                            double scale, ck_tensor *dy, ck_error *err);
ck_status ref_convert(ck_tensor *dst, const ck_tensor *src, double scale, bool accumulate,
                      ck_error *err);
ck_status ref_optimizer_step(const ck_optimizer *opt, int64_t step, double grad_scale,
                             ck_tensor *param, const ck_tensor *grad, ck_tensor *state0,
                             ck_tensor *state1, ck_error *err);

/* The reference backend itself (backend_ref.c); created by name through the registry. */
ck_status ck_backend_ref_create(ck_backend **out, ck_error *err);

/* cross-entropy over a class dim with ignore_index (cross_entropy.c): the backend's
 * CK_PROC_CE_FORWARD / CK_PROC_CE_BACKWARD */
ck_status ref_ce_forward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                         double *out, ck_error *err);
ck_status ref_ce_backward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                          double scale, ck_tensor *dy, ck_error *err);

#endif
