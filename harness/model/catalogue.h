/*
 * The op catalogue and the names of policies, expectations and settings: what a case file
 * may say, in one place, for the case parser (case.c) and `ckpt-harness list`.
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
typedef enum { CK_EXPECT_IDENTICAL = 0, CK_EXPECT_CLOSE, CK_EXPECT_MISMATCH } ck_expect;
typedef enum { CK_SCALE_NONE = 0, CK_SCALE_STATIC, CK_SCALE_DYNAMIC } ck_loss_scale_kind;
typedef enum { CK_AUTOCAST_RESTORE = 0, CK_AUTOCAST_DROP } ck_autocast_policy;

/* Sizes (filters, units, kernel, stride, dilation, pool, scale, padding) stop here. */
#define CK_SIZE_CAP (1 << 20)

/* ---- the op catalogue ---- */
typedef struct {
    const char *name;    /* as written in a case: "conv3d" */
    ck_op_kind kind;
    int nsp;
    const char *summary; /* one line */
    const char *options; /* "filters (int, required), kernel (int|[ints], required), ..." */
} ck_op_info;

const ck_op_info *ck_op_catalogue(int *count);
const ck_op_info *ck_op_find(const char *name);

/* ---- per-op options: which keys a layer of each kind accepts and where they go ---- */
typedef enum {
    CK_OPTION_SIZE,    /* int64_t field, 1..CK_SIZE_CAP */
    CK_OPTION_WINDOW,  /* int[CK_MAX_SPATIAL] field, int or list of nsp ints, 1..CK_SIZE_CAP */
    CK_OPTION_PADDING, /* "same" | "valid" | int or list of nsp ints, 0..CK_SIZE_CAP */
    CK_OPTION_BOOL,
    CK_OPTION_REAL,    /* double field within `range` */
    /* issue 18 */
    CK_OPTION_DIM,      /* int field: a dim index, -8..7 (negative from the end) */
    CK_OPTION_DIMLIST,  /* int[] field: a list of 1 to 8 dim indices; count at count_offset */
    CK_OPTION_SHAPE,    /* int64_t[] field: a list of 1 to 8 sizes (-1 allowed when `range.lo`
                           is -1); count at count_offset */
    CK_OPTION_NORMSHAPE, /* int64_t[] field: an int or a list of 1 to 7 positive sizes */
    CK_OPTION_PAD,      /* int or list of nsp ints >= 0: explicit padding (pad[], pad_mode) */
    CK_OPTION_WINDOW0,  /* int[CK_MAX_SPATIAL] field, int or list of nsp ints >= 0 */
    CK_OPTION_UPMODE,   /* "nearest" | "linear" | "bilinear" | "trilinear" (by nsp) */
    CK_OPTION_APPROX    /* gelu: "none" | "tanh" */
} ck_option_type;

typedef struct {
    const char *key;   /* NULL ends a list */
    ck_option_type type;
    size_t offset;     /* of the field in ck_op_params */
    bool required;
    ck_real_range range;
    size_t count_offset; /* DIMLIST, SHAPE, NORMSHAPE: the int count field */
} ck_option_def;

/* The options of an op kind, ended by an entry whose key is NULL. */
const ck_option_def *ck_op_options(ck_op_kind kind);
/* add and concat take a list of 2 to 8 inputs; every other op one. */
bool ck_op_takes_many_inputs(ck_op_kind kind);
/* How many inputs a layer of this kind takes: [*lo, *hi] (add, concat: 2 to 8; matmul: 1
 * (with units) or 2; attention: 1 (q = k = v) or 3; mul: 2; every other op 1). */
void ck_op_input_range(ck_op_kind kind, int *lo, int *hi);

/* ---- names as a case file spells them (index = enum value) ---- */
typedef struct {
    const char *const *names;
    int n;
} ck_name_list;

extern const ck_name_list ck_rng_policy_names, ck_bn_policy_names, ck_expect_names,
    ck_expect_memory_names, ck_dist_names, ck_loss_names, ck_optimizer_names,
    ck_loss_scale_names, ck_autocast_names, ck_precision_names;
/* the dtype of each ck_precision_names entry: fp32, fp16, bf16 */
extern const ck_dtype ck_precision_dtypes[3];

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
