/*
 * The reference's double kernels of the transformer and modern U-Net ops (matmul, softmax,
 * attention, embedding, permute, rmsnorm, groupnorm, mul, silu, gelu tanh,
 * conv_transpose, linear upsampling, padded pooling, cross-entropy over a class dim): the computation every dtype runs (the entry points widen
 * each tensor to double once, run these, and round each output element once, or add each
 * gradient contribution with one rounding: ref_elem.h's wide views, harness/precision.md).
 *
 * Conventions: forward kernels OVERWRITE their outputs; backward kernels ACCUMULATE (+=)
 * into every non-NULL gradient (the entry points pass zeroed wide scratch for non-fp64
 * tensors, so a gradient is added to its tensor exactly once). Arrays are row-major and
 * contiguous. Nothing here allocates, fails or prints, except where noted.
 */
#ifndef CK_REF_WIDE_KERNELS_H
#define CK_REF_WIDE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/check/geometry.h"

/* ---- matmul: Y (B, M, N) = op(A) (B, M, K) x op(Bm) (Bb, K, N); Bb = B or 1 (shared) ---- */
void f64_matmul_fwd(double *y, const double *a, const double *b, const ck_matmul_geom *g);
void f64_matmul_bwd(double *da, double *db, const double *dy, const double *a, const double *b,
                    const ck_matmul_geom *g);

/* ---- softmax / log_softmax over the middle dim of x viewed (outer, D, inner) ---- */
void f64_softmax_fwd(double *y, const double *x, int64_t outer, int64_t D, int64_t inner,
                     bool log_softmax);
/* recomputes from x; dx += ... */
void f64_softmax_bwd(double *dx, const double *dy, const double *x, int64_t outer, int64_t D,
                     int64_t inner, bool log_softmax);

/* ---- scaled dot-product attention, heads merged in the last dim ----
 * q (N, Lq, H*Dk), k (N, Lk, H*Dk), v (N, Lk, H*Dv), y (N, Lq, H*Dv).
 * S = q_h k_h^T * scale (+ -inf where causal and j > i), P = softmax_j(S),
 * Pd = P * keep / (1 - rate) with keep of element ((n H + h) Lq + i) Lk + j drawn as
 * dropout's (word >= threshold), y_h = Pd v_h. */
/* scratch: Lk doubles */
void f64_attention_fwd(double *y, const double *q, const double *k, const double *v,
                       const ck_attn_geom *g, double *scratch);
/* scratch: 3 * Lk doubles */
void f64_attention_bwd(double *dq, double *dk, double *dv, const double *dy, const double *q,
                       const double *k, const double *v, const ck_attn_geom *g,
                       double *scratch);
/* the keep decision of probability element e (flat (n, h, i, j) index) */
bool f64_attention_keep(const ck_attn_geom *g, int64_t e);

/* ---- embedding: ids (M) in [0, V), weight (V, E), y (M, E) ---- */
void f64_embedding_fwd(double *y, const int32_t *ids, const double *w, int64_t M, int64_t E);
void f64_embedding_bwd(double *dw, const double *dy, const int32_t *ids, int64_t M, int64_t E);

/* ---- permute: y = x.permute(perm) (rank <= 8); y's shape ydim[d] = xdim[perm[d]] ---- */
void f64_permute_fwd(double *y, const double *x, int ndim, const int64_t *xdim,
                     const int *perm);
void f64_permute_bwd(double *dx, const double *dy, int ndim, const int64_t *xdim,
                     const int *perm);

/* ---- rmsnorm over the last D elements of each of R rows; weight (D) or NULL ----
 * y = x / sqrt(mean(x^2) + eps) * w; saved (R) holds 1/rms when non-NULL */
void f64_rmsnorm_fwd(double *y, double *saved_rinv, const double *x, const double *w,
                     int64_t R, int64_t D, double eps);
void f64_rmsnorm_bwd(double *dx, double *dw, const double *dy, const double *x,
                     const double *w, int64_t R, int64_t D, double eps);

/* ---- groupnorm: x (N, C, S), G groups of C/G channels; weight, bias (C) or NULL;
 * saved (2, N*G) mean, invstd or NULL ---- */
void f64_groupnorm_fwd(double *y, double *saved, const double *x, const double *w,
                       const double *b, int64_t N, int64_t C, int64_t S, int64_t G, double eps);
void f64_groupnorm_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
                       const double *w, int64_t N, int64_t C, int64_t S, int64_t G, double eps);

/* ---- pointwise: mul, silu, gelu (tanh approximation) ---- */
void f64_mul_fwd(double *y, const double *a, const double *b, int64_t n);
void f64_mul_bwd(double *da, double *db, const double *dy, const double *a, const double *b,
                 int64_t n);
double f64_silu(double x);
double f64_dsilu(double x);
double f64_gelu_tanh(double x);
double f64_dgelu_tanh(double x);

/* ---- transposed convolution, brought to 3 spatial dims (leading dims 1) ----
 * x (N, Ci, I...), W (Ci, Co, k...), b (Co) or NULL, y (N, Co, O...) with
 * O = (I - 1) stride - 2 pad + dil (k - 1) + out_pad + 1 (pad may differ lo/hi: y[o] takes
 * input position i, tap t where o = i stride - pad_lo + t dil). */
void f64_convt_fwd(double *y, const double *x, const double *w, const double *b,
                   const ck_convt_geom *g);
void f64_convt_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
                   const double *w, const ck_convt_geom *g);

/* ---- (bi/tri)linear upsampling, 3 spatial dims (leading dims 1, scale 1) ----
 * planes = N * C; output size in * scale per dim; PyTorch's source index rule. */
void f64_upsample_linear_fwd(double *y, const double *x, const ck_lerp_geom *g);
void f64_upsample_linear_bwd(double *dx, const double *dy, const ck_lerp_geom *g);

/* ---- padded pooling, 3 spatial dims (leading dims kernel 1, stride 1, pad 0) ----
 * max: padding is -inf, first maximum (NaN wins) in the row-major window scan;
 * avg: count_include_pad (PyTorch's default) divides by the window clipped to the padded
 * input, else by the number of real elements. */
void f64_pool_fwd(double *y, const double *x, const ck_pool_pad_geom *g);
void f64_pool_bwd(double *dx, const double *dy, const double *x, const ck_pool_pad_geom *g);

/* ---- cross entropy with a class dim, ignore_index and label smoothing ----
 * logits viewed (outer, C, inner) with the class dim in the middle; target (outer, inner)
 * i32. Positions whose target == ignore_index count for nothing; the loss is the mean over
 * the others (NaN when every position is ignored, as PyTorch). Every other target must be
 * in [0, C) (checked by the caller). With smoothing e (PyTorch's label_smoothing): (1 - e)
 * times that mean plus e / C times the mean over the same positions of -sum_c log p_c. */
double f64_ce_loss(const double *y, const int32_t *t, int64_t outer, int64_t C, int64_t inner,
                   int64_t ignore_index, double smoothing);
/* dy = scale dL/dy (overwrites): scale / count (p_c - (1 - e) [c == t] - e / C) */
void f64_ce_grad(double *dy, const double *y, const int32_t *t, int64_t outer, int64_t C,
                 int64_t inner, int64_t ignore_index, double smoothing, double scale);

#endif
