/*
 * Host-side argument checks and geometry shared by the backends: the CPU reference
 * (backends/ref/) and the CUDA backend (backends/cuda/) validate every call the same way,
 * with the same messages, from this one plain-C module (backends/check/<family>.c, one file per op family,
 * compiled into every build). Nothing here touches tensor data except ck_opc_ce_classes, which reads class
 * indices from host memory the caller provides.
 *
 * `be` is the calling backend's name ("cpu", "cuda"); it appears only in the messages that
 * say which dtypes that backend computes in. Every function returns CK_OK or the failure
 * ck_fail recorded in *err; each op's checks run in the order the backends always ran them,
 * so the first problem found is the one reported.
 *
 * Included from C++ (.cu) as well: the declarations have C linkage there.
 */
#ifndef CK_CHECK_H
#define CK_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
#include <math.h> /* before the C-linkage block: harness/core/rng.h includes it */
#include <stdarg.h>
extern "C" {
#endif

#include "backends/backend.h"
#include "backends/check/broadcast.h"
#include "backends/check/geometry.h"
#include "backends/check/numerics.h"

/* ---- tensors and dtypes ---- */

/* a tensor's name for messages: its name, or "(unnamed)" (also for NULL) */
static inline const char *ck_opc_tname(const ck_tensor *t)
{
    return t && t->name ? t->name : "(unnamed)";
}

/* a float dtype the backends compute in: fp32, fp64, fp16, bf16 */
static inline bool ck_opc_is_float(ck_dtype dt)
{
    return dt == CK_F32 || dt == CK_F64 || dt == CK_F16 || dt == CK_BF16;
}

/* Every non-NULL t[0..n) has a float dtype; otherwise CK_ERR_UNSUPPORTED naming op, the
 * tensor, its dtype and the backend. */
ck_status ck_opc_float_dtypes(const char *be, const char *op, const ck_tensor *const *t, int n,
                              ck_error *err);

/* The dtype every non-NULL t[0..n) shares, or CK_DTYPE_COUNT when they differ (or all are
 * NULL). */
ck_dtype ck_opc_common_dtype(const ck_tensor *const *t, int n);

/* Float dtypes for x and every non-NULL ts[i], and each ts[i] has x's element count. */
ck_status ck_opc_pointwise(const char *be, const char *fn, const ck_tensor *x,
                           const ck_tensor *const *ts, int n, ck_error *err);

/* ---- pointwise ops: each forward needs one input and an output, each backward one input
 * and dout; a backward with no din[0] (nothing to compute) returns CK_OK after those
 * checks, so the caller returns too when g->din[0] is NULL. ---- */

ck_status ck_opc_activation_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                                 ck_error *err);
ck_status ck_opc_activation_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                                const ck_op_grads *g, ck_error *err);
ck_status ck_opc_dropout_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                             ck_error *err);
ck_status ck_opc_dropout_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                             const ck_op_grads *g, ck_error *err);
ck_status ck_opc_noise_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                           ck_error *err);
ck_status ck_opc_noise_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                           ck_error *err);

/* ---- shape ops: add, concat, flatten ---- */

ck_status ck_opc_add_fwd(const char *be, const ck_op_io *io, ck_error *err);
ck_status ck_opc_add_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                         ck_error *err);
/* Every input is (N, C_k, S...) with the same N and S; out (dout) is (N, sum C_k, S...).
 * Writes each input's C_k * S block size to block[0..n_in), the output's to *out_block,
 * and the batch size to *N. */
/* slice along op->dim: x viewed as (outer, D, inner), y as (outer, end - start, inner) */
ck_status ck_opc_slice(const char *be, const ck_op_params *op, const ck_op_io *io,
                       const ck_op_grads *g, int64_t *outer, int64_t *D, int64_t *inner,
                       ck_error *err);
/* concat along op->dim (resolved): each input as (N, block[k]), the output (N, out_block) */
ck_status ck_opc_concat_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                            int64_t *N, int64_t *block, int64_t *out_block, ck_error *err);
ck_status ck_opc_concat_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                            const ck_op_grads *g, int64_t *N, int64_t *block, int64_t *out_block,
                            ck_error *err);
ck_status ck_opc_flatten_fwd(const char *be, const ck_op_io *io, ck_error *err);
ck_status ck_opc_flatten_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                             ck_error *err);

/* ---- linear, conv ---- */

typedef struct {
    int64_t M, in, units;
} ck_linear_dims;

/* Checks x (..., in), W (units, in), b (units), y (..., units) and returns M, in, units. */
ck_status ck_opc_linear_shapes(const ck_tensor *x, const ck_tensor *w, const ck_tensor *b,
                               const ck_tensor *y, ck_linear_dims *d, ck_error *err);

/* Checks op->nsp (1 to 3) and that x (N, C, s...), W (F, C, k...), b (F) and y (N, F, o...)
 * fit together and the op's kernel; the geometry (stride, dilation, padding) is each
 * backend's own. */
ck_status ck_opc_conv_fit(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                          const ck_tensor *b, const ck_tensor *y, ck_error *err);
/* After ck_opc_conv_fit: the call's shapes in three spatial dims (geometry.h), for the
 * fast CPU kernels and the CUDA direct convolution. */
ck_status ck_opc_conv_geom3(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                            const ck_tensor *b, const ck_tensor *y, ck_conv_geom3 *g,
                            ck_error *err);

/* ---- pool, upsample: every call brought to three spatial dims, leading dims 1 ---- */

typedef struct {
    int64_t planes;        /* N * C */
    int64_t in[3], out[3]; /* spatial sizes (D, H, W) of x and y, leading dims 1 */
    int64_t kernel[3], stride[3];
} ck_pool_geom;

typedef struct {
    int64_t planes;        /* N * C */
    int64_t in[3], out[3]; /* spatial sizes (D, H, W) of x and y, leading dims 1 */
    int64_t scale[3];
} ck_upsample_geom;

/* "maxpool" or "avgpool" */
const char *ck_opc_pool_name(const ck_op_params *op);
/* Checks the op kind and x (N, C, s...), y (N, C, o...) against the windows and fills g:
 * every window of y must lie inside x. */
ck_status ck_opc_pool_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                            bool *is_max, ck_pool_geom *g, ck_error *err);
/* Checks x (N, C, s...) and y (N, C, s * scale...) and fills g. */
ck_status ck_opc_upsample_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                                ck_upsample_geom *g, ck_error *err);

/* ---- batchnorm, layernorm ---- */

/* x viewed as (N, C, S) with S the product of the dims after the first two */
typedef struct {
    int64_t N, C, S;
} ck_ncs_dims;

ck_status ck_opc_batchnorm_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               ck_ncs_dims *d, ck_error *err);
ck_status ck_opc_batchnorm_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               const ck_op_grads *g, ck_ncs_dims *d, ck_error *err);
/* x viewed as (N, D): D the trailing op->n_norm dims (normalized_shape), or every non-batch
 * dim when n_norm is 0 (op may be NULL: the latter) */
ck_status ck_opc_layernorm_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               int64_t *N, int64_t *D, ck_error *err);
ck_status ck_opc_layernorm_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                               const ck_op_grads *g, int64_t *N, int64_t *D, ck_error *err);

/* ---- losses ---- */

/* Validates y and target for `kind`; for cross-entropy (y (N, C, S...), target (N, S...)
 * of i32) also fills *d. The class indices are not read: the caller checks them next with
 * ck_opc_ce_classes on a host copy of the target. */
ck_status ck_opc_loss(const char *be, ck_loss_kind kind, const ck_tensor *y,
                      const ck_tensor *target, ck_ncs_dims *d, ck_error *err);
/* Every class index t[0 .. d->N * d->S) (target's values, in host memory) is in
 * [0, d->C); otherwise CK_ERR_INPUT naming the first bad one by its position in target. */
ck_status ck_opc_ce_classes(const ck_tensor *target, const int32_t *t, const ck_ncs_dims *d,
                            ck_error *err);
/* The loss gradient dy has a float dtype and y's shape. */
ck_status ck_opc_loss_dy(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *dy,
                         ck_error *err);

/* ---- optimizer ---- */

/* After the backend's own check of param's dtype (fn: the optimizer's name): step >= 1, and
 * the gradient and each state tensor opt->kind uses (momentum: state0; adam: state0,
 * state1) is present, has a float dtype and param's element count. */
ck_status ck_opc_optimizer_args(const char *be, const char *fn, const ck_optimizer *opt,
                                int64_t step, const ck_tensor *param, const ck_tensor *grad,
                                const ck_tensor *state0, const ck_tensor *state1,
                                ck_error *err);


/* ---- the broadcast family (broadcast.c; geometry and functions: broadcast.h) ---- */

/* A binary op's two operands (sub, div, maximum, minimum, pow, masked_fill, and add/mul
 * of two shapes or with a constant): each a tensor, or the op's scalar when t[k] is NULL;
 * input[k] is the io->in index whose gradient operand k gets, -1 for a constant. */
typedef struct {
    const ck_tensor *t[2];
    double scalar;
    int input[2];
    ck_bc_geom g;
} ck_opc_bc_operands;

/* The operands of a binary op of the broadcast family and their geometry against y (the
 * output, or dout in backward): every operand broadcasts to y's shape. */
ck_status ck_opc_binary(const char *be, const ck_op_params *op, const ck_op_io *io,
                        const ck_tensor *y, ck_opc_bc_operands *o, ck_error *err);
/* sum, mean, amax (x the input, y the output or dout; operand 0 is y with the reduced dims
 * kept) and expand (x the input, the operand; y the output or dout, the full shape). */
ck_status ck_opc_reduce(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, ck_bc_geom *g, ck_error *err);
/* t broadcasts to full: operand 0 of g is t (softmax's additive mask). */
ck_status ck_opc_bc_against(const char *be, const char *fn, const ck_tensor *full,
                            const ck_tensor *t, ck_bc_geom *g, ck_error *err);
/* Whether the op runs on the broadcast family's kernels: its own kinds, and add/mul with
 * operands of differing shapes or with a constant (op->broadcast, set by their shape rule). */
bool ck_opc_is_broadcast(const ck_op_params *op);

/* ---- shared by the families' checks (common.c) ---- */

/* one input and an output (forward: g NULL) or dout (backward) */
ck_status ck_opc_unary_io(const char *fn, const ck_op_io *io, const ck_op_grads *g,
                          ck_error *err);
/* ck_opc_unary_io, then float dtypes and one element count (ck_opc_pointwise) */
ck_status ck_opc_unary_pointwise(const char *be, const char *fn, const ck_op_io *io,
                                 const ck_op_grads *g, ck_error *err);
/* ref and t (when not NULL) have float dtypes; with `shape` set, t has ref's shape. */
ck_status ck_opc_like(const char *be, const char *fn, const ck_tensor *ref, const ck_tensor *t,
                      bool shape, ck_error *err);
/* min_in to CK_MAX_INPUTS inputs, none missing */
ck_status ck_opc_inputs(const char *fn, const ck_op_io *io, int min_in, ck_error *err);
/* t is present (what: its role, for the message) */
ck_status ck_opc_need(const char *fn, const ck_tensor *t, const char *what, ck_error *err);
/* The arguments a fused relu's backward promises (backends/backend.h): for
 * ck_op_grads.din0_relu_over_input, one input r with data and din[0] in r's own buffer, the
 * same float dtype and shape, no weight or bias gradient; for loss_backward's relu_over, a
 * mean, sum or mse loss whose gradient dy is the prediction y's own buffer, same dtype.
 * CK_ERR_INTERNAL (the executor sets them) naming the op; checked before any write. */
ck_status ck_opc_relu_over_input(const ck_op_params *op, const ck_op_io *io,
                                 const ck_op_grads *g, ck_error *err);
ck_status ck_opc_loss_relu_over(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *dy,
                                ck_error *err);
/* the product of s->dim[from..to) */
int64_t ck_opc_prod(const ck_shape *s, int from, int to);
/* x (N, C, s...) and y (N, C, o...) with nsp spatial dims each */
bool ck_opc_same_nc(int nsp, const ck_tensor *x, const ck_tensor *y);

/* ---- the ops added with the transformer and modern U-Net cases ---- */

/* y = op(A) op(B): a = in[0]; b = in[1] or the weight. */
ck_status ck_opc_matmul(const char *be, const ck_op_params *op, const ck_tensor *a,
                          const ck_tensor *b, const ck_tensor *y, ck_matmul_geom *g,
                          ck_error *err);
/* x viewed (outer, D, inner) around op->dim; y (or dx) x's shape */
ck_status ck_opc_softmax(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, int64_t *outer, int64_t *D, int64_t *inner,
                           ck_error *err);
/* q (N, Lq, H*Dk), k (N, Lk, H*Dk), v (N, Lk, H*Dv), y (N, Lq, H*Dv); rng and rate are
 * the caller's */
ck_status ck_opc_attention(const char *be, const ck_op_params *op, const ck_tensor *q,
                             const ck_tensor *k, const ck_tensor *v, const ck_tensor *y,
                             ck_attn_geom *g, ck_error *err);
/* ids i32 (...), w (V, E), y (..., E): M = numel(ids) */
ck_status ck_opc_embedding(const char *be, const ck_tensor *ids, const ck_tensor *w,
                             const ck_tensor *y, int64_t *M, int64_t *V, int64_t *E,
                             ck_error *err);
/* Every id in [0, V): CK_ERR_INPUT naming the first bad one (host memory ids). */
ck_status ck_opc_embedding_ids(const ck_tensor *t, const int32_t *ids, int64_t M, int64_t V,
                                 ck_error *err);
/* y has op->perm applied to x's dims */
ck_status ck_opc_permute(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, ck_error *err);
/* same element count */
ck_status ck_opc_reshape(const char *be, const ck_tensor *x, const ck_tensor *y,
                           ck_error *err);
/* rows R and row length D over the trailing op->n_norm dims (0: every non-batch dim);
 * w NULL or D elements */
ck_status ck_opc_norm_rows(const char *be, const char *fn, const ck_op_params *op,
                        const ck_tensor *x, const ck_tensor *y, const ck_tensor *w,
                        int64_t *R, int64_t *D, ck_error *err);
/* x (N, C, ...) viewed (N, C, S) with op->groups dividing C */
ck_status ck_opc_groupnorm(const char *be, const ck_op_params *op, const ck_tensor *x,
                             const ck_tensor *y, const ck_tensor *w, const ck_tensor *b,
                             int64_t *N, int64_t *C, int64_t *S, ck_error *err);
ck_status ck_opc_conv_transpose(const char *be, const ck_op_params *op, const ck_tensor *x,
                         const ck_tensor *w, const ck_tensor *b, const ck_tensor *y,
                         ck_convt_geom *g, ck_error *err);
ck_status ck_opc_upsample_linear(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, ck_lerp_geom *g, ck_error *err);
/* pools with padding (or count_include_pad false) */
ck_status ck_opc_pool_pad(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, ck_pool_pad_geom *g, ck_error *err);
/* x (N, ...), w x[1:], y (or dy) x's shape: N and M = numel(w) */
ck_status ck_opc_positional(const char *be, const ck_tensor *x, const ck_tensor *w,
                              const ck_tensor *y, int64_t *N, int64_t *M, ck_error *err);
/* logits y viewed (outer, C, inner) around class_dim; target (outer, inner) i32 */
ck_status ck_opc_ce_spec(const char *be, const ck_loss_spec *loss, const ck_tensor *y,
                      const ck_tensor *target, int64_t *outer, int64_t *C, int64_t *inner,
                      ck_error *err);
/* Every target is ignore_index or in [0, C); not all positions ignored. */
ck_status ck_opc_ce_spec_classes(const ck_loss_spec *loss, const ck_tensor *target,
                              const int32_t *t, int64_t n, int64_t C, ck_error *err);

#ifdef __cplusplus
}
#endif

#endif
