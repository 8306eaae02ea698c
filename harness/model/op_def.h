/*
 * An op, defined once: one row per op kind, in its family's definition file
 * (harness/model/ops/<family>.c; the family of a kind is in harness/core/ops.h).
 *
 * A row says everything the model layer knows about an op: how a case spells it, how many
 * inputs it takes, its typed options (the case parser reads them, `ckpt-harness list` and
 * the option tables of cases/README.md are generated from them; the default values are the
 * ones ck_op_params_default sets), its shape rule, its parameters and buffers, what its
 * backward reads, and what it draws from the random stream. ck_op_infer,
 * ck_op_state_specs and ck_op_draw_specs (graph.h) look the row up and call it.
 * CONTRIBUTING.md, "How to add an op", walks through adding one.
 */
#ifndef CK_OP_DEF_H
#define CK_OP_DEF_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/io/json_get.h"
#include "harness/model/catalogue.h"

struct ck_node; /* node.h */

/* ---- the op catalogue ---- */
typedef struct {
    const char *name;    /* as written in a case: "conv3d" */
    ck_op_kind kind;
    int nsp;
    const char *summary; /* one line */
    const char *options; /* "filters (int, required), kernel (int|[ints], required), ..." */
} ck_op_info;


/* ---- per-op options: which keys a layer of each kind accepts and where they go ---- */
typedef enum {
    CK_OPTION_SIZE,    /* int64_t field, 1..CK_SIZE_CAP */
    CK_OPTION_WINDOW,  /* int[CK_MAX_SPATIAL] field, int or list of nsp ints, 1..CK_SIZE_CAP */
    CK_OPTION_PADDING, /* "same" | "valid" | int or list of nsp ints, 0..CK_SIZE_CAP */
    CK_OPTION_BOOL,
    CK_OPTION_REAL,    /* double field within `range` */
    CK_OPTION_DIM,      /* int field: a dim index, -8..7 (negative from the end) */
    CK_OPTION_DIMLIST,  /* int[] field: a list of 1 to 8 dim indices; count at count_offset */
    CK_OPTION_SHAPE,    /* int64_t[] field: a list of 1 to 8 sizes (-1 allowed when `range.lo`
                           is -1); count at count_offset */
    CK_OPTION_NORMSHAPE, /* int64_t[] field: an int or a list of 1 to 7 positive sizes */
    CK_OPTION_PAD,      /* int or list of nsp ints >= 0: explicit padding (pad[], pad_mode) */
    CK_OPTION_WINDOW0,  /* int[CK_MAX_SPATIAL] field, int or list of nsp ints >= 0 */
    CK_OPTION_UPMODE,   /* "nearest" | "linear" | "bilinear" | "trilinear" (by nsp) */
    CK_OPTION_APPROX,   /* gelu: "none" | "tanh" */
    CK_OPTION_INIT,     /* linear/conv: an init scheme by name (ck_init_names), int field */
    CK_OPTION_FLOAT_DTYPE /* cast: "float32" | "float16" | "bfloat16", int field (ck_dtype) */
} ck_option_type;

typedef struct {
    const char *key;   /* NULL ends a list */
    ck_option_type type;
    size_t offset;     /* of the field in ck_op_params */
    bool required;
    ck_real_range range;
    size_t count_offset; /* DIMLIST, SHAPE, NORMSHAPE: the int count field */
    const char *type_text;    /* docs' type column; NULL: the type's own words */
    const char *default_text; /* docs' default column; NULL: the value ck_op_params_default
                                 sets ("required" for a required option) */
} ck_option_def;

/* Every spelling of every op, in kind order ("linear", "conv1d", ...), with its options
 * as one line (ck_op_options_text). */
const ck_op_info *ck_op_catalogue(int *count);
const ck_op_info *ck_op_find(const char *name);
/* The options of an op kind, ended by an entry whose key is NULL. */
const ck_option_def *ck_op_options(ck_op_kind kind);
/* add and concat take a list of up to 8 inputs (add: 1 with a constant operand). */
bool ck_op_takes_many_inputs(ck_op_kind kind);
/* How many inputs a layer of this kind takes: [*lo, *hi] (ck_op_inputs_ok for the counts
 * in between). */
void ck_op_input_range(ck_op_kind kind, int *lo, int *hi);

/* What an op's backward pass reads besides the output gradient: the tensors the engine
 * must keep (or recompute) from its forward. Parameters are always kept and not listed. */
typedef enum {
    CK_BWD_READS_NOTHING = 0,      /* shapes only (add, concat, reshape, avgpool, ...) */
    CK_BWD_READS_INPUTS = 1u << 0, /* the values of every input (x for relu'(x), dW = dy x) */
    CK_BWD_READS_OUTPUT = 1u << 1, /* the values of its output (relu: [y > 0] = [x > 0]) */
    CK_BWD_READS_SAVED = 1u << 2,  /* the node's saved tensor (saved_shape: statistics) */
    CK_BWD_REDRAWS_MASK = 1u << 3  /* its random mask, drawn again from the same stream
                                      (args->rng): nothing is kept for it */
} ck_backward_reads;

/* Where an op's inputs must lie for its values and derivatives to exist: gradient checks
 * draw their inputs there. */
typedef enum {
    CK_DOMAIN_REAL = 0, /* any finite value */
    CK_DOMAIN_POSITIVE  /* > 0 (sqrt, log, a divisor): drawn as 0.5 + |N(0, 1)| */
} ck_input_domain;

typedef struct {
    const char *name;    /* as a case writes it: "conv3d"; NULL ends the list */
    int nsp;             /* spatial dims of this spelling (conv/pool/upsample), else 0 */
    const char *summary; /* one line for `list` */
} ck_op_spelling;

#define CK_OP_MAX_SPELLINGS 3

/* The output shape from the input shapes; may resolve fields of op (padding, dims). The
 * input count and each input's validity are checked before. */
typedef ck_status (*ck_op_infer_fn)(ck_op_params *op, int n_in, const ck_shape *in,
                                    ck_shape *y, ck_error *err);
/* Fills node->params, node->buffers, node->has_saved/saved_shape (all zero on entry). */
typedef void (*ck_op_state_fn)(struct ck_node *node, const ck_shape *in0);
/* Fills node->draw_elems/draw_uniform (zero on entry); node->out_shape is known. */
typedef void (*ck_op_draws_fn)(struct ck_node *node, const ck_shape *in);

typedef struct {
    ck_op_kind kind;
    ck_op_spelling spellings[CK_OP_MAX_SPELLINGS + 1];
    int min_inputs, max_inputs; /* a list of inputs when max_inputs > 1 */
    unsigned inputs_mask;       /* bit n: n inputs allowed; 0: every count in the range */
    const char *inputs_rule;    /* messages and docs: "1 (with units) or 2" (ops with a
                                   choice of input counts), NULL otherwise */
    const ck_option_def *options; /* ended by a NULL key */
    ck_op_infer_fn infer;       /* NULL: the output has the first input's shape */
    ck_op_state_fn state;       /* NULL: no parameters, buffers or saved tensor */
    ck_op_draws_fn draws;       /* NULL: draws nothing */
    unsigned backward_reads;    /* ck_backward_reads flags */
    ck_input_domain input_domain; /* of every input; CK_DOMAIN_REAL unless set */
    bool casts_params;          /* parameters run in the low dtype of an fp16/bf16 run
                                   (harness/precision.md: the weight-like ops), else fp32 */
} ck_op_def;

/* The row of a kind (every kind has one); NULL for an unknown kind. */
const ck_op_def *ck_op_def_of(ck_op_kind kind);
/* The rows of a family, in kind order; *n their count. */
const ck_op_def *ck_op_family_defs(ck_op_family family, int *n);

/* Whether n inputs are allowed for this kind. */
bool ck_op_inputs_ok(ck_op_kind kind, int n);
/* The domain an op's inputs must lie in (CK_DOMAIN_REAL for an unknown kind). */
ck_input_domain ck_op_input_domain(ck_op_kind kind);
/* Whether an op's parameters run in the low dtype of an fp16/bf16 run. */
bool ck_op_casts_params(ck_op_kind kind);

/* The option list as one line for `list`: "units (size, required), bias (bool, default
 * true)", "none" for an op without options. */
void ck_op_options_text(ck_op_kind kind, char *buf, size_t n);
/* The option table of cases/README.md for one op kind, between its markers:
 * "<!-- options: NAME -->\nOptions of `SPELLING`, ...:\n\n| option | type | default |\n
 * ...<!-- end options -->\n" (NAME: the kind's name, ck_op_kind_name); an op without
 * options says so in one line. Returns false when buf is too small. */
bool ck_op_options_markdown(ck_op_kind kind, char *buf, size_t n);

/* The name a case writes for this op ("conv2d"), for messages. */
const char *ck_op_display_name(const ck_op_params *op);

/* ---- building rows (harness/model/ops/<family>.c; their shared rules: op_rules.h) ---- */

#define CK_OPT_FIELD(f) offsetof(ck_op_params, f)
/* An option row: key, CK_OPTION_ type suffix, ck_op_params field, then any of .required,
 * .range (REAL options always give one), .count_offset, .type_text (docs' type column, when the type's own words do not
 * say enough) and .default_text (a default that is a rule, not a value). */
#define CK_OPT(k, t, f, ...)                                                                \
    {.key = (k), .type = CK_OPTION_##t, .offset = CK_OPT_FIELD(f), __VA_ARGS__}
#define CK_OPTIONS_END {.key = NULL}

/* The rows of each family (harness/model/ops/<family>.c). */
#define CK_OP_FAMILY_ROWS(fam)                                                              \
    extern const ck_op_def ck_op_defs_##fam[];                                              \
    extern const int ck_op_defs_##fam##_count;
CK_OP_FAMILY_ROWS(linear)
CK_OP_FAMILY_ROWS(conv)
CK_OP_FAMILY_ROWS(pool)
CK_OP_FAMILY_ROWS(upsample)
CK_OP_FAMILY_ROWS(pointwise)
CK_OP_FAMILY_ROWS(norm)
CK_OP_FAMILY_ROWS(random)
CK_OP_FAMILY_ROWS(attention)
CK_OP_FAMILY_ROWS(shape)
CK_OP_FAMILY_ROWS(broadcast)
#undef CK_OP_FAMILY_ROWS

#define CK_OP_ROWS_COUNT(rows) const int rows##_count = (int)(sizeof rows / sizeof rows[0])

#endif
