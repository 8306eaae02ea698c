/*
 * Op kinds and their resolved parameters: the vocabulary the core and every backend share.
 *
 * A ck_op_params is plain data (no JSON, no strings): the case parser fills it from a
 * layer's options, the graph builder resolves padding against the input shape, and a
 * backend reads it to run the op. Semantics of every op (what forward computes, what is
 * saved for backward, how parameters are shaped and initialised) are in cases/README.md.
 */
#ifndef CK_OPS_H
#define CK_OPS_H

#include <stdbool.h>
#include <stdint.h>

#define CK_MAX_INPUTS 8
#define CK_MAX_SPATIAL 3

typedef enum {
    CK_OP_LINEAR = 0,     /* y = x W^T + b over the last dimension; W (units, in), b (units) */
    CK_OP_CONV,           /* conv1d/2d/3d, cross-correlation as PyTorch; W (F, C, k...), b (F) */
    CK_OP_RELU,
    CK_OP_LEAKY_RELU,     /* slope */
    CK_OP_GELU,           /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    CK_OP_TANH,
    CK_OP_SIGMOID,
    CK_OP_BATCHNORM,      /* per channel (dim 1) over N and spatial; weight, bias (C);
                             buffers running_mean, running_var (C), num_batches_tracked (i64) */
    CK_OP_LAYERNORM,      /* per sample over all non-batch dims; weight, bias shaped x[1:] */
    CK_OP_DROPOUT,        /* inverted dropout: y = x * keep / (1 - rate) */
    CK_OP_GAUSSIAN_NOISE, /* y = x + stddev * n, n ~ N(0, 1) */
    CK_OP_MAXPOOL,        /* window kernel[], stride[], no padding, floor; first max wins */
    CK_OP_AVGPOOL,
    CK_OP_UPSAMPLE,       /* nearest, integer scale[] per spatial dim */
    CK_OP_ADD,            /* n >= 2 inputs of one shape */
    CK_OP_CONCAT,         /* n >= 2 inputs joined along dim 1 (channels) */
    CK_OP_FLATTEN,        /* (N, ...) -> (N, prod ...) */
    /* ---- transformers and modern U-Nets (issue 18; cases/README.md) ---- */
    CK_OP_MATMUL,         /* batched op(A) op(B): 2 inputs, or 1 input and weight (K, units) */
    CK_OP_SOFTMAX,        /* over dim */
    CK_OP_LOG_SOFTMAX,    /* over dim */
    CK_OP_ATTENTION,      /* scaled dot-product over q, k, v (N, L, heads * d); causal,
                             dropout on the probabilities (rate) */
    CK_OP_EMBEDDING,      /* i32 ids (...) -> (..., units); weight (vocab, units) */
    CK_OP_RESHAPE,        /* to shape[] */
    CK_OP_PERMUTE,        /* permute(perm) / transpose(dim0, dim1) */
    CK_OP_RMSNORM,        /* over the trailing normalized_shape dims; weight */
    CK_OP_GROUPNORM,      /* groups of channels over (N, C, ...); weight, bias (C) */
    CK_OP_MUL,            /* element-wise product of 2 inputs of one shape */
    CK_OP_SILU,           /* x sigmoid(x) */
    CK_OP_CONV_TRANSPOSE, /* conv_transpose1d/2d/3d as PyTorch; W (C, F, k...), b (F) */
    CK_OP_POSITIONAL,     /* learned positions: y = x + W over (N, L, ...); W (L, ...) */
    CK_OP_KIND_COUNT
} ck_op_kind;

typedef enum { CK_PAD_VALID = 0, CK_PAD_SAME, CK_PAD_EXPLICIT } ck_pad_mode;
typedef enum {
    CK_UPSAMPLE_NEAREST = 0,
    CK_UPSAMPLE_LINEAR /* linear, bilinear, trilinear: by the op's spatial dims */
} ck_upsample_mode;

/* the most dims a reshape target, permutation or normalized_shape has (CK_MAX_DIMS) */
#define CK_OP_MAX_DIMS 8

typedef struct {
    ck_op_kind kind;
    int nsp; /* spatial dims (1..3) of conv/pool/upsample; 0 otherwise */

    int64_t units;   /* linear */
    int64_t filters; /* conv */
    bool bias;       /* linear, conv */

    /* conv and pool windows (first nsp entries used) */
    int kernel[CK_MAX_SPATIAL];
    int stride[CK_MAX_SPATIAL];
    int dilation[CK_MAX_SPATIAL];
    ck_pad_mode pad_mode;          /* conv only; pools never pad */
    int pad[CK_MAX_SPATIAL];       /* as written when pad_mode is EXPLICIT (symmetric) */
    int pad_lo[CK_MAX_SPATIAL];    /* resolved by the graph builder */
    int pad_hi[CK_MAX_SPATIAL];

    int scale[CK_MAX_SPATIAL]; /* upsample */

    double slope;    /* leaky_relu, default 0.01 */
    double momentum; /* batchnorm, default 0.1 */
    double eps;      /* batchnorm and layernorm, default 1e-5 */
    bool eval;       /* batchnorm: use running statistics, update nothing */
    double rate;     /* dropout, in [0, 1) */
    double stddev;   /* gaussian_noise, >= 0 */

    /* ---- issue 18 ---- */
    bool gelu_tanh;          /* gelu: approximate "tanh" */
    int dim;                 /* softmax, log_softmax: as written (negative from the end);
                                resolved to >= 0 by the graph builder; default -1 */
    bool trans_a, trans_b;   /* matmul: transpose_a, transpose_b */
    int64_t heads;           /* attention, default 1 */
    bool causal;             /* attention */
    double attn_scale;       /* attention: scale (0: 1 / sqrt(head dim)) */
    int64_t vocab;           /* embedding (units: the embedding dim) */
    int n_shape;             /* reshape: target shape as written (one -1 allowed) */
    int64_t shape[CK_OP_MAX_DIMS];
    int n_perm;              /* permute: dims as written; transpose: 0 (dim0, dim1) */
    int perm[CK_OP_MAX_DIMS]; /* resolved to >= 0 by the graph builder (transpose too) */
    int dim0, dim1;          /* transpose */
    int n_norm;              /* layernorm/rmsnorm: normalized_shape's length (0: layernorm
                                normalises every non-batch dim, the pre-issue-18 rule) */
    int64_t norm_shape[CK_OP_MAX_DIMS];
    int64_t groups;          /* groupnorm */
    int out_pad[CK_MAX_SPATIAL]; /* conv_transpose: output_padding */
    ck_upsample_mode mode;   /* upsample, default nearest */
    bool align_corners;      /* upsample (linear modes) */
    bool count_include_pad;  /* avgpool with padding, default true (PyTorch) */
} ck_op_params;

typedef enum {
    CK_LOSS_MEAN = 0,         /* L = mean(y) */
    CK_LOSS_SUM,              /* L = sum(y) */
    CK_LOSS_MSE,              /* L = mean((y - t)^2), t ~ U(0, 1) shaped like y */
    CK_LOSS_CROSS_ENTROPY,    /* L = mean over (n, spatial) of -log softmax_c(y)[t], t in [0, C) */
    CK_LOSS_KIND_COUNT
} ck_loss_kind;

/* The loss as the backends' optional cross-entropy capability sees it (backend.h,
 * CK_PROC_CE_LOSS): cross-entropy over class_dim (resolved >= 0; 1 is PyTorch's layout)
 * whose positions with target == ignore_index count for nothing. */
typedef struct {
    ck_loss_kind kind;
    int class_dim;
    bool has_ignore;
    int64_t ignore_index;
} ck_loss_spec;

typedef enum {
    CK_OPT_SGD = 0,
    CK_OPT_MOMENTUM,
    CK_OPT_ADAM,
    CK_OPT_ADAMW, /* adam with decoupled weight decay: p -= lr wd p first (PyTorch AdamW) */
    CK_OPT_KIND_COUNT
} ck_optimizer_kind;

typedef struct {
    ck_optimizer_kind kind;
    double lr;
    double momentum;     /* momentum: v = momentum v + g; p -= lr v (PyTorch SGD) */
    double beta1, beta2; /* adam, PyTorch defaults 0.9, 0.999 */
    double eps;          /* adam, default 1e-8 */
    double weight_decay; /* L2 added to the gradient, default 0; adamw: decoupled, default
                            0.01 */
} ck_optimizer;

const char *ck_op_kind_name(ck_op_kind k);       /* "conv", "relu", ... (family name) */
const char *ck_loss_kind_name(ck_loss_kind k);   /* "mean", "sum", "mse", "cross_entropy" */
const char *ck_optimizer_kind_name(ck_optimizer_kind k);

/* Whether an op's parameters run in the low dtype of an fp16/bf16 run (precision.md: the
 * weight-like ops linear, conv, conv_transpose, matmul, embedding), or stay fp32 (norms). */
static inline bool ck_op_casts_params(ck_op_kind k)
{
    return k == CK_OP_LINEAR || k == CK_OP_CONV || k == CK_OP_CONV_TRANSPOSE ||
           k == CK_OP_MATMUL || k == CK_OP_EMBEDDING || k == CK_OP_POSITIONAL;
}

/* Sets the defaults documented in cases/README.md for an op of the given kind. */
void ck_op_params_default(ck_op_params *p, ck_op_kind kind, int nsp);

#endif
