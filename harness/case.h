/*
 * A model case: the parsed, validated contents of a case file (format in cases/README.md).
 *
 * ck_case_parse checks syntax, types, ranges, names and references and fills this
 * struct; shape checks happen in ck_graph_build (graph.h). Every error is one line that
 * starts with the file and the JSON path, e.g.
 *   cases/x.json: layers[3].kernel: must be a positive integer, got -1
 */
#ifndef CK_CASE_H
#define CK_CASE_H

#include "ops.h"
#include "status.h"
#include "tensor.h"

typedef enum { CK_DIST_UNIFORM = 0, CK_DIST_NORMAL } ck_dist;
typedef enum { CK_CKPT_SQRT = 0, CK_CKPT_EVERY, CK_CKPT_SEGMENTS } ck_ckpt_kind;
typedef enum { CK_RNG_COUNTER = 0, CK_RNG_STATEFUL, CK_RNG_STASH } ck_rng_policy;
typedef enum { CK_BN_SKIP = 0, CK_BN_UPDATE } ck_bn_policy;
typedef enum { CK_EXPECT_IDENTICAL = 0, CK_EXPECT_CLOSE, CK_EXPECT_MISMATCH } ck_expect;

typedef struct {
    char *name;          /* unique within the case */
    char *op_name;       /* as written: "conv3d", "maxpool2d", ... */
    ck_op_params op;     /* options parsed; padding not yet resolved */
    int n_in;
    int in[CK_MAX_INPUTS]; /* layer indices, all < this layer's; -1 = the model input */
} ck_layer_spec;

typedef struct {
    char *path; /* the file it came from (for messages) */
    char *name;
    char *description; /* may be NULL */
    uint64_t seed;     /* default 0 */

    ck_shape input_shape; /* (N, ...) */
    ck_dist input_dist;   /* default uniform */

    int n_layers;
    ck_layer_spec *layers;

    ck_loss_kind loss; /* default mean */

    ck_ckpt_kind ckpt_kind; /* default sqrt */
    int ckpt_every;         /* CK_CKPT_EVERY */
    int n_segments;         /* CK_CKPT_SEGMENTS */
    int (*segments)[2];     /* inclusive [first, last] layer indices, in order */

    int steps; /* default 1 */
    ck_optimizer optimizer; /* default sgd, lr 0.01 */

    ck_rng_policy rng;     /* default counter */
    ck_bn_policy bn;       /* default skip */

    double rtol, atol;     /* default 1.3e-6, 1e-5 (torch fp32) */
    bool has_min_memory_saving;
    double min_memory_saving; /* fraction in [0, 1) */

    ck_expect expect;          /* default close */
    bool expect_memory_met;    /* default true; false for canaries of useless checkpointing */
} ck_case;

/* Parses text (len bytes, need not be NUL-terminated). `path` is used in messages. */
ck_status ck_case_parse(const char *text, size_t len, const char *path, ck_case *out,
                        ck_error *err);
/* Reads and parses a file. */
ck_status ck_case_load(const char *path, ck_case *out, ck_error *err);
void ck_case_free(ck_case *c);

const char *ck_rng_policy_name(ck_rng_policy p);
bool ck_rng_policy_parse(const char *s, ck_rng_policy *out);
const char *ck_bn_policy_name(ck_bn_policy p);
bool ck_bn_policy_parse(const char *s, ck_bn_policy *out);
const char *ck_expect_name(ck_expect e);

/* ---- the op catalogue (for the parser and `ckpt-harness list`) ---- */
typedef struct {
    const char *name;    /* as written in a case: "conv3d" */
    ck_op_kind kind;
    int nsp;
    const char *summary; /* one line */
    const char *options; /* "filters (int, required), kernel (int|[ints], required), ..." */
} ck_op_info;

const ck_op_info *ck_op_catalogue(int *count);
const ck_op_info *ck_op_find(const char *name);

#endif
