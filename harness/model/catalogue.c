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

#define INIT_OPT                                                                             \
    "init (\"torch_default\", \"kaiming_normal\", \"kaiming_uniform\", \"xavier_uniform\", "  \
    "\"xavier_normal\" or \"zeros\"; default \"torch_default\")"
#define WINDOW_OPTS_CONV                                                                     \
    "filters (int, required), kernel (int or [ints], required), stride (int or [ints], "    \
    "default 1), padding (\"same\", \"valid\", int or [ints]; default \"valid\"), dilation " \
    "(int or [ints], default 1), bias (bool, default true), " INIT_OPT
#define WINDOW_OPTS_POOL "pool (int or [ints], required), stride (int or [ints], default pool)"

static const ck_op_info op_catalogue[] = {
    {"linear", CK_OP_LINEAR, 0, "y = x W^T + b over the last dimension",
     "units (int, required), bias (bool, default true), " INIT_OPT},
    {"conv1d", CK_OP_CONV, 1, "1-D convolution (cross-correlation) over (N, C, L)",
     WINDOW_OPTS_CONV},
    {"conv2d", CK_OP_CONV, 2, "2-D convolution (cross-correlation) over (N, C, H, W)",
     WINDOW_OPTS_CONV},
    {"conv3d", CK_OP_CONV, 3, "3-D convolution (cross-correlation) over (N, C, D, H, W)",
     WINDOW_OPTS_CONV},
    {"relu", CK_OP_RELU, 0, "max(x, 0)", "none"},
    {"leaky_relu", CK_OP_LEAKY_RELU, 0, "x if x > 0 else slope * x",
     "slope (number, default 0.01)"},
    {"gelu", CK_OP_GELU, 0, "exact GELU: 0.5 x (1 + erf(x / sqrt 2))", "none"},
    {"tanh", CK_OP_TANH, 0, "tanh(x)", "none"},
    {"sigmoid", CK_OP_SIGMOID, 0, "1 / (1 + exp(-x))", "none"},
    {"batchnorm", CK_OP_BATCHNORM, 0,
     "per-channel normalisation over N and spatial dims, running statistics",
     "momentum (number in [0, 1], default 0.1), eps (number > 0, default 1e-5), eval (bool, "
     "default false)"},
    {"layernorm", CK_OP_LAYERNORM, 0, "per-sample normalisation over all non-batch dims, affine",
     "eps (number > 0, default 1e-5)"},
    {"dropout", CK_OP_DROPOUT, 0, "inverted dropout: zero with probability rate, scale 1/(1-rate)",
     "rate (number in [0, 1), default 0.5)"},
    {"gaussian_noise", CK_OP_GAUSSIAN_NOISE, 0, "x + stddev * N(0, 1)",
     "stddev (number >= 0, required)"},
    {"maxpool1d", CK_OP_MAXPOOL, 1, "1-D max pooling, no padding", WINDOW_OPTS_POOL},
    {"maxpool2d", CK_OP_MAXPOOL, 2, "2-D max pooling, no padding", WINDOW_OPTS_POOL},
    {"maxpool3d", CK_OP_MAXPOOL, 3, "3-D max pooling, no padding", WINDOW_OPTS_POOL},
    {"avgpool1d", CK_OP_AVGPOOL, 1, "1-D average pooling, no padding", WINDOW_OPTS_POOL},
    {"avgpool2d", CK_OP_AVGPOOL, 2, "2-D average pooling, no padding", WINDOW_OPTS_POOL},
    {"avgpool3d", CK_OP_AVGPOOL, 3, "3-D average pooling, no padding", WINDOW_OPTS_POOL},
    {"upsample1d", CK_OP_UPSAMPLE, 1, "1-D nearest-neighbour upsampling by an integer scale",
     "scale (int or [ints], required)"},
    {"upsample2d", CK_OP_UPSAMPLE, 2, "2-D nearest-neighbour upsampling by an integer scale",
     "scale (int or [ints], required)"},
    {"upsample3d", CK_OP_UPSAMPLE, 3, "3-D nearest-neighbour upsampling by an integer scale",
     "scale (int or [ints], required)"},
    {"add", CK_OP_ADD, 0, "element-wise sum of 2 to 8 inputs of one shape",
     "inputs (list of 2 to 8 layer names, required)"},
    {"concat", CK_OP_CONCAT, 0, "join 2 to 8 inputs along dim 1 (channels)",
     "inputs (list of 2 to 8 layer names, required)"},
    {"flatten", CK_OP_FLATTEN, 0, "(N, ...) -> (N, product of the rest)", "none"},
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
#define OPTIONS_END {NULL, CK_OPTION_BOOL, 0, false, CK_RANGE_ANY_FINITE, NULL}

static const ck_option_def no_options[] = {OPTIONS_END};
static const ck_option_def linear_options[] = {
    {"units", CK_OPTION_SIZE, FIELD(units), true, CK_RANGE_ANY_FINITE, NULL},
    {"bias", CK_OPTION_BOOL, FIELD(bias), false, CK_RANGE_ANY_FINITE, NULL},
    {"init", CK_OPTION_CHOICE, FIELD(init), false, CK_RANGE_ANY_FINITE, &ck_init_names},
    OPTIONS_END,
};
static const ck_option_def conv_options[] = {
    {"filters", CK_OPTION_SIZE, FIELD(filters), true, CK_RANGE_ANY_FINITE, NULL},
    {"kernel", CK_OPTION_WINDOW, FIELD(kernel), true, CK_RANGE_ANY_FINITE, NULL},
    {"stride", CK_OPTION_WINDOW, FIELD(stride), false, CK_RANGE_ANY_FINITE, NULL},
    {"padding", CK_OPTION_PADDING, FIELD(pad), false, CK_RANGE_ANY_FINITE, NULL},
    {"dilation", CK_OPTION_WINDOW, FIELD(dilation), false, CK_RANGE_ANY_FINITE, NULL},
    {"bias", CK_OPTION_BOOL, FIELD(bias), false, CK_RANGE_ANY_FINITE, NULL},
    {"init", CK_OPTION_CHOICE, FIELD(init), false, CK_RANGE_ANY_FINITE, &ck_init_names},
    OPTIONS_END,
};
static const ck_option_def leaky_relu_options[] = {
    {"slope", CK_OPTION_REAL, FIELD(slope), false, CK_RANGE_ANY_FINITE, NULL},
    OPTIONS_END,
};
static const ck_option_def batchnorm_options[] = {
    {"momentum", CK_OPTION_REAL, FIELD(momentum), false, CK_RANGE_UNIT_CLOSED, NULL},
    {"eps", CK_OPTION_REAL, FIELD(eps), false, CK_RANGE_POSITIVE, NULL},
    {"eval", CK_OPTION_BOOL, FIELD(eval), false, CK_RANGE_ANY_FINITE, NULL},
    OPTIONS_END,
};
static const ck_option_def layernorm_options[] = {
    {"eps", CK_OPTION_REAL, FIELD(eps), false, CK_RANGE_POSITIVE, NULL},
    OPTIONS_END,
};
static const ck_option_def dropout_options[] = {
    {"rate", CK_OPTION_REAL, FIELD(rate), false, CK_RANGE_UNIT_HALF_OPEN, NULL},
    OPTIONS_END,
};
static const ck_option_def noise_options[] = {
    {"stddev", CK_OPTION_REAL, FIELD(stddev), true, CK_RANGE_NON_NEGATIVE, NULL},
    OPTIONS_END,
};
static const ck_option_def pool_options[] = {
    {"pool", CK_OPTION_WINDOW, FIELD(kernel), true, CK_RANGE_ANY_FINITE, NULL},
    {"stride", CK_OPTION_WINDOW, FIELD(stride), false, CK_RANGE_ANY_FINITE, NULL},
    OPTIONS_END,
};
static const ck_option_def upsample_options[] = {
    {"scale", CK_OPTION_WINDOW, FIELD(scale), true, CK_RANGE_ANY_FINITE, NULL},
    OPTIONS_END,
};

static const ck_option_def *const options_by_kind[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = linear_options,     [CK_OP_CONV] = conv_options,
    [CK_OP_RELU] = no_options,           [CK_OP_LEAKY_RELU] = leaky_relu_options,
    [CK_OP_GELU] = no_options,           [CK_OP_TANH] = no_options,
    [CK_OP_SIGMOID] = no_options,        [CK_OP_BATCHNORM] = batchnorm_options,
    [CK_OP_LAYERNORM] = layernorm_options, [CK_OP_DROPOUT] = dropout_options,
    [CK_OP_GAUSSIAN_NOISE] = noise_options, [CK_OP_MAXPOOL] = pool_options,
    [CK_OP_AVGPOOL] = pool_options,      [CK_OP_UPSAMPLE] = upsample_options,
    [CK_OP_ADD] = no_options,            [CK_OP_CONCAT] = no_options,
    [CK_OP_FLATTEN] = no_options,
};

bool ck_op_takes_many_inputs(ck_op_kind kind)
{
    return kind == CK_OP_ADD || kind == CK_OP_CONCAT;
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
NAME_LIST(init_names, "torch_default", "kaiming_normal", "kaiming_uniform", "xavier_uniform",
          "xavier_normal", "zeros");
NAME_LIST(expect_names, "identical", "close", "mismatch", "any");
NAME_LIST(expect_memory_names, "met", "unmet");
NAME_LIST(dist_names, "uniform", "normal");
NAME_LIST(loss_names, "mean", "sum", "mse", "cross_entropy");
NAME_LIST(optimizer_names, "sgd", "momentum", "adam");
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
