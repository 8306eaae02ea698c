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

/* The op families: an op's family names its files in every layer (harness/model/ops/,
 * backends/check/, backends/ref/, backends/cpu/, backends/cuda/; CONTRIBUTING.md). */
typedef enum {
    CK_FAMILY_LINEAR = 0, /* linear, matmul, embedding */
    CK_FAMILY_CONV,       /* conv, conv_transpose */
    CK_FAMILY_POOL,       /* maxpool, avgpool */
    CK_FAMILY_UPSAMPLE,   /* upsample (nearest and linear modes) */
    CK_FAMILY_POINTWISE,  /* activations, add, mul, positional */
    CK_FAMILY_NORM,       /* batchnorm, layernorm, rmsnorm, groupnorm */
    CK_FAMILY_RANDOM,     /* dropout, gaussian_noise */
    CK_FAMILY_ATTENTION,  /* softmax, log_softmax, attention */
    CK_FAMILY_SHAPE,      /* concat, flatten, reshape, permute */
    CK_FAMILY_BROADCAST,  /* numpy-broadcast element-wise ops, expand, reductions */
    CK_FAMILY_COUNT
} ck_op_family;

/* Every op kind, once: X(ENUM, "name", FAMILY). The name is the kind's (family-wide) name;
 * what a case writes ("conv2d", "transpose") and everything else about an op is in its
 * family's definition rows (harness/model/ops/<family>.c). Semantics: cases/README.md. */
#define CK_OP_KINDS(X)                                                                      \
    X(LINEAR, "linear", LINEAR)             /* y = x W^T + b over the last dimension */       \
    X(CONV, "conv", CONV)                   /* conv1d/2d/3d, cross-correlation as PyTorch */  \
    X(RELU, "relu", POINTWISE)                                                                \
    X(LEAKY_RELU, "leaky_relu", POINTWISE)                                                    \
    X(GELU, "gelu", POINTWISE)              /* exact, or tanh-approximated */                 \
    X(TANH, "tanh", POINTWISE)                                                                \
    X(SIGMOID, "sigmoid", POINTWISE)                                                          \
    X(BATCHNORM, "batchnorm", NORM)                                                           \
    X(LAYERNORM, "layernorm", NORM)                                                           \
    X(DROPOUT, "dropout", RANDOM)           /* inverted dropout */                            \
    X(GAUSSIAN_NOISE, "gaussian_noise", RANDOM)                                               \
    X(MAXPOOL, "maxpool", POOL)                                                               \
    X(AVGPOOL, "avgpool", POOL)                                                               \
    X(UPSAMPLE, "upsample", UPSAMPLE)                                                         \
    X(ADD, "add", POINTWISE)                /* n >= 2 inputs of one shape */                  \
    X(CONCAT, "concat", SHAPE)              /* n >= 2 inputs joined along dim 1 */            \
    X(FLATTEN, "flatten", SHAPE)                                                              \
    X(MATMUL, "matmul", LINEAR)             /* batched op(A) op(B) */                         \
    X(SOFTMAX, "softmax", ATTENTION)                                                          \
    X(LOG_SOFTMAX, "log_softmax", ATTENTION)                                                  \
    X(ATTENTION, "attention", ATTENTION)    /* scaled dot-product, heads merged */            \
    X(EMBEDDING, "embedding", LINEAR)                                                         \
    X(RESHAPE, "reshape", SHAPE)                                                              \
    X(PERMUTE, "permute", SHAPE)            /* permute and transpose */                       \
    X(RMSNORM, "rmsnorm", NORM)                                                               \
    X(GROUPNORM, "groupnorm", NORM)                                                           \
    X(MUL, "mul", POINTWISE)                /* element-wise product of 2 inputs */            \
    X(SILU, "silu", POINTWISE)                                                                \
    X(CONV_TRANSPOSE, "conv_transpose", CONV)                                                 \
    X(POSITIONAL, "positional", POINTWISE)  /* learned positions: y = x + W */              \
    X(SQRT, "sqrt", POINTWISE)                                                                \
    X(RSQRT, "rsqrt", POINTWISE)            /* 1 / sqrt(x) */                                 \
    X(RECIPROCAL, "reciprocal", POINTWISE)                                                    \
    X(EXP, "exp", POINTWISE)                                                                  \
    X(LOG, "log", POINTWISE)                /* natural logarithm */                           \
    X(NEG, "neg", POINTWISE)                                                                  \
    X(ERF, "erf", POINTWISE)                                                                  \
    X(ABS, "abs", POINTWISE)                                                                  \
    X(SLICE, "slice", SHAPE)                /* x[..., start:end, ...] along one dim */       \
    X(SUB, "sub", BROADCAST)                /* a - b, numpy broadcasting */                  \
    X(DIV, "div", BROADCAST)                /* a / b */                                      \
    X(MAXIMUM, "maximum", BROADCAST)        /* torch.maximum: ties share the gradient */     \
    X(MINIMUM, "minimum", BROADCAST)                                                          \
    X(POW, "pow", BROADCAST)                /* x ** exponent (a constant) */                 \
    X(MASKED_FILL, "masked_fill", BROADCAST) /* value where a constant mask is set */        \
    X(EXPAND, "expand", BROADCAST)          /* broadcast to a larger shape */                \
    X(REDUCE_SUM, "sum", BROADCAST)         /* over dims, keepdim or not */                  \
    X(REDUCE_MEAN, "mean", BROADCAST)                                                         \
    X(REDUCE_MAX, "amax", BROADCAST)        /* torch.amax: ties share the gradient */      \
    X(CAST, "cast", POINTWISE)              /* round to a float dtype; dy to the source's */

#define CK_OP_KIND_ENUM_(e, name, fam) CK_OP_##e,
typedef enum { CK_OP_KINDS(CK_OP_KIND_ENUM_) CK_OP_KIND_COUNT } ck_op_kind;
#undef CK_OP_KIND_ENUM_

typedef enum { CK_PAD_VALID = 0, CK_PAD_SAME, CK_PAD_EXPLICIT } ck_pad_mode;
typedef enum {
    CK_UPSAMPLE_NEAREST = 0,
    CK_UPSAMPLE_LINEAR /* linear, bilinear, trilinear: by the op's spatial dims */
} ck_upsample_mode;

/* the most dims a reshape target, permutation or normalized_shape has (CK_MAX_DIMS) */
#define CK_OP_MAX_DIMS 8

/* linear/conv weight initialisation ("init" in a layer; cases/README.md) */
typedef enum {
    CK_INIT_TORCH_DEFAULT = 0, /* weight and bias U(+-1/sqrt(fan_in)) (PyTorch's default) */
    CK_INIT_KAIMING_NORMAL,    /* weight N(0, 2/fan_in), bias 0 (He, for ReLU stacks) */
    CK_INIT_KAIMING_UNIFORM,   /* weight U(+-sqrt(6/fan_in)), bias 0 */
    CK_INIT_XAVIER_UNIFORM,    /* weight U(+-sqrt(6/(fan_in+fan_out))), bias 0 */
    CK_INIT_XAVIER_NORMAL,     /* weight N(0, 2/(fan_in+fan_out)), bias 0 */
    CK_INIT_ZEROS              /* weight and bias 0: a dead layer (vacuity tests) */
} ck_init_scheme;

typedef struct {
    ck_op_kind kind;
    int nsp; /* spatial dims (1..3) of conv/pool/upsample; 0 otherwise */
    int init; /* linear/conv: ck_init_scheme, default torch_default */

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
    /* batchnorm, set by the graph builder from policies.reduction_dtype "low" (a canary):
     * in fp16/bf16 runs the batch statistics are summed in the low dtype, rounding after
     * every addition, instead of in fp32 or wider. Only the reference backend has it. */
    bool low_precision_reduction;

    /* ---- transformers and modern U-Nets ---- */
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
                                normalises every non-batch dim) */
    int64_t norm_shape[CK_OP_MAX_DIMS];
    int64_t groups;          /* groupnorm */
    int n_slice;             /* slice: `range` as written ([start, end], 2 values) */
    int64_t slice_range[CK_OP_MAX_DIMS]; /* slice: start, end along `dim` */
    int out_pad[CK_MAX_SPATIAL]; /* conv_transpose: output_padding */
    ck_upsample_mode mode;   /* upsample, default nearest */
    bool align_corners;      /* upsample (linear modes) */
    bool count_include_pad;  /* avgpool with padding, default true (PyTorch) */

    /* ---- the broadcast family (numpy broadcasting) ---- */
    double scalar;           /* add/sub/mul/div/maximum/minimum with one input: the constant
                                operand when there is no constant tensor (NaN: none);
                                pow: the exponent; masked_fill: the value */
    int n_const;             /* the constant tensor's shape (a buffer `constant`; masked_fill:
                                `mask`), 0: none */
    int64_t const_shape[CK_OP_MAX_DIMS];
    bool const_first;        /* the constant is the left operand: c - x, c / x */
    int n_axes;              /* sum, mean, amax: the dims reduced as written (resolved to >= 0
                                and sorted by the graph builder) */
    int axes[CK_OP_MAX_DIMS];
    bool keepdim;            /* sum, mean, amax: reduced dims kept with size 1 */
    int cast_to;             /* cast: the target dtype (a ck_dtype: CK_F32, CK_F16 or CK_BF16) */
    int cast_from;           /* cast: the source dtype, which backward rounds the gradient to
                                (a ck_dtype; default CK_F32, 0: memset gives it) */
    bool broadcast;          /* add, mul: set by the shape rule when the operands' shapes
                                differ or one is a constant (the broadcast family's kernels
                                run them); never written in a case */
} ck_op_params;

typedef enum {
    CK_LOSS_MEAN = 0,         /* L = mean(y) */
    CK_LOSS_SUM,              /* L = sum(y) */
    CK_LOSS_MSE,              /* L = mean((y - t)^2), t ~ U(0, 1) shaped like y */
    CK_LOSS_CROSS_ENTROPY,    /* L = mean over (n, spatial) of -log softmax_c(y)[t], t in [0, C) */
    CK_LOSS_KIND_COUNT
} ck_loss_kind;

/* The loss as the backends' loss entries see it (backend.h, ce_forward/ce_backward and
 * supports_loss): cross-entropy over class_dim (resolved >= 0; 1 is PyTorch's layout)
 * whose positions with target == ignore_index count for nothing, with label_smoothing e
 * (PyTorch's: each counted position's target is (1 - e) one-hot + e / C uniform). */
typedef struct {
    ck_loss_kind kind;
    int class_dim;
    bool has_ignore;
    int64_t ignore_index;
    double label_smoothing; /* 0 (the default) to 1 */
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

const char *ck_op_kind_name(ck_op_kind k);       /* "conv", "relu", ... (the kind's name) */
ck_op_family ck_op_family_of(ck_op_kind k);      /* CK_FAMILY_COUNT for an unknown kind */
const char *ck_op_family_name(ck_op_family f);   /* "norm", "conv", ... (the files' name) */
const char *ck_loss_kind_name(ck_loss_kind k);   /* "mean", "sum", "mse", "cross_entropy" */
const char *ck_optimizer_kind_name(ck_optimizer_kind k);

/* Sets the defaults documented in cases/README.md for an op of the given kind. */
void ck_op_params_default(ck_op_params *p, ck_op_kind kind, int nsp);

#endif
