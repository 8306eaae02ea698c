/*
 * The op catalogue, the options each op accepts, and the names of policies, expectations
 * and settings as a case file spells them (catalogue.h).
 */
#include "harness/model/catalogue.h"

#include <math.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------------------------ */
/* The op catalogue                                                                      */
/* ------------------------------------------------------------------------------------ */

#define WINDOW_OPTS_CONV                                                                     \
    "filters (int, required), kernel (int or [ints], required), stride (int or [ints], "    \
    "default 1), padding (\"same\", \"valid\", int or [ints]; default \"valid\"), dilation " \
    "(int or [ints], default 1), bias (bool, default true)"
#define WINDOW_OPTS_POOL                                                                     \
    "pool (int or [ints], required), stride (int or [ints], default pool), padding (int or "  \
    "[ints], default 0, at most pool / 2)"
#define WINDOW_OPTS_AVGPOOL WINDOW_OPTS_POOL ", count_include_pad (bool, default true)"
#define WINDOW_OPTS_CONVT                                                                    \
    "filters (int, required), kernel (int or [ints], required), stride (int or [ints], "    \
    "default 1), padding (int or [ints], default 0), output_padding (int or [ints], default " \
    "0, less than stride or dilation), dilation (int or [ints], default 1), bias (bool, "     \
    "default true)"
#define UPSAMPLE_OPTS                                                                        \
    "scale (int or [ints], required), mode (\"nearest\" or the linear mode of the dims: "   \
    "\"linear\", \"bilinear\", \"trilinear\"; default \"nearest\"), align_corners (bool, "      \
    "default false; linear modes only)"

static const ck_op_info op_catalogue[] = {
    {"linear", CK_OP_LINEAR, 0, "y = x W^T + b over the last dimension",
     "units (int, required), bias (bool, default true)"},
    {"conv1d", CK_OP_CONV, 1, "1-D convolution (cross-correlation) over (N, C, L)",
     WINDOW_OPTS_CONV},
    {"conv2d", CK_OP_CONV, 2, "2-D convolution (cross-correlation) over (N, C, H, W)",
     WINDOW_OPTS_CONV},
    {"conv3d", CK_OP_CONV, 3, "3-D convolution (cross-correlation) over (N, C, D, H, W)",
     WINDOW_OPTS_CONV},
    {"relu", CK_OP_RELU, 0, "max(x, 0)", "none"},
    {"leaky_relu", CK_OP_LEAKY_RELU, 0, "x if x > 0 else slope * x",
     "slope (number, default 0.01)"},
    {"gelu", CK_OP_GELU, 0,
     "GELU: exact 0.5 x (1 + erf(x / sqrt 2)), or tanh-approximated",
     "approximate (\"none\" or \"tanh\", default \"none\")"},
    {"tanh", CK_OP_TANH, 0, "tanh(x)", "none"},
    {"sigmoid", CK_OP_SIGMOID, 0, "1 / (1 + exp(-x))", "none"},
    {"batchnorm", CK_OP_BATCHNORM, 0,
     "per-channel normalisation over N and spatial dims, running statistics",
     "momentum (number in [0, 1], default 0.1), eps (number > 0, default 1e-5), eval (bool, "
     "default false)"},
    {"layernorm", CK_OP_LAYERNORM, 0,
     "normalisation over the trailing normalized_shape dims (default: every non-batch dim), "
     "affine",
     "normalized_shape (int or [ints], default every non-batch dim), eps (number > 0, default "
     "1e-5)"},
    {"dropout", CK_OP_DROPOUT, 0, "inverted dropout: zero with probability rate, scale 1/(1-rate)",
     "rate (number in [0, 1), default 0.5)"},
    {"gaussian_noise", CK_OP_GAUSSIAN_NOISE, 0, "x + stddev * N(0, 1)",
     "stddev (number >= 0, required)"},
    {"maxpool1d", CK_OP_MAXPOOL, 1, "1-D max pooling, -inf padding", WINDOW_OPTS_POOL},
    {"maxpool2d", CK_OP_MAXPOOL, 2, "2-D max pooling, -inf padding", WINDOW_OPTS_POOL},
    {"maxpool3d", CK_OP_MAXPOOL, 3, "3-D max pooling, -inf padding", WINDOW_OPTS_POOL},
    {"avgpool1d", CK_OP_AVGPOOL, 1, "1-D average pooling, zero padding", WINDOW_OPTS_AVGPOOL},
    {"avgpool2d", CK_OP_AVGPOOL, 2, "2-D average pooling, zero padding", WINDOW_OPTS_AVGPOOL},
    {"avgpool3d", CK_OP_AVGPOOL, 3, "3-D average pooling, zero padding", WINDOW_OPTS_AVGPOOL},
    {"upsample1d", CK_OP_UPSAMPLE, 1, "1-D upsampling by an integer scale: nearest or linear",
     UPSAMPLE_OPTS},
    {"upsample2d", CK_OP_UPSAMPLE, 2, "2-D upsampling by an integer scale: nearest or bilinear",
     UPSAMPLE_OPTS},
    {"upsample3d", CK_OP_UPSAMPLE, 3, "3-D upsampling by an integer scale: nearest or trilinear",
     UPSAMPLE_OPTS},
    {"add", CK_OP_ADD, 0, "element-wise sum of 2 to 8 inputs of one shape",
     "inputs (list of 2 to 8 layer names, required)"},
    {"concat", CK_OP_CONCAT, 0, "join 2 to 8 inputs along dim 1 (channels)",
     "inputs (list of 2 to 8 layer names, required)"},
    {"flatten", CK_OP_FLATTEN, 0, "(N, ...) -> (N, product of the rest)", "none"},
    {"matmul", CK_OP_MATMUL, 0,
     "batched matrix product (..., M, K) x (..., K, N): two inputs, or one and a weight (K, units)",
     "inputs (1 or 2 layer names), units (int: one input times a weight), transpose_a (bool, "
     "default false), transpose_b (bool, default false)"},
    {"softmax", CK_OP_SOFTMAX, 0, "softmax over dim", "dim (int, default -1)"},
    {"log_softmax", CK_OP_LOG_SOFTMAX, 0, "log-softmax over dim", "dim (int, default -1)"},
    {"attention", CK_OP_ATTENTION, 0,
     "scaled dot-product attention over q, k, v (N, L, heads * d), heads merged in the output",
     "inputs (1 name: q = k = v, or 3: q, k, v), heads (int, default 1), causal (bool, "
     "default false), dropout (number in [0, 1), default 0), scale (number > 0, default "
     "1/sqrt(d))"},
    {"embedding", CK_OP_EMBEDDING, 0, "token ids (i32, a \"tokens\" input) -> rows of a weight",
     "vocab (int, required), units (int, required: the embedding dim)"},
    {"reshape", CK_OP_RESHAPE, 0, "the same values in another shape (batch dim included)",
     "shape ([ints], required; one -1 is inferred)"},
    {"permute", CK_OP_PERMUTE, 0, "dims reordered: y = x.permute(dims)",
     "dims ([ints], required: a permutation of every dim, negative from the end); dim0 and "
     "dim1 belong to transpose"},
    {"transpose", CK_OP_PERMUTE, 0, "two dims swapped: y = x.transpose(dim0, dim1)",
     "dim0 (int, required), dim1 (int, required); dims belongs to permute"},
    {"rmsnorm", CK_OP_RMSNORM, 0, "x / sqrt(mean(x^2) + eps) * weight over the trailing dims",
     "normalized_shape (int or [ints], default the last dim), eps (number > 0, default 1e-6)"},
    {"groupnorm", CK_OP_GROUPNORM, 0,
     "normalisation per sample over groups of channels, per-channel affine",
     "groups (int, required, divides the channels), eps (number > 0, default 1e-5)"},
    {"mul", CK_OP_MUL, 0, "element-wise product of 2 inputs of one shape",
     "inputs (list of 2 layer names, required)"},
    {"silu", CK_OP_SILU, 0, "x * sigmoid(x)", "none"},
    {"conv_transpose1d", CK_OP_CONV_TRANSPOSE, 1, "1-D transposed convolution over (N, C, L)",
     WINDOW_OPTS_CONVT},
    {"conv_transpose2d", CK_OP_CONV_TRANSPOSE, 2,
     "2-D transposed convolution over (N, C, H, W)", WINDOW_OPTS_CONVT},
    {"positional", CK_OP_POSITIONAL, 0,
     "learned positions: x (N, L, ...) plus a weight (L, ...) shared by the batch", "none"},
    {"conv_transpose3d", CK_OP_CONV_TRANSPOSE, 3,
     "3-D transposed convolution over (N, C, D, H, W)", WINDOW_OPTS_CONVT},
};

#define OP_CATALOGUE_COUNT ((int)(sizeof op_catalogue / sizeof op_catalogue[0]))

const ck_op_info *ck_op_catalogue(int *count)
{
    if (count)
        *count = OP_CATALOGUE_COUNT;
    return op_catalogue;
}

const ck_op_info *ck_op_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < OP_CATALOGUE_COUNT; i++)
        if (strcmp(op_catalogue[i].name, name) == 0)
            return &op_catalogue[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Per-op options: which keys a layer of each kind accepts and where they go             */
/* ------------------------------------------------------------------------------------ */

#define FIELD(f) offsetof(ck_op_params, f)

/* Ends every option list. */
#define OPTIONS_END {NULL, CK_OPTION_BOOL, 0, false, CK_RANGE_ANY_FINITE, 0}

static const ck_option_def no_options[] = {OPTIONS_END};
static const ck_option_def linear_options[] = {
    {"units", CK_OPTION_SIZE, FIELD(units), true, CK_RANGE_ANY_FINITE, 0},
    {"bias", CK_OPTION_BOOL, FIELD(bias), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def conv_options[] = {
    {"filters", CK_OPTION_SIZE, FIELD(filters), true, CK_RANGE_ANY_FINITE, 0},
    {"kernel", CK_OPTION_WINDOW, FIELD(kernel), true, CK_RANGE_ANY_FINITE, 0},
    {"stride", CK_OPTION_WINDOW, FIELD(stride), false, CK_RANGE_ANY_FINITE, 0},
    {"padding", CK_OPTION_PADDING, FIELD(pad), false, CK_RANGE_ANY_FINITE, 0},
    {"dilation", CK_OPTION_WINDOW, FIELD(dilation), false, CK_RANGE_ANY_FINITE, 0},
    {"bias", CK_OPTION_BOOL, FIELD(bias), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def leaky_relu_options[] = {
    {"slope", CK_OPTION_REAL, FIELD(slope), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def batchnorm_options[] = {
    {"momentum", CK_OPTION_REAL, FIELD(momentum), false, CK_RANGE_UNIT_CLOSED, 0},
    {"eps", CK_OPTION_REAL, FIELD(eps), false, CK_RANGE_POSITIVE, 0},
    {"eval", CK_OPTION_BOOL, FIELD(eval), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def layernorm_options[] = {
    {"normalized_shape", CK_OPTION_NORMSHAPE, FIELD(norm_shape), false, CK_RANGE_ANY_FINITE,
     FIELD(n_norm)},
    {"eps", CK_OPTION_REAL, FIELD(eps), false, CK_RANGE_POSITIVE, 0},
    OPTIONS_END,
};
static const ck_option_def gelu_options[] = {
    {"approximate", CK_OPTION_APPROX, FIELD(gelu_tanh), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def matmul_options[] = {
    {"units", CK_OPTION_SIZE, FIELD(units), false, CK_RANGE_ANY_FINITE, 0},
    {"transpose_a", CK_OPTION_BOOL, FIELD(trans_a), false, CK_RANGE_ANY_FINITE, 0},
    {"transpose_b", CK_OPTION_BOOL, FIELD(trans_b), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def softmax_options[] = {
    {"dim", CK_OPTION_DIM, FIELD(dim), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def attention_options[] = {
    {"heads", CK_OPTION_SIZE, FIELD(heads), false, CK_RANGE_ANY_FINITE, 0},
    {"causal", CK_OPTION_BOOL, FIELD(causal), false, CK_RANGE_ANY_FINITE, 0},
    {"dropout", CK_OPTION_REAL, FIELD(rate), false, CK_RANGE_UNIT_HALF_OPEN, 0},
    {"scale", CK_OPTION_REAL, FIELD(attn_scale), false, CK_RANGE_POSITIVE, 0},
    OPTIONS_END,
};
static const ck_option_def embedding_options[] = {
    {"vocab", CK_OPTION_SIZE, FIELD(vocab), true, CK_RANGE_ANY_FINITE, 0},
    {"units", CK_OPTION_SIZE, FIELD(units), true, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def reshape_options[] = {
    {"shape", CK_OPTION_SHAPE, FIELD(shape), true, {-1.0, INFINITY, false, false},
     FIELD(n_shape)},
    OPTIONS_END,
};
static const ck_option_def permute_options[] = {
    {"dims", CK_OPTION_DIMLIST, FIELD(perm), false, CK_RANGE_ANY_FINITE, FIELD(n_perm)},
    {"dim0", CK_OPTION_DIM, FIELD(dim0), false, CK_RANGE_ANY_FINITE, 0},
    {"dim1", CK_OPTION_DIM, FIELD(dim1), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def rmsnorm_options[] = {
    {"normalized_shape", CK_OPTION_NORMSHAPE, FIELD(norm_shape), false, CK_RANGE_ANY_FINITE,
     FIELD(n_norm)},
    {"eps", CK_OPTION_REAL, FIELD(eps), false, CK_RANGE_POSITIVE, 0},
    OPTIONS_END,
};
static const ck_option_def groupnorm_options[] = {
    {"groups", CK_OPTION_SIZE, FIELD(groups), true, CK_RANGE_ANY_FINITE, 0},
    {"eps", CK_OPTION_REAL, FIELD(eps), false, CK_RANGE_POSITIVE, 0},
    OPTIONS_END,
};
static const ck_option_def convt_options[] = {
    {"filters", CK_OPTION_SIZE, FIELD(filters), true, CK_RANGE_ANY_FINITE, 0},
    {"kernel", CK_OPTION_WINDOW, FIELD(kernel), true, CK_RANGE_ANY_FINITE, 0},
    {"stride", CK_OPTION_WINDOW, FIELD(stride), false, CK_RANGE_ANY_FINITE, 0},
    {"padding", CK_OPTION_PAD, FIELD(pad), false, CK_RANGE_ANY_FINITE, 0},
    {"output_padding", CK_OPTION_WINDOW0, FIELD(out_pad), false, CK_RANGE_ANY_FINITE, 0},
    {"dilation", CK_OPTION_WINDOW, FIELD(dilation), false, CK_RANGE_ANY_FINITE, 0},
    {"bias", CK_OPTION_BOOL, FIELD(bias), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def dropout_options[] = {
    {"rate", CK_OPTION_REAL, FIELD(rate), false, CK_RANGE_UNIT_HALF_OPEN, 0},
    OPTIONS_END,
};
static const ck_option_def noise_options[] = {
    {"stddev", CK_OPTION_REAL, FIELD(stddev), true, CK_RANGE_NON_NEGATIVE, 0},
    OPTIONS_END,
};
static const ck_option_def pool_options[] = {
    {"pool", CK_OPTION_WINDOW, FIELD(kernel), true, CK_RANGE_ANY_FINITE, 0},
    {"stride", CK_OPTION_WINDOW, FIELD(stride), false, CK_RANGE_ANY_FINITE, 0},
    {"padding", CK_OPTION_PAD, FIELD(pad), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};
static const ck_option_def avgpool_options[] = {
    {"pool", CK_OPTION_WINDOW, FIELD(kernel), true, CK_RANGE_ANY_FINITE, 0},
    {"stride", CK_OPTION_WINDOW, FIELD(stride), false, CK_RANGE_ANY_FINITE, 0},
    {"padding", CK_OPTION_PAD, FIELD(pad), false, CK_RANGE_ANY_FINITE, 0},
    {"count_include_pad", CK_OPTION_BOOL, FIELD(count_include_pad), false, CK_RANGE_ANY_FINITE,
     0},
    OPTIONS_END,
};
static const ck_option_def upsample_options[] = {
    {"scale", CK_OPTION_WINDOW, FIELD(scale), true, CK_RANGE_ANY_FINITE, 0},
    {"mode", CK_OPTION_UPMODE, FIELD(mode), false, CK_RANGE_ANY_FINITE, 0},
    {"align_corners", CK_OPTION_BOOL, FIELD(align_corners), false, CK_RANGE_ANY_FINITE, 0},
    OPTIONS_END,
};

static const ck_option_def *const options_by_kind[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = linear_options,     [CK_OP_CONV] = conv_options,
    [CK_OP_RELU] = no_options,           [CK_OP_LEAKY_RELU] = leaky_relu_options,
    [CK_OP_GELU] = gelu_options,         [CK_OP_TANH] = no_options,
    [CK_OP_SIGMOID] = no_options,        [CK_OP_BATCHNORM] = batchnorm_options,
    [CK_OP_LAYERNORM] = layernorm_options, [CK_OP_DROPOUT] = dropout_options,
    [CK_OP_GAUSSIAN_NOISE] = noise_options, [CK_OP_MAXPOOL] = pool_options,
    [CK_OP_AVGPOOL] = avgpool_options,   [CK_OP_UPSAMPLE] = upsample_options,
    [CK_OP_ADD] = no_options,            [CK_OP_CONCAT] = no_options,
    [CK_OP_FLATTEN] = no_options,        [CK_OP_MATMUL] = matmul_options,
    [CK_OP_SOFTMAX] = softmax_options,   [CK_OP_LOG_SOFTMAX] = softmax_options,
    [CK_OP_ATTENTION] = attention_options, [CK_OP_EMBEDDING] = embedding_options,
    [CK_OP_RESHAPE] = reshape_options,   [CK_OP_PERMUTE] = permute_options,
    [CK_OP_RMSNORM] = rmsnorm_options,   [CK_OP_GROUPNORM] = groupnorm_options,
    [CK_OP_MUL] = no_options,            [CK_OP_SILU] = no_options,
    [CK_OP_CONV_TRANSPOSE] = convt_options, [CK_OP_POSITIONAL] = no_options,
};

bool ck_op_takes_many_inputs(ck_op_kind kind)
{
    return kind == CK_OP_ADD || kind == CK_OP_CONCAT;
}

void ck_op_input_range(ck_op_kind kind, int *lo, int *hi)
{
    *lo = *hi = 1;
    if (ck_op_takes_many_inputs(kind)) {
        *lo = 2;
        *hi = CK_MAX_INPUTS;
    } else if (kind == CK_OP_MATMUL) {
        *hi = 2;
    } else if (kind == CK_OP_ATTENTION) {
        *hi = 3;
    } else if (kind == CK_OP_MUL) {
        *lo = *hi = 2;
    }
}

const ck_option_def *ck_op_options(ck_op_kind kind)
{
    return (unsigned)kind < (unsigned)CK_OP_KIND_COUNT && options_by_kind[kind]
               ? options_by_kind[kind]
               : no_options;
}

/* ------------------------------------------------------------------------------------ */
/* Policy and expectation names                                                          */
/* ------------------------------------------------------------------------------------ */

#define NAME_LIST(var, ...)                                                                 \
    static const char *const var##_v[] = {__VA_ARGS__};                                     \
    const ck_name_list ck_##var = {var##_v, COUNT(var##_v)}

NAME_LIST(rng_policy_names, "counter", "stateful", "stash");
NAME_LIST(bn_policy_names, "skip", "update");
NAME_LIST(expect_names, "identical", "close", "mismatch");
NAME_LIST(expect_memory_names, "met", "unmet");
NAME_LIST(dist_names, "uniform", "normal", "tokens");
NAME_LIST(loss_names, "mean", "sum", "mse", "cross_entropy");
NAME_LIST(optimizer_names, "sgd", "momentum", "adam", "adamw");
NAME_LIST(loss_scale_names, "none", "static", "dynamic");
NAME_LIST(autocast_names, "restore", "drop");
NAME_LIST(precision_names, "fp32", "fp16", "bf16");
const ck_dtype ck_precision_dtypes[3] = {CK_F32, CK_F16, CK_BF16};

static const char *name_of(const ck_name_list *l, int i)
{
    return i >= 0 && i < l->n ? l->names[i] : "?";
}

static int parse_name(const ck_name_list *l, const char *s)
{
    return s ? ck_find_name(l->names, l->n, s) : -1;
}

const char *ck_rng_policy_name(ck_rng_policy p)
{
    return name_of(&ck_rng_policy_names, (int)p);
}

bool ck_rng_policy_parse(const char *s, ck_rng_policy *out)
{
    int i = parse_name(&ck_rng_policy_names, s);
    if (i >= 0)
        *out = (ck_rng_policy)i;
    return i >= 0;
}

const char *ck_bn_policy_name(ck_bn_policy p)
{
    return name_of(&ck_bn_policy_names, (int)p);
}

bool ck_bn_policy_parse(const char *s, ck_bn_policy *out)
{
    int i = parse_name(&ck_bn_policy_names, s);
    if (i >= 0)
        *out = (ck_bn_policy)i;
    return i >= 0;
}

const char *ck_expect_name(ck_expect e)
{
    return name_of(&ck_expect_names, (int)e);
}

const char *ck_loss_scale_name(ck_loss_scale_kind k)
{
    return name_of(&ck_loss_scale_names, (int)k);
}

bool ck_loss_scale_parse(const char *s, ck_loss_scale_kind *out)
{
    int i = parse_name(&ck_loss_scale_names, s);
    if (i >= 0)
        *out = (ck_loss_scale_kind)i;
    return i >= 0;
}

const char *ck_autocast_name(ck_autocast_policy p)
{
    return name_of(&ck_autocast_names, (int)p);
}

bool ck_autocast_parse(const char *s, ck_autocast_policy *out)
{
    int i = parse_name(&ck_autocast_names, s);
    if (i >= 0)
        *out = (ck_autocast_policy)i;
    return i >= 0;
}
