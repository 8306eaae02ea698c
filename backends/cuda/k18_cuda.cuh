/*
 * Private to the CUDA backend: issue-18 op kernels, launched from the op entry points.
 * Same semantics as the reference backend's double kernels (backends/ref/k18.h): every
 * thread computes one output (or gradient) element in double with the reference's
 * expression and rounds it once (ck_st) or adds it with one rounding (ck_acc). Gradients
 * the reference scatters (pool, upsample, embedding, permute, matmul's shared operand) are
 * gathered here, one element per thread, so no atomics are needed and the result is
 * repeatable; the summation order may differ from the reference's (close, not bitwise).
 */
#ifndef CK_K18_CUDA_CUH
#define CK_K18_CUDA_CUH

#include "backends/cuda/cuda_common.cuh"

extern "C" {
#include "backends/op_check18.h"
#include "backends/op_geom18.h"
}

ck_status k18c_matmul_fwd(ck_cuda *cu, ck_dv y, ck_dv a, ck_dv b, const k18_matmul_geom &g,
                          ck_error *err);
ck_status k18c_matmul_bwd(ck_cuda *cu, ck_dv da, ck_dv db, ck_dv dy, ck_dv a, ck_dv b,
                          const k18_matmul_geom &g, ck_error *err);
ck_status k18c_softmax_fwd(ck_cuda *cu, ck_dv y, ck_dv x, int64_t outer, int64_t D,
                           int64_t inner, bool log_softmax, ck_error *err);
ck_status k18c_softmax_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, ck_dv x, int64_t outer, int64_t D,
                           int64_t inner, bool log_softmax, ck_error *err);
ck_status k18c_attention_fwd(ck_cuda *cu, ck_dv y, ck_dv q, ck_dv k, ck_dv v,
                             const k18_attn_geom &g, ck_error *err);
ck_status k18c_attention_bwd(ck_cuda *cu, ck_dv dq, ck_dv dk, ck_dv dv, ck_dv dy, ck_dv q,
                             ck_dv k, ck_dv v, const k18_attn_geom &g, ck_error *err);
ck_status k18c_embedding_fwd(ck_cuda *cu, ck_dv y, const int32_t *ids, ck_dv w, int64_t M,
                             int64_t E, ck_error *err);
ck_status k18c_embedding_bwd(ck_cuda *cu, ck_dv dw, ck_dv dy, const int32_t *ids, int64_t M,
                             int64_t V, int64_t E, ck_error *err);
ck_status k18c_permute(ck_cuda *cu, ck_dv dst, ck_dv src, int ndim, const int64_t *xdim,
                       const int *perm, bool backward, ck_error *err);
ck_status k18c_rmsnorm_fwd(ck_cuda *cu, ck_dv y, ck_dv x, ck_dv w, int64_t R, int64_t D,
                           double eps, ck_error *err);
ck_status k18c_rmsnorm_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv dy, ck_dv x, ck_dv w,
                           int64_t R, int64_t D, double eps, ck_error *err);
ck_status k18c_groupnorm_fwd(ck_cuda *cu, ck_dv y, ck_dv saved, ck_dv x, ck_dv w, ck_dv b,
                             int64_t N, int64_t C, int64_t S, int64_t G, double eps,
                             ck_error *err);
ck_status k18c_groupnorm_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv db, ck_dv dy, ck_dv x,
                             ck_dv w, int64_t N, int64_t C, int64_t S, int64_t G, double eps,
                             ck_error *err);
/* kind: 0 mul, 1 silu, 2 gelu tanh; backward 3: mul(x, x) into one gradient */
ck_status k18c_pointwise_fwd(ck_cuda *cu, int kind, ck_dv y, ck_dv a, ck_dv b, int64_t n,
                             ck_error *err);
ck_status k18c_pointwise_bwd(ck_cuda *cu, int kind, ck_dv da, ck_dv db, ck_dv dy, ck_dv a,
                             ck_dv b, int64_t n, ck_error *err);
ck_status k18c_convt_fwd(ck_cuda *cu, ck_dv y, ck_dv x, ck_dv w, ck_dv b,
                         const k18_convt_geom &g, ck_error *err);
ck_status k18c_convt_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv db, ck_dv dy, ck_dv x, ck_dv w,
                         const k18_convt_geom &g, ck_error *err);
ck_status k18c_lerp_fwd(ck_cuda *cu, ck_dv y, ck_dv x, const k18_lerp_geom &g, ck_error *err);
ck_status k18c_lerp_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, const k18_lerp_geom &g, ck_error *err);
ck_status k18c_pool_fwd(ck_cuda *cu, ck_dv y, ck_dv x, const k18_pool_geom &g, ck_error *err);
ck_status k18c_pool_bwd(ck_cuda *cu, ck_dv dx, ck_dv dy, ck_dv x, const k18_pool_geom &g,
                        ck_error *err);

/* the op families' entry points, dispatched by cuda_backend.cu */
#define K18_CUDA_OP_DECL(fam)                                                              \
    ck_status cuda_##fam##_forward(ck_cuda *cu, const ck_op_params *op,                    \
                                   const ck_fwd_args *args, ck_op_io *io, ck_error *err);  \
    ck_status cuda_##fam##_backward(ck_cuda *cu, const ck_op_params *op,                   \
                                    const ck_fwd_args *args, const ck_op_io *io,           \
                                    ck_op_grads *g, ck_error *err);
K18_CUDA_OP_DECL(matmul)          /* CK_OP_MATMUL */
K18_CUDA_OP_DECL(softmax)         /* CK_OP_SOFTMAX, CK_OP_LOG_SOFTMAX */
K18_CUDA_OP_DECL(attention)       /* CK_OP_ATTENTION */
K18_CUDA_OP_DECL(embedding)       /* CK_OP_EMBEDDING */
K18_CUDA_OP_DECL(permute)         /* CK_OP_PERMUTE, CK_OP_RESHAPE */
K18_CUDA_OP_DECL(rmsnorm)         /* CK_OP_RMSNORM */
K18_CUDA_OP_DECL(groupnorm)       /* CK_OP_GROUPNORM */
K18_CUDA_OP_DECL(pointwise18)     /* CK_OP_MUL, CK_OP_SILU, CK_OP_GELU tanh */
K18_CUDA_OP_DECL(conv_transpose)  /* CK_OP_CONV_TRANSPOSE */
K18_CUDA_OP_DECL(upsample_linear) /* CK_OP_UPSAMPLE, linear modes */
K18_CUDA_OP_DECL(pool_pad)        /* padded CK_OP_MAXPOOL, CK_OP_AVGPOOL */
K18_CUDA_OP_DECL(positional)      /* CK_OP_POSITIONAL (pointwise18.cu) */

#undef K18_CUDA_OP_DECL

/* cross-entropy over a class dim with ignore_index (cross_entropy.cu) */
ck_status cuda_ce_forward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                          const ck_tensor *target, double *out, ck_error *err);
ck_status cuda_ce_backward(ck_cuda *cu, const ck_loss_spec *loss, const ck_tensor *y,
                           const ck_tensor *target, double scale, ck_tensor *dy, ck_error *err);

#endif
