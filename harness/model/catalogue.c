/*
 * The names of policies, expectations and settings as a case file spells them
 * (catalogue.h); the ops are op_def.h's rows.
 */
#include "harness/model/catalogue.h"

#include <math.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

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
NAME_LIST(dist_names, "uniform", "normal", "tokens");
NAME_LIST(loss_names, "mean", "sum", "mse", "cross_entropy");
NAME_LIST(optimizer_names, "sgd", "momentum", "adam", "adamw");
NAME_LIST(loss_scale_names, "none", "static", "dynamic");
NAME_LIST(autocast_names, "restore", "drop");
NAME_LIST(precision_names, "fp32", "fp16", "bf16");
const ck_dtype ck_precision_dtypes[3] = {CK_F32, CK_F16, CK_BF16};
NAME_LIST(cast_dtype_names, "float32", "float16", "bfloat16");
const ck_dtype ck_cast_dtypes[3] = {CK_F32, CK_F16, CK_BF16};

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

const char *ck_cast_dtype_name(int dtype)
{
    for (int i = 0; i < ck_cast_dtype_names.n; i++)
        if ((int)ck_cast_dtypes[i] == dtype)
            return ck_cast_dtype_names.names[i];
    return "?";
}
