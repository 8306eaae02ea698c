/*
 * Host-side argument checks and geometry for the issue-18 ops (matmul, softmax,
 * attention, embedding, reshape, permute, rmsnorm, groupnorm, mul, silu, gelu tanh,
 * conv_transpose, linear upsampling, padded pooling, cross-entropy over a class dim),
 * shared by the reference (backends/ref) and CUDA (backends/cuda) backends as op_check.h
 * is: every call is validated the same way with the same messages, and the geometry the
 * kernels run on (backends/ref/k18.h) is derived here once.
 */
#ifndef CK_OP_CHECK18_H
#define CK_OP_CHECK18_H

#include "backends/op_check.h"
#include "backends/op_geom18.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = op(A) op(B): a = in[0]; b = in[1] or the weight. */
ck_status ck_opc18_matmul(const char *be, const ck_op_params *op, const ck_tensor *a,
                          const ck_tensor *b, const ck_tensor *y, k18_matmul_geom *g,
                          ck_error *err);
/* x viewed (outer, D, inner) around op->dim; y (or dx) x's shape */
ck_status ck_opc18_softmax(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, int64_t *outer, int64_t *D, int64_t *inner,
                           ck_error *err);
/* q (N, Lq, H*Dk), k (N, Lk, H*Dk), v (N, Lk, H*Dv), y (N, Lq, H*Dv); rng and rate are
 * the caller's */
ck_status ck_opc18_attention(const char *be, const ck_op_params *op, const ck_tensor *q,
                             const ck_tensor *k, const ck_tensor *v, const ck_tensor *y,
                             k18_attn_geom *g, ck_error *err);
/* ids i32 (...), w (V, E), y (..., E): M = numel(ids) */
ck_status ck_opc18_embedding(const char *be, const ck_tensor *ids, const ck_tensor *w,
                             const ck_tensor *y, int64_t *M, int64_t *V, int64_t *E,
                             ck_error *err);
/* Every id in [0, V): CK_ERR_INPUT naming the first bad one (host memory ids). */
ck_status ck_opc18_embedding_ids(const ck_tensor *t, const int32_t *ids, int64_t M, int64_t V,
                                 ck_error *err);
/* y has op->perm applied to x's dims */
ck_status ck_opc18_permute(const char *be, const ck_op_params *op, const ck_tensor *x,
                           const ck_tensor *y, ck_error *err);
/* same element count */
ck_status ck_opc18_reshape(const char *be, const ck_tensor *x, const ck_tensor *y,
                           ck_error *err);
/* rows R and row length D over the trailing op->n_norm dims (0: every non-batch dim);
 * w NULL or D elements */
ck_status ck_opc18_rows(const char *be, const char *fn, const ck_op_params *op,
                        const ck_tensor *x, const ck_tensor *y, const ck_tensor *w,
                        int64_t *R, int64_t *D, ck_error *err);
/* x (N, C, ...) viewed (N, C, S) with op->groups dividing C */
ck_status ck_opc18_groupnorm(const char *be, const ck_op_params *op, const ck_tensor *x,
                             const ck_tensor *y, const ck_tensor *w, const ck_tensor *b,
                             int64_t *N, int64_t *C, int64_t *S, ck_error *err);
ck_status ck_opc18_convt(const char *be, const ck_op_params *op, const ck_tensor *x,
                         const ck_tensor *w, const ck_tensor *b, const ck_tensor *y,
                         k18_convt_geom *g, ck_error *err);
ck_status ck_opc18_lerp(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, k18_lerp_geom *g, ck_error *err);
/* pools with padding (or count_include_pad false) */
ck_status ck_opc18_pool(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, k18_pool_geom *g, ck_error *err);
/* true when a pool needs the padded kernel */
bool ck_opc18_pool_padded(const ck_op_params *op);
/* x (N, ...), w x[1:], y (or dy) x's shape: N and M = numel(w) */
ck_status ck_opc18_positional(const char *be, const ck_tensor *x, const ck_tensor *w,
                              const ck_tensor *y, int64_t *N, int64_t *M, ck_error *err);
/* logits y viewed (outer, C, inner) around class_dim; target (outer, inner) i32 */
ck_status ck_opc18_ce(const char *be, const ck_loss_spec *loss, const ck_tensor *y,
                      const ck_tensor *target, int64_t *outer, int64_t *C, int64_t *inner,
                      ck_error *err);
/* Every target is ignore_index or in [0, C); not all positions ignored. */
ck_status ck_opc18_ce_classes(const ck_loss_spec *loss, const ck_tensor *target,
                              const int32_t *t, int64_t n, int64_t C, ck_error *err);

#ifdef __cplusplus
}
#endif

#endif
