/*
 * The names of policies, expectations and settings: what a case file may say besides its
 * ops (those are op_def.h's rows), for the case parser (case.c) and `ckpt-harness list`.
 */
#ifndef CK_CATALOGUE_H
#define CK_CATALOGUE_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/core/ops.h"
#include "harness/core/tensor.h"
#include "harness/io/json_get.h"

typedef enum { CK_DIST_UNIFORM = 0, CK_DIST_NORMAL, CK_DIST_TOKENS } ck_dist;
typedef enum { CK_CKPT_SQRT = 0, CK_CKPT_EVERY, CK_CKPT_SEGMENTS } ck_ckpt_kind;
typedef enum { CK_RNG_COUNTER = 0, CK_RNG_STATEFUL, CK_RNG_STASH } ck_rng_policy;
typedef enum { CK_BN_SKIP = 0, CK_BN_UPDATE } ck_bn_policy;
/* any: every verdict meets it (expect_precision "any": the judgement is reported, not gated) */
typedef enum { CK_EXPECT_IDENTICAL = 0, CK_EXPECT_CLOSE, CK_EXPECT_MISMATCH, CK_EXPECT_ANY } ck_expect;
typedef enum { CK_SCALE_NONE = 0, CK_SCALE_STATIC, CK_SCALE_DYNAMIC } ck_loss_scale_kind;
typedef enum { CK_AUTOCAST_RESTORE = 0, CK_AUTOCAST_DROP } ck_autocast_policy;

/* Sizes (filters, units, kernel, stride, dilation, pool, scale, padding) stop here. */
#define CK_SIZE_CAP (1 << 20)

/* ---- names as a case file spells them (index = enum value) ---- */
typedef struct ck_name_list {
    const char *const *names;
    int n;
} ck_name_list;

extern const ck_name_list ck_rng_policy_names, ck_bn_policy_names, ck_expect_names,
    ck_expect_memory_names, ck_dist_names, ck_loss_names, ck_optimizer_names,
    ck_loss_scale_names, ck_autocast_names, ck_precision_names, ck_init_names;
/* the dtype of each ck_precision_names entry: fp32, fp16, bf16 */
extern const ck_dtype ck_precision_dtypes[3];
/* cast's `to` and `from` (harness/model/ops/pointwise.c): "float32", "float16", "bfloat16",
 * the dtypes of ck_cast_dtypes; ck_cast_dtype_name gives "?" for any other dtype */
extern const ck_name_list ck_cast_dtype_names;
extern const ck_dtype ck_cast_dtypes[3];
const char *ck_cast_dtype_name(int dtype);

const char *ck_rng_policy_name(ck_rng_policy p);
bool ck_rng_policy_parse(const char *s, ck_rng_policy *out);
const char *ck_bn_policy_name(ck_bn_policy p);
bool ck_bn_policy_parse(const char *s, ck_bn_policy *out);
const char *ck_expect_name(ck_expect e);
const char *ck_loss_scale_name(ck_loss_scale_kind k);
bool ck_loss_scale_parse(const char *s, ck_loss_scale_kind *out);
const char *ck_autocast_name(ck_autocast_policy p);
bool ck_autocast_parse(const char *s, ck_autocast_policy *out);

#endif
